//! The directory: every declaration linked into this test binary, listed
//! without any registration call, and a built cache's live roster.

use echo_cache::{Cache, Cached, Coherence, Health, Id, Kind, TableSpec, near_cache};

/// Its table name sorts before the others although its type name does not.
#[near_cache(kind = "ZEB", ttl_ms = 5_000, name = "a_first", max_size = 1)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Zebra {
    stripes: u32,
}

/// Every optional key declared.
#[near_cache(
    kind = "ALP",
    ttl_ms = 60_000,
    loader = load_alpha,
    coherence = "broadcast",
    jitter = 0.2,
    max_size = 10,
    sweep_ms = 250,
    absent_ttl_ms = 1_500,
    name = "alpha"
)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Alpha {
    letter: char,
}

async fn load_alpha(_: Id<Alpha>) -> Result<Option<Alpha>, std::io::Error> {
    Ok(Some(Alpha { letter: 'a' }))
}

/// Every optional key left to its default; the table name is derived.
#[near_cache(kind = "BET", ttl_ms = 1)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct BetaGame {
    level: u8,
}

#[test]
fn declared_lists_this_binarys_declarations_sorted_by_name() {
    let declared = echo_cache::declared();
    let names: Vec<&str> = declared.iter().map(|spec| spec.name()).collect();
    assert_eq!(names, ["a_first", "alpha", "beta_game"]);
    let types: Vec<&str> = declared.iter().map(|spec| spec.type_name()).collect();
    assert_eq!(
        types,
        [
            "directory::Zebra",
            "directory::Alpha",
            "directory::BetaGame"
        ]
    );
    // The same specs the types carry, not copies.
    assert!(std::ptr::eq(declared[0], Zebra::spec()));
    assert!(std::ptr::eq(declared[1], Alpha::spec()));
    assert!(std::ptr::eq(declared[2], BetaGame::spec()));
}

#[test]
fn a_spec_says_what_was_declared() {
    let alpha = Alpha::spec();
    assert_eq!(alpha.kind(), Kind::new("ALP"));
    assert_eq!(Alpha::KIND, Kind::new("ALP"));
    assert_eq!(alpha.ttl_ms(), 60_000);
    assert_eq!(alpha.coherence(), Coherence::Broadcast);
    assert_eq!(alpha.coherence().to_string(), "broadcast");
    assert!((alpha.jitter() - 0.2).abs() < f64::EPSILON);
    assert_eq!(alpha.max_size(), 10);
    assert_eq!(alpha.sweep_ms(), 250);
    assert_eq!(alpha.absent_ttl_ms(), 1_500);

    let beta = BetaGame::spec();
    assert_eq!(beta.name(), "beta_game");
    assert_eq!(beta.ttl_ms(), 1);
    assert_eq!(beta.coherence(), Coherence::None);
    assert!((beta.jitter() - TableSpec::DEFAULT_JITTER).abs() < f64::EPSILON);
    assert_eq!(beta.max_size(), TableSpec::DEFAULT_MAX_SIZE);
    assert_eq!(beta.sweep_ms(), TableSpec::DEFAULT_SWEEP_MS);
    assert_eq!(beta.absent_ttl_ms(), TableSpec::DEFAULT_ABSENT_TTL_MS);

    // Fingerprints tell the declared structs apart.
    assert_ne!(alpha.fingerprint(), beta.fingerprint());
}

#[test]
fn spec_finds_a_declaration_by_its_table_name() {
    assert!(std::ptr::eq(
        echo_cache::spec("alpha").unwrap(),
        Alpha::spec()
    ));
    assert!(std::ptr::eq(
        echo_cache::spec("a_first").unwrap(),
        Zebra::spec()
    ));
    assert!(std::ptr::eq(
        echo_cache::spec("beta_game").unwrap(),
        BetaGame::spec()
    ));
    // Table names, not type names.
    assert!(echo_cache::spec("Alpha").is_none());
    assert!(echo_cache::spec("alph").is_none());
    assert!(echo_cache::spec("").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_roster_shows_each_tables_spec_counters_and_health() {
    // Alpha declares its loader; beta_game has none.
    let cache = Cache::builder()
        .loader(|_: Id<Zebra>| async { Ok::<_, std::io::Error>(Some(Zebra { stripes: 3 })) })
        .without_loader::<BetaGame>()
        .build()
        .expect("names and kinds are unique");

    let roster = cache.tables();
    let names: Vec<&str> = roster.iter().map(|t| t.spec.name()).collect();
    assert_eq!(names, ["a_first", "alpha", "beta_game"]);
    for table in &roster {
        assert_eq!(
            table.stats,
            echo_cache::Stats::default(),
            "{}",
            table.spec.name()
        );
        assert_eq!(table.health, Health::Serving);
    }
    assert!(std::ptr::eq(roster[1].spec, Alpha::spec()));
    let loaders: Vec<bool> = roster.iter().map(|t| t.has_loader).collect();
    assert_eq!(loaders, [true, true, false]);

    // Live: the roster follows the tables.
    let zebra = Id::<Zebra>::mint();
    assert_eq!(cache.fetch(zebra).await.unwrap().stripes, 3);
    assert_eq!(Zebra::fetch(&cache, zebra).await.unwrap().stripes, 3);
    let alpha = Id::<Alpha>::mint();
    assert_eq!(Alpha::fetch(&cache, alpha).await.unwrap().letter, 'a');

    let roster = cache.tables();
    let zebras = &roster[0];
    assert_eq!(
        (zebras.stats.misses, zebras.stats.fills, zebras.stats.hits),
        (1, 1, 1)
    );
    assert_eq!(zebras.stats.size, 1);
    assert_eq!(zebras.health, Health::Full, "max_size = 1 and one row kept");
    assert_eq!(zebras.stats, cache.stats::<Zebra>());
    assert_eq!(
        (roster[1].stats.fills, roster[1].health),
        (1, Health::Serving)
    );
    assert_eq!(roster[2].stats, echo_cache::Stats::default());

    // The Debug form lists the tables too.
    let debug = format!("{cache:?}");
    assert!(
        debug.contains("a_first") && debug.contains("beta_game"),
        "{debug}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caches_are_independent() {
    let build = || {
        let builder = Cache::builder().without_loader::<Zebra>();
        builder.without_loader::<BetaGame>().build().unwrap()
    };
    let (one, two) = (build(), build());
    let id = Id::<Alpha>::mint();
    one.fetch(id).await.unwrap();
    assert_eq!(one.stats::<Alpha>().size, 1);
    assert_eq!(two.stats::<Alpha>(), echo_cache::Stats::default());
    // A clone shares the tables.
    assert_eq!(
        one.clone().fetch(id).await.unwrap().source(),
        echo_cache::Source::Hit
    );
}
