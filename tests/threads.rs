//! Determinism under threads (issue 6, issue 17 item 4): every kernel of the training
//! path splits work over threads only along independent outputs and sums in a fixed
//! order, so 1, 2 and 4 threads give byte-identical trajectories. The runs here are
//! sized above EVERY parallel threshold of the training path (`linalg::worth_parallel`),
//! which the test asserts, in f64 and in MPFR (the 128-bit truth and the 53-bit
//! predictor), direct and span, p-, W- and joint mode.

use tokensel::prelude::kernels::worth_parallel;
use tokensel::prelude::{Arith, Config, Dataset, F64, Formulation, Method, Mode, Mpfr, Trainer};

mod common;

/// A run of `n` samples of T = 8 tokens in dimension `d`, `n_test` test samples, 3 steps
/// (checkpoints at 0, 1, 2, 3, each evaluating the test set), in `mode`: p-mode with
/// W = I and p(0) = 0 (the paper's first version), W- and joint mode from a Gaussian
/// p(0) and a Kaiming-uniform W(0).
fn config(n: usize, d: usize, n_test: usize, mode: Mode, method: Method) -> Config {
    let cfg = Config {
        d,
        n_train: n,
        n_test,
        steps: 3,
        step_size: 0.01,
        mu_norm: 4.0,
        method,
        ..Config::default()
    };
    match mode {
        Mode::P => Config { mode, ..cfg },
        _ => common::with_init(cfg, mode, 0.5, true),
    }
}

/// Every parallel threshold of the training path, at `cfg`'s sizes, is crossed in `ar`
/// on 2 threads: the per-sample loop (n T 16 ops), the direct scores (n T d), X^T c and
/// the span step's rebuilt dL/dq (n T d), the naive per-sample gradients (4 n T d), the
/// W update, W dL/dq and q = W^T p (d^2 each), the head values and the test set
/// (n_test T d), the span precompute (Gram matrices: (r+1)^2 d / 2 as rows x per-row
/// cost; the basis W(0) x_j: r d^2; W-mode's (X q(0), |p|^2 K): r (d + r)), the span
/// scores and joint updates (r^2), and the span's q and p rebuilds (r d).
fn assert_every_threshold_crossed<A: Arith>(ar: &A, cfg: &Config) {
    let (n, t, d, n_test) = (cfg.n_train, cfg.layout.tokens, cfg.d, cfg.n_test);
    let r = n * t;
    let sizes = [
        ("per-sample loop", n * t * 16),
        ("scores X q", n * t * d),
        ("X^T c", r * d),
        ("naive per-sample gradients", n * 4 * t * d),
        ("W update, W g, W^T p", d * d),
        ("head values and test set", n_test * t * d),
        ("Gram precompute", (r + 1) * ((r + 1) * d / 2)),
        ("basis W(0) x_j", r * d * d),
        ("W-mode span rows", r * (d + r)),
        ("span scores and joint updates", r * r),
        ("span rebuilds of p and q", r * d),
    ];
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap()
        .install(|| {
            for (what, ops) in sizes {
                assert!(
                    worth_parallel(ar, ops),
                    "{what}: {ops} ops stay below the parallel threshold of {:?}",
                    ar.kind()
                );
            }
        });
}

/// The whole trajectory (JSON: every recorded number and the config) of `cfg` on
/// `threads` threads.
fn trajectory<A: Arith>(ar: A, cfg: &Config, data: &Dataset, threads: usize) -> String {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(|| {
            let mut tr = Trainer::new(cfg, data, ar, cfg.formulation).unwrap();
            assert_eq!(tr.method(), cfg.method);
            tr.record(None, &mut |_, _| Ok(())).unwrap().to_json()
        })
}

/// Byte-identical trajectories on 1, 2 and 4 threads for every mode and method.
fn identical_for_any_thread_count<A: Arith>(ar: A, n: usize, d: usize, n_test: usize) {
    for method in [Method::Direct, Method::Span] {
        for mode in [Mode::P, Mode::W, Mode::Joint] {
            let cfg = config(n, d, n_test, mode, method);
            assert_every_threshold_crossed(&ar, &cfg);
            let data = Dataset::generate(&cfg);
            let one = trajectory(ar, &cfg, &data, 1);
            for threads in [2, 4] {
                assert!(
                    one == trajectory(ar, &cfg, &data, threads),
                    "{:?} {method:?} {mode:?}: {threads} threads differ from 1",
                    ar.kind()
                );
            }
        }
    }
}

/// f64 at n = 512, T = 8, d = 256, 64 test samples: n T 16 = 2^16 (the per-sample loop's
/// threshold, the largest) and d^2 = 2^16 (the W update's); the span step's Gram matrices
/// are 4097 x 4097. Catches any reduction whose order follows the thread split (a
/// rayon `sum`/`reduce` of floats, per-thread partial sums, a column split of X^T c
/// that changes the fma order), in any kernel of the training path.
#[test]
fn f64_trajectories_are_byte_identical_on_1_2_4_threads() {
    identical_for_any_thread_count(F64, 512, 256, 64);
    // the naive formulation's per-sample gradients (direct step only)
    let cfg = Config {
        formulation: Formulation::Naive,
        ..config(512, 256, 64, Mode::P, Method::Direct)
    };
    let data = Dataset::generate(&cfg);
    let one = trajectory(F64, &cfg, &data, 1);
    assert!(one == trajectory(F64, &cfg, &data, 2));
    assert!(one == trajectory(F64, &cfg, &data, 4));
}

/// MPFR (operations weighted 64 in the thresholds): n = 16, T = 8, d = 64, 8 test
/// samples cross every threshold; the 128-bit truth (exact Gram matrices, rounded once)
/// and the 53-bit predictor (the f64 kernels' order). Catches the same faults as the
/// f64 test in the MPFR kernels and the exact Gram matrices.
#[test]
fn mpfr_trajectories_are_byte_identical_on_1_2_4_threads() {
    identical_for_any_thread_count(Mpfr::truth(128).unwrap(), 16, 64, 8);
    identical_for_any_thread_count(Mpfr::predictor(), 16, 64, 8);
}
