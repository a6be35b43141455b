#!/usr/bin/env bash
# The daemon pinned to one CPU (the last) against unpinned, in turn, two
# rounds each, under the C++ 64 MiB hand-over cases (seal + wait, the idle
# round trip and the batch opens among them), from the bundle that
# scripts/gpu-bundle.sh made. Results in $OUT (default ./pin-results); the
# rows that matter are printed. docs/performance.md, "Posted opens, and the
# daemon pinned to a CPU", is a run of it.
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$bundle/env.sh"
out=${OUT:-pin-results}
mkdir -p "$out"
cpus=$(nproc)
pin=$((cpus - 1))
for round in 1 2; do
  for mode in unpinned pinned; do
    dir=$(mktemp -d)
    if [ $mode = pinned ]; then
      taskset -c $pin gpubrokerd --socket-dir "$dir" --metrics-address 127.0.0.1:0 --backend cuda \
        >"$out/daemon-$mode-$round.log" 2>&1 &
    else
      gpubrokerd --socket-dir "$dir" --metrics-address 127.0.0.1:0 --backend cuda \
        >"$out/daemon-$mode-$round.log" 2>&1 &
    fi
    d=$!
    for i in $(seq 300); do [ -S "$dir/gpubroker.sock" ] && break; sleep 0.05; done
    timeout 100 gpubroker-bench --backend cuda --socket-dir "$dir" --cases handover \
      --sizes 64MiB --quick >"$out/bench-$mode-$round.txt" 2>"$out/bench-$mode-$round.err"
    echo "== $mode, round $round (daemon on CPU $([ $mode = pinned ] && echo $pin || echo any))"
    grep -E "seal \+ wait|round trip after|^hand-over 64|batch open|one open after" \
      "$out/bench-$mode-$round.txt" | head -12
    kill $d; wait $d 2>/dev/null
    rm -rf "$dir"
  done
done
