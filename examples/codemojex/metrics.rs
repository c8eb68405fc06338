//! `--metrics ADDR`: the caches' metrics (the `metrics` facade, which
//! echo-cache publishes to with its `metrics` feature) on a Prometheus
//! endpoint, `GET /metrics`: a series per table and node, e.g.
//! `echo_cache_fetches_total{table="cm_games",node="a",source="hit"}`, and
//! the flight times as a summary, `echo_cache_flight_seconds`.

use std::net::SocketAddr;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Installs a Prometheus recorder as the process's `metrics` recorder and
/// serves its rendering at `http://ADDR/metrics`; returns the bound
/// address (port 0 picks a free one).
pub async fn serve(addr: SocketAddr) -> std::io::Result<SocketAddr> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).map_err(|e| std::io::Error::other(e.to_string()))?;
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

/// A minimal HTTP/1.0 answer: the rendering for `GET /metrics`, 404 else.
fn response(request: &[u8], handle: &PrometheusHandle) -> String {
    if request.starts_with(b"GET /metrics ") {
        let body = handle.render();
        format!(
            "HTTP/1.0 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    } else {
        "HTTP/1.0 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned()
    }
}
