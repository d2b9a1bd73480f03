#!/usr/bin/env python3
"""Writes a large valid wasm module to stdout, for benchmarking very large texts.

Usage: gen_big.py FUNCS REPEATS > big.wasm

FUNCS functions of type (i32) -> i32, each REPEATS blocks of straight-line arithmetic and a memory
load, each calling the previous one; `run` (the last) runs every function once. One page of memory
with a 4 KiB data segment. 600 x 1000 gives about 10 MiB of x86_64 code, 1200 x 1000 about 20 MiB.
"""
import sys


def uleb(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def sleb(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if (n == 0 and not b & 0x40) or (n == -1 and b & 0x40):
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def section(id, body):
    return bytes([id]) + uleb(len(body)) + body


def vec(items):
    return uleb(len(items)) + b"".join(items)


def main():
    nfuncs, reps = int(sys.argv[1]), int(sys.argv[2])
    i32 = b"\x7f"
    types = section(1, vec([b"\x60" + vec([i32]) + vec([i32])]))
    funcs = section(3, vec([uleb(0)] * nfuncs))
    memory = section(5, vec([b"\x00" + uleb(1)]))
    exports = section(7, vec([uleb(3) + b"run" + b"\x00" + uleb(nfuncs - 1)]))
    bodies = []
    for f in range(nfuncs):
        code = bytearray()
        for r in range(reps):
            c = (f * 7919 + r * 104729) & 0xFFFF
            # x = load((x * c) & 0xffc) + x
            code += b"\x20\x00\x41" + sleb(c) + b"\x6c\x41" + sleb(0xFFC) + b"\x71"
            code += b"\x28\x02\x00\x20\x00\x6a\x21\x00"
        if f > 0:
            code += b"\x20\x00\x10" + uleb(f - 1) + b"\x21\x00"
        code += b"\x20\x00\x0b"
        body = b"\x00" + bytes(code)
        bodies.append(uleb(len(body)) + body)
    code_section = section(10, uleb(nfuncs) + b"".join(bodies))
    data = section(11, vec([b"\x00\x41\x00\x0b" + uleb(4096) + bytes(i % 256 for i in range(4096))]))
    sys.stdout.buffer.write(b"\0asm\x01\0\0\0" + types + funcs + memory + exports + code_section + data)


main()
