//! The direct step: scores X q, gradient X^T c in d-space, and one step loop over the
//! query map's parameter blocks ([`Query`], `model::query`).
//!
//! ```text
//! forward:   q (and a shift of every score) from the map's blocks
//! backward:  dL/dq = X^T c (the attention core), then each trained block's gradient
//!            from the map (a rank-one gradient kept factored: left right^T)
//! step:      every block's factor (and the clip factor) formed at the old blocks,
//!            then each block moved, in the map's declaration order:
//!            dense:    v <- v + f g               (an fma per entry)
//!            factored: row j <- row j + (f left_j) right   (one rounded product, then
//!                      an fma per entry)
//!            Adam:     adam::step per block, its gradient entries as rounded products
//! ```
//!
//! The linear map (p / W / joint) gives, in today's order: W-mode W[m, :] <- W[m, :] +
//! (-alpha p_m) dL/dq; p-mode p <- p - alpha W dL/dq (p_k = fma(-alpha, g_k, p_k) with W
//! = I); joint both from the same old (p, W); with the prompt in sequence p's gradient
//! also gets (sum_i c_i0) q + sum_c a_c nu_c (proofs-notes/prompt.md,
//! [`Direct::prompt_grad`]).

use super::Sample;
use crate::arith::Arith;
use crate::config::Formulation;
use crate::linalg;

use super::adam;
use super::step_rule::{StepRule, Stopped, clip_factor};
use crate::model::factorised::Factorised;
use crate::model::query::{Query, QueryMap};
use crate::model::{self, Model};

/// The query map's blocks and the d-space buffers of the direct step.
#[derive(Debug, Clone)]
pub struct Direct<R> {
    /// The query map, holding the parameter blocks.
    pub map: Query<R>,
    /// q, formed by the map.
    pub q: Vec<R>,
    /// dL/dq of the last backward pass.
    pub grad_q: Vec<R>,
    /// Per-sample gradients of the naive formulation (n x d; empty when stable).
    contrib: Vec<R>,
    /// The in-sequence prompt's own terms of dL/dp from the last backward pass
    /// ([`Direct::backward_in_sequence`]): (sum_i c_i0) q + sum_c (sum_i s_i0 gamma_ic)
    /// nu_c, added to p's gradient by the map; `None` with a separate prompt.
    pub prompt_grad: Option<Vec<R>>,
    /// Adam's step counter and moments per block (Adam and AdamW; `None` for the GD
    /// kinds): the optimiser's state, beside the blocks.
    pub adam: Option<Box<adam::State<R>>>,
}

impl<R: Clone + Send + Sync> Direct<R> {
    /// The engine of query map `map` (its blocks at their initial values), `n` training
    /// samples; with `adam`, zero Adam moments for every trained block. q is formed by
    /// the map.
    pub fn new<A: Arith<Real = R>>(
        ar: &A,
        map: Query<R>,
        form: Formulation,
        n: usize,
        adam: bool,
    ) -> Self {
        let d = map.blocks().get("p").len();
        let naive = form == Formulation::Naive;
        let mut e = Direct {
            adam: adam.then(|| Box::new(adam::State::zeros(ar, map.blocks()))),
            map,
            q: ar.zeros(d),
            grad_q: ar.zeros(d),
            contrib: if naive { ar.zeros(n * d) } else { Vec::new() },
            prompt_grad: None,
        };
        e.compute_q(ar);
        e
    }

    /// The query p (the map's block `p`).
    pub fn p(&self) -> &[R] {
        self.map.blocks().get("p")
    }

    /// p, mutably (call [`Direct::compute_q`] after changing it).
    pub fn p_mut(&mut self) -> &mut Vec<R> {
        self.map.blocks_mut().get_mut("p")
    }

    /// W (d x d, row-major): the linear map's block `W`; `None` for the identity
    /// (p-mode) and for a map without one (factorised).
    pub fn w(&self) -> Option<&[R]> {
        let b = self.map.blocks();
        b.has("W").then(|| b.get("W"))
    }

    /// W, mutably (call [`Direct::compute_q`] after changing it).
    pub fn w_mut(&mut self) -> Option<&mut Vec<R>> {
        let b = self.map.blocks_mut();
        b.has("W").then(|| b.get_mut("W"))
    }

    /// The factorised query map (`[factorised]`; `None` otherwise).
    pub fn fact(&self) -> Option<&Factorised<R>> {
        match &self.map {
            Query::Factorised(f) => Some(f),
            Query::Linear(_) => None,
        }
    }

    /// The factorised query map, mutably (call [`Direct::compute_q`] after changing
    /// its blocks).
    pub fn fact_mut(&mut self) -> Option<&mut Factorised<R>> {
        match &mut self.map {
            Query::Factorised(f) => Some(f),
            Query::Linear(_) => None,
        }
    }

    /// The shift every score carries (the factorised map with biases: <b_K, u>;
    /// `None` otherwise).
    pub fn score_shift(&self) -> Option<&R> {
        self.map.shift()
    }

    /// q (and the score shift) from the map's blocks.
    pub fn compute_q<A: Arith<Real = R>>(&mut self, ar: &A) {
        self.map.forward(ar, &mut self.q);
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
        ar.dot(self.p(), &self.q, &mut z0);
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
        let prompt = self.map.blocks().get("p");
        let g = &mut self.grad_q;
        g.iter_mut().for_each(|v| ar.set(v, &zero));
        for (i, ci) in c.chunks(p).enumerate() {
            ar.axpy(&ci[0], prompt, g);
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
    /// values, `m.outputs()` per token), summed in sample order; then the map's own
    /// backward pass ([`QueryMap::backward`]).
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
        self.map.backward(ar, &self.grad_q, c);
    }

    /// One gradient step from the last backward pass (module docs): every trained
    /// block's gradient from the map ([`QueryMap::gradients`], at the old blocks, with
    /// the in-sequence prompt's terms), each block by `rule` (constant or normalised:
    /// [`StepRule`], with its learning-rate schedule and clip factor; or Adam:
    /// [`adam::step`]), then q from the map. `Err` where normalised GD cannot form a
    /// block's factor ([`StepRule::neg_factor`]); nothing moves then.
    ///
    /// Clipping ([`clip_factor`]) takes the global norm of the trained blocks, in the
    /// map's order ([`QueryMap::clip_norms`]: the linear map's p then W); a factored
    /// gradient's norm is |left| |right| (the Frobenius norm of left right^T, as
    /// normalised GD takes it). Factors are formed, and blocks moved (Adam: stepped), in
    /// declaration order (the linear map's W before p).
    pub fn update<A: Arith<Real = R>>(&mut self, ar: &A, rule: &StepRule) -> Result<(), Stopped> {
        let grads = self
            .map
            .gradients(ar, &self.grad_q, self.prompt_grad.as_deref());
        let clip = rule
            .clip
            .map(|c| clip_factor(ar, c, &self.map.clip_norms(ar, &grads)));
        super::step_rule::apply(
            ar,
            rule,
            clip.as_ref(),
            &grads,
            self.map.blocks_mut(),
            self.adam.as_deref_mut(),
        )?;
        self.compute_q(ar);
        Ok(())
    }
}
