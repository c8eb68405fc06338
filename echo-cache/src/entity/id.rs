//! Branded ids: a 3-letter kind and a 64-bit snowflake in 14 ASCII bytes.
//!
//! An id prints as `KKKPPPPPPPPPPP`: the kind (`GAM`) followed by the 11-digit
//! base62 encoding (`0-9A-Za-z`, in ASCII order) of a snowflake payload. The
//! width is fixed and the digits sort in ASCII order, so the byte order of two
//! printed ids is the order of their payloads, which is the order they were
//! minted in (see [`Minter`](crate::Minter)). [`newer`] compares two ids by that
//! order and ignores their kinds.
//!
//! [`Id<T>`] is the typed form: its kind is the kind `T` declared with
//! `#[near_cache(kind = "...")]`, so an id of one kind cannot be handed to a
//! table of another. It holds only the payload, eight bytes, and is `Copy`.
//! [`RawId`] is the untyped form (kind + payload), used for versions and for
//! ids whose kind is only known at run time.

use std::cell::Cell;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::str::FromStr;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::ser::{Serialize, Serializer};

use crate::entity::kind::{IdError, KIND_LEN, Kind, shape};
use crate::entity::spec::Cached;

/// Length of a printed id in bytes: 3 kind letters and 11 base62 digits.
pub const ID_LEN: usize = 14;
const DIGITS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Encodes a payload as 11 base62 digits, most significant first.
pub(crate) fn encode_payload(mut payload: u64, out: &mut [u8]) {
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(payload % 62) as usize];
        payload /= 62;
    }
}

fn digit_value(byte: u8) -> Option<u64> {
    let value = match byte {
        b'0'..=b'9' => byte - b'0',
        b'A'..=b'Z' => byte - b'A' + 10,
        b'a'..=b'z' => byte - b'a' + 36,
        _ => return None,
    };
    Some(u64::from(value))
}

pub(crate) fn decode_payload(digits: &[u8]) -> Result<u64, IdError> {
    digits.iter().try_fold(0u64, |acc, &byte| {
        let digit = digit_value(byte).ok_or(shape("a payload digit is one of 0-9, A-Z, a-z"))?;
        acc.checked_mul(62)
            .and_then(|acc| acc.checked_add(digit))
            .ok_or(shape("the payload is larger than u64::MAX"))
    })
}

/// An id whose kind is known only at run time: a kind and a payload.
///
/// Versions of cached values are `RawId`s: the version of a value is an id of
/// its table's kind, minted when the value was written or filled.
///
/// ```
/// use echo_cache::RawId;
///
/// let id: RawId = "GAM00000000001".parse()?;
/// assert_eq!(id.kind().as_str(), "GAM");
/// assert_eq!(id.payload(), 1);
/// assert_eq!(id.to_string(), "GAM00000000001");
/// # Ok::<(), echo_cache::IdError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawId {
    kind: Kind,
    payload: u64,
}

impl RawId {
    /// The id of `kind` carrying `payload`.
    #[must_use]
    pub const fn new(kind: Kind, payload: u64) -> RawId {
        RawId { kind, payload }
    }

    /// Its kind.
    #[must_use]
    pub const fn kind(&self) -> Kind {
        self.kind
    }

    /// Its snowflake payload.
    #[must_use]
    pub const fn payload(&self) -> u64 {
        self.payload
    }

    /// Parses 14 bytes: a kind and 11 base62 digits.
    ///
    /// # Errors
    ///
    /// [`IdError::Shape`] if the bytes are not a well-formed id.
    pub fn parse(bytes: impl AsRef<[u8]>) -> Result<RawId, IdError> {
        let bytes = bytes.as_ref();
        if bytes.len() != ID_LEN {
            return Err(shape("an id is 14 bytes"));
        }
        let (kind, digits) = bytes.split_at(KIND_LEN);
        Ok(RawId {
            kind: Kind::parse(kind)?,
            payload: decode_payload(digits)?,
        })
    }

    /// The 14 ASCII bytes it prints as.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; ID_LEN] {
        let mut out = [0u8; ID_LEN];
        out[..KIND_LEN].copy_from_slice(&self.kind.0);
        encode_payload(self.payload, &mut out[KIND_LEN..]);
        out
    }

    /// Whether `self` was minted after `other`, whatever their kinds.
    #[must_use]
    pub const fn is_newer_than(&self, other: &RawId) -> bool {
        self.payload > other.payload
    }

    /// Narrows to the typed id of `T`.
    ///
    /// # Errors
    ///
    /// [`IdError::Kind`] if the id is not of `T`'s kind.
    pub fn typed<T: Cached>(self) -> Result<Id<T>, IdError> {
        if self.kind == T::KIND {
            Ok(Id::from_payload(self.payload))
        } else {
            Err(IdError::Kind {
                expected: T::KIND,
                found: self.kind,
            })
        }
    }
}

/// Whether `a` was minted after `b`: compares the payloads, ignores the kinds.
///
/// ```
/// use echo_cache::{newer, RawId};
///
/// let old: RawId = "GAM00000000009".parse()?;
/// let new: RawId = "PLR0000000000A".parse()?;
/// assert!(newer(&new, &old));
/// assert!(!newer(&old, &new));
/// # Ok::<(), echo_cache::IdError>(())
/// ```
#[must_use]
pub const fn newer(a: &RawId, b: &RawId) -> bool {
    a.is_newer_than(b)
}

impl Ord for RawId {
    /// Byte order of the printed ids: kind first, then payload.
    fn cmp(&self, other: &Self) -> Ordering {
        (self.kind, self.payload).cmp(&(other.kind, other.payload))
    }
}

impl PartialOrd for RawId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for RawId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.to_bytes();
        f.write_str(std::str::from_utf8(&bytes).expect("an id is ASCII"))
    }
}

impl fmt::Debug for RawId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawId({self})")
    }
}

impl FromStr for RawId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RawId::parse(s)
    }
}

impl Serialize for RawId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = self.to_bytes();
        serializer.serialize_str(std::str::from_utf8(&bytes).expect("an id is ASCII"))
    }
}

impl<'de> Deserialize<'de> for RawId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(IdVisitor(PhantomData))
    }
}

thread_local! {
    /// Whether this thread traces the shape of a table's values (see
    /// [`tracing`]).
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread reading every id as a placeholder: the probe
/// that traces a value's shape (`l2::shape`) offers texts that are no id
/// of the kind a field asks for, and an id's shape is its text's whatever
/// it holds. Only where the text is not an id: a valid one reads as it is.
pub(crate) fn tracing<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            TRACING.set(self.0);
        }
    }
    let _restore = Restore(TRACING.replace(true));
    f()
}

/// What an id is read into: a [`RawId`] or an [`Id<T>`].
trait ReadId: Sized {
    fn parse(bytes: &[u8]) -> Result<Self, IdError>;
    /// What a text that is no id reads as while the shape is traced.
    fn placeholder() -> Self;
}

impl ReadId for RawId {
    fn parse(bytes: &[u8]) -> Result<Self, IdError> {
        RawId::parse(bytes)
    }

    fn placeholder() -> Self {
        RawId::new(Kind::new("PRB"), 0)
    }
}

impl<T: Cached> ReadId for Id<T> {
    fn parse(bytes: &[u8]) -> Result<Self, IdError> {
        Id::parse(bytes)
    }

    fn placeholder() -> Self {
        Id::from_payload(0)
    }
}

/// Accepts an id written as a string or as bytes, whichever the format has.
struct IdVisitor<V>(PhantomData<V>);

impl<V: ReadId> IdVisitor<V> {
    fn read<E: de::Error>(bytes: &[u8]) -> Result<V, E> {
        match V::parse(bytes) {
            Ok(id) => Ok(id),
            Err(_) if TRACING.get() => Ok(V::placeholder()),
            Err(err) => Err(E::custom(err)),
        }
    }
}

impl<V: ReadId> Visitor<'_> for IdVisitor<V> {
    type Value = V;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a 14-character branded id")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V, E> {
        Self::read(v.as_bytes())
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<V, E> {
        Self::read(v)
    }
}

/// The id of an entity of type `T`, whose kind `T` declared.
///
/// `Id<T>` is eight bytes (the payload; the kind is `T`'s) and `Copy`,
/// `Eq`, `Ord` (mint order) and `Hash`. It prints as its 14 characters,
/// parses with a shape check and a kind check, and (de)serializes as its
/// 14-character string.
///
/// ```
/// use echo_cache::{near_cache, Id, IdError};
///
/// #[near_cache(kind = "GAM", ttl_ms = 60_000)]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Game { secret: String }
///
/// #[near_cache(kind = "PLR", ttl_ms = 60_000)]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Player { name: String }
///
/// let id: Id<Game> = "GAM0000000001z".parse()?;
/// assert_eq!(id.to_string(), "GAM0000000001z");
/// assert!(matches!("GAM0000000001z".parse::<Id<Player>>(), Err(IdError::Kind { .. })));
/// assert!(matches!("GAM-bad".parse::<Id<Game>>(), Err(IdError::Shape { .. })));
/// assert!(Id::<Game>::mint() > id);
/// # Ok::<(), echo_cache::IdError>(())
/// ```
pub struct Id<T> {
    payload: u64,
    kind: PhantomData<fn() -> T>,
}

impl<T> Id<T> {
    /// The id of `T` carrying `payload`.
    #[must_use]
    pub const fn from_payload(payload: u64) -> Id<T> {
        Id {
            payload,
            kind: PhantomData,
        }
    }

    /// Its snowflake payload.
    #[must_use]
    pub const fn payload(self) -> u64 {
        self.payload
    }
}

impl<T: Cached> Id<T> {
    /// Parses 14 bytes as an id of `T`'s kind.
    ///
    /// # Errors
    ///
    /// [`IdError::Shape`] if the bytes are not a well-formed id,
    /// [`IdError::Kind`] if they are an id of another kind.
    pub fn parse(bytes: impl AsRef<[u8]>) -> Result<Id<T>, IdError> {
        RawId::parse(bytes)?.typed()
    }

    /// The untyped id.
    #[must_use]
    pub fn raw(self) -> RawId {
        RawId::new(T::KIND, self.payload)
    }
}

/// An id of a `T`: [`Id<T>`], and nothing else.
///
/// The bound of the id that [`Cache::fetch`](crate::Cache::fetch) and the
/// cache's other typed operations take: an id of another kind does not
/// compile, and the compiler says why and how to fix it rather than only
/// "expected `Id<Game>`, found `Id<Player>`". Sealed: only `Id<T>`
/// implements it.
///
/// The bound infers `T` from the id (`cache.fetch(id)` reads the table of
/// `id`'s type) and the id's type from `T` (`cache.fetch::<Game>(Id::mint())`),
/// but it cannot tell a `parse` what to produce: give the parsed id its
/// type where it is made.
///
/// ```
/// use echo_cache::{near_cache, Cache, Id};
///
/// #[near_cache(kind = "GAM", ttl_ms = 60_000)]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Game { secret: String }
///
/// async fn secret(cache: &Cache, text: &str) -> Result<String, Box<dyn std::error::Error>> {
///     let id: Id<Game> = text.parse()?; // not `cache.fetch(text.parse()?)`
///     Ok(cache.fetch(id).await?.secret.clone())
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an id of `{T}`",
    label = "expected an `Id<{T}>`",
    note = "an id reads only the table of its own kind: to read a `{T}`, pass an \
            `Id<{T}>` (a field that refers to the `{T}`, say); to read what this id \
            names, fetch the type it is an id of"
)]
pub trait IdOf<T>: sealed::Sealed {
    /// The id.
    #[doc(hidden)]
    fn __id(self) -> Id<T>;
}

impl<T> IdOf<T> for Id<T> {
    #[inline]
    fn __id(self) -> Id<T> {
        self
    }
}

mod sealed {
    /// Keeps [`IdOf`](super::IdOf) to `Id<T>`.
    pub trait Sealed {}

    impl<T> Sealed for super::Id<T> {}
}

impl<T> Clone for Id<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Id<T> {}

impl<T> PartialEq for Id<T> {
    fn eq(&self, other: &Self) -> bool {
        self.payload == other.payload
    }
}

impl<T> Eq for Id<T> {}

impl<T> Ord for Id<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.payload.cmp(&other.payload)
    }
}

impl<T> PartialOrd for Id<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Hash for Id<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.payload.hash(state);
    }
}

impl<T: Cached> From<Id<T>> for RawId {
    fn from(id: Id<T>) -> RawId {
        id.raw()
    }
}

impl<T: Cached> fmt::Display for Id<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.raw(), f)
    }
}

impl<T: Cached> fmt::Debug for Id<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.raw())
    }
}

impl<T: Cached> FromStr for Id<T> {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Id::parse(s)
    }
}

impl<T: Cached> TryFrom<RawId> for Id<T> {
    type Error = IdError;

    fn try_from(raw: RawId) -> Result<Self, Self::Error> {
        raw.typed()
    }
}

impl<T: Cached> Serialize for Id<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw().serialize(serializer)
    }
}

impl<'de, T: Cached> Deserialize<'de> for Id<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(IdVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_digits_round_trip_at_the_edges() {
        for payload in [0, 1, 61, 62, u64::MAX - 1, u64::MAX] {
            let id = RawId::new(Kind::new("GAM"), payload);
            assert_eq!(RawId::parse(id.to_bytes()), Ok(id));
        }
        assert_eq!(
            RawId::new(Kind::new("GAM"), 0).to_string(),
            "GAM00000000000"
        );
        assert_eq!(
            RawId::new(Kind::new("GAM"), u64::MAX).to_string(),
            "GAMLygHa16AHYF"
        );
    }

    #[test]
    fn one_past_u64_max_is_refused() {
        assert_eq!(
            RawId::parse("GAMLygHa16AHYG"),
            Err(shape("the payload is larger than u64::MAX"))
        );
        assert!(RawId::parse("GAMzzzzzzzzzzz").is_err());
    }

    #[test]
    fn kinds_are_three_uppercase_letters() {
        assert!(Kind::parse(b"GAM").is_ok());
        for bad in [&b"GA"[..], b"GAME", b"gam", b"G4M", b"G M", b"\xffAM"] {
            assert!(Kind::parse(bad).is_err(), "{bad:?}");
        }
    }
}
