#!/bin/sh
# Builds app.py into a `wasi:http/proxy` component with componentize-py (PyPI, 0.25.1), with
# the WIT files wasmtime-wasi-http 48.0.8 ships (in the cargo registry once fetched: `cargo
# fetch` of a crate depending on it). Usage: build.sh OUT.wasm
set -eu
here=$(cd "$(dirname "$0")" && pwd)
wit=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/wasmtime-wasi-http-48.0.8/wit | head -1)
[ -d "$wit" ] || { echo "no wasmtime-wasi-http 48.0.8 in the cargo registry" >&2; exit 2; }
cd "$here"
componentize-py -d "$wit" -w wasi:http/proxy@0.2.12 componentize app -o "$1"
