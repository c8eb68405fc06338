//! `--metrics ADDR`: the caches' metrics (the `metrics` facade, which
//! echo-cache publishes to with its `metrics` feature) on a Prometheus
//! endpoint, `GET /metrics`: a series per table and node, e.g.
//! `echo_cache_fetches_total{table="cm_games",node="a",source="hit"}`, and
//! the flight times as a summary, `echo_cache_flight_seconds`.
//!
//! Beside it, `GET /tables`: a read-only JSON view of each node's tables,
//! as an admin endpoint would show them ([`Cache::table_ops`]): the
//! table's health, a few counters, its figures (rows, bytes, next expiry)
//! and its hottest ids, for the nodes [`show`]n.
//!
//! ```json
//! {"nodes":[{"node":"a","tables":[…,{"name":"cm_games","kind":"GAM","health":"Serving",
//!   "stats":{"hits":581,"misses":220,"size":21,"evictions":0},
//!   "figures":{"rows":21,"absent":0,"dead":0,"bytes":7536,"next_expiry_ms":539594},
//!   "hottest":[]},…]},…]}
//! ```
//!
//! `hottest` lists ids (as text) with their heat, the eviction policy's
//! own estimate: empty until a table is three quarters full, which no
//! table of the four moves reaches.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock, PoisonError};

use echo_cache::{Cache, Figures, TableInfo};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The hottest ids `GET /tables` lists a table.
pub const HOTTEST: usize = 10;

/// The caches `GET /tables` shows, by node name, once the server runs.
static SHOWN: OnceLock<Mutex<Vec<(&'static str, Cache)>>> = OnceLock::new();

/// Has `GET /tables` show these nodes' caches (in place of those shown
/// before), if the server runs; else does nothing.
pub fn show(nodes: &[(&'static str, &Cache)]) {
    if let Some(shown) = SHOWN.get() {
        let mut shown = shown.lock().unwrap_or_else(PoisonError::into_inner);
        *shown = nodes
            .iter()
            .map(|&(name, cache)| (name, cache.clone()))
            .collect();
    }
}

/// Installs a Prometheus recorder as the process's `metrics` recorder and
/// serves its rendering at `http://ADDR/metrics`, and the JSON view of
/// the caches [`show`]n at `http://ADDR/tables`; returns the bound
/// address (port 0 picks a free one).
pub async fn serve(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| std::io::Error::other(e.to_string()))?;
    SHOWN.get_or_init(Mutex::default);
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let handle = handle.clone();
            tokio::spawn(async move {
                let mut request = [0; 1024];
                let _ = conn.read(&mut request).await;
                let _ = conn.write_all(response(&request, &handle).as_bytes()).await;
            });
        }
    });
    Ok(bound)
}

/// A minimal HTTP/1.0 answer: the rendering for `GET /metrics`, the JSON
/// view for `GET /tables`, 404 else.
fn response(request: &[u8], handle: &PrometheusHandle) -> String {
    let (content_type, body) = if request.starts_with(b"GET /metrics ") {
        ("text/plain; version=0.0.4", handle.render())
    } else if request.starts_with(b"GET /tables ") {
        ("application/json", tables())
    } else {
        return "HTTP/1.0 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned();
    };
    format!(
        "HTTP/1.0 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The JSON view of the caches shown: each node's tables, by name.
fn tables() -> String {
    let shown = SHOWN.get().map(|shown| {
        let shown = shown.lock().unwrap_or_else(PoisonError::into_inner);
        shown.clone()
    });
    let mut json = String::from("{\"nodes\":[");
    for (i, (node, cache)) in shown.unwrap_or_default().iter().enumerate() {
        let comma = if i == 0 { "" } else { "," };
        let _ = write!(json, "{comma}{{\"node\":{},\"tables\":[", quoted(node));
        for (j, info) in cache.tables().iter().enumerate() {
            let comma = if j == 0 { "" } else { "," };
            json.push_str(comma);
            table(&mut json, cache, info);
        }
        json.push_str("]}");
    }
    json.push_str("]}");
    json
}

/// One table of the view: what its [`TableOps`](echo_cache::TableOps) tell.
fn table(json: &mut String, cache: &Cache, info: &TableInfo) {
    let name = info.spec.name();
    let ops = cache.table_ops(name).expect("the roster's tables are open");
    let stats = &info.stats;
    let Figures {
        rows,
        absent,
        dead,
        bytes,
        next_expiry,
        ..
    } = ops.figures();
    let next_expiry = next_expiry.map_or("null".to_owned(), |left| left.as_millis().to_string());
    let _ = write!(
        json,
        "{{\"name\":{},\"kind\":{},\"health\":{},\
         \"stats\":{{\"hits\":{},\"misses\":{},\"size\":{},\"evictions\":{}}},\
         \"figures\":{{\"rows\":{rows},\"absent\":{absent},\"dead\":{dead},\"bytes\":{bytes},\
         \"next_expiry_ms\":{next_expiry}}},\"hottest\":[",
        quoted(name),
        quoted(info.spec.kind().as_str()),
        quoted(&format!("{:?}", info.health)),
        stats.hits,
        stats.misses,
        stats.size,
        stats.evictions,
    );
    for (k, hot) in ops.hottest(HOTTEST).iter().enumerate() {
        let comma = if k == 0 { "" } else { "," };
        let id = quoted(&hot.id.to_string());
        let _ = write!(json, "{comma}{{\"id\":{id},\"heat\":{}}}", hot.heat);
    }
    json.push_str("]}");
}

/// `text` as a JSON string.
fn quoted(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(quoted, "\\u{:04x}", u32::from(c));
            }
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}
