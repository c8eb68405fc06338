//! The L2 frame: `version (14 bytes) ++ schema (8 bytes) ++ expiry (8
//! bytes) ++ body`.
//!
//! A tombstone, left by an invalidation of a versioned table, is the bare
//! version: 14 bytes. It reads as a miss, and keeps older fills out (see
//! [`script`](super::script)).
//!
//! The version is the value's id-shaped version, in its 14 ASCII bytes, so
//! server-side scripts can compare versions with plain byte comparison. The
//! schema stamp (big-endian) is the declared struct's fingerprint folded
//! with the shape of its values (nested types included, traced when the
//! table opens: see [`shape`](super::shape)), the codec's name and this
//! layout's: a frame written by a build whose value, codec or frame layout
//! differs is refused before a byte of the body is decoded.
//!
//! The expiry is the frame's logical expiry: big-endian milliseconds since
//! the Unix epoch on the writer's clock. The server expires the key at the
//! same time (`PX`), or a table's grace later (`stale_if_error_ms`): past
//! its expiry a frame kept for the grace is a miss, except as the stale
//! fallback of a failed load. A row read from a frame lives no longer than
//! the frame: a value is not served past the TTL it was written with (a
//! loader's own, say: see
//! [`Builder::loader_with_ttl`](crate::Builder::loader_with_ttl)), give or
//! take the skew between the writer's clock and the reader's. (Without a
//! grace, a frame the server still holds is alive whatever the reader's
//! clock says: served, not kept.)

use crate::entity::id::{ID_LEN, RawId};
use crate::entity::kind::Kind;

/// Bytes before the body.
pub(crate) const HEADER: usize = ID_LEN + 8 + 8;

/// The layout, folded into every schema stamp: frames of an older layout
/// (without the expiry) are refused, not misread.
const LAYOUT: &str = "+expiry";

/// Why a frame is not a value of this table.
#[derive(Debug)]
pub(crate) enum FrameError {
    Short(usize),
    Version,
    Schema,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Short(len) => {
                write!(f, "a frame of {len} bytes is shorter than its header")
            }
            FrameError::Version => f.write_str("the version is not an id of this table's kind"),
            FrameError::Schema => {
                f.write_str("written by a build with another value shape, codec or frame layout")
            }
        }
    }
}

/// The schema stamp of a table: its struct's fingerprint, the traced shape
/// of its values (`None`: it could not be traced), its codec and the frame
/// layout.
pub(crate) fn schema(fingerprint: u64, shape: Option<u64>, codec: &str) -> u64 {
    // FNV-1a over the shape, the codec name and the layout, seeded with the
    // fingerprint. Without a shape, the stamp of the builds before shapes
    // were traced: such a table's frames stay readable across the upgrade.
    let shape = shape.map(u64::to_be_bytes);
    let bytes = shape.iter().flatten().copied();
    bytes
        .chain(codec.bytes())
        .chain(LAYOUT.bytes())
        .fold(fingerprint ^ 0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// The frame of `body` at `version`, logically expiring at
/// `expires_unix_ms`.
pub(crate) fn encode(version: &RawId, schema: u64, expires_unix_ms: u64, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER + body.len());
    frame.extend_from_slice(&version.to_bytes());
    frame.extend_from_slice(&schema.to_be_bytes());
    frame.extend_from_slice(&expires_unix_ms.to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

/// What an L2 value holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// A value of this table: its version, its logical expiry (Unix
    /// milliseconds) and its body.
    Value(RawId, u64, &'a [u8]),
    /// The tombstone of an invalidation at this version.
    Tombstone(RawId),
}

/// Reads `frame`, if it is a frame (or a tombstone) of this table.
pub(crate) fn decode(frame: &[u8], kind: Kind, schema: u64) -> Result<Frame<'_>, FrameError> {
    if frame.len() < ID_LEN || (frame.len() > ID_LEN && frame.len() < HEADER) {
        return Err(FrameError::Short(frame.len()));
    }
    let version = RawId::parse(&frame[..ID_LEN]).map_err(|_| FrameError::Version)?;
    if version.kind() != kind {
        return Err(FrameError::Version);
    }
    if frame.len() == ID_LEN {
        return Ok(Frame::Tombstone(version));
    }
    let word = |at: usize| u64::from_be_bytes(frame[at..at + 8].try_into().expect("8 bytes"));
    if word(ID_LEN) != schema {
        return Err(FrameError::Schema);
    }
    Ok(Frame::Value(version, word(ID_LEN + 8), &frame[HEADER..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_refuse_what_is_not_theirs() {
        let kind = Kind::new("GAM");
        let version = RawId::new(kind, 42);
        let frame = encode(&version, 7, 1_234, b"body");
        assert_eq!(
            decode(&frame, kind, 7).unwrap(),
            Frame::Value(version, 1_234, b"body")
        );
        assert_eq!(
            decode(&version.to_bytes(), kind, 7).unwrap(),
            Frame::Tombstone(version)
        );
        assert!(matches!(
            decode(&frame[..HEADER - 1], kind, 7),
            Err(FrameError::Short(_))
        ));
        assert!(matches!(decode(&frame, kind, 8), Err(FrameError::Schema)));
        assert!(matches!(
            decode(&frame, Kind::new("PLR"), 7),
            Err(FrameError::Version)
        ));
        let mut bad = frame.clone();
        bad[5] = b'-';
        assert!(matches!(decode(&bad, kind, 7), Err(FrameError::Version)));
        assert_ne!(schema(1, None, "postcard-1"), schema(1, None, "json"));
        assert_ne!(schema(1, Some(2), "json"), schema(1, Some(3), "json"));
        assert_ne!(schema(1, Some(2), "json"), schema(1, None, "json"));
    }
}
