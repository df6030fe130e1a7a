//! The exact GELU, GELU(u) = u Phi(u) = u (1 + erf(u / sqrt 2)) / 2 (PyTorch's
//! `nn.GELU()`, `approximate = "none"`), and its derivative
//! Phi(u) + u phi(u), phi(u) = exp(-u^2 / 2) / sqrt(2 pi).

use crate::arith::Arith;

/// 1 / sqrt 2 in `ar`: sqrt(1/2), one correctly rounded square root of an exact number
/// (a ball: enclosed).
fn inv_sqrt2<A: Arith>(ar: &A) -> A::Real {
    let mut c = ar.of(0.5);
    ar.sqrt(&mut c);
    c
}

/// `u = GELU(u)` for every entry, in PyTorch's order: u * 0.5 * (1 + erf(u / sqrt 2))
/// with u / sqrt 2 as u times sqrt(1/2).
pub fn gelu<A: Arith>(ar: &A, u: &mut [A::Real]) {
    let c = inv_sqrt2(ar);
    let mut t = ar.zero();
    for x in u.iter_mut() {
        ar.prod(&mut t, x, &c);
        ar.erf(&mut t);
        ar.add_f64(&mut t, 1.0);
        ar.mul_f64(x, 0.5);
        ar.mul(x, &t);
    }
}

/// The constants GELU' needs in `ar`: sqrt(1/2) and sqrt(2 pi) (pi correctly rounded,
/// times 2 exactly, its square root), formed once per backward pass.
struct Constants<R> {
    inv_sqrt2: R,
    root_2pi: R,
}

impl<R> Constants<R> {
    fn new<A: Arith<Real = R>>(ar: &A) -> Self {
        let mut root_2pi = ar.pi();
        ar.mul_f64(&mut root_2pi, 2.0);
        ar.sqrt(&mut root_2pi);
        Constants {
            inv_sqrt2: inv_sqrt2(ar),
            root_2pi,
        }
    }
}

/// GELU'(u) = Phi(u) + u phi(u) with Phi(u) = (1 + erf(u / sqrt 2)) / 2 and
/// phi(u) = exp(-u^2 / 2) / sqrt(2 pi), sqrt(2 pi) as the square root of 2 pi.
pub fn gelu_derivative<A: Arith>(ar: &A, u: &A::Real) -> A::Real {
    derivative(ar, &Constants::new(ar), u)
}

/// [`gelu_derivative`] with its constants given.
fn derivative<A: Arith>(ar: &A, k: &Constants<A::Real>, u: &A::Real) -> A::Real {
    // Phi(u)
    let mut cdf = ar.zero();
    ar.prod(&mut cdf, u, &k.inv_sqrt2);
    ar.erf(&mut cdf);
    ar.add_f64(&mut cdf, 1.0);
    ar.mul_f64(&mut cdf, 0.5);
    // u phi(u)
    let mut pdf = ar.zero();
    ar.prod(&mut pdf, u, u);
    ar.mul_f64(&mut pdf, -0.5);
    ar.exp(&mut pdf);
    ar.div(&mut pdf, &k.root_2pi);
    ar.mul(&mut pdf, u);
    ar.add(&mut cdf, &pdf);
    cdf
}

/// The gradient with respect to GELU's input: `du_i = dy_i GELU'(u_i)` (the constants
/// formed once).
pub fn gelu_backward<A: Arith>(ar: &A, u: &[A::Real], dy: &[A::Real]) -> Vec<A::Real> {
    debug_assert_eq!(u.len(), dy.len());
    let k = Constants::new(ar);
    u.iter()
        .zip(dy)
        .map(|(x, g)| {
            let mut d = derivative(ar, &k, x);
            ar.mul(&mut d, g);
            d
        })
        .collect()
}
