//! Enclosures and exact counts as a certificate writes them: an [`Interval`] `[lo, hi]`
//! with its ends rounded outward, a [`Count`] of proved and possible decisions.

use super::*;

/// An f64 interval `[lo, hi]` that contains an exact value (the ends rounded outward);
/// serialised as a two-element array. Read back only as an interval: `lo <= hi`, neither
/// end NaN (a reversed or NaN interval is refused by every reader).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Interval(
    #[serde(with = "crate::io::nonfinite")] pub f64,
    #[serde(with = "crate::io::nonfinite")] pub f64,
);

impl<'de> Deserialize<'de> for Interval {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Interval, D::Error> {
        #[derive(Deserialize)]
        struct Ends(
            #[serde(with = "crate::io::nonfinite")] f64,
            #[serde(with = "crate::io::nonfinite")] f64,
        );
        let Ends(lo, hi) = Ends::deserialize(d)?;
        if !matches!(
            lo.partial_cmp(&hi),
            Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
        ) {
            return Err(serde::de::Error::custom(format!(
                "[{lo}, {hi}] is not an interval (its ends must be numbers with lo <= hi)"
            )));
        }
        Ok(Interval(lo, hi))
    }
}

impl crate::io::nonfinite::Value for Interval {
    fn put<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.serialize(s)
    }

    fn take<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Interval, D::Error> {
        Interval::deserialize(d)
    }
}

impl crate::io::record::Value for Interval {
    /// Both ends in the range (a share's enclosure within [0, 1], up to the range's slack).
    fn inside(self, range: crate::io::record::Range) -> bool {
        range.contains(self.0) && range.contains(self.1)
    }
    fn show(self) -> String {
        format!("[{}, {}]", self.0, self.1)
    }
    fn point(v: f64) -> Interval {
        Interval::point(v)
    }
    const WIDTH: usize = 2;
}

impl Interval {
    /// The enclosure of a ball, rounded outward to f64.
    pub fn of(ar: &Ball, x: &BallReal) -> Interval {
        let (lo, hi) = ar.enclose(x);
        Interval(lo, hi)
    }

    /// The interval of a known value.
    pub fn point(v: f64) -> Interval {
        Interval(v, v)
    }

    /// Lower end.
    pub fn lo(&self) -> f64 {
        self.0
    }

    /// Upper end.
    pub fn hi(&self) -> f64 {
        self.1
    }

    /// True when both ends are the same f64: the value is known to f64 precision (for
    /// a count, exactly).
    pub fn is_point(&self) -> bool {
        self.0 == self.1
    }

    /// The exact share `[count / n, (count + more) / n]` with its ends rounded OUTWARD
    /// to f64 (a count of 18 of 20 is `[0.8999999999999999, 0.9000000000000000222]`, which
    /// contains the exact 0.9; the ends are points only where the quotient is an f64:
    /// `0/n`, `n/n`, `1/2`, ...). The exact counts are in [`Count`].
    pub(super) fn share(count: usize, more: usize, n: usize) -> Interval {
        Interval(
            quotient(count, n, Direction::Down),
            quotient(count + more, n, Direction::Up),
        )
    }

    /// The intersection with `[lo, hi]`, the range a quantity has in the reals (a share,
    /// a norm, 1 - s_top): an enclosure of a value known to lie in `[lo, hi]`, intersected
    /// with it, still encloses it (an enclosure of 1 - s_top that underflowed, `[-5e-324,
    /// 5e-324]`, becomes `[0, 5e-324]`).
    pub fn within(self, lo: f64, hi: f64) -> Interval {
        Interval(self.0.max(lo), self.1.min(hi))
    }
}

/// Which way [`quotient`] rounds.
#[derive(Clone, Copy)]
enum Direction {
    Down,
    Up,
}

/// `a / b` for counts (`b > 0`, both below 2^53, so exact in f64), rounded down or up: the
/// correctly rounded quotient, moved by one f64 where it lies on the wrong side of the
/// exact value (the residual `q b - a`, exact by one fma, says which side).
fn quotient(a: usize, b: usize, dir: Direction) -> f64 {
    let (a, b) = (a as f64, b as f64);
    let q = a / b;
    let residual = q.mul_add(b, -a);
    match dir {
        Direction::Down if residual > 0.0 => q.next_down(),
        Direction::Up if residual < 0.0 => q.next_up(),
        _ => q,
    }
}

/// An exact count of samples: the proved number `lo`, the most it can be `hi` (the
/// undecided samples included), of `of` samples. A count is certified where `lo == hi`.
/// Read back only with `lo <= hi <= of` and `of >= 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "CountFields")]
pub struct Count {
    /// The proved count.
    pub lo: usize,
    /// The largest count the undecided samples allow.
    pub hi: usize,
    /// Of how many samples.
    pub of: usize,
}

/// A [`Count`] as read, before its check.
#[derive(Deserialize)]
struct CountFields {
    lo: usize,
    hi: usize,
    of: usize,
}

impl TryFrom<CountFields> for Count {
    type Error = String;

    fn try_from(c: CountFields) -> std::result::Result<Count, String> {
        if c.lo <= c.hi && c.hi <= c.of && c.of >= 1 {
            Ok(Count {
                lo: c.lo,
                hi: c.hi,
                of: c.of,
            })
        } else {
            Err(format!(
                "a count needs lo <= hi <= of and of >= 1 (lo {}, hi {}, of {})",
                c.lo, c.hi, c.of
            ))
        }
    }
}

impl Count {
    /// The path of the count behind a share's path in a certificate or a certified
    /// checkpoint (`train_accuracy` -> `train_correct`, `test_accuracy` -> `test_correct`,
    /// `selection/...` -> `selection_counts/...`), where `quantity` names one: a claim on
    /// the share is then decided on the exact fraction, not on its rounded interval.
    pub fn behind(quantity: &str) -> Option<String> {
        let path = quantity.trim_start_matches('/');
        let (head, rest) = path.split_once('/').unwrap_or((path, ""));
        let count = match head {
            "train_accuracy" => "train_correct",
            "test_accuracy" => "test_correct",
            "selection" => "selection_counts",
            _ => return None,
        };
        Some(match rest {
            "" => count.to_string(),
            _ => format!("{count}/{rest}"),
        })
    }

    /// True when the count is known exactly.
    pub fn is_exact(&self) -> bool {
        self.lo == self.hi
    }

    /// The share as an interval with ends rounded outward (`Interval::share`).
    pub fn share(&self) -> Interval {
        Interval::share(self.lo, self.hi - self.lo, self.of)
    }
}

impl crate::io::nonfinite::Value for Count {
    fn put<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.serialize(s)
    }

    fn take<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Count, D::Error> {
        Count::deserialize(d)
    }
}

impl std::fmt::Display for Count {
    /// `18/20`, or `[17, 18]/20` where the undecided samples leave it open.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = if self.is_exact() {
            format!("{}/{}", self.lo, self.of)
        } else {
            format!("[{}, {}]/{}", self.lo, self.hi, self.of)
        };
        f.pad(&text)
    }
}

impl std::fmt::Display for Interval {
    /// `v` for a point, `[lo, hi]` otherwise (in the formatter's precision).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let one = |v: f64, f: &mut std::fmt::Formatter<'_>| match f.precision() {
            Some(p) => write!(f, "{v:.p$}"),
            None => write!(f, "{v}"),
        };
        if self.is_point() {
            one(self.0, f)
        } else {
            f.write_str("[")?;
            one(self.0, f)?;
            f.write_str(", ")?;
            one(self.1, f)?;
            f.write_str("]")
        }
    }
}
