//! The twin's model: `crate::model` in MPFR, operation by operation.
//!
//! Read side by side with `src/model.rs`: same functions, same order of operations,
//! each f64 operation replaced by one rounded [`Arith`] operation.

use ndarray::ArrayView2;
use rug::Float;

use super::Arith;
use crate::config::Formulation;
use crate::linalg::LANES;

/// Reusable temporaries (no allocation in the step loop).
#[derive(Debug, Clone)]
pub struct Work {
    t1: Float,
    t2: Float,
    acc: [Float; LANES],
}

impl Work {
    /// Temporaries at the precision of `ar`.
    pub fn new(ar: &Arith) -> Work {
        Work {
            t1: ar.zero(),
            t2: ar.zero(),
            acc: std::array::from_fn(|_| ar.zero()),
        }
    }
}

/// Twin of [`crate::model::Attention`].
#[derive(Debug, Clone, PartialEq)]
pub struct Attention {
    /// Index of the largest score (lowest index on ties).
    pub top: usize,
    /// 1 - s_top, per the formulation.
    pub rest: Float,
    /// z_top - max_{j != top} z_j.
    pub gap: Float,
}

impl Attention {
    /// A placeholder at the precision of `ar`.
    pub fn new(ar: &Arith) -> Attention {
        Attention {
            top: 0,
            rest: ar.zero(),
            gap: ar.zero(),
        }
    }
}

/// Twin of [`crate::linalg::dot`] with an f64 vector: lane k mod 4, (l0 + l1) + (l2 + l3).
pub fn dot_f64(ar: &Arith, a: &[f64], b: &[Float], w: &mut Work, out: &mut Float) {
    for acc in w.acc.iter_mut() {
        ar.set(acc, 0.0);
    }
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        ar.set(&mut w.t1, y * *x);
        ar.add(&mut w.acc[k % LANES], &w.t1);
    }
    finish_lanes(ar, w, out);
}

/// Twin of [`crate::linalg::dot`] of two MPFR vectors.
pub fn dot(ar: &Arith, a: &[Float], b: &[Float], w: &mut Work, out: &mut Float) {
    for acc in w.acc.iter_mut() {
        ar.set(acc, 0.0);
    }
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        ar.set(&mut w.t1, x * y);
        ar.add(&mut w.acc[k % LANES], &w.t1);
    }
    finish_lanes(ar, w, out);
}

fn finish_lanes(ar: &Arith, w: &mut Work, out: &mut Float) {
    let [a0, a1, a2, a3] = &mut w.acc;
    ar.add(a0, &*a1);
    ar.add(a2, &*a3);
    ar.set(out, &*a0);
    ar.add(out, &*a2);
}

/// Twin of [`crate::model::scores`].
pub fn scores(ar: &Arith, x: ArrayView2<'_, f64>, q: &[Float], w: &mut Work, z: &mut [Float]) {
    for (zt, row) in z.iter_mut().zip(x.rows()) {
        dot_f64(ar, row.as_slice().expect("contiguous rows"), q, w, zt);
    }
}

/// Twin of [`crate::model::argmax`].
pub fn argmax(z: &[Float]) -> usize {
    let mut top = 0;
    for (t, v) in z.iter().enumerate() {
        if *v > z[top] {
            top = t;
        }
    }
    top
}

/// Twin of [`crate::model::softmax`].
pub fn softmax(
    ar: &Arith,
    z: &[Float],
    s: &mut [Float],
    form: Formulation,
    w: &mut Work,
    att: &mut Attention,
) {
    let top = argmax(z);
    let zmax = &z[top];
    let others = &mut w.t1;
    ar.set(others, 0.0);
    let mut second: Option<usize> = None;
    for (t, (zt, st)) in z.iter().zip(s.iter_mut()).enumerate() {
        if t == top {
            ar.set(st, 1.0);
        } else {
            ar.set(st, zt - zmax);
            ar.exp(st);
            ar.add(others, &*st);
            if second.is_none_or(|u| *zt > z[u]) {
                second = Some(t);
            }
        }
    }
    let total = &mut w.t2;
    ar.set(total, 1.0);
    ar.add(total, &*others);
    for st in s.iter_mut() {
        ar.div(st, &*total);
    }
    match form {
        Formulation::Naive => {
            ar.set(&mut att.rest, 1.0);
            ar.sub(&mut att.rest, &s[top]);
        }
        Formulation::Stable => {
            ar.set(&mut att.rest, &*others);
            ar.div(&mut att.rest, &*total);
        }
    }
    att.top = top;
    match second {
        Some(u) => ar.set(&mut att.gap, zmax - &z[u]),
        None => ar.set(&mut att.gap, f64::INFINITY),
    }
}

/// Twin of [`crate::model::output`].
pub fn output(
    ar: &Arith,
    s: &[Float],
    g: &[Float],
    top: usize,
    form: Formulation,
    w: &mut Work,
    f: &mut Float,
) {
    match form {
        Formulation::Naive => {
            ar.set(f, 0.0);
            for (st, gt) in s.iter().zip(g) {
                ar.set(&mut w.t1, st * gt);
                ar.add(f, &w.t1);
            }
        }
        Formulation::Stable => {
            let gt = &g[top];
            let acc = &mut w.t2;
            ar.set(acc, 0.0);
            for (j, (sj, gj)) in s.iter().zip(g).enumerate() {
                if j != top {
                    ar.set(&mut w.t1, gj - gt);
                    ar.mul(&mut w.t1, sj);
                    ar.add(acc, &w.t1);
                }
            }
            ar.set(f, gt);
            ar.add(f, &*acc);
        }
    }
}

/// Twin of [`crate::model::grad_q`]: `out = coef * df/dq`.
#[allow(clippy::too_many_arguments)]
pub fn grad_q(
    ar: &Arith,
    x: ArrayView2<'_, f64>,
    s: &[Float],
    g: &[Float],
    att: &Attention,
    f: &Float,
    coef: &Float,
    form: Formulation,
    w: &mut Work,
    scratch: &mut [Float],
    out: &mut [Float],
) {
    let row = |t: usize| x.row(t).to_slice().expect("contiguous rows");
    match form {
        Formulation::Naive => {
            for (o, b) in out.iter_mut().zip(scratch.iter_mut()) {
                ar.set(o, 0.0);
                ar.set(b, 0.0);
            }
            for t in 0..s.len() {
                let sg = &mut w.t2;
                ar.set(sg, &s[t] * &g[t]);
                for ((o, b), xk) in out.iter_mut().zip(scratch.iter_mut()).zip(row(t)) {
                    ar.set(&mut w.t1, &*sg * *xk);
                    ar.add(o, &w.t1);
                    ar.set(&mut w.t1, &s[t] * *xk);
                    ar.add(b, &w.t1);
                }
            }
            for (o, b) in out.iter_mut().zip(scratch.iter()) {
                ar.set(&mut w.t1, f * b);
                ar.sub(o, &w.t1);
                ar.mul(o, coef);
            }
        }
        Formulation::Stable => {
            let top = att.top;
            let xt = row(top);
            for (b, xk) in scratch.iter_mut().zip(xt) {
                ar.set(b, *xk);
            }
            for j in (0..s.len()).filter(|&j| j != top) {
                let sj = &s[j];
                for ((b, xj), xk) in scratch.iter_mut().zip(row(j)).zip(xt) {
                    ar.set(&mut w.t1, *xj);
                    ar.sub(&mut w.t1, *xk);
                    ar.mul(&mut w.t1, sj);
                    ar.add(b, &w.t1);
                }
            }
            for o in out.iter_mut() {
                ar.set(o, 0.0);
            }
            for j in (0..s.len()).filter(|&j| j != top) {
                let wj = &mut w.t2;
                ar.set(wj, &g[j] - &g[top]);
                ar.mul(wj, &s[j]);
                ar.mul(wj, coef);
                for ((o, xj), b) in out.iter_mut().zip(row(j)).zip(scratch.iter()) {
                    ar.set(&mut w.t1, *xj);
                    ar.sub(&mut w.t1, b);
                    ar.mul(&mut w.t1, &*wj);
                    ar.add(o, &w.t1);
                }
            }
        }
    }
}

/// Twin of [`crate::model::loss`]: `out = log(1 + exp(-u))`.
pub fn loss(ar: &Arith, u: &Float, w: &mut Work, out: &mut Float) {
    if *u >= 0.0 {
        ar.set(out, -u);
        ar.exp(out);
        ar.ln_1p(out);
    } else {
        let e = &mut w.t1;
        ar.set(e, u);
        ar.exp(e);
        ar.ln_1p(e);
        ar.set(out, -u);
        ar.add(out, &*e);
    }
}

/// Twin of [`crate::model::loss_derivative`]: `out = -1 / (1 + exp(u))`.
pub fn loss_derivative(ar: &Arith, u: &Float, w: &mut Work, out: &mut Float) {
    let den = &mut w.t2;
    if *u >= 0.0 {
        let e = &mut w.t1;
        ar.set(e, -u);
        ar.exp(e);
        ar.set(out, -&*e);
        ar.set(den, &*e);
        ar.add(den, 1.0);
    } else {
        ar.set(den, u);
        ar.exp(den);
        ar.add(den, 1.0);
        ar.set(out, -1.0);
    }
    ar.div(out, &*den);
}
