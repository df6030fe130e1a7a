//! The one spelling of non-finite numbers in every JSON file and report tokensel writes,
//! and reads back: a finite f64 is a JSON number; infinities and NaN, which JSON has no
//! number for, are the strings `"inf"`, `"-inf"` and `"nan"` (what Python's `float()`
//! reads). `null` is not a number: it is refused where a number is expected.
//!
//! Use on a field with `#[serde(with = "crate::io::nonfinite")]` (an `f64`),
//! `nonfinite::option` (`Option<f64>`, `null` for `None`), `nonfinite::vec`
//! (`Vec<f64>`) or `nonfinite::map` (`BTreeMap<K, f64>`). CSV files spell them the same
//! way ([`text`]).

use std::collections::BTreeMap;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An f64 in the spelling of this module.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Real(pub f64);

/// The spelling of a non-finite value, `None` for a finite one.
fn spelling(v: f64) -> Option<&'static str> {
    if v.is_nan() {
        Some("nan")
    } else if v == f64::INFINITY {
        Some("inf")
    } else if v == f64::NEG_INFINITY {
        Some("-inf")
    } else {
        None
    }
}

/// The value a spelling of a non-finite number stands for (`"inf"`, `"-inf"`, `"nan"`).
pub fn parse(word: &str) -> Option<f64> {
    match word {
        "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => None,
    }
}

/// `v` as text for CSV files: Rust's shortest round-trip decimal when finite, else
/// `inf`, `-inf` or `nan`.
pub fn text(v: f64) -> String {
    spelling(v).map_or_else(|| v.to_string(), str::to_string)
}

impl Serialize for Real {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match spelling(self.0) {
            Some(word) => s.serialize_str(word),
            None => s.serialize_f64(self.0),
        }
    }
}

struct RealVisitor;

/// What a non-finite-aware number field expects (its visitor's `expecting`): the output
/// schema (`experiments::schema`) recognises such a field by it, since the field asks
/// for any JSON value (`deserialize_any`) to accept numbers and the non-finite names.
pub const EXPECTING: &str = "a number or one of \"inf\", \"-inf\", \"nan\"";

impl Visitor<'_> for RealVisitor {
    type Value = Real;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(EXPECTING)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Real, E> {
        Ok(Real(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Real, E> {
        Ok(Real(v as f64))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Real, E> {
        Ok(Real(v as f64))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Real, E> {
        parse(v)
            .map(Real)
            .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
    }
}

impl<'de> Deserialize<'de> for Real {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Real, D::Error> {
        d.deserialize_any(RealVisitor)
    }
}

/// Serialize an f64 (`#[serde(with = "crate::io::nonfinite")]`).
pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    Real(*v).serialize(s)
}

/// Deserialize an f64 (`#[serde(with = "crate::io::nonfinite")]`).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Real::deserialize(d).map(|r| r.0)
}

/// A number type whose non-finite values are spelled as names: f64 itself, or a type
/// made of such numbers (an enclosure `[lo, hi]`); for the generic report types
/// (`PerGroup<T>`, ...) with `#[serde(with = "crate::io::nonfinite::value")]`.
pub trait Value: Sized {
    /// Serialize, non-finite numbers as names.
    fn put<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error>;
    /// Deserialize, reading the names back.
    fn take<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

impl Value for f64 {
    fn put<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize(self, s)
    }

    fn take<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        deserialize(d)
    }
}

/// A [`Value`] field (`#[serde(with = "crate::io::nonfinite::value")]`).
pub mod value {
    use super::*;

    /// Serialize.
    pub fn serialize<T: Value, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
        v.put(s)
    }

    /// Deserialize.
    pub fn deserialize<'de, T: Value, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
        T::take(d)
    }
}

/// An optional [`Value`] field (`#[serde(with = "crate::io::nonfinite::value_option")]`):
/// `null` for `None`.
pub mod value_option {
    use super::*;

    /// The value inside, written by its [`Value::put`].
    struct Put<'a, T>(&'a T);

    impl<T: Value> Serialize for Put<'_, T> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.0.put(s)
        }
    }

    /// The value inside, read by its [`Value::take`].
    struct Take<T>(T);

    impl<'de, T: Value> Deserialize<'de> for Take<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            T::take(d).map(Take)
        }
    }

    /// Serialize.
    pub fn serialize<T: Value, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        v.as_ref().map(Put).serialize(s)
    }

    /// Deserialize.
    pub fn deserialize<'de, T: Value, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
        Ok(Option::<Take<T>>::deserialize(d)?.map(|t| t.0))
    }
}

/// `Option<f64>`: `null` for `None`.
pub mod option {
    use super::*;

    /// Serialize.
    pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
        v.map(Real).serialize(s)
    }

    /// Deserialize.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Ok(Option::<Real>::deserialize(d)?.map(|r| r.0))
    }
}

/// `Vec<f64>`.
pub mod vec {
    use super::*;

    /// Serialize.
    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|&x| Real(x)))
    }

    /// Deserialize.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        Ok(Vec::<Real>::deserialize(d)?
            .into_iter()
            .map(|r| r.0)
            .collect())
    }
}

/// `BTreeMap<K, f64>`.
pub mod map {
    use super::*;

    /// Serialize.
    pub fn serialize<K: Serialize, S: Serializer>(
        v: &BTreeMap<K, f64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_map(v.iter().map(|(k, &x)| (k, Real(x))))
    }

    /// Deserialize.
    pub fn deserialize<'de, K: Deserialize<'de> + Ord, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<K, f64>, D::Error> {
        Ok(BTreeMap::<K, Real>::deserialize(d)?
            .into_iter()
            .map(|(k, r)| (k, r.0))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct All {
        #[serde(with = "crate::io::nonfinite")]
        x: f64,
        #[serde(with = "option")]
        o: Option<f64>,
        #[serde(with = "vec")]
        v: Vec<f64>,
        #[serde(with = "map")]
        m: BTreeMap<String, f64>,
    }

    /// Every non-finite value and a few finite ones survive a JSON round trip bit for
    /// bit (NaN as NaN); `null` and other strings are refused where a number belongs.
    #[test]
    fn round_trip_and_refusals() {
        let specials = [
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            0.1,
            -0.0,
            5e-324,
        ];
        for x in specials {
            let a = All {
                x,
                o: Some(x),
                v: vec![x, 1.0],
                m: [("k".to_string(), x)].into(),
            };
            let text = serde_json::to_string(&a).unwrap();
            let b: All = serde_json::from_str(&text).unwrap();
            let same = |p: f64, q: f64| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan());
            assert!(same(a.x, b.x) && same(a.o.unwrap(), b.o.unwrap()), "{text}");
            assert!(same(a.v[0], b.v[0]) && same(a.m["k"], b.m["k"]), "{text}");
        }
        let text = serde_json::to_string(&All {
            x: f64::INFINITY,
            o: None,
            v: vec![f64::NAN],
            m: BTreeMap::new(),
        })
        .unwrap();
        assert_eq!(text, r#"{"x":"inf","o":null,"v":["nan"],"m":{}}"#);
        for bad in [
            r#"{"x":null,"o":null,"v":[],"m":{}}"#,
            r#"{"x":"Infinity","o":null,"v":[],"m":{}}"#,
            r#"{"x":1,"o":null,"v":[null],"m":{}}"#,
        ] {
            assert!(serde_json::from_str::<All>(bad).is_err(), "{bad}");
        }
        assert_eq!(text_of_all(), ["inf", "-inf", "nan", "0.5"]);
    }

    fn text_of_all() -> Vec<String> {
        [f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 0.5]
            .map(text)
            .to_vec()
    }
}
