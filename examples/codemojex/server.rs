//! `--own-server`: a `valkey-server` (or `redis-server`) from `PATH`,
//! started by the program on a free loopback port, so that move 4 can stop
//! it and show what degrades.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A server this program started; stopped when dropped.
#[derive(Clone)]
pub struct OwnServer {
    child: Arc<Mutex<Option<Child>>>,
    port: u16,
}

impl OwnServer {
    /// Starts `valkey-server`, or `redis-server` when there is no Valkey,
    /// with no persistence, and waits until it accepts connections.
    pub fn start() -> std::io::Result<OwnServer> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
            .local_addr()?
            .port();
        let mut last = None;
        for binary in ["valkey-server", "redis-server"] {
            let started = Command::new(binary)
                .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            match started {
                Ok(child) => {
                    let server = OwnServer {
                        child: Arc::new(Mutex::new(Some(child))),
                        port,
                    };
                    let since = Instant::now();
                    while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
                        if since.elapsed() > Duration::from_secs(5) {
                            return Err(std::io::Error::other(format!(
                                "{binary} did not listen within 5 s"
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    return Ok(server);
                }
                Err(err) => last = Some(err),
            }
        }
        Err(last.expect("two binaries tried"))
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops it (SIGKILL, as a crash would).
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        if Arc::strong_count(&self.child) == 1 {
            self.stop();
        }
    }
}
