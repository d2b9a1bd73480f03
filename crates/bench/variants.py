#!/usr/bin/env python3
"""Many distinct modules from a few: the fresh-path workload where modules rarely repeat.

    variants.py make OUT_DIR N FILE.wasm...   writes N copies of each file, each made distinct by a
                                              custom section (so each compiles to its own artifact)
    variants.py summarize RESULTS.json        reads `fresh-vs-wasmtime --json` over those copies and
                                              prints, per original module, the median of the
                                              copies' medians for each runtime and their ratio

Copies are named BASE-NNN.wasm; `summarize` groups by BASE.
"""
import json
import os
import statistics
import sys
from collections import defaultdict


def leb(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def make(out_dir, n, files):
    os.makedirs(out_dir, exist_ok=True)
    for path in files:
        wasm = open(path, "rb").read()
        base = os.path.splitext(os.path.basename(path))[0]
        for i in range(n):
            name = b"ephem-variant"
            body = leb(len(name)) + name + str(i).encode()
            section = bytes([0]) + leb(len(body)) + body
            with open(os.path.join(out_dir, f"{base}-{i:03}.wasm"), "wb") as f:
                f.write(wasm + section)


def summarize(results):
    medians = defaultdict(lambda: defaultdict(list))
    for line in open(results):
        row = json.loads(line)
        if "runtime" in row:
            base = row["module"].rsplit("-", 1)[0]
            medians[base][row["runtime"]].append(row["median_ns"])
    print(f"{'module':10} {'copies':>6} {'ephem µs':>9} {'wasmtime µs':>12} {'ratio':>7}")
    for base, by in sorted(medians.items()):
        e, w = statistics.median(by["ephem"]), statistics.median(by["wasmtime"])
        print(f"{base:10} {len(by['ephem']):6} {e / 1000:9.1f} {w / 1000:12.1f} {w / e:6.1f}×")


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    elif len(sys.argv) == 3 and sys.argv[1] == "summarize":
        summarize(sys.argv[2])
    else:
        sys.exit(__doc__)
