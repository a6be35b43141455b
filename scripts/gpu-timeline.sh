#!/usr/bin/env bash
# The seal + wait and the hand-over's seal of the CUDA benchmark cut into
# hops, from the bundle that
# scripts/gpu-bundle.sh made: gpubroker-bench runs its 64 MiB hand-over cases
# with libgpubroker-timeline.so loaded in every process (the benchmark, its
# peer, the daemon it starts), and bench/timeline.py says who slept, who woke
# when and who worked how long between A's seal and B's Open returning, and
# whether A's seal woke the daemon ahead of its frame.
# Results go to $OUT (default ./gpu-results): bench-timeline.txt (the
# benchmark's own table), timeline.txt (the hops).
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-gpu-results}
mkdir -p "$out"
source "$bundle/env.sh"
records=$(mktemp -d)
GPUBROKER_TIMELINE_DIR=$records LD_PRELOAD="$bundle/lib/libgpubroker-timeline.so" \
  timeout "${TIMEOUT:-120}" gpubroker-bench --backend cuda --cases handover --sizes 64MiB --quick \
  >"$out/bench-timeline.txt" 2>"$out/bench-timeline.err"
status=$?
grep -E "seal \+ wait|waits awake|round trip|broker share 64|A works 2 ms|of which A.s seal" "$out/bench-timeline.txt"
{
  python3 "$bundle/timeline.py" "$records"
  python3 "$bundle/timeline.py" "$records" --show 40 | sed -n '/^seal + wait #40, mark 12/,/^seal + wait, /p'
} >"$out/timeline.txt" 2>&1 || status=1
cat "$out/timeline.txt"
rm -rf "$records"
exit $status
