#!/usr/bin/env bash
# Packs what the GPU run needs (daemon, CLI, tests, helper, benchmark and the
# libraries they load) into a folder that travels to a GPU machine, stripped
# to fit. Usage: scripts/gpu-bundle.sh BUNDLER [BUILD_DIR] [OUT_DIR]
#   BUNDLER: the device-bundle tool (gathers programs and their libraries)
set -euo pipefail
bundler=$1
build=${2:-build}
out=${3:-.device-bundle}
"$bundler" "$out" "$build/bin" "$build/lib" bench/torch_mp_baseline.py \
  bench/torch_alloc_baseline.py bench/gpubroker_ctypes.py bench/plot_latency.py scripts/gpu-run.sh \
  scripts/gpu-run-python.sh scripts/gpu-check.sh scripts/gpu-pin-probe.sh \
  scripts/gpu-timeline.sh bench/timeline.py scripts/wake-board-ab.sh scripts/gpu-measure.sh \
  scripts/busy-poll-ab.sh
strip --strip-unneeded "$out"/bin/* "$out"/lib/*.so* 2>/dev/null || true
# The Python package, its tests, examples and benchmark, laid out as in the
# repository (the tests find the package's sources relative to themselves).
mkdir -p "$out/src/client" "$out/src/tests" "$out/src/examples" "$out/src/bench"
cp -r client/python "$out/src/client/"
cp -r tests/python "$out/src/tests/"
cp -r examples/python "$out/src/examples/"
cp -r bench/python "$out/src/bench/"
find "$out/src" -name __pycache__ -prune -exec rm -rf {} +
du -sh "$out"
