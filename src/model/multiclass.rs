//! The multi-class model of the paper's Section F (SPEC section 14; derivations in
//! proofs-notes/multiclass.md): K >= 2 classes, the fixed head nu in R^{d x K}
//! ([`crate::data::head::multiclass_head`]), outputs
//!
//! ```text
//! f_c = nu_c^T X^T s = sum_t s_t G_tc,        G_tc = <nu_c, x_t>
//! l(f, Y) = -f_Y + log sum_c exp f_c          (softmax cross-entropy)
//! ```
//!
//! by a log-sum-exp with the largest output m subtracted: l = (f_m - f_Y) +
//! log1p(sum_{c != m} exp(f_c - f_m)), no overflow and no cancellation in any
//! arithmetic. The backward pass is the binary one with the head value g_t replaced by
//! h_t = sum_c gamma_c G_tc, gamma = softmax(f) - e_Y: dl/dz_t = s_t (h_t - sum_u s_u h_u),
//! formed by the same centred [`super::attention::grad_scores`]. gamma_Y = p_Y - 1 is
//! formed as -(sum_{c != Y} e_c) / (1 + S), without the subtraction.
//!
//! The naive (d-space) gradient, which only judge's naive candidates run (a K-class
//! config trains in the stable formulation): the binary one with g_t -> h_t and
//! f -> sum_t s_t h_t ([`Model::naive_terms`]): the binary form, with its d-space
//! cancellation where the attention saturates.
//!
//! K = 2: nu_0 = -nu_1 = nu / 2, so f_0 - f_1 is the binary f, l is log(1 + exp(-Y f))
//! with class 0 as +1, and the trajectory is the binary one in exact arithmetic (tested
//! against the binary model in tests/multiclass.rs).

use std::cmp::Ordering;

use ndarray::ArrayView3;

use super::attention::{Selection, argmax, grad_scores, output};
use super::{Model, Sample};
use crate::arith::Arith;
use crate::config::Formulation;
use crate::data::Dataset;
use crate::data::head::multiclass_head_values;

/// The K-class model (`[model] kind = "multiclass"`, `classes = K`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Multiclass {
    /// Number of classes K >= 2.
    pub classes: usize,
}

/// The cross-entropy of outputs `f` for class `y`, and what its gradient needs: the
/// e_c = exp(f_c - f_m) into `e` (e_m = 1, not computed: exact in the reals whatever
/// enclosure f_m is); returns (loss, 1 + S = sum_c e_c).
fn lse<A: Arith>(ar: &A, f: &[A::Real], y: usize, e: &mut [A::Real]) -> (A::Real, A::Real) {
    let top = argmax(ar, f);
    let mut others = ar.zero();
    for (c, (ec, fc)) in e.iter_mut().zip(f).enumerate() {
        if c == top {
            ar.set_f64(ec, 1.0);
        } else {
            ar.diff(ec, fc, &f[top]);
            ar.exp(ec);
            ar.add(&mut others, ec);
        }
    }
    let mut den = others.clone();
    ar.add_f64(&mut den, 1.0);
    let mut loss = others;
    ar.ln_1p(&mut loss);
    if y != top {
        let mut gap = ar.zero();
        ar.diff(&mut gap, &f[top], &f[y]);
        ar.add(&mut gap, &loss);
        loss = gap;
    }
    (loss, den)
}

/// The outputs f_c = sum_t s_t G_tc of one sample into `f`, with `d` (K values) as
/// working space. Each class's sum is the one [`output`] forms for the column G_.c (the
/// same operations in the same order, so the same bits): `Stable`, f_c = G_top,c +
/// sum_{j != top} s_j (G_jc - G_top,c); `Naive`, the fma chain over t from 0. The
/// classes run side by side, token by token, as one [`Arith::axpy`] per token (a vector
/// fma in f64), with no copy of a column.
pub(crate) fn outputs_into<A: Arith>(
    ar: &A,
    s: &[A::Real],
    g: &[A::Real],
    top: usize,
    form: Formulation,
    f: &mut [A::Real],
    d: &mut [A::Real],
) {
    let k = f.len();
    let zero = ar.zero();
    f.iter_mut().for_each(|fc| ar.set(fc, &zero));
    match form {
        Formulation::Naive => {
            for (st, gt) in s.iter().zip(g.chunks(k)) {
                ar.axpy(st, gt, f);
            }
        }
        Formulation::Stable => {
            let gtop = &g[top * k..(top + 1) * k];
            for (j, (sj, gj)) in s.iter().zip(g.chunks(k)).enumerate() {
                if j != top {
                    for ((dc, gjc), gtc) in d.iter_mut().zip(gj).zip(gtop) {
                        ar.diff(dc, gjc, gtc);
                    }
                    ar.axpy(sj, d, f);
                }
            }
            // G_top,c + acc_c, as acc_c + G_top,c (a rounded sum is commutative)
            for (fc, gtc) in f.iter_mut().zip(gtop) {
                ar.add(fc, gtc);
            }
        }
    }
}

/// The cross-entropy l = -log softmax(f)_Y of outputs `f` for class `y` (returned), and
/// its gradient gamma = softmax(f) - e_Y into `gamma`, with `e` (K values) as working
/// space. gamma_Y = p_Y - 1 is formed as -(sum_{c != Y} e_c) / (1 + S), without the
/// subtraction. Shared by the fixed-head model and the real-setting model
/// ([`super::real_setting`]).
pub(crate) fn cross_entropy<A: Arith>(
    ar: &A,
    f: &[A::Real],
    y: usize,
    e: &mut [A::Real],
    gamma: &mut [A::Real],
) -> A::Real {
    let (loss, den) = lse(ar, f, y, e);
    let mut rest = ar.zero();
    for (cl, (gc, ec)) in gamma.iter_mut().zip(e.iter()).enumerate() {
        if cl != y {
            ar.set(gc, ec);
            ar.div(gc, &den);
            ar.add(&mut rest, ec);
        }
    }
    ar.neg(&mut rest);
    ar.div(&mut rest, &den);
    gamma[y] = rest;
    loss
}

/// The backward pass from the output gradient `gamma` (K) to the scores of one sample:
/// the head values h_t = sum_c gamma_c G_tc into `h` (T; the fma chain over c from 0 for
/// every t at once: one axpy per class on the column G_.c, G transposed into `gt`, K x
/// T), then c_t = coef s_t (h_t - sum_u s_u h_u) into `c` by the centred
/// [`grad_scores`]. Shared by the fixed-head model and the real-setting model.
#[allow(clippy::too_many_arguments)]
pub(crate) fn head_coefficients<A: Arith>(
    ar: &A,
    s: &[A::Real],
    g: &[A::Real],
    gamma: &[A::Real],
    top: usize,
    coef: &A::Real,
    gt: &mut [A::Real],
    h: &mut [A::Real],
    c: &mut [A::Real],
) {
    let (k, t) = (gamma.len(), s.len());
    for (tt, gtok) in g.chunks(k).enumerate() {
        for (cl, v) in gtok.iter().enumerate() {
            ar.set(&mut gt[cl * t + tt], v);
        }
    }
    let zero = ar.zero();
    h.iter_mut().for_each(|ht| ar.set(ht, &zero));
    for (gc, col) in gamma.iter().zip(gt.chunks(t)) {
        ar.axpy(gc, col, h);
    }
    let mut hbar = ar.zero();
    output(ar, s, h, top, Formulation::Stable, &mut hbar);
    grad_scores(ar, s, h, top, &hbar, coef, c);
}

/// Length of a sample's working space ([`Sample::scratch`]) for K classes and T tokens:
/// e, gamma, d (K each), h (T), G^T (K x T) and the naive gradient's centre (1).
fn scratch_len(k: usize, t: usize) -> usize {
    3 * k + t + k * t + 1
}

impl Model for Multiclass {
    fn outputs(&self) -> usize {
        self.classes
    }

    fn spec(&self) -> crate::config::ModelSpec {
        crate::config::ModelSpec {
            kind: crate::config::ModelKind::Multiclass,
            classes: self.classes,
            ..Default::default()
        }
    }

    fn head_values<A: Arith>(
        &self,
        ar: &A,
        data: &Dataset,
        x: ArrayView3<'_, f64>,
    ) -> Vec<A::Real> {
        multiclass_head_values(ar, x, &data.multiclass_head(ar))
    }

    fn sample<A: Arith>(
        &self,
        ar: &A,
        s: &[A::Real],
        g: &[A::Real],
        y: i8,
        n: usize,
        form: Formulation,
        out: &mut Sample<A::Real>,
        c: &mut [A::Real],
    ) {
        let (k, t, top) = (self.classes, s.len(), out.softmax.top);
        let y = y as usize;
        // working space, kept in the sample: e, gamma, d (K each), h (T), G^T (K x T),
        // the naive centre (1; [`scratch_len`])
        if out.scratch.len() != scratch_len(k, t) {
            out.scratch = ar.zeros(scratch_len(k, t));
        }
        let (e, rest) = out.scratch.split_at_mut(k);
        let (gamma, rest) = rest.split_at_mut(k);
        let (d, rest) = rest.split_at_mut(k);
        let (h, rest) = rest.split_at_mut(t);
        let (gt, centre) = rest.split_at_mut(k * t);
        outputs_into(ar, s, g, top, form, &mut out.outputs, d);
        let f = &out.outputs;
        out.loss = cross_entropy(ar, f, y, e, gamma);
        // the margin f_Y - max_{c != Y} f_c
        let mut best: Option<A::Real> = None;
        for (_, fc) in f.iter().enumerate().filter(|(cl, _)| *cl != y) {
            match &mut best {
                None => best = Some(fc.clone()),
                Some(m) => ar.max(m, fc),
            }
        }
        ar.diff(&mut out.f, &f[y], &best.expect("K >= 2"));
        // c_t = (1/n) s_t (h_t - hbar)
        ar.set_f64(&mut out.coef, 1.0);
        ar.div_f64(&mut out.coef, n as f64);
        head_coefficients(ar, s, g, gamma, top, &out.coef, gt, h, c);
        if form == Formulation::Naive {
            // the naive gradient's centre sum_t s_t h_t, the fma chain over t from 0 (as
            // the binary naive f): [`Model::naive_terms`]
            output(ar, s, h, top, Formulation::Naive, &mut centre[0]);
        }
    }

    fn head_rows<A: Arith>(&self, ar: &A, data: &Dataset) -> Vec<A::Real> {
        data.multiclass_head(ar)
    }

    fn output_grad<A: Arith>(&self, ar: &A, out: &Sample<A::Real>, gamma: &mut [A::Real]) {
        // gamma = softmax(f) - e_Y, kept in the scratch by `sample` (after e), times 1/n
        let k = self.classes;
        for (g, v) in gamma.iter_mut().zip(&out.scratch[k..2 * k]) {
            ar.prod(g, v, &out.coef);
        }
    }

    fn forward<A: Arith>(
        &self,
        ar: &A,
        s: &[A::Real],
        g: &[A::Real],
        top: usize,
        form: Formulation,
        f: &mut [A::Real],
    ) {
        let mut d = ar.zeros(self.classes);
        outputs_into(ar, s, g, top, form, f, &mut d);
    }

    fn loss<A: Arith>(&self, ar: &A, f: &[A::Real], y: i8, out: &mut A::Real) {
        let mut e = ar.zeros(f.len());
        *out = lse(ar, f, y as usize, &mut e).0;
    }

    fn naive_terms<'s, R>(&self, _g: &'s [R], out: &'s Sample<R>) -> (&'s [R], &'s R) {
        let k = self.classes;
        let t = (out.scratch.len() - 1 - 3 * k) / (k + 1);
        debug_assert_eq!(out.scratch.len(), scratch_len(k, t), "after a sample");
        (
            &out.scratch[3 * k..3 * k + t],
            &out.scratch[scratch_len(k, t) - 1],
        )
    }

    fn predict<A: Arith>(&self, ar: &A, f: &[A::Real]) -> Option<i8> {
        match argmax_status(ar, f) {
            (top, Selection::Decided) => Some(top as i8),
            _ => None,
        }
    }

    fn decide<A: Arith>(&self, ar: &A, f: &[A::Real], y: i8) -> Option<bool> {
        match argmax_status(ar, f) {
            (top, Selection::Decided) => Some(top == y as usize),
            (_, Selection::Tie) => Some(false),
            (_, Selection::Undecided) => None,
        }
    }
}

/// The largest output's class (lowest index on ties; a ball's midpoints) and whether it
/// is proved larger than every other output (`Decided`, the predicted class), proved
/// equal to another (`Tie`: no class predicted) or neither (`Undecided`), through
/// [`Arith::decide_cmp`].
pub fn argmax_status<A: Arith>(ar: &A, f: &[A::Real]) -> (usize, Selection) {
    let top = argmax(ar, f);
    let mut status = Selection::Decided;
    for (c, fc) in f.iter().enumerate() {
        if c != top {
            match ar.decide_cmp(&f[top], fc) {
                Some(Ordering::Greater) => {}
                Some(Ordering::Equal) => {
                    if status == Selection::Decided {
                        status = Selection::Tie;
                    }
                }
                _ => status = Selection::Undecided,
            }
        }
    }
    (top, status)
}
