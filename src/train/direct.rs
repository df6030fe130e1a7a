//! The direct step: scores X q, gradient X^T c in d-space, update of p and/or W.
//!
//! ```text
//! p-mode:  p <- p - alpha W dL/dq            (W = I: p_k = fma(-alpha, g_k, p_k))
//! W-mode:  W[m, :] <- W[m, :] + (-alpha p_m) dL/dq           (an fma per entry)
//! joint:   both, from the same old (p, W)
//! in-sequence prompt: p also gets (sum_i c_i0) q + sum_c a_c nu_c (proofs-notes/prompt.md)
//! q = W^T p: q_k = sum_m p_m W[m, k], an fma chain over m = 0, 1, ...
//! ```
//!
//! With `[factorised]` the engine holds the query map's blocks ([`Direct::fact`]): q,
//! the score shift and every block's step go through `model::factorised` (p and W
//! above are then not used, except p mirroring the map's p block).

use super::Sample;
use crate::arith::Arith;
use crate::config::{Formulation, Mode};
use crate::data::Params;
use crate::linalg;

use super::adam;
use super::step_rule::{StepRule, Stopped, clip_factor, euclidean_norm};
use crate::model::factorised::{Factorised, Section};
use crate::model::{self, Model};

/// Parameters and d-space buffers of the direct step.
#[derive(Debug, Clone)]
pub struct Direct<R> {
    /// The token p.
    pub p: Vec<R>,
    /// W (d x d, row-major), `None` for the identity.
    pub w: Option<Vec<R>>,
    /// q = W^T p.
    pub q: Vec<R>,
    /// dL/dq of the last backward pass.
    pub grad_q: Vec<R>,
    /// Per-sample gradients of the naive formulation (n x d; empty when stable).
    contrib: Vec<R>,
    /// The in-sequence prompt's own terms of dL/dp from the last backward pass
    /// ([`Direct::backward_in_sequence`]): (sum_i c_i0) q + sum_c (sum_i s_i0 gamma_ic)
    /// nu_c, added to W dL/dq in p- and joint mode; `None` with a separate prompt.
    pub prompt_grad: Option<Vec<R>>,
    /// Adam's moments and step counter (Adam and AdamW; `None` for the GD kinds): the
    /// optimiser's state, beside the parameters ([`Direct::with_adam`]).
    pub adam: Option<Box<adam::State<R>>>,
    /// The factorised query map's blocks and state (`[factorised]`; `None` otherwise):
    /// q, the scores' shift and the step go through it.
    pub fact: Option<Box<Factorised<R>>>,
}

impl<R: Clone + Send + Sync> Direct<R> {
    /// The initial parameters, converted exactly.
    pub fn new<A: Arith<Real = R>>(ar: &A, init: &Params, form: Formulation, n: usize) -> Self {
        let d = init.p.len();
        let naive = form == Formulation::Naive;
        let mut e = Direct {
            p: ar.of_slice(init.p.as_slice().expect("contiguous")),
            w: init
                .w
                .as_ref()
                .map(|w| ar.of_slice(w.as_slice().expect("standard layout"))),
            q: ar.zeros(d),
            grad_q: ar.zeros(d),
            contrib: if naive { ar.zeros(n * d) } else { Vec::new() },
            prompt_grad: None,
            adam: None,
            fact: None,
        };
        e.compute_q(ar);
        e
    }

    /// Zero Adam moments for the blocks `mode` trains (p: d; W: d x d), step counter 0.
    pub fn with_adam<A: Arith<Real = R>>(mut self, ar: &A, mode: Mode) -> Self {
        let d = self.p.len();
        self.adam = Some(Box::new(adam::State {
            t: 0,
            p: (mode != Mode::W).then(|| adam::Moments::zeros(ar, d)),
            w: (mode != Mode::P).then(|| adam::Moments::zeros(ar, d * d)),
        }));
        self
    }

    /// The factorised query map of `sec` in place of W (dropped): its blocks drawn from
    /// their streams under `seed`, p(0) this engine's p; with `adam`, Adam's moments per
    /// block. q is formed by the map.
    pub fn with_factorised<A: Arith<Real = R>>(
        mut self,
        ar: &A,
        sec: &Section,
        seed: u64,
        p0: &[f64],
        adam: bool,
    ) -> Self {
        self.w = None;
        self.fact = Some(Box::new(Factorised::new(ar, sec, seed, p0, adam)));
        self.compute_q(ar);
        self
    }

    /// The shift <b_K, u> every score carries (the factorised map with biases; `None`
    /// otherwise).
    pub fn score_shift(&self) -> Option<&R> {
        self.fact.as_ref().and_then(|f| f.shift.as_ref())
    }

    /// q = W^T p (a copy of p when W = I); the factorised map's q where it is present
    /// (p mirrors its p block).
    pub fn compute_q<A: Arith<Real = R>>(&mut self, ar: &A) {
        if let Some(f) = &mut self.fact {
            f.forward(ar, &mut self.q);
            self.p.clone_from(&f.blocks.values[f.blocks.index("p")]);
            return;
        }
        match &self.w {
            None => self.q.clone_from(&self.p),
            Some(w) => linalg::matvec_t(ar, w, &self.p, &mut self.q),
        }
    }

    /// Scores z = X q of every training token (`x`: the nT x d rows).
    pub fn scores<A: Arith<Real = R>>(&self, ar: &A, x: &[f64], tokens: usize, scores: &mut [R]) {
        let d = self.q.len();
        linalg::for_each_row(ar, scores, tokens, tokens * d, |i, zi| {
            for (t, zt) in zi.iter_mut().enumerate() {
                let r = i * tokens + t;
                ar.dot_f64(&x[r * d..(r + 1) * d], &self.q, zt);
            }
        });
        if let Some(shift) = self.score_shift() {
            scores.iter_mut().for_each(|z| ar.add(z, shift));
        }
    }

    /// Scores of every training sample's T + 1 positions with the prompt in sequence
    /// (`x`: the nT x d token rows; `scores`: rows of T + 1): position 0 the prompt's
    /// z_0 = <p, q> (one dot product, the same for every sample), positions 1..=T the
    /// tokens' <x_t, q>, each by the dot product of [`Direct::scores`].
    pub fn scores_in_sequence<A: Arith<Real = R>>(
        &self,
        ar: &A,
        x: &[f64],
        tokens: usize,
        scores: &mut [R],
    ) {
        let d = self.q.len();
        let mut z0 = ar.zero();
        ar.dot(&self.p, &self.q, &mut z0);
        linalg::for_each_row(ar, scores, tokens + 1, tokens * d, |i, zi| {
            ar.set(&mut zi[0], &z0);
            for (t, zt) in zi[1..].iter_mut().enumerate() {
                let r = i * tokens + t;
                ar.dot_f64(&x[r * d..(r + 1) * d], &self.q, zt);
            }
        });
    }

    /// The backward pass with the prompt in sequence (stable formulation; proofs-notes/
    /// prompt.md). `c`, `s`: rows of T + 1 positions (position 0 the prompt); `nu`: the
    /// head's rows ([`Model::head_rows`]).
    ///
    /// dL/dq = sum_i (c_i0 p + sum_{t >= 1} c_it x_it), an fma chain over the positions
    /// of sample 0, then sample 1, ... (the order of X^T c on the sequences [p; X_i], so
    /// a fixed p gives the bits of the separate model on those sequences); and the
    /// prompt's own terms of dL/dp into [`Direct::prompt_grad`]: (sum_i c_i0) q +
    /// sum_c a_c nu_c with a_c = sum_i s_i0 gamma_ic (gamma = dL/df,
    /// [`Model::output_grad`]), each sum in sample order.
    #[allow(clippy::too_many_arguments)]
    pub fn backward_in_sequence<A: Arith<Real = R>, M: Model>(
        &mut self,
        ar: &A,
        m: &M,
        x: &[f64],
        tokens: usize,
        s: &[R],
        nu: &[R],
        samples: &[Sample<R>],
        c: &[R],
    ) {
        let (d, k, p) = (self.q.len(), m.outputs(), tokens + 1);
        let zero = ar.zero();
        let g = &mut self.grad_q;
        g.iter_mut().for_each(|v| ar.set(v, &zero));
        for (i, ci) in c.chunks(p).enumerate() {
            ar.axpy(&ci[0], &self.p, g);
            for (t, ct) in ci[1..].iter().enumerate() {
                let r = i * tokens + t;
                ar.axpy_f64(ct, &x[r * d..(r + 1) * d], g);
            }
        }
        let mut c0 = ar.zero();
        let mut a = ar.zeros(k);
        let mut gamma = ar.zeros(k);
        for (i, sample) in samples.iter().enumerate() {
            ar.add(&mut c0, &c[i * p]);
            m.output_grad(ar, sample, &mut gamma);
            for (ac, gc) in a.iter_mut().zip(&gamma) {
                ar.fma(ac, &s[i * p], gc);
            }
        }
        let mut extra = ar.zeros(d);
        ar.axpy(&c0, &self.q, &mut extra);
        for (ac, row) in a.iter().zip(nu.chunks(d)) {
            ar.axpy(ac, row, &mut extra);
        }
        self.prompt_grad = Some(extra);
    }

    /// dL/dq from the last forward pass: `Stable`: X^T c; `Naive`: per-sample
    /// [`model::grad_q_naive`] of model `m`'s [`Model::naive_terms`] (`g`: the head
    /// values, `m.outputs()` per token), summed in sample order.
    #[allow(clippy::too_many_arguments)]
    pub fn backward<A: Arith<Real = R>, M: Model>(
        &mut self,
        ar: &A,
        form: Formulation,
        m: &M,
        x: &[f64],
        tokens: usize,
        s: &[R],
        g: &[R],
        samples: &[Sample<R>],
        c: &[R],
    ) {
        let (d, k) = (self.q.len(), m.outputs());
        if let Some(f) = &mut self.fact {
            linalg::matvec_t_f64(ar, x, c, &mut self.grad_q);
            f.backward(ar, &self.grad_q, c);
            return;
        }
        match form {
            Formulation::Stable => linalg::matvec_t_f64(ar, x, c, &mut self.grad_q),
            Formulation::Naive => {
                // one row per sample of this pass (a minibatch has fewer than n)
                if self.contrib.len() != samples.len() * d {
                    self.contrib = ar.zeros(samples.len() * d);
                }
                linalg::for_each_row(ar, &mut self.contrib, d, 4 * tokens * d, |i, v| {
                    let span = i * tokens..(i + 1) * tokens;
                    let xi = ndarray::ArrayView2::from_shape(
                        (tokens, d),
                        &x[i * tokens * d..(i + 1) * tokens * d],
                    )
                    .expect("token block");
                    let mut b = ar.zeros(d);
                    let gi = &g[span.start * k..span.end * k];
                    let (values, centre) = m.naive_terms(gi, &samples[i]);
                    model::grad_q_naive(
                        ar,
                        xi,
                        &s[span],
                        values,
                        centre,
                        &samples[i].coef,
                        &mut b,
                        v,
                    );
                });
                let zero = ar.zero();
                self.grad_q.iter_mut().for_each(|v| ar.set(v, &zero));
                for v in self.contrib.chunks(d) {
                    for (gk, vk) in self.grad_q.iter_mut().zip(v) {
                        ar.add(gk, vk);
                    }
                }
            }
        }
    }

    /// One gradient step from the last backward pass (module docs), each block by
    /// `rule` (constant or normalised: [`StepRule`], with its learning-rate schedule and
    /// clip factor; or Adam: [`adam::step`]), then q = W^T p.
    /// `Err` where normalised GD cannot form a block's factor
    /// ([`StepRule::neg_factor`]); nothing moves then.
    ///
    /// Clipping ([`clip_factor`]) takes the global norm of the blocks `mode` trains:
    /// |W dL/dq| for p and |p| |dL/dq| for W (the Frobenius norm of p (dL/dq)^T, as
    /// normalised GD takes it).
    pub fn update<A: Arith<Real = R>>(
        &mut self,
        ar: &A,
        mode: Mode,
        rule: &StepRule,
    ) -> Result<(), Stopped> {
        if let Some(f) = &mut self.fact {
            f.update(ar, rule, &self.grad_q, &mut self.q)?;
            self.p.clone_from(&f.blocks.values[f.blocks.index("p")]);
            return Ok(());
        }
        let d = self.q.len();
        let g = &self.grad_q;
        // W dL/dq at the old W (p- and joint mode), plus the in-sequence prompt's own
        // terms
        let mut dp = match (&self.w, mode) {
            (_, Mode::W) => None,
            (None, _) => Some(g.clone()),
            (Some(w), _) => {
                let mut dp = ar.zeros(d);
                linalg::matvec(ar, w, g, &mut dp);
                Some(dp)
            }
        };
        if let (Some(dp), Some(extra)) = (&mut dp, &self.prompt_grad) {
            for (v, e) in dp.iter_mut().zip(extra) {
                ar.add(v, e);
            }
        }
        let w_norm = |p: &[R]| {
            let mut n = euclidean_norm(ar, p);
            ar.mul(&mut n, &euclidean_norm(ar, g));
            n
        };
        let clip = rule.clip.map(|c| {
            let mut norms = Vec::new();
            if let Some(dp) = &dp {
                norms.push(euclidean_norm(ar, dp));
            }
            if mode != Mode::P {
                norms.push(w_norm(&self.p));
            }
            clip_factor(ar, c, &norms)
        });
        if let Some(h) = rule.adam {
            self.adam_update(ar, mode, rule, &h, dp, clip.as_ref());
            self.compute_q(ar);
            return Ok(());
        }
        let clip = clip.as_ref();
        // both factors before any parameter moves (a zero block leaves them as they were)
        let neg_w = match mode {
            Mode::P => None,
            // dL/dW = p (dL/dq)^T: its Frobenius norm is |p| |dL/dq|
            _ => Some(rule.neg_factor(ar, "W", clip, || w_norm(&self.p))?),
        };
        let neg_p = match &dp {
            None => None,
            Some(dp) => Some(rule.neg_factor(ar, "p", clip, || euclidean_norm(ar, dp))?),
        };
        if let Some(neg_w) = neg_w {
            let w = self.w.as_mut().expect("W- and joint mode store W");
            let p = &self.p;
            linalg::for_each_row(ar, w, d, d, |m, row| {
                let mut a = ar.zero();
                ar.prod(&mut a, &neg_w, &p[m]);
                ar.axpy(&a, g, row);
            });
        }
        if let (Some(dp), Some(neg_p)) = (dp, neg_p) {
            ar.axpy(&neg_p, &dp, &mut self.p);
        }
        self.compute_q(ar);
        Ok(())
    }

    /// Adam's step ([`adam::step`]) of each block `mode` trains, both from the old
    /// (p, W): W's gradient p_m (dL/dq)_k (each entry a rounded product, times the clip
    /// factor where clipping), then p's, W dL/dq (times the clip factor).
    fn adam_update<A: Arith<Real = R>>(
        &mut self,
        ar: &A,
        mode: Mode,
        rule: &StepRule,
        h: &adam::Hyper,
        dp: Option<Vec<R>>,
        clip: Option<&R>,
    ) {
        let d = self.q.len();
        let st = self
            .adam
            .as_mut()
            .expect("an Adam run's engine holds Adam's state");
        st.t += 1;
        let s = h.scalars(ar, &rule.lr(ar), st.t);
        if mode != Mode::P {
            let w = self.w.as_mut().expect("W- and joint mode store W");
            let mom = st.w.as_mut().expect("W's moments");
            let mut grad = ar.zeros(d);
            for (m, row) in w.chunks_mut(d).enumerate() {
                for (gk, qk) in grad.iter_mut().zip(&self.grad_q) {
                    ar.prod(gk, &self.p[m], qk);
                    if let Some(c) = clip {
                        ar.mul(gk, c);
                    }
                }
                let span = m * d..(m + 1) * d;
                adam::step(
                    ar,
                    &s,
                    row,
                    &grad,
                    &mut mom.m[span.clone()],
                    &mut mom.v[span],
                );
            }
        }
        if let Some(mut dp) = dp {
            if let Some(c) = clip {
                dp.iter_mut().for_each(|x| ar.mul(x, c));
            }
            let mom = st.p.as_mut().expect("p's moments");
            adam::step(ar, &s, &mut self.p, &dp, &mut mom.m, &mut mom.v);
        }
    }
}
