//! One gradient step (forward, backward, update) of the one trainer in each arithmetic
//! and method. Run: `cargo bench --bench step`. The README's cost table comes from
//! `cargo run --release -- cost` (the same measurement, printed as a ratio table; the
//! K-class groups: `cost --classes 2,4,10`).

use criterion::{
    BenchmarkGroup, Criterion, criterion_group, criterion_main, measurement::WallTime,
};
use tokensel::prelude::experiments::cost::with_classes;
use tokensel::prelude::{
    Arith, Ball, Config, Dataset, F32, F64, Formulation, Method, Mpfr, Preset, Trainer,
};

/// Bench one step of `ar` in `method` on `cfg` under `name`.
fn bench_step<A: Arith>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    cfg: &Config,
    data: &Dataset,
    ar: A,
    method: Method,
) {
    let mut tr = Trainer::with_method(cfg, data, ar, cfg.formulation, method).unwrap();
    group.bench_function(name, |b| {
        b.iter(|| {
            tr.forward_backward().unwrap();
            tr.update().unwrap();
        })
    });
}

/// The default (balanced) setting, one bench per row kind of `tokensel cost`'s table:
/// f64, f32 and the predictor, direct and span; f64 and f32 naive (direct); MPFR direct
/// at 256 bits and span at `cost`'s default precisions; the ball arithmetic against the
/// MPFR twin at the same precisions (span).
fn step(c: &mut Criterion) {
    let cfg = Config::default();
    let data = Dataset::generate(&cfg);
    let mut group = c.benchmark_group("step/balanced");
    group.sample_size(10);
    for method in [Method::Direct, Method::Span] {
        let m = method.name();
        bench_step(&mut group, &format!("f64/{m}"), &cfg, &data, F64, method);
        bench_step(&mut group, &format!("f32/{m}"), &cfg, &data, F32, method);
        bench_step(
            &mut group,
            &format!("predictor/{m}"),
            &cfg,
            &data,
            Mpfr::predictor(),
            method,
        );
    }
    // the naive softmax gradient (`cost`'s naive rows: direct step only)
    let naive = Config {
        formulation: Formulation::Naive,
        ..cfg.clone()
    };
    let direct = Method::Direct;
    bench_step(&mut group, "f64/direct-naive", &naive, &data, F64, direct);
    bench_step(&mut group, "f32/direct-naive", &naive, &data, F32, direct);
    // the twin's direct step at one twin precision (`cost`'s MPFR direct rows)
    let ar = Mpfr::truth(256).unwrap();
    bench_step(&mut group, "mpfr-256/direct", &cfg, &data, ar, direct);
    for prec in [64u32, 128, 256, 512, 1024] {
        let ar = Mpfr::truth(prec).unwrap();
        bench_step(
            &mut group,
            &format!("mpfr-{prec}/span"),
            &cfg,
            &data,
            ar,
            Method::Span,
        );
        if prec <= 256 {
            let ar = Ball::new(prec).unwrap();
            let name = format!("ball-{prec}/span");
            bench_step(&mut group, &name, &cfg, &data, ar, Method::Span);
        }
    }
    group.finish();
}

/// The K-class model (SPEC section 14) at K = 2, 4, 10 on the balanced sizes, T grown
/// by K - 2 weakly relevant tokens (one per other class: T = K + 6), against the binary
/// model at the same T (irrelevant tokens added): f64 direct and span, the MPFR twin at
/// 256 bits (span). Ten test samples (the step does not touch them; the set-up's head
/// values would).
fn multiclass(c: &mut Criterion) {
    let base = Config {
        n_test: 10,
        ..Config::default()
    };
    let mut group = c.benchmark_group("step/multiclass");
    group.sample_size(10);
    for k in [2usize, 4, 10] {
        let kcfg = with_classes(&base, k);
        let t = kcfg.layout.tokens;
        let mut bcfg = base.clone();
        bcfg.layout.irrelevant += t - bcfg.layout.tokens;
        bcfg.layout.tokens = t;
        for (model, cfg) in [(format!("K{k}"), &kcfg), (format!("binary-K{k}"), &bcfg)] {
            cfg.validate().unwrap();
            let data = Dataset::generate(cfg);
            for method in [Method::Direct, Method::Span] {
                let name = format!("{model}-T{t}/f64/{}", method.name());
                bench_step(&mut group, &name, cfg, &data, F64, method);
            }
            let ar = Mpfr::truth(256).unwrap();
            let name = format!("{model}-T{t}/mpfr-256/span");
            bench_step(&mut group, &name, cfg, &data, ar, Method::Span);
        }
    }
    group.finish();
}

/// Joint mode (official-final, d = 2000): direct vs span, f64.
fn joint(c: &mut Criterion) {
    let cfg = Config {
        n_test: 10,
        ..Preset::OfficialFinal.config()
    };
    let data = Dataset::generate(&cfg);
    let mut group = c.benchmark_group("step/joint-d2000");
    group.sample_size(10);
    for method in [Method::Direct, Method::Span] {
        bench_step(
            &mut group,
            &format!("f64/{}", method.name()),
            &cfg,
            &data,
            F64,
            method,
        );
    }
    group.finish();
}

/// The span step's cost does not grow with d (n = 20, T = 8).
fn span_in_d(c: &mut Criterion) {
    let mut group = c.benchmark_group("step/span-by-d");
    group.sample_size(10);
    for d in [1_000usize, 10_000, 100_000] {
        let cfg = Config {
            d,
            n_test: 10,
            ..Config::default()
        };
        let data = Dataset::generate(&cfg);
        bench_step(
            &mut group,
            &format!("f64/d{d}"),
            &cfg,
            &data,
            F64,
            Method::Span,
        );
    }
    group.finish();
}

/// A whole short run (200 steps, checkpoints and test evaluation included).
fn short_run(c: &mut Criterion) {
    let mut group = c.benchmark_group("run");
    group.sample_size(10);
    for method in [Method::Direct, Method::Span] {
        let cfg = Config {
            steps: 200,
            method,
            ..Config::default()
        };
        let data = Dataset::generate(&cfg);
        group.bench_function(format!("f64/balanced_200_steps/{}", method.name()), |b| {
            b.iter(|| Trainer::run(&cfg, &data, F64, &mut |_| {}).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, step, multiclass, joint, span_in_d, short_run);
criterion_main!(benches);
