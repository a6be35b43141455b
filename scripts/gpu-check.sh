#!/usr/bin/env bash
# The GPU checks that fit in under ten minutes, from the bundle that
# scripts/gpu-bundle.sh made: what a change needs seen on a GPU when there is
# no time for the whole of gpu-run.sh (which takes over ten). In order, each
# with its own time limit, so that a hang costs only its step:
#   1. the GPU integration tests (gpubroker_gpu_tests);
#   2. the soak on the CUDA backend, 45 s (SOAK_SECONDS; 0 skips it): 24
#      clients of mixed calls and SIGKILLs, every read checked;
#   3. every Python suite (host and GPU), then the examples, each producer
#      and consumer pair in its own processes;
#   4. the 40 GiB VMM import and map (gpubroker-vmm-map-probe);
#   5. the Python hand-over by issue #12's steps at 64 MiB and 1 GiB (--quick);
#   6. the consumer's open and as_cupy() cut apart (consumer_steps.py);
#   7. the C++ hand-over at 64 MiB, seal + wait included (--quick);
#   8. on a GPU of more than 120 GB (an H200), the 40 GiB rows, cold and recycled.
# Logs and results go to $OUT (default ./gpu-results), and all of them in one
# archive there too (gpu-check.tar.gz, for a runner that fetches few files);
# the summary is printed.
# Exits non-zero when a test failed or a step did not finish.
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-gpu-results}
mkdir -p "$out"
source "$bundle/env.sh"
export GPUBROKER_LIBRARY="$bundle/lib/libgpubroker.so.0" GPUBROKER_BIN_DIR="$bundle/bin"
export PYTHONPATH="$bundle/src/client/python" PYTHONDONTWRITEBYTECODE=1
status=0
started=$SECONDS
step() { echo "== $1 ($((SECONDS - started)) s)"; }
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  # What makes an idle CPU slow to wake, which the hand-overs' figures
  # follow from machine to machine: the CPU, its idle states and governor.
  lscpu | sed -n 's/^Model name: *//p' | head -1
  echo "cpufreq governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null ||
    echo none)"
  echo "cpuidle driver: $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null ||
    echo none)"
  for state in /sys/devices/system/cpu/cpu0/cpuidle/state*; do
    [ -d "$state" ] || continue
    echo "  idle state $(cat "$state/name"): exit latency $(cat "$state/latency") us," \
      "disabled $(cat "$state/disable")"
  done
} | tee "$out/machine.txt"

step "GPU integration tests"
timeout 150 gpubroker_gpu_tests >"$out/gpu-tests.log" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED)  \]|^\[  SKIPPED \] [0-9]+ tests?,|Failure|Expected|Which is" \
  "$out/gpu-tests.log" | head -30
if ! grep -q "^\[  PASSED  \] [1-9]" "$out/gpu-tests.log"; then
  echo "  no GPU integration test ran (all skipped: is the GPU usable?)"
  status=1
fi

soak_seconds=${SOAK_SECONDS:-45}
if [ "$soak_seconds" -gt 0 ]; then
  step "soak on the GPU ($soak_seconds s)"
  timeout $((soak_seconds + 60)) gpubroker-soak --backend cuda --duration "$soak_seconds" \
    --clients 24 --rate 300 --log "$out/soak" --json-out "$out/soak.json" >"$out/soak.txt" 2>&1 ||
    status=1
  grep -iE "^soak|calls:|at the end|corrupt|unexpected" "$out/soak.txt" | head -20
fi

step "Python tests"
(cd "$bundle/src/tests/python" && timeout 150 python3 -m pytest -q -rs .) \
  >"$out/python-tests.log" 2>&1 || status=1
grep -E "^(FAILED|ERROR)" "$out/python-tests.log" | head -20
tail -1 "$out/python-tests.log"

step "Python examples (examples/python/run-all.sh)"
timeout 120 bash "$bundle/src/examples/python/run-all.sh" >"$out/python-examples.log" 2>&1 ||
  status=1
grep -vE "^\s*$" "$out/python-examples.log" | tail -12

step "VMM import and map of 40 GiB"
timeout 60 gpubroker-vmm-map-probe 40 3 >"$out/vmm-map-probe.txt" 2>&1 ||
  echo "  the probe did not finish: see $out/vmm-map-probe.txt"
cat "$out/vmm-map-probe.txt"

step "Python hand-over (issue #12's steps, --quick)"
timeout 150 python3 "$bundle/src/bench/python/handover.py" --quick --parts gpu \
  --gpu-sizes 64,1024 --json-out "$out/bench-python.json" \
  >"$out/bench-python.txt" 2>"$out/bench-python.err" || status=1
grep -E "targets|issue #12.s steps|us: [0-9.]+x|skipped|found the daemon asleep" "$out/bench-python.txt" | head -40
tail -3 "$out/bench-python.err"

step "The consumer's steps, cut apart (consumer_steps.py)"
timeout 60 python3 "$bundle/src/bench/python/consumer_steps.py" --iterations 100 \
  --json-out "$out/consumer-steps.json" >"$out/consumer-steps.txt" 2>&1 || status=1
cat "$out/consumer-steps.txt"

step "C++ hand-over at 64 MiB, seal + wait (--quick)"
timeout 90 gpubroker-bench --backend cuda --cases handover --sizes 64MiB --quick \
  --json-out "$out/bench-64mib.json" >"$out/bench-64mib.txt" 2>"$out/bench-64mib.err" || status=1
grep -E "hand-over|seal \+ wait|waits awake|round trip" "$out/bench-64mib.txt" | head -20
grep -h "found the daemon asleep" "$out/bench-64mib.err"
tail -3 "$out/bench-64mib.err"

memory_mb=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "${memory_mb:-0}" -gt 120000 ]; then
  left=$((570 - (SECONDS - started)))
  step "C++ hand-over at 40 GiB, cold and recycled (--quick, $left s left)"
  timeout "$left" gpubroker-bench --backend cuda --cases handover --sizes 40GiB --quick \
    --json-out "$out/bench-40gib.json" >"$out/bench-40gib.txt" 2>"$out/bench-40gib.err" ||
    status=1
  grep -E "40GiB|40 GiB|goal" "$out/bench-40gib.txt" | head -20
  tail -3 "$out/bench-40gib.err"
else
  step "the 40 GiB rows need more than this GPU's ${memory_mb:-?} MB: skipped"
fi
step "done (status $status)"
tar -czf "$out/gpu-check.tar.gz" -C "$out" --exclude gpu-check.tar.gz . 2>/dev/null || true
exit $status
