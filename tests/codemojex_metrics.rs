//! The codemojex workshop with `--metrics`: its Prometheus endpoint, scraped
//! over HTTP after the four moves, shows every table's series per node,
//! with counts that agree with what the moves measured; its JSON view,
//! `GET /tables`, shows each node's tables with their figures and hottest
//! ids, agreeing with the scrape.
//!
//! A binary of its own: the endpoint installs the process's one `metrics`
//! recorder.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use codemojex::{Workshop, run};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One sample of the scrape: name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The status line and body of `GET path` at `addr`.
async fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut conn = TcpStream::connect(addr)
        .await
        .expect("the endpoint listens");
    conn.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.lines().next().unwrap_or_default().to_owned();
    (status, body.to_owned())
}

/// The body of `GET /metrics` at `addr`.
async fn scrape(addr: SocketAddr) -> String {
    let (status, body) = get(addr, "/metrics").await;
    assert!(status.starts_with("HTTP/1.0 200"), "{status}");
    body
}

/// The samples of a Prometheus text rendering (`name{k="v",...} value`).
fn samples(body: &str) -> Vec<Sample> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (k, v) = pair.split_once('=').expect("k=\"v\"");
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            Sample {
                name: name.to_owned(),
                labels,
                value: value.parse().expect("a number"),
            }
        })
        .collect()
}

/// The value of the one sample `name` with (at least) `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert_eq!(found.len(), 1, "one {name}{labels:?}: {found:?}");
    found[0].value
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoints_show_every_table_per_node() {
    let addr = codemojex::metrics::serve("127.0.0.1:0".parse().unwrap())
        .await
        .expect("a free loopback port");
    let dir = tempfile::tempdir().unwrap();
    let report = run(Workshop {
        herd: 200,
        ..Workshop::new(dir.path().join("codemojex.sqlite3"))
    })
    .await
    .expect("the workshop runs");

    let body = scrape(addr).await;
    assert!(
        body.contains("# TYPE echo_cache_fetches_total counter"),
        "{body}"
    );
    let samples = samples(&body);
    for (node, served) in &report.hit {
        for table in served {
            let fetches = |source| {
                let labels = [("node", *node), ("table", table.table), ("source", source)];
                value(&samples, "echo_cache_fetches_total", &labels)
            };
            // Move 2's reads, and those of the moves after it on node a.
            let (hits, fills) = (fetches("hit"), fetches("fill"));
            assert!(
                hits > 0.0 && hits >= table.l1 as f64,
                "{node} {table:?}: {hits} hits"
            );
            assert!(
                fills > 0.0 && fills >= table.store as f64,
                "{node} {table:?}: {fills} fills"
            );
            assert_eq!(fetches("l2"), 0.0, "L1 only");
            // Every fill was a flight, timed once.
            let timed = value(
                &samples,
                "echo_cache_flight_seconds_count",
                &[("node", *node), ("table", table.table), ("source", "fill")],
            );
            assert_eq!(timed, fills, "{node} {}", table.table);
            let rows = value(
                &samples,
                "echo_cache_rows",
                &[("node", *node), ("table", table.table)],
            );
            assert!(rows > 0.0, "{node} {table:?}: {rows} rows");
        }
    }
    check_tables_view(addr, &samples).await;
    // The series of the games on node a, as a reader of the endpoint sees
    // them.
    assert!(
        body.lines()
            .any(|line| line.starts_with("echo_cache_fetches_total{")
                && line.contains(r#"table="cm_games""#)
                && line.contains(r#"node="a""#)
                && line.contains(r#"source="hit""#)),
        "{body}"
    );
}

/// `GET /tables`: each node's tables, as JSON, with figures that agree
/// with the scrape's rows and counters.
async fn check_tables_view(addr: SocketAddr, samples: &[Sample]) {
    let (status, body) = get(addr, "/tables").await;
    assert!(status.starts_with("HTTP/1.0 200"), "{status}");
    let view: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let nodes = view["nodes"].as_array().expect("nodes");
    let names: Vec<&str> = nodes.iter().map(|n| n["node"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"], "{body}");
    for node in nodes {
        let name = node["node"].as_str().unwrap();
        let tables = node["tables"].as_array().expect("tables");
        let table_names: Vec<&str> = tables.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(
            table_names,
            ["cm_emojisets", "cm_games", "cm_sessions"],
            "{body}"
        );
        for table in tables {
            let table_name = table["name"].as_str().unwrap();
            let spec = echo_cache::spec(table_name).expect("declared");
            assert_eq!(table["kind"], spec.kind().as_str());
            assert_eq!(table["health"], "Serving", "{body}");
            let number =
                |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v} in {body}"));
            let (stats, figures) = (&table["stats"], &table["figures"]);
            let labels = [("node", name), ("table", table_name), ("source", "hit")];
            let hits = value(samples, "echo_cache_fetches_total", &labels);
            assert_eq!(number(&stats["hits"]) as f64, hits, "{name} {table_name}");
            let rows = number(&figures["rows"]);
            assert!(rows > 0, "{name} {table_name}: {figures}");
            assert_eq!(rows + number(&figures["dead"]), number(&stats["size"]));
            assert_eq!(number(&figures["absent"]), 0, "the moves read what exists");
            assert!(number(&figures["bytes"]) >= rows * 32, "{figures}");
            // A row lives its TTL, give or take half of it at most.
            let next = number(&figures["next_expiry_ms"]);
            assert!(next > 0 && next <= spec.ttl_ms() * 3 / 2, "{figures}");
            let hottest = table["hottest"].as_array().expect("hottest");
            assert!(hottest.len() <= codemojex::metrics::HOTTEST);
            for hot in hottest {
                let id: echo_cache::RawId = hot["id"].as_str().unwrap().parse().expect("an id");
                assert_eq!(id.kind(), spec.kind());
                assert!((1..=16).contains(&number(&hot["heat"])), "{hot}");
            }
        }
    }
    let (status, _) = get(addr, "/nothing").await;
    assert!(status.starts_with("HTTP/1.0 404"), "{status}");
}
