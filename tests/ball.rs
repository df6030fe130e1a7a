//! The ball arithmetic's contract (SPEC section 11, proofs-notes/certify.md): every
//! operation's result contains the exact result for every point of its input balls, with
//! a radius within a stated factor of the true deviation; whole trajectories of the
//! 128-bit ball trainer enclose the 1024-bit MPFR twin's; decisions are proved where the
//! theory says they are (and a genuine tie is proved a tie).

mod common;

use std::cmp::Ordering;

use proptest::prelude::*;
use rug::Float;
use rug::float::Round;
use tokensel::prelude::rng::Stream;
use tokensel::prelude::{Arith, Ball, BallReal, Config, Dataset, Mag, Method, Mpfr, Trainer, rng};

/// Precision of the references.
const REF: u32 = 4096;

/// A random ball at `prec` bits: midpoint of magnitude 2^e (e in `-spread..spread`),
/// radius 0 (a quarter of the draws), or relative 2^-k for k in 1..100.
fn draw_ball(r: &mut rand_chacha::ChaCha20Rng, prec: u32, spread: i32) -> BallReal {
    let e = (rng::uniform(r) * 2.0 * spread as f64) as i32 - spread;
    let sign = if rng::uniform(r) < 0.5 { -1.0 } else { 1.0 };
    let mut mid = Float::with_val(prec, sign * (1.0 + rng::uniform(r)));
    // more than 53 bits in the midpoint
    mid += Float::with_val(prec, rng::uniform(r)) >> 60u32;
    mid <<= e;
    let rad = if rng::uniform(r) < 0.25 {
        Mag::ZERO
    } else {
        let k = 1 + (rng::uniform(r) * 100.0) as i64;
        Mag::of_float(&mid).mul_up(Mag::pow2(-k))
    };
    BallReal::new(mid, rad)
}

/// The exact radius of a ball as a REF-bit number.
fn rad(b: &BallReal) -> Float {
    Float::with_val(REF, b.rad().to_float(64))
}

/// The corners m - r, m + r and an interior point m + t r (t = k / 2^20), exactly.
fn points(b: &BallReal, t: u32) -> [Float; 3] {
    let (m, r) = (Float::with_val(REF, b.mid()), rad(b));
    let inner = Float::with_val(REF, &r * t) >> 20u32;
    [
        Float::with_val(REF, &m - &r),
        Float::with_val(REF, &m + &r),
        Float::with_val(REF, &m - &inner),
    ]
}

/// `f` at REF bits rounded down and up: the exact value lies between (for the operations
/// tested, both are contained exactly when the exact value is).
fn bracket(f: impl Fn(Round) -> Float) -> [Float; 2] {
    [f(Round::Down), f(Round::Up)]
}

/// Check the ball `out` for an operation with exact map `f` on the points of `inputs`:
/// every bracketed value at every combination of corner / interior points is inside, and
/// the radius is at most `factor` (1 + 2^-27) (dev + 2 e), where dev is the largest
/// deviation from the midpoint over the corners (the sup of a map monotone in each
/// argument) and e the midpoint's half ulp.
fn check(
    what: &str,
    out: &BallReal,
    inputs: &[&BallReal],
    f: &dyn Fn(&[Float], Round) -> Float,
    factor: f64,
) {
    assert!(out.rad().is_inf() || out.mid().is_finite(), "{what}");
    let pts: Vec<[Float; 3]> = inputs.iter().map(|b| points(b, 377_111)).collect();
    let mut dev = Float::new(REF);
    let combos = 3usize.pow(inputs.len() as u32);
    for c in 0..combos {
        let args: Vec<Float> = (0..inputs.len())
            .map(|k| pts[k][(c / 3usize.pow(k as u32)) % 3].clone())
            .collect();
        if args.iter().any(|v| !v.is_finite()) {
            // a corner beyond MPFR's range: no reference
            continue;
        }
        // an exact value below or above MPFR's exponent range has no reference: its two
        // roundings differ, one a zero or an infinity; such values are skipped
        let values = bracket(|rnd| f(&args, rnd));
        let held = |v: &Float| !(v.is_zero() || v.is_infinite()) || values[0] == values[1];
        for v in values.iter().filter(|v| held(v)) {
            if !v.is_finite() {
                assert!(
                    out.rad().is_inf(),
                    "{what}: a non-finite value {v} needs an infinite radius: {out:?}"
                );
                continue;
            }
            assert!(
                out.contains(v),
                "{what}: {v} not in {out:?} (inputs {inputs:?}, at {args:?})"
            );
            let d = Float::with_val(REF, v - out.mid()).abs();
            if d > dev {
                dev = d;
            }
        }
    }
    if out.rad().is_inf() || factor.is_infinite() {
        return;
    }
    // half an ulp of the midpoint at its precision
    let e = match out.mid().get_exp() {
        Some(x) => Float::with_val(REF, Float::i_exp(1, x - out.mid().prec() as i32 - 1)),
        None => Float::new(REF),
    };
    let e2 = Float::with_val(REF, &e * 2u32);
    let bound = Float::with_val(REF, &dev + &e2) * (factor * (1.0 + 2f64.powi(-27)));
    assert!(
        rad(out) <= bound,
        "{what}: radius {} above {factor} (dev {} + 2 e {})",
        out.rad_f64(),
        dev.to_f64(),
        e.to_f64()
    );
}

/// Every operation on random balls (midpoints over 2^-1100..2^1100, beyond f64's
/// subnormal and overflow ranges, near cancellation, tiny radii and radius 0) contains the exact result at the corners and an interior
/// point of its inputs, and its radius is within the stated factor: 1 for +, -, *, fma
/// and sqrt (the bound is attained at a corner), 1 + 2^-26 |mb| / (|mb| - rb) for a / b
/// (attained at a corner, but the divisor's lower bound |mb| - rb amplifies the 2^-31
/// roundings of `Mag`), 1 + r for exp (e^r - 1 <= r + r^2 for
/// r <= 1) and 1 + r / (1 + m - r) for log1p (u / log(1 + u) <= 1 + u).
#[test]
fn every_operation_encloses_and_is_tight() {
    let prec = 128;
    let ar = Ball::new(prec).unwrap();
    let mut r = rng::stream(61, Stream::Init);
    for i in 0..3000 {
        let spread = [4, 40, 300, 1100][i % 4];
        let (a, b, c) = (
            draw_ball(&mut r, prec, spread),
            draw_ball(&mut r, prec, spread),
            draw_ball(&mut r, prec, spread),
        );
        // near cancellation: b's midpoint within a few ulps of -a's
        let mut near = b.clone();
        if i % 5 == 0 {
            let mut m = Float::with_val(prec, a.mid());
            m.next_up();
            near = BallReal::new(-m, b.rad());
        }
        let mut x = ar.zero();
        let sum = |v: &[Float], rnd| Float::with_val_round(REF, &v[0] + &v[1], rnd).0;
        let dif = |v: &[Float], rnd| Float::with_val_round(REF, &v[0] - &v[1], rnd).0;
        let mul = |v: &[Float], rnd| Float::with_val_round(REF, &v[0] * &v[1], rnd).0;
        let div = |v: &[Float], rnd| Float::with_val_round(REF, &v[0] / &v[1], rnd).0;
        let fma = |v: &[Float], rnd| {
            let p = Float::with_val(2 * REF, &v[0] * &v[1]);
            Float::with_val_round(REF, &p + &v[2], rnd).0
        };
        for bb in [&b, &near] {
            ar.set(&mut x, &a);
            ar.add(&mut x, bb);
            check("add", &x, &[&a, bb], &sum, 1.0);
            ar.set(&mut x, &a);
            ar.sub(&mut x, bb);
            check("sub", &x, &[&a, bb], &dif, 1.0);
            ar.diff(&mut x, &a, bb);
            check("diff", &x, &[&a, bb], &dif, 1.0);
            ar.prod(&mut x, &a, bb);
            check("prod", &x, &[&a, bb], &mul, 1.0);
            ar.set(&mut x, &a);
            ar.mul(&mut x, bb);
            check("mul", &x, &[&a, bb], &mul, 1.0);
            ar.set(&mut x, &a);
            ar.div(&mut x, bb);
            // the lower bound of |mb| - rb loses 2^-31 |mb| / (|mb| - rb) relatively
            let m = Float::with_val(64, bb.mid().abs_ref());
            let amp = Float::with_val(64, &m / Float::with_val(64, &m - rad(bb))).to_f64();
            check("div", &x, &[&a, bb], &div, 1.0 + 2f64.powi(-26) * amp.abs());
            ar.set(&mut x, &c);
            ar.fma(&mut x, &a, bb);
            check("fma", &x, &[&a, bb, &c], &fma, 1.0);
        }
        // exp on |m| up to ~700 (and the radius' own size)
        let small = BallReal::new(
            Float::with_val(prec, a.mid()) >> (spread.max(4) - 4) as u32,
            a.rad(),
        );
        let small = BallReal::new(
            small.mid().clone(),
            Mag::of_float(small.mid()).mul_up(Mag::pow2(-1 - (i as i64 % 90))),
        );
        ar.set(&mut x, &small);
        ar.exp(&mut x);
        let r_f = small.rad().to_f64_up();
        check(
            "exp",
            &x,
            &[&small],
            &|v, rnd| Float::with_val_round(REF, v[0].exp_ref(), rnd).0,
            1.0 + r_f,
        );
        ar.set(&mut x, &small);
        ar.ln_1p(&mut x);
        let lo = (small.mid().to_f64() + 1.0 - r_f).max(1e-300);
        let f_log = if lo > 0.0 {
            1.0 + r_f / lo
        } else {
            f64::INFINITY
        };
        check(
            "ln_1p",
            &x,
            &[&small],
            &|v, rnd| Float::with_val_round(REF, v[0].ln_1p_ref(), rnd).0,
            f_log,
        );
        let pos = BallReal::new(small.mid().clone().abs(), small.rad());
        ar.set(&mut x, &pos);
        ar.sqrt(&mut x);
        check(
            "sqrt",
            &x,
            &[&pos],
            &|v, rnd| Float::with_val_round(REF, v[0].sqrt_ref(), rnd).0,
            1.0,
        );
        // erf: Lipschitz 2 / sqrt(pi) < 1.13, the radius' factor; within |m| + r <= 1/2
        // erf' >= 2 exp(-1/4) / sqrt(pi) > 0.878, so the radius is within 1.13 / 0.878
        // < 1.29 of the true deviation there (farther out, where erf' -> 0, it is loose)
        ar.set(&mut x, &small);
        ar.erf(&mut x);
        let near0 = small.mid().to_f64().abs() + r_f <= 0.5;
        check(
            "erf",
            &x,
            &[&small],
            &|v, rnd| Float::with_val_round(REF, v[0].erf_ref(), rnd).0,
            if near0 { 1.29 } else { f64::INFINITY },
        );
        // f64 operands (exact data)
        // a finite f64 (data are finite): a's midpoint where f64 holds it
        let v = match a.mid().to_f64() * 0.37 {
            v if v.is_finite() => v,
            _ => 1.5e300,
        };
        let fv = Float::with_val(53, v);
        let vb = BallReal::new(fv.clone(), Mag::ZERO);
        ar.set(&mut x, &c);
        ar.fma_f64(&mut x, &b, v);
        check("fma_f64", &x, &[&b, &vb, &c], &fma, 1.0);
        ar.set(&mut x, &b);
        ar.mul_f64(&mut x, v);
        check("mul_f64", &x, &[&b, &vb], &mul, 1.0);
        ar.set(&mut x, &b);
        ar.div_f64(&mut x, v);
        check("div_f64", &x, &[&b, &vb], &div, 1.0);
        ar.set(&mut x, &b);
        ar.add_f64(&mut x, v);
        check("add_f64", &x, &[&b, &vb], &sum, 1.0);
    }
}

/// An adversarial midpoint at `prec` bits (kind `k`): an exact square `j^2 2^(2e)`, a power
/// of two, one ulp above or below an exact square, or a generic value, signed at random;
/// `e` is the binary exponent's scale.
fn adversarial_mid(r: &mut rand_chacha::ChaCha20Rng, prec: u32, k: usize, e: i32) -> Float {
    let j = 1 + (rng::uniform(r) * 1e6) as u64;
    let half = e / 2;
    let mut m = match k % 5 {
        0 => Float::with_val(prec, j * j) << (2 * half),
        1 => Float::with_val(prec, 1) << e,
        2 | 3 => {
            let mut m = Float::with_val(prec, j * j) << (2 * half);
            if k % 5 == 2 {
                m.next_up();
            } else {
                m.next_down();
            }
            m
        }
        _ => {
            let mut m = Float::with_val(prec, 1.0 + rng::uniform(r));
            m += Float::with_val(prec, rng::uniform(r)) >> 60u32;
            m << e
        }
    };
    if rng::uniform(r) < 0.3 {
        m = -m;
    }
    m
}

/// An adversarial radius for a midpoint `m`: zero, far below the midpoint's half ulp
/// (2^-(prec + 1..prec + 90) relative: the rounding term is absent for an exact result,
/// so the radius alone must cover the input), around it, a generic relative size, or a
/// power of two exactly.
fn adversarial_rad(r: &mut rand_chacha::ChaCha20Rng, prec: u32, m: &Float) -> Mag {
    let rel = match (rng::uniform(r) * 6.0) as u32 {
        0 => return Mag::ZERO,
        1 => -(prec as i64) - 1 - (rng::uniform(r) * 90.0) as i64,
        2 => -(prec as i64) + 2 - (rng::uniform(r) * 4.0) as i64,
        3 => -1 - (rng::uniform(r) * 60.0) as i64,
        _ => -40,
    };
    let base = Mag::of_float(m).mul_up(Mag::pow2(rel));
    if rng::uniform(r) < 0.5 {
        // a power of two
        Mag::pow2(base.to_float(64).get_exp().map_or(0, |x| x as i64 - 1))
    } else {
        base
    }
}

/// Adversarial balls (exact squares, powers of two, values one ulp from an exact result;
/// radii far below, near and above the midpoint's half ulp; exponents near 0, near f64's
/// ends and near MPFR's own exponent limits, where products overflow and underflow), at
/// 53, 64, 128 and 256 bits: every operation contains the exact result at the corners and
/// an interior point of its inputs (4096-bit references; points whose exact value MPFR
/// cannot hold are skipped by `check`). The exact squares are what `sqrt` with its
/// divisor rounded up missed: sqrt([4 +- 2^-40]) returned [2 +- 2^-42], which excludes
/// sqrt(4 - 2^-40).
#[test]
fn adversarial_balls_are_enclosed() {
    // the reported counterexample
    let ar = Ball::new(128).unwrap();
    let a = BallReal::new(Float::with_val(128, 4), Mag::pow2(-40));
    let mut x = a.clone();
    ar.sqrt(&mut x);
    let corner = Float::with_val(REF, 4) - Float::with_val(REF, Float::i_exp(1, -40));
    let corner = Float::with_val(REF, corner);
    assert!(
        x.contains(&Float::with_val(REF, corner.sqrt_ref())),
        "sqrt([4 +- 2^-40]) = {x:?}"
    );
    // SAFETY: reading MPFR's exponent range
    let (emin, emax) = unsafe {
        (
            gmp_mpfr_sys::mpfr::get_emin() as i32,
            gmp_mpfr_sys::mpfr::get_emax() as i32,
        )
    };
    let mut r = rng::stream(64, Stream::Init);
    let mut checked = 0usize;
    for prec in [53u32, 64, 128, 256] {
        let ar = Ball::new(prec).unwrap();
        for i in 0..2000 {
            // exponent scales: ordinary, near f64's limits, near MPFR's limits (a product
            // or quotient of two of these leaves MPFR's range: overflow and underflow)
            let e = match i % 6 {
                0 | 1 => (rng::uniform(&mut r) * 20.0) as i32 - 10,
                2 => 1020 + (rng::uniform(&mut r) * 60.0) as i32,
                3 => -1070 - (rng::uniform(&mut r) * 60.0) as i32,
                4 => emax / 2 - (rng::uniform(&mut r) * 40.0) as i32,
                _ => emin / 2 + 20 - (rng::uniform(&mut r) * 40.0) as i32,
            };
            let ma = adversarial_mid(&mut r, prec, i, e);
            let mb = adversarial_mid(&mut r, prec, i / 5 + 1, e);
            let a = BallReal::new(ma.clone(), adversarial_rad(&mut r, prec, &ma));
            let b = BallReal::new(mb.clone(), adversarial_rad(&mut r, prec, &mb));
            // b one ulp from -a (cancellation to a tiny exact difference)
            let mut nm = Float::with_val(prec, a.mid());
            nm.next_up();
            let near = BallReal::new(-nm, b.rad());
            let sum = |v: &[Float], rnd| Float::with_val_round(REF, &v[0] + &v[1], rnd).0;
            let dif = |v: &[Float], rnd| Float::with_val_round(REF, &v[0] - &v[1], rnd).0;
            let mul = |v: &[Float], rnd| Float::with_val_round(REF, &v[0] * &v[1], rnd).0;
            let div = |v: &[Float], rnd| Float::with_val_round(REF, &v[0] / &v[1], rnd).0;
            let fma = |v: &[Float], rnd| {
                // the product exactly, or rounded the same way where it leaves the range
                let p = Float::with_val_round(2 * REF, &v[0] * &v[1], rnd).0;
                Float::with_val_round(REF, &p + &v[2], rnd).0
            };
            let any = f64::INFINITY;
            for bb in [&b, &near] {
                ar.set(&mut x, &a);
                ar.add(&mut x, bb);
                check("add", &x, &[&a, bb], &sum, any);
                ar.diff(&mut x, &a, bb);
                check("diff", &x, &[&a, bb], &dif, any);
                ar.prod(&mut x, &a, bb);
                check("prod", &x, &[&a, bb], &mul, any);
                ar.set(&mut x, &a);
                ar.div(&mut x, bb);
                check("div", &x, &[&a, bb], &div, any);
                ar.set(&mut x, &a);
                ar.fma(&mut x, bb, &b);
                check("fma", &x, &[bb, &b, &a], &fma, any);
                checked += 5;
            }
            let pos = BallReal::new(a.mid().clone().abs(), a.rad());
            ar.set(&mut x, &pos);
            ar.sqrt(&mut x);
            check(
                "sqrt",
                &x,
                &[&pos],
                &|v, rnd| Float::with_val_round(REF, v[0].sqrt_ref(), rnd).0,
                any,
            );
            // exp and log1p at ordinary scales (the exact result leaves MPFR's range
            // otherwise, where the reference cannot hold it)
            if i % 6 < 2 {
                let small = BallReal::new(Float::with_val(prec, a.mid()) >> 4u32, a.rad());
                ar.set(&mut x, &small);
                ar.exp(&mut x);
                check(
                    "exp",
                    &x,
                    &[&small],
                    &|v, rnd| Float::with_val_round(REF, v[0].exp_ref(), rnd).0,
                    any,
                );
                let one = BallReal::new(Float::with_val(prec, a.mid().clone().abs()), a.rad());
                ar.set(&mut x, &one);
                ar.ln_1p(&mut x);
                check(
                    "ln_1p",
                    &x,
                    &[&one],
                    &|v, rnd| Float::with_val_round(REF, v[0].ln_1p_ref(), rnd).0,
                    any,
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 80_000);
}

/// A result that underflows to MPFR's smallest positive number 2^(emin - 1) errs by more
/// than half its ulp: 3 2^(emin - 3) (exact, below the range) rounds to 2^(emin - 1), an
/// error of 2^(emin - 3), which the ball must cover. The exact value is below MPFR's range,
/// so the check is made on the scaled values (x 2^(1 - emin)): 0.75 in [1 +- r'].
#[test]
fn an_underflow_to_the_smallest_number_is_enclosed() {
    // SAFETY: reading MPFR's exponent range
    let emin = unsafe { gmp_mpfr_sys::mpfr::get_emin() };
    for prec in [53u32, 128, 256] {
        let ar = Ball::new(prec).unwrap();
        let k1 = emin / 2;
        let a = BallReal::new(Float::with_val(prec, 3) << (k1 as i32), Mag::ZERO);
        let b = BallReal::new(
            Float::with_val(prec, 1) << ((emin - 3 - k1) as i32),
            Mag::ZERO,
        );
        let mut x = ar.zero();
        ar.prod(&mut x, &a, &b);
        let scale = Mag::pow2(1 - emin);
        let mid = Float::with_val(64, x.mid() << ((1 - emin) as i32));
        let rad = x.rad().mul_up(scale).to_float(64);
        let dev = Float::with_val(64, &mid - 0.75f64).abs();
        assert!(
            !x.mid().is_zero() && dev <= rad,
            "prec {prec}: 3 2^(emin - 3) not in {x:?} (scaled: {mid} +- {rad})"
        );
    }
}

/// `max` with radii below MPFR's exponent range (values near `emin`, radii a few binades
/// below it, which MPFR rounds up when it holds them): the larger upper end is decided
/// from lower bounds of the radii, so x = [m +- 2^(emin - 3)] and a = [m +- 2^(emin - 5)]
/// give a ball that holds m + 2^(emin - 3) (x's upper end), checked on the values scaled
/// by 2^(20 - emin).
#[test]
fn max_decides_with_lower_bounds_of_the_radii() {
    // SAFETY: reading MPFR's exponent range
    let emin = unsafe { gmp_mpfr_sys::mpfr::get_emin() };
    let ar = Ball::new(128).unwrap();
    let m = Float::with_val(128, 1) << ((emin + 10) as i32);
    let x0 = BallReal::new(m.clone(), Mag::pow2(emin - 3));
    let a = BallReal::new(m.clone(), Mag::pow2(emin - 5));
    let mut x = x0.clone();
    ar.max(&mut x, &a);
    let s = (20 - emin) as i32;
    let top = Float::with_val(256, &m << s) + (Float::with_val(256, 1) << 17u32);
    let mid = Float::with_val(256, x.mid() << s);
    let rad = x.rad().mul_up(Mag::pow2(20 - emin)).to_float(64);
    let dev = Float::with_val(256, &mid - &top).abs();
    assert!(dev <= rad, "x's upper end not in max(x, a) = {x:?}");
}

/// `sqrt` of a ball whose lower end m - r lies below MPFR's exponent range: the divisor
/// sqrt(m) + sqrt(m - r) must be a lower bound, so sqrt(m - r) of a lower bound of m - r
/// (zero where MPFR cannot hold it, not its smallest positive number). With m = 2^(emin +
/// 7) and r = m - 2^(emin - 9), the corner sqrt(2^(emin - 9)) = 2^((emin - 9) / 2) must
/// lie in the result (checked on the values scaled by 2^-((emin - 9) / 2)).
#[test]
fn sqrt_below_the_range_divides_by_a_lower_bound() {
    // SAFETY: reading MPFR's exponent range
    let emin = unsafe { gmp_mpfr_sys::mpfr::get_emin() };
    assert!((emin - 9) % 2 == 0, "emin is odd (MPFR's default)");
    let ar = Ball::new(128).unwrap();
    let m = Float::with_val(128, 1) << ((emin + 7) as i32);
    let r = Mag::parse_exact(&format!("ffff0000p{}", emin - 9 - 16)).unwrap();
    let mut x = BallReal::new(m, r);
    ar.sqrt(&mut x);
    let s = -(emin - 9) / 2;
    let mid = Float::with_val(256, x.mid() << (s as i32));
    let rad = x.rad().mul_up(Mag::pow2(s)).to_float(64);
    let dev = Float::with_val(256, &mid - 1u32).abs();
    assert!(
        dev <= rad,
        "sqrt(m - r) not in {x:?} (scaled {mid} +- {rad})"
    );
}

/// The exact dot product of the midpoints, and the radius terms' sum, at `REF` bits
/// (exact for these exponent ranges: products span at most 2 * 300 + 2 * 128 bits).
fn exact_dot(x: &[BallReal], y: &[BallReal]) -> (Float, Float) {
    let (mut s, mut r) = (Float::new(REF), Float::new(REF));
    for (a, b) in x.iter().zip(y) {
        s += Float::with_val(REF, a.mid() * b.mid());
        let (ma, mb) = (
            Float::with_val(REF, a.mid().abs_ref()),
            Float::with_val(REF, b.mid().abs_ref()),
        );
        r += Float::with_val(REF, &ma * &rad(b))
            + Float::with_val(REF, &mb * &rad(a))
            + Float::with_val(REF, rad(a) * rad(b));
    }
    (s, r)
}

/// The ball kernels (`dot`, `dot_f64`, `axpy`, `axpy_f64`, and `matvec` through them) on
/// random vectors around every multiple of LANES, with zeros, exact entries, spread
/// magnitudes and exact cancellation: the exact sum of the midpoint products lies in
/// the result, shifted by the radius terms it must (the result's radius is at least
/// their sum), and the radius is at most (1 + (len + 4) 2^-30) (radius terms) + 2 e +
/// len 2^(E - 300) with E the largest product's exponent: the upward roundings of the
/// radius sum (2^-31 per `Mag` operation, len + 4 in a chain), the rounding once at the
/// end, and the fixed-point sum's truncation far below the last bit.
///
/// At 128 bits (two limbs: the kernels' register path) and 256 bits (their general limb
/// path).
#[test]
fn kernels_enclose_their_exact_sums() {
    for prec in [128, 256] {
        kernels_at(prec);
    }
}

fn kernels_at(prec: u32) {
    let ar = Ball::new(prec).unwrap();
    let mut r = rng::stream(62, Stream::Init);
    for len in (0..40).chain([100, 257]) {
        for spread in [3, 60, 300] {
            let mut x: Vec<BallReal> = (0..len).map(|_| draw_ball(&mut r, prec, spread)).collect();
            let mut y: Vec<BallReal> = (0..len).map(|_| draw_ball(&mut r, prec, spread)).collect();
            if len > 3 {
                // an exact zero and an exact cancellation
                x[0] = ar.zero();
                x[2] = x[1].clone();
                y[2] = BallReal::new(-y[1].mid().clone(), y[1].rad());
            }
            let (s, terms) = exact_dot(&x, &y);
            let mut out = ar.zero();
            ar.dot(&x, &y, &mut out);
            assert!(
                out.contains(&s),
                "dot len {len} spread {spread}: {s} not in {out:?}"
            );
            assert!(rad(&out) >= terms, "the radius covers the input radii");
            let big = x
                .iter()
                .zip(&y)
                .filter_map(|(a, b)| Some(a.mid().get_exp()? + b.mid().get_exp()?))
                .max();
            let slack = big.map_or(Float::new(REF), |e| {
                Float::with_val(REF, Float::i_exp(len as i32, e - 300))
            });
            let e = out.mid().get_exp().map_or(Float::new(REF), |x| {
                Float::with_val(REF, Float::i_exp(1, x - prec as i32))
            });
            let mag_ops = 1.0 + (len as f64 + 4.0) * 2f64.powi(-30);
            let bound = Float::with_val(REF, &terms * mag_ops) + &e + &slack;
            assert!(
                rad(&out) <= bound,
                "dot len {len}: radius {} above {}",
                out.rad_f64(),
                bound.to_f64()
            );
            // f64 data against balls
            let xf: Vec<f64> = x.iter().map(|b| b.mid().to_f64()).collect();
            let xb: Vec<BallReal> = xf
                .iter()
                .map(|v| BallReal::new(Float::with_val(53, *v), Mag::ZERO))
                .collect();
            let (s, terms) = exact_dot(&xb, &y);
            ar.dot_f64(&xf, &y, &mut out);
            assert!(out.contains(&s) && rad(&out) >= terms, "dot_f64 len {len}");
            // axpy: y_k + alpha x_k
            let alpha = draw_ball(&mut r, prec, spread);
            let mut z = y.clone();
            ar.axpy(&alpha, &x, &mut z);
            for k in 0..len {
                let (s, terms) = exact_dot(
                    &[alpha.clone(), y[k].clone()],
                    &[
                        x[k].clone(),
                        BallReal::new(Float::with_val(2, 1), Mag::ZERO),
                    ],
                );
                assert!(z[k].contains(&s) && rad(&z[k]) >= terms, "axpy {k}");
            }
            let mut z = y.clone();
            ar.axpy_f64(&alpha, &xf, &mut z);
            for k in 0..len {
                let (s, _) = exact_dot(
                    &[alpha.clone(), y[k].clone()],
                    &[
                        xb[k].clone(),
                        BallReal::new(Float::with_val(2, 1), Mag::ZERO),
                    ],
                );
                assert!(z[k].contains(&s), "axpy_f64 {k}");
            }
        }
    }
}

/// Prepared matrices (`Arith::prepare`, the span step's Gram matrices) multiplied in fixed
/// point (`arith/fixed.rs`): for balls at 53, 64, 128, 200, 256 and 512 bits (2 to 9
/// limbs: the specialised and the general kernel) and random rows and vectors (zeros,
/// exact cancellation, magnitudes over 2^-300..2^300, radii from 0 up), each output
/// contains the exact sum of the midpoint products, its radius covers the input radii's
/// terms, and it is at most those terms bounded as the kernel bounds them (each row's
/// largest entry radius times sum |v| + sum r, the f64 radius pass' rounding) plus the
/// rounding and the stated truncation `cols (L (L - 1) / 2 + 2) 2^(s_m + s_v - 64 L)`;
/// the MPFR twin's product lies within that truncation plus half an ulp of the exact sum.
#[test]
fn prepared_products_enclose_their_exact_sums() {
    let mut r = rng::stream(65, Stream::Init);
    for prec in [53u32, 64, 128, 200, 256, 512] {
        let ar = Ball::new(prec).unwrap();
        let twin = Mpfr::truth(prec.max(64)).unwrap();
        let limbs = (prec as i64 + 64 + 63) / 64;
        for (rows, cols, spread) in [(1, 1, 3), (3, 7, 60), (5, 16, 3), (4, 161, 300), (2, 33, 0)] {
            let mut m: Vec<BallReal> = (0..rows * cols)
                .map(|_| draw_ball(&mut r, prec, spread.max(1)))
                .collect();
            let mut v: Vec<BallReal> = (0..cols)
                .map(|_| draw_ball(&mut r, prec, spread.max(1)))
                .collect();
            if cols > 3 {
                // a zero entry, an exact cancellation within row 0, a zero radius
                m[0] = ar.zero();
                m[2] = m[1].clone();
                v[2] = BallReal::new(-v[1].mid().clone(), v[1].rad());
                v[3] = BallReal::new(v[3].mid().clone(), Mag::ZERO);
            }
            if spread == 0 {
                // an all-zero row
                for x in &mut m[..cols] {
                    *x = ar.zero();
                }
            }
            let prepared = ar.prepare(m.clone(), cols);
            assert!(
                prepared.fixed().is_some(),
                "prec {prec}: a fixed-point layout"
            );
            let mut out = ar.zeros(rows);
            tokensel::prelude::kernels::matvec_prepared(&ar, &prepared, 0, &v, &mut out);
            let scale = |xs: &[BallReal]| xs.iter().filter_map(|b| b.mid().get_exp()).max();
            let sv = scale(&v);
            for i in 0..rows {
                let row = &m[i * cols..(i + 1) * cols];
                let (s, terms) = exact_dot(row, &v);
                let what = format!("prec {prec}, {rows}x{cols}, spread {spread}, row {i}");
                assert!(out[i].contains(&s), "{what}: {s} not in {:?}", out[i]);
                assert!(
                    rad(&out[i]) >= terms,
                    "{what}: the radius covers the input radii"
                );
                // the kernel's own bound of the radius terms
                let big_r = row.iter().map(rad).fold(Float::new(REF), |a, b| a.max(&b));
                let abs_v = v.iter().fold(Float::new(REF), |a, b| {
                    a + Float::with_val(REF, b.mid().abs_ref())
                });
                let sum_r = v.iter().fold(Float::new(REF), |a, b| a + rad(b));
                let direct = row.iter().zip(&v).fold(Float::new(REF), |a, (x, y)| {
                    a + Float::with_val(REF, x.mid().abs_ref()) * rad(y)
                });
                let bound_terms = Float::with_val(
                    REF,
                    &direct + Float::with_val(REF, &big_r * (abs_v + sum_r)),
                );
                let trunc = match (scale(row), sv) {
                    (Some(a), Some(b)) => {
                        let per = (limbs * (limbs - 1) / 2 + 2) as i32 * cols as i32;
                        Float::with_val(REF, Float::i_exp(per, a + b - 64 * limbs as i32))
                    }
                    _ => Float::new(REF),
                };
                let e = out[i].mid().get_exp().map_or(Float::new(REF), |x| {
                    Float::with_val(REF, Float::i_exp(1, x - prec as i32))
                });
                let bound = Float::with_val(REF, &bound_terms * (1.0 + 2f64.powi(-20)))
                    + &trunc
                    + &e
                    + Float::with_val(REF, Float::i_exp(1, -1000));
                assert!(
                    rad(&out[i]) <= bound,
                    "{what}: radius {} above {}",
                    out[i].rad_f64(),
                    bound.to_f64()
                );
            }
            // the twin: the midpoints, the same sums
            let mids: Vec<Float> = m
                .iter()
                .map(|b| Float::with_val(twin.prec(), b.mid()))
                .collect();
            let vm: Vec<Float> = v
                .iter()
                .map(|b| Float::with_val(twin.prec(), b.mid()))
                .collect();
            let tp = twin.prepare(mids.clone(), cols);
            assert!(tp.fixed().is_some());
            let mut tout = twin.zeros(rows);
            tokensel::prelude::kernels::matvec_prepared(&twin, &tp, 0, &vm, &mut tout);
            let tl = (twin.prec() as i64 + 64 + 63) / 64;
            for i in 0..rows {
                let exact = mids[i * cols..(i + 1) * cols]
                    .iter()
                    .zip(&vm)
                    .fold(Float::new(REF), |a, (x, y)| a + Float::with_val(REF, x * y));
                let d = Float::with_val(REF, &tout[i] - &exact).abs();
                let sm = mids[i * cols..(i + 1) * cols]
                    .iter()
                    .filter_map(|x| x.get_exp())
                    .max();
                let svv = vm.iter().filter_map(|x| x.get_exp()).max();
                let trunc = match (sm, svv) {
                    (Some(a), Some(b)) => Float::with_val(
                        REF,
                        Float::i_exp(
                            (tl * (tl - 1) / 2 + 2) as i32 * cols as i32,
                            a + b - 64 * tl as i32,
                        ),
                    ),
                    _ => Float::new(REF),
                };
                let e = tout[i].get_exp().map_or(Float::new(REF), |x| {
                    Float::with_val(REF, Float::i_exp(1, x - twin.prec() as i32 - 1))
                });
                assert!(
                    d <= Float::with_val(REF, &trunc + &e),
                    "twin prec {}: off by {}",
                    twin.prec(),
                    d.to_f64()
                );
            }
        }
    }
}

/// The twin's prepared product is accurate per value, not only against the row's scale:
/// a row whose sum lies far below its largest entry (a tiny p(0) in a Gram row, or
/// cancellation) is correctly rounded (`Mpfr::matvec_prepared` falls back to
/// `mpfr_dot` where the fixed-point truncation bound exceeds the result's ulp). Before
/// that fallback the first row came out 0 (the 1e-100 term lies below the fixed-point
/// window of 2^(s_m + s_v - 64 L)) and `compare` reported a relative error of inf.
#[test]
fn twin_prepared_rows_far_below_their_entries_are_correctly_rounded() {
    for prec in [64u32, 256, 512] {
        let twin = Mpfr::truth(prec).unwrap();
        let cols = 6;
        let big = [20.5, -3.25, 7.0, 11.0, 1.0];
        let mut m: Vec<f64> = Vec::new();
        // row 0: (1e-100, big...): v = (1, 0, ...) picks the tiny entry alone
        m.push(1e-100);
        m.extend(big);
        // row 1: cancellation down to 2^-200 of the entries
        m.extend([1.0, -1.0, 2f64.powi(-200), 0.0, 0.0, 0.0]);
        // row 2: an ordinary row (the fixed-point path keeps it)
        m.extend([0.5, 1.5, -2.5, 3.5, 4.5, -5.5]);
        let rows = m.len() / cols;
        let mf: Vec<Float> = m.iter().map(|x| Float::with_val(prec, *x)).collect();
        for v in [
            [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            [1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
        ] {
            let vf: Vec<Float> = v.iter().map(|x| Float::with_val(prec, *x)).collect();
            let prepared = twin.prepare(mf.clone(), cols);
            assert!(
                prepared.fixed().is_some(),
                "prec {prec}: fixed-point layout"
            );
            let mut out = twin.zeros(rows);
            tokensel::prelude::kernels::matvec_prepared(&twin, &prepared, 0, &vf, &mut out);
            for i in 0..rows {
                let exact = m[i * cols..(i + 1) * cols]
                    .iter()
                    .zip(&v)
                    .fold(Float::new(REF), |a, (x, y)| a + Float::with_val(REF, x * y));
                let want = Float::with_val(prec, &exact);
                assert_eq!(
                    out[i], want,
                    "prec {prec}, v {v:?}, row {i}: {} against the exact {}",
                    out[i], exact
                );
            }
        }
    }
}

/// `compare` from a tiny p(0) (1e-100 against unit data): the span twin's step-0 scores
/// <x, p(0)> are its reference and must be accurate per value; before the twin's
/// fallback above, compare reported "f64 error passes 1e-8 first at step 0 in `scores`"
/// with a relative error of inf, while f64 was within 2^-50 of the exact scores.
#[test]
fn compare_from_a_tiny_p0_is_not_a_false_finding() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tiny.toml");
    std::fs::write(
        &cfg,
        "d = 20\nn_train = 6\nn_test = 10\nsteps = 30\nseed = 2\nmethod = \"auto\"\n\
         [init]\np = \"gaussian\"\np_scale = 1e-100\n",
    )
    .unwrap();
    let out = common::tokensel(&["compare", "--config", cfg.to_str().unwrap(), "--quiet"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("256-bit twin (stable, span)"), "{text}");
    assert!(
        text.contains("verdict: f64 stays within 1e-8 of the twin on every quantity"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
}

/// The data Gram and cross Gram matrices: exact sums rounded once for a ball (radius at
/// most the half ulp, the exact value inside), each entry one `dot` of the rows in f64.
#[test]
fn data_grams_are_exact_for_balls() {
    let mut r = rng::stream(63, Stream::Init);
    let (rows, cols) = (5, 37);
    let mut a = vec![0.0; rows * cols];
    let mut b = vec![0.0; 3 * cols];
    rng::fill_normal(&mut r, 1.0, &mut a);
    rng::fill_normal(&mut r, 1e-3, &mut b);
    let ar = Ball::new(64).unwrap();
    let g = tokensel::prelude::kernels::data_gram(&ar, &a, rows, cols);
    let c = tokensel::prelude::kernels::cross_gram(&ar, &a, &b, cols);
    let exact = |x: &[f64], y: &[f64]| {
        let mut s = Float::new(REF);
        for (u, v) in x.iter().zip(y) {
            s += Float::with_val(106, &Float::with_val(53, *u) * *v);
        }
        s
    };
    for i in 0..rows {
        for j in 0..rows {
            let e = exact(&a[i * cols..(i + 1) * cols], &a[j * cols..(j + 1) * cols]);
            let gij = &g[i * rows + j];
            assert!(gij.contains(&e));
            let half_ulp = Float::with_val(REF, Float::i_exp(1, gij.mid().get_exp().unwrap() - 65));
            assert!(rad(gij) <= half_ulp, "one rounding");
        }
        for j in 0..3 {
            let e = exact(&a[i * cols..(i + 1) * cols], &b[j * cols..(j + 1) * cols]);
            assert!(c[i * 3 + j].contains(&e));
        }
    }
    let f = tokensel::prelude::kernels::cross_gram(&tokensel::prelude::F64, &a, &b, cols);
    assert_eq!(
        f[4],
        tokensel::prelude::kernels::dot(&a[cols..2 * cols], &b[cols..2 * cols])
    );
}

/// Values around the ends of f64's range and far beyond (MPFR's range): the radius
/// keeps its exponent (exp(-1e5) has a radius near 2^-144000 that is not zero), and an
/// exp of a ball near -745 (where an f64 radius would underflow) still encloses.
#[test]
fn radii_keep_a_wide_exponent() {
    let ar = Ball::new(128).unwrap();
    for m in [-745.5, -1e5, -3e7] {
        let a = BallReal::new(Float::with_val(128, m), Mag::pow2(-60));
        let mut x = a.clone();
        ar.exp(&mut x);
        assert!(!x.rad().is_zero() && !x.rad().is_inf());
        check(
            "exp far",
            &x,
            &[&a],
            &|v, rnd| Float::with_val_round(REF, v[0].exp_ref(), rnd).0,
            1.01,
        );
        let (lo, hi) = ar.enclose(&x);
        assert!(
            lo <= hi && lo >= 0.0,
            "outward f64 enclosure [{lo:e}, {hi:e}]"
        );
    }
    // subnormal-range data entries are exact
    let mut x = ar.zero();
    ar.set_f64(&mut x, f64::from_bits(3));
    assert!(x.rad().is_zero());
    ar.mul_f64(&mut x, f64::from_bits(5));
    assert!(x.contains(&Float::with_val(
        REF,
        Float::with_val(64, f64::from_bits(3)) * f64::from_bits(5)
    )));
}

/// Decisions: disjoint balls are ordered, overlapping ones are not, and `Equal` / sign 0
/// are answered for exact values only.
#[test]
fn decisions_are_proved_or_refused() {
    let ar = Ball::new(128).unwrap();
    let b = |m: f64, r: f64| BallReal::new(Float::with_val(128, m), Mag::of_f64(r));
    assert_eq!(
        ar.decide_cmp(&b(1.0, 0.1), &b(1.3, 0.1)),
        Some(Ordering::Less)
    );
    assert_eq!(ar.decide_cmp(&b(1.0, 0.2), &b(1.3, 0.2)), None);
    assert_eq!(
        ar.decide_cmp(&b(1.0, 0.0), &b(1.0, 0.0)),
        Some(Ordering::Equal)
    );
    assert_eq!(ar.decide_cmp(&b(1.0, 1e-30), &b(1.0, 0.0)), None);
    assert_eq!(ar.decide_sign(&b(0.0, 0.0)), Some(0));
    assert_eq!(ar.decide_sign(&b(0.0, 1e-300)), None);
    assert_eq!(ar.decide_sign(&b(-1e-200, 1e-201)), Some(-1));
    assert_eq!(ar.decide_sign(&b(1e-200, 1e-199)), None);
    let inf = BallReal::new(Float::with_val(128, 1.0), Mag::INF);
    assert_eq!(ar.decide_sign(&inf), None);
    assert!(!ar.is_finite(&inf));
    // a division by a ball that contains 0 is the whole line
    let mut x = b(1.0, 0.0);
    ar.div(&mut x, &b(0.1, 0.2));
    assert!(!ar.is_finite(&x));
    // the max of overlapping balls encloses both possible maxima
    let (u, v) = (b(1.0, 0.3), b(1.1, 0.1));
    let mut m = u.clone();
    ar.max(&mut m, &v);
    for p in [1.3, 1.2, 1.0] {
        assert!(m.contains(&Float::with_val(128, p)), "{p} in {m:?}");
    }
    // text round trip keeps both parts exactly
    let s = ar.to_exact_string(&u);
    assert_eq!(ar.parse_exact(&s), Some(u));
}

prop_compose! {
    fn configs()(
        seed in 0u64..1000,
        d in 2usize..16,
        sizes in proptest::array::uniform4(0usize..3),
        n_train in 1usize..4,
        mu_norm in 0.5f64..8.0,
        alpha in 0.01f64..0.5,
        steps in 1u64..25,
        mode in 0u8..3,
        kaiming in any::<bool>(),
        p0 in any::<bool>(),
        span in any::<bool>(),
    ) -> Config {
        let mut c = common::small_config(
            seed, d, sizes, n_train, mu_norm, 0.3, alpha, steps, mode, kaiming, p0,
        );
        c.method = if span { Method::Span } else { Method::Direct };
        c
    }
}

/// Assert that every twin value lies in the ball of the same name.
fn inside(what: &str, step: u64, balls: &[BallReal], twin: &[Float]) {
    assert_eq!(balls.len(), twin.len());
    for (k, (b, v)) in balls.iter().zip(twin).enumerate() {
        assert!(b.contains(v), "step {step}: {what}[{k}] = {v} not in {b:?}");
    }
}

/// The largest relative radius `r / |m|` of the outputs and scores of a ball trainer (as
/// an f64, infinite where a midpoint is zero and its radius is not).
fn largest_rel_radius(b: &Trainer<'_, Ball>) -> f64 {
    let rel = |x: &BallReal| x.rad_f64() / x.mid().to_f64().abs();
    b.samples
        .iter()
        .map(|s| rel(&s.f))
        .chain(b.scores.iter().filter(|z| !z.mid().is_zero()).map(rel))
        .fold(0.0, f64::max)
}

/// Run the 128-bit ball trainer and the 1024-bit MPFR twin in lockstep (same method) and
/// check at every step that scores, attention, rest, gap, output, loss, and q lie inside
/// the enclosures. A ball run may stop with a non-finite enclosure (joint mode with a
/// large step loses about 7 bits a step: 128 bits last about 18 steps, 256 bits the
/// whole run), but only once its precision is spent: the step before, some output or
/// score has a relative radius above 2^-40; containment is checked up to there.
fn lockstep(cfg: &Config, data: &Dataset) {
    let ball = Ball::new(128).unwrap();
    let mut b = Trainer::new(cfg, data, ball, cfg.formulation).unwrap();
    let mut t = Trainer::new(cfg, data, Mpfr::truth(1024).unwrap(), cfg.formulation).unwrap();
    let mut spent = 0.0f64;
    for step in 0..=cfg.steps {
        match b.forward_backward() {
            Ok(()) => {}
            Err(tokensel::prelude::Error::NonFinite { .. }) => {
                assert!(
                    spent > 2f64.powi(-40),
                    "step {step}: the enclosure blew up with its largest relative radius \
                     {spent:e} the step before (precision not spent)"
                );
                return;
            }
            Err(e) => panic!("step {step}: {e}"),
        }
        t.forward_backward().unwrap();
        spent = largest_rel_radius(&b);
        inside("z", step, &b.scores, &t.scores);
        inside("s", step, &b.attention, &t.attention);
        for (i, (sb, st)) in b.samples.iter().zip(&t.samples).enumerate() {
            let w = |q: &str| format!("sample {i} {q}");
            inside(
                &w("f"),
                step,
                std::slice::from_ref(&sb.f),
                std::slice::from_ref(&st.f),
            );
            inside(
                &w("rest"),
                step,
                std::slice::from_ref(&sb.softmax.rest),
                std::slice::from_ref(&st.softmax.rest),
            );
            if st.softmax.gap.is_finite() {
                inside(
                    &w("gap"),
                    step,
                    std::slice::from_ref(&sb.softmax.gap),
                    std::slice::from_ref(&st.softmax.gap),
                );
            }
            inside(
                &w("loss"),
                step,
                std::slice::from_ref(&sb.loss),
                std::slice::from_ref(&st.loss),
            );
        }
        inside(
            "loss",
            step,
            std::slice::from_ref(&b.loss),
            std::slice::from_ref(&t.loss),
        );
        inside("q", step, &b.q(), &t.q());
        if step < cfg.steps {
            if let Err(e) = b.update() {
                assert!(
                    matches!(e, tokensel::prelude::Error::NonFinite { .. })
                        && spent > 2f64.powi(-40),
                    "step {step}: {e} with the largest relative radius {spent:e}"
                );
                return;
            }
            t.update().unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Short trajectories in p-, W- and joint mode, direct and span, p(0) zero or not,
    /// W(0) the identity or dense: the 1024-bit twin stays inside the 128-bit balls.
    #[test]
    fn ball_trajectories_enclose_the_twin(cfg in configs()) {
        cfg.validate().unwrap();
        let data = Dataset::generate(&cfg);
        lockstep(&cfg, &data);
    }
}

/// The default setting (balanced, p-mode from p = 0, span, 128 bits): at step 0 every
/// score is exactly 0 (radius 0), so the tie is PROVED (`Some(Equal)`); at every step
/// from 1 to 300 every training sample's top token and prediction sign are decided.
#[test]
fn default_run_decides_its_top_tokens_and_signs() {
    let cfg = Config {
        n_test: 10,
        steps: 300,
        ..Config::default()
    };
    let data = Dataset::generate(&cfg);
    let ar = Ball::new(128).unwrap();
    let mut tr = Trainer::new(&cfg, &data, ar, cfg.formulation).unwrap();
    let t = cfg.layout.tokens;
    tr.forward_backward().unwrap();
    for z in &tr.scores {
        assert!(z.rad().is_zero() && z.mid().is_zero());
        assert_eq!(ar.decide_cmp(z, &tr.scores[0]), Some(Ordering::Equal));
    }
    let mut worst_rad = 0.0f64;
    for step in 1..=cfg.steps {
        tr.update().unwrap();
        tr.forward_backward().unwrap();
        for (i, s) in tr.samples.iter().enumerate() {
            let z = &tr.scores[i * t..(i + 1) * t];
            for (j, zj) in z.iter().enumerate() {
                if j != s.softmax.top {
                    assert_eq!(
                        ar.decide_cmp(&z[s.softmax.top], zj),
                        Some(Ordering::Greater),
                        "step {step} sample {i}: top {} vs {j}",
                        s.softmax.top
                    );
                }
            }
            assert!(
                ar.decide_sign(&s.f).is_some_and(|v| v != 0),
                "step {step} sample {i}: sign of f"
            );
            assert_eq!(
                ar.decide_sign(&s.softmax.gap),
                Some(1),
                "the gap is proved positive"
            );
            worst_rad = worst_rad.max(s.f.rad_f64() / s.f.mid().to_f64().abs());
        }
    }
    eprintln!("largest relative radius of f over 300 steps: {worst_rad:.3e}");
}
