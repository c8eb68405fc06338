//! Blocking commands, each on a connection of its own: a `BLMOVE` on the
//! shared command connection would hold up every command behind it.
//!
//! The connections are kept for the next wait (a few per node): a fleet
//! herd's waiters (see `herd = "fleet"`) wait once per herd, and a
//! connection costs a handshake.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::{Failure, Server};

/// How many idle connections are kept, in all.
const KEPT: usize = 16;

/// The idle connections of blocking waits, by node name.
#[derive(Default)]
pub(super) struct Idle(Mutex<Vec<(String, MultiplexedConnection)>>);

impl Idle {
    fn take(&self, node: &str) -> Option<MultiplexedConnection> {
        let mut idle = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = idle.iter().position(|(name, _)| name == node)?;
        Some(idle.swap_remove(at).1)
    }

    fn keep(&self, node: String, connection: MultiplexedConnection) {
        let mut idle = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < KEPT {
            idle.push((node, connection));
        }
    }
}

impl Server {
    /// Waits until the list `key` (a key of `slot`) holds an element, at
    /// most `wait`, and leaves it there (`BLMOVE key key LEFT LEFT`, which
    /// moves it onto itself): every waiter on the list wakes. Whether an
    /// element came.
    pub(crate) async fn await_list(
        &self,
        slot: u16,
        key: &[u8],
        wait: Duration,
    ) -> Result<bool, Failure> {
        if !self.breaker.allow() {
            return Err(Failure::Refused);
        }
        let owner = self.owner(slot).await.map_err(Failure::Topology)?;
        let connection = if let Some(connection) = self.idle.take(&owner.name) {
            connection
        } else {
            let client = redis::Client::open(owner.info.clone()).map_err(Failure::Redis)?;
            let connect = client.get_multiplexed_async_connection();
            tokio::time::timeout(self.timeout, connect)
                .await
                .map_err(|_| Failure::Timeout)?
                .map_err(Failure::Redis)?
        };
        // The server's timeout is in seconds, 0 for ever: at least 1 ms.
        let seconds = format!("{:.3}", wait.as_secs_f64().max(0.001));
        let mut blmove = redis::cmd("BLMOVE");
        blmove
            .arg(key)
            .arg(key)
            .arg("LEFT")
            .arg("LEFT")
            .arg(seconds);
        let mut waiting = connection.clone();
        let moved = blmove.query_async::<Option<Vec<u8>>>(&mut waiting);
        match tokio::time::timeout(wait + self.timeout, moved).await {
            Ok(Ok(moved)) => {
                self.succeeded();
                self.idle.keep(owner.name, connection);
                Ok(moved.is_some())
            }
            Ok(Err(error)) => Err(Failure::Redis(error)),
            Err(_) => Err(Failure::Timeout),
        }
    }
}
