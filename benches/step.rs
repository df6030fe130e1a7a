//! One gradient step (forward, backward, update) of the f64 trainer and of the MPFR
//! twin at several precisions, on the paper's balanced setting.
//! Run: `cargo bench --bench step`. The cost table of the README comes from
//! `cargo run --release -- cost` (same measurement, printed as a ratio table).

use criterion::{Criterion, criterion_group, criterion_main};
use tokensel::config::{Config, Formulation};
use tokensel::data::Dataset;
use tokensel::train::Trainer;
use tokensel::twin::Arith;
use tokensel::twin::train::TwinTrainer;

fn step(c: &mut Criterion) {
    let cfg = Config::default();
    let data = Dataset::generate(&cfg);
    let mut group = c.benchmark_group("step/balanced");
    group.sample_size(10);
    let mut f64_trainer = Trainer::new(&cfg, &data);
    group.bench_function("f64", |b| {
        b.iter(|| {
            f64_trainer.forward_backward().unwrap();
            f64_trainer.update().unwrap();
        })
    });
    for prec in [53u32, 64, 128, 256, 512, 1024] {
        let ar = if prec == 53 {
            Arith::f64_predictor()
        } else {
            Arith::truth(prec).unwrap()
        };
        let mut twin = TwinTrainer::new(&cfg, &data, ar, Formulation::Stable);
        let name = if prec == 53 {
            "mpfr-f64-predictor".to_string()
        } else {
            format!("mpfr-{prec}")
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                twin.forward_backward().unwrap();
                twin.update();
            })
        });
    }
    group.finish();
}

/// How the f64 and the 256-bit twin step grow with n, T and d (small sizes).
fn growth(c: &mut Criterion) {
    let mut group = c.benchmark_group("growth");
    group.sample_size(10);
    let base = Config::default();
    let variants = [
        ("n10_T8_d500", 10, 8, 500),
        ("n40_T8_d500", 40, 8, 500),
        ("n10_T16_d500", 10, 16, 500),
        ("n10_T8_d2000", 10, 8, 2000),
    ];
    for (name, n, t, d) in variants {
        let mut cfg = Config {
            n_train: n,
            n_test: 10,
            d,
            ..base.clone()
        };
        cfg.layout.tokens = t;
        cfg.layout.irrelevant = t - 3;
        let data = Dataset::generate(&cfg);
        let mut f = Trainer::new(&cfg, &data);
        group.bench_function(format!("f64/{name}"), |b| {
            b.iter(|| {
                f.forward_backward().unwrap();
                f.update().unwrap();
            })
        });
        let mut twin =
            TwinTrainer::new(&cfg, &data, Arith::truth(256).unwrap(), Formulation::Stable);
        group.bench_function(format!("mpfr-256/{name}"), |b| {
            b.iter(|| {
                twin.forward_backward().unwrap();
                twin.update();
            })
        });
    }
    group.finish();
}

/// A whole short run (200 steps, checkpoints and test evaluation included).
fn short_run(c: &mut Criterion) {
    let cfg = Config {
        steps: 200,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let mut group = c.benchmark_group("run");
    group.sample_size(10);
    group.bench_function("f64/balanced_200_steps", |b| {
        b.iter(|| Trainer::run(&cfg, &data, &mut |_| {}).unwrap())
    });
    group.finish();
}

criterion_group!(benches, step, growth, short_run);
criterion_main!(benches);
