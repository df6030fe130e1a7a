//! The conformance helper (`common::conformance`, issue 41 item 0) on the binary model:
//! p-, W- and joint mode under constant-step GD, p-mode with a `[direction]` section,
//! joint mode under AdamW with minibatches; and the gradient check's ability to fail.
//! (The K-class model's caller is in tests/multiclass.rs, the in-sequence prompt's in
//! tests/prompt.rs.)

mod common;

use common::conformance::{Checks, conform, sized};
use tokensel::prelude::Mode;

#[test]
fn binary_p_mode_conforms() {
    conform(&sized(Mode::P), Checks::all());
}

#[test]
fn binary_w_mode_conforms() {
    conform(&sized(Mode::W), Checks::all());
}

#[test]
fn binary_joint_mode_conforms() {
    conform(&sized(Mode::Joint), Checks::all());
}

/// The gradient check can fail: the trainer's gradient scaled by 1 + 1e-12 leaves some
/// direction's |g . v - R| above its bound (bounds 1e-29 to 1e-21 here, the change
/// 1e-12 |g . v| >= 4e-18).
#[test]
fn a_perturbed_gradient_fails_the_bound() {
    for mode in [Mode::P, Mode::W] {
        let cfg = sized(mode);
        let data = tokensel::prelude::Dataset::generate(&cfg);
        let exact = common::conformance::gradient_errors(&cfg, &data, 1.0);
        let worst = exact.iter().map(|e| e.err / e.bound).fold(0.0, f64::max);
        eprintln!("{mode:?}: largest |g.v - R| / bound {worst:e}");
        for e in &exact {
            eprintln!(
                "  {}: err {:e} bound {:e} |g.v| {:e}",
                e.what, e.err, e.bound, e.grad
            );
        }
        assert!(exact.iter().all(|e| e.err <= e.bound));
        let scaled = common::conformance::gradient_errors(&cfg, &data, 1.0 + 1e-12);
        assert!(
            scaled.iter().any(|e| e.err > e.bound),
            "{mode:?}: a gradient scaled by 1 + 1e-12 passes"
        );
    }
}

/// The binary model with a `[direction]` section (theorem's pattern): the direction
/// record's reals among the balls' and its leaves among diff's.
#[test]
fn binary_with_direction_conforms() {
    use tokensel::prelude::{Direction, PatternSpec};
    let mut cfg = sized(Mode::P);
    cfg.direction = Some(Direction {
        pattern: PatternSpec::Named("theorem".into()),
    });
    cfg.validate().unwrap();
    conform(&cfg, Checks::all());
}

/// The binary model in joint mode under AdamW with the linear schedule, clipping and
/// minibatches of 5: Adam's moments in the resumed state, the batch order on 2 threads.
#[test]
fn binary_adamw_minibatch_conforms() {
    use tokensel::prelude::{Optimizer, OptimizerKind, Schedule};
    let mut cfg = sized(Mode::Joint);
    cfg.step_size = 0.01;
    cfg.optimizer = Optimizer {
        kind: OptimizerKind::Adamw,
        eps: 1e-8,
        beta1: Some(0.9),
        beta2: Some(0.999),
        weight_decay: Some(0.01),
        schedule: Schedule::Linear,
        clip_norm: Some(0.5),
        batch: Some(5),
    };
    cfg.validate().unwrap();
    conform(&cfg, Checks::all());
}
