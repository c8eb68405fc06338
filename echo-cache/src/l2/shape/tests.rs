//! What the traced shape sees, and where tracing gives up: types in
//! modules `v1`, `v2`… are two builds of one type.

// The types are only deserialized by the probe, never read.
#![allow(dead_code)]

use serde::{Deserialize, Deserializer};

use super::{Untraceable, trace};

fn shape<T: serde::de::DeserializeOwned>() -> u64 {
    trace::<T>().unwrap_or_else(|why| panic!("{} untraceable: {why}", std::any::type_name::<T>()))
}

/// A nested struct: `Game` is the same tokens in every module.
mod nested {
    pub mod v1 {
        #[derive(serde::Deserialize)]
        pub struct Game {
            pub rules: Rules,
        }
        #[derive(serde::Deserialize)]
        pub struct Rules {
            pub lives: u32,
            pub score: u32,
        }
    }
    /// `v1` again, in another module: the same shape.
    pub mod same {
        #[derive(serde::Deserialize)]
        pub struct Game {
            pub rules: Rules,
        }
        #[derive(serde::Deserialize)]
        pub struct Rules {
            pub lives: u32,
            pub score: u32,
        }
    }
    pub mod reordered {
        #[derive(serde::Deserialize)]
        pub struct Game {
            pub rules: Rules,
        }
        #[derive(serde::Deserialize)]
        pub struct Rules {
            pub score: u32,
            pub lives: u32,
        }
    }
    pub mod added {
        #[derive(serde::Deserialize)]
        pub struct Game {
            pub rules: Rules,
        }
        #[derive(serde::Deserialize)]
        pub struct Rules {
            pub lives: u32,
            pub score: u32,
            pub bonus: u32,
        }
    }
    pub mod retyped {
        #[derive(serde::Deserialize)]
        pub struct Game {
            pub rules: Rules,
        }
        #[derive(serde::Deserialize)]
        pub struct Rules {
            pub lives: u32,
            pub score: u64,
        }
    }
}

#[test]
fn a_change_inside_a_nested_struct_changes_the_shape() {
    use nested::*;
    let v1 = shape::<v1::Game>();
    assert_eq!(
        v1,
        shape::<same::Game>(),
        "the same shape in another module"
    );
    assert_eq!(v1, shape::<v1::Game>(), "the same on every trace");
    for (what, other) in [
        ("reordered", shape::<reordered::Game>()),
        ("added", shape::<added::Game>()),
        ("retyped", shape::<retyped::Game>()),
    ] {
        assert_ne!(v1, other, "a field {what} inside Rules");
    }
}

/// Enums behind an `Option`, in a `Vec`, as map values: every variant is
/// explored, not only the first.
mod enums {
    pub mod v1 {
        use std::collections::BTreeMap;
        #[derive(serde::Deserialize)]
        pub struct Game {
            pub last: Option<Move>,
            pub moves: Vec<Move>,
            pub by_name: BTreeMap<String, Move>,
        }
        #[derive(serde::Deserialize)]
        pub enum Move {
            Pass,
            Play(u8),
            Swap { from: u8, to: u8 },
        }
    }
    pub mod swapped {
        use std::collections::BTreeMap;
        #[derive(serde::Deserialize)]
        pub struct Game {
            pub last: Option<Move>,
            pub moves: Vec<Move>,
            pub by_name: BTreeMap<String, Move>,
        }
        #[derive(serde::Deserialize)]
        pub enum Move {
            Pass,
            Play(u8),
            Swap { to: u8, from: u8 },
        }
    }
    pub mod added {
        use std::collections::BTreeMap;
        #[derive(serde::Deserialize)]
        pub struct Game {
            pub last: Option<Move>,
            pub moves: Vec<Move>,
            pub by_name: BTreeMap<String, Move>,
        }
        #[derive(serde::Deserialize)]
        pub enum Move {
            Pass,
            Play(u8),
            Swap { from: u8, to: u8 },
            Resign,
        }
    }
    /// The enum only in an `Option`: its last variant changes.
    pub mod optional {
        #[derive(serde::Deserialize)]
        pub struct Game {
            pub last: Option<super::v1::Move>,
        }
    }
    pub mod optional_swapped {
        #[derive(serde::Deserialize)]
        pub struct Game {
            pub last: Option<super::swapped::Move>,
        }
    }
}

#[test]
fn every_variant_of_a_nested_enum_is_seen() {
    use enums::*;
    let v1 = shape::<v1::Game>();
    assert_ne!(v1, shape::<swapped::Game>(), "fields of the last variant");
    assert_ne!(v1, shape::<added::Game>(), "a variant added");
    assert_ne!(
        shape::<optional::Game>(),
        shape::<optional_swapped::Game>(),
        "an enum behind an Option only"
    );
}

/// Recursive types end: through a `Vec`, through a `Box` in an enum's
/// first variant, and a change inside them is still seen.
mod recursive {
    pub mod v1 {
        #[derive(serde::Deserialize)]
        pub struct Tree {
            pub children: Vec<Tree>,
            pub label: String,
        }
        #[derive(serde::Deserialize)]
        pub enum List {
            Cons(u8, Box<List>),
            Nil,
        }
        #[derive(serde::Deserialize)]
        pub struct Both {
            pub tree: Tree,
            pub list: List,
        }
    }
    pub mod v2 {
        #[derive(serde::Deserialize)]
        pub struct Tree {
            pub children: Vec<Tree>,
            pub label: String,
        }
        #[derive(serde::Deserialize)]
        pub enum List {
            Cons(u16, Box<List>),
            Nil,
        }
        #[derive(serde::Deserialize)]
        pub struct Both {
            pub tree: Tree,
            pub list: List,
        }
    }
    /// Recursion through a struct and an enum, the way out last.
    #[derive(serde::Deserialize)]
    pub struct Node {
        pub next: Link,
    }
    #[derive(serde::Deserialize)]
    pub enum Link {
        More(Box<Node>),
        Also(Box<Node>),
        End,
    }
    /// No way out: no value of it is finite.
    #[derive(serde::Deserialize)]
    pub struct Endless {
        pub next: Box<Endless>,
    }
}

#[test]
fn recursive_types_end_and_are_seen() {
    use recursive::*;
    assert_ne!(shape::<v1::Both>(), shape::<v2::Both>());
    shape::<Node>();
    assert!(matches!(
        trace::<Endless>(),
        Err(Untraceable::Recursive("Endless"))
    ));
}

/// A primitive refused (by its visitor, or by the `Deserialize` that read
/// it) is offered more values: each in its place, a date's text and a
/// time's.
mod validated {
    use std::num::NonZeroU32;

    /// Like a UUID read by a binary format: 16 bytes or nothing (checked
    /// after the bytes are read).
    pub struct Uuid;
    impl<'de> serde::Deserialize<'de> for Uuid {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let bytes = <serde_bytes_like::Bytes>::deserialize(deserializer)?;
            if bytes.0.len() == 16 {
                Ok(Uuid)
            } else {
                Err(serde::de::Error::custom("not 16 bytes"))
            }
        }
    }
    /// Like a date read from its text.
    pub struct Date;
    impl<'de> serde::Deserialize<'de> for Date {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let text = String::deserialize(deserializer)?;
            if text == "1970-01-01" {
                Ok(Date)
            } else {
                Err(serde::de::Error::custom("not a date"))
            }
        }
    }
    /// Like a time of day read from its text.
    pub struct Time;
    impl<'de> serde::Deserialize<'de> for Time {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            let text = String::deserialize(deserializer)?;
            if text == "00:00:00" {
                Ok(Time)
            } else {
                Err(serde::de::Error::custom("not a time"))
            }
        }
    }
    pub mod serde_bytes_like {
        pub struct Bytes(pub Vec<u8>);
        impl<'de> serde::Deserialize<'de> for Bytes {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Visit;
                impl serde::de::Visitor<'_> for Visit {
                    type Value = Bytes;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("bytes")
                    }
                    fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
                        Ok(Bytes(v.to_vec()))
                    }
                }
                d.deserialize_bytes(Visit)
            }
        }
    }
    #[derive(serde::Deserialize)]
    pub struct Player {
        pub id: Uuid,
        pub born: Date,
        pub wakes: Time,
        pub lives: NonZeroU32,
    }
}

#[test]
fn validated_primitives_are_offered_other_values() {
    shape::<validated::Player>();
}

/// A type only a self-describing format reads.
#[derive(Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum Untagged {
    Number(u32),
    Text(String),
}

/// A `Deserialize` that panics.
struct Panics;
impl<'de> Deserialize<'de> for Panics {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        panic!("a Deserialize that panics (expected by the test)")
    }
}

/// A `Deserialize` that refuses every value.
struct Refuses;
impl<'de> Deserialize<'de> for Refuses {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        u8::deserialize(deserializer)?;
        Err(serde::de::Error::custom("never"))
    }
}

#[test]
fn untraceable_types_say_why() {
    assert!(matches!(
        trace::<Untagged>(),
        Err(Untraceable::Unsupported(_))
    ));
    assert!(matches!(trace::<Panics>(), Err(Untraceable::Custom(_))));
    let why = trace::<Refuses>().unwrap_err();
    assert!(
        matches!(why, Untraceable::Custom(ref m) if m == "never"),
        "{why}"
    );
}
