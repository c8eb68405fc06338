//! Free loopback ports, reserved for a fixture's whole life: picked below
//! the kernel's ephemeral range and locked in a shared file, so no other
//! fixture (of this process or another) takes a port while its server is
//! down between a kill and a restart. See [`reserve_port`].

use std::fs::{self, File, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, TcpListener};

/// The cluster bus port's offset from the client port (the default).
const CLUSTER_BUS_OFFSET: u16 = 10_000;

/// A port of `127.0.0.1` (and, for a cluster-enabled server, its cluster bus
/// port), free a moment ago and held for one fixture's lifetime against
/// every other fixture (see [`reserve_port`]).
#[derive(Debug)]
pub(crate) struct Reservation {
    pub(crate) port: u16,
    /// The locks on byte `port` (and the bus port) of the shared ports file;
    /// released on drop.
    _locks: Vec<File>,
}

/// Picks a port for a new server; with `cluster_bus`, also its cluster bus
/// port (`port + 10000`, the Redis/Valkey default).
///
/// Candidates come from below the kernel's ephemeral range (Linux:
/// `ip_local_port_range`), so no outgoing connection takes the port as its
/// source port while the server is down between `kill` and `restart`. Each
/// candidate is locked (an open-file-description lock on byte `port` of
/// `$TMPDIR/echo-cache-testkit-<uid>.ports`, held until the fixture drops),
/// so no other fixture, in this process or another, picks it while this one
/// lives, even while its server is killed. Then it is bound once to check
/// that nothing else listens there. Without a usable lock (not Linux, or no
/// writable temp dir) only the bind check remains.
pub(crate) fn reserve_port(cluster_bus: bool) -> io::Result<Reservation> {
    let headroom = if cluster_bus { CLUSTER_BUS_OFFSET } else { 0 };
    let range = candidate_ports(headroom);
    'candidates: for _ in 0..256 {
        let port = match &range {
            Some(range) => {
                let span = u64::from(range.end - range.start);
                range.start + u16::try_from(random_u64() % span).expect("span fits u16")
            }
            None => TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
                .local_addr()?
                .port(),
        };
        let ports = match (cluster_bus, port.checked_add(CLUSTER_BUS_OFFSET)) {
            (false, _) => vec![port],
            (true, Some(bus)) => vec![port, bus],
            (true, None) => continue,
        };
        let mut locks = Vec::new();
        for &p in &ports {
            match lock_port(p) {
                Ok(lock) => locks.extend(lock),
                Err(PortLock::Held) => continue 'candidates,
            }
        }
        if ports
            .iter()
            .all(|&p| TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok())
        {
            return Ok(Reservation {
                port,
                _locks: locks,
            });
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no free loopback port in 256 tries",
    ))
}

/// Ports from 10000 (above most development services' defaults) up to
/// `headroom` below the ephemeral range, or `None` to let the kernel choose.
fn candidate_ports(headroom: u16) -> Option<std::ops::Range<u16>> {
    let ephemeral_low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(if cfg!(target_os = "linux") {
            32768
        } else {
            49152
        });
    let end = ephemeral_low.checked_sub(headroom)?;
    (end >= 12_000).then_some(10_000..end)
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    RandomState::new().hash_one((COUNTER.fetch_add(1, Ordering::Relaxed), std::process::id()))
}

enum PortLock {
    /// Another fixture holds the port.
    Held,
}

#[cfg(target_os = "linux")]
fn lock_port(port: u16) -> Result<Option<File>, PortLock> {
    use std::os::fd::AsRawFd;
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    let path = std::env::temp_dir().join(format!("echo-cache-testkit-{uid}.ports"));
    let Ok(file) = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
    else {
        return Ok(None);
    };
    // SAFETY: an all-zero flock is a valid value (plain C struct).
    let mut range: libc::flock = unsafe { std::mem::zeroed() };
    range.l_type = libc::F_WRLCK as libc::c_short;
    range.l_whence = libc::SEEK_SET as libc::c_short;
    range.l_start = libc::off_t::from(port);
    range.l_len = 1;
    // SAFETY: a valid fd and a valid flock; l_pid is 0 as OFD locks require.
    // The lock lives as long as this open file description.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &range) };
    if rc == 0 {
        return Ok(Some(file));
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Err(PortLock::Held),
        // E.g. EINVAL before Linux 3.15: no locking, only the bind check.
        _ => Ok(None),
    }
}

#[cfg(not(target_os = "linux"))]
fn lock_port(_port: u16) -> Result<Option<File>, PortLock> {
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_port_is_not_handed_out_again() {
        let held: Vec<Reservation> = (0..64).map(|i| reserve_port(i % 2 == 0).unwrap()).collect();
        let mut ports = std::collections::HashSet::new();
        for (i, r) in held.iter().enumerate() {
            assert!(ports.insert(r.port), "{} handed out twice", r.port);
            if i % 2 == 0 {
                let bus = r.port + CLUSTER_BUS_OFFSET;
                assert!(ports.insert(bus), "bus port {bus} handed out twice");
            }
        }
        if let Some(range) = candidate_ports(0) {
            assert!(
                ports.iter().all(|p| range.contains(p)),
                "{ports:?} outside {range:?}"
            );
        }
        #[cfg(target_os = "linux")]
        for (i, r) in held.iter().enumerate() {
            assert_eq!(
                r._locks.len(),
                if i % 2 == 0 { 2 } else { 1 },
                "no lock on Linux"
            );
            assert!(matches!(lock_port(r.port), Err(PortLock::Held)));
        }
        // (Once dropped, a port may be taken by any fixture right away, so
        // its release is not asserted here.)
    }
}
