//! The program (`cargo run --example codemojex -- --help`): its flags, and
//! what it prints at the end. Here rather than in `examples/codemojex.rs`
//! so that the suite runs the very same program (tests/codemojex.rs).

use std::ffi::OsString;
use std::io::IsTerminal;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::fleet::Program;
use crate::moves::Failure;
use crate::serve::{self, Load};
use crate::server::OwnServer;
use crate::{Report, Workshop};

const EXAMPLES: &str = "\
Examples:
  cargo run --example codemojex                          # L1 only
  cargo run --example codemojex -- --own-server          # two nodes over a server it starts
  cargo run --example codemojex -- --own-server --nodes 3   # move 4 on three processes
  cargo run --example codemojex -- --l2 redis://127.0.0.1:6379
  cargo run --example codemojex -- --own-server --serve --tasks 8 --seconds 10

RUST_LOG filters the log (default: warn); a warning repeated is printed once.";

/// The codemojex workshop: a scorer over SQLite, cached by echo-cache,
/// walked through four moves (declare, hit, survive, invalidate), or put
/// under load with --serve.
#[derive(Debug, Parser)]
#[command(name = "codemojex", after_help = EXAMPLES)]
#[command(group = clap::ArgGroup::new("server").args(["l2", "own_server"]))]
pub struct Args {
    /// The SQLite database, created and seeded on first run [default: codemojex.sqlite3 in the
    /// temp dir]
    #[arg(long, value_name = "PATH")]
    pub db: Option<PathBuf>,
    /// The L2 server the two nodes share (Valkey or Redis); without it, L1 only
    #[arg(
        long,
        value_name = "URL",
        env = "ECHO_CACHE_L2",
        conflicts_with = "own_server"
    )]
    pub l2: Option<String>,
    /// Start a valkey-server (or redis-server) from PATH on a free loopback port, and stop it in
    /// move 4 to show an outage
    #[arg(long)]
    pub own_server: bool,
    /// Move 4's nodes as N processes of this program (2 to 8), over the L2 server (--own-server,
    /// --l2 or ECHO_CACHE_L2): a session revoked, a fleet-wide herd, a versioned message and
    /// invalidate_all, across processes
    #[arg(long, value_name = "N", requires = "server", conflicts_with = "serve",
          value_parser = clap::value_parser!(u16).range(2..=8))]
    pub nodes: Option<u16>,
    /// Instead of the four moves: the scorer under load on both nodes, with a live board
    #[arg(long)]
    pub serve: bool,
    /// Concurrent scorers, with --serve
    #[arg(long, value_name = "N", default_value_t = 8, requires = "serve",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub tasks: u16,
    /// How long --serve runs, in seconds
    #[arg(long, value_name = "S", default_value_t = 10, requires = "serve",
          allow_negative_numbers = true, value_parser = clap::value_parser!(i64).range(1..=3_600))]
    pub seconds: i64,
    /// Sessions revoked per second during --serve, on a random node each
    #[arg(long, value_name = "N", default_value_t = 20, requires = "serve",
          value_parser = clap::value_parser!(u32).range(0..=1_000))]
    pub revocations: u32,
    /// Serve the caches' metrics for Prometheus at http://ADDR/metrics (e.g. 127.0.0.1:9464), and
    /// their tables (figures, hottest ids) as JSON at http://ADDR/tables
    #[arg(long, value_name = "ADDR", value_parser = listen_addr)]
    pub metrics: Option<SocketAddr>,
}

/// `--metrics`: an IP and port, or `localhost:PORT`.
fn listen_addr(given: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = given.parse() {
        return Ok(addr);
    }
    match given.strip_prefix("localhost:").map(str::parse::<u16>) {
        Some(Ok(port)) => Ok((Ipv4Addr::LOCALHOST, port).into()),
        _ => Err(
            "expected IP:PORT to listen on, e.g. 127.0.0.1:9464 (port 0 picks a free one)".into(),
        ),
    }
}

/// Runs the program on `args` (the first is the program's name); returns
/// its exit status: 0 when every check passed, 1 when one failed or the
/// program could not run, 2 for a wrong command line.
pub fn main(args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> u8 {
    // A process of move 4's fleet (--nodes), run again by the program.
    if let Some(status) = crate::fleet::child_if_asked() {
        return status;
    }
    let args = match Args::try_parse_from(args) {
        Ok(args) => args,
        Err(err) => {
            // `--help` is an "error" too, printed on stdout, exit 0.
            let _ = err.print();
            return u8::try_from(err.exit_code()).unwrap_or(2);
        }
    };
    // Colours only where a person reads the log as it comes: not while
    // `--serve` may send it to a file.
    crate::log::install(std::io::stderr().is_terminal() && !args.serve);
    let server = match args.own_server.then(OwnServer::start).transpose() {
        Ok(server) => server,
        Err(err) => {
            eprintln!(
                "codemojex: --own-server: cannot start valkey-server or redis-server from PATH: {err}"
            );
            return 1;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let passed = runtime.block_on(run(args, server.clone()));
    // The caches' tasks end with the runtime, before the server stops:
    // else they would warn that it went away.
    drop(runtime);
    drop(server);
    let status = match passed {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(err) => {
            eprintln!("codemojex: {err}");
            1
        }
    };
    let (warnings, repeats) = crate::log::warnings();
    if repeats > 0 {
        eprintln!("codemojex: {warnings} warnings, {repeats} of them repeats not printed again");
    }
    status
}

/// Runs what the flags ask; `false` when a check failed.
async fn run(args: Args, server: Option<OwnServer>) -> Result<bool, Failure> {
    let l2 = server.as_ref().map(OwnServer::url).or(args.l2);
    let db = args
        .db
        .unwrap_or_else(|| std::env::temp_dir().join("codemojex.sqlite3"));
    if let Some(addr) = args.metrics {
        let addr = crate::metrics::serve(addr)
            .await
            .map_err(|err| format!("--metrics {addr}: {err}"))?;
        println!("metrics: http://{addr}/metrics, tables: http://{addr}/tables");
    }
    if args.serve {
        let store = crate::open_store(&db)?;
        let (a, b) = crate::nodes(&store, l2.as_deref()).await?;
        let load = Load {
            tasks: args.tasks.into(),
            duration: Duration::from_secs(args.seconds.unsigned_abs()),
            revocations_per_second: args.revocations,
        };
        println!(
            "serving: {} scorers on two nodes for {} s, {} revocations a second",
            load.tasks, args.seconds, load.revocations_per_second
        );
        let summary = serve::serve(&[a, b], &store, load).await?;
        println!("\n{summary}");
        return Ok(summary.revoked == summary.intended_revocations);
    }
    let processes = match args.nodes {
        Some(nodes) => Some((Program::this()?, usize::from(nodes))),
        None => None,
    };
    let report = crate::run(Workshop {
        l2: l2.clone(),
        processes,
        stop_server: server
            .map(|server| Box::new(move || server.stop()) as Box<dyn FnOnce() + Send>),
        ..Workshop::new(&db)
    })
    .await?;
    let (mut passed, mut verdict) = verdict(&report, l2.is_some());
    if let Some(fleet) = &report.fleet {
        passed &= fleet.passed();
        verdict = match (passed, fleet.passed()) {
            (true, _) => {
                "the revocation, fleet herd, versioned message and invalidate_all checks \
                          passed on every process."
            }
            (false, true) => verdict,
            (false, false) => "FAILED: a check across the processes failed (see above).",
        };
    }
    println!("\nfallbacks to the store: {}; {verdict}", report.fallbacks);
    Ok(passed)
}

/// Whether move 4's checks passed, and the program's last words on them.
fn verdict(report: &Report, l2: bool) -> (bool, &'static str) {
    let revocation = &report.revocation;
    if !l2 {
        return match revocation.refused_when_told {
            Some(_) => (
                true,
                "the cross-node revocation check was not run: with L1 only, node b kept the \
                 revoked session until told directly (run with --own-server to see it refused).",
            ),
            None => (
                false,
                "FAILED: node b kept the revoked session even when told directly.",
            ),
        };
    }
    let outage = revocation
        .outage
        .as_ref()
        .is_none_or(|outage| outage.refused_after.is_some());
    match (revocation.refused_after.is_some(), outage) {
        (true, true) => (true, "the revocation check passed."),
        (false, _) => (
            false,
            "FAILED: node b kept serving a session revoked on node a.",
        ),
        (true, false) => (
            false,
            "FAILED: with the server stopped, node b kept serving a revoked session.",
        ),
    }
}
