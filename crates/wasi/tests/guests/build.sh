#!/bin/sh
# Rebuilds the WASI test guests (checked in, so that tests need no toolchain): Debian's
# clang, lld, wasi-libc and libclang-rt-*-dev-wasm32.
set -eu
cd "$(dirname "$0")"
for src in *.c; do
  # threads.c is built for wasm32-wasip1-threads by build-threads.sh.
  [ "$src" = threads.c ] && continue
  # simd.c is the SIMD guest: intrinsics, and loops clang vectorises.
  simd=""
  [ "$src" = simd.c ] && simd=-msimd128
  clang --target=wasm32-wasi --sysroot=/usr -O2 $simd -Wall -Werror -s "$src" -o "${src%.c}.wasm"
done
