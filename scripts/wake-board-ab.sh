#!/usr/bin/env bash
# Seal + wait with a sleeping consumer, three ways in turn: the wake board
# with the consumer woken before the seal's frame ("on", the default), the
# board with the consumer woken after it ("after", GPUBROKER_SEAL_WAKE=after)
# and no board ("off", GPUBROKER_WAKE_BOARD=0); ROUNDS times in one go, each
# run against two idle round trips of the same run; then the medians. The
# first run on a machine that has just started reads high: use six rounds or
# more. WAYS picks and orders them; a fourth, "awake", is the board on with
# the daemon kept polling through the idle before each seal
# (GPUBROKER_BUSY_POLL_US=5000), to tell the daemon's wake-up from the rest;
# a fifth, "sleepers", the board on with the producer waking the daemon
# ahead of a seal only where a consumer sleeps for it
# (GPUBROKER_SEAL_AHEAD=sleepers, the rule before the daemon's word). The
# 64 MiB hand-over's p50 and A's seal in it are summed up too, plain and
# with A working 2 ms before its seal (the daemon asleep by then).
#   [WAYS="on after off awake"] scripts/wake-board-ab.sh [ROUNDS] [BACKEND]
#   (defaults: on after off, 6, cuda)
# On the GPU machine, from the bundle: source .device-bundle/env.sh first.
# JSON and logs go to $OUT (default ./wake-board-ab), the medians to
# summary.txt there, and all of them again in wake-board-ab.tar.gz.
set -euo pipefail
rounds=${1:-6}
backend=${2:-cuda}
out=${OUT:-wake-board-ab}
mkdir -p "$out"
bench=$(command -v gpubroker-bench || echo build/bin/gpubroker-bench)
ways=${WAYS:-on after off}
for ((r = 1; r <= rounds; r++)); do
  for way in $ways; do
    board=1 seal_wake=before ahead=daemon poll=()  # poll: the daemon's default but for "awake"
    [ "$way" = off ] && board=0
    [ "$way" = after ] && seal_wake=after
    [ "$way" = awake ] && poll=(GPUBROKER_BUSY_POLL_US=5000)
    [ "$way" = sleepers ] && ahead=sleepers
    env GPUBROKER_WAKE_BOARD=$board GPUBROKER_SEAL_WAKE=$seal_wake GPUBROKER_SEAL_AHEAD=$ahead \
      "${poll[@]}" \
      "$bench" --backend "$backend" \
      --cases handover --sizes 64MiB --quick --json-out "$out/round$r-$way.json" \
      >"$out/round$r-$way.txt" 2>"$out/round$r-$way.err"
  done
done
python3 - "$out" "$rounds" $ways <<'EOF' | tee "$out/summary.txt"
import json, statistics, sys
out, rounds, WAYS = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
SEAL = "2 x round trip after 2 ms idle"


def rows(path):
    """seal + wait (confirmed, posted): (p50 µs, ratio to two idle round trips)."""
    found = [r for r in json.load(open(path))["results"]
             if r.get("baseline", "").startswith(SEAL)]
    confirmed = next(r for r in found if r["name"].startswith("seal + wait"))
    posted = next(r for r in found if "posted" in r["name"])
    return [(r["p50_us"], r["ratio_p50"]) for r in (confirmed, posted)]


table = {way: [] for way in WAYS}
cell = lambda x: f"{x[0]:7.1f} ({x[1]:.2f}x)"
ways = ", ".join(WAYS)
print(f"round  seal + wait: {ways:40s}  posted seal: {ways}   (p50 µs, ratio)")
for r in range(1, rounds + 1):
    got = {way: rows(f"{out}/round{r}-{way}.json") for way in WAYS}
    for way in WAYS:
        table[way].append(got[way])
    print(f"{r:5d}  " + " ".join(cell(got[w][0]) for w in WAYS) + "   " +
          " ".join(cell(got[w][1]) for w in WAYS))
HANDOVER = {
    "64 MiB hand-over": ("broker share 64 MiB: Allocate+seal in A, Open+map+write in B",
                         "  of which A's seal"),
    "the same, A working 2 ms first": (
        "  variant: A works 2 ms before its seal, the daemon asleep "
        "(seal in A, Open+map+write in B)", "    of which A's seal"),
}


def handover(path, names):
    """A hand-over's p50 and A's seal in it, µs (None where absent)."""
    by_name = {r["name"]: r["p50_us"] for r in json.load(open(path))["results"]}
    return [by_name.get(name) for name in names]


for way in WAYS:
    for what, names in HANDOVER.items():
        got = [handover(f"{out}/round{r}-{way}.json", names) for r in range(1, rounds + 1)]
        if all(g[0] is not None and g[1] is not None for g in got):
            print(f"median, board {way:5s} {what}: "
                  f"{statistics.median(g[0] for g in got):7.1f} us, of which A's seal "
                  f"{statistics.median(g[1] for g in got):6.1f} us")
for way in WAYS:
    for i, what in enumerate(("seal + wait", "posted seal")):
        us = statistics.median(x[i][0] for x in table[way])
        ratio = statistics.median(x[i][1] for x in table[way])
        under = sum(x[i][1] <= 1 for x in table[way])
        print(f"median, board {way:5s} {what}: {us:7.1f} us, {ratio:.2f}x two idle round "
              f"trips; at or under 1x in {under} of {rounds}")
EOF
# Every round's files in one archive too, for a runner that fetches few files.
(cd "$out" && tar czf wake-board-ab.tar.gz round* summary.txt)
