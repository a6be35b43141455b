#!/usr/bin/env bash
# The daemon's busy poll, ways in turn: the window fitted to the traffic
# ("adapt": the defaults, --busy-poll-us 100 grown up to --busy-poll-max-us
# 1000), fixed at 100 µs ("fixed", the rule before) and fixed at 1 ms ("1ms");
# ROUNDS times in one go, each the whole C++ benchmark at 4 KiB, 64 MiB and
# 1 GiB (torch.multiprocessing measured in the same run); then per way the
# medians of the hand-overs against torch.mp, seal + wait against two idle
# round trips, the turns that found the daemon asleep and what its polling
# cost. WAYS picks and orders them; BACKEND (cuda) and CASES (all) what runs.
# Then, PY_ROUNDS times (1; 0: not at all), the Python hand-over
# (bench/python/handover.py, torch -> CuPy, 64 MiB and 1 GiB) the same ways
# in turn (its --compare-busy-poll 100,100:0,1000:0).
#   [WAYS="adapt fixed 1ms"] scripts/busy-poll-ab.sh [ROUNDS] [SIZES]
#   (defaults: adapt fixed 1ms, 2, 4KiB,64MiB,1GiB)
# On the GPU machine, from the bundle: source .device-bundle/env.sh first.
# JSON and logs go to $OUT (default ./busy-poll-ab), the medians to
# summary.txt there, and all of them again in busy-poll-ab.tar.gz.
set -euo pipefail
rounds=${1:-2}
sizes=${2:-4KiB,64MiB,1GiB}
out=${OUT:-busy-poll-ab}
mkdir -p "$out"
bench=$(command -v gpubroker-bench || echo build/bin/gpubroker-bench)
ways=${WAYS-adapt fixed 1ms}  # empty: the Python part alone
for ((r = 1; r <= rounds; r++)); do
  for way in $ways; do
    case $way in
      adapt) poll=() ;;
      fixed) poll=(GPUBROKER_BUSY_POLL_MAX_US=0) ;;
      1ms) poll=(GPUBROKER_BUSY_POLL_US=1000 GPUBROKER_BUSY_POLL_MAX_US=0) ;;
      *) echo "busy-poll-ab.sh: no way '$way' (adapt, fixed, 1ms)" >&2; exit 2 ;;
    esac
    env "${poll[@]}" "$bench" --backend "${BACKEND:-cuda}" --cases "${CASES:-all}" --quick \
      --sizes "$sizes" \
      --json-out "$out/round$r-$way.json" >"$out/round$r-$way.txt" 2>"$out/round$r-$way.err" ||
      echo "round $r, $way: the benchmark failed (see $out/round$r-$way.err)" >&2
  done
done
python3 - "$out" "$rounds" $ways <<'PY' | tee "$out/summary.txt"
import json, os, re, statistics, sys
out, rounds, WAYS = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ROWS = {  # what to sum up: a row's name starts with it
    "4 KiB hand-over": "hand-over 4 KiB: Allocate+seal in A",
    "64 MiB hand-over": "hand-over 64 MiB: Allocate+seal in A",
    "1 GiB hand-over": "hand-over 1 GiB: Allocate+seal in A",
    "seal + wait": "seal + wait: A seals",
}
TURNS = re.compile(r"^gpubroker-bench: (?:hand-over at )?(\S+ \S+)(?: done;|:) turns of "
                   r"session.sock that found the daemon asleep: (\d+) of (\d+); the daemon "
                   r"polled idle ([0-9.]+) s of ([0-9.]+) s")


def read(r, way):
    """{what: (p50 µs, speed-up against its baseline)}, and per size
    (asleep share of turns, share of the case's time the daemon polled idle)."""
    path = f"{out}/round{r}-{way}.json"
    if not os.path.exists(path):
        return None, {}
    rows = {}
    for row in json.load(open(path))["results"]:
        for what, prefix in ROWS.items():
            if row["name"].startswith(prefix) and what not in rows:
                ratio = row.get("ratio_p50")
                rows[what] = (row["p50_us"], ratio, row.get("baseline", "").split(" (")[0])
    turns = {}
    for line in open(f"{out}/round{r}-{way}.err"):
        m = TURNS.match(line)
        if m:
            asleep, all_, polled, wall = (float(x) for x in m.groups()[1:])
            turns[m.group(1)] = (asleep / all_ if all_ else 0.0, polled / wall if wall else 0.0)
    return rows, turns


got = {w: [read(r, w) for r in range(1, rounds + 1)] for w in WAYS}
print("per round, p50 us (the ratio to the row's baseline: torch.mp for the hand-overs, "
      "two idle round trips for seal + wait)")
for r in range(rounds):
    for w in WAYS:
        rows, turns = got[w][r]
        if rows is None:
            print(f"  round {r + 1} {w:5s}: no results")
            continue
        cells = "  ".join(f"{what} {p50:.1f} ({ratio:.3f})" if ratio else f"{what} {p50:.1f}"
                          for what, (p50, ratio, _) in rows.items())
        polled = "  ".join(f"{size}: asleep {a:.0%}, polled {p:.0%} of the time"
                           for size, (a, p) in turns.items())
        print(f"  round {r + 1} {w:5s}: {cells}\n      {polled}")
print("medians over the rounds")
for w in WAYS:
    for what in ROWS:
        cells = [g[0][what] for g in got[w] if g[0] and what in g[0]]
        if not cells:
            continue
        p50 = statistics.median(c[0] for c in cells)
        ratios = [c[1] for c in cells if c[1]]
        how = ""
        if ratios:
            x = statistics.median(ratios)
            against = cells[0][2]
            how = (f", {1 / x:.2f}x faster than {against}" if "hand-over" in what
                   else f", {x:.2f}x {against}")
        print(f"  {w:5s} {what:17s} {p50:7.1f} us{how}")
    sizes = sorted({s for g in got[w] for s in g[1]})
    for s in sizes:
        vals = [g[1][s] for g in got[w] if s in g[1]]
        print(f"  {w:5s} {s} cases: turns asleep {statistics.median(v[0] for v in vals):.0%}, "
              f"the daemon polled idle {statistics.median(v[1] for v in vals):.0%} of the time")
PY
py_rounds=${PY_ROUNDS:-1}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -d "$here/src" ]; then  # in the bundle (scripts/gpu-bundle.sh)
  src=$here/src
  export GPUBROKER_LIBRARY="$here/lib/libgpubroker.so.0" GPUBROKER_BIN_DIR="$here/bin"
else
  src=$here/..
fi
if [ "$py_rounds" -gt 0 ]; then
  PYTHONPATH="$src/client/python" PYTHONDONTWRITEBYTECODE=1 \
    python3 "$src/bench/python/handover.py" --quick --parts gpu --gpu-sizes 64,1024 \
    --compare-busy-poll 100,100:0,1000:0 --rounds "$py_rounds" --json-out "$out/python.json" \
    >"$out/python.txt" 2>"$out/python.err" ||
    echo "the Python hand-over failed (see $out/python.err)" >&2
  grep -A20 "busy-poll comparison" "$out/python.txt" | tee -a "$out/summary.txt" || true
fi
# Every round's files in one archive too, for a runner that fetches few files.
(cd "$out" && tar czf busy-poll-ab.tar.gz summary.txt $(ls round* python.* 2>/dev/null))
