//! codemojex: the seed's workshop, four moves over SQLite, narrated.
//!
//! ```sh
//! cargo run --example codemojex                    # L1 only
//! cargo run --example codemojex -- --own-server    # two nodes over a server it starts and, in move 4, stops
//! cargo run --example codemojex -- --own-server --nodes 3    # move 4 on three processes
//! cargo run --example codemojex -- --l2 redis://127.0.0.1:6379    # or ECHO_CACHE_L2=URL
//! cargo run --example codemojex -- --own-server --serve --tasks 8 --seconds 10 --metrics 127.0.0.1:9898
//! cargo run --example codemojex -- --help          # every flag
//! ```
//!
//! The program is in `examples/codemojex/`: its flags in `cli.rs`, the
//! moves in `moves.rs`, move 4 on processes (`--nodes`) in `fleet/`, the
//! load in `serve.rs`. `RUST_LOG` filters the log (default `warn`).

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(codemojex::cli::main(std::env::args_os()))
}
