//! Exact rational cross-checks (`num-rational` / `num-bigint`).
//!
//! Every f64 and every MPFR value is a dyadic rational, so scores, gradient assembly
//! (with the softmax vector given as rationals) and the classical rounding-error
//! bounds can be evaluated exactly. `exp` is not rational: [`exp_enclosure`] brackets
//! it by a Taylor polynomial with a remainder bound, rounded outward.
//! Derivations: proofs-notes/error-bounds.md.

use ndarray::ArrayView2;
use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{One, Signed, Zero};

/// The exact value of a finite f64.
///
/// # Panics
/// On NaN or infinity (not rationals).
pub fn rat(x: f64) -> BigRational {
    BigRational::from_float(x).expect("finite f64")
}

/// The exact value of a finite MPFR number.
///
/// # Panics
/// On NaN or infinity.
pub fn rat_mpfr(x: &rug::Float) -> BigRational {
    let r = x.to_rational().expect("finite MPFR value");
    let conv = |i: &rug::Integer| {
        BigInt::parse_bytes(i.to_string_radix(16).as_bytes(), 16).expect("hex integer")
    };
    BigRational::new(conv(r.numer()), conv(r.denom()))
}

/// 2^e as a rational (any sign of e).
pub fn pow2(e: i64) -> BigRational {
    let p = BigInt::one() << e.unsigned_abs();
    if e >= 0 {
        BigRational::from_integer(p)
    } else {
        BigRational::new(BigInt::one(), p)
    }
}

/// Unit roundoff 2^-prec of round-to-nearest at `prec` bits.
pub fn unit_roundoff(prec: u32) -> BigRational {
    pow2(-(prec as i64))
}

/// gamma_n = n u / (1 - n u) (Higham), the bound of n successive roundings.
///
/// # Panics
/// If n u >= 1 (no bound).
pub fn gamma(n: usize, u: &BigRational) -> BigRational {
    let nu = u * BigRational::from_integer(n.into());
    assert!(nu < BigRational::one(), "gamma_n undefined for n u >= 1");
    &nu / (BigRational::one() - &nu)
}

/// Exact inner product sum_k a_k b_k.
pub fn dot(a: &[f64], b: &[f64]) -> BigRational {
    a.iter()
        .zip(b)
        .fold(BigRational::zero(), |acc, (x, y)| acc + rat(*x) * rat(*y))
}

/// Exact sum_k |a_k b_k|.
pub fn abs_dot(a: &[f64], b: &[f64]) -> BigRational {
    a.iter().zip(b).fold(BigRational::zero(), |acc, (x, y)| {
        acc + (rat(*x) * rat(*y)).abs()
    })
}

/// Rounding-error bound of the fixed-order dot kernel ([`crate::arith::dot`]) at unit
/// roundoff `u`: gamma_{ceil(d/L) + log2 L} sum_k |a_k b_k| (L = LANES sequential fma
/// chains, one rounding per fma, then a log2 L deep tree of additions).
pub fn dot_bound(a: &[f64], b: &[f64], u: &BigRational) -> BigRational {
    let lanes = crate::arith::LANES;
    let m = a.len().div_ceil(lanes) + lanes.trailing_zeros() as usize;
    gamma(m, u) * abs_dot(a, b)
}

/// Exact naive assembly df/dq = sum_t (s_t g_t) x_t - f sum_t s_t x_t, for given
/// rational s, g and f (rows of `x` are the tokens).
pub fn grad_naive(
    x: ArrayView2<'_, f64>,
    s: &[BigRational],
    g: &[BigRational],
    f: &BigRational,
) -> Vec<BigRational> {
    (0..x.ncols())
        .map(|k| {
            let mut a = BigRational::zero();
            let mut b = BigRational::zero();
            for t in 0..x.nrows() {
                let xk = rat(x[[t, k]]);
                a += &s[t] * &g[t] * &xk;
                b += &s[t] * xk;
            }
            a - f * b
        })
        .collect()
}

/// Rounding-error bound of the naive assembly (`model::grad_q_naive`, coef = 1) with
/// inputs s, g, f exact (the product s_t g_t rounded, T fmas, f b rounded, one
/// subtraction): gamma_{T+2} (sum_t |s_t g_t x_tk| + |f| sum_t |s_t x_tk|).
pub fn grad_naive_bound(
    x: ArrayView2<'_, f64>,
    s: &[BigRational],
    g: &[BigRational],
    f: &BigRational,
    u: &BigRational,
) -> Vec<BigRational> {
    let gm = gamma(x.nrows() + 2, u);
    (0..x.ncols())
        .map(|k| {
            let mut a = BigRational::zero();
            let mut b = BigRational::zero();
            for t in 0..x.nrows() {
                let xk = rat(x[[t, k]]).abs();
                a += (&s[t] * &g[t]).abs() * &xk;
                b += s[t].abs() * xk;
            }
            &gm * (a + f.abs() * b)
        })
        .collect()
}

/// Exact definition df/dq = sum_t s_t (g_t - f) x_t with f = sum_t s_t g_t, for given
/// rational s and g.
pub fn grad_definition(
    x: ArrayView2<'_, f64>,
    s: &[BigRational],
    g: &[BigRational],
) -> Vec<BigRational> {
    let f = s
        .iter()
        .zip(g)
        .fold(BigRational::zero(), |acc, (st, gt)| acc + st * gt);
    grad_naive(x, s, g, &f)
}

/// Round a positive rational to `bits` significant bits, down (`up = false`) or up.
fn round_bits(x: &BigRational, bits: u32, up: bool) -> BigRational {
    debug_assert!(x.is_positive());
    let (n, d) = (x.numer(), x.denom());
    let e = n.bits() as i64 - d.bits() as i64; // x in [2^(e-1), 2^(e+1))
    let shift = bits as i64 - e;
    let scaled = if shift >= 0 {
        BigRational::new(n << shift as u64, d.clone())
    } else {
        BigRational::new(n.clone(), d << (-shift) as u64)
    };
    let m = if up { scaled.ceil() } else { scaled.floor() };
    m * pow2(-shift)
}

/// A rigorous enclosure [lo, hi] of exp(r), each end a rational of `bits` significant
/// bits, with lo <= exp(r) <= hi.
///
/// exp(r) = exp(y)^(2^k) with y = r / 2^k, |y| <= 1/2; exp(y) lies within
/// 2 |y|^(N+1) / (N+1)! of its degree-N Taylor polynomial; each squaring rounds outward.
pub fn exp_enclosure(r: &BigRational, bits: u32) -> (BigRational, BigRational) {
    let half = BigRational::new(1.into(), 2.into());
    let mut k = 0u32;
    let mut y = r.clone();
    while y.abs() > half {
        y /= BigRational::from_integer(2.into());
        k += 1;
    }
    let tiny = pow2(-(bits as i64) - 8);
    let mut term = BigRational::one();
    let mut sum = BigRational::one();
    let mut n = 0u32;
    loop {
        n += 1;
        term = term * &y / BigRational::from_integer(n.into());
        sum += &term;
        // remainder after degree n: <= 2 |y|^(n+1) / (n+1)!
        let rem = (&term * &y).abs() * BigRational::from_integer(2.into())
            / BigRational::from_integer((n + 1).into());
        if rem < tiny {
            let mut lo = round_bits(&(&sum - &rem), bits, false);
            let mut hi = round_bits(&(&sum + &rem), bits, true);
            for _ in 0..k {
                lo = round_bits(&(&lo * &lo), bits, false);
                hi = round_bits(&(&hi * &hi), bits, true);
            }
            return (lo, hi);
        }
    }
}

/// Enclosures of softmax(scores) for exact rational scores: with e_t in [lo_t, hi_t]
/// (enclosing exp(z_t - z_max)), s_t lies in [lo_t / sum_u hi_u, hi_t / sum_u lo_u].
pub fn softmax_enclosure(scores: &[BigRational], bits: u32) -> Vec<(BigRational, BigRational)> {
    let zmax = scores.iter().max().expect("non-empty").clone();
    let e: Vec<_> = scores
        .iter()
        .map(|zt| exp_enclosure(&(zt - &zmax), bits))
        .collect();
    let sum_lo = e.iter().fold(BigRational::zero(), |a, (lo, _)| a + lo);
    let sum_hi = e.iter().fold(BigRational::zero(), |a, (_, hi)| a + hi);
    e.iter()
        .map(|(lo, hi)| (lo / &sum_hi, hi / &sum_lo))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_enclosure_brackets_known_values() {
        // e = 2.718281828459045235360287...; exp(0) = 1 exactly inside
        let (lo, hi) = exp_enclosure(&BigRational::one(), 200);
        assert!(lo < hi);
        let e_lo = rat(std::f64::consts::E); // the f64 nearest e lies below it
        let e_hi = rat(f64::from_bits(std::f64::consts::E.to_bits() + 1));
        assert!(e_lo < lo && hi < e_hi);
        let (lo, hi) = exp_enclosure(&BigRational::zero(), 100);
        assert!(lo <= BigRational::one() && BigRational::one() <= hi);
        // width shrinks with bits
        let (a, b) = exp_enclosure(&rat(-37.5), 300);
        assert!((&b - &a) / &a < pow2(-290));
    }

    /// exp(r) rounded down and up at 400 bits by MPFR (correctly rounded, so the two
    /// bracket the true value): rationals `d <= exp(r) <= u`.
    fn mpfr_exp_bracket(r: f64) -> (BigRational, BigRational) {
        use rug::float::Round;
        let at = |round| {
            let (v, _) =
                rug::Float::with_val_round(400, rug::Float::with_val(400, r).exp_ref(), round);
            rat_mpfr(&v)
        };
        (at(Round::Down), at(Round::Up))
    }

    /// e (and exp at other points, down to -745 where f64 underflows) lies inside the
    /// enclosure: MPFR's 400-bit value rounded down is >= lo and rounded up is <= hi, so
    /// lo <= e <= hi is proved. And the enclosure is tight: at 200 bits the Taylor value
    /// is within 2^-199 relative (two outward roundings, a remainder below 2^-208), and
    /// each of the k squarings doubles the relative width and adds 2^-199, so the width
    /// stays below 2^(k+1) 2^-199 = 2^(k-198) relative (asserted with a factor 2 to
    /// spare). Catches a dropped or halved Taylor remainder, a squaring
    /// rounded the wrong way, a wrong range reduction (y = r / 2^k, then 2^k squarings),
    /// and an enclosure that brackets the f64 nearest e instead of e.
    #[test]
    fn exp_enclosure_contains_mpfr_400_bit_values() {
        for r in [1.0, -1.0, 0.5, -0.3, 2.0, 10.0, -37.5, -700.0, -745.5] {
            let (lo, hi) = exp_enclosure(&rat(r), 200);
            let (down, up) = mpfr_exp_bracket(r);
            assert!(lo <= down, "exp({r}): lower end above the true value");
            assert!(up <= hi, "exp({r}): upper end below the true value");
            // k: the halvings that bring |r| to 1/2 or below
            let k = (0..64).find(|k| r.abs() / 2f64.powi(*k) <= 0.5).unwrap() as i64;
            assert!(
                (&hi - &lo) / &lo < pow2(k - 197),
                "exp({r}): enclosure wider than 2^({k} - 197) relative"
            );
        }
    }

    #[test]
    fn mpfr_to_rational_is_exact() {
        let x = rug::Float::with_val(200, 1) / 3u32;
        let r = rat_mpfr(&x);
        assert_eq!(rat_mpfr(&rug::Float::with_val(53, 0.75)), rat(0.75));
        let third = BigRational::new(1.into(), 3.into());
        assert!((r - third).abs() < pow2(-200));
    }
}
