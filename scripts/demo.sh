#!/usr/bin/env bash
# make demo: a daemon on a temporary socket directory, a producer process that
# allocates, fills and seals a named buffer, a consumer process that opens it,
# checks it and writes back; then `gpubroker status`, and everything stops.
set -euo pipefail
bin=${1:-build/bin}
dir=$(mktemp -d)
export GPUBROKER_SOCKET_DIR=$dir
cleanup() {
  [ -n "${producer:-}" ] && kill "$producer" 2>/dev/null || true
  [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

echo "== gpubrokerd on $dir"
"$bin/gpubrokerd" --socket-dir "$dir" --metrics-address 127.0.0.1:0 --log-level warn &
daemon=$!
for _ in $(seq 100); do [ -S "$dir/gpubroker.sock" ] && break; sleep 0.05; done

echo "== producer"
"$bin/gpubroker-demo-producer" demo.frame &
producer=$!
echo "== consumer"
"$bin/gpubroker-demo-consumer" demo.frame
sleep 0.2
echo "== gpubroker ls"
"$bin/gpubroker" ls
echo "== gpubroker status"
"$bin/gpubroker" status
kill -TERM "$producer"
wait "$producer"
producer=
kill -TERM "$daemon"
wait "$daemon"
daemon=
echo "== done"
