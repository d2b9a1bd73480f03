#!/bin/sh
# Rebuilds heapsort32.wasm and heapsort64.wasm (checked in) from heapsort.c: the same C for
# clang's wasm32 and wasm64 targets, freestanding. Needs Debian's clang-22 and lld-22.
set -eu
cd "$(dirname "$0")"
for bits in 32 64; do
  clang-22 --target=wasm$bits -O2 -nostdlib -Wl,--no-entry -Wl,--export=_start \
    -Wl,--export=result -Wl,--export-memory -Wl,--allow-undefined heapsort.c -o heapsort$bits.wasm
done
