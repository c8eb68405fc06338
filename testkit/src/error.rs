//! The one error type of the fixtures: why a server or a cluster could not
//! be started. Its own file because every other part of the crate makes one
//! (the binary lookup, the launch, the cluster's setup) and the public API
//! returns it from every `try_*`.

use std::fmt;
use std::io;

/// Why a server could not be started.
#[derive(Debug)]
pub struct Error {
    pub(crate) kind: ErrorKind,
    pub(crate) message: String,
}

/// The kind of an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Neither `valkey-server` nor `redis-server` is on `PATH` (or
    /// [`SERVER_ENV`](crate::SERVER_ENV) names no executable file).
    BinaryNotFound,
    /// The server exited, or did not answer within the startup timeout, or
    /// its port stayed taken; the message carries the server log's tail.
    Startup,
    /// An I/O error of the fixture itself (temp dir, log file, spawn).
    Io,
    /// A [`RedisCluster`](crate::RedisCluster) did not come together: a setup command failed, or
    /// the nodes did not agree within the timeout; the message names what
    /// did not converge and shows each node's `CLUSTER NODES`.
    Cluster,
}

impl Error {
    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub(crate) fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn io(context: impl fmt::Display, err: io::Error) -> Self {
        Self::new(ErrorKind::Io, format!("{context}: {err}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
