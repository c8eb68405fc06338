//! The `tracing` spans of the miss path: each flight is a `flight` span
//! with its table, id, source, outcome and duration (and the error of a
//! failed one), and the L2 operations it makes are `l2` spans inside it.
//!
//! A small layer of the test's own keeps every span as it closes, with the
//! fields it was opened with and those recorded later. Each test runs on
//! a current-thread runtime under a subscriber set for its thread only: a
//! flight runs in the task of the fetch that started it, on that thread.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use echo_cache::{Cache, Id, Source, near_cache};
use echo_cache_testkit::RedisServer;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Record};
use tracing::{Subscriber, span};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};

#[near_cache(kind = "TRC", ttl_ms = 600_000, name = "trc_docs")]
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Doc {
    body: String,
}

/// A closed span: its name, its fields, and its parent's name.
#[derive(Clone, Debug)]
struct Closed {
    name: &'static str,
    fields: BTreeMap<&'static str, String>,
    parent: Option<&'static str>,
}

#[derive(Default)]
struct Fields(BTreeMap<&'static str, String>);

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }
}

/// Keeps every span of the crate as it closes.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Closed>>>);

impl Spans {
    fn named(&self, name: &str) -> Vec<Closed> {
        let spans = self.0.lock().unwrap();
        spans.iter().filter(|s| s.name == name).cloned().collect()
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        ctx.span(id)
            .expect("a new span")
            .extensions_mut()
            .insert(fields);
    }

    fn on_record(&self, id: &span::Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a live span");
        let mut extensions = span.extensions_mut();
        if let Some(fields) = extensions.get_mut::<Fields>() {
            values.record(fields);
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).expect("a closing span");
        if !span.metadata().target().starts_with("echo_cache") {
            return;
        }
        let fields = span
            .extensions_mut()
            .remove::<Fields>()
            .unwrap_or_default()
            .0;
        self.0.lock().unwrap().push(Closed {
            name: span.name(),
            fields,
            parent: span.parent().map(|parent| parent.name()),
        });
    }
}

/// Spans captured while `test` runs on this thread.
async fn captured(test: impl AsyncFnOnce()) -> Spans {
    let spans = Spans::default();
    let subscriber = Registry::default().with(spans.clone());
    let guard = tracing::subscriber::set_default(subscriber);
    test().await;
    drop(guard);
    spans
}

type Load = BoxFuture<'static, Result<Option<Doc>, std::io::Error>>;

/// A loader that finds `found`, fails on `broken` and finds nothing else.
fn loader(found: Id<Doc>, broken: Id<Doc>) -> impl Fn(Id<Doc>) -> Load + Send + Sync + 'static {
    move |id| {
        async move {
            if id == broken {
                return Err(std::io::Error::other("the store is on fire"));
            }
            Ok((id == found).then(|| Doc { body: "hi".into() }))
        }
        .boxed()
    }
}

fn field<'a>(span: &'a Closed, name: &str) -> Option<&'a str> {
    span.fields.get(name).map(String::as_str)
}

#[tokio::test]
async fn a_flight_is_a_span_with_its_id_table_source_outcome_and_duration() {
    let (found, absent, broken) = (Id::<Doc>::mint(), Id::<Doc>::mint(), Id::<Doc>::mint());
    let cache = cache_builder()
        .loader(loader(found, broken))
        .build()
        .unwrap();
    let spans = captured(async || {
        assert_eq!(cache.fetch(found).await.unwrap().source(), Source::Fill);
        assert_eq!(cache.fetch(found).await.unwrap().source(), Source::Hit);
        assert!(cache.fetch(absent).await.unwrap_err().is_not_found());
        assert!(cache.fetch(broken).await.is_err());
    })
    .await;

    let flights = spans.named("flight");
    assert_eq!(
        flights.len(),
        3,
        "one span per flight, none for the hit: {flights:#?}"
    );
    let [fill, not_found, failed] = &flights[..] else {
        unreachable!()
    };
    for (span, id) in [(fill, found), (not_found, absent), (failed, broken)] {
        assert_eq!(field(span, "table"), Some("trc_docs"));
        assert_eq!(field(span, "id"), Some(id.to_string().as_str()));
        assert!(field(span, "duration").is_some(), "{span:?}");
    }
    assert_eq!(field(fill, "source"), Some("fill"));
    assert_eq!(field(fill, "outcome"), Some("ok"));
    assert_eq!(field(fill, "error"), None);
    assert_eq!(field(not_found, "source"), None);
    assert_eq!(field(not_found, "outcome"), Some("not_found"));
    assert_eq!(field(not_found, "error"), None);
    assert_eq!(field(failed, "outcome"), Some("load_error"));
    let error = field(failed, "error").expect("the error of a failed flight");
    assert!(error.contains("the store is on fire"), "{error}");
}

#[tokio::test]
async fn l2_operations_are_spans_inside_their_flight() {
    let server = RedisServer::start();
    let (found, broken) = (Id::<Doc>::mint(), Id::<Doc>::mint());
    let node = || {
        cache_builder()
            .l2(server.url())
            .loader(loader(found, broken))
            .build()
            .unwrap()
    };
    let (a, b) = (node(), node());
    let spans = captured(async || {
        assert_eq!(a.fetch(found).await.unwrap().source(), Source::Fill);
        assert_eq!(b.fetch(found).await.unwrap().source(), Source::L2);
    })
    .await;

    let flights = spans.named("flight");
    let sources: Vec<_> = flights.iter().map(|f| field(f, "source")).collect();
    assert_eq!(sources, [Some("fill"), Some("l2")]);
    let l2 = spans.named("l2");
    let l2: Vec<_> = l2
        .iter()
        .map(|span| (field(span, "op"), field(span, "outcome"), span.parent))
        .collect();
    assert_eq!(
        l2,
        [
            // Node a: nothing in L2, the loader, then the fill written.
            (Some("read"), Some("nothing"), Some("flight")),
            (Some("write"), Some("ok"), Some("flight")),
            // Node b: found in L2.
            (Some("read"), Some("value"), Some("flight")),
        ]
    );
}

/// A cache builder that opens this module's tables and no other module's
/// (the suite is one test binary).
fn cache_builder() -> echo_cache::Builder {
    Cache::builder().open::<Doc>()
}
