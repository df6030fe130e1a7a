//! The observer of the certified ball run: at every forward pass the training decisions,
//! the Definition 4.1 ball sums and the radii; at each checkpoint every recorded
//! quantity as an interval (the K-class per-class record included).

use super::*;

/// The largest componentwise relative radius rad / |mid| (an exact zero counts 0, a
/// ball around 0 infinity).
fn componentwise<'a>(xs: impl Iterator<Item = &'a BallReal>) -> Mag {
    xs.fold(Mag::ZERO, |m, x| {
        m.max(x.rad().div_up(Mag::of_float_lower(x.mid())))
    })
}

/// The normwise relative radius max rad / max |mid|.
fn normwise<'a>(xs: impl Iterator<Item = &'a BallReal>) -> Mag {
    let (r, m) = xs.fold((Mag::ZERO, Mag::ZERO), |(r, m), x| {
        (r.max(x.rad()), m.max(Mag::of_float_lower(x.mid())))
    });
    r.div_up(m)
}

/// prec + log2(rel) (MPFR's correctly rounded log2), between 0 and prec: a relative
/// radius of 1 or more (or an infinite one, or one past MPFR's exponents) has lost every
/// bit of the precision.
pub(super) fn bits_lost(prec: u32, rel: Mag) -> f64 {
    if rel.is_zero() {
        return 0.0;
    }
    let l = rel.to_float(64).log2().to_f64();
    if !l.is_finite() || l >= 0.0 {
        return prec as f64;
    }
    (prec as f64 + l).clamp(0.0, prec as f64)
}

/// The relative radii of a ball trainer's last forward pass (q: at checkpoints), and
/// the largest as a bound.
fn radius(tr: &Trainer<'_, Ball>, q: Option<&[BallReal]>) -> (Radius, Mag) {
    let prec = tr.ar.prec();
    let parts = [
        normwise(tr.scores.iter()),
        componentwise(tr.attention.iter()),
        componentwise(tr.samples.iter().map(|s| &s.softmax.rest)),
        // the binary f; a K-class model's margin and its K outputs
        normwise(
            tr.samples
                .iter()
                .flat_map(|s| std::iter::once(&s.f).chain(&s.outputs)),
        ),
        componentwise(std::iter::once(&tr.loss)),
    ];
    let q = q.map(|q| normwise(q.iter()));
    let largest = parts
        .iter()
        .chain(q.iter())
        .fold(Mag::ZERO, |m, r| m.max(*r));
    let r = Radius {
        scores: parts[0].to_f64_up(),
        attention: parts[1].to_f64_up(),
        rest: parts[2].to_f64_up(),
        output: parts[3].to_f64_up(),
        loss: parts[4].to_f64_up(),
        q: q.map(Mag::to_f64_up),
        largest: largest.to_f64_up(),
        bits_lost: bits_lost(prec, largest),
    };
    (r, largest)
}

/// The ball sum of `xs` divided by their count (`None` for no values).
pub(super) fn mean<'a>(ar: &Ball, xs: impl Iterator<Item = &'a BallReal>) -> Option<BallReal> {
    let mut sum = ar.zero();
    let mut n = 0usize;
    for x in xs {
        ar.add(&mut sum, x);
        n += 1;
    }
    (n > 0).then(|| {
        ar.div_f64(&mut sum, n as f64);
        sum
    })
}

/// What the observer keeps between steps.
pub(super) struct Observer {
    schedule: Vec<u64>,
    /// Ball sums of S_i per set (clean, noisy, class +1, class -1).
    cumulative: [BallReal; 4],
    pub(super) first_undecided: Option<Undecided>,
    pub(super) ties: Ties,
    pub(super) largest: (Mag, u64),
    pub(super) checkpoints: Vec<Certified>,
}

impl Observer {
    pub(super) fn new(ar: &Ball, cfg: &Config) -> Observer {
        Observer {
            schedule: record::schedule(cfg.steps, cfg.record.checkpoints_per_decade),
            cumulative: std::array::from_fn(|_| ar.zero()),
            first_undecided: None,
            ties: Ties::default(),
            largest: (Mag::ZERO, 0),
            checkpoints: Vec::new(),
        }
    }

    fn undecided(&mut self, step: u64, what: impl FnOnce() -> String) {
        if self.first_undecided.is_none() {
            self.first_undecided = Some(Undecided { step, what: what() });
        }
    }

    /// Observe the forward pass at `tr.step`.
    pub(super) fn forward(&mut self, tr: &Trainer<'_, Ball>) {
        let ar = tr.ar;
        let step = tr.step;
        let (y, y_true) = (&tr.data.train.y, &tr.data.train.y_true);
        // training decisions at every step
        let mut decisions = Decisions::default();
        let predictions: Vec<Decision> = tr
            .samples
            .iter()
            .zip(y)
            .map(|(s, yi)| Decision::of(&ar, &tr.model, s.model_outputs(), *yi))
            .collect();
        for (i, (s, p)) in tr.samples.iter().zip(&predictions).enumerate() {
            match s.softmax.selection {
                Selection::Undecided => {
                    decisions.tops_undecided += 1;
                    self.undecided(step, || format!("top token of training sample {i}"));
                }
                Selection::Tie => decisions.ties += 1,
                Selection::Decided => {}
            }
            if *p == Decision::Undecided {
                decisions.train_signs_undecided += 1;
                let what = prediction_name(tr.cfg);
                self.undecided(step, || format!("{what} of training sample {i}"));
            }
        }
        if decisions.ties > 0 {
            self.ties.steps += 1;
            self.ties.first.get_or_insert(step);
            self.ties.last = Some(step);
        }
        // Definition 4.1 sums (ball sums over the steps so far)
        let scores = tr.selection_score_values();
        let first = tr.cfg.model.first_label();
        for ((si, yi), ti) in scores.iter().zip(y).zip(y_true) {
            let set = if yi == ti { 0 } else { 1 };
            let class = if *ti == first { 2 } else { 3 };
            ar.add(&mut self.cumulative[set], si);
            ar.add(&mut self.cumulative[class], si);
        }
        let at_checkpoint = self.schedule.binary_search(&step).is_ok();
        let q = at_checkpoint.then(|| tr.q());
        let (rad, largest) = radius(tr, q.as_deref());
        if largest.cmp_value(self.largest.0) == std::cmp::Ordering::Greater {
            self.largest = (largest, step);
        }
        if let Some(q) = q {
            let c = self.checkpoint(tr, &q, &scores, &predictions, decisions, rad);
            self.checkpoints.push(c);
        }
    }

    /// The checkpoint of the forward pass at `tr.step`.
    fn checkpoint(
        &mut self,
        tr: &Trainer<'_, Ball>,
        q: &[BallReal],
        scores: &[BallReal],
        predictions: &[Decision],
        mut decisions: Decisions,
        radius: Radius,
    ) -> Certified {
        let ar = tr.ar;
        let step = tr.step;
        let iv = |x: &BallReal| Interval::of(&ar, x);
        // a quantity that lies in [0, 1] in the reals (1 - s_top, attention masses)
        let share = |x: &BallReal| iv(x).within(0.0, 1.0);
        let (y, y_true) = (&tr.data.train.y, &tr.data.train.y_true);
        let groups = &tr.data.groups;
        let n = tr.samples.len();
        let masses: Vec<[BallReal; 4]> = (0..n).map(|i| tr.group_mass(i)).collect();
        let samples: Vec<SampleState<Interval, SampleProof>> = tr
            .samples
            .iter()
            .enumerate()
            .map(|(i, s)| SampleState {
                f: iv(&s.f),
                outputs: (!s.outputs.is_empty()).then(|| s.outputs.iter().map(iv).collect()),
                proof: SampleProof {
                    prediction: predictions[i],
                },
                top: s.softmax.top,
                selection: s.softmax.selection,
                gap: iv(&s.softmax.gap),
                rest: share(&s.softmax.rest),
                mass: PerGroup::from_array(std::array::from_fn(|g| share(&masses[i][g]))),
                selection_score: iv(&scores[i]).within(0.0, 0.25),
                prompt: None,
            })
            .collect();
        // the test set
        let f_test = tr.test_outputs(Some(q));
        let test: Vec<Decision> = f_test
            .chunks(tr.model.outputs())
            .zip(&tr.data.test.y_true)
            .map(|(f, y)| Decision::of(&ar, &tr.model, f, *y))
            .collect();
        for (i, d) in test.iter().enumerate() {
            if *d == Decision::Undecided {
                decisions.test_signs_undecided += 1;
                let what = prediction_name(tr.cfg);
                self.undecided(step, || format!("{what} of test sample {i}"));
            }
        }
        let correct = |ds: &[Decision]| {
            let count = |want| ds.iter().filter(|d| **d == want).count();
            let (correct, wrong) = (count(Decision::Correct), count(Decision::Wrong));
            Count {
                lo: correct,
                hi: ds.len() - wrong,
                of: ds.len(),
            }
        };
        let (train_correct, test_correct) = (correct(predictions), correct(&test));
        let norm = |v: &[BallReal]| {
            let mut s = ar.zero();
            ar.dot(v, v, &mut s);
            ar.sqrt(&mut s);
            iv(&s).within(0.0, f64::INFINITY)
        };
        let noisy = |i: usize| y[i] != y_true[i];
        let by_noise = |want_noisy: bool| (0..n).filter(move |i| noisy(*i) == want_noisy);
        let attention = |want_noisy: bool| {
            let per: Vec<Option<BallReal>> = (0..4)
                .map(|g| mean(&ar, by_noise(want_noisy).map(|i| &masses[i][g])))
                .collect();
            per[0].is_some().then(|| {
                PerGroup::from_array(std::array::from_fn(|g| {
                    share(per[g].as_ref().expect("same set"))
                }))
            })
        };
        let selection = |want_noisy: bool| {
            let set: Vec<usize> = by_noise(want_noisy).collect();
            (!set.is_empty()).then(|| counts_of(&samples, &set, groups))
        };
        let selection_counts = ByNoise {
            clean: selection(false),
            noisy: selection(true),
        };
        let sum = |k: usize| iv(&self.cumulative[k]).within(0.0, f64::INFINITY);
        // the record's optional parts (`RecordParts`: its readers check them)
        let classes = crate::io::record::RecordParts::of(tr.cfg)
            .classes
            .is_some()
            .then(|| class_metrics(tr, &samples, &f_test, scores));
        let selection =
            selection_counts.map(|c| SelectionShare::from_array(c.to_array().map(|k| k.share())));
        Checkpoint {
            test_loss: None,
            step,
            train_loss: iv(&tr.loss).within(0.0, f64::INFINITY),
            train_accuracy: train_correct.share(),
            test_accuracy: test_correct.share(),
            q_norm: norm(q),
            grad_norm: norm(&tr.grad_q()),
            attention: ByNoise {
                clean: attention(false),
                noisy: attention(true),
            },
            selection,
            cumulative: Cumulative {
                clean: sum(0),
                noisy: sum(1),
                class_pos: sum(2),
                class_neg: sum(3),
            },
            proof: Proof {
                train_correct,
                test_correct,
                selection_counts,
                decisions,
                radius,
            },
            classes,
            direction: tr.direction_values(q).map(|v| {
                let undecided = tr
                    .samples
                    .iter()
                    .filter(|s| s.softmax.selection == Selection::Undecided)
                    .count();
                DirectionPoint {
                    one_minus_corr: v.one_minus_corr.as_ref().map(|x| iv(x).within(0.0, 2.0)),
                    norm: iv(&v.norm).within(0.0, f64::INFINITY),
                    margin: v.margin.as_ref().map(iv),
                    support_deviation: v
                        .support_deviation
                        .as_ref()
                        .map(|x| iv(x).within(0.0, f64::INFINITY)),
                    on_pattern: Count {
                        lo: v.on_pattern,
                        hi: v.on_pattern + undecided,
                        of: n,
                    },
                }
            }),
            samples,
            prompt: None,
        }
    }
}

/// A K-class run's [`ClassMetrics`] as intervals (the f64 recorder's
/// `Trainer::class_metrics` over proved counts): a per-class accuracy is `[proved
/// correct / n_c, (proved correct + undecided) / n_c]` (an argmax proved unique and equal
/// to the label is correct; a proved tie is not), the test set's tie share `[ties / n,
/// (ties + undecided) / n]` and its undecided share `[undecided / n, undecided / n]` (the
/// certificate's own count, as [`SelectionShare::undecided`]); the selection slots over
/// clean and noisy samples as the binary selection counts (a decided top token in its
/// slot, the undecided ones in every slot's upper end); the per-class mean S_i the ball
/// mean of the class's samples, within [0, 1/4]. `samples` the checkpoint's enclosures,
/// `test_f` the test outputs (K per sample), `scores` the training S_i balls.
fn class_metrics(
    tr: &Trainer<'_, Ball>,
    samples: &[SampleState<Interval, SampleProof>],
    test_f: &[BallReal],
    scores: &[BallReal],
) -> ClassMetrics<Interval> {
    use crate::model::multiclass::argmax_status;
    let ar = tr.ar;
    let k = tr.cfg.model.classes;
    let (y, y_true) = (&tr.data.train.y, &tr.data.train.y_true);
    // the share of the samples of each class (by `labels`) whose status is decided and
    // `hit`, plus the undecided ones in the upper end
    let per_class = |labels: &[i8], status: &[(usize, Selection)]| -> Vec<Option<Interval>> {
        (0..k)
            .map(|c| {
                let of: Vec<usize> = (0..labels.len())
                    .filter(|&i| labels[i] as usize == c)
                    .collect();
                let count = |want: Selection| {
                    of.iter()
                        .filter(|&&i| {
                            status[i].1 == want && (want != Selection::Decided || status[i].0 == c)
                        })
                        .count()
                };
                (!of.is_empty()).then(|| {
                    Interval::share(
                        count(Selection::Decided),
                        count(Selection::Undecided),
                        of.len(),
                    )
                })
            })
            .collect()
    };
    let train: Vec<(usize, Selection)> = tr
        .samples
        .iter()
        .map(|s| argmax_status(&ar, &s.outputs))
        .collect();
    let test: Vec<(usize, Selection)> = test_f.chunks(k).map(|f| argmax_status(&ar, f)).collect();
    let n_test = test.len();
    let test_count = |want: Selection| test.iter().filter(|p| p.1 == want).count();
    let test_undecided = test_count(Selection::Undecided);
    // each training sample's slot among ClassSelection's seven (`None`: undecided)
    let slot = |i: usize| -> Option<usize> {
        let s = &samples[i];
        let group = tr.data.groups[s.top];
        let slot = ClassSelection::slot(tr.cfg, group, s.selection, (y[i], y_true[i]), s.top);
        (slot != 6).then_some(slot)
    };
    let selection = |want_noisy: bool| {
        let set: Vec<usize> = (0..samples.len())
            .filter(|&i| (y[i] != y_true[i]) == want_noisy)
            .collect();
        (!set.is_empty()).then(|| {
            let mut decided = [0usize; 7];
            let mut undecided = 0usize;
            for &i in &set {
                match slot(i) {
                    Some(j) => decided[j] += 1,
                    None => undecided += 1,
                }
            }
            let mut shares: [Interval; 7] =
                std::array::from_fn(|j| Interval::share(decided[j], undecided, set.len()));
            shares[6] = Interval::share(undecided, 0, set.len());
            ClassSelection::from_array(shares)
        })
    };
    let selection_score = (0..k)
        .map(|c| {
            mean(
                &ar,
                (0..y_true.len())
                    .filter(|&i| y_true[i] as usize == c)
                    .map(|i| &scores[i]),
            )
            .map(|m| Interval::of(&ar, &m).within(0.0, 0.25))
        })
        .collect();
    ClassMetrics {
        train_accuracy: per_class(y, &train),
        test_accuracy: per_class(&tr.data.test.y_true, &test),
        test_tie: Interval::share(test_count(Selection::Tie), test_undecided, n_test),
        test_undecided: Interval::share(test_undecided, 0, n_test),
        selection: ByNoise {
            clean: selection(false),
            noisy: selection(true),
        },
        selection_score,
    }
}

/// What a prediction is called in `cfg`'s model: "sign of f" (binary) or "argmax of f"
/// (K classes).
pub(super) fn prediction_name(cfg: &Config) -> &'static str {
    if cfg.model.is_multiclass() {
        "argmax of f"
    } else {
        "sign of f"
    }
}

/// The selection counts of the samples `set` (module docs): a group's proved count, and
/// at most that plus the undecided samples.
fn counts_of(
    samples: &[SampleState<Interval, SampleProof>],
    set: &[usize],
    groups: &[Group],
) -> SelectionShare<Count> {
    let mut decided = [0usize; 4];
    let (mut ties, mut undecided) = (0usize, 0usize);
    for &i in set {
        let s = &samples[i];
        match s.selection {
            Selection::Decided => decided[groups[s.top].index()] += 1,
            Selection::Tie => ties += 1,
            Selection::Undecided => undecided += 1,
        }
    }
    let of = set.len();
    let count = |lo: usize, more: usize| Count {
        lo,
        hi: lo + more,
        of,
    };
    SelectionShare {
        r: count(decided[0], undecided),
        w_same: count(decided[1], undecided),
        w_opposite: count(decided[2], undecided),
        i: count(decided[3], undecided),
        tie: count(ties, undecided),
        undecided: count(undecided, 0),
    }
}
