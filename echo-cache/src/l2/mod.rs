//! L2: the shared Valkey/Redis tier behind every table.
//!
//! One [`Server`] per cache: a connection (the `redis` crate's
//! `ConnectionManager`, which reconnects by itself), a bound on every
//! operation ([`Builder::l2_timeout`](crate::Builder::l2_timeout)) and a
//! [circuit breaker](breaker). Each table reaches it through its [`Tier`],
//! which knows the table's keyspace, codec and schema.
//!
//! L2 never fails a fetch: an operation that errs, times out or is refused by
//! the open breaker is counted (`l2_errors`, `l2_writes_dropped`) and the
//! fetch goes on to the loader. Writes during an outage are dropped, never
//! queued.

mod breaker;
mod codec;
mod frame;
pub mod keyspace;
mod tier;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, FromRedisValue, RedisError};
use tokio::sync::OnceCell;

use crate::error::Error;
use breaker::Breaker;

pub use codec::{Codec, Postcard};
pub(crate) use tier::Tier;

/// Why an L2 operation did not happen.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The breaker is open: the server is not answering.
    Refused,
    /// No answer within the L2 timeout.
    Timeout,
    /// The server or the connection said no.
    Redis(RedisError),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused => {
                f.write_str("not tried: the server is not answering (breaker open)")
            }
            Failure::Timeout => f.write_str("no answer within the L2 timeout"),
            Failure::Redis(error) => write!(f, "{error}"),
        }
    }
}

/// The L2 server of a cache.
pub(crate) struct Server {
    client: redis::Client,
    connection: OnceCell<ConnectionManager>,
    timeout: Duration,
    breaker: Breaker,
}

impl Server {
    /// Checks the URL; connects on first use, inside a runtime.
    pub(crate) fn open(
        url: &str,
        timeout: Duration,
        probe_every: Duration,
    ) -> Result<Server, Error> {
        let client = redis::Client::open(url)
            .map_err(|e| Error::Config(format!("L2 address {url:?}: {e}")))?;
        Ok(Server {
            client,
            connection: OnceCell::new(),
            timeout,
            breaker: Breaker::new(probe_every),
        })
    }

    /// Whether the breaker is refusing operations now.
    pub(crate) fn is_down(&self) -> bool {
        self.breaker.is_open()
    }

    /// Runs `cmd`, within the timeout, unless the breaker refuses.
    pub(crate) async fn run<R: FromRedisValue>(&self, cmd: &Cmd) -> Result<R, Failure> {
        if !self.breaker.allow() {
            return Err(Failure::Refused);
        }
        let attempt = async {
            let mut connection = self.connection().await?;
            cmd.query_async::<R>(&mut connection).await
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok(reply)) => {
                self.breaker.success();
                Ok(reply)
            }
            Ok(Err(error)) => {
                if is_outage(&error) {
                    self.breaker.failure();
                } else {
                    // The server answered, with an error of its own.
                    self.breaker.success();
                }
                Err(Failure::Redis(error))
            }
            Err(_) => {
                self.breaker.failure();
                Err(Failure::Timeout)
            }
        }
    }

    async fn connection(&self) -> Result<ConnectionManager, RedisError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_secs(1));
        self.connection
            .get_or_try_init(|| async {
                ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            })
            .await
            .cloned()
    }
}

fn is_outage(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_unrecoverable_error()
}

/// A warning logged at most once per interval, with the count it stood for.
pub(crate) struct Warning {
    origin: Instant,
    /// When the last warning was logged, in ms since `origin`, plus one.
    last: AtomicU64,
    suppressed: AtomicU64,
}

impl Warning {
    const EVERY_MS: u64 = 10_000;

    pub(crate) fn new() -> Warning {
        Warning {
            origin: Instant::now(),
            last: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Calls `log` with the number of occurrences since the last warning,
    /// if the last warning is old enough; else counts this one.
    pub(crate) fn emit(&self, log: impl FnOnce(u64)) {
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let last = self.last.load(Relaxed);
        if (last == 0 || now.saturating_sub(last) >= Self::EVERY_MS)
            && self
                .last
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            log(self.suppressed.swap(0, Relaxed) + 1);
        } else {
            self.suppressed.fetch_add(1, Relaxed);
        }
    }
}
