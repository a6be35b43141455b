#!/usr/bin/env bash
# Runs on the GPU machine, from the bundle that scripts/gpu-bundle.sh made:
# the CUDA instances of the typed backend suites, the GPU integration tests,
# and the CUDA benchmark on both small-buffer paths. Logs and results go to
# $OUT (default ./gpu-results).
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-gpu-results}
mkdir -p "$out"
source "$bundle/env.sh"
status=0
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo "torch: none"
} | tee "$out/machine.txt"

echo "== typed backend suites on cuda-arena, cuda-pool and cuda-vmm"
gpubroker_unit_tests --gtest_filter='*cuda*' >"$out/unit-cuda.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/unit-cuda.log" | sort | uniq -c | sed 's/^/  /'
grep -E "^\[  FAILED  \]" "$out/unit-cuda.log" | head -20
# On the GPU machine every CUDA instance must run: a suite that skipped them all proves nothing.
if grep -q "^\[  SKIPPED \]" "$out/unit-cuda.log" && ! grep -q "^\[  PASSED  \] [1-9]" "$out/unit-cuda.log"; then
  echo "  no CUDA test ran (all skipped): see $out/unit-cuda.log"; status=1
fi

echo "== GPU integration tests"
gpubroker_gpu_tests >"$out/gpu-tests.log" 2>&1 || status=1
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|\[   info   \]" "$out/gpu-tests.log"
grep -E "Failure|Expected|Which is|got:" "$out/gpu-tests.log" | head -40
if ! grep -q "^\[  PASSED  \] [1-9]" "$out/gpu-tests.log"; then
  echo "  no GPU integration test ran: see $out/gpu-tests.log"; status=1
fi

# The benchmark: every case on the default path (arena), in one run of a few
# minutes (--quick; ITERATIONS=N for more samples), then the hand-overs alone
# on the pool path. Each says how long it took.
for path in arena pool; do
  suffix=$([ "$path" = arena ] && echo "" || echo "-$path")
  cases=$([ "$path" = arena ] && echo all || echo handover)
  samples=(--quick)
  [ -n "${ITERATIONS:-}" ] && samples=(--iterations "$ITERATIONS" --warmup 20)
  echo "== benchmark (small buffers: $path, cases: $cases, ${samples[*]})"
  started=$SECONDS
  timeout "${BENCH_TIMEOUT:-420}" gpubroker-bench --backend cuda --small-buffers "$path" \
    --cases "$cases" "${samples[@]}" --json-out "$out/bench-cuda$suffix.json" \
    2>"$out/bench-cuda$suffix.err" | tee "$out/bench-cuda$suffix.txt" || status=1
  echo "  benchmark ($path) took $((SECONDS - started)) s" | tee -a "$out/bench-cuda$suffix.txt"
  grep -E "no progress|failed|skipped|unusable" "$out/bench-cuda$suffix.err"
done
# How long importing and mapping 40 GiB takes, by alignment, and as several
# allocations mapped from several threads (a diagnostic: the cold 40 GiB
# share is two such maps).
echo "== VMM import and map of 40 GiB (gpubroker-vmm-map-probe)"
timeout 120 gpubroker-vmm-map-probe "${MAP_PROBE_GIB:-40}" 3 >"$out/vmm-map-probe.txt" 2>&1 ||
  echo "  the probe failed: see $out/vmm-map-probe.txt"
cat "$out/vmm-map-probe.txt"
# Latency against size (docs/latency-vs-size.png), where matplotlib is installed.
if python3 -c 'import matplotlib' 2>/dev/null && [ -s "$out/bench-cuda.json" ]; then
  python3 "$bundle/plot_latency.py" "$out/bench-cuda.json" "$out/latency-vs-size.png" &&
    echo "== plot: $out/latency-vs-size.png"
fi
# The Python package: its tests, examples and benchmark (gpu-run-python.sh).
bash "$bundle/gpu-run-python.sh" || status=1
# The soak on the GPU: 16 clients of mixed calls and SIGKILLs for SOAK_SECONDS
# (60 by default, to keep the run short; 600 is the full soak; 0 skips it):
# nothing may leak, descriptors and RSS stay flat.
if [ "${SOAK_SECONDS:-60}" != 0 ]; then
  echo "== soak on the GPU (${SOAK_SECONDS:-60} s)"
  gpubroker-soak --backend cuda --duration "${SOAK_SECONDS:-60}" --log "$out/soak" \
    --json-out "$out/soak.json" >"$out/soak.txt" 2>&1 || status=1
  tail -12 "$out/soak.txt"
fi
exit $status
