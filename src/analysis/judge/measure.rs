//! How far a recorded value is from the twin's: normwise relative errors per part of a
//! quantity, with a scale for parts whose twin value is exactly zero
//! (proofs-notes/judge.md, "What is compared").
//!
//! A part is what one error is taken over: the whole vector for p, q, W, grad_q, the
//! outputs and the loss, one training sample for the scores and the attention, one
//! entry for rest = 1 - s_top. A quantity's error at a record is the largest over its
//! parts. A part whose twin value is zero at a record is measured against its scale over
//! the run (the largest norm it has at any recorded step), or absolutely where it is
//! zero at every recorded step; the scale is known only at the end, so such errors wait
//! in [`Pending`].

use std::ops::Range;

use rug::Float;

use super::dd::DdVec;
use crate::config::Config;
use crate::quantity::Quantity;

/// A nonnegative number m 2^e with f64's precision and a wide exponent (errors and
/// norms of values far below f64's range, such as 1 - s_top at score gaps past 745).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wide {
    m: f64,
    e: i64,
}

impl Wide {
    /// Zero.
    pub const ZERO: Wide = Wide { m: 0.0, e: 0 };
    /// Infinity (an unmeasurable error).
    pub const INF: Wide = Wide {
        m: f64::INFINITY,
        e: 0,
    };

    /// |x| (NaN reads as infinite).
    pub fn of_float(x: &Float) -> Wide {
        if x.is_nan() || x.is_infinite() {
            return Wide::INF;
        }
        let (m, e) = x.to_f64_exp();
        Wide {
            m: m.abs(),
            e: i64::from(e),
        }
    }

    /// m 2^e (m >= 0; an infinite m is infinite).
    pub fn scaled(m: f64, e: i64) -> Wide {
        Wide { m, e }
    }

    /// |v| (NaN reads as infinite).
    pub fn of_f64(v: f64) -> Wide {
        if v.is_nan() {
            return Wide::INF;
        }
        Wide { m: v.abs(), e: 0 }
    }

    /// True for zero.
    pub fn is_zero(self) -> bool {
        self.m == 0.0
    }

    /// self / den as an f64 (0 / 0 = 0; x / 0 = inf).
    pub fn ratio(self, den: Wide) -> f64 {
        if self.m == 0.0 {
            return 0.0;
        }
        if den.m == 0.0 || self.m.is_infinite() {
            return f64::INFINITY;
        }
        let e = (self.e - den.e).clamp(-4000, 4000) as i32;
        let q = self.m / den.m;
        // scale in two halves so that 2^e itself never overflows
        q * 2f64.powi(e / 2) * 2f64.powi(e - e / 2)
    }

    /// The larger of two.
    pub fn max(self, b: Wide) -> Wide {
        if b.ratio(self) > 1.0 { b } else { self }
    }
}

/// The parts of a quantity in a run of `cfg`: index ranges into its row-major values.
pub fn parts(q: Quantity, cfg: &Config) -> Vec<Range<usize>> {
    let (n, t) = (cfg.n_train, cfg.tokens());
    match q {
        Quantity::Scores | Quantity::Attention => (0..n).map(|i| i * t..(i + 1) * t).collect(),
        Quantity::Rest => (0..n).map(|i| i..i + 1).collect(),
        _ => {
            let len = q.shape(cfg).iter().product();
            std::iter::once(0..len).collect()
        }
    }
}

/// The twin's value of a quantity at one record.
#[derive(Debug, Clone)]
pub enum Reference<'a> {
    /// MPFR values.
    Mpfr(Vec<Float>),
    /// Double-double values (dense rebuilds: [`super::dd`]).
    Dd(DdVec),
    /// Exact f64 values (W(0) where W does not train).
    Exact(&'a [f64]),
    /// The d x d identity (W = I).
    Identity(usize),
}

impl Reference<'_> {
    /// Entry k as (hi, lo) f64 parts (only for the f64-based kinds).
    #[inline]
    fn dd(&self, k: usize) -> (f64, f64) {
        match self {
            Reference::Dd(v) => (v.hi[k], v.lo[k]),
            Reference::Exact(v) => (v[k], 0.0),
            Reference::Identity(d) => (f64::from(u8::from(k.is_multiple_of(d + 1))), 0.0),
            Reference::Mpfr(_) => unreachable!("MPFR references are measured in MPFR"),
        }
    }

    /// ||reference_part||_2.
    pub fn norm(&self, part: Range<usize>) -> Wide {
        match self {
            Reference::Mpfr(v) => {
                let (mut acc, mut sq) = (Float::new(64), Float::new(64));
                for x in &v[part] {
                    rug::Assign::assign(&mut sq, x.square_ref());
                    acc += &sq;
                }
                Wide::of_float(&acc.sqrt())
            }
            _ => {
                let s: f64 = part
                    .map(|k| {
                        let (h, l) = self.dd(k);
                        (h + l) * (h + l)
                    })
                    .sum();
                Wide::of_f64(s.sqrt())
            }
        }
    }

    /// ||values_part - reference_part||_2 (NaN or infinite values: infinite).
    pub fn distance(&self, part: Range<usize>, values: &[f64]) -> Wide {
        if values[part.clone()].iter().any(|v| !v.is_finite()) {
            return Wide::INF;
        }
        match self {
            Reference::Mpfr(v) => {
                let prec = v.first().map_or(64, |x| x.prec().max(64));
                let (mut acc, mut sq) = (Float::new(64), Float::new(64));
                let mut diff = Float::new(prec);
                for (x, t) in values[part.clone()].iter().zip(&v[part]) {
                    rug::Assign::assign(&mut diff, *x);
                    diff -= t;
                    rug::Assign::assign(&mut sq, diff.square_ref());
                    acc += &sq;
                }
                Wide::of_float(&acc.sqrt())
            }
            _ => {
                let s: f64 = part
                    .map(|k| {
                        let (h, l) = self.dd(k);
                        // (x - h) - l with x - h error-free (TwoSum): accurate to ~u
                        let x = values[k];
                        let s = x - h;
                        let b = s - x;
                        let e = (x - (s - b)) + (-h - b);
                        let d = s + (e - l);
                        d * d
                    })
                    .sum();
                Wide::of_f64(s.sqrt())
            }
        }
    }
}

/// One quantity's error at one record for one source, before the run's scales are
/// known: the largest relative error over the parts whose twin value is nonzero, and
/// the distances of the parts whose twin value is zero.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pending {
    /// Largest relative error over the parts with a nonzero twin value.
    pub rel: f64,
    /// (part, distance) of the parts whose twin value is zero here.
    pub zero_ref: Vec<(usize, Wide)>,
}

impl Pending {
    /// The error, given each part's scale (largest twin norm over the run): a zero
    /// reference's distance over its scale, or absolute where the scale is zero too.
    pub fn resolve(&self, scales: &[Wide]) -> f64 {
        self.zero_ref
            .iter()
            .map(|&(i, dist)| {
                if scales[i].is_zero() {
                    dist.ratio(Wide { m: 1.0, e: 0 })
                } else {
                    dist.ratio(scales[i])
                }
            })
            .fold(self.rel, f64::max)
    }
}

/// The errors of one source (the external trajectory or a candidate) against the
/// reference parts' norms `norms`, from the distances `dist` of its parts.
pub fn pending(dist: &[Wide], norms: &[Wide]) -> Pending {
    let mut p = Pending::default();
    for (i, (d, n)) in dist.iter().zip(norms).enumerate() {
        if n.is_zero() {
            p.zero_ref.push((i, *d));
        } else {
            p.rel = p.rel.max(d.ratio(*n));
        }
    }
    p
}

/// A value's distance from every part of a reference.
pub fn distances(reference: &Reference<'_>, parts: &[Range<usize>], values: &[f64]) -> Vec<Wide> {
    parts
        .iter()
        .map(|p| reference.distance(p.clone(), values))
        .collect()
}

/// Each part's norm.
pub fn norms(reference: &Reference<'_>, parts: &[Range<usize>]) -> Vec<Wide> {
    parts.iter().map(|p| reference.norm(p.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ratios of wide numbers keep their exponents apart (no overflow or underflow), and
    /// the zero and infinite cases are what the docs say.
    #[test]
    fn wide_ratios() {
        let tiny = Wide::of_float(&Float::with_val(64, Float::parse("3e-400").unwrap()));
        let tinier = Wide::of_float(&Float::with_val(64, Float::parse("1e-410").unwrap()));
        let r = tiny.ratio(tinier);
        assert!((r / 3e10 - 1.0).abs() < 1e-12, "{r}");
        assert_eq!(Wide::ZERO.ratio(Wide::ZERO), 0.0);
        assert_eq!(tiny.ratio(Wide::ZERO), f64::INFINITY);
        assert_eq!(Wide::of_f64(f64::NAN), Wide::INF);
        assert_eq!(tiny.max(tinier), tiny);
    }

    /// The double-double distance sees an error far below f64's ulp of the value.
    #[test]
    fn dd_distance_resolves_below_an_ulp() {
        let r = Reference::Dd(DdVec {
            hi: vec![1.0, 2.0],
            lo: vec![1e-20, 0.0],
        });
        let d = r
            .distance(0..2, &[1.0, 2.0 + f64::EPSILON * 2.0])
            .ratio(Wide::of_f64(1.0));
        let want = (1e-40f64 + (2.0 * f64::EPSILON).powi(2)).sqrt();
        assert!((d / want - 1.0).abs() < 1e-12, "{d} {want}");
        let r = Reference::Dd(DdVec {
            hi: vec![1.0],
            lo: vec![1e-20],
        });
        let d = r.distance(0..1, &[1.0]).ratio(Wide::of_f64(1.0));
        assert!((d / 1e-20 - 1.0).abs() < 1e-12, "{d}");
    }
}
