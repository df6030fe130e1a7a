//! One visit order over a checkpoint's record: every leaf of a [`Checkpoint`] (its
//! scalars, the per-set means, each [`SampleState`] with its outputs and prompt record,
//! the K-class [`crate::io::trajectory::ClassMetrics`], the [`DirectionPoint`] and the
//! prompt's shares), named by its dotted path with array indices dropped (`samples.prompt.attention`,
//! `attention.clean.R`), with the range it can take and its value.
//!
//! The consumers of a record (the digest, the CSV, the reader's range checks, `diff`,
//! Python's arrays) are [`Visitor`]s of [`visit`], so a leaf added to the record is seen
//! by each of them: none keeps its own list of fields. The order is fixed (the digest's
//! order, which the committed digests depend on): the step, the scalars, the cumulative
//! sums, the per-set attention and selection shares, per sample its f, top, selection,
//! gap, rest, S_i, group masses, outputs and prompt record, then the per-class metrics,
//! the direction record and the prompt's shares.

use crate::config::{Config, Group};
use crate::io::trajectory::{
    ByNoise, Checkpoint, ClassSelection, DirectionPoint, PerGroup, SampleState, SelectionShare,
};

/// A record's value: an f64 (a trajectory) or an enclosure (a certificate's
/// `analysis::certify::Interval`). The visit hands each leaf's value to the visitors as
/// it is; what a visitor needs of it is here.
pub trait Value: Copy + std::fmt::Debug + PartialEq {
    /// Whether the value lies in `range` (an enclosure: both its ends).
    fn inside(self, range: Range) -> bool;
    /// The value as a message writes it.
    fn show(self) -> String;
    /// The value of a plain number the record holds beside its values (a certificate's
    /// radii: the number itself, as a point enclosure).
    fn point(v: f64) -> Self;
    /// How many numbers one value is written as (1 for an f64; 2 for an enclosure, an
    /// array `[lo, hi]`).
    const WIDTH: usize;
}

impl Value for f64 {
    fn inside(self, range: Range) -> bool {
        range.contains(self)
    }
    fn show(self) -> String {
        format!("{self}")
    }
    fn point(v: f64) -> f64 {
        v
    }
    const WIDTH: usize = 1;
}

/// What a checkpoint carries beside its values, kept apart from them (a certificate's
/// proof: the exact counts behind each share, the decisions, the radii, each sample's
/// prediction, the direction's `on_pattern` as an exact count); nothing for a
/// trajectory (`()`). The visit walks it after the values it stands beside.
pub trait Extras<V: Value> {
    /// What each sample carries beside its values (`()`: nothing).
    type Sample;
    /// The direction record's `on_pattern`: a share (`V`) or an exact count.
    type Pattern: Copy + std::fmt::Debug + PartialEq;
    /// Visit the checkpoint's extras (paths from the checkpoint's root).
    fn visit(&self, v: &mut impl Visitor<V>);
    /// Visit one sample's extras (paths under `samples.`).
    fn visit_sample(s: &Self::Sample, v: &mut impl Visitor<V>);
    /// Visit the direction record's `on_pattern` (path `direction.on_pattern`).
    fn visit_pattern(p: &Self::Pattern, v: &mut impl Visitor<V>);
    /// The extras of a blank checkpoint ([`Checkpoint::blank`]: every count 0, every
    /// decision the first).
    fn blank() -> Self;
    /// A blank sample's extras.
    fn blank_sample() -> Self::Sample;
    /// A blank `on_pattern`.
    fn blank_pattern() -> Self::Pattern;
    /// The checks of checkpoint `c`'s extras against its values and `cfg` (a
    /// certificate's counts of n_train / n_test samples, its decision counts its
    /// samples'); the reader's (`io::trajectory::check_checkpoints`) after the leaves'
    /// ranges. Nothing to check by default (a trajectory's `()`).
    fn check(c: &Checkpoint<V, Self>, cfg: &Config) -> Result<(), String>
    where
        Self: Sized,
    {
        let _ = (c, cfg);
        Ok(())
    }
}

impl<V: Value> Extras<V> for () {
    type Sample = ();
    type Pattern = V;
    fn visit(&self, _: &mut impl Visitor<V>) {}
    fn visit_sample(_: &(), _: &mut impl Visitor<V>) {}
    fn visit_pattern(p: &V, v: &mut impl Visitor<V>) {
        v.real("direction.on_pattern", Range::Within(0.0, 1.0), *p);
    }
    fn blank() {}
    fn blank_sample() {}
    fn blank_pattern() -> V {
        V::point(0.0)
    }
}

/// Which optional parts a checkpoint's record holds for a config: the one declaration
/// the writers (`train::record`, `analysis::certify`) and the readers
/// (`io::trajectory::check_checkpoints`, a certificate's reader) and claims' schema
/// follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordParts {
    /// A K-class model's K: the per-class metrics `classes` and each sample's K
    /// `outputs` (`None`: the binary model, neither).
    pub classes: Option<usize>,
    /// The in-sequence prompt: each sample's `prompt` record and the checkpoint's
    /// `prompt` shares.
    pub prompt: bool,
    /// The config's `[direction]` section: the `direction` record.
    pub direction: bool,
    /// A network model (the encoder): the test set's mean loss `test_loss`.
    pub test_loss: bool,
}

impl RecordParts {
    /// Every optional part (three classes): the record of no one config, whose leaves
    /// are every leaf a config's record can hold (claims' schema).
    pub const ALL: RecordParts = RecordParts {
        classes: Some(3),
        prompt: true,
        direction: true,
        test_loss: true,
    };

    /// The parts of `cfg`'s record.
    pub fn of(cfg: &Config) -> RecordParts {
        RecordParts {
            classes: cfg.model.is_multiclass().then_some(cfg.model.classes),
            // a network's attending row has its own in-sequence position (the
            // encoder's cls token)
            prompt: cfg.model.in_sequence() || cfg.model.is_network(),
            direction: cfg.direction.is_some(),
            test_loss: cfg.model.is_network(),
        }
    }

    /// Whether checkpoint `c` holds exactly these parts (each sample `K` outputs and
    /// each per-class list `K` entries); the error says which part does not fit, for a
    /// checkpoint's message.
    pub fn check<V: Value, X: Extras<V>>(&self, c: &Checkpoint<V, X>) -> Result<(), String> {
        let presence = |what: &str, has: bool, want: bool, why: &str| match (has, want) {
            (true, false) => Err(format!("it has {what}, which {why} does not record")),
            (false, true) => Err(format!("{what} is missing, which {why} records")),
            _ => Ok(()),
        };
        let model = match self.classes {
            Some(k) => format!("the config's {k}-class model"),
            None => "the config's binary model".into(),
        };
        presence(
            "per-class metrics (`classes`)",
            c.classes.is_some(),
            self.classes.is_some(),
            &model,
        )?;
        for (i, s) in c.samples.iter().enumerate() {
            let outputs = s.outputs.as_ref().map(Vec::len);
            if outputs != self.classes {
                return Err(match (outputs, self.classes) {
                    (Some(m), Some(k)) => format!("samples[{i}] has {m} outputs; {model} has {k}"),
                    (Some(_), None) => {
                        format!("samples[{i}] has `outputs`, which {model} does not record")
                    }
                    _ => format!("samples[{i}] has no `outputs`, which {model} records"),
                });
            }
        }
        if let (Some(m), Some(k)) = (&c.classes, self.classes) {
            for (name, len) in [
                ("train_accuracy", m.train_accuracy.len()),
                ("test_accuracy", m.test_accuracy.len()),
                ("selection_score", m.selection_score.len()),
            ] {
                if len != k {
                    return Err(format!(
                        "`classes.{name}` has {len} entries; {model} has {k}"
                    ));
                }
            }
        }
        let prompt = match self.test_loss {
            // a network's attending row has its own position 0 (the encoder's cls token)
            true => "the config's network model (its cls token at position 0)",
            false => "the config's prompt (`in-sequence`)",
        };
        let separate = "the config's separate prompt";
        let why = if self.prompt { prompt } else { separate };
        presence(
            "the prompt's shares (`prompt`)",
            c.prompt.is_some(),
            self.prompt,
            why,
        )?;
        for (i, s) in c.samples.iter().enumerate() {
            presence(
                &format!("samples[{i}].prompt"),
                s.prompt.is_some(),
                self.prompt,
                why,
            )?;
        }
        let why = if self.direction {
            "the config's [direction] section"
        } else {
            "a config without a [direction] section"
        };
        presence(
            "a direction record (`direction`)",
            c.direction.is_some(),
            self.direction,
            why,
        )?;
        let why = if self.test_loss {
            "the config's network model"
        } else {
            "a token-selection model"
        };
        presence(
            "the test set's loss (`test_loss`)",
            c.test_loss.is_some(),
            self.test_loss,
            why,
        )
    }
}

/// What a number of the record can be (the reader refuses a value outside; a value a run
/// can record, NaN where it stopped at a non-finite value, is inside unless said).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Range {
    /// Any number, NaN and infinities included (an output, a score gap).
    Real,
    /// A share in [0, 1] (up to rounding: [`SHARE_SLACK`]), or NaN.
    Share,
    /// A number >= 0 (up to [`SHARE_SLACK`]), +inf or NaN (a norm, a sum of scores, a
    /// loss: log1p(exp(-u)) or -u + log1p(exp(u)), the K-class (f_m - f_Y) + log1p(...),
    /// each term >= 0 in every arithmetic; a certificate's loss enclosure is cut to
    /// [0, inf) by its writer).
    NonNegative,
    /// In [lo, hi] (up to [`SHARE_SLACK`]) and never NaN (a direction record, whose
    /// tracker records `None` where a value is undefined); `hi = f64::MAX` reads "finite
    /// and >= lo".
    Within(f64, f64),
}

/// Rounding allowed past a range's bounds for a value summed in floating point (f32
/// included).
pub const SHARE_SLACK: f64 = 1e-6;

impl Range {
    /// Whether `v` is in the range.
    pub fn contains(self, v: f64) -> bool {
        let (lo, hi, nan) = match self {
            Range::Real => return true,
            Range::Share => (0.0, 1.0, true),
            Range::NonNegative => (0.0, f64::INFINITY, true),
            Range::Within(lo, hi) => (lo, hi, false),
        };
        (nan && v.is_nan()) || (lo - SHARE_SLACK..=hi + SHARE_SLACK).contains(&v)
    }

    /// The range of the difference of two values in this range (a claim on the change
    /// from a baseline step): a share's in [-1, 1], [lo, hi]'s in [lo - hi, hi - lo];
    /// any number where the range is unbounded.
    pub fn difference(self) -> Range {
        match self {
            Range::Real | Range::NonNegative => Range::Real,
            Range::Share => Range::Within(-1.0, 1.0),
            Range::Within(lo, hi) if (hi - lo).is_finite() => Range::Within(lo - hi, hi - lo),
            Range::Within(..) => Range::Real,
        }
    }

    /// The range in words ("in [0, 1]", "finite and >= 0", ...).
    pub fn describe(self) -> String {
        match self {
            Range::Real => "any number".into(),
            Range::Share => "in [0, 1]".into(),
            Range::NonNegative => ">= 0".into(),
            Range::Within(lo, f64::MAX) if lo == -f64::MAX => "a finite number".into(),
            Range::Within(lo, f64::MAX) => format!("finite and >= {lo}"),
            Range::Within(lo, hi) => format!("in [{lo}, {hi}]"),
        }
    }
}

/// A consumer of a checkpoint's record: one method per kind of leaf, each called with
/// the leaf's dotted path (array indices dropped) in [`visit`]'s order.
pub trait Visitor<V: Value = f64> {
    /// The step count (`step`: it defines the checkpoint set, it is not a measurement).
    fn count(&mut self, path: &str, v: u64);
    /// A number that is always present.
    fn real(&mut self, path: &str, range: Range, v: V);
    /// A number that may be absent (`None`: an empty set of samples, a class without
    /// samples, an undefined direction value).
    fn optional(&mut self, path: &str, range: Range, v: Option<V>);
    /// A position `v` < `bound` (a sample's top token among the T).
    fn index(&mut self, path: &str, bound: usize, v: usize);
    /// One of `names` (`v` < `names.len()`: a sample's selection, as
    /// [`crate::model::Selection::code`]).
    fn category(&mut self, path: &str, names: &'static [&'static str], v: u8);
    /// A yes / no (whether the in-sequence prompt is a sample's top position).
    fn flag(&mut self, path: &str, v: bool);
    /// Not a leaf: the leaves under `path` that follow are the `len` entries of a list
    /// (`samples`, a sample's `outputs`, a per-class list), each entry's leaves in turn.
    /// Visitors that read values only ignore it.
    fn list(&mut self, path: &str, len: usize) {
        let _ = (path, len);
    }
}

/// The names of [`crate::model::Selection`]'s codes.
pub const SELECTION_NAMES: [&str; 3] = ["decided", "tie", "undecided"];

/// Visit every leaf of `c` in the one fixed order (see the module's documentation);
/// `tokens` is T, the bound of a sample's top token. A certificate's checkpoint
/// (`V` an enclosure) is walked in the same order, its extras ([`Extras`]) after the
/// values they stand beside: the checkpoint's after the cumulative sums, a sample's
/// after its outputs, the direction's `on_pattern` in its place.
pub fn visit<V: Value, X: Extras<V>>(c: &Checkpoint<V, X>, tokens: usize, v: &mut impl Visitor<V>) {
    v.count("step", c.step);
    v.real("train_loss", Range::NonNegative, c.train_loss);
    if let Some(x) = c.test_loss {
        v.real("test_loss", Range::NonNegative, x);
    }
    v.real("train_accuracy", Range::Share, c.train_accuracy);
    v.real("test_accuracy", Range::Share, c.test_accuracy);
    v.real("q_norm", Range::NonNegative, c.q_norm);
    v.real("grad_norm", Range::NonNegative, c.grad_norm);
    let cu = &c.cumulative;
    for (name, x) in [
        ("clean", cu.clean),
        ("noisy", cu.noisy),
        ("class_pos", cu.class_pos),
        ("class_neg", cu.class_neg),
    ] {
        v.real(&format!("cumulative.{name}"), Range::NonNegative, x);
    }
    c.proof.visit(v);
    let groups = Group::ALL.map(Group::name);
    by_noise(v, "attention", groups, c.attention.map(PerGroup::to_array));
    let selection = c.selection.map(SelectionShare::to_array);
    by_noise(v, "selection", SelectionShare::NAMES, selection);
    v.list("samples", c.samples.len());
    for s in &c.samples {
        sample::<V, X>(v, s, tokens);
    }
    if let Some(k) = &c.classes {
        v.list("classes.train_accuracy", k.train_accuracy.len());
        for x in &k.train_accuracy {
            v.optional("classes.train_accuracy", Range::Share, *x);
        }
        v.list("classes.test_accuracy", k.test_accuracy.len());
        for x in &k.test_accuracy {
            v.optional("classes.test_accuracy", Range::Share, *x);
        }
        v.real("classes.test_tie", Range::Share, k.test_tie);
        v.real("classes.test_undecided", Range::Share, k.test_undecided);
        let selection = k.selection.map(ClassSelection::to_array);
        by_noise(v, "classes.selection", ClassSelection::NAMES, selection);
        v.list("classes.selection_score", k.selection_score.len());
        for x in &k.selection_score {
            v.optional("classes.selection_score", Range::Share, *x);
        }
    }
    if let Some(d) = &c.direction {
        direction::<V, X>(v, d);
    }
    // the prompt's shares nest the other way round: quantity, then set
    if let Some(p) = &c.prompt {
        for (what, x) in [("attention", p.attention), ("top", p.top)] {
            for (set, u) in [("clean", x.clean), ("noisy", x.noisy)] {
                v.optional(&format!("prompt.{what}.{set}"), Range::Share, u);
            }
        }
    }
}

/// `prefix.{clean,noisy}.{names}`, each optional (a set without samples).
fn by_noise<V: Value, const N: usize>(
    v: &mut impl Visitor<V>,
    prefix: &str,
    names: [&str; N],
    x: ByNoise<[V; N]>,
) {
    for (set, u) in [("clean", x.clean), ("noisy", x.noisy)] {
        for (k, name) in names.iter().enumerate() {
            v.optional(
                &format!("{prefix}.{set}.{name}"),
                Range::Share,
                u.map(|u| u[k]),
            );
        }
    }
}

/// One sample's leaves.
fn sample<V: Value, X: Extras<V>>(
    v: &mut impl Visitor<V>,
    s: &SampleState<V, X::Sample>,
    tokens: usize,
) {
    v.real("samples.f", Range::Real, s.f);
    v.index("samples.top", tokens, s.top);
    v.category("samples.selection", &SELECTION_NAMES, s.selection.code());
    v.real("samples.gap", Range::Real, s.gap);
    v.real("samples.rest", Range::Share, s.rest);
    v.real("samples.selection_score", Range::Share, s.selection_score);
    for (g, m) in Group::ALL.iter().zip(s.mass.to_array()) {
        v.real(&format!("samples.mass.{}", g.name()), Range::Share, m);
    }
    if let Some(outputs) = &s.outputs {
        v.list("samples.outputs", outputs.len());
        for o in outputs {
            v.real("samples.outputs", Range::Real, *o);
        }
    }
    X::visit_sample(&s.proof, v);
    if let Some(p) = &s.prompt {
        v.real("samples.prompt.attention", Range::Share, p.attention);
        v.flag("samples.prompt.top", p.top);
    }
}

/// The direction record's leaves.
fn direction<V: Value, X: Extras<V>>(v: &mut impl Visitor<V>, d: &DirectionPoint<V, X::Pattern>) {
    let (finite, non_negative) = (
        Range::Within(-f64::MAX, f64::MAX),
        Range::Within(0.0, f64::MAX),
    );
    v.optional(
        "direction.one_minus_corr",
        Range::Within(0.0, 2.0),
        d.one_minus_corr,
    );
    v.real("direction.norm", non_negative, d.norm);
    v.optional("direction.margin", finite, d.margin);
    v.optional(
        "direction.support_deviation",
        non_negative,
        d.support_deviation,
    );
    X::visit_pattern(&d.on_pattern, v);
}

/// A leaf's value as one number: a count, an index and a category code as themselves, a
/// flag as 0 or 1, an absent value as NaN (the digest's numbers).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Leaf<V = f64> {
    /// The step (a certificate's exact counts too).
    Count(u64),
    /// A number (`None`: absent).
    Number(Option<V>),
    /// A position.
    Index(usize),
    /// A category's code.
    Category(u8),
    /// A yes / no.
    Flag(bool),
}

impl Leaf {
    /// The leaf as one f64 (NaN where absent).
    pub fn number(self) -> f64 {
        match self {
            Leaf::Count(v) => v as f64,
            Leaf::Number(v) => v.unwrap_or(f64::NAN),
            Leaf::Index(v) => v as f64,
            Leaf::Category(v) => f64::from(v),
            Leaf::Flag(v) => f64::from(u8::from(v)),
        }
    }
}

/// Every leaf of a checkpoint with its path, in visit order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Leaves<V = f64>(pub Vec<(String, Leaf<V>)>);

impl<V: Value> Leaves<V> {
    /// The leaves of `c` (T = `tokens`).
    pub fn of<X: Extras<V>>(c: &Checkpoint<V, X>, tokens: usize) -> Leaves<V> {
        let mut l = Leaves(Vec::new());
        visit(c, tokens, &mut l);
        l
    }
}

impl<V: Value> Visitor<V> for Leaves<V> {
    fn count(&mut self, path: &str, v: u64) {
        self.0.push((path.into(), Leaf::Count(v)));
    }
    fn real(&mut self, path: &str, _: Range, v: V) {
        self.0.push((path.into(), Leaf::Number(Some(v))));
    }
    fn optional(&mut self, path: &str, _: Range, v: Option<V>) {
        self.0.push((path.into(), Leaf::Number(v)));
    }
    fn index(&mut self, path: &str, _: usize, v: usize) {
        self.0.push((path.into(), Leaf::Index(v)));
    }
    fn category(&mut self, path: &str, _: &'static [&'static str], v: u8) {
        self.0.push((path.into(), Leaf::Category(v)));
    }
    fn flag(&mut self, path: &str, v: bool) {
        self.0.push((path.into(), Leaf::Flag(v)));
    }
}

/// The reader's range checks: the first leaf outside its range, named by its path with
/// the sample's or class's index (`samples[3].prompt.attention 1.5 is outside [0, 1]`).
#[derive(Debug, Default)]
struct Check {
    /// How many leaves of each path were seen (the index of the next one).
    seen: std::collections::HashMap<String, usize>,
    /// The first leaf out of range.
    error: Option<String>,
}

impl Check {
    /// `path` with the index of this leaf where it is one of several (a sample's, a
    /// class's): `samples[3].rest`, `classes.train_accuracy[1]`.
    fn name(&mut self, path: &str) -> String {
        let seen = self.seen.entry(path.to_string()).or_insert(0);
        let i = *seen;
        *seen += 1;
        if let Some(rest) = path.strip_prefix("samples.") {
            format!("samples[{i}].{rest}")
        } else if matches!(
            path,
            "classes.train_accuracy" | "classes.test_accuracy" | "classes.selection_score"
        ) {
            format!("{path}[{i}]")
        } else {
            path.to_string()
        }
    }

    /// Record an error unless one is already recorded.
    fn fail(&mut self, message: String) {
        self.error.get_or_insert(message);
    }
}

impl<V: Value> Visitor<V> for Check {
    fn count(&mut self, _: &str, _: u64) {}
    fn real(&mut self, path: &str, range: Range, v: V) {
        let name = self.name(path);
        if v.inside(range) {
            return;
        }
        let v = v.show();
        self.fail(match (path.strip_prefix("direction."), range) {
            (Some(field), _) => format!(
                "the direction record's `{field}` is {v}; it can only be {}",
                range.describe()
            ),
            (None, Range::Share) => format!("{name} {v} is outside [0, 1]"),
            (None, _) => format!(
                "{name} {v} is out of range: it can only be {}",
                range.describe()
            ),
        });
    }
    fn optional(&mut self, path: &str, range: Range, v: Option<V>) {
        match v {
            Some(v) => self.real(path, range, v),
            None => {
                self.name(path);
            }
        }
    }
    fn index(&mut self, path: &str, bound: usize, v: usize) {
        let name = self.name(path);
        if v >= bound {
            self.fail(format!(
                "{name} = {v} is not a token position (top < T = {bound})"
            ));
        }
    }
    fn category(&mut self, path: &str, names: &'static [&'static str], v: u8) {
        let name = self.name(path);
        if usize::from(v) >= names.len() {
            self.fail(format!("{name} = {v} is not one of {names:?}"));
        }
    }
    fn flag(&mut self, path: &str, _: bool) {
        self.name(path);
    }
}

/// Every leaf of `c` within its range (a share in [0, 1] up to [`SHARE_SLACK`], a norm
/// at least 0, a top token < T = `tokens`, a direction record's numbers as
/// [`Range::Within`]); the error names the first leaf outside by its path. A number
/// outside (an attention share of -3.0, a prompt attention of 1.5, an infinite share)
/// is refused, not drawn; NaN, the non-finite value a run can record, is read back as
/// such where the range allows it (`io::nonfinite`: diff reports it as an infinite
/// deviation).
pub fn check<V: Value, X: Extras<V>>(c: &Checkpoint<V, X>, tokens: usize) -> Result<(), String> {
    let mut check = Check::default();
    visit(c, tokens, &mut check);
    check.error.map_or(Ok(()), Err)
}
