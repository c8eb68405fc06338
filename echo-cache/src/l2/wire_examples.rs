//! The worked examples of `docs/wire.md`, pinned: each byte string the
//! specification shows is the one the code produces here.

use std::fmt::Write as _;

use crate::coherence::message;
use crate::entity::id::RawId;
use crate::entity::kind::Kind;
use crate::entity::mint::{EPOCH_MS, Minter};

use super::frame::{self, Frame};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The payload minted at `unix_ms` by `node`, `seq`-th in its millisecond.
fn payload(unix_ms: u64, node: u64, seq: u64) -> u64 {
    (unix_ms - EPOCH_MS) << 22 | node << 12 | seq
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Wired {
    n: u32,
    name: String,
}

#[test]
fn the_worked_examples_of_the_wire_specification() {
    let kind = Kind::new("WIR");
    // 2026-12-04T18:00:00Z.
    let at = 1_796_407_200_000;
    let id = RawId::new(kind, payload(at, 7, 0));
    let version = RawId::new(kind, payload(at + 1, 513, 2));
    assert_eq!(id.to_string(), "WIR0IoNiEI1FSa");
    assert_eq!(id.payload(), 0x0388_c343_4000_7000);
    assert_eq!(version.to_string(), "WIR0IoNiEIRXlK");
    assert_eq!(version.payload(), 0x0388_c343_4060_1002);
    assert_eq!(Minter::node_of(&version), 513);
    assert_eq!(Minter::unix_ms_of(&version), at + 1);
    let body = postcard::to_stdvec(&Wired {
        n: 300,
        name: "py".into(),
    })
    .unwrap();
    assert_eq!(hex(&body), "ac02027079");
    let stamp = frame::schema(0x0123_4567_89ab_cdef, None, "postcard-1");
    assert_eq!(stamp, 0xeb10_ab2b_bd10_6c56);
    let expiry = at + 1 + 600_000;
    let framed = frame::encode(&version, stamp, expiry, &body);
    assert_eq!(
        hex(&framed),
        "57495230496f4e69454952586c4b\
         eb10ab2bbd106c56\
         000001a2423fb0c1\
         ac02027079"
    );
    assert_eq!(
        frame::decode(&framed, kind, stamp).unwrap(),
        Frame::Value(version, expiry, &body)
    );
    assert_eq!(hex(&version.to_bytes()), "57495230496f4e69454952586c4b");
    let row = message::encode(&id, &version);
    assert_eq!(&row, b"WIR0IoNiEI1FSa:WIR0IoNiEIRXlK");
    let flush = message::encode_flush(&version);
    assert_eq!(&flush, b"WIR***********:WIR0IoNiEIRXlK");
    let tag = crate::Tag::from(62);
    let tagged = message::encode_tag(tag, &version);
    assert_eq!(&tagged, b"WIR00000000010#WIR0IoNiEIRXlK");
    let prefix = "ecc:{wire_rows}:";
    assert_eq!(
        crate::keyspace::tag_floor(prefix, tag),
        "ecc:{wire_rows}:#00000000010"
    );
    assert_eq!(
        crate::keyspace::tag_members(prefix, tag),
        "ecc:{wire_rows}#00000000010"
    );
    // A tag's keys share their table's slot (section 2).
    assert_eq!(crate::keyspace::slot(b"ecc:{wire_rows}#00000000010"), 492);
    assert_eq!(
        crate::keyspace::slot(b"ecc:{wire_rows}:WIR0IoNiEI1FSa"),
        492
    );
    // The floor shares its table's slot: one MGET reads both.
    assert_eq!(crate::keyspace::slot(b"ecc:{wire_rows}:*"), 492);
    // So does the hot list of a `warm` table (section 6a).
    assert_eq!(crate::keyspace::slot(b"ecc:{wire_rows}:hot"), 492);
    assert_eq!(crate::l2::tier::DECAY.to_string(), "0.9");
}
