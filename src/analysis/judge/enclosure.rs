//! Proof of wrongness: the ball enclosure of the exact trajectory (`Trainer<Ball>`,
//! span step, or the direct step where the optimizer needs it; proofs-notes/certify.md) replayed in lockstep, and rigorous lower bounds
//! on how far each external value is from the exact one.
//!
//! Every enclosed entry becomes an f64 interval [lo, hi] that contains the exact value
//! ([`Arith::enclose`], rounded outward). Over a part, the distance of the external values
//! v from the exact values t is at least sqrt(sum_k g_k^2) with g_k the distance of v_k
//! from [lo_k, hi_k], and ||t|| is at most sqrt(sum_k max(|lo_k|, |hi_k|)^2); both are
//! evaluated in f64 with every operation's result stepped one ulp down (lower bounds) or
//! up (upper bounds), which covers round-to-nearest's half ulp.

use std::ops::Range;

use super::measure::Wide;
use crate::arith::{Arith, Ball};
use crate::config::{Config, Mode, WInit};
use crate::quantity::Quantity;
use crate::train::Trainer;

/// Whether the enclosure computes intervals of quantity `q` in runs of `cfg`: not for W
/// (its rebuild costs (r + 1) d^2 ball operations per record in joint mode), nor for q
/// where W(0) is dense in p- or joint mode (d^2 per record).
pub fn encloses(cfg: &Config, q: Quantity) -> bool {
    match q {
        Quantity::W => false,
        Quantity::Q => {
            cfg.mode == Mode::W || (cfg.mode == Mode::P && cfg.init.w == WInit::Identity)
        }
        _ => true,
    }
}

/// The enclosure's intervals of quantity `q` at the ball trainer's current step, or
/// `None` where they are not computed ([`encloses`]).
pub fn intervals(tr: &Trainer<'_, Ball>, q: Quantity) -> Option<Vec<(f64, f64)>> {
    if !encloses(tr.cfg, q) {
        return None;
    }
    let ar = tr.ar;
    // q of a p-mode run (W = I, not stored: [`encloses`]) is p itself
    let v = tr.quantity(q)?;
    Some(v.iter().map(|x| ar.enclose(x)).collect())
}

/// The next f64 down (a lower bound of a round-to-nearest result), not below 0.
fn down(x: f64) -> f64 {
    if x > 0.0 { x.next_down().max(0.0) } else { 0.0 }
}

/// The next f64 up (an upper bound of a round-to-nearest result).
fn up(x: f64) -> f64 {
    if x.is_finite() { x.next_up() } else { x }
}

/// sqrt(sum_k g_k^2) for g_k >= 0, rounded `dir` (down or up) at every step, scaled by
/// the largest g_k's power of two so that no square under- or overflows.
fn norm_directed(g: &[f64], lower: bool) -> Wide {
    let round = |x: f64| if lower { down(x) } else { up(x) };
    let top = g.iter().copied().fold(0.0, f64::max);
    if top == 0.0 {
        return Wide::ZERO;
    }
    if top.is_infinite() {
        return Wide::INF;
    }
    let (_, e) = rug::Float::with_val(53, top).to_f64_exp();
    // 2^-e in two factors, each finite and normal: 2^-e itself is not for e = 1024
    // (a top of 1e308 or more: powi(-1024) rounds 2^1024 to infinity and returns 0) nor
    // for e below -1023 (a subnormal top)
    let (h1, h2) = (2f64.powi(-(e / 2)), 2f64.powi(-(e - e / 2)));
    let sum = g.iter().fold(0.0, |acc, v| {
        // exact unless the first product falls into the subnormal range (scaling down:
        // its error, at most 2^-1075 and scaled by h2 <= 1, and the second product's
        // sum to at most one step of `round`)
        let s = round(v * h1 * h2);
        round(acc + round(s * s))
    });
    Wide::scaled(round(sum.sqrt()), i64::from(e))
}

/// A rigorous lower bound of ||values - t|| over the part and an upper bound of ||t||,
/// for every t in the intervals (a NaN value: infinite distance).
pub fn bounds(iv: &[(f64, f64)], part: Range<usize>, values: &[f64]) -> (Wide, Wide) {
    let mut gaps = Vec::with_capacity(part.len());
    let mut mags = Vec::with_capacity(part.len());
    for k in part {
        let (lo, hi) = iv[k];
        let v = values[k];
        if v.is_nan() {
            return (Wide::INF, Wide::INF);
        }
        gaps.push(if v < lo {
            down(lo - v)
        } else if v > hi {
            down(v - hi)
        } else {
            0.0
        });
        mags.push(lo.abs().max(hi.abs()));
    }
    (norm_directed(&gaps, true), norm_directed(&mags, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bounds bracket the distance to every point of the intervals, also for
    /// entries far below f64's range of squares.
    #[test]
    fn bounds_bracket_the_distance() {
        let iv = vec![(1.0, 1.0 + 1e-10), (-2.0, -2.0), (3e-200, 4e-200)];
        let v = [1.5, -2.0, 1e-190];
        let (lo, hi) = bounds(&iv, 0..3, &v);
        let one = Wide::of_f64(1.0);
        let dist = lo.ratio(one);
        // the true distance to the nearest point: (0.5 - 1e-10, 0, 1e-190 - 4e-200)
        let nearest = ((0.5f64 - 1e-10).powi(2)).sqrt();
        assert!(dist <= nearest && dist > nearest * (1.0 - 1e-14), "{dist}");
        let (tiny, _) = bounds(&iv, 2..3, &v);
        let t = tiny.ratio(one);
        assert!(
            t <= 1e-190 - 4e-200 && t > (1e-190 - 4e-200) * (1.0 - 1e-14),
            "{t:e}"
        );
        let norm = hi.ratio(one);
        assert!(norm >= (1.0f64 + 1e-10).hypot(2.0), "{norm}");
        assert_eq!(bounds(&iv, 0..1, &[f64::NAN, 0.0, 0.0]).0, Wide::INF);
        // values at the top of f64's range, and infinite ones, are far from [0.3, 0.31]
        // (issue 40: a top of 2^1024 > x >= 2^1023 scaled by powi(-1024) = 0 gave 0)
        let near = [(0.3, 0.31)];
        for (v, want) in [
            (1e308, 1e308 - 0.31),
            (f64::MAX, f64::MAX),
            (f64::INFINITY, f64::MAX),
        ] {
            let (lo, hi) = bounds(&near, 0..1, &[v]);
            let d = lo.ratio(one);
            assert!(
                d.is_infinite() || (d <= want && d > want * (1.0 - 1e-14)),
                "{v:e}: {d:e}"
            );
            assert!(lo.ratio(hi) > 1e300, "{v:e}: {lo:?} {hi:?}");
        }
        // and a subnormal distance is not taken for an infinite one (2^1062 = powi(1062)
        // overflows)
        let (lo, _) = bounds(&[(0.0, 0.0)], 0..1, &[1e-320]);
        let d = lo.ratio(one);
        assert!(d <= 1e-320 && d > 0.99e-320, "{lo:?}: {d:e}");
        assert_eq!(bounds(&iv, 1..2, &[0.0, -2.0, 0.0]).0, Wide::ZERO);
    }
}
