//! The encoder's pass: the shared query, each sample's forward and backward pass to its
//! own vectors (independent of the other samples, so spread over threads), then the
//! gradients of the mean loss as sums over the samples in sample order.

use ndarray::ArrayView3;
use rayon::prelude::*;

use crate::arith::Arith;
use crate::config::Formulation;
use crate::linalg::{matvec, matvec_t};
use crate::model::attention::{Softmax, softmax};
use crate::model::blocks::Blocks;
use crate::model::network::Pass;
use crate::model::ops::{
    LayerNorm, dense, dense_backward, gelu, gelu_backward, layer_norm, layer_norm_backward, loss,
    loss_derivative, residual,
};

use super::idx::*;
use super::{EPS, Encoder};

/// d^-1/2 in `ar`: sqrt(d) (one correctly rounded square root of an exact integer),
/// then 1 / it (one correctly rounded division; a ball: enclosed).
fn inv_sqrt<A: Arith>(ar: &A, d: usize) -> A::Real {
    let mut r = ar.of(d as f64);
    ar.sqrt(&mut r);
    let mut s = ar.of(1.0);
    ar.div(&mut s, &r);
    s
}

/// One sample's forward results and, with a gradient pass, the vectors its share of
/// every block's gradient is formed from (each already carrying dL/df = l'(y f) y / n).
struct Work<R> {
    scores: Vec<R>,
    attention: Vec<R>,
    f: R,
    loss: R,
    grad: Option<SampleGrad<R>>,
}

/// One sample's backward vectors.
struct SampleGrad<R> {
    /// u = sum_t a_t zhat_t and dL/d(out): dL/dW_v += dout u^T.
    u: Vec<R>,
    dout: Vec<R>,
    /// LN_b(H) and dL/dh_1: dL/dW_1 += dh1 LN_b(H)^T, dL/db_1 += dh1.
    lnb: Vec<R>,
    dh1: Vec<R>,
    /// GELU(h_1) and dL/dh_2: dL/dW_2 += dh2 GELU(h_1)^T, dL/db_2 += dh2.
    act: Vec<R>,
    dh2: Vec<R>,
    /// LN_b's and LN_c's parameter gradients.
    nb_w: Vec<R>,
    nb_b: Vec<R>,
    nc_w: Vec<R>,
    nc_b: Vec<R>,
    /// The head's: df LN_c(H')^T and df.
    head_w: Vec<R>,
    head_b: R,
    /// sum_t c_t zhat_t (this sample's dL/dq).
    dq: Vec<R>,
    /// dL/dzhat_0 through this sample's attention (a_0 du + c_0 q), not through q.
    dzhat0: Vec<R>,
    /// LN_a's parameter gradients from the T tokens (token order).
    na_w: Vec<R>,
    na_b: Vec<R>,
    /// dL/dH (the skip connection's contribution to dL/dc; empty without skip).
    dh: Vec<R>,
}

/// `acc += v` entry by entry.
fn add_into<A: Arith>(ar: &A, acc: &mut [A::Real], v: &[A::Real]) {
    for (a, b) in acc.iter_mut().zip(v) {
        ar.add(a, b);
    }
}

/// `v *= s` entry by entry.
fn scale<A: Arith>(ar: &A, v: &mut [A::Real], s: &A::Real) {
    v.iter_mut().for_each(|x| ar.mul(x, s));
}

/// Sum over the samples (in sample order, from +0) of the vectors `pick` selects.
fn sum_samples<A: Arith, F>(ar: &A, g: &[&SampleGrad<A::Real>], len: usize, pick: F) -> Vec<A::Real>
where
    F: Fn(&SampleGrad<A::Real>) -> &[A::Real],
{
    let mut acc = ar.zeros(len);
    for s in g {
        add_into(ar, &mut acc, pick(s));
    }
    acc
}

/// `out[r, j] = sum_i a_i[r] b_i[j]`: each entry an fma chain over the samples in sample
/// order from +0 (the sum of the samples' [`dense_backward`] weight gradients, fused),
/// rows on several threads when `par`.
fn outer_sum<A: Arith, F, G>(
    ar: &A,
    g: &[&SampleGrad<A::Real>],
    a: F,
    b: G,
    cols: usize,
    out: &mut [A::Real],
    par: bool,
) where
    F: Fn(&SampleGrad<A::Real>) -> &[A::Real] + Sync,
    G: Fn(&SampleGrad<A::Real>) -> &[A::Real] + Sync,
{
    let row = |r: usize, o: &mut [A::Real]| {
        let zero = ar.zero();
        o.iter_mut().for_each(|x| ar.set(x, &zero));
        for s in g {
            ar.axpy(&a(s)[r], b(s), o);
        }
    };
    rows(out, cols, par, row);
}

/// `row(r, out_r)` for every row of width `cols` of `out`, on several threads when `par`
/// (rows are independent: the same bits for any split).
fn rows<T: Send, F>(out: &mut [T], cols: usize, par: bool, row: F)
where
    F: Fn(usize, &mut [T]) + Sync + Send,
{
    if par {
        out.par_chunks_mut(cols)
            .enumerate()
            .for_each(|(r, o)| row(r, o));
    } else {
        out.chunks_mut(cols)
            .enumerate()
            .for_each(|(r, o)| row(r, o));
    }
}

/// The shared values of a pass: the blocks' values, zhat_0 = LN_a(c) and the query q.
struct Shared<'a, R> {
    v: &'a [Vec<R>],
    zhat0: LayerNorm<R>,
    q: Vec<R>,
}

impl Encoder {
    /// One sample's forward pass (and, with `want_grad`, its backward pass to its own
    /// vectors) for tokens `x` (T, d row-major) and label `y`.
    fn sample<A: Arith>(
        &self,
        ar: &A,
        sh: &Shared<'_, A::Real>,
        x: &[f64],
        y: i8,
        n: usize,
        want_grad: bool,
    ) -> Work<A::Real> {
        let (d, m) = (self.d, self.mlp);
        let v = sh.v;
        let wv = &v[QKV][2 * d * d..];
        // zhat_t = LN_a(Z_t): the cls token's is shared, the tokens' per sample
        let tokens: Vec<LayerNorm<A::Real>> = x
            .chunks_exact(d)
            .map(|xt| layer_norm(ar, &ar.of_slice(xt), &v[NA_W], &v[NA_B], EPS))
            .collect();
        let zhat = |t: usize| -> &[A::Real] {
            match t {
                0 => &sh.zhat0.y,
                _ => &tokens[t - 1].y,
            }
        };
        let p = self.tokens + 1;
        let scores: Vec<A::Real> = (0..p)
            .map(|t| {
                let mut z = ar.zero();
                ar.dot(&sh.q, zhat(t), &mut z);
                z
            })
            .collect();
        let mut attention = ar.zeros(p);
        let mut sm = Softmax::new(ar);
        softmax(ar, &scores, &mut attention, Formulation::Naive, &mut sm);
        // u = sum_t a_t zhat_t (token order), out = W_v u
        let mut u = ar.zeros(d);
        for (t, a) in attention.iter().enumerate() {
            ar.axpy(a, zhat(t), &mut u);
        }
        let attn_out = dense(ar, wv, &u, &[]);
        let h = match self.skip {
            true => residual(ar, &attn_out, &v[CLS]),
            false => attn_out,
        };
        let lnb = layer_norm(ar, &h, &v[NB_W], &v[NB_B], EPS);
        let h1 = dense(ar, &v[W1], &lnb.y, &v[B1]);
        let mut act = h1.clone();
        gelu(ar, &mut act);
        let h2 = dense(ar, &v[W2], &act, &v[B2]);
        let h_out = match self.skip {
            true => residual(ar, &h2, &h),
            false => h2,
        };
        let lnc = layer_norm(ar, &h_out, &v[NC_W], &v[NC_B], EPS);
        let f = dense(ar, &v[HEAD_W], &lnc.y, &v[HEAD_B]).remove(0);
        let mut margin = f.clone();
        if y < 0 {
            ar.neg(&mut margin);
        }
        let l = loss(ar, self.loss, &margin);
        let mut work = Work {
            scores,
            attention,
            f,
            loss: l,
            grad: None,
        };
        if !want_grad {
            return work;
        }
        // dL/df = l'(y f) y / n
        let mut df = loss_derivative(ar, self.loss, &margin);
        if y < 0 {
            ar.neg(&mut df);
        }
        ar.div_f64(&mut df, n as f64);
        let head = dense_backward(ar, &v[HEAD_W], &lnc.y, std::slice::from_ref(&df));
        let gc = layer_norm_backward(ar, &lnc, &v[NC_W], &head.x);
        let dh2 = gc.x;
        let mut dact = ar.zeros(m);
        matvec_t(ar, &v[W2], &dh2, &mut dact);
        let dh1 = gelu_backward(ar, &h1, &dact);
        let mut dlnb = ar.zeros(d);
        matvec_t(ar, &v[W1], &dh1, &mut dlnb);
        let gb = layer_norm_backward(ar, &lnb, &v[NB_W], &dlnb);
        let dh = match self.skip {
            true => residual(ar, &gb.x, &dh2),
            false => gb.x,
        };
        // out = W_v u: du = W_v^T dout
        let mut du = ar.zeros(d);
        matvec_t(ar, wv, &dh, &mut du);
        // the attention core: g_t = <du, zhat_t>, c_t = a_t (g_t - sum_u a_u g_u)
        let a = &work.attention;
        let g: Vec<A::Real> = (0..p)
            .map(|t| {
                let mut s = ar.zero();
                ar.dot(&du, zhat(t), &mut s);
                s
            })
            .collect();
        let mut gbar = ar.zero();
        ar.dot(a, &g, &mut gbar);
        let c: Vec<A::Real> = g
            .into_iter()
            .zip(a)
            .map(|(mut gt, at)| {
                ar.sub(&mut gt, &gbar);
                ar.mul(&mut gt, at);
                gt
            })
            .collect();
        // dL/dq = sum_t c_t zhat_t; dL/dzhat_t = a_t du + c_t q
        let mut dq = ar.zeros(d);
        for (t, ct) in c.iter().enumerate() {
            ar.axpy(ct, zhat(t), &mut dq);
        }
        let dzhat = |t: usize| -> Vec<A::Real> {
            let mut z = ar.zeros(d);
            ar.axpy(&a[t], &du, &mut z);
            ar.axpy(&c[t], &sh.q, &mut z);
            z
        };
        let (mut na_w, mut na_b) = (ar.zeros(d), ar.zeros(d));
        for (t, ln) in tokens.iter().enumerate() {
            let ga = layer_norm_backward(ar, ln, &v[NA_W], &dzhat(t + 1));
            add_into(ar, &mut na_w, &ga.gamma);
            add_into(ar, &mut na_b, &ga.beta);
        }
        work.grad = Some(SampleGrad {
            dzhat0: dzhat(0),
            u,
            dout: dh.clone(),
            lnb: lnb.y,
            dh1,
            act,
            dh2,
            nb_w: gb.gamma,
            nb_b: gb.beta,
            nc_w: gc.gamma,
            nc_b: gc.beta,
            head_w: head.w,
            head_b: df,
            dq,
            na_w,
            na_b,
            dh: if self.skip { dh } else { Vec::new() },
        });
        work
    }
}

/// [`crate::model::network::Network::pass`] of the encoder.
pub(super) fn pass<A: Arith>(
    enc: &Encoder,
    ar: &A,
    x: ArrayView3<'_, f64>,
    y: &[i8],
    theta: &Blocks<A::Real>,
    out: &mut Pass<A::Real>,
    grad: Option<&mut [Vec<A::Real>]>,
) {
    let (n, t, d) = x.dim();
    debug_assert!(t == enc.tokens && d == enc.d && y.len() == n);
    debug_assert_eq!(theta.values.len(), super::BLOCK_NAMES.len());
    let v = &theta.values[..];
    let qkv = &v[QKV];
    let (wq, wk) = (&qkv[..d * d], &qkv[d * d..2 * d * d]);
    // the shared query: zhat_0 = LN_a(c), pq = W_q zhat_0, q = d^-1/2 W_k^T pq
    let zhat0 = layer_norm(ar, &v[CLS], &v[NA_W], &v[NA_B], EPS);
    let mut pq = ar.zeros(d);
    matvec(ar, wq, &zhat0.y, &mut pq);
    let mut q = ar.zeros(d);
    matvec_t(ar, wk, &pq, &mut q);
    let s = inv_sqrt(ar, d);
    scale(ar, &mut q, &s);
    let sh = Shared { v, zhat0, q };
    let want_grad = grad.is_some();
    let xs = x.as_standard_layout();
    let flat = xs.as_slice().expect("standard layout");
    let one = |i: usize| {
        enc.sample(
            ar,
            &sh,
            &flat[i * t * d..(i + 1) * t * d],
            y[i],
            n,
            want_grad,
        )
    };
    let works: Vec<Work<A::Real>> = match enc.parallel_samples(ar, n) {
        true => (0..n).into_par_iter().map(one).collect(),
        false => (0..n).map(one).collect(),
    };
    let p = t + 1;
    out.positions = p;
    out.classes = 1;
    out.scores.clear();
    out.attention.clear();
    out.outputs.clear();
    out.losses.clear();
    let mut total = ar.zero();
    for w in &works {
        out.scores.extend(w.scores.iter().cloned());
        out.attention.extend(w.attention.iter().cloned());
        out.outputs.push(w.f.clone());
        out.losses.push(w.loss.clone());
        ar.add(&mut total, &w.loss);
    }
    if n > 0 {
        ar.div_f64(&mut total, n as f64);
    }
    out.loss = total;
    out.grad_q.clear();
    let Some(grad) = grad else {
        out.q = sh.q;
        return;
    };
    let g: Vec<&SampleGrad<A::Real>> = works
        .iter()
        .map(|w| w.grad.as_ref().expect("a gradient pass"))
        .collect();
    let m = enc.mlp;
    for (gb, b) in grad.iter_mut().zip(&theta.decl) {
        gb.clear();
        gb.resize(b.len(), ar.zero());
    }
    // U = sum_i dq_i: the gradient of the mean loss with respect to q
    let u_sum = sum_samples(ar, &g, d, |s| &s.dq);
    // q = s W_k^T pq: dL/dpq = s W_k U, dL/dW_k = s pq U^T, dL/dW_q = (s W_k U) zhat_0^T
    let mut dpq = ar.zeros(d);
    matvec(ar, wk, &u_sum, &mut dpq);
    scale(ar, &mut dpq, &s);
    let mut spq = pq.clone();
    scale(ar, &mut spq, &s);
    let par = enc.parallel_rows(ar, n);
    {
        let gq = &mut grad[QKV];
        let (gwq, rest) = gq.split_at_mut(d * d);
        let (gwk, gwv) = rest.split_at_mut(d * d);
        rank_one(ar, &dpq, &sh.zhat0.y, gwq, par);
        rank_one(ar, &spq, &u_sum, gwk, par);
        outer_sum(ar, &g, |s| &s.dout, |s| &s.u, d, gwv, par);
    }
    outer_sum(ar, &g, |s| &s.dh1, |s| &s.lnb, d, &mut grad[W1], par);
    outer_sum(ar, &g, |s| &s.dh2, |s| &s.act, m, &mut grad[W2], par);
    grad[B1] = sum_samples(ar, &g, m, |s| &s.dh1);
    grad[B2] = sum_samples(ar, &g, d, |s| &s.dh2);
    grad[NB_W] = sum_samples(ar, &g, d, |s| &s.nb_w);
    grad[NB_B] = sum_samples(ar, &g, d, |s| &s.nb_b);
    grad[NC_W] = sum_samples(ar, &g, d, |s| &s.nc_w);
    grad[NC_B] = sum_samples(ar, &g, d, |s| &s.nc_b);
    grad[HEAD_W] = sum_samples(ar, &g, d, |s| &s.head_w);
    grad[HEAD_B] = sum_samples(ar, &g, 1, |s| std::slice::from_ref(&s.head_b));
    // zhat_0: through each sample's attention, then through q (W_q^T dL/dpq)
    let mut dzhat0 = sum_samples(ar, &g, d, |s| &s.dzhat0);
    let mut via_q = ar.zeros(d);
    matvec_t(ar, wq, &dpq, &mut via_q);
    add_into(ar, &mut dzhat0, &via_q);
    let ga = layer_norm_backward(ar, &sh.zhat0, &v[NA_W], &dzhat0);
    let mut na_w = sum_samples(ar, &g, d, |s| &s.na_w);
    add_into(ar, &mut na_w, &ga.gamma);
    let mut na_b = sum_samples(ar, &g, d, |s| &s.na_b);
    add_into(ar, &mut na_b, &ga.beta);
    grad[NA_W] = na_w;
    grad[NA_B] = na_b;
    // c: through LN_a, and (skip) through the residual H = out + c
    let mut dc = ga.x;
    if enc.skip {
        add_into(ar, &mut dc, &sum_samples(ar, &g, d, |s| &s.dh));
    }
    grad[CLS] = dc;
    out.q = sh.q;
    out.grad_q = u_sum;
}

/// `out[r, j] = a_r b_j` (one product per entry), rows on several threads when `par`.
fn rank_one<A: Arith>(ar: &A, a: &[A::Real], b: &[A::Real], out: &mut [A::Real], par: bool) {
    let row = |r: usize, o: &mut [A::Real]| {
        for (x, bj) in o.iter_mut().zip(b) {
            ar.prod(x, &a[r], bj);
        }
    };
    let cols = b.len();
    rows(out, cols, par, row);
}
