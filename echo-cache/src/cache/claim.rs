//! The claim of this process's node number on the L2 server, so that two
//! processes sharing an L2 never stamp the same one into their versions
//! (see [node numbers](crate::Minter#node-numbers)).
//!
//! The claim is a key, `ecc:node:<n>`, holding a token of the process,
//! written only if it is vacant or already ours and leased for [`LEASE`].
//! The keeper renews it every [`RENEW_EVERY`] while its cache lives and
//! deletes it (if still ours) when the cache is dropped. When another
//! process holds the number, the keeper draws another (at random, then, if
//! that keeps failing, every number in turn) and moves the global minter to
//! it. A number set by hand is never moved: a clash is logged.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use tokio::sync::watch;

use crate::connections::{Lane, Server};
use crate::entity::mint::{MAX_NODE, Minter, random_node};
use crate::keyspace;
use crate::report::roster::Readiness;

/// How long a claim lives unless renewed.
pub(crate) const LEASE: Duration = Duration::from_secs(30);
/// How often a held claim is renewed.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(3);
/// How soon a claim that could not be made (L2 away) is tried again.
const RETRY: Duration = Duration::from_millis(200);
/// Random draws before the keeper tries every number in turn.
const DRAWS: usize = 16;

/// `SET KEYS[1] ARGV[1] PX ARGV[2]` if the key is vacant or holds
/// `ARGV[1]`; 1 if it now does, 0 if another token holds it.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1",
    )
});

/// `DEL KEYS[1]` if it holds `ARGV[1]`.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0",
    )
});

/// This process's token: its id and a random number, the same for every
/// cache of the process (they claim the same number).
fn token() -> &'static str {
    static TOKEN: LazyLock<String> =
        LazyLock::new(|| format!("{}-{:016x}", std::process::id(), fastrand::u64(..)));
    &TOKEN
}

/// Keeps the claim of the global minter's node number on `server` until
/// `stop`'s sender is dropped; reports to `readiness` once a claim is held
/// (or the number was set by hand).
pub(crate) async fn keep(
    server: Arc<Server>,
    readiness: Arc<Readiness>,
    mut stop: watch::Receiver<()>,
) {
    let minter = Minter::global();
    let mut held = None;
    loop {
        let pause = match settle(&server, minter).await {
            Some(node) => {
                held = Some(node);
                if !readiness.is_claimed() {
                    readiness.claimed();
                }
                RENEW_EVERY
            }
            None => RETRY,
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = stop.changed() => break,
        }
    }
    if let Some(node) = held {
        let key = keyspace::node_claim(node);
        let _ = server
            .eval::<i64>(
                Lane::Managed,
                &RELEASE,
                &[key.as_bytes()],
                &[token().as_bytes()],
            )
            .await;
    }
}

/// Claims the minter's number, or another if it is taken (moving the
/// minter there); the number held, or `None` if L2 did not answer.
async fn settle(server: &Server, minter: &Minter) -> Option<u16> {
    let mut tried = 0;
    loop {
        let node = minter.node();
        if claim(server, node).await? {
            return Some(node);
        }
        if minter.is_explicit() {
            tracing::error!(
                node,
                "another process holds the node number set with Minter::set_node: \
                 versions minted by both may collide"
            );
            return Some(node);
        }
        if tried > usize::from(MAX_NODE) + DRAWS {
            tracing::error!(
                node,
                "every node number is claimed on L2 (over 1,024 processes share it): \
                 versions may collide"
            );
            return Some(node);
        }
        // Random draws first; then every number in turn.
        let next = if tried < DRAWS {
            random_node()
        } else if node == MAX_NODE {
            0
        } else {
            node + 1
        };
        minter.adopt(node, next);
        tried += 1;
    }
}

/// Claims `node` for this process; whether it holds it now. `None` if L2
/// did not answer.
async fn claim(server: &Server, node: u16) -> Option<bool> {
    let key = keyspace::node_claim(node);
    let lease = LEASE.as_millis().to_string();
    server
        .eval::<i64>(
            Lane::Managed,
            &CLAIM,
            &[key.as_bytes()],
            &[token().as_bytes(), lease.as_bytes()],
        )
        .await
        .ok()
        .map(|held| held == 1)
}
