#!/bin/sh
# Rebuilds threads.wasm (checked in, so that tests need no toolchain): a C program for
# wasm32-wasip1-threads (wasi-threads, -pthread). Debian's wasi-libc has no threads build, so
# wasi-libc is built here for that target from its source (https://github.com/WebAssembly/wasi-libc,
# any commit with the CMake build, e.g. 476bd3c2), given as the first argument. Needs Debian's
# clang-22, lld-22 and libclang-rt-22-dev-wasm32, and cmake and ninja (PyPI's will do).
# threads.stdout.expected is what `wasmtime run -W threads=y -S threads=y threads.wasm`
# printed (wasmtime 36.0.9: later versions dropped wasi-threads from their CLI).
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "$1" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_C_COMPILER=clang-22 \
  -DCMAKE_AR=llvm-ar-22 -DTARGET_TRIPLE=wasm32-wasip1-threads \
  -DCMAKE_INSTALL_PREFIX="$work/sysroot" -DBUILD_TESTS=OFF >/dev/null
ninja -C "$work/build" install >/dev/null
clang-22 --target=wasm32-wasip1-threads --sysroot="$work/sysroot" -pthread -O2 -Wall -Werror -s \
  "$here/threads.c" -o "$here/threads.wasm" \
  -Wl,--import-memory,--export-memory,--max-memory=67108864
