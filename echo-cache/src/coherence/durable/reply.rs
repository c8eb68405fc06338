//! Reading the server's stream replies: entry ids, entries and their
//! fields, and what `XINFO STREAM` says of trimming.

use std::fmt;

use redis::Value;

/// A stream entry id, `<ms>-<seq>`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct EntryId(pub(super) u64, pub(super) u64);

impl EntryId {
    pub(super) const ZERO: EntryId = EntryId(0, 0);

    pub(super) fn parse(text: &[u8]) -> Option<EntryId> {
        let text = std::str::from_utf8(text).ok()?;
        let (ms, seq) = text.split_once('-').unwrap_or((text, "0"));
        Some(EntryId(ms.parse().ok()?, seq.parse().ok()?))
    }
}

impl fmt::Display for EntryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// An entry of a reply: its id, and its fields unless it was deleted.
pub(super) struct Entry<'a> {
    pub(super) id: EntryId,
    pub(super) fields: Option<&'a Value>,
}

/// Whether the stream of `info` (`XINFO STREAM`) lost, to trimming, entries
/// added after `delivered`, the last entry delivered to a group. Trimming
/// removes the oldest entries, so none after `delivered` is lost while the
/// first entry left is not after it. When it is, the entries between may
/// have been trimmed: counted as lost.
pub(super) fn trimmed_past(info: &Value, delivered: EntryId) -> bool {
    let last = field(info, "last-generated-id")
        .and_then(bytes)
        .and_then(EntryId::parse);
    last.is_some_and(|last| last > delivered)
        && ever_trimmed(info)
        && first_entry(info).is_none_or(|first| first > delivered)
}

/// Whether the stream of `info` was trimmed up to `read`, the first entry
/// of a read of new entries (so the entries before it, maybe unread, may
/// have been trimmed). Checked after the read: a false alarm (entries
/// trimmed after they were read) needs the stream to have been trimmed up
/// to them, that is the reader to be about `MAXLEN` entries behind.
pub(super) fn trimmed_up_to(info: &Value, read: EntryId) -> bool {
    ever_trimmed(info) && first_entry(info).is_none_or(|first| first >= read)
}

/// Whether entries of the stream of `info` were ever deleted (Redis 7+
/// counts them; on an older server, assume so).
pub(super) fn ever_trimmed(info: &Value) -> bool {
    match (
        field(info, "entries-added").and_then(int),
        field(info, "length").and_then(int),
    ) {
        (Some(added), Some(length)) => added > length,
        _ => true,
    }
}

/// The id of the first entry of the stream of `info`, if it has one.
pub(super) fn first_entry(info: &Value) -> Option<EntryId> {
    let first = field(info, "first-entry")?;
    items(first)
        .first()
        .and_then(bytes)
        .and_then(EntryId::parse)
}

/// The streams of a reply of `XREADGROUP` and their entries: an array of
/// `[name, entries]` (RESP2), a map (RESP3), or nil (nothing new).
pub(super) fn streams(reply: &Value) -> Result<Vec<(&[u8], &Value)>, String> {
    let pairs: Vec<(&Value, &Value)> = match reply {
        Value::Nil => Vec::new(),
        Value::Map(map) => map.iter().map(|(k, v)| (k, v)).collect(),
        Value::Array(streams) => streams
            .iter()
            .map(|stream| match items(stream) {
                [name, entries] => Ok((name, entries)),
                _ => Err("XREADGROUP: a stream reply is not [name, entries]".to_owned()),
            })
            .collect::<Result<_, _>>()?,
        other => return Err(format!("XREADGROUP: unexpected reply {other:?}")),
    };
    pairs
        .into_iter()
        .map(|(name, entries)| {
            bytes(name)
                .map(|name| (name, entries))
                .ok_or_else(|| "XREADGROUP: a stream name is not a string".to_owned())
        })
        .collect()
}

/// The entries of a list of `[id, fields]`; fields are nil for an entry
/// deleted while pending.
pub(super) fn entries_of(list: &Value) -> Result<Vec<Entry<'_>>, String> {
    items(list)
        .iter()
        .map(|entry| match items(entry) {
            [id, fields] => {
                let id = bytes(id)
                    .and_then(EntryId::parse)
                    .ok_or("a stream entry without a valid id")?;
                let fields = (!matches!(fields, Value::Nil)).then_some(fields);
                Ok(Entry { id, fields })
            }
            _ => Err("a stream entry is not [id, fields]".to_owned()),
        })
        .collect()
}

/// The elements of an array (or set), else none.
pub(super) fn items(value: &Value) -> &[Value] {
    match value {
        Value::Array(items) | Value::Set(items) => items,
        _ => &[],
    }
}

/// The value of `name` in a map (RESP3) or a flat array of pairs (RESP2).
pub(super) fn field<'a>(value: &'a Value, name: &str) -> Option<&'a Value> {
    let name = name.as_bytes();
    match value {
        Value::Map(map) => map
            .iter()
            .find(|(key, _)| bytes(key) == Some(name))
            .map(|(_, value)| value),
        Value::Array(items) => items
            .chunks_exact(2)
            .find(|pair| bytes(&pair[0]) == Some(name))
            .map(|pair| &pair[1]),
        _ => None,
    }
}

pub(super) fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) | Value::VerbatimString { text, .. } => Some(text.as_bytes()),
        _ => None,
    }
}

pub(super) fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => std::str::from_utf8(bytes(other)?).ok()?.parse().ok(),
    }
}
