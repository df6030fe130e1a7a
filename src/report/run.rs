//! Readable tables of run results (the report types of other layers render themselves
//! through `Display` next to their definitions).

use crate::config::{Group, Mode};
use crate::io::trajectory::{
    ByNoise, ClassMetrics, ClassSelection, DirectionEnd, PerGroup, SelectionShare, Summary,
    TrainerInfo,
};

fn fmt_row<const N: usize>(label: &str, v: Option<[f64; N]>) -> String {
    match v {
        None => format!("  {label:<22}{:>10}\n", "(none)"),
        Some(p) => {
            let cells: String = p.iter().map(|x| format!("{x:>12.4}")).collect();
            format!("  {label:<22}{cells}\n")
        }
    }
}

/// A table of one value per column `names` for clean and noisy samples.
fn group_table<const N: usize>(
    title: &str,
    names: [&str; N],
    by: ByNoise<[f64; N]>,
    n_clean: usize,
    n_noisy: usize,
) -> String {
    let head: String = names.iter().map(|g| format!("{g:>12}")).collect();
    format!(
        "  {title:<22}{head}\n{}{}",
        fmt_row(&format!("clean ({n_clean})"), by.clean),
        fmt_row(&format!("noisy ({n_noisy})"), by.noisy)
    )
}

/// A K-class run's per-class accuracies and its selection relative to each sample's
/// classes.
fn class_tables(m: &ClassMetrics, n_clean: usize, n_noisy: usize) -> String {
    let cell = |v: &Option<f64>| match v {
        Some(x) => format!("{x:>8.4}"),
        None => format!("{:>8}", "-"),
    };
    let head: String = (0..m.train_accuracy.len())
        .map(|c| format!("{:>8}", format!("c{c}")))
        .collect();
    let mut out = format!("\n  per class             {head}\n");
    for (label, v) in [
        ("train accuracy (Y)", &m.train_accuracy),
        ("test accuracy (Y*)", &m.test_accuracy),
        ("mean S_i (Y*)", &m.selection_score),
    ] {
        let cells: String = v.iter().map(cell).collect();
        out += &format!("  {label:<22}{cells}\n");
    }
    out += &format!(
        "  test predictions: {:.4} tied, {:.4} undecided (counted wrong)\n\n",
        m.test_tie, m.test_undecided
    );
    let selection = m.selection.map(ClassSelection::to_array);
    out += &group_table(
        "top token, by class",
        ClassSelection::NAMES,
        selection,
        n_clean,
        n_noisy,
    );
    out += "  (W_true: a weak token of Y*; W_observed: of the observed label Y != Y*; W_other: of\n   another class)\n";
    out
}

/// The run's direction at its end against the attention SVM, and the hardmax limit's
/// accuracies beside the run's.
fn direction_lines(d: &DirectionEnd, s: &Summary) -> String {
    use crate::model::token_selection::limit::Space;
    let l = &d.limit;
    let (theta, mm) = match l.space {
        Space::P => ("||p||", "p_mm"),
        Space::Q => ("||q||", "q_mm"),
    };
    let opt = |v: Option<f64>, prec: usize| match v {
        Some(x) => format!("{x:.prec$e}"),
        None => "-".into(),
    };
    let n = s.config.n_train;
    let off = &l.off_pattern_at_end;
    let on = if off.is_empty() {
        format!("all {n} training samples end on the pattern")
    } else {
        let shown: Vec<String> = off.iter().take(10).map(|i| i.to_string()).collect();
        format!(
            "{} of {n} training samples do not end on the pattern (samples {}{})",
            off.len(),
            shown.join(", "),
            if off.len() > 10 { ", ..." } else { "" }
        )
    };
    format!(
        "\n  direction against the attention SVM ({} pattern, {mm}: proved optimal, {} of {} \
         constraints in the support, {}):\n    1 - corr {}   {theta} {:.4}   normalised margin \
         {} (limit 1/||{mm}|| = {:.4})   support deviation {}\n    {on}\n    hardmax limit along \
         {mm}: train accuracy {:.4}, test accuracy {:.4} ({} undecided); this run: {:.4} / {:.4}\n",
        l.pattern_choice,
        l.support,
        l.constraints,
        l.local_optimality,
        opt(d.last.one_minus_corr, 3),
        d.last.norm,
        d.last
            .margin
            .map(|m| format!("{m:.4}"))
            .unwrap_or("-".into()),
        l.limit_margin,
        opt(d.last.support_deviation, 3),
        l.limit_train_accuracy,
        l.limit_test_accuracy,
        l.limit_test_undecided,
        s.train_accuracy,
        s.test_accuracy
    )
}

fn trainer_name(t: &TrainerInfo) -> String {
    use crate::arith::Kind;
    match t.kind {
        Kind::F64 => "f64".into(),
        Kind::F32 => "f32".into(),
        Kind::Mpfr => format!("MPFR {} bits", t.prec_bits),
        Kind::Predictor => "f64 predictor (53-bit MPFR)".into(),
        Kind::Ball => format!("ball {} bits", t.prec_bits),
    }
}

/// The readable end-of-run report of `run` and `twin`: a trajectory's summary.
pub struct RunReport<'a> {
    /// The summary.
    pub summary: &'a Summary,
    /// The trainer that produced it.
    pub trainer: &'a TrainerInfo,
}

impl std::fmt::Display for RunReport<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&summary_table(self.summary, self.trainer))
    }
}

fn summary_table(s: &Summary, trainer: &TrainerInfo) -> String {
    let c = &s.config;
    let n_clean = c.n_train - s.n_noisy;
    let mode = match (c.mode, &c.factorised) {
        _ if c.model.is_network() => format!(
            "{} (m = {}, residual {}; every block trained)",
            c.model.kind.name(),
            c.model.mlp_width(c.d),
            if c.model.residual.unwrap_or(true) {
                "on"
            } else {
                "off"
            }
        ),
        (_, Some(f)) => f.describe(),
        (Mode::P, None) => "p-mode (W fixed)".into(),
        (Mode::W, None) => "W-mode (p fixed)".into(),
        (Mode::Joint, None) => "joint (p and W trained)".into(),
    };
    let mut out = format!(
        "tokensel {}: {} steps, seed {}, {mode}{}{}, {} {}, {} step{}\n  d = {}, ||mu|| = {}, T = {}, n = {} ({} noisy), rho = {}, eta = {}, sigma = {}, alpha = {:e}\n\n",
        match trainer.kind {
            crate::arith::Kind::F64 | crate::arith::Kind::F32 => "run",
            _ => "twin",
        },
        s.steps,
        s.seed,
        match (c.model.is_multiclass(), c.model.in_sequence()) {
            (true, false) => format!(", multiclass K = {}", c.model.classes),
            (true, true) => format!(
                ", multiclass K = {}, prompt in sequence (T + 1 positions)",
                c.model.classes
            ),
            (false, true) => ", prompt in sequence (T + 1 positions)".to_string(),
            (false, false) => String::new(),
        },
        if c.optimizer.is_default() {
            String::new()
        } else {
            format!(", {}", c.optimizer.name_with(Some(c.step_size)))
        },
        trainer_name(trainer),
        // a network's formulation is its loss's; it has no engines' method
        match c.model.is_network() {
            true => format!("{:?} loss", trainer.formulation),
            false => format!("{:?}", trainer.formulation),
        },
        match c.model.is_network() {
            true => "full-batch".to_string(),
            false => trainer.method.to_string(),
        },
        if c.method == crate::config::Method::Auto && !c.model.is_network() {
            " (auto)"
        } else {
            ""
        },
        c.d,
        c.mu_norm,
        c.layout.tokens,
        c.n_train,
        s.n_noisy,
        c.rho,
        c.eta,
        c.sigma,
        c.step_size
    );
    out += &format!(
        "  train accuracy {:>8.4}   (against observed labels Y)\n  test accuracy  {:>8.4}   (against true labels Y*, {} samples)\n  train loss     {:>8.4}\n",
        s.train_accuracy, s.test_accuracy, c.n_test, s.train_loss
    );
    if let Some(l) = s.test_loss {
        out += &format!("  test loss      {l:>8.4}\n");
    }
    out += "\n";
    let selection = s.selection.map(SelectionShare::to_array);
    let names = SelectionShare::NAMES;
    out += &group_table("top-token group", names, selection, n_clean, s.n_noisy);
    out += "\n";
    let attention = s.attention.map(PerGroup::to_array);
    let groups = Group::ALL.map(Group::name);
    out += &group_table("mean attention mass", groups, attention, n_clean, s.n_noisy);
    if let Some(p) = &s.prompt {
        // the groups above are the tokens of X (positions 1..=T); the prompt apart
        let by = ByNoise {
            clean: p.attention.clean.zip(p.top.clean).map(|(a, t)| [a, t]),
            noisy: p.attention.noisy.zip(p.top.noisy).map(|(a, t)| [a, t]),
        };
        out += "\n";
        out += &group_table(
            if c.model.is_network() {
                "cls token (position 0)"
            } else {
                "prompt (position 0)"
            },
            ["attention", "top share"],
            by,
            n_clean,
            s.n_noisy,
        );
    }
    if let Some(m) = &s.classes {
        out += &class_tables(m, n_clean, s.n_noisy);
    }
    if let Some(d) = &s.direction {
        out += &direction_lines(d, s);
    }
    if let Some(line) = figure_3a(s) {
        out += &line;
    }
    out += &format!("\n  trajectory digest {}\n", s.trajectory_digest);
    out
}

/// Whether a run of the paper's balanced setting (every parameter of the preset, any
/// seed and method, 30,000 steps) shows the pattern of its Figure 3(a): train accuracy
/// 1.00 (the noisy labels fitted), test accuracy 1.00 (read as >= 0.99), every clean
/// sample's top token in R and every noisy sample's in W_-Y* (`W_opposite`): benign
/// overfitting. `None` for any other config.
fn figure_3a(s: &Summary) -> Option<String> {
    use crate::config::Preset;
    let c = &s.config;
    let paper = crate::config::Config {
        seed: c.seed,
        method: c.method,
        ..Preset::Balanced.config()
    };
    if *c != paper || s.steps != paper.steps {
        return None;
    }
    let clean_r = s.selection.clean.map(|v| v.r);
    let noisy_w = s.selection.noisy.map(|v| v.w_opposite);
    let mut differs = Vec::new();
    if s.train_accuracy < 1.0 {
        differs.push(format!("train accuracy {:.4} < 1", s.train_accuracy));
    }
    if s.test_accuracy < 0.99 {
        differs.push(format!("test accuracy {:.4} < 0.99", s.test_accuracy));
    }
    if clean_r.is_some_and(|v| v < 1.0) {
        differs.push(format!("clean on R {:.4} < 1", clean_r.unwrap_or(0.0)));
    }
    if noisy_w.is_some_and(|v| v < 1.0) {
        differs.push(format!(
            "noisy on W_opposite {:.4} < 1",
            noisy_w.unwrap_or(0.0)
        ));
    }
    let verdict = if differs.is_empty() {
        "this run shows that pattern".to_string()
    } else {
        format!("this run does not: {}", differs.join(", "))
    };
    Some(format!(
        "\n  the paper's Figure 3(a) (this setting): train and test accuracy 1.00, clean samples\n  select R, noisy samples select W_-Y* (W_opposite): benign overfitting\n  {verdict}\n"
    ))
}
