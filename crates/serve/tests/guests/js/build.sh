#!/bin/sh
# Builds app.js into a `wasi:http/proxy` component with componentize-js (npm,
# @bytecodealliance/componentize-js 0.19.3: StarlingMonkey inside), given as $COMPONENTIZE_JS
# (default: `componentize-js` on the PATH). Its engine exports `wasi:http` 0.2.10, so the WIT
# wasmtime-wasi-http 48.0.8 ships (0.2.12, in the cargo registry once fetched) is given to it
# relabelled 0.2.10; the interfaces it uses did not change between the two. Usage: build.sh
# OUT.wasm
set -eu
here=$(cd "$(dirname "$0")" && pwd)
wit=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/wasmtime-wasi-http-48.0.8/wit | head -1)
[ -d "$wit" ] || { echo "no wasmtime-wasi-http 48.0.8 in the cargo registry" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$wit" "$work/wit"
sed -i 's/@0\.2\.12/@0.2.10/g; s/version = 0\.2\.1[12]/version = 0.2.10/g' "$work"/wit/*.wit "$work"/wit/deps/*.wit
"${COMPONENTIZE_JS:-componentize-js}" --wit "$work/wit" --world-name wasi:http/proxy@0.2.10 \
  --out "$1" "$here/app.js"
