//! An L1 hit's setup, written once for the bench that times it
//! (`benches/l1_hit.rs`) and the one that counts its instructions
//! (`benches/hit_instructions.rs`): the cached entity ([`entity!`]), the
//! five engines and how each is filled and checked, and the three key
//! patterns. Both benches fill an engine the same way and read it along
//! the same sequences, so a time and an instruction count are of the same
//! hit. `benches/l1_hit.rs`'s opening says what is filled and read.

use std::collections::HashMap;
use std::future::Future;
use std::hint::black_box;
use std::marker::PhantomData;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use echo_cache::{Builder, Cache, Cached, Id, Source};

use super::draw::{Rng, Zipf};
use super::poll_once;

/// The hasher echo-cache uses inside: the peers hash as it does.
pub type Hasher = foldhash::quality::RandomState;

/// Ids in the hot set.
pub const HOT: usize = 1_000;
/// Keys in each precomputed sequence (a power of two).
pub const SEQ_LEN: usize = 1 << 18;
/// The zipf exponent.
pub const ZIPF_S: f64 = 1.0;

/// Declares the cached entity (a `name: String`, so a value is more than
/// its key) under the bench's `#[near_cache(…)]` table, and its
/// [`Numbered`] rows. A bench declares one per table size it fills: the
/// table's `max_size` is part of the declaration.
///
/// ```ignore
/// support::l1::entity! {
///     /// The cached entity.
///     #[near_cache(kind = "ENT", ttl_ms = 3_600_000, coherence = "none", max_size = 200_000)]
///     pub struct Entity;
/// }
/// ```
// Not every bench declares one; the others would warn.
#[allow(unused_macros)]
macro_rules! entity {
    ($(#[$attr:meta])* $vis:vis struct $name:ident;) => {
        $(#[$attr])*
        #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
        $vis struct $name {
            /// Some payload, so a value is more than its key.
            pub name: String,
        }

        impl crate::support::l1::Numbered for $name {
            fn numbered(i: usize) -> $name {
                $name {
                    name: format!("entity number {i}"),
                }
            }

            fn name(&self) -> &str {
                &self.name
            }
        }
    };
}

#[allow(unused_imports)]
pub(crate) use entity;

/// An entity of [`entity!`]: the row cached for the `i`th id.
pub trait Numbered: Cached + Clone {
    /// The row of the `i`th id.
    fn numbered(i: usize) -> Self;
    /// Its name, to check a hit.
    fn name(&self) -> &str;
}

/// `rows` ids of `T`, minted.
pub fn ids<T: Numbered>(rows: usize) -> Vec<u64> {
    (0..rows).map(|_| Id::<T>::mint().payload()).collect()
}

/// One key sequence.
pub type Keys = Box<[u64; SEQ_LEN]>;

/// A key pattern: its name and a sequence for each of two threads.
pub struct Pattern {
    pub name: &'static str,
    pub seqs: [Keys; 2],
}

fn sequence(mut draw: impl FnMut() -> u64) -> Keys {
    let keys: Vec<u64> = (0..SEQ_LEN).map(|_| draw()).collect();
    keys.into_boxed_slice()
        .try_into()
        .expect("SEQ_LEN keys were drawn")
}

/// The three patterns over `ids`, two threads' sequences each: `uniform`
/// over all the ids, `zipf` (s = [`ZIPF_S`], ranks scattered over the ids
/// by a fixed shuffle) and `hot` (uniform over [`HOT`] of the ids).
pub fn patterns(ids: &[u64]) -> Vec<Pattern> {
    let mut rng = Rng(0x00EC_40CA_C4E0);
    // A fixed shuffle: zipf ranks and the hot set land anywhere in the table.
    let mut shuffled = ids.to_vec();
    for i in (1..shuffled.len()).rev() {
        shuffled.swap(i, rng.below(i + 1));
    }
    let ranks = Zipf::new(ids.len(), ZIPF_S);
    let zipf = |rng: &mut Rng| shuffled[ranks.rank(rng)];
    let two = |rng: &mut Rng, draw: &dyn Fn(&mut Rng) -> u64| {
        [sequence(|| draw(rng)), sequence(|| draw(rng))]
    };
    vec![
        Pattern {
            name: "uniform",
            seqs: two(&mut rng, &|rng| ids[rng.below(ids.len())]),
        },
        Pattern {
            name: "zipf",
            seqs: two(&mut rng, &zipf),
        },
        Pattern {
            name: "hot",
            seqs: two(&mut rng, &|rng| shuffled[rng.below(HOT)]),
        },
    ]
}

/// Something that answers a hit for a key.
///
/// Each engine does what a caller does with a hit: it tests that the read
/// is one and keeps the value it hands out (through `black_box`, so that
/// nothing is elided): quick_cache's and moka's `Some(Arc)`, dashmap's
/// guard turned into an `Arc`, echo-cache's `Ready(Ok(Fetched))`, as a
/// `match` or a `?` would. Not the whole answer: a `black_box` of
/// echo-cache's `Poll<Result<..>>` (48 bytes, for its `Error`) would force
/// it through memory, twice, which no caller does (7 instructions a hit).
pub trait Engine: Sync {
    fn hit(&self, key: u64);
}

/// `n` hits of `engine` along `keys`, in a loop whose body is the hit
/// alone: what `benches/l1_hit.rs` times and `benches/hit_instructions.rs`
/// counts (callgrind collects inside this function only).
#[inline(never)]
pub fn hits<E: Engine>(engine: &E, keys: &[u64; SEQ_LEN], n: u64) {
    for i in 0..n {
        #[allow(clippy::cast_possible_truncation)]
        engine.hit(keys[i as usize & (SEQ_LEN - 1)]);
    }
}

/// echo-cache: `cache.fetch(id)` polled once with a no-op waker.
pub struct Echo<T>(pub Cache, PhantomData<fn() -> T>);
/// `quick_cache::sync::Cache::get`.
pub struct Quick<T>(pub quick_cache::sync::Cache<u64, Arc<T>, quick_cache::UnitWeighter, Hasher>);
/// `moka::sync::Cache::get`, no TTL set.
pub struct Moka<T>(pub moka::sync::Cache<u64, Arc<T>, Hasher>);
/// `HashMap::get(..).cloned()` on a map no one writes.
pub struct Floor<T>(pub HashMap<u64, Arc<T>, Hasher>);
/// `DashMap::get(..)` and a clone of the `Arc`.
pub struct Dash<T>(pub dashmap::DashMap<u64, Arc<T>, Hasher>);

impl<T: Numbered> Engine for Echo<T> {
    #[inline]
    fn hit(&self, key: u64) {
        let mut fetch = pin!(self.0.fetch(Id::<T>::from_payload(key)));
        match fetch.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(fetched)) => drop(black_box(fetched)),
            Poll::Ready(Err(error)) => drop(black_box(error)),
            Poll::Pending => {}
        }
    }
}

impl<T: Send + Sync> Engine for Quick<T> {
    #[inline]
    fn hit(&self, key: u64) {
        if let Some(value) = self.0.get(&key) {
            black_box(value);
        }
    }
}

impl<T: Send + Sync + 'static> Engine for Moka<T> {
    #[inline]
    fn hit(&self, key: u64) {
        if let Some(value) = self.0.get(&key) {
            black_box(value);
        }
    }
}

impl<T: Send + Sync> Engine for Dash<T> {
    #[inline]
    fn hit(&self, key: u64) {
        if let Some(entry) = self.0.get(&key) {
            black_box(Arc::clone(entry.value()));
        }
    }
}

impl<T: Send + Sync> Engine for Floor<T> {
    #[inline]
    fn hit(&self, key: u64) {
        if let Some(value) = self.0.get(&key) {
            black_box(Arc::clone(value));
        }
    }
}

// Each engine owns its values, allocated as it is filled (as echo-cache
// does in `put`): no engine reads lines another one warmed. Each is big
// enough for twice the ids: nothing is evicted.

/// echo-cache built by `builder` (the bench's: every table it declares
/// given its loader or none), filled by puts alone into `T`'s table (every
/// read is a hit), then checked. `T`'s `max_size` is the bench's to declare.
pub fn echo<T: Numbered>(builder: Builder, ids: &[u64]) -> Echo<T> {
    let cache = builder.build().expect("the cache builds");
    for (i, &key) in ids.iter().enumerate() {
        let put = poll_once(cache.put(Id::<T>::from_payload(key), T::numbered(i)));
        assert!(matches!(put, Poll::Ready(Ok(_))), "a put is ready at once");
    }
    let echo = Echo(cache, PhantomData);
    echo.check(ids);
    echo
}

impl<T: Numbered> Echo<T> {
    /// Every id is a hit, ready on the first poll, and nothing was skipped.
    pub fn check(&self, ids: &[u64]) {
        let cache = &self.0;
        for (i, &key) in ids.iter().enumerate() {
            match poll_once(cache.fetch(Id::<T>::from_payload(key))) {
                Poll::Ready(Ok(hit)) => {
                    assert_eq!(hit.source(), Source::Hit);
                    assert_eq!(hit.name(), T::numbered(i).name());
                }
                Poll::Ready(Err(e)) => panic!("echo-cache: a hit failed: {e}"),
                Poll::Pending => panic!("echo-cache: a hit was not ready on its first poll"),
            }
        }
        let stats = cache.stats::<T>();
        assert_eq!(stats.size, ids.len() as u64, "echo-cache kept every id");
        assert_eq!(stats.full_skips, 0, "echo-cache skipped nothing");
        assert_eq!(stats.misses, 0, "echo-cache missed nothing");
    }
}

pub fn quick<T: Numbered>(ids: &[u64]) -> Quick<T> {
    let quick = Quick(quick_cache::sync::Cache::with(
        2 * ids.len(),
        2 * ids.len() as u64,
        quick_cache::UnitWeighter,
        Hasher::default(),
        quick_cache::sync::DefaultLifecycle::default(),
    ));
    for (i, &key) in ids.iter().enumerate() {
        quick.0.insert(key, Arc::new(T::numbered(i)));
    }
    quick
}

impl<T: Numbered> Quick<T> {
    pub fn check(&self, ids: &[u64]) {
        assert_eq!(self.0.len(), ids.len(), "quick_cache kept every id");
        for key in ids {
            assert!(self.0.get(key).is_some(), "quick_cache: a hit");
        }
    }
}

pub fn moka<T: Numbered>(ids: &[u64]) -> Moka<T> {
    let moka = Moka(
        moka::sync::Cache::builder()
            .max_capacity(2 * ids.len() as u64)
            .initial_capacity(ids.len())
            .build_with_hasher(Hasher::default()),
    );
    for (i, &key) in ids.iter().enumerate() {
        moka.0.insert(key, Arc::new(T::numbered(i)));
    }
    moka
}

impl<T: Numbered> Moka<T> {
    pub fn check(&self, ids: &[u64]) {
        self.0.run_pending_tasks();
        assert_eq!(self.0.entry_count(), ids.len() as u64, "moka kept every id");
        for key in ids {
            assert!(self.0.get(key).is_some(), "moka: a hit");
        }
    }
}

pub fn floor<T: Numbered>(ids: &[u64]) -> Floor<T> {
    let mut map = HashMap::with_capacity_and_hasher(ids.len(), Hasher::default());
    for (i, &key) in ids.iter().enumerate() {
        map.insert(key, Arc::new(T::numbered(i)));
    }
    Floor(map)
}

impl<T: Numbered> Floor<T> {
    pub fn check(&self, ids: &[u64]) {
        assert_eq!(self.0.len(), ids.len(), "floor kept every id");
        for key in ids {
            assert!(self.0.contains_key(key), "floor: a hit");
        }
    }
}

pub fn dash<T: Numbered>(ids: &[u64]) -> Dash<T> {
    let dash = Dash(dashmap::DashMap::with_capacity_and_hasher(
        ids.len(),
        Hasher::default(),
    ));
    for (i, &key) in ids.iter().enumerate() {
        dash.0.insert(key, Arc::new(T::numbered(i)));
    }
    dash
}

impl<T: Numbered> Dash<T> {
    pub fn check(&self, ids: &[u64]) {
        assert_eq!(self.0.len(), ids.len(), "dashmap kept every id");
        for key in ids {
            assert!(self.0.contains_key(key), "dashmap: a hit");
        }
    }
}
