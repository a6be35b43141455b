#!/usr/bin/env bash
# Seal + wait with a sleeping consumer, with and without the wake board in
# turn (GPUBROKER_WAKE_BOARD=1, then 0), ROUNDS times in one go, each run
# against two idle round trips of the same run; then the medians. The first
# run on a machine that has just started reads high: use six rounds or more.
#   scripts/wake-board-ab.sh [ROUNDS] [BACKEND]   (defaults: 6, cuda)
# On the GPU machine, from the bundle: source .device-bundle/env.sh first.
# JSON and logs go to $OUT (default ./wake-board-ab).
set -euo pipefail
rounds=${1:-6}
backend=${2:-cuda}
out=${OUT:-wake-board-ab}
mkdir -p "$out"
bench=$(command -v gpubroker-bench || echo build/bin/gpubroker-bench)
for ((r = 1; r <= rounds; r++)); do
  for board in 1 0; do
    GPUBROKER_WAKE_BOARD=$board "$bench" --backend "$backend" --cases handover --sizes 64MiB \
      --quick --json-out "$out/round$r-board$board.json" >"$out/round$r-board$board.txt" \
      2>"$out/round$r-board$board.err"
  done
done
python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
SEAL = "2 x round trip after 2 ms idle"


def rows(path):
    """seal + wait (confirmed, posted): (p50 µs, ratio to two idle round trips)."""
    found = [r for r in json.load(open(path))["results"]
             if r.get("baseline", "").startswith(SEAL)]
    confirmed = next(r for r in found if r["name"].startswith("seal + wait"))
    posted = next(r for r in found if "posted" in r["name"])
    return [(r["p50_us"], r["ratio_p50"]) for r in (confirmed, posted)]


table = {1: [], 0: []}
print("round  seal + wait: board on, off    posted seal: board on, off   (p50 µs, ratio)")
for r in range(1, rounds + 1):
    on, off = rows(f"{out}/round{r}-board1.json"), rows(f"{out}/round{r}-board0.json")
    table[1].append(on)
    table[0].append(off)
    cell = lambda x: f"{x[0]:7.1f} ({x[1]:.2f}x)"
    print(f"{r:5d}  {cell(on[0])} {cell(off[0])}   {cell(on[1])} {cell(off[1])}")
for board, name in ((1, "on"), (0, "off")):
    for i, what in enumerate(("seal + wait", "posted seal")):
        us = statistics.median(x[i][0] for x in table[board])
        ratio = statistics.median(x[i][1] for x in table[board])
        under = sum(x[i][1] <= 1 for x in table[board])
        print(f"median, board {name:3s} {what}: {us:7.1f} us, {ratio:.2f}x two idle round "
              f"trips; at or under 1x in {under} of {rounds}")
EOF
