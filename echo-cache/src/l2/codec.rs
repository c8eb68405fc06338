//! How values are written into L2 frames.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::BoxError;

/// Turns values of `T` into the bytes of an L2 frame and back.
///
/// The default is [`Postcard`]. Another codec can be set per table with
/// [`Builder::codec`](crate::Builder::codec). A codec's [`name`](Codec::name)
/// is folded into the schema stamp of each frame, so a frame written with
/// one codec is never decoded with another: it is a miss that refills.
///
/// A codec that stores a table of short texts as plain UTF-8, readable
/// with `redis-cli`:
///
/// ```standalone_crate
/// use echo_cache::{near_cache, BoxError, Cache, Codec};
///
/// #[near_cache(kind = "MOT", ttl_ms = 60_000)]
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// pub struct Motto(pub String);
///
/// struct Utf8;
///
/// impl Codec<Motto> for Utf8 {
///     fn name(&self) -> &'static str {
///         "utf8-1"
///     }
///     fn encode(&self, value: &Motto) -> Result<Vec<u8>, BoxError> {
///         Ok(value.0.as_bytes().to_vec())
///     }
///     fn decode(&self, bytes: &[u8]) -> Result<Motto, BoxError> {
///         Ok(Motto(String::from_utf8(bytes.to_vec())?))
///     }
/// }
///
/// # fn main() -> Result<(), BoxError> {
/// let motto = Motto("carpe diem".into());
/// assert_eq!(Utf8.decode(&Utf8.encode(&motto)?)?.0, motto.0);
/// // Mottos are filled by `put` here: no loader.
/// let cache = Cache::builder()
///     .codec::<Motto>(Utf8)
///     .without_loader::<Motto>()
///     .build()?;
/// # let _ = cache;
/// # Ok(())
/// # }
/// ```
pub trait Codec<T>: Send + Sync + 'static {
    /// A short name of the format (and its version, if the format has one).
    fn name(&self) -> &'static str;

    /// The bytes of `value`.
    ///
    /// # Errors
    ///
    /// When `value` cannot be written in this format.
    fn encode(&self, value: &T) -> Result<Vec<u8>, BoxError>;

    /// The value written in `bytes`.
    ///
    /// # Errors
    ///
    /// When `bytes` is not a value of `T` in this format.
    fn decode(&self, bytes: &[u8]) -> Result<T, BoxError>;
}

/// The default codec: [postcard](https://docs.rs/postcard), a compact,
/// maintained serde format with a stable wire format (1.x) and no schema in
/// the bytes. It is not self-describing, so a change of the struct would
/// misread old bytes; the schema stamp in every frame is what keeps that
/// from happening.
#[derive(Clone, Copy, Debug, Default)]
pub struct Postcard;

impl<T: Serialize + DeserializeOwned> Codec<T> for Postcard {
    fn name(&self) -> &'static str {
        "postcard-1"
    }

    fn encode(&self, value: &T) -> Result<Vec<u8>, BoxError> {
        Ok(postcard::to_stdvec(value)?)
    }

    fn decode(&self, bytes: &[u8]) -> Result<T, BoxError> {
        Ok(postcard::from_bytes(bytes)?)
    }
}
