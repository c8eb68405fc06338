//! The child process below the fixture: signals (`SIGSTOP`, `SIGCONT`,
//! `SIGKILL`) and the wait for a stop, the raw one-command probe that needs
//! no client library (readiness, `PING`), and the server log's tail for
//! failure messages. Plain functions over a pid, a port or a path.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

/// Lines of the server log shown in failure messages.
const LOG_TAIL_LINES: usize = 40;

/// Sends one command over a fresh connection and returns the reply: the
/// line of a simple reply or error (with its `+`/`-`), or a bulk string's
/// payload.
pub(crate) fn raw_command(port: u16, args: &[&str], timeout: Duration) -> io::Result<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    let remaining = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "reply timed out"))
    };
    stream.set_write_timeout(Some(remaining()?))?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())?;
    stream.set_read_timeout(Some(remaining()?))?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "truncated reply",
        ));
    }
    line.truncate(line.len() - 2);
    if let Some(len) = line.strip_prefix(b"$") {
        let len: usize = std::str::from_utf8(len)
            .ok()
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad bulk length"))?;
        let mut payload = vec![0; len + 2];
        reader.get_mut().set_read_timeout(Some(remaining()?))?;
        reader.read_exact(&mut payload)?;
        payload.truncate(len);
        return Ok(payload);
    }
    Ok(line)
}

/// The `process_id:` field of an `INFO server` reply.
pub(crate) fn info_pid(info: &[u8]) -> Option<u32> {
    String::from_utf8_lossy(info)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

pub(crate) fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("a child pid fits pid_t");
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own
    // child, not yet reaped (the state lock is held), so it cannot be reused.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        // ESRCH: it died on its own; the next state poll reaps it.
        if err.raw_os_error() != Some(libc::ESRCH) {
            panic!("kill({pid}, {sig}): {err}");
        }
    }
}

/// Polls (without reaping) until the child is in the stopped state.
#[cfg(target_os = "linux")]
pub(crate) fn wait_stopped(pid: u32, deadline: Instant) -> bool {
    let pid = libc::pid_t::try_from(pid).expect("a child pid fits pid_t");
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value (plain C struct).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid, writable siginfo_t; WNOWAIT leaves the
        // child waitable, so std's `Child` still reaps it later.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WSTOPPED | libc::WNOWAIT | libc::WNOHANG,
            )
        };
        if rc == 0 {
            // SAFETY: waitid filled (or left zeroed) a SIGCHLD siginfo_t.
            if unsafe { info.si_pid() } == pid && info.si_code == libc::CLD_STOPPED {
                return true;
            }
        } else if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// Elsewhere SIGSTOP takes effect as soon as the target is scheduled; there
/// is no portable non-reaping way to observe it.
#[cfg(not(target_os = "linux"))]
pub(crate) fn wait_stopped(_pid: u32, _deadline: Instant) -> bool {
    true
}

pub(crate) fn read_from(path: &Path, offset: u64) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path)
        && file.seek(SeekFrom::Start(offset)).is_ok()
    {
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}

pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let text = read_from(path, 0);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub(crate) fn tail_section(path: &Path) -> String {
    format!(
        "--- tail of {}:\n{}\n---",
        path.display(),
        log_tail(path, LOG_TAIL_LINES)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_info_pid() {
        let info = b"# Server\r\nredis_version:7.0.15\r\nprocess_id:4242\r\ntcp_port:1\r\n";
        assert_eq!(info_pid(info), Some(4242));
        assert_eq!(info_pid(b"-NOAUTH Authentication required."), None);
    }
}
