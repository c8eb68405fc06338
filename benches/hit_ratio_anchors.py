#!/usr/bin/env python3
"""The libCacheSim algorithms beside `benches/hit_ratio.rs`'s engines.

Replays each trace the bench wrote (`HIT_RATIO_TRACES=dir cargo bench
--bench hit_ratio`: `dir/<family>-<capacity>.oracleGeneral`, and the
bench's own figures in `dir/rust.tsv`) through LRU, ARC, LIRS, 2Q, S3-FIFO,
SIEVE, W-TinyLFU (libCacheSim's: a 1 % LRU window, an SLRU main),
ClockPro, Cacheus and LeCaR at the trace's capacity, and prints one table:
every engine's hit ratio (%), Belady's bound, and echo-cache's points
against the best engine but Belady.

    pip install libcachesim
    python3 benches/hit_ratio_anchors.py /tmp/traces

Not part of any test command.
"""

import csv
import os
import sys

import libcachesim as lcs

ALGORITHMS = [
    ("LRU", lambda c: lcs.LRU(c)),
    ("ARC", lambda c: lcs.ARC(c)),
    ("LIRS", lambda c: lcs.LIRS(c)),
    ("2Q", lambda c: lcs.TwoQ(c)),
    ("S3-FIFO", lambda c: lcs.S3FIFO(c)),
    ("SIEVE", lambda c: lcs.Sieve(c)),
    ("W-TinyLFU", lambda c: lcs.WTinyLFU(c)),
    ("ClockPro", lambda c: lcs.ClockPro(c)),
    ("Cacheus", lambda c: lcs.Cacheus(c)),
    ("LeCaR", lambda c: lcs.LeCaR(c)),
]
FAMILIES = ["zipf 0.8", "zipf 0.99", "scan + zipf", "loop", "recency", "moving"]


def ratio(name, make, path, capacity):
    """The hit ratio (%) of one algorithm on one trace, or None."""
    try:
        reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
        cache = make(capacity)
        miss, _ = cache.process_trace(reader)
        return 100.0 * (1.0 - miss)
    except Exception as error:  # an algorithm this build lacks
        print(f"{name}: {error}", file=sys.stderr)
        return None


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "/tmp/traces"
    rust = {}
    with open(os.path.join(folder, "rust.tsv")) as tsv:
        for row in csv.DictReader(tsv, delimiter="\t"):
            rust[(row["trace"], int(row["rows"]))] = row
    names = ["belady", "echo-cache", "moka", "quick_cache"] + [a for a, _ in ALGORITHMS]
    print("hit ratio (%); echo-best: echo-cache's points against the best but Belady")
    print(f"{'trace':<12} {'rows':>7} | " + " ".join(f"{n:>10}" for n in names)
          + f" | {'best':>14} {'echo-best':>9}")
    capacities = sorted({rows for _, rows in rust})
    for capacity in capacities:
        for family in FAMILIES:
            if (family, capacity) not in rust:
                continue
            row = rust[(family, capacity)]
            figures = {n: float(row[n]) for n in ["belady", "echo-cache", "moka", "quick_cache"]}
            path = os.path.join(
                folder, f"{family.replace(' ', '').replace('+', '')}-{capacity}.oracleGeneral")
            for name, make in ALGORITHMS:
                figures[name] = ratio(name, make, path, capacity)
            peers = {n: v for n, v in figures.items()
                     if n not in ("belady", "echo-cache") and v is not None and v == v}
            best = max(peers, key=peers.get)
            cells = " ".join(
                f"{figures[n]:>10.2f}" if figures[n] is not None else f"{'-':>10}" for n in names)
            print(f"{family:<12} {capacity:>7} | {cells} | {best:>10} {peers[best]:>5.2f}"
                  f" {figures['echo-cache'] - peers[best]:>+9.2f}", flush=True)


if __name__ == "__main__":
    main()
