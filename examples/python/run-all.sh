#!/usr/bin/env bash
# Runs each producer/consumer pair against a daemon on a temporary directory
# (GPU pairs need a GPU and their frameworks; others are skipped, saying so).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${GPUBROKER_BIN_DIR:?set GPUBROKER_BIN_DIR to the directory of gpubrokerd}
export GPUBROKER_SOCKET_DIR=$(mktemp -d)
"$bin/gpubrokerd" --socket-dir "$GPUBROKER_SOCKET_DIR" --metrics-address 127.0.0.1:0 \
  --log-level warn >/dev/null &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$GPUBROKER_SOCKET_DIR"' EXIT
for _ in $(seq 100); do [ -S "$GPUBROKER_SOCKET_DIR/gpubroker.sock" ] && break; sleep 0.05; done
status=0
pair() {  # producer consumer modules...
  local producer=$1 consumer=$2; shift 2
  for m in "$@"; do
    python3 -c "import $m" 2>/dev/null || { echo "== $producer -> $consumer: skipped (no $m)"; return; }
  done
  echo "== $producer -> $consumer"
  # The producer waits on stdin (a pipe) for Enter once the consumer has run.
  local fifo="$GPUBROKER_SOCKET_DIR/$producer.in"
  mkfifo "$fifo"
  python3 "$here/$producer.py" <"$fifo" &
  local p=$!
  exec 3>"$fifo"
  python3 "$here/$consumer.py" || status=1
  echo >&3
  exec 3>&-
  wait $p || status=1
}
pair torch_producer cupy_consumer torch cupy
pair cupy_producer jax_consumer cupy jax
pair numpy_producer torch_consumer numpy torch
exit $status
