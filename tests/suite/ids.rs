//! Branded ids: printed order is mint order, printing and parsing round
//! trip, every malformed shape and every other kind is refused, serde, and
//! minting from many threads at once.

use std::collections::HashSet;

use echo_cache::{ID_LEN, Id, IdError, Kind, MAX_NODE, Minter, RawId, near_cache, newer};
use proptest::collection::vec;
use proptest::prelude::*;
use serde::Deserialize;
use serde::de::value::{BytesDeserializer, Error as ValueError};

#[near_cache(kind = "GAM", ttl_ms = 60_000)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Game {
    secret: String,
}

#[near_cache(kind = "PLR", ttl_ms = 60_000)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Player {
    name: String,
}

const GAM: Kind = Kind::new("GAM");
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The 11 base62 digits of `n`, computed independently of the crate.
fn base62(mut n: u128) -> String {
    let mut digits = [b'0'; 11];
    for digit in digits.iter_mut().rev() {
        *digit = BASE62[(n % 62) as usize];
        n /= 62;
    }
    assert_eq!(n, 0, "fits 11 digits");
    String::from_utf8(digits.to_vec()).unwrap()
}

fn is_shape(result: Result<impl std::fmt::Debug, IdError>) -> bool {
    matches!(result, Err(IdError::Shape { .. }))
}

fn kind() -> impl Strategy<Value = Kind> {
    "[A-Z]{3}".prop_map(|letters| Kind::parse(letters.as_bytes()).expect("three capitals"))
}

fn raw_id() -> impl Strategy<Value = RawId> {
    (kind(), any::<u64>()).prop_map(|(kind, payload)| RawId::new(kind, payload))
}

proptest! {
    #[test]
    fn display_then_parse_gives_the_id_back(id in raw_id()) {
        let printed = id.to_string();
        prop_assert_eq!(printed.len(), ID_LEN);
        let kind = id.kind();
        prop_assert_eq!(&printed[..3], kind.as_str());
        prop_assert_eq!(&printed[3..], base62(u128::from(id.payload())));
        prop_assert_eq!(printed.as_bytes(), &id.to_bytes()[..]);
        prop_assert_eq!(printed.parse::<RawId>(), Ok(id));
        prop_assert_eq!(RawId::parse(id.to_bytes()), Ok(id));
    }

    #[test]
    fn typed_ids_round_trip(payload in any::<u64>()) {
        let id = Id::<Game>::from_payload(payload);
        let printed = id.to_string();
        prop_assert_eq!(&printed, &RawId::new(GAM, payload).to_string());
        prop_assert_eq!(printed.parse::<Id<Game>>(), Ok(id));
        prop_assert_eq!(Id::<Game>::parse(printed.as_bytes()), Ok(id));
        prop_assert_eq!(id.raw().typed::<Game>(), Ok(id));
        prop_assert_eq!(Id::<Game>::try_from(RawId::from(id)), Ok(id));
        prop_assert_eq!(id.payload(), payload);
    }

    #[test]
    fn printed_order_is_payload_order(kind in kind(), a in any::<u64>(), b in any::<u64>()) {
        let (x, y) = (RawId::new(kind, a), RawId::new(kind, b));
        prop_assert_eq!(x.to_string().cmp(&y.to_string()), a.cmp(&b));
        prop_assert_eq!(x.cmp(&y), a.cmp(&b));
        let (tx, ty) = (Id::<Game>::from_payload(a), Id::<Game>::from_payload(b));
        prop_assert_eq!(tx.cmp(&ty), a.cmp(&b));
    }

    #[test]
    fn newer_compares_payloads_and_ignores_kinds(a in raw_id(), b in raw_id()) {
        prop_assert_eq!(newer(&a, &b), a.payload() > b.payload());
        prop_assert_eq!(a.is_newer_than(&b), a.payload() > b.payload());
    }

    #[test]
    fn every_other_length_is_refused(bytes in vec(any::<u8>(), 0..64)) {
        prop_assume!(bytes.len() != ID_LEN);
        prop_assert!(is_shape(RawId::parse(&bytes)));
        prop_assert!(is_shape(Id::<Game>::parse(&bytes)));
    }

    #[test]
    fn a_cut_or_extended_id_is_refused(id in raw_id(), cut in 0..ID_LEN, extra in "[0-9A-Za-z]{1,4}") {
        let printed = id.to_string();
        prop_assert!(is_shape(printed[..cut].parse::<RawId>()));
        let (longer, prefixed) = (printed.clone() + &extra, extra + &printed);
        prop_assert!(is_shape(longer.parse::<RawId>()));
        prop_assert!(is_shape(prefixed.parse::<Id<Game>>()));
    }

    #[test]
    fn a_bad_kind_byte_is_refused(id in raw_id(), at in 0..3_usize, byte in any::<u8>()) {
        prop_assume!(!byte.is_ascii_uppercase());
        let mut bytes = id.to_bytes();
        bytes[at] = byte;
        prop_assert!(is_shape(RawId::parse(bytes)));
        prop_assert!(is_shape(Id::<Game>::parse(bytes)));
    }

    #[test]
    fn a_bad_payload_byte_is_refused(id in raw_id(), at in 3..ID_LEN, byte in any::<u8>()) {
        prop_assume!(!byte.is_ascii_alphanumeric());
        let mut bytes = id.to_bytes();
        bytes[at] = byte;
        prop_assert!(is_shape(RawId::parse(bytes)));
        prop_assert!(is_shape(Id::<Game>::parse(bytes)));
    }

    #[test]
    fn a_payload_above_u64_max_is_refused(
        kind in kind(),
        n in (u128::from(u64::MAX) + 1)..62_u128.pow(11),
    ) {
        let printed = format!("{kind}{}", base62(n));
        prop_assert_eq!(printed.len(), ID_LEN);
        prop_assert!(is_shape(printed.parse::<RawId>()));
        prop_assert!(is_shape(printed.parse::<Id<Game>>()));
    }

    #[test]
    fn an_id_of_another_kind_is_refused(kind in kind(), payload in any::<u64>()) {
        prop_assume!(kind != GAM);
        let printed = RawId::new(kind, payload).to_string();
        prop_assert_eq!(
            printed.parse::<Id<Game>>(),
            Err(IdError::Kind { expected: GAM, found: kind })
        );
    }

    #[test]
    fn serde_round_trips_as_the_printed_string(id in raw_id()) {
        let json = serde_json::to_string(&id).unwrap();
        prop_assert_eq!(&json, &format!("\"{id}\""));
        prop_assert_eq!(serde_json::from_str::<RawId>(&json).unwrap(), id);

        let typed = Id::<Game>::from_payload(id.payload());
        let json = serde_json::to_string(&typed).unwrap();
        prop_assert_eq!(&json, &format!("\"{typed}\""));
        prop_assert_eq!(serde_json::from_str::<Id<Game>>(&json).unwrap(), typed);
        // Formats that carry bytes decode the same 14 bytes.
        let bytes = typed.raw().to_bytes();
        prop_assert_eq!(Id::<Game>::deserialize(BytesDeserializer::<ValueError>::new(&bytes)), Ok(typed));
    }
}

#[test]
fn the_edges_print_as_documented() {
    assert_eq!(RawId::new(GAM, 0).to_string(), "GAM00000000000");
    assert_eq!(RawId::new(GAM, 61).to_string(), "GAM0000000000z");
    assert_eq!(RawId::new(GAM, u64::MAX).to_string(), "GAMLygHa16AHYF");
    assert!(is_shape("GAMLygHa16AHYG".parse::<RawId>()), "u64::MAX + 1");
    assert!(is_shape("GAMzzzzzzzzzzz".parse::<RawId>()));
    for bad in [
        "",
        "GAM",
        "gam00000000000",
        "GA000000000000",
        "G4M00000000000",
        "GAM0000000000-",
        "GAM 0000000000",
        "GAM0000000000é",
    ] {
        assert!(is_shape(bad.parse::<RawId>()), "{bad:?}");
    }
}

#[test]
fn serde_refuses_what_parse_refuses() {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Row {
        game: Id<Game>,
        player: Option<Id<Player>>,
        version: RawId,
    }
    let row = Row {
        game: Id::mint(),
        player: Some(Id::mint()),
        version: Minter::global().mint_raw(Kind::new("VER")),
    };
    let json = serde_json::to_string(&row).unwrap();
    assert_eq!(serde_json::from_str::<Row>(&json).unwrap(), row);

    let swapped = format!(
        r#"{{"game":"{}","player":null,"version":"{}"}}"#,
        row.player.unwrap(),
        row.version
    );
    let error = serde_json::from_str::<Row>(&swapped)
        .unwrap_err()
        .to_string();
    assert!(error.contains("kind PLR where kind GAM"), "{error}");
    let error = serde_json::from_str::<Id<Game>>(r#""GAM-short""#)
        .unwrap_err()
        .to_string();
    assert!(error.contains("malformed id"), "{error}");
    assert!(serde_json::from_str::<Id<Game>>("42").is_err());
}

#[test]
fn ids_print_in_mint_order() {
    let minted: Vec<Id<Game>> = (0..10_000).map(|_| Id::mint()).collect();
    let printed: Vec<String> = minted.iter().map(ToString::to_string).collect();
    assert!(
        minted.windows(2).all(|w| w[0] < w[1]),
        "mint order is increasing"
    );
    assert!(
        printed.windows(2).all(|w| w[0] < w[1]),
        "printed order is mint order"
    );
    let mut shuffled = printed.clone();
    shuffled.reverse();
    shuffled.sort();
    assert_eq!(shuffled, printed);

    // Across kinds, `newer` follows mint order although the kinds sort
    // the other way.
    let player = Id::<Player>::mint().raw();
    let game = Id::<Game>::mint().raw();
    assert!(newer(&game, &player) && !newer(&player, &game));
    assert!(game < player, "byte order puts GAM before PLR");
}

#[test]
fn minting_from_many_threads_is_unique_and_increasing() {
    const THREADS: usize = 8;
    const EACH: usize = 100_000;
    let local = Minter::new(5).expect("a valid node");
    let per_thread: Vec<Vec<(u64, u64)>> = std::thread::scope(|s| {
        let minters: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    (0..EACH)
                        .map(|_| {
                            let global = Id::<Game>::mint().payload();
                            let local = local.mint_raw(GAM);
                            assert_eq!(Minter::node_of(&local), 5);
                            (global, local.payload())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        minters.into_iter().map(|t| t.join().unwrap()).collect()
    });

    for ids in &per_thread {
        assert!(
            ids.windows(2).all(|w| w[0].0 < w[1].0),
            "global: increasing per thread"
        );
        assert!(
            ids.windows(2).all(|w| w[0].1 < w[1].1),
            "local: increasing per thread"
        );
    }
    let global: HashSet<u64> = per_thread.iter().flatten().map(|&(g, _)| g).collect();
    let local: HashSet<u64> = per_thread.iter().flatten().map(|&(_, l)| l).collect();
    assert_eq!(global.len(), THREADS * EACH, "global ids are unique");
    assert_eq!(local.len(), THREADS * EACH, "local ids are unique");
}

#[test]
fn node_bits_are_configurable_and_bounded() {
    let minter = Minter::new(MAX_NODE).expect("the largest node is valid");
    assert_eq!(Minter::node_of(&minter.mint_raw(GAM)), MAX_NODE);
    assert!(minter.set_node(17));
    let id = minter.mint_raw(GAM);
    assert_eq!(Minter::node_of(&id), 17);
    assert!(!minter.set_node(MAX_NODE + 1));
    assert_eq!(
        Minter::node_of(&minter.mint_raw(GAM)),
        17,
        "refused change changes nothing"
    );
    assert!(Minter::new(MAX_NODE + 1).is_none());
    assert!(Minter::unix_ms_of(&id) > echo_cache::EPOCH_MS);
}
