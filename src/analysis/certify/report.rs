//! The certificate's records (its checkpoints, decisions, radii, attempts), the checks
//! its reader makes, and its readable summary.

use super::*;

/// A prediction (the sign of the binary f; a K-class model's argmax) against its label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The prediction is proved and equals the label.
    Correct,
    /// The prediction is proved and differs from the label (a proved zero f, or a proved
    /// tie of the largest K-class outputs, counts here).
    Wrong,
    /// The enclosure of f contains 0 (and is not the exact 0).
    Undecided,
}

impl Decision {
    /// The decision on outputs `f` against label `y` ([`Model::decide`]: the sign of the
    /// binary f; a K-class model's proved unique argmax, a proved tie counting wrong).
    pub(super) fn of(ar: &Ball, model: &AnyModel, f: &[BallReal], y: i8) -> Decision {
        match model.decide(ar, f, y) {
            Some(true) => Decision::Correct,
            Some(false) => Decision::Wrong,
            None => Decision::Undecided,
        }
    }
}

/// What a certificate's sample record carries beside its enclosures
/// (`io::trajectory::SampleState<Interval, SampleProof>`): its proved prediction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampleProof {
    /// Its sign (a K-class model's argmax) against the observed label.
    pub prediction: Decision,
}

impl Decision {
    /// The names of the decisions, in [`Decision::code`] order.
    pub const NAMES: [&'static str; 3] = ["correct", "wrong", "undecided"];

    /// The decision's index in [`Decision::NAMES`].
    pub fn code(self) -> u8 {
        match self {
            Decision::Correct => 0,
            Decision::Wrong => 1,
            Decision::Undecided => 2,
        }
    }
}

/// Decision counts at one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Decisions {
    /// Training samples whose prediction sign is undecided.
    pub train_signs_undecided: usize,
    /// Training samples whose top token is undecided.
    pub tops_undecided: usize,
    /// Training samples whose top score is a proved tie (a decision).
    pub ties: usize,
    /// Test samples whose prediction sign is undecided (checkpoints only).
    pub test_signs_undecided: usize,
}

impl Decisions {
    /// True when nothing is undecided.
    pub fn all_decided(&self) -> bool {
        self.train_signs_undecided == 0
            && self.tops_undecided == 0
            && self.test_signs_undecided == 0
    }
}

/// Relative radii at one step: rad / |mid| componentwise for the positive quantities
/// (attention, 1 - s_top, the loss), normwise (largest radius / largest |mid|) for the
/// signed ones (scores, outputs, q), which cross zero; and the bits lost: the working
/// precision plus log2 of the largest of them, from 0 (the radii are the midpoints' own
/// rounding) to the precision (a relative radius of 1 or more, or an infinite one: no
/// bit is left). Each is rounded up to f64; one beyond f64's range (a ball around an
/// underflowed value, a radius past f64's exponents) is infinite, written `"inf"`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Radius {
    /// Training scores (normwise).
    #[serde(with = "crate::io::nonfinite")]
    pub scores: f64,
    /// Attention (componentwise).
    #[serde(with = "crate::io::nonfinite")]
    pub attention: f64,
    /// 1 - s_top (componentwise).
    #[serde(with = "crate::io::nonfinite")]
    pub rest: f64,
    /// Outputs f of the training samples (normwise).
    #[serde(with = "crate::io::nonfinite")]
    pub output: f64,
    /// The empirical risk.
    #[serde(with = "crate::io::nonfinite")]
    pub loss: f64,
    /// q = W^T p (normwise; checkpoints only).
    #[serde(with = "crate::io::nonfinite::option")]
    pub q: Option<f64>,
    /// The largest of the above.
    #[serde(with = "crate::io::nonfinite")]
    pub largest: f64,
    /// prec + log2(largest), between 0 and prec.
    pub bits_lost: f64,
}

/// What a certificate's checkpoint carries beside its enclosures (the record of a
/// trajectory's checkpoint over [`Interval`]: `io::trajectory::Checkpoint<Interval,
/// Proof>`): the exact counts behind the accuracies and selection shares, the decision
/// counts and the radii; each sample's [`SampleProof`]; the direction's `on_pattern` as
/// an exact [`Count`]. Written into the checkpoint's JSON object after `cumulative`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proof {
    /// The exact counts behind `train_accuracy`: proved correct, at most correct, of n.
    pub train_correct: Count,
    /// The exact counts behind `test_accuracy`.
    pub test_correct: Count,
    /// The exact counts behind the selection shares.
    pub selection_counts: ByNoise<SelectionShare<Count>>,
    /// Decision counts.
    pub decisions: Decisions,
    /// Relative radii and bits lost.
    pub radius: Radius,
}

/// A certificate's checkpoint: everything a trajectory checkpoint records, as
/// enclosures, and its [`Proof`].
pub type Certified = Checkpoint<Interval, Proof>;

/// A count's three leaves (`path.lo`, `path.hi`, `path.of`).
fn visit_count(path: &str, c: &Count, v: &mut impl Visitor<Interval>) {
    for (end, x) in [("lo", c.lo), ("hi", c.hi), ("of", c.of)] {
        v.count(&format!("{path}.{end}"), x as u64);
    }
}

impl Extras<Interval> for Proof {
    type Sample = SampleProof;
    type Pattern = Count;

    fn visit(&self, v: &mut impl Visitor<Interval>) {
        visit_count("train_correct", &self.train_correct, v);
        visit_count("test_correct", &self.test_correct, v);
        for (set, counts) in [
            ("clean", &self.selection_counts.clean),
            ("noisy", &self.selection_counts.noisy),
        ] {
            for (name, c) in SelectionShare::<f64>::NAMES
                .iter()
                .zip(counts.iter().flat_map(|c| c.to_array()))
            {
                visit_count(&format!("selection_counts.{set}.{name}"), &c, v);
            }
        }
        let d = &self.decisions;
        for (name, x) in [
            ("train_signs_undecided", d.train_signs_undecided),
            ("tops_undecided", d.tops_undecided),
            ("ties", d.ties),
            ("test_signs_undecided", d.test_signs_undecided),
        ] {
            v.count(&format!("decisions.{name}"), x as u64);
        }
        let r = &self.radius;
        let point = Interval::point;
        for (name, x) in [
            ("scores", r.scores),
            ("attention", r.attention),
            ("rest", r.rest),
            ("output", r.output),
            ("loss", r.loss),
        ] {
            v.real(&format!("radius.{name}"), Range::NonNegative, point(x));
        }
        v.optional("radius.q", Range::NonNegative, r.q.map(point));
        v.real("radius.largest", Range::NonNegative, point(r.largest));
        v.real("radius.bits_lost", Range::NonNegative, point(r.bits_lost));
    }

    fn visit_sample(s: &SampleProof, v: &mut impl Visitor<Interval>) {
        v.category("samples.prediction", &Decision::NAMES, s.prediction.code());
    }

    fn visit_pattern(p: &Count, v: &mut impl Visitor<Interval>) {
        visit_count("direction.on_pattern", p, v);
    }

    fn blank() -> Proof {
        let none = SelectionShare::from_array([Count::default(); 6]);
        Proof {
            train_correct: Count::default(),
            test_correct: Count::default(),
            selection_counts: ByNoise {
                clean: Some(none),
                noisy: Some(none),
            },
            decisions: Decisions::default(),
            radius: Radius::default(),
        }
    }

    fn blank_sample() -> SampleProof {
        SampleProof {
            prediction: Decision::Correct,
        }
    }

    fn blank_pattern() -> Count {
        Count::default()
    }

    /// What the writer (`observe.rs`) guarantees of a checkpoint's proof: the counts are
    /// of n_train (`train_correct`, the selection counts' sets together, the direction's
    /// `on_pattern`) and n_test (`test_correct`) samples; the decision counts are at most
    /// those and are the samples' own (their predictions, their top tokens' selection)
    /// and the counts' widths (an undecided sample widens each count it may fall in);
    /// each set's six selection counts cover its samples once; the accuracies and
    /// selection shares are their counts' shares, bit for bit ([`Count::share`]). The
    /// message names the field and its value.
    fn check(c: &Certified, cfg: &Config) -> std::result::Result<(), String> {
        use crate::io::record::Value;
        let (p, d) = (&c.proof, &c.proof.decisions);
        let (n, n_test) = (cfg.n_train, cfg.n_test);
        for (field, count, of, what) in [
            ("train_correct", &p.train_correct, n, "n_train"),
            ("test_correct", &p.test_correct, n_test, "n_test"),
        ] {
            if count.of != of {
                return Err(format!(
                    "`{field}.of` is {}; the config's {what} is {of}",
                    count.of
                ));
            }
        }
        for (field, v, bound, what) in [
            (
                "train_signs_undecided",
                d.train_signs_undecided,
                n,
                "n_train",
            ),
            ("tops_undecided", d.tops_undecided, n, "n_train"),
            ("ties", d.ties, n, "n_train"),
            (
                "test_signs_undecided",
                d.test_signs_undecided,
                n_test,
                "n_test",
            ),
        ] {
            if v > bound {
                return Err(format!(
                    "`decisions.{field}` is {v}, more than the config's {what} {bound}"
                ));
            }
        }
        let samples = |f: &dyn Fn(&SampleState<Interval, SampleProof>) -> bool| {
            c.samples.iter().filter(|s| f(s)).count()
        };
        let predicted = |want: Decision| samples(&|s| s.proof.prediction == want);
        let selected = |want: Selection| samples(&|s| s.selection == want);
        let (tc, uc) = (&p.train_correct, &p.test_correct);
        let mut counts_sel = (0usize, 0usize, 0usize);
        for (set, counts) in [
            ("clean", &p.selection_counts.clean),
            ("noisy", &p.selection_counts.noisy),
        ] {
            let Some(s) = counts else { continue };
            let a = s.to_array();
            let (of, undecided) = (a[0].of, a[5]);
            let mut lo = 0;
            for (name, k) in SelectionShare::<f64>::NAMES.iter().zip(a) {
                let field = format!("selection_counts.{set}.{name}");
                if k.of != of {
                    return Err(format!(
                        "`{field}` is {k}, but `selection_counts.{set}.R` is of {of}: a set's \
                         counts are of its samples"
                    ));
                }
                let open = if *name == "undecided" {
                    0
                } else {
                    undecided.lo
                };
                if k.hi - k.lo != open {
                    return Err(format!(
                        "`{field}` is {k}, but the set's undecided samples leave {open} open"
                    ));
                }
                lo += k.lo;
            }
            if lo != of {
                return Err(format!(
                    "the proved counts of `selection_counts.{set}` sum to {lo}, not to its {of} \
                     samples"
                ));
            }
            counts_sel.0 += of;
            counts_sel.1 += undecided.lo;
            counts_sel.2 += a[4].lo;
        }
        let dir = c.direction.as_ref().map(|x| x.on_pattern);
        for (field, v, want, why) in [
            (
                "decisions.train_signs_undecided",
                d.train_signs_undecided,
                predicted(Decision::Undecided),
                "its samples' predictions leave",
            ),
            (
                "decisions.train_signs_undecided",
                d.train_signs_undecided,
                tc.hi - tc.lo,
                "`train_correct` leaves",
            ),
            (
                "decisions.test_signs_undecided",
                d.test_signs_undecided,
                uc.hi - uc.lo,
                "`test_correct` leaves",
            ),
            (
                "decisions.tops_undecided",
                d.tops_undecided,
                selected(Selection::Undecided),
                "its samples' top tokens leave",
            ),
            (
                "decisions.tops_undecided",
                d.tops_undecided,
                counts_sel.1,
                "`selection_counts` leave",
            ),
            (
                "decisions.ties",
                d.ties,
                selected(Selection::Tie),
                "its samples' top tokens hold",
            ),
            (
                "decisions.ties",
                d.ties,
                counts_sel.2,
                "`selection_counts` hold",
            ),
            (
                "train_correct.lo",
                tc.lo,
                predicted(Decision::Correct),
                "its samples' predictions prove correct",
            ),
            (
                "train_correct.hi",
                tc.hi,
                n - predicted(Decision::Wrong),
                "its samples' predictions prove wrong all but",
            ),
            (
                "selection_counts",
                counts_sel.0,
                n,
                "the config's n_train is",
            ),
            (
                "direction.on_pattern.of",
                dir.map_or(n, |k| k.of),
                n,
                "the config's n_train is",
            ),
            (
                "direction.on_pattern",
                dir.map_or(d.tops_undecided, |k| k.hi - k.lo),
                d.tops_undecided,
                "the samples' undecided top tokens (`decisions.tops_undecided`) leave open",
            ),
        ] {
            if v != want {
                let v = match field {
                    "selection_counts" => format!("of {v} samples"),
                    "direction.on_pattern" => format!("open by {v}"),
                    _ => format!("{v}"),
                };
                return Err(format!("`{field}` is {v}, but {why} {want}"));
            }
        }
        let shares = p
            .selection_counts
            .map(|s| SelectionShare::from_array(s.to_array().map(|k| k.share())));
        for (field, share, count) in [
            ("train_accuracy", c.train_accuracy, tc),
            ("test_accuracy", c.test_accuracy, uc),
        ] {
            if share != count.share() {
                return Err(format!(
                    "`{field}` {} is not the share of its count {count} ({})",
                    share.show(),
                    count.share().show()
                ));
            }
        }
        if let Some((field, ours, want)) = first_difference(&c.selection, &shares, Interval::show) {
            return Err(format!(
                "`selection.{field}` {ours} is not the share of its count in \
                 `selection_counts` ({want})"
            ));
        }
        Ok(())
    }
}

/// The first entry where two sets' selection records differ: its path below the record
/// (`clean.R`), and both values as `show` writes them (`null`: the set is absent).
fn first_difference<T: Copy + PartialEq>(
    ours: &ByNoise<SelectionShare<T>>,
    theirs: &ByNoise<SelectionShare<T>>,
    show: impl Fn(T) -> String,
) -> Option<(String, String, String)> {
    let show = |x: Option<T>| x.map_or_else(|| "null".to_string(), &show);
    for (set, a, b) in [
        ("clean", ours.clean, theirs.clean),
        ("noisy", ours.noisy, theirs.noisy),
    ] {
        let (a, b) = (a.map(|s| s.to_array()), b.map(|s| s.to_array()));
        for (k, name) in SelectionShare::<f64>::NAMES.iter().enumerate() {
            let (x, y) = (a.map(|a| a[k]), b.map(|b| b[k]));
            if x != y {
                return Some((format!("{set}.{name}"), show(x), show(y)));
            }
        }
    }
    None
}

/// The first decision that was not proved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Undecided {
    /// The step.
    pub step: u64,
    /// What: "top token of training sample i", "sign of f of training sample i", "sign
    /// of f of test sample i".
    pub what: String,
}

/// Steps at which some training sample's top score was a proved tie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Ties {
    /// Number of such steps.
    pub steps: u64,
    /// The first.
    pub first: Option<u64>,
    /// The last.
    pub last: Option<u64>,
}

/// One run at one precision (`--prec auto` makes several).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Working precision.
    pub prec_bits: u32,
    /// The final checkpoint decided everything.
    pub decided: bool,
    /// The first undecided decision, if any.
    pub first_undecided: Option<Undecided>,
    /// Why the run stopped before its last step (a radius or value became non-finite;
    /// `--prec auto` then tries the next precision), if it did.
    #[serde(default)]
    pub stopped: Option<String>,
}

/// The certificate of `tokensel certify`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Certificate {
    /// Always [`FORMAT`].
    pub format: String,
    /// The ball trainer (kind `ball`, its precision, formulation and method).
    pub trainer: TrainerInfo,
    /// The run's config.
    pub config: Config,
    /// True when every decision of the final checkpoint is proved (training top tokens,
    /// where a proved tie counts as decided, and prediction signs; test signs).
    pub decided: bool,
    /// Final training accuracy, ends rounded outward (certified where `train_correct`
    /// is exact).
    pub train_accuracy: Interval,
    /// The exact counts behind it.
    pub train_correct: Count,
    /// Final test accuracy.
    pub test_accuracy: Interval,
    /// The exact counts behind it.
    pub test_correct: Count,
    /// Final selection shares.
    pub selection: ByNoise<SelectionShare<Interval>>,
    /// The exact counts behind them.
    pub selection_counts: ByNoise<SelectionShare<Count>>,
    /// The first decision not proved (training decisions at every step, test signs at
    /// the checkpoints).
    pub first_undecided: Option<Undecided>,
    /// Steps with a proved tie.
    pub ties: Ties,
    /// Largest relative radius over the run ([`Radius::largest`]; `"inf"` past f64's
    /// range).
    #[serde(with = "crate::io::nonfinite")]
    pub largest_rel_radius: f64,
    /// The step where it was reached.
    pub largest_at_step: u64,
    /// The bits lost there (0 to the precision).
    pub bits_lost: f64,
    /// The runs made (one unless `--prec auto`).
    pub attempts: Vec<Attempt>,
    /// Notes for the reader (the step-0 tie, the direct step's radii).
    pub notes: Vec<String>,
    /// Every checkpoint of the schedule (read as none where absent: the reader then
    /// refuses the certificate, "no checkpoint").
    #[serde(default)]
    pub checkpoints: Vec<Certified>,
    /// What the checkpoints' direction intervals refer to: the attention SVM solution
    /// of the config's `[direction]` pattern, proved before the run (absent without
    /// that section).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<crate::model::token_selection::limit::LimitSummary>,
}

impl Certificate {
    /// The final checkpoint.
    pub fn last(&self) -> &Certified {
        self.checkpoints.last().expect("the schedule has step 0")
    }

    /// Read a certificate (`certificate.json`, `certify --json`) and check what a reader
    /// relies on: the format [`FORMAT`], at least one checkpoint, the run's description
    /// (see `check_run`: a ball trainer at a ball's precision, a valid config, every
    /// radius a non-negative number or infinity, every step named within the config's
    /// `steps`), checkpoint steps strictly increasing, a sample list of `n_train` entries
    /// each, the bits lost within 0..=prec (every interval is checked as it is read:
    /// [`Interval`], [`Count`]).
    pub fn from_json(text: &str, path: &std::path::Path) -> Result<Certificate> {
        let bad = |message: String| Error::Parse {
            what: "certificate",
            path: path.to_path_buf(),
            message,
        };
        #[derive(Deserialize)]
        struct Head {
            format: Option<serde_json::Value>,
        }
        let head: Head = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        match head.format.as_ref().and_then(|f| f.as_str()) {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(bad(format!(
                    "format `{other}`: this tokensel reads `{FORMAT}`"
                )));
            }
            None => return Err(bad(format!("no `format` (expected `{FORMAT}`)"))),
        }
        let c: Certificate = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if c.checkpoints.is_empty() {
            return Err(bad("no checkpoint".into()));
        }
        c.check_run().map_err(bad)?;
        let prec = c.trainer.prec_bits as f64;
        let mut last = None;
        for k in &c.checkpoints {
            // (a step past the config's was refused by `check_run`)
            if last.is_some_and(|s| k.step <= s) {
                return Err(bad(format!(
                    "checkpoint steps must increase (step {})",
                    k.step
                )));
            }
            last = Some(k.step);
            if !(0.0..=prec).contains(&k.proof.radius.bits_lost) {
                return Err(bad(format!(
                    "bits lost {} at step {} outside 0..={prec}",
                    k.proof.radius.bits_lost, k.step
                )));
            }
        }
        if !(0.0..=prec).contains(&c.bits_lost) {
            return Err(bad(format!("bits lost {} outside 0..={prec}", c.bits_lost)));
        }
        // the record's shape against the config (samples, the K-class parts, the
        // direction record) and every leaf in its range, as a trajectory's
        crate::io::trajectory::check_record(&c.config, &c.checkpoints, c.direction.as_ref())
            .map_err(bad)?;
        c.check_summary().map_err(bad)?;
        Ok(c)
    }

    /// The certificate's summary against its checkpoints, as its writer (`run_at`,
    /// `certify`) makes it: the accuracies, their counts, the selection shares and their
    /// counts are the last checkpoint's; `decided` is "not stopped and nothing undecided
    /// at the last checkpoint", and the last attempt is the certificate's own run (its
    /// precision, `decided`, `first_undecided`), every attempt before it undecided; an
    /// undecided last checkpoint has a `first_undecided`; `bits_lost` follows
    /// `largest_rel_radius` (as a checkpoint's radius: `Radius::check_consistent`), which
    /// is the radius of the checkpoint at `largest_at_step` where that step is one; the
    /// steps with proved ties cover every checkpoint that holds one. The message names
    /// the field and its value.
    fn check_summary(&self) -> std::result::Result<(), String> {
        use crate::io::record::Value;
        let last = self.last();
        let at = last.step;
        let differs = |field: String, ours: String, theirs: String| {
            format!(
                "`{field}` {ours} is not the last checkpoint's (step {at}) {theirs}: a \
                 certificate's summary repeats its final checkpoint"
            )
        };
        for (field, ours, theirs) in [
            ("train_accuracy", self.train_accuracy, last.train_accuracy),
            ("test_accuracy", self.test_accuracy, last.test_accuracy),
        ] {
            if ours != theirs {
                return Err(differs(field.into(), ours.show(), theirs.show()));
            }
        }
        for (field, ours, theirs) in [
            (
                "train_correct",
                self.train_correct,
                last.proof.train_correct,
            ),
            ("test_correct", self.test_correct, last.proof.test_correct),
        ] {
            if ours != theirs {
                return Err(differs(field.into(), ours.to_string(), theirs.to_string()));
            }
        }
        if let Some((field, ours, theirs)) =
            first_difference(&self.selection, &last.selection, Interval::show)
        {
            return Err(differs(format!("selection.{field}"), ours, theirs));
        }
        if let Some((field, ours, theirs)) = first_difference(
            &self.selection_counts,
            &last.proof.selection_counts,
            |k: Count| k.to_string(),
        ) {
            return Err(differs(format!("selection_counts.{field}"), ours, theirs));
        }
        let all_decided = last.proof.decisions.all_decided();
        let decided = self.stopped().is_none() && all_decided;
        if self.decided != decided {
            return Err(format!(
                "`decided` is {}, but {}",
                self.decided,
                match (self.stopped(), all_decided) {
                    (Some(_), _) =>
                        "the run stopped (the last attempt's `stopped`): a stopped \
                                     certificate is undecided",
                    (None, true) => "the last checkpoint proves every decision (`decisions`)",
                    (None, false) => "the last checkpoint leaves decisions undecided (`decisions`)",
                }
            ));
        }
        if !all_decided && self.first_undecided.is_none() {
            return Err(format!(
                "`first_undecided` is null, but the last checkpoint (step {at}) leaves \
                 decisions undecided (`decisions`)"
            ));
        }
        let Some((own, before)) = self.attempts.split_last() else {
            return Err("`attempts` is empty: a certificate holds the run it was made by".into());
        };
        let i = before.len();
        if own.prec_bits != self.trainer.prec_bits {
            return Err(format!(
                "`attempts[{i}].prec_bits` {} is not the certificate's (`trainer.prec_bits` {}): \
                 the last attempt is the certificate's own run",
                own.prec_bits, self.trainer.prec_bits
            ));
        }
        if own.decided != self.decided {
            return Err(format!(
                "`attempts[{i}].decided` is {}, but the certificate's `decided` is {} (the last \
                 attempt is the certificate's own run)",
                own.decided, self.decided
            ));
        }
        if own.first_undecided != self.first_undecided {
            return Err(format!(
                "`attempts[{i}].first_undecided` is not the certificate's `first_undecided` (the \
                 last attempt is the certificate's own run)"
            ));
        }
        if let Some(j) = before.iter().position(|a| a.decided) {
            return Err(format!(
                "`attempts[{j}].decided` is true, but a decided attempt is the last one made \
                 (`--prec auto` stops at it)"
            ));
        }
        let prec = self.trainer.prec_bits;
        if let Some(want) = bits_disagree(prec, self.largest_rel_radius, self.bits_lost) {
            return Err(format!(
                "`bits_lost` is {} but `largest_rel_radius` {:e} at {prec} bits gives {want}",
                self.bits_lost, self.largest_rel_radius
            ));
        }
        if let Some(k) = self.checkpoints.iter().find(|k| {
            k.step == self.largest_at_step && k.proof.radius.largest != self.largest_rel_radius
        }) {
            return Err(format!(
                "`largest_rel_radius` {:e} is not the radius of checkpoint {} ({:e}), the step \
                 `largest_at_step` names",
                self.largest_rel_radius, k.step, k.proof.radius.largest
            ));
        }
        let t = &self.ties;
        if t.first.is_some() != (t.steps > 0)
            || t.last.is_some() != (t.steps > 0)
            || t.first > t.last
            || t.first
                .zip(t.last)
                .is_some_and(|(f, l)| t.steps > l - f + 1)
        {
            return Err(format!(
                "`ties` ({} steps, first {:?}, last {:?}) is not a count of steps and its first \
                 and last",
                t.steps, t.first, t.last
            ));
        }
        if let Some(k) = self.checkpoints.iter().find(|k| {
            k.proof.decisions.ties > 0
                && !t
                    .first
                    .zip(t.last)
                    .is_some_and(|(f, l)| (f..=l).contains(&k.step))
        }) {
            return Err(format!(
                "checkpoint {} holds {} proved ties (`decisions.ties`), but `ties` (first {:?}, \
                 last {:?}) does not cover its step",
                k.step, k.proof.decisions.ties, t.first, t.last
            ));
        }
        Ok(())
    }
}

impl Certificate {
    /// The checks on what the certificate says of its run, whatever produced it (an
    /// edited file): the trainer is the ball arithmetic at
    /// [`MIN_BALL_PREC`](crate::arith::MIN_BALL_PREC)..=[`MAX_PREC`](crate::arith::MAX_PREC)
    /// bits (so is every attempt), the config is valid, every radius is a non-negative
    /// number or `"inf"` (never NaN), and every step it names (checkpoints, the largest
    /// radius, ties, the first undecided decision) is within the config's `steps`. The
    /// message names the offending field.
    fn check_run(&self) -> std::result::Result<(), String> {
        use crate::arith::{MAX_PREC, MIN_BALL_PREC};
        if self.trainer.kind != Kind::Ball {
            return Err(format!(
                "`trainer.kind` is `{}`: a certificate is made by the `ball` trainer",
                self.trainer.kind.name()
            ));
        }
        let precs = std::iter::once(("trainer.prec_bits".to_string(), self.trainer.prec_bits))
            .chain(
                self.attempts
                    .iter()
                    .enumerate()
                    .map(|(i, a)| (format!("attempts[{i}].prec_bits"), a.prec_bits)),
            );
        for (field, prec) in precs {
            if !(MIN_BALL_PREC..=MAX_PREC).contains(&prec) {
                return Err(format!(
                    "`{field}` {prec} is outside a ball's {MIN_BALL_PREC}..={MAX_PREC} bits"
                ));
            }
        }
        self.config
            .validate()
            .map_err(|e| format!("its `config` is not valid: {e}"))?;
        let radius = |field: String, r: f64| {
            if r.is_nan() || r < 0.0 {
                Err(format!(
                    "`{field}` is {r}: a radius is a non-negative number or \"inf\""
                ))
            } else {
                Ok(())
            }
        };
        radius("largest_rel_radius".into(), self.largest_rel_radius)?;
        for (i, k) in self.checkpoints.iter().enumerate() {
            let r = &k.proof.radius;
            for (name, v) in [
                ("scores", Some(r.scores)),
                ("attention", Some(r.attention)),
                ("rest", Some(r.rest)),
                ("output", Some(r.output)),
                ("loss", Some(r.loss)),
                ("q", r.q),
                ("largest", Some(r.largest)),
            ] {
                if let Some(v) = v {
                    radius(format!("checkpoints[{i}].radius.{name}"), v)?;
                }
            }
            if r.bits_lost.is_nan() {
                return Err(format!("`checkpoints[{i}].radius.bits_lost` is NaN"));
            }
            r.check_consistent(self.trainer.prec_bits)
                .map_err(|e| format!("`checkpoints[{i}].radius.{e}"))?;
            if r.largest > self.largest_rel_radius {
                return Err(format!(
                    "`checkpoints[{i}].radius.largest` {:e} exceeds `largest_rel_radius` {:e} \
                     (the largest over every step)",
                    r.largest, self.largest_rel_radius
                ));
            }
        }
        let steps = self.config.steps;
        let mut named: Vec<(String, u64)> = self
            .checkpoints
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("checkpoints[{i}].step"), k.step))
            .collect();
        named.push(("largest_at_step".into(), self.largest_at_step));
        named.extend(self.ties.first.map(|s| ("ties.first".to_string(), s)));
        named.extend(self.ties.last.map(|s| ("ties.last".to_string(), s)));
        named.extend(
            self.first_undecided
                .as_ref()
                .map(|u| ("first_undecided.step".to_string(), u.step)),
        );
        for (i, a) in self.attempts.iter().enumerate() {
            named.extend(
                a.first_undecided
                    .as_ref()
                    .map(|u| (format!("attempts[{i}].first_undecided.step"), u.step)),
            );
        }
        for (field, step) in named {
            if step > steps {
                return Err(format!(
                    "`{field}` {step} is past the run's {steps} steps (`config.steps`)"
                ));
            }
        }
        Ok(())
    }
}

/// The bits lost of a relative radius `rel` at `prec` bits, as an f64 (`plot`'s per
/// quantity curves): prec + log2(rel) within 0..=prec, `prec` for a relative radius of
/// 1 or more or an infinite one (as [`Radius::bits_lost`]).
pub fn bits_lost_of(prec: u32, rel: f64) -> f64 {
    let p = prec as f64;
    if rel.is_nan() || rel >= 1.0 {
        return p;
    }
    if rel <= 0.0 {
        return 0.0;
    }
    (p + core_math::log2(rel)).clamp(0.0, p)
}

impl Radius {
    /// `largest` is the largest of the parts and `bits_lost` its bits of `prec`: both are
    /// derived from the parts when the certificate is written (`radius`), so a reader
    /// refuses a certificate where they disagree. `bits_lost` comes from the exact radius
    /// and `largest` is that radius rounded up to f64 (exact for a 32-bit mantissa inside
    /// f64's normal range): within that range the two agree to 1e-9 bits (the logarithms'
    /// rounding is ~1e-13); below it `largest` only bounds it (`bits_lost` is at most
    /// what `largest` gives). The error names the field after `radius.`.
    fn check_consistent(&self, prec: u32) -> std::result::Result<(), String> {
        let parts = [
            self.scores,
            self.attention,
            self.rest,
            self.output,
            self.loss,
        ];
        // (NaN was refused before this check)
        let max = parts.into_iter().chain(self.q).fold(0.0, f64::max);
        if self.largest != max {
            return Err(format!(
                "largest` is {:e} but the largest of the radii beside it is {max:e}",
                self.largest
            ));
        }
        if let Some(want) = bits_disagree(prec, self.largest, self.bits_lost) {
            return Err(format!(
                "bits_lost` is {} but `largest` {:e} at {prec} bits gives {want}",
                self.bits_lost, self.largest
            ));
        }
        Ok(())
    }
}

/// The bits lost `largest` gives at `prec` ([`bits_lost_of`]) where `bits_lost`
/// disagrees with it: `bits_lost` comes from the exact radius and `largest` is that
/// radius rounded up to f64 (exact for a 32-bit mantissa inside f64's normal range), so
/// within that range the two agree to 1e-9 bits (the logarithms' rounding is ~1e-13);
/// below it `largest` only bounds it (`bits_lost` is at most what `largest` gives).
fn bits_disagree(prec: u32, largest: f64, bits_lost: f64) -> Option<f64> {
    let want = bits_lost_of(prec, largest);
    let tol = 1e-9;
    let normal = largest >= f64::MIN_POSITIVE || largest == 0.0;
    (bits_lost > want + tol || (normal && bits_lost < want - tol)).then_some(want)
}

impl Certificate {
    /// Why the run of the certificate's precision stopped before its last step (its
    /// enclosure blew up), if it did: the certificate then covers the checkpoints before
    /// that step only, and is undecided.
    pub fn stopped(&self) -> Option<&str> {
        self.attempts.last().and_then(|a| a.stopped.as_deref())
    }
}

impl std::fmt::Display for Certificate {
    /// The readable summary of `tokensel certify`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        let mut out = format!(
            "tokensel certify: ball arithmetic at {} bits, {} step, {} steps{}, seed {}, {}, d = {}, n = {}, n_test = {}\n\
             every interval encloses the exact-arithmetic value (ends rounded outward to f64)\n\n",
            self.trainer.prec_bits,
            self.trainer.method.name(),
            c.steps,
            match c.optimizer.is_default() {
                true => String::new(),
                false => format!(" of {}", c.optimizer.name()),
            },
            c.seed,
            match &c.factorised {
                Some(f) => f.describe(),
                None => format!("{}-mode", c.mode.name()),
            },
            c.d,
            c.n_train,
            c.n_test
        );
        out += &format!(
            "  {:>7}  {:<24}{:>12}{:>12}  {:>9}{:>6}{:>12}{:>6}\n",
            "step",
            "train loss",
            "train acc",
            "test acc",
            "undecided",
            "ties",
            "rel radius",
            "bits"
        );
        for k in &self.checkpoints {
            let d = &k.proof.decisions;
            let undecided = d.train_signs_undecided + d.tops_undecided + d.test_signs_undecided;
            out += &format!(
                "  {:>7}  {:<24}{:>12}{:>12}  {:>9}{:>6}{:>12.2e}{:>6.0}\n",
                k.step,
                format!("{:.10}", k.train_loss.lo()),
                k.proof.train_correct.to_string(),
                k.proof.test_correct.to_string(),
                undecided,
                d.ties,
                k.proof.radius.largest,
                k.proof.radius.bits_lost
            );
        }
        let verdict = |c: &Count| {
            let v = c.share();
            if c.is_exact() {
                format!("{c} = {:.4} (certified)", v.lo().midpoint(v.hi()))
            } else {
                format!("{c} = [{:.4}, {:.4}] (undecided samples)", v.lo(), v.hi())
            }
        };
        out += &format!(
            "\n  certificate at step {}:\n    train accuracy  {}\n    test accuracy   {}\n",
            self.last().step,
            verdict(&self.train_correct),
            verdict(&self.test_correct)
        );
        if let Some(d) = &self.last().direction {
            let ivl = |x: &Option<Interval>| match x {
                Some(i) => format!("[{:.6e}, {:.6e}]", i.lo(), i.hi()),
                None => "-".into(),
            };
            out += &format!(
                "    direction against the attention SVM: 1 - corr in {}, normalised margin in \
                 {}, on the pattern {}\n",
                ivl(&d.one_minus_corr),
                ivl(&d.margin),
                d.on_pattern
            );
        }
        for (set, counts) in [
            ("clean", &self.selection_counts.clean),
            ("noisy", &self.selection_counts.noisy),
        ] {
            if let Some(s) = counts {
                let parts: Vec<String> = SelectionShare::<f64>::NAMES
                    .iter()
                    .zip(s.to_array())
                    .filter(|(_, c)| c.hi > 0)
                    .map(|(name, c)| format!("{name} {c}"))
                    .collect();
                out += &format!("    {set} samples' top token: {}\n", parts.join(", "));
            }
        }
        out += &match &self.first_undecided {
            None => {
                let what = match prediction_name(&self.config) {
                    "sign of f" => "sign",
                    _ => "argmax of f",
                };
                format!(
                    "    every decision proved: each training top token and {what} at every step, each test {what} at every checkpoint\n"
                )
            }
            Some(u) => format!(
                "    first undecided decision: step {}, {}\n",
                u.step, u.what
            ),
        };
        out += &format!(
            "    largest relative radius {:.3e} at step {}: {:.0} of {} bits lost{}\n",
            self.largest_rel_radius,
            self.largest_at_step,
            self.bits_lost,
            self.trainer.prec_bits,
            if self.bits_lost >= self.trainer.prec_bits as f64 {
                " (every bit: some value's enclosure is as wide as the value or wider)"
            } else {
                ""
            }
        );
        if self.attempts.len() > 1 {
            let tried: Vec<String> = self
                .attempts
                .iter()
                .map(|a| match (&a.stopped, a.decided) {
                    (Some(why), _) => format!("{} bits: stopped ({why})", a.prec_bits),
                    (None, true) => format!("{} bits: decided", a.prec_bits),
                    (None, false) => format!("{} bits: undecided", a.prec_bits),
                })
                .collect();
            out += &format!("    precisions tried: {}\n", tried.join("; "));
        }
        for note in &self.notes {
            out += &format!("    note: {note}\n");
        }
        out += &if let Some(why) = self.stopped() {
            format!("\n  verdict: STOPPED: {why}\n")
        } else if self.decided {
            "\n  verdict: DECIDED: every decision of the final checkpoint is proved\n".to_string()
        } else {
            "\n  verdict: UNDECIDED: some decision of the final checkpoint is not proved (see the intervals)\n".to_string()
        };
        f.write_str(&out)
    }
}
