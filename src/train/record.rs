//! What a checkpoint records, and when: the log-spaced schedule, the Definition 4.1
//! accumulation (proofs-notes/definition-4-1.md), the aggregation of per-sample values
//! over clean and noisy samples, and a [`Checkpoint`] built from a trainer. The format
//! these end up in is `io::trajectory`'s.

use crate::arith::Arith;
use crate::config::{Config, Group};
use crate::error::{Error, Result};
use crate::io::trajectory::{
    self, ByNoise, Checkpoint, ClassMetrics, ClassSelection, Cumulative, DirectionPoint, PerGroup,
    PromptShare, PromptState, SampleState, SelectionShare, Trajectory,
};
use crate::model::multiclass::argmax_status;
use crate::model::token_selection::limit::{Space, off_pattern};
use crate::model::{Model, Selection, Softmax};

use super::Trainer;
use super::direction::DirectionValues;

/// Log-spaced checkpoint steps: 0, then round(10^(k / per_decade)) for k = 0, 1, ...,
/// deduplicated, and always `steps` itself (10^x by CORE-MATH's correctly rounded
/// `exp10`: the same steps on every platform).
pub fn schedule(steps: u64, per_decade: u32) -> Vec<u64> {
    let mut out = vec![0];
    let mut k = 0u32;
    loop {
        let s = core_math::exp10(k as f64 / per_decade as f64).round() as u64;
        if s >= steps {
            break;
        }
        if s > *out.last().expect("non-empty") {
            out.push(s);
        }
        k += 1;
    }
    if steps > 0 {
        out.push(steps);
    }
    out
}

/// Bytes one training sample's record at one checkpoint may take, bounded above: its
/// state in memory ([`SampleState`], 80 bytes), its text in the pretty trajectory JSON
/// (at most ~520 bytes: eight numbers of up to 24 characters, keys and indentation;
/// tested), and its JSON value where a claims file reads checkpoints (serde_json's
/// map nodes, about 1 KiB).
pub const SAMPLE_RECORD_BYTES: u64 = 2048;

/// Bytes one checkpoint takes besides its samples (losses, accuracies, the group and
/// selection shares, the cumulative sums: about 40 numbers, in memory and as text).
pub const CHECKPOINT_BYTES: u64 = 4096;

/// Largest size a recorded trajectory may take, in bytes (see [`trajectory_bytes`]):
/// larger runs are refused before their data is made.
pub const MAX_TRAJECTORY_BYTES: u64 = 8 << 30;

/// Bytes the trajectory of `cfg`'s run takes at most: the checkpoints of its
/// [`schedule`], each with every training sample's record.
pub fn trajectory_bytes(cfg: &Config) -> u64 {
    let checkpoints = schedule(cfg.steps, cfg.record.checkpoints_per_decade).len() as u128;
    let per_checkpoint =
        cfg.n_train as u128 * SAMPLE_RECORD_BYTES as u128 + CHECKPOINT_BYTES as u128;
    (checkpoints * per_checkpoint).min(u64::MAX as u128) as u64
}

/// Refuse a run whose recorded trajectory would exceed [`MAX_TRAJECTORY_BYTES`]
/// (a size over a limit, naming the checkpoints, the samples and the limit).
pub fn check_size(cfg: &Config) -> Result<()> {
    crate::model::token_selection::limit::check_sizes(cfg)?;
    let bytes = trajectory_bytes(cfg);
    if bytes > MAX_TRAJECTORY_BYTES {
        let checkpoints = schedule(cfg.steps, cfg.record.checkpoints_per_decade).len();
        return Err(Error::TooLarge {
            field: "record.checkpoints_per_decade".into(),
            reason: format!(
                "the trajectory records {checkpoints} checkpoints x {} training samples, about \
                 {:.1} GiB, more than the limit of {} GiB (record fewer checkpoints per decade, \
                 or train on fewer samples or steps)",
                cfg.n_train,
                bytes as f64 / (1u64 << 30) as f64,
                MAX_TRAJECTORY_BYTES >> 30
            ),
        });
    }
    Ok(())
}

/// Add one step's Definition 4.1 scores `scores[i]` (training samples in order) to the
/// sums of each set; `first` is the label of the first class (+1 binary; class 0 of K),
/// whose samples' sum is `class_pos` (the others' `class_neg`).
pub fn accumulate(sums: &mut Cumulative, scores: &[f64], y: &[i8], y_true: &[i8], first: i8) {
    for ((si, yi), ti) in scores.iter().zip(y).zip(y_true) {
        if yi == ti {
            sums.clean += si;
        } else {
            sums.noisy += si;
        }
        if *ti == first {
            sums.class_pos += si;
        } else {
            sums.class_neg += si;
        }
    }
}

/// The mean of a per-sample vector over clean and over noisy training samples
/// (`values[i]` for sample i, summed in sample order; `y`, `y_true` the labels; `None`
/// for an empty set).
pub fn mean_by_noise<const N: usize>(
    values: &[[f64; N]],
    y: &[i8],
    y_true: &[i8],
) -> ByNoise<[f64; N]> {
    let over = |noisy: bool| {
        let mut acc = [0.0; N];
        let mut n = 0usize;
        for (i, v) in values.iter().enumerate() {
            if (y[i] != y_true[i]) == noisy {
                n += 1;
                for (a, x) in acc.iter_mut().zip(v) {
                    *a += x;
                }
            }
        }
        (n > 0).then(|| acc.map(|a| a / n as f64))
    };
    ByNoise {
        clean: over(false),
        noisy: over(true),
    }
}

/// The mean attention mass per group over clean and over noisy training samples
/// (`mass[i]` for sample i).
pub fn attention_by_noise(mass: &[[f64; 4]], y: &[i8], y_true: &[i8]) -> ByNoise {
    mean_by_noise(mass, y, y_true).map(PerGroup::from_array)
}

/// The share of clean and of noisy training samples whose top token is decided in each
/// group, ties, or is undecided (`tops[i]`: sample i's selection and its top token's
/// group).
pub fn selection_by_noise(
    tops: impl Iterator<Item = (Selection, Group)>,
    y: &[i8],
    y_true: &[i8],
) -> ByNoise<SelectionShare> {
    let one_hot: Vec<[f64; 6]> = tops
        .map(|(selection, group)| {
            let mut v = [0.0; 6];
            v[SelectionShare::index(selection, group)] = 1.0;
            v
        })
        .collect();
    mean_by_noise(&one_hot, y, y_true).map(SelectionShare::from_array)
}

/// The attention mass of each group, in [`Group::ALL`] order, of one sample's
/// attention `s` on its T tokens (position order; `groups` their groups), summed in
/// `ar` in token order.
pub fn group_mass<A: Arith>(ar: &A, s: &[A::Real], groups: &[Group]) -> [A::Real; 4] {
    let mut m: [A::Real; 4] = std::array::from_fn(|_| ar.zero());
    for (st, grp) in s.iter().zip(groups) {
        ar.add(&mut m[grp.index()], st);
    }
    m
}

/// The Definition 4.1 score S = m_R (m_W_same + m_W_opposite + m_I) of one sample's
/// group masses `m` ([`group_mass`]; 1 - m_R as the sum of the other groups: no
/// cancellation), in `ar`.
pub fn selection_score<A: Arith>(ar: &A, m: [A::Real; 4]) -> A::Real {
    let [r, mut ws, wo, irr] = m;
    ar.add(&mut ws, &wo);
    ar.add(&mut ws, &irr);
    ar.mul(&mut ws, &r);
    ws
}

impl<A: Arith, M: Model> Trainer<'_, A, M> {
    /// Group masses of training sample `i` (last forward pass), in [`Group::ALL`] order,
    /// summed in this arithmetic in token order: the attention on the tokens 1..=T of
    /// each group where the prompt is in the sequence (the prompt's s_0 in no group).
    pub fn group_mass(&self, i: usize) -> [A::Real; 4] {
        let t = self.data.groups.len();
        let pos = self.positions();
        group_mass(
            &self.ar,
            &self.attention[i * pos + pos - t..(i + 1) * pos],
            &self.data.groups,
        )
    }

    /// Attention mass per group of training sample `i` (last forward pass), rounded.
    pub fn mass(&self, i: usize) -> PerGroup {
        PerGroup::from_array(self.group_mass(i).map(|m| self.ar.to_f64(&m)))
    }

    /// Definition 4.1 scores S_i = m_R (m_W_same + m_W_opposite + m_I) of every training
    /// sample (1 - m_R as the sum of the other groups: no cancellation), rounded.
    pub fn selection_scores(&self) -> Vec<f64> {
        let ar = &self.ar;
        self.selection_score_values()
            .iter()
            .map(|v| ar.to_f64(v))
            .collect()
    }

    /// The Definition 4.1 scores of [`Trainer::selection_scores`] in this arithmetic.
    pub fn selection_score_values(&self) -> Vec<A::Real> {
        (0..self.samples.len())
            .map(|i| self.selection_score_value(i))
            .collect()
    }

    /// The Definition 4.1 score of training sample `i` in this arithmetic (its last
    /// forward pass).
    pub fn selection_score_value(&self, i: usize) -> A::Real {
        selection_score(&self.ar, self.group_mass(i))
    }

    /// Training samples whose prediction (in this arithmetic, proved: [`Model::predict`])
    /// is their observed label, at the last forward pass.
    pub fn train_correct(&self) -> usize {
        self.samples
            .iter()
            .zip(&self.data.train.y)
            .filter(|(s, y)| self.model.predict(&self.ar, s.model_outputs()) == Some(**y))
            .count()
    }

    /// Training sample `i`'s softmax summary over its tokens (last forward pass): the
    /// sample's own with a separate prompt; with the prompt in sequence the softmax of
    /// the scores of positions 1..=T alone (top token index, selection, gap and 1 -
    /// s_top among the tokens of X), so that a token's group is never the prompt's.
    pub fn token_softmax(&self, i: usize) -> Softmax<A::Real> {
        if !self.in_sequence() {
            return self.samples[i].softmax.clone();
        }
        let ar = &self.ar;
        let pos = self.positions();
        let z = &self.scores[i * pos + 1..(i + 1) * pos];
        let mut s = ar.zeros(z.len());
        let mut att = Softmax::new(ar);
        crate::model::softmax(ar, z, &mut s, self.form, &mut att);
        att
    }

    /// The share of clean and noisy training samples whose top token is decided in each
    /// group, ties, or is undecided, at the last forward pass (among the tokens 1..=T
    /// with the prompt in sequence: [`Trainer::token_softmax`]).
    pub fn selection_share(&self) -> ByNoise<SelectionShare> {
        let groups = &self.data.groups;
        let tops: Vec<Softmax<A::Real>> = (0..self.samples.len())
            .map(|i| self.token_softmax(i))
            .collect();
        selection_by_noise(
            tops.iter().map(|s| (s.selection, groups[s.top])),
            &self.data.train.y,
            &self.data.train.y_true,
        )
    }

    /// A checkpoint of the last [`Trainer::forward_backward`] (evaluates the test set);
    /// `cumulative` holds the Definition 4.1 sums up to this step.
    pub fn checkpoint(&self, cumulative: Cumulative) -> Checkpoint {
        // the record's optional parts, as its readers check them
        let parts = crate::io::record::RecordParts::of(self.cfg);
        let ar = &self.ar;
        let scores = self.selection_scores();
        let pos = self.positions();
        let samples: Vec<SampleState> = self
            .samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let tok = self.token_softmax(i);
                SampleState {
                    f: ar.to_f64(&s.f),
                    outputs: (!s.outputs.is_empty())
                        .then(|| s.outputs.iter().map(|v| ar.to_f64(v)).collect()),
                    proof: (),
                    top: tok.top,
                    selection: tok.selection,
                    gap: ar.to_f64(&tok.gap),
                    rest: ar.to_f64(&tok.rest),
                    mass: self.mass(i),
                    selection_score: scores[i],
                    prompt: parts.prompt.then(|| PromptState {
                        attention: ar.to_f64(&self.attention[i * pos]),
                        top: s.softmax.top == 0,
                    }),
                }
            })
            .collect();
        let q = self.q();
        let (y, y_true) = (&self.data.train.y, &self.data.train.y_true);
        let mass: Vec<[f64; 4]> = samples.iter().map(|s| s.mass.to_array()).collect();
        let groups = &self.data.groups;
        let test_f = self.test_outputs(Some(&q));
        let classes = parts
            .classes
            .is_some()
            .then(|| self.class_metrics(&test_f, &scores, &samples));
        let direction = self.direction_values(&q).map(|v| DirectionPoint {
            one_minus_corr: v.one_minus_corr.map(|x| ar.to_f64(&x)),
            norm: ar.to_f64(&v.norm),
            margin: v.margin.map(|x| ar.to_f64(&x)),
            support_deviation: v.support_deviation.map(|x| ar.to_f64(&x)),
            on_pattern: v.on_pattern as f64 / self.samples.len().max(1) as f64,
        });
        Checkpoint {
            proof: (),
            test_loss: None,
            step: self.step,
            train_loss: ar.to_f64(&self.loss),
            train_accuracy: self.train_correct() as f64 / self.samples.len() as f64,
            test_accuracy: self.test_metrics_of(&test_f).0,
            q_norm: norm(ar, &q),
            grad_norm: norm(ar, &self.grad_q()),
            attention: attention_by_noise(&mass, y, y_true),
            selection: selection_by_noise(
                samples.iter().map(|s| (s.selection, groups[s.top])),
                y,
                y_true,
            ),
            cumulative,
            prompt: parts.prompt.then(|| prompt_share(&samples, y, y_true)),
            samples,
            classes,
            direction,
        }
    }

    /// The direction record at the last forward pass in this arithmetic (`None` unless
    /// [`Trainer::track_direction`] was called); `q` the current q = W^T p.
    pub fn direction_values(&self, q: &[A::Real]) -> Option<DirectionValues<A::Real>> {
        let t = self.direction.as_ref()?;
        let theta = match t.space {
            Space::Q => q.to_vec(),
            Space::P => self.p(),
        };
        let tops: Vec<(usize, Selection)> = self
            .samples
            .iter()
            .map(|s| (s.softmax.top, s.softmax.selection))
            .collect();
        Some(t.values(&self.ar, &theta, &self.scores, &tops))
    }

    /// A K-class run's [`ClassMetrics`] at the last forward pass: `test_f` the test
    /// outputs ([`Trainer::test_outputs`]), `scores` the training samples' Definition 4.1
    /// scores.
    fn class_metrics(
        &self,
        test_f: &[A::Real],
        scores: &[f64],
        states: &[SampleState],
    ) -> ClassMetrics {
        let ar = &self.ar;
        let k = self.cfg.model.classes;
        let (y, y_true) = (&self.data.train.y, &self.data.train.y_true);
        // the share of `hit` over the samples of each class
        let per_class = |labels: &[i8], hit: &dyn Fn(usize) -> bool| -> Vec<Option<f64>> {
            (0..k)
                .map(|c| {
                    let of: Vec<usize> = (0..labels.len())
                        .filter(|&i| labels[i] as usize == c)
                        .collect();
                    (!of.is_empty())
                        .then(|| of.iter().filter(|&&i| hit(i)).count() as f64 / of.len() as f64)
                })
                .collect()
        };
        let train: Vec<(usize, Selection)> = self
            .samples
            .iter()
            .map(|s| argmax_status(ar, &s.outputs))
            .collect();
        let test: Vec<(usize, Selection)> =
            test_f.chunks(k).map(|f| argmax_status(ar, f)).collect();
        let correct =
            |p: &(usize, Selection), c: i8| p.1 == Selection::Decided && p.0 == c as usize;
        let test_true = &self.data.test.y_true;
        let share = |status: Selection| {
            test.iter().filter(|p| p.1 == status).count() as f64 / test.len() as f64
        };
        let one_hot: Vec<[f64; 7]> = states
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let group = self.data.groups[s.top];
                let slot =
                    ClassSelection::slot(self.cfg, group, s.selection, (y[i], y_true[i]), s.top);
                let mut v = [0.0; 7];
                v[slot] = 1.0;
                v
            })
            .collect();
        let per_true_score = (0..k)
            .map(|c| {
                let of: Vec<f64> = (0..y_true.len())
                    .filter(|&i| y_true[i] as usize == c)
                    .map(|i| scores[i])
                    .collect();
                (!of.is_empty()).then(|| of.iter().sum::<f64>() / of.len() as f64)
            })
            .collect();
        ClassMetrics {
            train_accuracy: per_class(y, &|i| correct(&train[i], y[i])),
            test_accuracy: per_class(test_true, &|i| correct(&test[i], test_true[i])),
            test_tie: share(Selection::Tie),
            test_undecided: share(Selection::Undecided),
            selection: mean_by_noise(&one_hot, y, y_true).map(ClassSelection::from_array),
            selection_score: per_true_score,
        }
    }
}

/// The in-sequence prompt's record over clean and noisy samples: the mean s_0 and the
/// share of samples whose top position is the prompt (`states`: every sample's record,
/// each with its [`PromptState`]).
pub fn prompt_share(states: &[SampleState], y: &[i8], y_true: &[i8]) -> PromptShare {
    let values: Vec<[f64; 2]> = states
        .iter()
        .map(|s| {
            let p = s.prompt.expect("an in-sequence sample record");
            [p.attention, f64::from(u8::from(p.top))]
        })
        .collect();
    let m = mean_by_noise(&values, y, y_true);
    PromptShare {
        attention: m.map(|v| v[0]),
        top: m.map(|v| v[1]),
    }
}

/// What a run records as it goes: the Definition 4.1 sums at every forward pass and a
/// checkpoint at each step of the [`schedule`].
#[derive(Debug, Clone)]
pub struct Recorder {
    schedule: Vec<u64>,
    /// Definition 4.1 sums over the forward passes observed so far.
    pub cumulative: Cumulative,
    /// Checkpoints recorded so far.
    pub checkpoints: Vec<Checkpoint>,
}

impl Recorder {
    /// A recorder for `cfg`'s run from step 0.
    pub fn new(cfg: &Config) -> Recorder {
        let schedule = schedule(cfg.steps, cfg.record.checkpoints_per_decade);
        Recorder {
            checkpoints: Vec::with_capacity(schedule.len()),
            schedule,
            cumulative: Cumulative::default(),
        }
    }

    /// A recorder that continues a run: the sums and checkpoints recorded before.
    pub fn resumed(cfg: &Config, cumulative: Cumulative, checkpoints: Vec<Checkpoint>) -> Self {
        Recorder {
            schedule: schedule(cfg.steps, cfg.record.checkpoints_per_decade),
            cumulative,
            checkpoints,
        }
    }

    /// Observe a forward pass: add its S_i to the sums, and record a checkpoint when the
    /// step is scheduled. Under minibatches the sums take the S_i of the step's batch
    /// only (the samples whose forward pass the step computes: each sample once per
    /// epoch), and a checkpoint's forward pass covers every sample
    /// ([`Trainer::forward_backward`]).
    pub fn observe<A: Arith, M: Model>(&mut self, tr: &Trainer<'_, A, M>) {
        let (y, y_true) = (&tr.data.train.y, &tr.data.train.y_true);
        let first = tr.cfg.model.first_label();
        match tr.batch_indices() {
            None => self.observe_with(tr.step, &tr.selection_scores(), y, y_true, first, |c| {
                tr.checkpoint(c)
            }),
            Some(idx) => {
                let ar = &tr.ar;
                let scores: Vec<f64> = idx
                    .iter()
                    .map(|&i| ar.to_f64(&tr.selection_score_value(i)))
                    .collect();
                let yb: Vec<i8> = idx.iter().map(|&i| y[i]).collect();
                let tb: Vec<i8> = idx.iter().map(|&i| y_true[i]).collect();
                self.observe_with(tr.step, &scores, &yb, &tb, first, |c| tr.checkpoint(c));
            }
        }
    }

    /// Observe the forward pass at `step` of any trainer: add the S_i `scores` of the
    /// samples it computed (labels `y`, true labels `y_true`, `first` the model's first
    /// label) to the sums, and record `checkpoint(sums)` when the step is scheduled.
    pub fn observe_with(
        &mut self,
        step: u64,
        scores: &[f64],
        y: &[i8],
        y_true: &[i8],
        first: i8,
        checkpoint: impl FnOnce(Cumulative) -> Checkpoint,
    ) {
        accumulate(&mut self.cumulative, scores, y, y_true, first);
        if self.schedule.binary_search(&step).is_ok() {
            self.checkpoints.push(checkpoint(self.cumulative));
        }
    }

    /// The trajectory recorded by `tr`'s run.
    pub fn trajectory<A: Arith, M: Model>(self, tr: &Trainer<'_, A, M>) -> Trajectory {
        let direction = tr.direction.as_ref().map(|t| {
            let mut s = t.summary.clone();
            s.off_pattern_at_end = self.checkpoints.last().map(|c| {
                let tops: Vec<(usize, Selection)> =
                    c.samples.iter().map(|s| (s.top, s.selection)).collect();
                off_pattern(&tops, &s.pattern)
            });
            s
        });
        Trajectory {
            format: trajectory::FORMAT.to_string(),
            trainer: tr.info(),
            config: tr.cfg.clone(),
            y_true: tr.data.train.y_true.clone(),
            y: tr.data.train.y.clone(),
            checkpoints: self.checkpoints,
            direction,
        }
    }
}

/// ||x|| in `ar` ([`Arith::norm_f64`]); where that sum of squares overflows although
/// every component is finite (|x_i| past ~1.3e154 in f64, ~1.8e19 in f32), the norm
/// scaled by the largest |x_i| in f64 ([`scaled_norm`]) instead of inf. Every other
/// value is the plain norm's, bit for bit (the f64 trainer's digests are unchanged).
fn norm<A: Arith>(ar: &A, x: &[A::Real]) -> f64 {
    let plain = ar.norm_f64(x);
    if !plain.is_infinite() {
        return plain;
    }
    let v: Vec<f64> = x.iter().map(|r| ar.to_f64(r)).collect();
    if v.iter().all(|c| c.is_finite()) {
        scaled_norm(&v)
    } else {
        plain
    }
}

/// The Euclidean norm of `v` (finite values) computed as `m * sqrt(sum (v_i / m)^2)`
/// with m = max |v_i|: no square overflows; inf only where the norm itself exceeds f64.
pub fn scaled_norm(v: &[f64]) -> f64 {
    let m = v.iter().fold(0.0f64, |m, c| m.max(c.abs()));
    if m == 0.0 {
        return 0.0;
    }
    let sum: f64 = v.iter().map(|c| (c / m) * (c / m)).sum();
    m * sum.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_is_log_spaced_and_complete() {
        let s = schedule(30000, 10);
        assert_eq!(s[..4], [0, 1, 2, 3]);
        assert_eq!(*s.last().unwrap(), 30000);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert!(s.contains(&10) && s.contains(&100) && s.contains(&1000));
        assert_eq!(schedule(0, 10), vec![0]);
        assert_eq!(schedule(1, 10), vec![0, 1]);
    }
}
