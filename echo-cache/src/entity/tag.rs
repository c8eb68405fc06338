//! Tags: the group a row belongs to (a game's tournament), named by a
//! declared function of its value, so a whole group can be invalidated
//! at once ([`Cache::invalidate_tag`](crate::Cache::invalidate_tag)).

use std::fmt;

use crate::entity::id::{Id, RawId, decode_payload, encode_payload};
use crate::entity::spec::Cached;

/// Length of a tag as written in keys and messages: 11 base62 digits.
pub(crate) const TAG_LEN: usize = 11;

/// The group a row belongs to: a 64-bit number, usually the id of the
/// entity the group is about (`Tag::from(tournament_id)`). Any `u64` is a
/// tag, so there is no malformed one to refuse; two tables may use the
/// same numbers for unrelated groups (a tag is only meaningful within its
/// table).
///
/// ```
/// use echo_cache::{near_cache, Id, Tag};
///
/// #[near_cache(kind = "TOU", ttl_ms = 60_000)]
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Tournament { name: String }
///
/// let tournament = Id::<Tournament>::from_payload(42);
/// assert_eq!(Tag::from(tournament), Tag::from(42));
/// assert_eq!(Tag::from(42).get(), 42);
/// assert_eq!(Tag::from(42).to_string(), "0000000000g");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag(u64);

impl Tag {
    /// The tag's number.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The tag as 11 base62 digits (its form in keys and messages).
    pub(crate) fn to_bytes(self) -> [u8; TAG_LEN] {
        let mut digits = [0; TAG_LEN];
        encode_payload(self.0, &mut digits);
        digits
    }

    /// The tag written as [`to_bytes`](Self::to_bytes) writes it.
    pub(crate) fn parse(digits: &[u8]) -> Option<Tag> {
        (digits.len() == TAG_LEN)
            .then(|| decode_payload(digits).ok().map(Tag))
            .flatten()
    }
}

impl From<u64> for Tag {
    fn from(number: u64) -> Tag {
        Tag(number)
    }
}

impl<T: Cached> From<Id<T>> for Tag {
    fn from(id: Id<T>) -> Tag {
        Tag(id.payload())
    }
}

impl From<RawId> for Tag {
    fn from(id: RawId) -> Tag {
        Tag(id.payload())
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Base62 digits are ASCII.
        f.write_str(std::str::from_utf8(&self.to_bytes()).map_err(|_| fmt::Error)?)
    }
}

/// What a declared `tag` function may return: a [`Tag`] (or what converts
/// to one: a `u64`, an [`Id`]), or an `Option` of one for rows in no group.
pub trait IntoTag {
    /// The row's tag, if it has one.
    fn into_tag(self) -> Option<Tag>;
}

impl IntoTag for Tag {
    fn into_tag(self) -> Option<Tag> {
        Some(self)
    }
}

impl IntoTag for u64 {
    fn into_tag(self) -> Option<Tag> {
        Some(Tag(self))
    }
}

impl<T: Cached> IntoTag for Id<T> {
    fn into_tag(self) -> Option<Tag> {
        Some(self.into())
    }
}

impl<V: IntoTag> IntoTag for Option<V> {
    fn into_tag(self) -> Option<Tag> {
        self.and_then(IntoTag::into_tag)
    }
}

/// The tag `tag` (a declared tag function) gives `value`: what the
/// generated `Cached::__tag` calls.
#[doc(hidden)]
pub fn tag_of<T, R: IntoTag>(tag: fn(&T) -> R, value: &T) -> Option<Tag> {
    tag(value).into_tag()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_through_their_digits() {
        for number in [0, 1, 61, 62, u64::MAX] {
            let tag = Tag::from(number);
            assert_eq!(Tag::parse(&tag.to_bytes()), Some(tag));
        }
        assert_eq!(Tag::parse(b"0000000000"), None, "short");
        assert_eq!(Tag::parse(b"000000000-0"), None, "not a digit");
        assert_eq!(Tag::parse(b"zzzzzzzzzzz"), None, "past u64::MAX");
    }
}
