//! One gradient step (forward, backward, update) of the f64 trainer and of the MPFR
//! twin at several precisions, on the paper's balanced setting.
//! Run: `cargo bench --bench step`.

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
    for prec in [53u32, 128, 256, 512] {
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

criterion_group!(benches, step);
criterion_main!(benches);
