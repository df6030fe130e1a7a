//! How far the in-sequence prompt (`[model] prompt = "in-sequence"`, the rebuttal's
//! bridge A''1) moves the paper's model: (a) Lemma A.6's W <-> p identity, (b) token
//! selection in W-mode (p fixed, W trained: the fine-tuning protocol's case), each with
//! the separate prompt beside it on the same data and seeds. proofs-notes/prompt.md
//! records the numbers this printed.
//!
//! ```text
//! cargo run --release --example prompt_measure -- [d=2000] [seeds=0,1,2,3,4]
//!     [a6_steps=1000] [sel_steps=3000] [sel_alpha=1e-3]
//! ```
//!
//! (a) runs `analysis::lemma_a6` (a W-mode run from a Gaussian p(0) and a Kaiming W(0),
//! and its p-mode twin: W = I, p(0) = q(0), step alpha |p(0)|^2) on the balanced preset
//! at dimension d, both runs with the same prompt setting: max_tau ||q_W - q_p|| / ||q_W||.
//! (b) trains W from W(0) = I with p fixed (Gaussian, |p| ~ 1: p_scale = 1 / sqrt(d), so
//! that q moves as p-mode's with the same alpha would, Lemma A.6) on the balanced data
//! at dimension d, and reports at the last step: train and test accuracy, the share of
//! clean samples whose top token is in R, of noisy samples whose top token is in
//! W_{-Y*}, and (in-sequence) the mean attention s_0 on the prompt and the share of
//! samples whose top position is the prompt.

use tokensel::prelude::analysis::lemma_a6::lemma_a6;
use tokensel::prelude::{Mode, PInit, Preset, Prompt, WInit, *};

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::args()
        .skip(1)
        .find_map(|a| {
            a.strip_prefix(&format!("{name}="))
                .map(|v| v.parse().ok().expect("a value of the right type"))
        })
        .unwrap_or(default)
}

fn main() -> tokensel::prelude::Result<()> {
    let d: usize = arg("d", 2000);
    let seeds: String = arg("seeds", "0,1,2,3,4".to_string());
    let seeds: Vec<u64> = seeds.split(',').map(|s| s.parse().unwrap()).collect();
    let a6_steps: u64 = arg("a6_steps", 1000);
    let sel_steps: u64 = arg("sel_steps", 3000);
    let sel_alpha: f64 = arg("sel_alpha", 1e-3);
    let base = Preset::Balanced.config();
    println!("setting: balanced preset at d = {d}; seeds {seeds:?}");
    println!(
        "(a) Lemma A.6: W-mode (Gaussian p(0), Kaiming W(0)) vs its p-mode twin, {a6_steps} \
         steps, alpha = {}",
        base.step_size
    );
    for prompt in [Prompt::Separate, Prompt::InSequence] {
        let mut row = Vec::new();
        for &seed in &seeds {
            let mut cfg = base.clone();
            cfg.seed = seed;
            cfg.d = d;
            cfg.steps = a6_steps;
            cfg.init.w = WInit::KaimingUniform;
            cfg.model.prompt = prompt;
            cfg.validate()?;
            let data = Dataset::generate(&cfg);
            let m = lemma_a6(&cfg, &data)?;
            row.push(m.max_rel_q_diff);
        }
        println!(
            "  {:<12} max ||q_W - q_p|| / ||q_W|| per seed: {}",
            prompt.name(),
            row.iter()
                .map(|v| format!("{v:.3e}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    println!(
        "(b) selection, W-mode from W(0) = I, p fixed Gaussian (p_scale = 1/sqrt(d)), \
         {sel_steps} steps, alpha = {sel_alpha}"
    );
    println!(
        "  {:<12} {:>4} {:>6} {:>6} {:>8} {:>10} {:>9} {:>9} {:>8} {:>8}",
        "prompt",
        "seed",
        "train",
        "test",
        "clean_R",
        "noisy_Wopp",
        "s0_clean",
        "s0_noisy",
        "top_p_c",
        "top_p_n"
    );
    for &seed in &seeds {
        for prompt in [Prompt::Separate, Prompt::InSequence] {
            let mut cfg = base.clone();
            cfg.seed = seed;
            cfg.d = d;
            cfg.mode = Mode::W;
            cfg.steps = sel_steps;
            cfg.step_size = sel_alpha;
            cfg.init.p = PInit::Gaussian;
            cfg.init.p_scale = 1.0 / (d as f64).sqrt();
            cfg.init.w = WInit::Identity;
            cfg.model.prompt = prompt;
            cfg.validate()?;
            let data = Dataset::generate(&cfg);
            let traj = Trainer::run(&cfg, &data, F64, &mut |_| {})?;
            let c = traj.checkpoints.last().expect("a checkpoint");
            let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.4}"));
            let (s0c, s0n, tc, tn) = match &c.prompt {
                Some(p) => (
                    opt(p.attention.clean),
                    opt(p.attention.noisy),
                    opt(p.top.clean),
                    opt(p.top.noisy),
                ),
                None => ("-".into(), "-".into(), "-".into(), "-".into()),
            };
            println!(
                "  {:<12} {:>4} {:>6.3} {:>6.3} {:>8} {:>10} {:>9} {:>9} {:>8} {:>8}",
                prompt.name(),
                seed,
                c.train_accuracy,
                c.test_accuracy,
                opt(c.selection.clean.map(|s| s.r)),
                opt(c.selection.noisy.map(|s| s.w_opposite)),
                s0c,
                s0n,
                tc,
                tn
            );
        }
    }
    Ok(())
}
