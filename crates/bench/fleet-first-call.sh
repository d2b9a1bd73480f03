#!/bin/bash
# What a node of a fleet pays the first time it is asked for a module another node compiled:
# two `ephem serve` nodes share an object store (file://, in a temporary directory) and the
# fleet key; each module is uploaded to node A (validated and compiled there), then called twice
# on node B (the first call fetches its wasm and artifact from the store, the second finds them
# on B's disk). Prints the client's time for each, from curl.
#
#   cargo build --release -p ephem-cli
#   crates/bench/fleet-first-call.sh ../shared/corpus/quickjs.wasm:E ../shared/corpus/zstd.wasm:g
set -euo pipefail
ephem=${EPHEM:-target/release/ephem}
[ $# -gt 0 ] || { echo "usage: fleet-first-call.sh FILE:EXPORT..." >&2; exit 2; }
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
mkdir "$dir/bucket"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/key"
chmod 600 "$dir/key"
node() { # data-dir port
  "$ephem" serve --listen "127.0.0.1:$2" --data-dir "$1" --workers 1 --trap-unknown-imports \
    --object-store "file://$dir/bucket" --artifact-key "$dir/key" 2>/dev/null &
}
node "$dir/a" 9101
node "$dir/b" 9102
for port in 9101 9102; do
  until curl -sf "localhost:$port/healthz" >/dev/null; do sleep 0.1; done
done
for spec in "$@"; do
  file=${spec%:*} export=${spec##*:}
  up=$(curl -sf -o "$dir/up.json" -w '%{time_total}' -X PUT --data-binary "@$file" localhost:9101/modules)
  id=$(sed 's/.*"id":"\([0-9a-f]*\)".*/\1/' "$dir/up.json")
  call() { curl -sf -o /dev/null -w '%{time_total}' -X POST -d '[]' "localhost:9102/modules/$id/invoke/$export"; }
  first=$(call)
  second=$(call)
  echo "$(basename "$file"):$export  upload and compile on A ${up}s  first call on B (fetched) ${first}s  second call on B ${second}s"
done
