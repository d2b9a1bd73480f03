#!/bin/sh
# Rebuilds kotlin-hello.wasm, kotlin-hello.opt.wasm and kotlin-compute.opt.wasm (checked in,
# so that tests need no toolchain): WasmGC programs that JetBrains' Kotlin/Wasm compiler makes
# of kotlin/main.kt and kotlin/compute.kt for its WASI target, the `.opt` ones then optimised
# by Binaryen's wasm-opt with the flags the Kotlin Gradle plugin uses for production builds.
# Everything comes from npm (`kotlin-compiler`, `binaryen`, run by node); needs a JDK (17).
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack -q kotlin-compiler@2.4.20 binaryen@132.0.0 >/dev/null
mkdir kc bn
tar -xzf kotlin-compiler-2.4.20.tgz -C kc
tar -xzf binaryen-132.0.0.tgz -C bn
chmod +x kc/package/bin/*
std="$work/kc/package/lib/kotlin-stdlib-wasm-wasi.klib"
kw() { "$work/kc/package/bin/kotlinc-wasm" -Xwasm-target=wasm-wasi -libraries "$std" "$@"; }
for m in main compute; do
  kw -ir-output-dir klib -ir-output-name "$m" "$here/kotlin/$m.kt"
  kw -Xinclude="klib/$m.klib" -Xir-produce-js -ir-output-dir out -ir-output-name "$m"
done
cp out/main.wasm "$here/kotlin-hello.wasm"
for m in main compute; do
  node bn/package/bin/wasm-opt --enable-gc --enable-reference-types \
    --enable-exception-handling --enable-bulk-memory --enable-nontrapping-float-to-int \
    --enable-sign-ext --enable-multivalue --closed-world --inline-functions-with-loops \
    --traps-never-happen --fast-math --type-ssa -O3 -O3 --gufa -O3 --type-merging -O3 -Oz \
    "out/$m.wasm" -o "$work/$m.opt.wasm"
done
cp "$work/main.opt.wasm" "$here/kotlin-hello.opt.wasm"
cp "$work/compute.opt.wasm" "$here/kotlin-compute.opt.wasm"
