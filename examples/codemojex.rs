//! codemojex: the seed's workshop, four moves over SQLite, narrated.
//!
//! ```sh
//! cargo run --example codemojex                    # L1 only
//! cargo run --example codemojex -- --own-server    # two nodes over a server it starts and, in move 4, stops
//! ECHO_CACHE_L2=redis://127.0.0.1:6379 cargo run --example codemojex
//! cargo run --example codemojex -- --own-server --serve --tasks 8 --seconds 10 --metrics 127.0.0.1:9898
//! ```
//!
//! Flags: `--db PATH` (SQLite file; default in the temp dir), `--l2 URL`
//! (or `ECHO_CACHE_L2`), `--own-server`, `--serve`, `--tasks N`,
//! `--seconds S`, `--metrics ADDR` (a Prometheus endpoint). `RUST_LOG`
//! filters the log (default `warn`).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use codemojex::serve::{self, Load};
use codemojex::server::OwnServer;
use codemojex::{Workshop, moves::Failure};

#[derive(Debug)]
struct Args {
    db: std::path::PathBuf,
    l2: Option<String>,
    own_server: bool,
    serve: bool,
    tasks: usize,
    seconds: u64,
    metrics: Option<std::net::SocketAddr>,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        db: std::env::temp_dir().join("codemojex.sqlite3"),
        l2: std::env::var("ECHO_CACHE_L2")
            .ok()
            .filter(|url| !url.is_empty()),
        own_server: false,
        serve: false,
        tasks: 8,
        seconds: 10,
        metrics: None,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let mut value = || given.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--db" => args.db = value()?.into(),
            "--l2" => args.l2 = Some(value()?),
            "--own-server" => args.own_server = true,
            "--serve" => args.serve = true,
            "--tasks" => args.tasks = value()?.parse().map_err(|e| format!("--tasks: {e}"))?,
            "--seconds" => {
                args.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?
            }
            "--metrics" => {
                args.metrics = Some(value()?.parse().map_err(|e| format!("--metrics: {e}"))?)
            }
            other => {
                return Err(format!(
                    "unknown flag {other} (see the top of examples/codemojex.rs)"
                ));
            }
        }
    }
    if args.own_server && args.l2.is_some() {
        return Err("--own-server and --l2/ECHO_CACHE_L2 exclude each other".into());
    }
    if args.tasks == 0 {
        return Err("--tasks must be at least 1".into());
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let args = match args() {
        Ok(args) => args,
        Err(problem) => {
            eprintln!("codemojex: {problem}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("codemojex: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Runs what the flags ask; `false` when a check failed.
async fn run(mut args: Args) -> Result<bool, Failure> {
    let server = if args.own_server {
        Some(OwnServer::start()?)
    } else {
        None
    };
    if let Some(server) = &server {
        args.l2 = Some(server.url());
    }
    if let Some(addr) = args.metrics {
        let addr = codemojex::metrics::serve(addr).await?;
        println!("metrics: http://{addr}/metrics");
    }
    if args.serve {
        let store = codemojex::open_store(&args.db)?;
        let (a, b) = codemojex::nodes(&store, args.l2.as_deref()).await?;
        let load = Load {
            tasks: args.tasks,
            duration: Duration::from_secs(args.seconds),
            revocations_per_second: 20,
        };
        println!(
            "serving: {} scorers on two nodes for {} s",
            load.tasks, args.seconds
        );
        let summary = serve::serve(&[a, b], &store, load).await?;
        println!("{summary:?}");
        return Ok(true);
    }
    let report = codemojex::run(Workshop {
        l2: args.l2.clone(),
        stop_server: server
            .map(|server| Box::new(move || server.stop()) as Box<dyn FnOnce() + Send>),
        ..Workshop::new(&args.db)
    })
    .await?;
    let revoked = report.revocation.refused_after.is_some() || args.l2.is_none();
    let outage = report
        .revocation
        .outage
        .as_ref()
        .is_none_or(|outage| outage.refused_after.is_some());
    println!(
        "\nfallbacks to the store: {}; the revocation check {}.",
        report.fallbacks,
        if revoked && outage {
            "passed"
        } else {
            "FAILED"
        }
    );
    Ok(revoked && outage)
}
