//! One launch attempt of a server process: spawn it with its log as stdout
//! and stderr, then poll until it answers as itself (its pid in `INFO
//! server`) on the port, exits, or the timeout passes. A port taken by
//! another program is told apart (`Address already in use` in the log) so
//! that a start can retry on a new port and a restart on the same one.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::process::{info_pid, raw_command, read_from, tail_section};
use crate::{Error, ErrorKind, POLL_INTERVAL};

/// What to run, once per launch attempt.
pub(crate) struct Spec<'a> {
    pub(crate) binary: &'a Path,
    pub(crate) args: &'a [OsString],
    pub(crate) dir: &'a Path,
    pub(crate) log_path: &'a Path,
    pub(crate) port: u16,
}

pub(crate) enum Launch {
    /// The server exited because its port was taken; try again.
    PortTaken,
    Failed(Error),
}

impl Spec<'_> {
    /// Spawns the server and waits until it answers as itself (its pid) on
    /// the port, it exits, or `timeout` passes.
    pub(crate) fn launch(&self, timeout: Duration, attempt: usize) -> Result<Child, Launch> {
        let io_err = |context: &str, e| Launch::Failed(Error::io(context, e));
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path)
            .map_err(|e| io_err("opening the server log", e))?;
        let offset = log
            .seek(SeekFrom::End(0))
            .map_err(|e| io_err("seeking the server log", e))?;
        writeln!(
            log,
            "--- echo-cache-testkit: starting {} on 127.0.0.1:{} (attempt {attempt})",
            self.binary.display(),
            self.port
        )
        .map_err(|e| io_err("writing the server log", e))?;
        let stderr = log
            .try_clone()
            .map_err(|e| io_err("cloning the log handle", e))?;
        let mut child = Command::new(self.binary)
            .arg("--port")
            .arg(self.port.to_string())
            .args(self.args)
            .current_dir(self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr)
            .spawn()
            .map_err(|e| io_err(&format!("spawning {}", self.binary.display()), e))?;
        let pid = child.id();
        let deadline = Instant::now() + timeout;

        let port_taken = || read_from(self.log_path, offset).contains("Address already in use");
        let failure = loop {
            match child.try_wait() {
                Ok(None) => {}
                Ok(Some(_)) if port_taken() => return Err(Launch::PortTaken),
                Ok(Some(status)) => break format!("exited ({status}) before answering"),
                Err(e) => break format!("could not be polled: {e}"),
            }
            let now = Instant::now();
            if now >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                if port_taken() {
                    return Err(Launch::PortTaken);
                }
                break "did not answer in time".to_owned();
            }
            let probe_timeout = (deadline - now).clamp(POLL_INTERVAL, Duration::from_millis(100));
            if let Ok(reply) = raw_command(self.port, &["INFO", "server"], probe_timeout)
                && info_pid(&reply) == Some(pid)
            {
                return Ok(child);
            }
            // Another process's server (we are losing the port race), or
            // an error reply: keep polling until our child exits.
            thread::sleep(POLL_INTERVAL);
        };
        Err(Launch::Failed(Error::new(
            ErrorKind::Startup,
            format!(
                "{} on 127.0.0.1:{} {failure}\n{}",
                self.binary.display(),
                self.port,
                tail_section(self.log_path)
            ),
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, TcpListener};

    use super::*;
    use crate::binary::binary;

    #[test]
    fn a_taken_port_is_reported_for_a_retry() {
        let binary = binary().expect("a server binary on PATH");
        let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let log_path = dir.path().join("server.log");
        let args: Vec<OsString> = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            .iter()
            .map(OsString::from)
            .collect();
        let spec = Spec {
            binary: &binary.path,
            args: &args,
            dir: dir.path(),
            log_path: &log_path,
            port: squatter.local_addr().unwrap().port(),
        };
        let started = Instant::now();
        match spec.launch(Duration::from_secs(5), 1) {
            Err(Launch::PortTaken) => {}
            Ok(_) => panic!("launched on a taken port"),
            Err(Launch::Failed(e)) => panic!("not recognised as a taken port: {e}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
}
