//! The output schema of a claim's source: which `/`-separated paths name a number in it,
//! decided from the serialised shape of the source's report type, so that a claims file
//! with a typo in a quantity is refused before the first computation, not after the
//! claims before it ran.
//!
//! The shape is read from the type's own serde derive: a [`serde::Deserializer`] that
//! holds no data ([`Shape::of`]) answers every request of the derived code with a
//! placeholder and writes down what was asked for: a struct's field names, a sequence,
//! an optional value, an enum's variant names, a number, text. Generic types are traced
//! per use (`ByNoise<PerGroup>` and `ByNoise<SelectionShare>` are different shapes).
//!
//! A path follows the JSON the report serialises to (as `claims::lookup` does): a struct
//! field by name, an array element by index, a map entry by key (an enum-keyed map by a
//! variant's name; a string-keyed map by one of the keys listed with
//! [`Schema::with_keys`], any key where none are listed). It must end on a number or a
//! boolean, possibly an optional one (a `null` there is a missing measurement, decided
//! when it is read). Array lengths depend on the run and are not checked here.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::value::{Error as DeError, StrDeserializer};
use serde::de::{self, IntoDeserializer, Visitor};

use crate::analysis::lemma_a6::LemmaA6;

/// Computations a claim can read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The f64 trainer (`run`).
    Run,
    /// The MPFR twin (`twin`) at the claim's `prec` (default 256 bits): the same summary
    /// and checkpoints as `run`.
    Twin,
    /// f64 vs twin (`compare`).
    Compare,
    /// The gap sweep (`saturation`, training sample 0, 60 grid points).
    Saturation,
    /// W-mode vs p-mode (Lemma A.6) in f64.
    LemmaA6,
    /// A grid over `axes` and `seeds` (`tokensel grid`), its merged summary.
    Grid,
    /// The fine-tuning protocol (`tokensel protocol`) at the claim's seed on the config's
    /// generated data: that seed's row.
    Protocol,
}

impl Source {
    /// Whether the source trains one run whose summary and checkpoints a claim reads
    /// (`run`, `twin`).
    pub fn trains(self) -> bool {
        matches!(self, Source::Run | Source::Twin)
    }
}

use super::grid::cell::Regime;
use super::grid::reduce;

/// The shape of a serialised value (JSON).
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// A number or a boolean.
    Number,
    /// Text (a string, or a unit enum variant's name).
    Text,
    /// The names of a unit-only enum (text in JSON; the keys of a map keyed by it).
    Names(Vec<String>),
    /// Always null (a unit value).
    Null,
    /// Null or the inner shape.
    Optional(Box<Shape>),
    /// An array of elements of one shape.
    Array(Box<Shape>),
    /// A fixed-length array (a tuple).
    Tuple(Vec<Shape>),
    /// An object with these fields, in order.
    Object(Vec<(String, Shape)>),
    /// An object whose keys have the first shape (names, numbers or any text) and
    /// whose values have the second.
    Map(Box<Shape>, Box<Shape>),
    /// An enum with data: `{"Variant": value}` for one of these variants.
    Tagged(Vec<String>),
    /// Not known (a self-describing type): any path below is accepted.
    Unknown,
}

impl Shape {
    /// The shape of `T`'s serialised form, read from its `Deserialize` derive
    /// ([`Shape::Unknown`] where the type asks for something self-describing).
    pub fn of<T: for<'de> Deserialize<'de>>() -> Shape {
        Shape::of_without::<T>(&[])
    }

    /// [`Shape::of`], but the outermost struct's fields `skip` are not traced (they
    /// must take a default when absent: `#[serde(default)]`); their shapes are
    /// [`Shape::Unknown`].
    pub fn of_without<T: for<'de> Deserialize<'de>>(skip: &'static [&'static str]) -> Shape {
        let mut shape = Shape::Unknown;
        match T::deserialize(Tracer {
            out: &mut shape,
            depth: 0,
            skip,
        }) {
            Ok(_) => shape,
            Err(_) => Shape::Unknown,
        }
    }

    /// Whether the shape is known all the way down (no [`Shape::Unknown`] in it).
    pub fn is_known(&self) -> bool {
        match self {
            Shape::Unknown => false,
            Shape::Optional(s) | Shape::Array(s) => s.is_known(),
            Shape::Tuple(v) => v.iter().all(Shape::is_known),
            Shape::Object(f) => f.iter().all(|(_, s)| s.is_known()),
            Shape::Map(k, v) => k.is_known() && v.is_known(),
            _ => true,
        }
    }
}

/// Deepest nesting traced (a recursive type would otherwise trace forever).
const MAX_DEPTH: usize = 64;

/// The data-less deserializer that writes down the shape it is asked for into `out`.
struct Tracer<'a> {
    out: &'a mut Shape,
    depth: usize,
    /// Fields of the outermost struct not traced (their values are not asked for:
    /// [`Shape::of_without`]).
    skip: &'static [&'static str],
}

impl<'a> Tracer<'a> {
    fn child<'b>(&self, out: &'b mut Shape) -> Tracer<'b> {
        Tracer {
            out,
            depth: self.depth + 1,
            skip: &[],
        }
    }
}

/// A visitor's `expecting` text, for [`std::fmt::Display`].
struct Expecting<'a, V>(&'a V);

impl<'de, V: Visitor<'de>> std::fmt::Display for Expecting<'_, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.0.expecting(f)
    }
}

macro_rules! numbers {
    ($($method:ident $visit:ident $zero:expr;)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
            *self.out = Shape::Number;
            visitor.$visit($zero)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Tracer<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        // a number that may be non-finite (`io::nonfinite`) asks for any value so as to
        // take its names as text too: it is a number of the schema
        if Expecting(&visitor).to_string() == crate::io::nonfinite::EXPECTING {
            *self.out = Shape::Number;
            return visitor.visit_f64(1.0);
        }
        // an untagged enum buffers its input through serde's content visitor ("any
        // value") and then matches each variant: a unit placeholder matched none of a
        // config's `[direction] pattern` (a name or a list of token indices) and lost the
        // shape of everything around it (the run summary's, the certificate's). Text
        // matches its name variant; the pattern is not a measurement, so text it is.
        if Expecting(&visitor).to_string() == "any value" {
            *self.out = Shape::Text;
            return visitor.visit_str("");
        }
        *self.out = Shape::Unknown;
        visitor.visit_unit()
    }

    // placeholders of 1: a type that checks what it reads (a certificate's count needs
    // `of >= 1`, an interval `lo <= hi`) accepts them, so its shape is traced, not lost
    numbers! {
        deserialize_bool visit_bool false;
        deserialize_i8 visit_i8 1;
        deserialize_i16 visit_i16 1;
        deserialize_i32 visit_i32 1;
        deserialize_i64 visit_i64 1;
        deserialize_i128 visit_i128 1;
        deserialize_u8 visit_u8 1;
        deserialize_u16 visit_u16 1;
        deserialize_u32 visit_u32 1;
        deserialize_u64 visit_u64 1;
        deserialize_u128 visit_u128 1;
        deserialize_f32 visit_f32 1.0;
        deserialize_f64 visit_f64 1.0;
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        *self.out = Shape::Text;
        visitor.visit_char('a')
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        *self.out = Shape::Text;
        visitor.visit_str("")
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        *self.out = Shape::Text;
        visitor.visit_bytes(&[])
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let mut inner = Shape::Unknown;
        let v = visitor.visit_some(self.child(&mut inner))?;
        *self.out = Shape::Optional(Box::new(inner));
        Ok(v)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        *self.out = Shape::Null;
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let mut slots = vec![Shape::Unknown];
        let v = visitor.visit_seq(Elements {
            slots: &mut slots,
            next: 0,
            depth: self.depth,
        })?;
        *self.out = Shape::Array(Box::new(slots.remove(0)));
        Ok(v)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let mut slots = vec![Shape::Unknown; len];
        let v = visitor.visit_seq(Elements {
            slots: &mut slots,
            next: 0,
            depth: self.depth,
        })?;
        *self.out = Shape::Tuple(slots);
        Ok(v)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_tuple(len, visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        if self.depth > MAX_DEPTH {
            return self.deserialize_any(visitor);
        }
        let (mut key, mut value) = (Shape::Unknown, Shape::Unknown);
        let v = visitor.visit_map(Entry {
            key: &mut key,
            value: &mut value,
            done: false,
            depth: self.depth,
        })?;
        *self.out = Shape::Map(Box::new(key), Box::new(value));
        Ok(v)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if self.depth > MAX_DEPTH {
            return self.deserialize_any(visitor);
        }
        let mut slots = vec![Shape::Unknown; fields.len()];
        let v = visitor.visit_map(Fields {
            skip: self.skip,
            fields,
            slots: &mut slots,
            next: 0,
            depth: self.depth,
        })?;
        *self.out = Shape::Object(fields.iter().map(|f| f.to_string()).zip(slots).collect());
        Ok(v)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let names = variants.iter().map(|v| v.to_string()).collect();
        let mut unit = true;
        let v = visitor.visit_enum(Variant {
            name: variants.first().copied().unwrap_or(""),
            unit: &mut unit,
            depth: self.depth,
        })?;
        *self.out = if unit {
            Shape::Names(names)
        } else {
            Shape::Tagged(names)
        };
        Ok(v)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_any(visitor)
    }
}

/// The elements of a sequence or tuple: one per slot.
struct Elements<'a> {
    slots: &'a mut [Shape],
    next: usize,
    depth: usize,
}

impl<'de> de::SeqAccess<'de> for Elements<'_> {
    type Error = DeError;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        let Some(slot) = self.slots.get_mut(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        seed.deserialize(Tracer {
            out: slot,
            depth: self.depth + 1,
            skip: &[],
        })
        .map(Some)
    }
}

/// A map with one entry.
struct Entry<'a> {
    key: &'a mut Shape,
    value: &'a mut Shape,
    done: bool,
    depth: usize,
}

impl<'de> de::MapAccess<'de> for Entry<'_> {
    type Error = DeError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        if self.done {
            return Ok(None);
        }
        self.done = true;
        seed.deserialize(Tracer {
            out: self.key,
            depth: self.depth + 1,
            skip: &[],
        })
        .map(Some)
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DeError> {
        seed.deserialize(Tracer {
            out: self.value,
            depth: self.depth + 1,
            skip: &[],
        })
    }
}

/// A struct's fields, each named and traced into its slot.
struct Fields<'a> {
    /// Fields not named (see [`Shape::of_without`]).
    skip: &'static [&'static str],
    fields: &'static [&'static str],
    slots: &'a mut [Shape],
    next: usize,
    depth: usize,
}

impl<'de> de::MapAccess<'de> for Fields<'_> {
    type Error = DeError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        while self
            .fields
            .get(self.next)
            .is_some_and(|f| self.skip.contains(f))
        {
            self.next += 1;
        }
        let Some(name) = self.fields.get(self.next) else {
            return Ok(None);
        };
        let key: StrDeserializer<'_, DeError> = name.into_deserializer();
        seed.deserialize(key).map(Some)
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, DeError> {
        let slot = &mut self.slots[self.next];
        self.next += 1;
        seed.deserialize(Tracer {
            out: slot,
            depth: self.depth + 1,
            skip: &[],
        })
    }
}

/// An enum's first variant.
struct Variant<'a> {
    name: &'static str,
    unit: &'a mut bool,
    depth: usize,
}

impl<'de, 'a> de::EnumAccess<'de> for Variant<'a> {
    type Error = DeError;
    type Variant = Self;

    fn variant_seed<S: de::DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self), DeError> {
        let name: StrDeserializer<'_, DeError> = self.name.into_deserializer();
        Ok((seed.deserialize(name)?, self))
    }
}

impl<'de> de::VariantAccess<'de> for Variant<'_> {
    type Error = DeError;

    fn unit_variant(self) -> Result<(), DeError> {
        Ok(())
    }

    fn newtype_variant_seed<T: de::DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, DeError> {
        *self.unit = false;
        let mut ignored = Shape::Unknown;
        seed.deserialize(Tracer {
            out: &mut ignored,
            depth: self.depth + 1,
            skip: &[],
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, DeError> {
        *self.unit = false;
        let mut ignored = Shape::Unknown;
        de::Deserializer::deserialize_tuple(
            Tracer {
                out: &mut ignored,
                depth: self.depth + 1,
                skip: &[],
            },
            len,
            visitor,
        )
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        *self.unit = false;
        let mut ignored = Shape::Unknown;
        de::Deserializer::deserialize_struct(
            Tracer {
                out: &mut ignored,
                depth: self.depth + 1,
                skip: &[],
            },
            "",
            fields,
            visitor,
        )
    }
}

/// The schema of what a claim on `source` reads: the run summary, or with a `step` the
/// checkpoint of the trajectory (from the record's visit: [`record`], every optional
/// part present); the compare and saturation reports; Lemma A.6's object; the merged
/// grid summary.
pub fn of_source(source: Source, step: bool) -> Schema {
    use crate::analysis::{compare, saturation};
    use crate::io::trajectory::Summary;
    match (source, step) {
        (Source::Run | Source::Twin, false) => Schema::of::<Summary>("the run summary"),
        (Source::Run | Source::Twin, true) => {
            record::<f64, ()>("a run's checkpoint", &RecordParts::ALL)
        }
        (Source::Compare, _) => Schema::of::<compare::Report>("the compare report"),
        (Source::Saturation, _) => Schema::of::<saturation::Report>("the saturation report")
            .with_keys("thresholds", saturation::threshold_keys()),
        (Source::LemmaA6, _) => Schema::of::<LemmaA6>("the Lemma A.6 output"),
        (Source::Grid, _) => Schema::of::<reduce::Summary>("the grid summary")
            .with_keys("stats", reduce::METRICS.map(String::from))
            .with_keys("regimes", Regime::ALL.map(|r| r.name().to_string())),
        (Source::Protocol, _) => {
            Schema::of::<crate::experiments::protocol::SeedRow>("a protocol seed's row")
        }
    }
}

/// The schema of what a certified claim reads (`experiments::claims`): the
/// certificate's fields (without `checkpoints`) beside the final checkpoint's, or with a
/// `step` a certified checkpoint (from the record's visit over intervals: [`record`]);
/// a path may end on an interval `[lo, hi]`.
pub fn certified(step: bool) -> Schema {
    use crate::analysis::certify::{Certificate, Proof};
    let checkpoint = record::<Interval, Proof>("a certified checkpoint", &RecordParts::ALL);
    let mut schema = match step {
        true => checkpoint,
        false => {
            // a checkpoint's record is the visit's (above), not traced
            let mut summary = Schema {
                shape: Shape::of_without::<Certificate>(&["checkpoints"]),
                ..Schema::of::<()>("the certificate")
            };
            if let (Shape::Object(fields), Shape::Object(last)) =
                (&mut summary.shape, checkpoint.shape)
            {
                fields.retain(|(name, _)| name != "checkpoints");
                for (name, shape) in last {
                    if !fields.iter().any(|(f, _)| *f == name) {
                        fields.push((name, shape));
                    }
                }
            }
            summary
        }
    };
    schema.intervals = true;
    schema
}

use crate::analysis::certify::Interval;
use crate::config::Config;
use crate::io::record::{Extras, Range, RecordParts, Value};
use crate::io::trajectory::Checkpoint;

/// The schema of a checkpoint's record with the optional `parts`, called `what`: the
/// leaves [`crate::io::record::visit`] reports on a blank checkpoint of those parts
/// ([`Checkpoint::blank`], two samples), each path a number (an enclosure `[lo, hi]`
/// where `V` is one; an optional one where the record may hold `null`), text for a
/// category, an array where the visit declares a list. A leaf added to the visit is
/// nameable by a claim; no list of the record's fields is kept here.
pub fn record<V: Value, X: Extras<V>>(what: &'static str, parts: &RecordParts) -> Schema {
    let c = Checkpoint::<V, X>::blank(parts, 2);
    let mut b = Build::default();
    crate::io::record::visit(&c, usize::MAX, &mut b);
    Schema {
        what,
        shape: Shape::Object(b.root),
        keys: BTreeMap::new(),
        intervals: false,
    }
}

/// The leaves of a record by their dotted paths (indices dropped) with the values each
/// can take (`None`: a count or a category, no numeric range), and its lists with their
/// lengths: what the record's visit reports of a blank checkpoint.
#[derive(Default)]
struct Ranges {
    /// Each leaf's range.
    leaves: BTreeMap<String, Option<Range>>,
    /// Each list's length.
    lists: BTreeMap<String, usize>,
}

impl Ranges {
    /// The ranges of the record with the optional `parts` of `cfg`'s sizes (T tokens,
    /// n_train samples), over `V` with extras `X` (a certificate's: intervals and proof).
    fn of<V: Value, X: Extras<V>>(parts: &RecordParts, cfg: &Config) -> Ranges {
        let c = Checkpoint::<V, X>::blank(parts, 1);
        let mut r = Ranges::default();
        crate::io::record::visit(&c, cfg.layout.tokens, &mut r);
        r.lists.insert("samples".into(), cfg.n_train);
        r
    }

    /// Whether `path` is a leaf of the record or lies above one.
    fn holds(&self, path: &str) -> bool {
        self.leaves
            .keys()
            .any(|k| k == path || k.strip_prefix(path).is_some_and(|r| r.starts_with('.')))
    }
}

impl<V: Value> crate::io::record::Visitor<V> for Ranges {
    fn count(&mut self, path: &str, _: u64) {
        self.leaves.insert(path.into(), None);
    }
    fn real(&mut self, path: &str, range: Range, _: V) {
        self.leaves.insert(path.into(), Some(range));
    }
    fn optional(&mut self, path: &str, range: Range, _: Option<V>) {
        self.leaves.insert(path.into(), Some(range));
    }
    fn index(&mut self, path: &str, bound: usize, _: usize) {
        let top = bound.saturating_sub(1) as f64;
        self.leaves
            .insert(path.into(), Some(Range::Within(0.0, top)));
    }
    fn category(&mut self, path: &str, _: &'static [&'static str], _: u8) {
        self.leaves.insert(path.into(), None);
    }
    fn flag(&mut self, path: &str, _: bool) {
        self.leaves
            .insert(path.into(), Some(Range::Within(0.0, 1.0)));
    }
    fn list(&mut self, path: &str, len: usize) {
        self.lists.insert(path.into(), len);
    }
}

/// What a claim on a run's record may name, and the values it can take: the ONE check
/// of a claim's quantity against its config's record (the visit of a blank checkpoint
/// of the config's parts, [`RecordParts::of`]; over intervals with the certificate's
/// proof where `certified`). A path into a part of the record the config does not
/// record (the in-sequence prompt's, the direction's, the K-class `classes` and a
/// sample's `outputs`) is refused naming the part; an index into a list (`samples`: below
/// n_train; a sample's `outputs` and the per-class lists: below K) must be a canonical
/// index below its length. Returns the leaf's range, `None` where the path is not a
/// numeric leaf of the record (a summary's own field: `steps`, `direction/limit/...`,
/// a certificate's `bits_lost`; a count). `summary` says the claim reads a summary, not
/// a checkpoint: the run summary's `direction/last/...` is the last checkpoint's
/// direction record; a certificate's `direction/...` its limit, not a record.
pub fn claim_range(
    cfg: &Config,
    certified: bool,
    summary: bool,
    quantity: &str,
) -> Result<Option<Range>, String> {
    use crate::analysis::certify::Proof;
    let parts = RecordParts::of(cfg);
    let (ours, all) = match certified {
        true => (
            Ranges::of::<Interval, Proof>(&parts, cfg),
            Ranges::of::<Interval, Proof>(&RecordParts::ALL, cfg),
        ),
        false => (
            Ranges::of::<f64, ()>(&parts, cfg),
            Ranges::of::<f64, ()>(&RecordParts::ALL, cfg),
        ),
    };
    let mut path: Vec<&str> = quantity.split('/').filter(|p| !p.is_empty()).collect();
    if summary && !certified && path.starts_with(&["direction", "last"]) {
        path.remove(1);
    }
    let mut dotted = String::new();
    // the length of the list `dotted` names, whose index the next part is
    let mut list: Option<usize> = None;
    for part in path {
        if let Some(len) = list.take() {
            if !part
                .parse::<usize>()
                .is_ok_and(|i| i < len && i.to_string() == part)
            {
                let what = match dotted.as_str() {
                    "samples" => "a training sample index (n_train)",
                    _ => "a class index (K)",
                };
                return Err(format!(
                    "`{part}` in `{quantity}` is not {what} 0..{}",
                    len.saturating_sub(1)
                ));
            }
            continue;
        }
        if !dotted.is_empty() {
            dotted.push('.');
        }
        dotted.push_str(part);
        list = ours.lists.get(&dotted).copied();
        if !ours.holds(&dotted) {
            return match all.holds(&dotted) {
                true => Err(unrecorded(quantity, &dotted)),
                // not the record's: a summary's own field
                false => Ok(None),
            };
        }
        if summary && certified && dotted == "direction" {
            return Ok(None);
        }
    }
    Ok(ours.leaves.get(&dotted).copied().flatten())
}

/// Why `quantity` (the record's path `dotted`) is not in its config's record: the
/// optional part it lies in.
fn unrecorded(quantity: &str, dotted: &str) -> String {
    match dotted
        .strip_prefix("samples.")
        .unwrap_or(dotted)
        .split('.')
        .next()
    {
        Some("prompt") => format!(
            "`{quantity}` is the in-sequence prompt's record; this claim's config has the \
             separate prompt (`[model] prompt = \"in-sequence\"` records it)"
        ),
        Some("direction") => format!(
            "`{quantity}` is the direction record; this claim's config has no [direction] \
             section"
        ),
        Some("outputs") => format!(
            "`{quantity}` is a K-class record (a sample's K outputs); this claim's config is \
             the binary model (its output is `f`)"
        ),
        Some("classes") => {
            format!("`{quantity}` is a K-class record; this claim's config is the binary model")
        }
        _ => format!("`{quantity}` is not in this claim's config's record"),
    }
}

/// The visitor that builds a record's [`Shape`] from its leaves' paths.
#[derive(Default)]
struct Build {
    /// The root object's fields.
    root: Vec<(String, Shape)>,
    /// The paths declared lists.
    lists: std::collections::BTreeSet<String>,
    /// Each list's length where it was last declared.
    lengths: BTreeMap<String, usize>,
}

impl Build {
    /// The shape of a value of width `width` (an enclosure: an array `[lo, hi]`).
    fn number(width: usize) -> Shape {
        match width {
            1 => Shape::Number,
            w => Shape::Tuple(vec![Shape::Number; w]),
        }
    }

    /// Put the leaf `path` of shape `leaf` into the tree (the first leaf of a path
    /// defines it; a path declared a list is an array of its entries).
    fn put(&mut self, path: &str, leaf: Shape) {
        let parts: Vec<&str> = path.split('.').collect();
        let mut fields = &mut self.root;
        for (i, part) in parts.iter().enumerate() {
            let prefix = parts[..=i].join(".");
            let list = self.lists.contains(&prefix);
            let last = i + 1 == parts.len();
            let at = match fields.iter().position(|(f, _)| f == part) {
                Some(at) => at,
                None => {
                    let inner = match last {
                        true => leaf.clone(),
                        false => Shape::Object(Vec::new()),
                    };
                    let shape = match list {
                        true => Shape::Array(Box::new(inner)),
                        false => inner,
                    };
                    fields.push((part.to_string(), shape));
                    fields.len() - 1
                }
            };
            if last {
                return;
            }
            let mut node = &mut fields[at].1;
            if let Shape::Array(inner) = node {
                node = inner;
            }
            match node {
                Shape::Object(inner) => fields = inner,
                _ => return,
            }
        }
    }
}

impl<V: Value> crate::io::record::Visitor<V> for Build {
    fn count(&mut self, path: &str, _: u64) {
        self.put(path, Shape::Number);
    }
    fn real(&mut self, path: &str, _: Range, _: V) {
        self.put(path, Build::number(V::WIDTH));
    }
    fn optional(&mut self, path: &str, _: Range, _: Option<V>) {
        self.put(path, Shape::Optional(Box::new(Build::number(V::WIDTH))));
    }
    fn index(&mut self, path: &str, _: usize, _: usize) {
        self.put(path, Shape::Number);
    }
    fn category(&mut self, path: &str, names: &'static [&'static str], _: u8) {
        self.put(
            path,
            Shape::Names(names.iter().map(|n| n.to_string()).collect()),
        );
    }
    fn flag(&mut self, path: &str, _: bool) {
        self.put(path, Shape::Number);
    }
    fn list(&mut self, path: &str, len: usize) {
        self.lists.insert(path.to_string());
        self.lengths.insert(path.to_string(), len);
    }
}

/// The shape of one report type's JSON, named for messages.
#[derive(Debug, Clone)]
pub struct Schema {
    /// What the report is called in messages (`the run summary`, ...).
    what: &'static str,
    /// Its shape.
    pub shape: Shape,
    /// The keys a string-keyed map can hold, by the struct field that holds the map.
    keys: BTreeMap<String, Vec<String>>,
    /// Whether a path may end on a two-element array (a certified interval `[lo, hi]`).
    intervals: bool,
}

impl Schema {
    /// The schema of `T`'s serialised form, called `what` in messages.
    pub fn of<T: for<'de> Deserialize<'de>>(what: &'static str) -> Schema {
        Schema {
            what,
            shape: Shape::of::<T>(),
            keys: BTreeMap::new(),
            intervals: false,
        }
    }

    /// The same schema, with the keys the string-keyed maps held by struct fields named
    /// `field` can hold.
    pub fn with_keys(mut self, field: &str, keys: impl IntoIterator<Item = String>) -> Schema {
        self.keys
            .insert(field.to_string(), keys.into_iter().collect());
        self
    }

    /// Ok when `path` names a number (or a boolean, or an optional one) in this report;
    /// else a message naming the first step that does not exist and what does.
    pub fn check(&self, path: &str) -> Result<(), String> {
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        Walk {
            schema: self,
            path,
            parts: &parts,
        }
        .walk(&self.shape, 0, None)
    }
}

/// One path's walk through a schema.
struct Walk<'a> {
    schema: &'a Schema,
    path: &'a str,
    parts: &'a [&'a str],
}

impl Walk<'_> {
    /// Where the walk stands after `k` parts, for messages.
    fn here(&self, k: usize) -> String {
        match k {
            0 => format!("in {}", self.schema.what),
            _ => format!("at `{}` in {}", self.parts[..k].join("/"), self.schema.what),
        }
    }

    /// The part `k`, or the message that the path ends on `kind`, not on a number.
    fn part(&self, k: usize, kind: &str) -> Result<&str, String> {
        self.parts.get(k).copied().ok_or_else(|| {
            format!(
                "`{}` names {kind} {}, not a number",
                self.path,
                self.here(k)
            )
        })
    }

    /// Check the parts from `k` on against `shape`; `field` names the struct field
    /// whose value `shape` is (for the keys of string-keyed maps).
    fn walk(&self, shape: &Shape, k: usize, field: Option<&str>) -> Result<(), String> {
        let index = |part: &str, len: Option<usize>| match part.parse::<usize>() {
            Ok(i) if len.is_none_or(|n| i < n) => Ok(i),
            _ => Err(format!(
                "`{part}` {}: an array takes an index{}",
                self.here(k),
                len.map_or(String::new(), |n| format!(" below {n}"))
            )),
        };
        match shape {
            Shape::Number => match self.parts.get(k) {
                None => Ok(()),
                Some(part) => Err(format!("no `{part}` {}: it holds a number", self.here(k))),
            },
            Shape::Null => Err(format!(
                "`{}` {} is always null, not a number",
                self.path,
                self.here(k)
            )),
            Shape::Text | Shape::Names(_) => match self.parts.get(k) {
                None => Err(format!(
                    "`{}` names text {}, not a number",
                    self.path,
                    self.here(k)
                )),
                Some(part) => Err(format!("no `{part}` {}: it holds text", self.here(k))),
            },
            Shape::Optional(inner) => self.walk(inner, k, field),
            Shape::Array(inner) => {
                index(self.part(k, "an array")?, None)?;
                self.walk(inner, k + 1, None)
            }
            Shape::Tuple(items)
                if self.schema.intervals && items.len() == 2 && k == self.parts.len() =>
            {
                Ok(())
            }
            Shape::Tuple(items) => {
                let i = index(self.part(k, "an array")?, Some(items.len()))?;
                self.walk(&items[i], k + 1, None)
            }
            Shape::Object(fields) => {
                let part = self.part(k, "an object")?;
                let (name, inner) = fields.iter().find(|(f, _)| f == part).ok_or_else(|| {
                    let names: Vec<&str> = fields.iter().map(|(f, _)| f.as_str()).collect();
                    format!("no `{part}` {} (keys: {})", self.here(k), names.join(", "))
                })?;
                self.walk(inner, k + 1, Some(name))
            }
            Shape::Map(key, value) => {
                let part = self.part(k, "an object")?;
                let listed = field.and_then(|f| self.schema.keys.get(f));
                let keys = match &**key {
                    Shape::Names(names) => Some(names),
                    Shape::Text => listed,
                    _ => None,
                };
                if let Some(keys) = keys.filter(|keys| !keys.iter().any(|x| x == part)) {
                    return Err(format!(
                        "no `{part}` {} (keys: {})",
                        self.here(k),
                        keys.join(", ")
                    ));
                }
                if **key == Shape::Number && part.parse::<f64>().is_err() {
                    return Err(format!("`{part}` {}: the keys are numbers", self.here(k)));
                }
                self.walk(value, k + 1, None)
            }
            // the variants' contents are not traced: any path below a variant's name
            Shape::Tagged(names) => {
                let part = self.part(k, "an object")?;
                match names.iter().any(|n| n == part) {
                    true => Ok(()),
                    false => Err(format!(
                        "no `{part}` {} (keys: {})",
                        self.here(k),
                        names.join(", ")
                    )),
                }
            }
            Shape::Unknown => Ok(()),
        }
    }
}
