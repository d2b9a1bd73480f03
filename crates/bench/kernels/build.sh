#!/bin/sh
# Rebuilds kernels.wasm from kernels.c (Debian: apt-get install clang lld).
set -e
cd "$(dirname "$0")"
clang --target=wasm32 -O2 -nostdlib -Wl,--no-entry -Wl,--export-dynamic -o kernels.wasm kernels.c
