//! A dense layer with bias, y = W x + b (W an (m, k) row-major matrix, PyTorch's
//! `nn.Linear` with `weight` W), and the residual sum y = a + b.

use crate::arith::Arith;

/// `y = W x + b`: each y_i = <W_i, x> in [`Arith::dot`]'s fixed order, then + b_i
/// (`b` empty: no bias).
pub fn dense<A: Arith>(ar: &A, w: &[A::Real], x: &[A::Real], b: &[A::Real]) -> Vec<A::Real> {
    let k = x.len();
    debug_assert!(k > 0 && w.len() % k == 0);
    debug_assert!(b.is_empty() || b.len() == w.len() / k);
    w.chunks_exact(k)
        .enumerate()
        .map(|(i, row)| {
            let mut y = ar.zero();
            ar.dot(row, x, &mut y);
            if let Some(bi) = b.get(i) {
                ar.add(&mut y, bi);
            }
            y
        })
        .collect()
}

/// The gradients of a dense layer: with respect to its input, its weight and its bias.
#[derive(Debug, Clone)]
pub struct DenseGrad<R> {
    /// dL/dx = W^T dy.
    pub x: Vec<R>,
    /// dL/dW = dy x^T, row-major like W.
    pub w: Vec<R>,
    /// dL/db = dy.
    pub b: Vec<R>,
}

/// The backward pass of [`dense`]: dx = W^T dy (one axpy per row of W, rows in order),
/// dW = dy x^T, db = dy.
pub fn dense_backward<A: Arith>(
    ar: &A,
    w: &[A::Real],
    x: &[A::Real],
    dy: &[A::Real],
) -> DenseGrad<A::Real> {
    let k = x.len();
    debug_assert_eq!(w.len(), dy.len() * k);
    let mut dx = ar.zeros(k);
    let mut dw = Vec::with_capacity(w.len());
    for (row, g) in w.chunks_exact(k).zip(dy) {
        ar.axpy(g, row, &mut dx);
        dw.extend(x.iter().map(|xj| {
            let mut v = ar.zero();
            ar.prod(&mut v, g, xj);
            v
        }));
    }
    DenseGrad {
        x: dx,
        w: dw,
        b: dy.to_vec(),
    }
}

/// The residual sum `a + b` (its backward pass hands the output's gradient to both).
pub fn residual<A: Arith>(ar: &A, a: &[A::Real], b: &[A::Real]) -> Vec<A::Real> {
    debug_assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let mut s = x.clone();
            ar.add(&mut s, y);
            s
        })
        .collect()
}
