//! Determinism under threads (issue 6): the f64 trainer processes samples in parallel
//! but sums in sample order, so 1, 2 and 5 threads give bit-identical trajectories, in
//! the direct and in the span step.

use tokensel::arith::F64;
use tokensel::config::{Config, Method};
use tokensel::data::Dataset;
use tokensel::train::Trainer;

#[test]
fn trajectories_are_bit_identical_for_any_thread_count() {
    for method in [Method::Direct, Method::Span] {
        bit_identical_for_any_thread_count(method);
    }
}

fn bit_identical_for_any_thread_count(method: Method) {
    let cfg = Config {
        d: 300,
        n_train: 16,
        n_test: 50,
        steps: 300,
        step_size: 0.05,
        method,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let digest = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| {
                Trainer::run(&cfg, &data, F64, &mut |_| {})
                    .unwrap()
                    .digest()
            })
    };
    let one = digest(1);
    assert_eq!(one, digest(2), "{method:?}");
    assert_eq!(one, digest(5), "{method:?}");
    assert_eq!(one, digest(1), "repeatable");
}
