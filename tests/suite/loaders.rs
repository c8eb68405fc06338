//! Where a table's loader comes from: the declaration (`loader = ...`), the
//! builder (which overrides it), or nowhere, which `build` refuses unless
//! the builder says the table is filled by `put` alone.

use echo_cache::{Cache, Error, Id, Source, near_cache};

/// Declares its loader.
#[near_cache(kind = "DCL", ttl_ms = 600_000, loader = load_declared)]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Declared {
    from: String,
}

async fn load_declared(_: Id<Declared>) -> Result<Option<Declared>, std::io::Error> {
    Ok(Some(Declared {
        from: "the declaration".into(),
    }))
}

/// Declares none: filled by `put`, or by a loader the builder gives.
#[near_cache(kind = "PUT", ttl_ms = 600_000, name = "put_only")]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct PutOnly {
    value: u32,
}

/// Declares none either: a second table for `build` to name.
#[near_cache(kind = "BAR", ttl_ms = 600_000, name = "bare")]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Bare {
    value: u32,
}

#[test]
fn build_refuses_the_tables_without_a_loader_and_names_them() {
    let Err(Error::MissingLoader { tables }) = cache_builder().build() else {
        panic!("a cache whose tables cannot load was built");
    };
    let names: Vec<&str> = tables.iter().map(|spec| spec.name()).collect();
    assert_eq!(names, ["bare", "put_only"], "the declared loader counts");

    // One table left: the message names it, and how to settle it.
    let refused = cache_builder().without_loader::<Bare>().build();
    let Err(error @ Error::MissingLoader { .. }) = refused else {
        panic!("put_only has no loader, and the cache was built");
    };
    let message = error.to_string();
    for part in [
        "`put_only` (suite::loaders::PutOnly)",
        "loader = ",
        "Builder::loader",
        "Builder::without_loader::<PutOnly>()",
    ] {
        assert!(message.contains(part), "{part:?} is not in: {message}");
    }
    assert!(!message.contains("bare"), "{message}");
}

/// What such a table then serves: `writes.rs`
/// (`a_table_without_a_loader_serves_what_is_put`).
#[tokio::test]
async fn a_table_built_without_loader_answers_no_loader_at_fetch() {
    let cache = cache_builder()
        .without_loader::<PutOnly>()
        .without_loader::<Bare>()
        .build()
        .expect("every table has a loader or is put-only");
    assert!(matches!(
        cache.fetch(Id::<PutOnly>::mint()).await,
        Err(Error::NoLoader { table: "put_only" })
    ));
    let loaders: Vec<(&str, bool)> = (cache.tables().iter())
        .map(|table| (table.spec.name(), table.has_loader))
        .collect();
    assert_eq!(
        loaders,
        [("bare", false), ("declared", true), ("put_only", false)]
    );
}

#[tokio::test]
async fn the_declared_loader_fills_and_a_builder_loader_overrides_it() {
    let put_only = |_: Id<PutOnly>| async { Ok::<_, std::io::Error>(Some(PutOnly { value: 1 })) };
    let declared = cache_builder()
        .loader(put_only)
        .without_loader::<Bare>()
        .build()
        .unwrap();
    let id = Id::<Declared>::mint();
    let fill = Declared::fetch(&declared, id).await.unwrap();
    assert_eq!(
        (fill.from.as_str(), fill.source()),
        ("the declaration", Source::Fill)
    );
    assert_eq!(
        declared.fetch(Id::<PutOnly>::mint()).await.unwrap().value,
        1
    );

    let overridden = cache_builder()
        .loader(|_: Id<Declared>| async {
            Ok::<_, std::io::Error>(Some(Declared {
                from: "the builder".into(),
            }))
        })
        .loader(put_only)
        .without_loader::<Bare>()
        .build()
        .unwrap();
    assert_eq!(overridden.fetch(id).await.unwrap().from, "the builder");

    // `without_loader` overrides the declaration too.
    let none = cache_builder()
        .without_loader::<Declared>()
        .without_loader::<PutOnly>()
        .without_loader::<Bare>()
        .build()
        .unwrap();
    assert!(matches!(
        none.fetch(id).await,
        Err(Error::NoLoader { table: "declared" })
    ));
}

/// A cache that opens some tables only needs loaders for those, refuses
/// a loader for another, and says which table is closed if asked for it.
#[tokio::test]
async fn a_cache_opens_the_tables_it_names_and_no_other() {
    let declared = Cache::builder().open::<Declared>().build().unwrap();
    let names: Vec<_> = declared.tables().iter().map(|t| t.spec.name()).collect();
    assert_eq!(names, ["declared"], "no loader asked for put_only or bare");
    let fetched = declared.fetch(Id::<Declared>::mint()).await.unwrap();
    assert_eq!(fetched.from, "the declaration");

    let refused = Cache::builder()
        .open::<Declared>()
        .without_loader::<PutOnly>()
        .build();
    let Err(Error::Config(message)) = refused else {
        panic!("a loader of a closed table was taken: {refused:?}");
    };
    assert!(message.contains("loaders::PutOnly"), "{message}");

    let fetch = || declared.fetch(Id::<Bare>::mint());
    let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(fetch))
        .map(drop)
        .expect_err("a fetch of a closed table panics");
    let message = closed.downcast_ref::<String>().expect("a message");
    assert!(
        message.contains(r#"the table "bare" of `suite::loaders::Bare` is not open"#),
        "{message}"
    );
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    Cache::builder()
        .open::<Declared>()
        .open::<PutOnly>()
        .open::<Bare>()
}
