#!/usr/bin/env python3
"""A writer that is not echo-cache: puts and invalidates entities of one
echo-cache table following docs/wire.md alone, with redis-py.

    writer.py --url redis://127.0.0.1:6379 --table wire_rows --kind WIR \
        --coherence broadcast --put WIR0IoNiEI1FSa 300 py --invalidate WIR0IoNiEI1FSb

Prints one line per write: `put <id> <version> <script reply>`,
`invalidate <id> <version> <script reply>`, or `flush * <version> -`
(with --flush). Exits 3 if redis-py is missing.
The section numbers in the comments are docs/wire.md's.
"""

import argparse
import os
import random
import sys
import time

try:
    import redis
except ImportError:
    sys.stderr.write(
        "tests/wire/writer.py needs redis-py: `python3 -m pip install redis` "
        "or `apt-get install python3-redis` (scripts/test installs it)\n"
    )
    sys.exit(3)

# 1. Ids and versions.
DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
EPOCH_MS = 1_735_689_600_000
MAX_NODE = 1023
CLAIM_LEASE_MS = 30_000

# 4. The write script, as the nodes send it.
WRITE_IF_NEWER = """
local function current_version(key)
  local kind = redis.call('TYPE', key)['ok']
  if kind ~= 'string' then return nil, kind ~= 'none' end
  local value = redis.call('GET', key)
  if not value or #value < 14 then return nil end
  local version = string.sub(value, 1, 14)
  if not string.match(version, '^%u%u%u%w%w%w%w%w%w%w%w%w%w%w$') then return nil end
  return string.sub(version, 4)
end
local current, other = current_version(KEYS[1])
local version = string.sub(ARGV[1], 4, 14)
if current and current >= version then return 0 end
if KEYS[2] then
  local floor = current_version(KEYS[2])
  if floor and floor >= version then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if other then return 2 end
return 1
"""

# 1. Node numbers: the claim script.
CLAIM = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def encode_payload(payload):
    out = []
    for _ in range(11):
        out.append(DIGITS[payload % 62])
        payload //= 62
    return "".join(reversed(out))


def decode_id(text):
    if len(text) != 14 or not all("A" <= c <= "Z" for c in text[:3]):
        raise ValueError(f"not an id: {text!r}")
    payload = 0
    for c in text[3:]:
        payload = payload * 62 + DIGITS.index(c)
    if payload >= 1 << 64:
        raise ValueError(f"payload over u64::MAX: {text!r}")
    return text[:3], payload


class Minter:
    """Mints versions under a node number claimed on the server."""

    def __init__(self, r):
        self.r = r
        self.token = f"py-{os.getpid()}-{random.getrandbits(64):016x}"
        self.last = 0  # time << 12 | sequence
        self.node = None
        for node in random.sample(range(MAX_NODE + 1), MAX_NODE + 1):
            if self.r.eval(CLAIM, 1, f"ecc:node:{node}", self.token, CLAIM_LEASE_MS) == 1:
                self.node = node
                break
        if self.node is None:
            raise RuntimeError("every node number is claimed")
        # A long-lived writer renews the claim every 3 s; this one lives
        # for a few writes and releases it when done.

    def release(self):
        self.r.eval(RELEASE, 1, f"ecc:node:{self.node}", self.token)

    def mint(self, kind):
        now = max(0, int(time.time() * 1000) - EPOCH_MS)
        time_, seq = self.last >> 12, self.last & 0xFFF
        if now > time_:
            nxt = now << 12
        elif seq < 0xFFF:
            nxt = self.last + 1
        else:
            nxt = (time_ + 1) << 12
        self.last = nxt
        payload = (nxt >> 12) << 22 | self.node << 12 | (nxt & 0xFFF)
        return kind + encode_payload(payload)


# 3. The body: postcard.
def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def body(n, name):
    """postcard of `struct { n: u32, name: String }`."""
    text = name.encode("utf-8")
    return varint(n) + varint(len(text)) + text


class Table:
    def __init__(self, r, args):
        self.r = r
        self.name, self.kind, self.coherence = args.table, args.kind, args.coherence
        self.ttl_ms, self.grace_ms = args.ttl_ms, args.grace_ms
        self.tombstone_ttl_ms = args.tombstone_ttl_ms
        self.tagged = f"ecc:{{{self.name}}}:"
        # 2. The keyspace.
        self.prefix = f"ecc:{self.name}:" if args.spread else self.tagged

    def key(self, id_):
        decode_id(id_)
        return self.prefix + id_

    def stamp(self):
        """3. The schema stamp, copied from a frame a node wrote."""
        for key in self.r.scan_iter(match=self.prefix + "*", count=100):
            if self.r.type(key) != b"string":
                continue
            frame = self.r.get(key)
            if frame is None or len(frame) < 30:
                continue  # a tombstone, the flush key, gone
            try:
                kind, _ = decode_id(frame[:14].decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                continue
            if kind == self.kind:
                return frame[14:22]
        raise RuntimeError(f"no frame of table {self.name} in L2 to copy the stamp from")

    def announce(self, id_, version):
        """5. The invalidation message, by the table's mode."""
        message = f"{id_}:{version}".encode("ascii")
        assert len(message) == 29
        if self.coherence == "broadcast":
            self.r.publish(self.tagged + "coh", message)
        elif self.coherence == "durable":
            self.r.xadd(self.tagged + "log", {"m": message}, maxlen=100_000, approximate=True)
        # tracking, none: writing the key is enough (6).

    def put(self, minter, id_, n, name, stamp):
        version = minter.mint(self.kind)
        expiry = int(time.time() * 1000) + self.ttl_ms
        frame = version.encode("ascii") + stamp + expiry.to_bytes(8, "big") + body(n, name)
        px = max(1, self.ttl_ms + self.grace_ms)
        written = self.r.eval(WRITE_IF_NEWER, 1, self.key(id_), frame, px)
        self.announce(id_, version)
        return version, written

    def flush(self, minter):
        """4, 5, 6, 7. A table-wide invalidation: the table's floor, then the
        flush message (tracking: the floor's write is pushed)."""
        version = minter.mint(self.kind)
        # The longest TTL (jitter at most 0.5), the grace, the tombstones.
        px = self.ttl_ms + self.ttl_ms // 2 + self.grace_ms + self.tombstone_ttl_ms
        self.r.eval(WRITE_IF_NEWER, 1, self.prefix + "*", version.encode("ascii"), px)
        if self.coherence != "tracking":
            message = f"{self.kind}{'*' * 11}:{version}".encode("ascii")
            assert len(message) == 29
            if self.coherence == "broadcast":
                self.r.publish(self.tagged + "coh", message)
            elif self.coherence == "durable":
                self.r.xadd(self.tagged + "log", {"m": message}, maxlen=100_000, approximate=True)
        return version

    def invalidate(self, minter, id_):
        version = minter.mint(self.kind)
        tombstone = version.encode("ascii")
        written = self.r.eval(WRITE_IF_NEWER, 1, self.key(id_), tombstone, self.tombstone_ttl_ms)
        self.announce(id_, version)
        return version, written


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--table", required=True)
    p.add_argument("--kind", required=True)
    p.add_argument("--coherence", choices=["none", "tracking", "broadcast", "durable"], required=True)
    p.add_argument("--spread", action="store_true")
    p.add_argument("--ttl-ms", type=int, default=600_000)
    p.add_argument("--grace-ms", type=int, default=0)
    p.add_argument("--tombstone-ttl-ms", type=int, default=60_000)
    p.add_argument("--put", nargs=3, action="append", default=[], metavar=("ID", "N", "NAME"))
    p.add_argument("--invalidate", action="append", default=[], metavar="ID")
    p.add_argument("--flush", action="store_true", help="invalidate the whole table on every node (its floor, then the flush)")
    args = p.parse_args()

    r = redis.Redis.from_url(args.url)
    table = Table(r, args)
    minter = Minter(r)
    try:
        if args.put:
            stamp = table.stamp()
        for id_, n, name in args.put:
            version, written = table.put(minter, id_, int(n), name, stamp)
            print(f"put {id_} {version} {written}", flush=True)
        for id_ in args.invalidate:
            version, written = table.invalidate(minter, id_)
            print(f"invalidate {id_} {version} {written}", flush=True)
        if args.flush:
            version = table.flush(minter)
            print(f"flush * {version} -", flush=True)
    finally:
        minter.release()


if __name__ == "__main__":
    main()
