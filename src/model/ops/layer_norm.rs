//! Layer normalisation over one vector, as PyTorch's `nn.LayerNorm` computes it: the
//! mean, the BIASED variance (divided by k), eps inside the square root, then the affine
//! map: y = gamma * (x - mean) / sqrt(var + eps) + beta.

use crate::arith::Arith;

/// What the forward pass keeps for the backward one.
#[derive(Debug, Clone)]
pub struct LayerNorm<R> {
    /// The output y.
    pub y: Vec<R>,
    /// The normalised input xhat = (x - mean) / sqrt(var + eps).
    pub xhat: Vec<R>,
    /// 1 / sqrt(var + eps).
    pub inv_std: R,
}

/// The gradients of [`layer_norm`]: with respect to its input and its affine parameters.
#[derive(Debug, Clone)]
pub struct LayerNormGrad<R> {
    /// dL/dx.
    pub x: Vec<R>,
    /// dL/dgamma = dy * xhat.
    pub gamma: Vec<R>,
    /// dL/dbeta = dy.
    pub beta: Vec<R>,
}

/// The mean of `v` (a sum in index order, divided by its length).
fn mean<A: Arith>(ar: &A, v: &[A::Real]) -> A::Real {
    let mut s = ar.zero();
    for x in v {
        ar.add(&mut s, x);
    }
    ar.div_f64(&mut s, v.len() as f64);
    s
}

/// The products `a_i b_i`.
fn products<A: Arith>(ar: &A, a: &[A::Real], b: &[A::Real]) -> Vec<A::Real> {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let mut v = ar.zero();
            ar.prod(&mut v, x, y);
            v
        })
        .collect()
}

/// The forward pass: sums in index order; `eps` as this arithmetic rounds the f64 value
/// (PyTorch's `eps` is a Python float).
pub fn layer_norm<A: Arith>(
    ar: &A,
    x: &[A::Real],
    gamma: &[A::Real],
    beta: &[A::Real],
    eps: f64,
) -> LayerNorm<A::Real> {
    debug_assert!(!x.is_empty() && gamma.len() == x.len() && beta.len() == x.len());
    let mu = mean(ar, x);
    let centred: Vec<A::Real> = x
        .iter()
        .map(|v| {
            let mut c = ar.zero();
            ar.diff(&mut c, v, &mu);
            c
        })
        .collect();
    let squares = products(ar, &centred, &centred);
    let mut inv_std = mean(ar, &squares);
    ar.add_f64(&mut inv_std, eps);
    ar.sqrt(&mut inv_std);
    let mut one = ar.of(1.0);
    ar.div(&mut one, &inv_std);
    let inv_std = one;
    let xhat: Vec<A::Real> = centred
        .into_iter()
        .map(|mut c| {
            ar.mul(&mut c, &inv_std);
            c
        })
        .collect();
    let y = xhat
        .iter()
        .zip(gamma.iter().zip(beta))
        .map(|(h, (g, b))| {
            let mut v = b.clone();
            ar.fma(&mut v, h, g);
            v
        })
        .collect();
    LayerNorm { y, xhat, inv_std }
}

/// The backward pass: with g = dy * gamma,
/// dx = inv_std (g - mean(g) - xhat mean(g * xhat)), dgamma = dy * xhat, dbeta = dy.
pub fn layer_norm_backward<A: Arith>(
    ar: &A,
    ln: &LayerNorm<A::Real>,
    gamma: &[A::Real],
    dy: &[A::Real],
) -> LayerNormGrad<A::Real> {
    let g = products(ar, dy, gamma);
    let gx = products(ar, &g, &ln.xhat);
    let (mg, mgx) = (mean(ar, &g), mean(ar, &gx));
    let x = g
        .into_iter()
        .zip(&ln.xhat)
        .map(|(mut v, h)| {
            ar.sub(&mut v, &mg);
            let mut t = ar.zero();
            ar.prod(&mut t, h, &mgx);
            ar.sub(&mut v, &t);
            ar.mul(&mut v, &ln.inv_std);
            v
        })
        .collect();
    let gamma = products(ar, dy, &ln.xhat);
    LayerNormGrad {
        x,
        gamma,
        beta: dy.to_vec(),
    }
}
