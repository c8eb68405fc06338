//! The shape of a table's value, traced once when the table opens: the part
//! of the schema stamp that sees inside nested types.
//!
//! The attribute fingerprints the declared type's own tokens, so a field
//! added, removed or reordered inside a nested type (`struct Game { rules:
//! Rules }` and a change to `Rules`) leaves them as they were, and a frame
//! of the old build would decode into wrong values on the new one. So
//! [`trace`] deserializes values of the type from a probe: a serde
//! `Deserializer` that answers every request with a default (0, "", `Some`,
//! one element in each sequence and map) and writes down what was asked,
//! as a binary codec such as postcard is asked: the names of structs, enums
//! and their fields and variants, in order, tuple lengths, and the kind of
//! every primitive. The hash of that is the shape.
//!
//! One deserialization meets one variant of each enum, so the probe runs
//! passes, each enum type taking its next variant each time it is met,
//! until every variant of every enum met has been explored (behind an
//! `Option` or in a `Vec` too). A type met again inside itself (`struct
//! Tree { children: Vec<Tree> }`, `enum List { Cons(u8, Box<List>), Nil }`)
//! is a repeat: below it sequences and maps are empty, options `None`, and
//! enums take a variant that does not lead back into it, so every pass
//! ends; the outer occurrence has already written the type in full.
//!
//! An id ([`Id`](crate::Id), [`RawId`](crate::RawId)) is text to the
//! probe, whatever it holds: no text offered is an id of the kind a field
//! asks for, so while a shape is traced an id that does not parse reads as
//! a placeholder (`entity::id::tracing`), and a value holding ids traces.
//!
//! Some types cannot be traced: one read through `deserialize_any`
//! (untagged or internally tagged enums, `#[serde(flatten)]`, a
//! `serde_json::Value`), one whose `Deserialize` refuses every value the
//! probe offers (a primitive is offered a few: 0 or 1, `false` or `true`,
//! no bytes or 16 zero bytes, an empty text, "0", "a", a nil UUID, an
//! epoch date and time), one that checks more than a primitive, one that
//! panics, one that holds itself with no way out. [`trace`] says why, and
//! the stamp is then the attribute's fingerprint alone (as the crate docs
//! say).
//!
//! Not serde-reflection, which traces formats the same way: it discovers
//! the variants of a nested enum only when that enum is traced by name (a
//! table knows only its own type), stops exploring behind an `Option` or a
//! sequence after its first pass (an enum in a `Vec` keeps one variant),
//! and overflows the stack on an enum whose first variant holds the enum
//! (`Cons(Box<List>)`), which aborts the process.

use std::any::type_name;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::panic::{AssertUnwindSafe, catch_unwind};

use serde::de::value::U32Deserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

use crate::entity::id;

/// Passes at most, restarts included: enough for enums of hundreds of
/// variants, or a few nested levels of dozens.
const MAX_PASSES: usize = 4_096;

/// Nesting at most (a value of well under a hundred levels on any real
/// type), so the probe's stack stays within a few hundred KiB.
const MAX_DEPTH: usize = 128;

/// The values offered to a primitive, in turn, while it is refused (by its
/// visitor, or by the `Deserialize` that read it, the last primitive
/// before the refusal): each refusal restarts the pass with the next one.
const TEXTS: [&str; 8] = [
    "",
    "0",
    "a",
    "00000000-0000-0000-0000-000000000000",
    "1970-01-01T00:00:00Z",
    "1970-01-01T00:00:00",
    "1970-01-01",
    "00:00:00",
];
const BYTES: [&[u8]; 2] = [&[], &[0; 16]];

/// The hash of the shape of `T`'s values, the same in every process of a
/// build (and of any build with the same shape), or why it cannot be
/// traced.
pub(crate) fn trace<T: DeserializeOwned>() -> Result<u64> {
    // The probe runs the type's own `Deserialize`: a panic there means
    // "cannot be traced", not a cache that fails to build.
    catch_unwind(AssertUnwindSafe(|| id::tracing(trace_passes::<T>)))
        .unwrap_or_else(|_| Err(Untraceable::Custom("its Deserialize panicked".into())))
}

fn trace_passes<T: DeserializeOwned>() -> Result<u64> {
    let mut tracer = Tracer::default();
    let mut shape = FNV_OFFSET;
    for _ in 0..MAX_PASSES {
        let explored = tracer.enums.clone();
        tracer.out.clear();
        tracer.path.clear();
        tracer.cut = 0;
        tracer.depth = 0;
        tracer.primitives = 0;
        tracer.last_offer = None;
        match T::deserialize(Probe { t: &mut tracer }) {
            Ok(_) => {
                // The next pass reads other primitives in other places.
                tracer.offers.clear();
                shape = fnv1a(shape, tracer.out.as_bytes());
                shape = fnv1a(shape, b"\n");
                if tracer.enums.values().all(Coverage::done) {
                    return Ok(shape);
                }
            }
            // A restart: this pass's turns of the enums are not taken.
            Err(Untraceable::DeadEnd(key, variant)) => {
                tracer.enums = explored;
                tracer.dead_ends.insert((key, variant));
            }
            // Refused, by the visitor of the last primitive read or by
            // the `Deserialize` that read it: offer it the next value.
            Err(Untraceable::Custom(_)) if tracer.last_offer.is_some_and(|(_, more)| more) => {
                tracer.enums = explored;
                let (ordinal, _) = tracer.last_offer.expect("some");
                *tracer.offers.entry(ordinal).or_default() += 1;
            }
            Err(why) => return Err(why),
        }
    }
    Err(Untraceable::TooManyPasses)
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// 64-bit FNV-1a, as the attribute's fingerprint: stable everywhere.
pub(crate) fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Why a type's shape cannot be traced.
#[derive(Debug)]
pub(crate) enum Untraceable {
    /// Its `Deserialize` refused what the probe offered.
    Custom(String),
    /// It asks for something only a self-describing format answers.
    Unsupported(&'static str),
    /// It holds itself with no way out (or only through a variant that
    /// does not end).
    Recursive(&'static str),
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Not explored within [`MAX_PASSES`].
    TooManyPasses,
    /// Restart: this enum's variant leads back into a repeat.
    DeadEnd(&'static str, usize),
}

impl fmt::Display for Untraceable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Untraceable::Custom(why) => write!(f, "its Deserialize refused the probe: {why}"),
            Untraceable::Unsupported(what) => write!(f, "it needs {what}"),
            Untraceable::Recursive(name) => write!(f, "`{name}` holds itself with no way out"),
            Untraceable::TooDeep => write!(f, "it nests deeper than {MAX_DEPTH} levels"),
            Untraceable::TooManyPasses => {
                write!(f, "its enums need more than {MAX_PASSES} passes")
            }
            Untraceable::DeadEnd(name, _) => write!(f, "every variant of `{name}` recurses"),
        }
    }
}

impl std::error::Error for Untraceable {}

impl de::Error for Untraceable {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        Untraceable::Custom(msg.to_string())
    }
}

type Result<T> = std::result::Result<T, Untraceable>;

/// How far an enum type's variants have been explored.
#[derive(Clone)]
struct Coverage {
    name: &'static str,
    variants: &'static [&'static str],
    next: usize,
    explored: Vec<bool>,
}

impl Coverage {
    fn done(&self) -> bool {
        self.explored.iter().all(|&explored| explored)
    }
}

/// A named type being deserialized: its Rust type name (the key of the
/// type: two instances of a generic type are two keys) and, for an enum
/// below a repeat, the variant it took.
struct Frame {
    key: &'static str,
    repeat: bool,
    cut_choice: Option<usize>,
}

#[derive(Default)]
struct Tracer {
    /// By enum type (Rust type name): the variants explored so far.
    enums: BTreeMap<&'static str, Coverage>,
    /// Variants of an enum that, below a repeat, lead back into it.
    dead_ends: BTreeSet<(&'static str, usize)>,
    /// Which offer a primitive gets, by its place among this pass's
    /// primitives, if not the first. (By place, not by type: two texts
    /// read as `String` may be parsed into a date and a time.)
    offers: BTreeMap<usize, usize>,
    /// Primitives read in this pass.
    primitives: usize,
    /// The last primitive read in this pass, and whether it has more
    /// values to be offered.
    last_offer: Option<(usize, bool)>,
    /// This pass's shape.
    out: String,
    path: Vec<Frame>,
    /// Repeats on the path: above 0, below a repeat.
    cut: usize,
    depth: usize,
}

impl Tracer {
    fn write(&mut self, token: &str) {
        self.out.push_str(token);
        self.out.push(' ');
    }

    /// Writes a name (of a type, a field, a variant): length-prefixed, so
    /// that no two lists of names write the same text.
    fn name(&mut self, name: &str) {
        let _ = write!(self.out, "{}:{name} ", name.len());
    }

    fn names(&mut self, names: &[&str]) {
        let _ = write!(self.out, "[{}] ", names.len());
        for name in names {
            self.name(name);
        }
    }

    fn descend(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Untraceable::TooDeep);
        }
        Ok(())
    }

    fn ascend(&mut self) {
        self.depth -= 1;
    }

    /// Enters the named type `key`: a repeat if it is already on the path.
    /// Met again below its own repeat, the way down did not end: the last
    /// enum below that repeat took a variant that leads back (restart
    /// without it), or there is no way out.
    fn enter(&mut self, key: &'static str, name: &'static str) -> Result<bool> {
        self.descend()?;
        let repeat = self.path.iter().any(|frame| frame.key == key);
        if let Some(at) = self
            .path
            .iter()
            .position(|frame| frame.key == key && frame.repeat)
        {
            let blamed = self.path[at..].iter().rev().find_map(|frame| {
                frame
                    .cut_choice
                    .map(|variant| Untraceable::DeadEnd(frame.key, variant))
            });
            return Err(blamed.unwrap_or(Untraceable::Recursive(name)));
        }
        self.path.push(Frame {
            key,
            repeat,
            cut_choice: None,
        });
        self.cut += usize::from(repeat);
        Ok(repeat)
    }

    fn leave(&mut self) {
        let frame = self.path.pop().expect("entered");
        self.cut -= usize::from(frame.repeat);
        self.ascend();
    }

    /// The value to offer the next primitive, one of `offers`.
    fn offer<O: Copy>(&mut self, offers: &[O]) -> O {
        let ordinal = self.primitives;
        self.primitives += 1;
        let at = self.offers.get(&ordinal).copied().unwrap_or(0);
        self.last_offer = Some((ordinal, at + 1 < offers.len()));
        offers[at.min(offers.len() - 1)]
    }
}

struct Probe<'a> {
    t: &'a mut Tracer,
}

macro_rules! primitives {
    ($($method:ident $visit:ident $ty:ty = [$($offer:expr),+];)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
            self.t.write(stringify!($ty));
            let offer: $ty = self.t.offer(&[$($offer),+]);
            visitor.$visit(offer)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = Untraceable;

    primitives! {
        deserialize_bool visit_bool bool = [false, true];
        deserialize_i8 visit_i8 i8 = [0, 1];
        deserialize_i16 visit_i16 i16 = [0, 1];
        deserialize_i32 visit_i32 i32 = [0, 1];
        deserialize_i64 visit_i64 i64 = [0, 1];
        deserialize_i128 visit_i128 i128 = [0, 1];
        deserialize_u8 visit_u8 u8 = [0, 1];
        deserialize_u16 visit_u16 u16 = [0, 1];
        deserialize_u32 visit_u32 u32 = [0, 1];
        deserialize_u64 visit_u64 u64 = [0, 1];
        deserialize_u128 visit_u128 u128 = [0, 1];
        deserialize_f32 visit_f32 f32 = [0.0, 1.0];
        deserialize_f64 visit_f64 f64 = [0.0, 1.0];
        deserialize_char visit_char char = ['a', '0'];
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.t.write("str");
        let offer = self.t.offer(&TEXTS);
        visitor.visit_str(offer)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.t.write("bytes");
        let offer = self.t.offer(&BYTES);
        visitor.visit_bytes(offer)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        if self.t.cut > 0 {
            self.t.write("option");
            return visitor.visit_none();
        }
        self.t.write("option(");
        self.t.descend()?;
        let t = self.t;
        let value = visitor.visit_some(Probe { t: &mut *t })?;
        t.ascend();
        t.write(")");
        Ok(value)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.t.write("()");
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        self.t.write("unit_struct");
        self.t.name(name);
        visitor.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value> {
        self.t.write("newtype_struct");
        self.t.name(name);
        self.t.enter(type_name::<V::Value>(), name)?;
        let t = self.t;
        let value = visitor.visit_newtype_struct(Probe { t: &mut *t })?;
        t.leave();
        Ok(value)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.t.write("seq");
        let len = usize::from(self.t.cut == 0);
        elements(self.t, len, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value> {
        let _ = write!(self.t.out, "tuple {len} ");
        elements(self.t, len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value> {
        let _ = write!(self.t.out, "tuple_struct {len} ");
        self.t.name(name);
        self.t.enter(type_name::<V::Value>(), name)?;
        let t = self.t;
        let value = elements(&mut *t, len, visitor)?;
        t.leave();
        Ok(value)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.t.write("map(");
        self.t.descend()?;
        let t = self.t;
        let left = usize::from(t.cut == 0);
        let value = visitor.visit_map(Entries {
            t: &mut *t,
            left,
            value: false,
        })?;
        t.ascend();
        t.write(")");
        Ok(value)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        self.t.write("struct");
        self.t.name(name);
        self.t.names(fields);
        self.t.enter(type_name::<V::Value>(), name)?;
        let t = self.t;
        let value = elements(&mut *t, fields.len(), visitor)?;
        t.leave();
        Ok(value)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        if variants.is_empty() {
            return Err(Untraceable::Unsupported("an enum with no variants"));
        }
        self.t.write("enum");
        self.t.name(name);
        self.t.names(variants);
        let key = type_name::<V::Value>();
        let repeat = self.t.enter(key, name)?;
        let t = self.t;
        let coverage = t.enums.entry(key).or_insert_with(|| Coverage {
            name,
            variants,
            next: 0,
            explored: vec![false; variants.len()],
        });
        if (coverage.name, coverage.variants) != (name, variants) {
            return Err(Untraceable::Unsupported(
                "one Rust type name for two different enums",
            ));
        }
        let variant = if repeat || t.cut > 0 {
            // Below a repeat: the first variant known not to lead back.
            let variant = (0..variants.len())
                .find(|&variant| !t.dead_ends.contains(&(key, variant)))
                .ok_or(Untraceable::Recursive(name))?;
            t.path.last_mut().expect("entered").cut_choice = Some(variant);
            variant
        } else {
            let variant = coverage.next % variants.len();
            coverage.next += 1;
            coverage.explored[variant] = true;
            variant
        };
        let _ = write!(t.out, "variant {variant} ");
        let value = visitor.visit_enum(Variant {
            t: &mut *t,
            variant,
        })?;
        t.leave();
        Ok(value)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(Untraceable::Unsupported(
            "an identifier outside an enum (a self-describing format)",
        ))
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(Untraceable::Unsupported(
            "deserialize_any (a self-describing format: an untagged or internally \
             tagged enum, a flattened field, a dynamic value)",
        ))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value> {
        Err(Untraceable::Unsupported(
            "deserialize_ignored_any (a self-describing format)",
        ))
    }

    fn is_human_readable(&self) -> bool {
        // As postcard, the default codec: some types (addresses, UUIDs)
        // take another shape in a human-readable format.
        false
    }
}

/// `len` elements, each probed in turn, for a visitor's `visit_seq`.
fn elements<'de, V: Visitor<'de>>(t: &mut Tracer, len: usize, visitor: V) -> Result<V::Value> {
    t.write("(");
    t.descend()?;
    let value = visitor.visit_seq(Elements {
        t: &mut *t,
        left: len,
    })?;
    t.ascend();
    t.write(")");
    Ok(value)
}

struct Elements<'a> {
    t: &'a mut Tracer,
    left: usize,
}

impl<'de> SeqAccess<'de> for Elements<'_> {
    type Error = Untraceable;

    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(Probe { t: &mut *self.t }).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

struct Entries<'a> {
    t: &'a mut Tracer,
    left: usize,
    value: bool,
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = Untraceable;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        self.value = true;
        seed.deserialize(Probe { t: &mut *self.t }).map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value> {
        if !std::mem::take(&mut self.value) {
            return Err(Untraceable::Unsupported("a map value before its key"));
        }
        seed.deserialize(Probe { t: &mut *self.t })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

/// The variant an enum took, by its index (as postcard reads it).
struct Variant<'a> {
    t: &'a mut Tracer,
    variant: usize,
}

impl<'de, 'a> EnumAccess<'de> for Variant<'a> {
    type Error = Untraceable;
    type Variant = Variant<'a>;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Variant<'a>)> {
        let index = u32::try_from(self.variant).expect("fewer than 2^32 variants");
        let identifier: U32Deserializer<Untraceable> = index.into_deserializer();
        Ok((seed.deserialize(identifier)?, self))
    }
}

impl<'de> VariantAccess<'de> for Variant<'_> {
    type Error = Untraceable;

    fn unit_variant(self) -> Result<()> {
        self.t.write("unit");
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value> {
        self.t.write("newtype(");
        self.t.descend()?;
        let value = seed.deserialize(Probe { t: &mut *self.t })?;
        self.t.ascend();
        self.t.write(")");
        Ok(value)
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value> {
        let _ = write!(self.t.out, "tuple {len} ");
        elements(self.t, len, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        self.t.write("struct");
        self.t.names(fields);
        elements(self.t, fields.len(), visitor)
    }
}

#[cfg(test)]
mod tests;
