//! The kind of an id (three uppercase letters, like `GAM`), and why a byte
//! string is not an id: what the other entity modules build on, naming
//! nothing of theirs.

use std::fmt;

/// Length of a kind in bytes.
pub(crate) const KIND_LEN: usize = 3;

/// Why a byte string is not an id.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdError {
    /// The bytes are not 3 uppercase ASCII letters followed by 11 base62
    /// digits that encode a value of at most `u64::MAX`.
    Shape {
        /// What is wrong with the shape.
        reason: &'static str,
    },
    /// A well-formed id of another kind than the one asked for.
    Kind {
        /// The kind the caller asked for.
        expected: Kind,
        /// The kind the id carries.
        found: Kind,
    },
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdError::Shape { reason } => write!(f, "malformed id: {reason}"),
            IdError::Kind { expected, found } => {
                write!(f, "id of kind {found} where kind {expected} was expected")
            }
        }
    }
}

impl std::error::Error for IdError {}

pub(crate) const fn shape(reason: &'static str) -> IdError {
    IdError::Shape { reason }
}

/// The kind of an id: exactly three uppercase ASCII letters, like `GAM`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Kind(pub(crate) [u8; KIND_LEN]);

impl Kind {
    /// The kind spelled by `letters`.
    ///
    /// # Panics
    ///
    /// Panics unless `letters` is exactly three uppercase ASCII letters; in a
    /// `const` this is a compile-time error.
    ///
    /// ```
    /// const GAME: echo_cache::Kind = echo_cache::Kind::new("GAM");
    /// assert_eq!(GAME.as_str(), "GAM");
    /// ```
    #[must_use]
    pub const fn new(letters: &str) -> Kind {
        match Kind::parse(letters.as_bytes()) {
            Ok(kind) => kind,
            Err(_) => panic!("a kind is exactly three uppercase ASCII letters"),
        }
    }

    /// Parses three uppercase ASCII letters.
    ///
    /// # Errors
    ///
    /// [`IdError::Shape`] if `bytes` is not three uppercase ASCII letters.
    pub const fn parse(bytes: &[u8]) -> Result<Kind, IdError> {
        if bytes.len() != KIND_LEN {
            return Err(shape("a kind is three letters"));
        }
        let mut i = 0;
        while i < KIND_LEN {
            if !bytes[i].is_ascii_uppercase() {
                return Err(shape("a kind is uppercase ASCII letters A-Z"));
            }
            i += 1;
        }
        Ok(Kind([bytes[0], bytes[1], bytes[2]]))
    }

    /// The three letters.
    #[must_use]
    #[allow(clippy::missing_panics_doc)] // only ASCII letters are ever stored
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("a kind is ASCII")
    }

    /// The three letters as bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; KIND_LEN] {
        &self.0
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kind({})", self.as_str())
    }
}
