//! The invalidation message: `<id>:<version>`, 29 ASCII bytes.
//!
//! A message about a name: which entity changed, and the version of the
//! change, so a receiver can apply it newer-wins and idempotently. A
//! table-wide flush (a writer lost track of what it could not deliver, see
//! `backlog`) names no id: its id field is the table's kind and eleven
//! `*`, which no id can be. A tag-wide invalidation
//! (`Cache::invalidate_tag`) is `<kind><tag>#<version>`: the tag's 11
//! base62 digits, and `#` in place of `:`, which old receivers refuse as
//! malformed (counted, dropped) rather than misread.

use crate::entity::id::{ID_LEN, RawId};
use crate::entity::kind::Kind;
use crate::entity::tag::Tag;

/// Length of a message.
pub(crate) const LEN: usize = 2 * ID_LEN + 1;

/// The id field of a flush, after the kind.
const EVERY_ID: [u8; ID_LEN - 3] = [b'*'; ID_LEN - 3];

/// What a well-formed message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Message {
    /// The row of `key` changed at `version`.
    Row { key: u64, version: u64 },
    /// Every row older than `version` may be stale.
    Flush { version: u64 },
    /// Every row of `tag` older than `version` may be stale.
    Tag { tag: Tag, version: u64 },
}

pub(crate) fn encode(id: &RawId, version: &RawId) -> [u8; LEN] {
    let mut message = [b':'; LEN];
    message[..ID_LEN].copy_from_slice(&id.to_bytes());
    message[ID_LEN + 1..].copy_from_slice(&version.to_bytes());
    message
}

/// The message of a table-wide flush at `version`.
pub(crate) fn encode_flush(version: &RawId) -> [u8; LEN] {
    let mut message = encode(version, version);
    message[3..ID_LEN].copy_from_slice(&EVERY_ID);
    message
}

/// The message of an invalidation of every row of `tag` at `version` (of
/// the table's kind).
pub(crate) fn encode_tag(tag: Tag, version: &RawId) -> [u8; LEN] {
    let mut message = encode(version, version);
    message[3..ID_LEN].copy_from_slice(&tag.to_bytes());
    message[ID_LEN] = b'#';
    message
}

/// What `message` says, if it is a well-formed message about the table of
/// `kind`: an id of `kind` (or all of them) at a well-formed version of
/// any kind (versions compare by payload; a writer sends its table's kind).
pub(crate) fn decode(message: &[u8], kind: Kind) -> Option<Message> {
    if message.len() != LEN || !matches!(message[ID_LEN], b':' | b'#') {
        return None;
    }
    let version = RawId::parse(&message[ID_LEN + 1..]).ok()?.payload();
    if message[ID_LEN] == b'#' {
        let tag = Tag::parse(&message[3..ID_LEN])?;
        return (message[..3] == *kind.as_str().as_bytes())
            .then_some(Message::Tag { tag, version });
    }
    if message[..3] == *kind.as_str().as_bytes() && message[3..ID_LEN] == EVERY_ID {
        return Some(Message::Flush { version });
    }
    let id = RawId::parse(&message[..ID_LEN]).ok()?;
    (id.kind() == kind).then_some(Message::Row {
        key: id.payload(),
        version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_malformed_ones_are_refused() {
        let kind = Kind::new("SES");
        let (id, version) = (RawId::new(kind, 5), RawId::new(kind, 9));
        let message = encode(&id, &version);
        assert_eq!(message.len(), 29);
        let row = Message::Row { key: 5, version: 9 };
        assert_eq!(decode(&message, kind), Some(row));
        assert_eq!(decode(&message, Kind::new("GAM")), None, "another kind");
        let other = encode(&id, &RawId::new(Kind::new("ZZZ"), 9));
        assert_eq!(decode(&other, kind), Some(row), "a version of another kind");
        assert_eq!(decode(&message[..28], kind), None);
        let mut bad = message;
        bad[14] = b'-';
        assert_eq!(decode(&bad, kind), None);
        bad = message;
        bad[20] = b'!';
        assert_eq!(decode(&bad, kind), None);
        assert_eq!(decode(b"", kind), None);
    }

    #[test]
    fn a_flush_names_every_id_of_its_table() {
        let kind = Kind::new("SES");
        let flush = encode_flush(&RawId::new(kind, 9));
        assert_eq!(&flush[..15], b"SES***********:");
        assert_eq!(decode(&flush, kind), Some(Message::Flush { version: 9 }));
        assert_eq!(decode(&flush, Kind::new("GAM")), None, "another table's");
    }

    #[test]
    fn a_tag_message_names_its_tag() {
        let kind = Kind::new("SES");
        let tag = Tag::from(62);
        let message = encode_tag(tag, &RawId::new(kind, 9));
        assert_eq!(&message[..15], b"SES00000000010#");
        let said = Message::Tag { tag, version: 9 };
        assert_eq!(decode(&message, kind), Some(said));
        assert_eq!(decode(&message, Kind::new("GAM")), None, "another table's");
        let mut bad = message;
        bad[5] = b'!';
        assert_eq!(decode(&bad, kind), None);
    }
}
