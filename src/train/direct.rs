//! The direct step: scores X q, gradient X^T c in d-space, update of p and/or W.
//!
//! ```text
//! p-mode:  p <- p - alpha W dL/dq            (W = I: p_k = fma(-alpha, g_k, p_k))
//! W-mode:  W[m, :] <- W[m, :] + (-alpha p_m) dL/dq           (an fma per entry)
//! joint:   both, from the same old (p, W)
//! q = W^T p: q_k = sum_m p_m W[m, k], an fma chain over m = 0, 1, ...
//! ```

use super::Sample;
use crate::arith::Arith;
use crate::config::{Formulation, Mode};
use crate::data::Params;
use crate::linalg;

use super::step_rule::{StepRule, Stopped, euclidean_norm};
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
        };
        e.compute_q(ar);
        e
    }

    /// q = W^T p (a copy of p when W = I).
    pub fn compute_q<A: Arith<Real = R>>(&mut self, ar: &A) {
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
        match form {
            Formulation::Stable => linalg::matvec_t_f64(ar, x, c, &mut self.grad_q),
            Formulation::Naive => {
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
    /// `rule` (constant or normalised: [`StepRule`]), then q = W^T p.
    /// `Err` where normalised GD cannot form a block's factor
    /// ([`StepRule::neg_factor`]); nothing moves then.
    pub fn update<A: Arith<Real = R>>(
        &mut self,
        ar: &A,
        mode: Mode,
        rule: &StepRule,
    ) -> Result<(), Stopped> {
        let d = self.q.len();
        let g = &self.grad_q;
        // W dL/dq at the old W (p- and joint mode)
        let dp = match (&self.w, mode) {
            (_, Mode::W) => None,
            (None, _) => Some(g.clone()),
            (Some(w), _) => {
                let mut dp = ar.zeros(d);
                linalg::matvec(ar, w, g, &mut dp);
                Some(dp)
            }
        };
        // both factors before any parameter moves (a zero block leaves them as they were)
        let neg_w = match mode {
            Mode::P => None,
            // dL/dW = p (dL/dq)^T: its Frobenius norm is |p| |dL/dq|
            _ => Some(rule.neg_factor(ar, "W", || {
                let mut n = euclidean_norm(ar, &self.p);
                ar.mul(&mut n, &euclidean_norm(ar, g));
                n
            })?),
        };
        let neg_p = match &dp {
            None => None,
            Some(dp) => Some(rule.neg_factor(ar, "p", || euclidean_norm(ar, dp))?),
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
}
