//! The invalidation message: `<id>:<version>`, 29 ASCII bytes.
//!
//! A message about a name: which entity changed, and the version of the
//! change, so a receiver can apply it newer-wins and idempotently.

use crate::id::{ID_LEN, Kind, RawId};

/// Length of a message.
pub(crate) const LEN: usize = 2 * ID_LEN + 1;

pub(crate) fn encode(id: &RawId, version: &RawId) -> [u8; LEN] {
    let mut message = [b':'; LEN];
    message[..ID_LEN].copy_from_slice(&id.to_bytes());
    message[ID_LEN + 1..].copy_from_slice(&version.to_bytes());
    message
}

/// The id and version payloads of `message`, if it is a well-formed message
/// about an id of `kind`.
pub(crate) fn decode(message: &[u8], kind: Kind) -> Option<(u64, u64)> {
    if message.len() != LEN || message[ID_LEN] != b':' {
        return None;
    }
    let id = RawId::parse(&message[..ID_LEN]).ok()?;
    let version = RawId::parse(&message[ID_LEN + 1..]).ok()?;
    (id.kind() == kind).then_some((id.payload(), version.payload()))
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
        assert_eq!(decode(&message, kind), Some((5, 9)));
        assert_eq!(decode(&message, Kind::new("GAM")), None, "another kind");
        assert_eq!(decode(&message[..28], kind), None);
        let mut bad = message;
        bad[14] = b'-';
        assert_eq!(decode(&bad, kind), None);
        bad = message;
        bad[20] = b'!';
        assert_eq!(decode(&bad, kind), None);
        assert_eq!(decode(b"", kind), None);
    }
}
