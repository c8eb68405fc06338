//! One table's view of L2: its keys, its frames, its codec.

use std::sync::Arc;

use redis::Cmd;

use super::frame::{self, HEADER};
use super::{Codec, Failure, Server, Warning, keyspace};
use crate::id::RawId;
use crate::spec::{Cached, TableSpec};
use crate::stats::Counters;

pub(crate) struct Tier<T> {
    server: Arc<Server>,
    codec: Arc<dyn Codec<T>>,
    spec: &'static TableSpec,
    prefix: String,
    schema: u64,
    max_value_bytes: usize,
    read_warning: Warning,
    write_warning: Warning,
}

impl<T: Cached> Tier<T> {
    pub(crate) fn new(
        server: Arc<Server>,
        codec: Arc<dyn Codec<T>>,
        spec: &'static TableSpec,
        max_value_bytes: usize,
    ) -> Tier<T> {
        Tier {
            schema: frame::schema(spec.fingerprint(), codec.name()),
            prefix: keyspace::prefix(spec),
            server,
            codec,
            spec,
            max_value_bytes,
            read_warning: Warning::new(),
            write_warning: Warning::new(),
        }
    }

    pub(crate) fn server(&self) -> &Server {
        &self.server
    }

    fn key(&self, key: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.prefix.len() + crate::ID_LEN);
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(&RawId::new(T::KIND, key).to_bytes());
        out
    }

    /// The value of `key` in L2 and its version, if L2 has a valid frame.
    /// Failures and bad frames are counted and answered as misses.
    pub(crate) async fn read(&self, key: u64, counters: &Counters) -> Option<(RawId, T)> {
        let frame: Option<Vec<u8>> = match self
            .server
            .run(Cmd::new().arg("GET").arg(self.key(key)))
            .await
        {
            Ok(frame) => frame,
            Err(failure) => {
                Counters::bump(&counters.l2_errors);
                self.read_warning
                    .emit(|n| self.warn_failure("read", &failure, n));
                return None;
            }
        };
        let frame = frame?;
        let decoded = frame::decode(&frame, T::KIND, self.schema)
            .map_err(|e| e.to_string())
            .and_then(|(version, body)| {
                let value = self
                    .codec
                    .decode(body)
                    .map_err(|e| format!("undecodable body: {e}"))?;
                Ok((version, value))
            });
        match decoded {
            Ok(found) => Some(found),
            Err(reason) => {
                Counters::bump(&counters.decode_errors);
                self.read_warning.emit(|n| {
                    tracing::warn!(
                        table = self.spec.name(),
                        id = %RawId::new(T::KIND, key),
                        occurrences = n,
                        "refilling over a bad L2 frame: {reason}"
                    );
                });
                None
            }
        }
    }

    /// Writes `value` under `version` for `ttl_ms`, unless it is larger than
    /// `max_value_bytes` (then it is only kept in L1; counted as oversized).
    pub(crate) async fn write(
        &self,
        key: u64,
        version: &RawId,
        value: &T,
        ttl_ms: u64,
        counters: &Counters,
    ) {
        let body = match self.codec.encode(value) {
            Ok(body) => body,
            Err(error) => {
                Counters::bump(&counters.l2_writes_dropped);
                self.write_warning.emit(|n| {
                    tracing::warn!(
                        table = self.spec.name(),
                        occurrences = n,
                        "cannot encode a value for L2: {error}"
                    );
                });
                return;
            }
        };
        if HEADER + body.len() > self.max_value_bytes {
            Counters::bump(&counters.oversized);
            return;
        }
        let frame = frame::encode(version, self.schema, &body);
        let set = Cmd::new()
            .arg("SET")
            .arg(self.key(key))
            .arg(frame)
            .arg("PX")
            .arg(ttl_ms.max(1))
            .clone();
        if let Err(failure) = self.server.run::<()>(&set).await {
            Counters::bump(&counters.l2_writes_dropped);
            self.write_warning
                .emit(|n| self.warn_failure("write", &failure, n));
        }
    }

    /// Deletes the frame of `key`.
    pub(crate) async fn delete(&self, key: u64, counters: &Counters) {
        if let Err(failure) = self
            .server
            .run::<()>(Cmd::new().arg("DEL").arg(self.key(key)))
            .await
        {
            Counters::bump(&counters.l2_writes_dropped);
            self.write_warning
                .emit(|n| self.warn_failure("delete", &failure, n));
        }
    }

    fn warn_failure(&self, what: &str, failure: &Failure, occurrences: u64) {
        tracing::warn!(
            table = self.spec.name(),
            occurrences,
            "L2 {what} skipped, going on without it: {failure}"
        );
    }
}
