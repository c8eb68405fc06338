//! The codemojex workshop with `--metrics`: its Prometheus endpoint, scraped
//! over HTTP after the four moves, shows every table's series per node,
//! with counts that agree with what the moves measured.
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

/// The body of `GET /metrics` at `addr`.
async fn scrape(addr: SocketAddr) -> String {
    let mut conn = TcpStream::connect(addr)
        .await
        .expect("the endpoint listens");
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    body.to_owned()
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
async fn the_metrics_endpoint_shows_every_table_per_node() {
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
