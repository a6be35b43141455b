#!/usr/bin/env bash
# The Python package on the GPU machine, from the bundle that
# scripts/gpu-bundle.sh made: every pytest suite (the host ones under this
# machine's NumPy, the GPU ones across torch, CuPy, JAX and Numba), the
# examples, then the benchmark (the package's overhead, and the GPU hand-overs
# step by step; PY_BENCH_PARTS=overhead,host,gpu adds host memory). Run by
# gpu-run.sh; alone for the Python part only. Logs and results go to $OUT
# (default ./gpu-results).
#   --quick       the benchmark with fewer iterations (its GPU part well under a minute)
#   --bench-only  the benchmark alone
set -uo pipefail
bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${OUT:-gpu-results}
quick="" bench_only=""
for arg in "$@"; do
  case $arg in
    --quick) quick=--quick ;;
    --bench-only) bench_only=1 ;;
    *) echo "usage: $0 [--quick] [--bench-only]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
[ -f "$bundle/env.sh" ] && source "$bundle/env.sh"
export GPUBROKER_LIBRARY="$bundle/lib/libgpubroker.so.0" GPUBROKER_BIN_DIR="$bundle/bin"
export PYTHONPATH="$bundle/src/client/python" PYTHONDONTWRITEBYTECODE=1
status=0
python3 -c 'import numpy, sys; print("python", sys.version.split()[0], "numpy", numpy.__version__)' \
  | tee -a "$out/machine.txt"
if [ -z "$bench_only" ]; then
  echo "== Python tests"
  (cd "$bundle/src/tests/python" && timeout "${PYTEST_TIMEOUT:-900}" python3 -m pytest -rs -v .) \
    >"$out/python-tests.log" 2>&1 || status=1
  grep -E "PASSED|FAILED|SKIPPED|ERROR|passed|failed" "$out/python-tests.log" | tail -60
  echo "== Python examples"
  timeout 300 bash "$bundle/src/examples/python/run-all.sh" >"$out/python-examples.log" 2>&1 || status=1
  tail -20 "$out/python-examples.log"
fi
echo "== Python benchmark ${quick}"
timeout "${PY_BENCH_TIMEOUT:-600}" python3 "$bundle/src/bench/python/handover.py" $quick \
  --parts "${PY_BENCH_PARTS:-overhead,gpu}" \
  ${PY_ITERATIONS:+--iterations "$PY_ITERATIONS"} \
  --json-out "$out/bench-python.json" 2>"$out/bench-python.err" | tee "$out/bench-python.txt" \
  || status=1
tail -5 "$out/bench-python.err"
exit $status
