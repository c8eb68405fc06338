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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_parse_and_order() {
        assert_eq!(EntryId::parse(b"17-3"), Some(EntryId(17, 3)));
        assert_eq!(EntryId::parse(b"17"), Some(EntryId(17, 0)));
        assert_eq!(EntryId::parse(b"x-1"), None);
        assert!(EntryId(2, 0) > EntryId(1, 9));
        assert_eq!(EntryId(5, 1).to_string(), "5-1");
    }

    /// An `XINFO STREAM` reply (RESP2).
    fn info(length: i64, added: Option<i64>, first: Option<&str>, last: &str) -> Value {
        let s = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let mut pairs = vec![
            s("length"),
            Value::Int(length),
            s("last-generated-id"),
            s(last),
        ];
        if let Some(added) = added {
            pairs.extend([s("entries-added"), Value::Int(added)]);
        }
        pairs.push(s("first-entry"));
        pairs.push(match first {
            Some(id) => Value::Array(vec![s(id), Value::Array(vec![s("m"), s("x")])]),
            None => Value::Nil,
        });
        Value::Array(pairs)
    }

    #[test]
    fn trimming_is_told_from_the_stream_info() {
        let at = |ms| EntryId(ms, 0);
        // Nothing added after what was delivered.
        assert!(!trimmed_past(&info(3, Some(9), Some("7-0"), "9-0"), at(9)));
        // Never trimmed.
        assert!(!trimmed_past(&info(9, Some(9), Some("1-0"), "9-0"), at(5)));
        // The first entry left is not after what was delivered.
        assert!(!trimmed_past(&info(5, Some(9), Some("5-0"), "9-0"), at(5)));
        // Trimmed past it, or everything trimmed.
        assert!(trimmed_past(&info(2, Some(9), Some("8-0"), "9-0"), at(5)));
        assert!(trimmed_past(&info(0, Some(9), None, "9-0"), at(5)));
        // An old server, without counts: the first entry decides.
        assert!(trimmed_past(&info(2, None, Some("8-0"), "9-0"), at(5)));

        assert!(!trimmed_up_to(&info(9, Some(9), Some("1-0"), "9-0"), at(1)));
        assert!(!trimmed_up_to(&info(5, Some(9), Some("5-0"), "9-0"), at(6)));
        assert!(trimmed_up_to(&info(5, Some(9), Some("5-0"), "9-0"), at(5)));
        assert!(trimmed_up_to(&info(0, Some(9), None, "9-0"), at(5)));
    }

    #[test]
    fn replies_parse_in_resp2_and_resp3() {
        let s = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let entries = Value::Array(vec![
            Value::Array(vec![s("1-1"), Value::Array(vec![s("m"), s("x")])]),
            Value::Array(vec![s("1-2"), Value::Nil]),
        ]);
        let resp2 = Value::Array(vec![Value::Array(vec![s("st"), entries.clone()])]);
        let resp3 = Value::Map(vec![(s("st"), entries)]);
        for reply in [resp2, resp3] {
            let streams = streams(&reply).unwrap();
            assert_eq!(streams.len(), 1);
            assert_eq!(streams[0].0, b"st");
            let entries = entries_of(streams[0].1).unwrap();
            assert_eq!(entries[0].id, EntryId(1, 1));
            assert!(entries[0].fields.is_some());
            assert!(entries[1].fields.is_none(), "deleted");
        }
        assert!(streams(&Value::Nil).unwrap().is_empty());
        assert!(streams(&Value::Int(1)).is_err());
        let map = Value::Map(vec![(s("name"), s("g"))]);
        assert_eq!(field(&map, "name").and_then(bytes), Some(&b"g"[..]));
    }
}
