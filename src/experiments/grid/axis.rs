//! The values of a grid axis as written: a range `a:b:step` (a, a + step, ... up to b
//! inclusive) or a list `v1,v2,...`.
//!
//! A range is stepped in exact decimal arithmetic on the numbers as written (m 10^e
//! with big-integer m), so `0.5:0.9:0.025` gives the doubles nearest 0.5, 0.525, ...,
//! 0.9 (whatever the exponent notation, `1e-1` included), and its length is counted
//! exactly and checked against [`MAX_RUNS`] before any value is made: a step of `1e-300`
//! is refused as a size over the limit, naming the count, instead of overflowing.

use std::str::FromStr;

use num_bigint::BigInt;
use num_traits::{Signed, ToPrimitive, Zero};

use super::MAX_RUNS;
use crate::error::{Error, Result};

/// Largest decimal exponent a number may be written with (beyond, it is outside f64's
/// range, ~1e-324..1.8e308, however many digits it has).
const MAX_EXPONENT: i64 = 1000;

/// Longest number an axis may write, in characters: a double needs at most 767
/// significant digits to be written exactly; longer text would make the exact decimal
/// arithmetic (quadratic in the length) slow for nothing, and is refused before it.
const MAX_NUMBER_LEN: usize = 1000;

/// A finite decimal number exactly as written: `m` 10^`e`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Decimal {
    m: BigInt,
    e: i64,
}

impl Decimal {
    /// Parse `[+-]digits[.digits][(e|E)[+-]digits]` (at least one digit before the
    /// exponent); `None` for anything else, `inf` and `nan` included.
    fn parse(text: &str) -> Option<Decimal> {
        let s = text.trim();
        let (mantissa, exponent) = match s.find(['e', 'E']) {
            Some(k) => (&s[..k], s[k + 1..].parse::<i64>().ok()?),
            None => (s, 0),
        };
        let (negative, unsigned) = match mantissa.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, mantissa.strip_prefix('+').unwrap_or(mantissa)),
        };
        let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
        let digits = format!("{int}{frac}");
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let m = BigInt::from_str(&digits).ok()?;
        let e = exponent.checked_sub(frac.len() as i64)?;
        if e.abs() > MAX_EXPONENT {
            return None;
        }
        Some(Decimal {
            m: if negative { -m } else { m },
            e,
        })
    }

    /// The mantissa at exponent `e` <= self.e (exact).
    fn at(&self, e: i64) -> BigInt {
        let shift = u32::try_from(self.e - e).expect("exponents are bounded");
        &self.m * BigInt::from(10u8).pow(shift)
    }
}

/// The double nearest `m` 10^`e` (correctly rounded by `str::parse`); an error when it
/// is not finite or is 0 while the decimal is not (f64 overflow or underflow).
fn to_f64(m: &BigInt, e: i64, written: &str) -> std::result::Result<f64, String> {
    let v: f64 = format!("{m}e{e}").parse().expect("a decimal parses");
    if !v.is_finite() || (v == 0.0 && !m.is_zero()) {
        return Err(format!(
            "`{written}`: a value {m}e{e} lies outside f64's range"
        ));
    }
    Ok(v)
}

/// The values of one axis, parsed but not yet made (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// `a:b:step`: `count` values `a_m + k step_m`, k = 0, 1, ..., at exponent `e`.
    Range {
        /// The text as written (for messages).
        text: String,
        /// The first value's mantissa.
        a: BigInt,
        /// The step's mantissa (> 0).
        step: BigInt,
        /// The common exponent.
        e: i64,
        /// How many values (>= 1).
        count: BigInt,
    },
    /// `v1,v2,...`: these finite values.
    List(Vec<f64>),
}

impl FromStr for Values {
    type Err = String;

    /// Parse `a:b:step` (step > 0, a <= b) or `v1,v2,...`; the message says what is wrong.
    fn from_str(text: &str) -> std::result::Result<Values, String> {
        if let Some(long) = text.split([':', ',']).find(|n| n.len() > MAX_NUMBER_LEN) {
            let head: String = long.trim().chars().take(40).collect();
            return Err(format!(
                "`{head}...`: a number of {} characters, more than the {MAX_NUMBER_LEN} an axis may write",
                long.len()
            ));
        }
        let bad = || format!("`{text}` is not a range a:b:step or a list v1,v2,... of numbers");
        let num = |s: &str| Decimal::parse(s).ok_or_else(bad);
        match text.split(':').collect::<Vec<_>>().as_slice() {
            [a, b, step] => {
                let (a, b, step) = (num(a)?, num(b)?, num(step)?);
                let e = a.e.min(b.e).min(step.e);
                let (a, b, step) = (a.at(e), b.at(e), step.at(e));
                if !step.is_positive() || b < a {
                    return Err(format!("`{text}`: need step > 0 and a <= b"));
                }
                let count = (&b - &a) / &step + 1;
                // the last value, b or below, and the first must be doubles
                to_f64(&a, e, text)?;
                to_f64(&(&a + &step * (&count - 1)), e, text)?;
                Ok(Values::Range {
                    text: text.to_string(),
                    a,
                    step,
                    e,
                    count,
                })
            }
            [_] => text
                .split(',')
                .map(|v| {
                    let d = num(v)?;
                    to_f64(&d.m, d.e, text)
                })
                .collect::<std::result::Result<Vec<_>, _>>()
                .map(Values::List),
            _ => Err(bad()),
        }
    }
}

impl Values {
    /// The values, in order; more than [`MAX_RUNS`] of them are refused (a size over a
    /// limit, named by `key` and the count) before any is made.
    pub fn values(&self, key: &str) -> Result<Vec<f64>> {
        let too_many = |count: String| Error::TooLarge {
            field: key.into(),
            reason: format!("{count} values, more than the limit of {MAX_RUNS} runs of a grid"),
        };
        match self {
            Values::List(v) if v.len() > MAX_RUNS => Err(too_many(v.len().to_string())),
            Values::List(v) => no_repeats(key, v.clone()),
            Values::Range {
                text,
                a,
                step,
                e,
                count,
            } => {
                let n = count.to_usize().filter(|n| *n <= MAX_RUNS).ok_or_else(|| {
                    too_many(match count.to_u64() {
                        Some(n) => format!("`{text}` has {n}"),
                        None => format!(
                            "`{text}` has about {:.1e}",
                            count.to_f64().unwrap_or(f64::INFINITY)
                        ),
                    })
                })?;
                let v = (0..n)
                    .map(|k| to_f64(&(a + step * k), *e, text))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|m| Error::grid(format!("axes.{key}"), m))?;
                no_repeats(key, v)
            }
        }
    }
}

/// `v`, or an error where two values are the same double (`d=10,10`, or a range whose
/// step is below the doubles' spacing): a grid point would run twice under one cell.
fn no_repeats(key: &str, v: Vec<f64>) -> Result<Vec<f64>> {
    let mut sorted = v.clone();
    sorted.sort_by(f64::total_cmp);
    match sorted.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(Error::grid(
            format!("axes.{key}"),
            format!("the value {} appears twice on the axis", w[0]),
        )),
        None => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(text: &str) -> Result<Vec<f64>> {
        text.parse::<Values>()
            .map_err(|m| Error::config("k", m))?
            .values("k")
    }

    #[test]
    fn ranges_step_in_exact_decimals() {
        assert_eq!(
            values("0.5:0.6:0.025").unwrap(),
            [0.5, 0.525, 0.55, 0.575, 0.6]
        );
        assert_eq!(
            values("250:1000:250").unwrap(),
            [250.0, 500.0, 750.0, 1000.0]
        );
        assert_eq!(values("5:10:2.5").unwrap(), [5.0, 7.5, 10.0]);
        assert_eq!(values("0.1:0.3:0.1").unwrap(), [0.1, 0.2, 0.3]);
        // exponent notation keeps its decimals (the previous parser rounded 1e-1 steps
        // to whole numbers: 0, 0, 0, 0, 0, 1)
        assert_eq!(
            values("0:0.5:1e-1").unwrap(),
            [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
        );
        assert_eq!(values("1e-20:3e-20:1e-20").unwrap(), [1e-20, 2e-20, 3e-20]);
        assert_eq!(values("-1:1:1").unwrap(), [-1.0, 0.0, 1.0]);
        // b is reached only where a step lands on it
        assert_eq!(values("0:1:0.3").unwrap(), [0.0, 0.3, 0.6, 0.9]);
        assert_eq!(values("3:3:1").unwrap(), [3.0]);
        assert_eq!(values("20,30, 4.5").unwrap(), [20.0, 30.0, 4.5]);
    }

    /// Every value equals the double nearest the exact decimal a + k step (here against
    /// the decimal text written out and parsed by the standard library).
    #[test]
    fn values_are_the_nearest_doubles() {
        let v = values("0.5:0.9:0.025").unwrap();
        assert_eq!(v.len(), 17);
        for (k, x) in v.iter().enumerate() {
            let exact: f64 = format!("{}e-3", 500 + 25 * k).parse().unwrap();
            assert_eq!(x.to_bits(), exact.to_bits(), "k = {k}");
        }
    }

    #[test]
    fn bad_text_is_refused_with_a_message() {
        for bad in [
            "",
            "x",
            "1:2",
            "1:2:3:4",
            "nan",
            "inf",
            "1,inf",
            "1,,2",
            "0:1:0",
            "0:1:-1",
            "2:1:1",
            "1e",
            "e5",
            ".",
            "1e99999999999999999999",
            "1e400",
            "1,1e-400",
        ] {
            assert!(bad.parse::<Values>().is_err(), "{bad}");
        }
    }

    /// A range of more values than a grid may run is a size over the limit (exit 3),
    /// counted exactly without making them: `0:0.5:1e-300` has 5e299 + 1.
    #[test]
    fn repeated_values_and_overlong_numbers_are_refused() {
        let e = values("10,20,10").unwrap_err().to_string();
        assert!(e.contains("appears twice"), "{e}");
        // 1 + 1e-20 is the double 1: twice
        assert!(values("1:1.00000000000000000002:1e-20").is_err());
        let long = format!("10:1{}:1", "0".repeat(2000));
        let e = long.parse::<Values>().unwrap_err();
        assert!(e.contains("more than the 1000"), "{e}");
        assert!(e.len() < 200, "{e}");
        assert_eq!(values("0.5,0.25").unwrap(), vec![0.5, 0.25]);
    }

    #[test]
    fn long_ranges_are_refused_by_their_count() {
        let e = values("0:0.5:1e-300").unwrap_err();
        assert!(e.is_stopped_run(), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("5.0e299") && text.contains("100000"),
            "{text}"
        );
        let e = values("0:200000:1").unwrap_err();
        assert!(e.to_string().contains("200001 values"), "{e}");
        assert_eq!(values(&format!("1:{MAX_RUNS}:1")).unwrap().len(), MAX_RUNS);
    }
}
