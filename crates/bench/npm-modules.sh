#!/bin/sh
# Fetches real modules that other toolchains built, as published on the npm registry, into DIR
# (never kept in the repository): the set the fresh-path benchmarks in BENCHMARKS.md ran on.
# Versions are pinned and every module's SHA-256 is checked. SET is `fresh` (the default), the
# modules the fresh-path benchmarks run; `more`, four Rust builds and three Emscripten ones that
# ephem was not tuned on (docs/bench-log/fresh-path-16-new-modules-growing-memories.md); or
# `simd`, SIMD builds (TensorFlow.js's XNNPACK backend, libwebp's encoder, ONNX Runtime) whose
# compile time is compared with wasmtime's.
#
#   crates/bench/npm-modules.sh /tmp/npm-modules
#   cargo run --release -p ephem-bench-wasmtime --bin fresh-vs-wasmtime -- /tmp/npm-modules/*.wasm
#   crates/bench/npm-modules.sh /tmp/npm-more more
#   crates/bench/npm-modules.sh /tmp/npm-simd simd
#   cargo run --release -p ephem-bench-wasmtime --bin compile-vs-wasmtime -- /tmp/npm-simd/*.wasm
set -eu
dir=${1:?usage: npm-modules.sh DIR [fresh|more|simd]}
set=${2:-fresh}
mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fresh="go-esbuild esbuild-wasm 0.28.2 esbuild.wasm b1831a5c0f6cf688034fb94d0419812f165ea316a3380d3fc00a151e562d2eaf
as-sha256 @chainsafe/as-sha256 1.2.5 build/optimized.wasm 64307e954d4f197aee489e97db4324f92c133d09acd2b275fd2bafe6c6bba2d1
as-chacha20poly1305 @chainsafe/as-chacha20poly1305 0.1.0 build/optimized.wasm 7c52d6ea286c6445517871eb608d2ffddebb59bcd9c05c65653d4343449ea388
emcc-sqljs sql.js 1.16.0 dist/sql-wasm.wasm 43bbcdd44287e5a2db3b6b5af34b1a3485a7a441285d247976c1ebe3c61f8dbf
rust-brotli brotli-wasm 3.0.1 pkg.node/brotli_wasm_bg.wasm 6d5e77ad86911b665421dc98e6cedecb0977637afe5cf73d574758d9a2cade90
"
more="emcc-pglite @electric-sql/pglite 0.5.16 dist/pglite.wasm 5256d9ac379f631355f41ab30291e6a6d9f854242b5ee2a2d0940e28041d3fca
emcc-sqlite3 @sqlite.org/sqlite-wasm 3.41.2 sqlite-wasm/jswasm/sqlite3.wasm 2d34bf9279985db154f98bfab9ffa289b014821873ed188b67e3a4c5d1b7faec
rust-lightningcss lightningcss-wasm 1.33.0 lightningcss_node.wasm 479c64bb651164b6fd9a834055e65ab507d3e39f8d8a8b683b7e83787a69e7b1
rust-resvg @resvg/resvg-wasm 2.6.2 index_bg.wasm 22bf6e9f9a100d972da0411a69c5ba504367fc1fa87b3b64e3f35e53926d2d70
rust-swc @swc/wasm 1.16.18 wasm_bg.wasm 67659614a2ca8504a8b33f4e3f261489bd9b700dd12058894b22788a3c61eda5
yoga yoga-wasm-web 0.3.3 dist/yoga.wasm 47fb4f81d274932184cd19c75ed34f902d13f0519301590789a37f7077977e27
rust-biome @biomejs/wasm-nodejs 2.5.14 biome_wasm_bg.wasm 898927f0cd131b7679810555c75a4814eb8fe85d067fbf40ac24d8fa3f306554
"
simd="tfjs-simd @tensorflow/tfjs-backend-wasm 4.22.0 dist/tfjs-backend-wasm-simd.wasm 77ebb28a6d34f371dbbf2086b7f2de8994acd8ea5a3cf1fa24d2c26c840cac7b
webp-enc-simd @jsquash/webp 1.4.0 codec/enc/webp_enc_simd.wasm 39c279269ec1163b987b6d69749458e3d5b03b9585f58b6ca5455b76b504a305
ort-simd onnxruntime-web 1.17.0 dist/ort-wasm-simd.wasm b8e08159bc38ca9f90d1b3356a9ef2711506aab1d20570c9812670d10e772187
"
case $set in
  fresh) list=$fresh ;;
  more) list=$more ;;
  simd) list=$simd ;;
  *) echo "npm-modules.sh: unknown set $set (fresh, more or simd)" >&2; exit 2 ;;
esac

# name  package  version  path in the tarball  sha256
while read -r name package version path sum; do
  [ -n "$name" ] || continue
  tarball="https://registry.npmjs.org/$package/-/$(basename "$package")-$version.tgz"
  mkdir -p "$work/$name"
  curl -fsSL "$tarball" | tar xz -C "$work/$name"
  cp "$work/$name/package/$path" "$dir/$name.wasm"
  echo "$sum  $dir/$name.wasm" | sha256sum -c --quiet
  echo "$dir/$name.wasm: $package $version ($path)"
done <<EOF
$list
EOF
