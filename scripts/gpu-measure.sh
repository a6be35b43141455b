#!/usr/bin/env bash
# The measurements of a change, in one call of under ten minutes, from the
# bundle that scripts/gpu-bundle.sh made, after which the same GPU checks as
# gpu-check.sh. In order:
#   1. the whole CUDA benchmark (--quick; the 40 GiB rows on a GPU of more
#      than 120 GB);
#   2. wake-board-ab.sh, ROUNDS rounds (4) of the WAYS ("on sleepers awake");
#   3. gpu-timeline.sh (the seal + wait cut into hops);
#   4. gpu-check.sh, with a soak of SOAK_SECONDS (15).
# Results go to $OUT (default ./gpu-results), the first three steps' again in
# measure-a.tar.gz (written before the checks start) and everything in
# measure.tar.gz, for a runner that fetches few files; a summary is printed.
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-gpu-results}
mkdir -p "$out"
source "$bundle/env.sh"
started=$SECONDS
r=$out/measure
mkdir -p "$r"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$r/gpu.txt"
memory_mb=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
sizes=4KiB,64MiB,1GiB
[ "${memory_mb:-0}" -gt 120000 ] && sizes=$sizes,40GiB
timeout 130 gpubroker-bench --backend cuda --cases all --quick --sizes "$sizes" \
  --json-out "$r/bench-all.json" >"$r/bench-all.txt" 2>"$r/bench-all.err"
echo "the whole benchmark: rc $? at $((SECONDS - started)) s" | tee -a "$r/log"
OUT=$r/ab WAYS="${WAYS:-on sleepers awake}" timeout 100 bash "$bundle/wake-board-ab.sh" \
  "${ROUNDS:-4}" >"$r/ab.txt" 2>&1
echo "wake-board-ab.sh: rc $? at $((SECONDS - started)) s" | tee -a "$r/log"
OUT=$r timeout 40 bash "$bundle/gpu-timeline.sh" >"$r/timeline-run.txt" 2>&1
echo "gpu-timeline.sh: rc $? at $((SECONDS - started)) s" | tee -a "$r/log"
tar -czf "$out/measure-a.tar.gz" -C "$r" . 2>/dev/null
OUT=$r/check SOAK_SECONDS=${SOAK_SECONDS:-15} timeout $((568 - (SECONDS - started))) \
  bash "$bundle/gpu-check.sh" >"$r/check.txt" 2>&1
status=$?
echo "gpu-check.sh: rc $status at $((SECONDS - started)) s" | tee -a "$r/log"
tar -czf "$out/measure.tar.gz" -C "$r" . 2>/dev/null
tail -12 "$r/ab/summary.txt" 2>/dev/null
grep -E "^hand-over [0-9]|seal \+ wait|variant: B waits|variant: the daemon|variant: A works|round trip after|40 ?GiB" \
  "$r/bench-all.txt" | head -30
grep -E "^== |PASSED|FAILED|passed|failed|issue #12.s steps|^soak|calls:" "$r/check.txt" | head -40
exit $status
