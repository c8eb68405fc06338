//! The L2 frame: `version (14 bytes) ++ schema (8 bytes) ++ body`.
//!
//! A tombstone, left by an invalidation of a versioned table, is the bare
//! version: 14 bytes. It reads as a miss, and keeps older fills out (see
//! [`script`](super::script)).
//!
//! The version is the value's id-shaped version, in its 14 ASCII bytes, so
//! server-side scripts can compare versions with plain byte comparison. The
//! schema stamp (big-endian) is the declared struct's fingerprint folded
//! with the codec's name: a frame written by a build whose struct or codec
//! differs is refused before a byte of the body is decoded.
//!
//! A table that serves stale values (`stale_if_error_ms`) keeps its frames
//! in L2 for the grace past their TTL, so each body starts with the
//! frame's logical expiry: 8 bytes, big-endian milliseconds since the Unix
//! epoch on the writer's clock. Past it the frame is a miss, except as the
//! stale fallback of a failed load. Its schema stamp is folded with
//! [`EXPIRING`], so a build with the grace and one without refuse each
//! other's frames (a refill) rather than misread them.

use crate::id::{ID_LEN, Kind, RawId};

/// Bytes before the body.
pub(crate) const HEADER: usize = ID_LEN + 8;

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
            FrameError::Schema => f.write_str("written by a build with another struct or codec"),
        }
    }
}

/// The schema stamp of a table: its struct's fingerprint and its codec.
pub(crate) fn schema(fingerprint: u64, codec: &str) -> u64 {
    // FNV-1a over the codec name, seeded with the fingerprint.
    codec
        .bytes()
        .fold(fingerprint ^ 0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Folded into the schema stamp of a table whose bodies start with their
/// expiry.
pub(crate) const EXPIRING: &str = "+expiry";

/// Bytes of a body's expiry.
const EXPIRY: usize = 8;

/// `body` prefixed with its logical expiry (Unix milliseconds).
pub(crate) fn with_expiry(expires_unix_ms: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(EXPIRY + body.len());
    out.extend_from_slice(&expires_unix_ms.to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// The logical expiry of a body written by [`with_expiry`], and the rest.
pub(crate) fn split_expiry(body: &[u8]) -> Result<(u64, &[u8]), FrameError> {
    if body.len() < EXPIRY {
        return Err(FrameError::Short(HEADER + body.len()));
    }
    let (expiry, rest) = body.split_at(EXPIRY);
    Ok((
        u64::from_be_bytes(expiry.try_into().expect("8 bytes")),
        rest,
    ))
}

pub(crate) fn encode(version: &RawId, schema: u64, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER + body.len());
    frame.extend_from_slice(&version.to_bytes());
    frame.extend_from_slice(&schema.to_be_bytes());
    frame.extend_from_slice(body);
    frame
}

/// What an L2 value holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    /// A value of this table and its version.
    Value(RawId, &'a [u8]),
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
    let stamp = u64::from_be_bytes(frame[ID_LEN..HEADER].try_into().expect("8 bytes"));
    if stamp != schema {
        return Err(FrameError::Schema);
    }
    Ok(Frame::Value(version, &frame[HEADER..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_refuse_what_is_not_theirs() {
        let kind = Kind::new("GAM");
        let version = RawId::new(kind, 42);
        let frame = encode(&version, 7, b"body");
        assert_eq!(
            decode(&frame, kind, 7).unwrap(),
            Frame::Value(version, b"body")
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
        assert_ne!(schema(1, "postcard-1"), schema(1, "json"));
    }

    #[test]
    fn an_expiring_body_carries_its_expiry() {
        let body = with_expiry(1_234, b"body");
        assert_eq!(split_expiry(&body).unwrap(), (1_234, &b"body"[..]));
        assert!(matches!(split_expiry(b"short"), Err(FrameError::Short(_))));
        assert_ne!(schema(1, "postcard-1"), schema(1, "postcard-1+expiry"));
    }
}
