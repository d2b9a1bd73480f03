#!/bin/sh
# Builds app.py into a WASI 0.2 command component with componentize-py (PyPI, 0.25.1), with
# the WASI WIT files wasmtime-wasi 48.0.8 ships (in the cargo registry once the workspace's
# dependencies are fetched). Usage: build.sh OUT.wasm
set -eu
here=$(cd "$(dirname "$0")" && pwd)
wit=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/wasmtime-wasi-48.0.8/src/p2/wit | head -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/wit"
cp -r "$wit/deps" "$work/wit/deps"
cp "$here/world.wit" "$work/wit/world.wit"
cd "$here"
componentize-py -d "$work/wit" -w app componentize app -o "$1"
