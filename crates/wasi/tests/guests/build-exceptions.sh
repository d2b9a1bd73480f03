#!/bin/sh
# Rebuilds exceptions.wasm and exceptions-legacy.wasm (checked in, so that tests need no
# toolchain): a C++ program that uses WebAssembly's exception handling. Debian's
# libc++abi for wasm32 is built without exceptions, so the parts of the C++ runtime that
# throw and catch (libc++abi's cxa_exception, cxa_personality and cxa_exception_storage,
# libunwind's Unwind-wasm.c) are built here from Debian's LLVM source package, with
# exceptions. Needs Debian's clang-22, lld-22, libc++-22-dev-wasm32, libc++abi-22-dev-wasm32,
# libclang-rt-22-dev-wasm32 and wasi-libc, and a deb-src entry for `apt-get source`.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source --download-only -q llvm-toolchain-19 >/dev/null
tar -xJf llvm-toolchain-19_*.orig.tar.xz --wildcards '*/libcxxabi/*' '*/libunwind/*' \
  '*/libcxx/src/include/*'
src="$(echo llvm-toolchain-19_*/)"
# Two builds: `exceptions.wasm` in the standard form (try_table, exnref), which clang 22 emits
# only when told, and `exceptions-legacy.wasm` in the legacy form (try, catch, delegate,
# rethrow), its default.
printf '\t.tagtype\t__cpp_exception i32\n\t.globl\t__cpp_exception\n__cpp_exception:\n' > tag.s
# (The tag C++ exceptions are thrown with, which this wasm-ld no longer makes itself.)
clang-22 --target=wasm32-wasi -c tag.s -o tag.o
for form in standard legacy; do
  eh="-fwasm-exceptions"
  out=exceptions-legacy
  if [ $form = standard ]; then
    eh="$eh -mllvm -wasm-use-legacy-eh=false"
    out=exceptions
  fi
  flags="--target=wasm32-wasi --sysroot=/usr $eh -Os -DNDEBUG -Wno-deprecated"
  lib="$flags -D_LIBCXXABI_HAS_NO_THREADS -D_LIBUNWIND_HAS_NO_THREADS -D_LIBUNWIND_HIDE_SYMBOLS
    -D_LIBCXXABI_BUILDING_LIBRARY -D_LIBCPP_BUILDING_LIBRARY -I${src}libcxxabi/include
    -I${src}libunwind/include -I${src}libcxx/src"
  mkdir -p $form
  clang-22 $lib -c "${src}libunwind/src/Unwind-wasm.c" -o $form/unwind.o
  for f in cxa_exception cxa_personality cxa_exception_storage; do
    clang++-22 $lib -std=c++20 -c "${src}libcxxabi/src/$f.cpp" -o "$form/$f.o"
  done
  clang++-22 $flags -Wall -Werror -c "$here/exceptions.cpp" -o $form/exceptions.o
  clang++-22 $flags -Wl,--strip-all $form/*.o tag.o -o "$here/$out.wasm"
done
