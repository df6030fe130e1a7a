//! Small f64 kernels with a fixed, documented summation order.
//!
//! Every reduction in tokensel goes through [`dot`] (or [`sum`]), whose order is fixed:
//! element k goes to lane k mod 4, lanes are summed left to right, and the result is
//! (lane0 + lane1) + (lane2 + lane3). No FMA is used (Rust never contracts a * b + c).
//! The order is the same on every platform and every thread count, and the twin's
//! f64-predictor mode can reproduce it.

/// Number of interleaved partial sums in [`dot`] and [`sum`].
pub const LANES: usize = 4;

/// Inner product `sum_k a[k] b[k]` in the fixed lane order.
///
/// # Panics
/// If the slices differ in length (a programming error).
#[inline]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "dot: length mismatch");
    let mut acc = [0.0f64; LANES];
    let (ca, ra) = (a.chunks_exact(LANES), a.chunks_exact(LANES).remainder());
    let rb = b.chunks_exact(LANES).remainder();
    for (x, y) in ca.zip(b.chunks_exact(LANES)) {
        for j in 0..LANES {
            acc[j] += x[j] * y[j];
        }
    }
    for (j, (x, y)) in ra.iter().zip(rb).enumerate() {
        acc[j] += x * y;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// Sum `sum_k a[k]` in the same lane order as [`dot`].
#[inline]
pub fn sum(a: &[f64]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let chunks = a.chunks_exact(LANES);
    let rest = chunks.remainder();
    for x in chunks {
        for j in 0..LANES {
            acc[j] += x[j];
        }
    }
    for (j, x) in rest.iter().enumerate() {
        acc[j] += x;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// Euclidean norm `sqrt(dot(a, a))`.
#[inline]
pub fn norm(a: &[f64]) -> f64 {
    dot(a, a).sqrt()
}

/// `y += alpha x`, element by element.
#[inline]
pub fn axpy(alpha: f64, x: &[f64], y: &mut [f64]) {
    assert_eq!(x.len(), y.len(), "axpy: length mismatch");
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += alpha * xi;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_order_is_the_documented_one() {
        let a: Vec<f64> = (0..11).map(|k| 1.0 + (k as f64) * 1e-3).collect();
        let b: Vec<f64> = (0..11).map(|k| 1e16f64.powi(k % 3) * 0.7).collect();
        let mut acc = [0.0; 4];
        for k in 0..11 {
            acc[k % 4] += a[k] * b[k];
        }
        let expect = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        assert_eq!(dot(&a, &b).to_bits(), expect.to_bits());
        let mut acc = [0.0; 4];
        for k in 0..11 {
            acc[k % 4] += b[k];
        }
        assert_eq!(
            sum(&b).to_bits(),
            ((acc[0] + acc[1]) + (acc[2] + acc[3])).to_bits()
        );
    }
}
