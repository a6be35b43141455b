"""The Python benchmark runs here (host memory, a few iterations) and its
breakdown accounts for the time: what the GPU run prints is the same code."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "python" / "handover.py"


def test_handover_breakdown_adds_up_and_keeps_releases_out_of_the_window(tmp_path):
    out = tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--parts", "overhead,host", "--host-sizes", "1",
         "--iterations", "8", "--warmup", "2", "--copy-iterations", "1", "--channel-wait", "both",
         "--json-out", str(out)],
        capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(out.read_text())

    ops = {t["op"]: t for t in report["overhead_host"]}
    assert set(ops) == {"allocate", "seal", "open", "wrap", "release"}
    assert all(t["package_p50_us"] > 0 and t["c_abi_p50_us"] > 0 for t in ops.values())

    cases = report["handover"]["host"]["sizes"]["1 MiB"]
    expected = {"broker-cupy", "broker-posted-cupy", "broker-postedopen-cupy", "broker-wait-cupy",
                "broker-waitawake-cupy", "broker-waitdaemon-cupy", "broker-ticket-cupy", "pipe-ping",
                "copy"}
    if importlib.util.find_spec("torch") is not None:
        expected |= {"broker-torch", "tmp-pipe-cupy", "tmp-pipe-torch", "tmp-queue-torch",
                     "queue-ping"}  # fmt: skip
    assert set(cases) == expected
    for name, c in cases.items():
        assert c["total"]["n"] == (1 if name == "copy" else 8), name
        # Each iteration's steps add up to its total: nothing is left out.
        assert abs(c["mean_of_steps_sum_us"] - c["mean_total_us"]) < 0.05, (name, c)
        assert c["total"]["p50_us"] > 0, name
        assert all(s["p50_us"] >= 0 or s["case"].startswith("wake-up") for s in c["steps"]), c
    # B releases (or drops) after its answer, outside the timed window, in
    # the broker's cases as in torch.multiprocessing's.
    for name in ("broker-cupy", "broker-posted-cupy", "broker-postedopen-cupy", "broker-wait-cupy",
                 "broker-waitawake-cupy", "broker-waitdaemon-cupy", "broker-ticket-cupy"):
        steps = [s["case"] for s in cases[name]["steps"]]
        after = [s["case"] for s in cases[name]["after"]]
        assert not any("release" in s for s in steps), steps
        assert "B: release (after answering)" in after, after
        if name == "broker-ticket-cupy":  # no name, no open: the Buffer is in the message
            assert "A: pickle (ticket)" in steps and "B: unpickle (claim)" in steps, steps
            assert not any("open" in s for s in steps), steps
        else:
            assert "B: open" in steps or any("open(wait)" in s for s in steps), steps
    if "tmp-pipe-torch" in cases:
        assert "B: drop the tensor (after answering)" in [s["case"] for s in
                                                          cases["tmp-pipe-torch"]["after"]]
    # The channel's own round trip is measured in the same run.
    assert cases["pipe-ping"]["total"]["p50_us"] < cases["broker-cupy"]["total"]["p50_us"]
    # Issue #12's definition of the hand-over, on both sides: a part of the
    # full window, made of the steps it names and nothing else.
    for name in ("broker-cupy", "broker-posted-cupy", "broker-postedopen-cupy", "broker-wait-cupy",
                 "broker-waitawake-cupy", "broker-waitdaemon-cupy", "broker-ticket-cupy", "copy") + (
            ("broker-torch", "tmp-pipe-cupy", "tmp-pipe-torch") if "tmp-pipe-cupy" in cases else ()):
        c = cases[name]
        assert 0 < c["issue_window"]["p50_us"] < c["total"]["p50_us"], (name, c)
    assert "issue_window" not in cases["pipe-ping"]
    ratios = report["handover"]["host"]["ratios"]["1 MiB"]
    assert "broker-cupy vs copy" in ratios
    assert "issue: broker-cupy vs copy" in ratios
    if "tmp-pipe-cupy" in cases:
        assert "issue: broker-cupy vs tmp-pipe-cupy" in ratios
        assert "issue: broker-posted-cupy vs tmp-pipe-cupy" in ratios
        assert "issue: broker-postedopen-cupy vs tmp-pipe-cupy" in ratios
        assert "broker-ticket-cupy vs tmp-pipe-cupy" in ratios
        assert "issue: broker-ticket-cupy vs tmp-pipe-cupy" in ratios
    assert "hand-over of host memory" in run.stdout.lower()
    # The daemon's own time per call, read off its metrics around the run:
    # at least a publish and an open per broker hand-over.
    calls = report["handover"]["host"]["daemon_time_per_call"]["1 MiB"]
    # Beside them, how many of the daemon's turns that served them found it
    # asleep: one turn at least per publish and per open.
    turns = calls.pop("turns")
    assert turns["of"] >= 16 and 0 <= turns["asleep"] <= turns["of"], turns
    assert "turns of session.sock that found the daemon asleep" in run.stdout
    assert calls["publish"]["calls"] >= 8 and calls["open"]["calls"] >= 8, calls
    # The ticket case's: a hold (A's pickle) and a claim (B's unpickle) per hand-over.
    assert calls["hold"]["calls"] >= 8 and calls["claim"]["calls"] >= 8, calls
    assert all(v["mean_us"] > 0 for v in calls.values()), calls
    assert "the daemon's own time per call on session.sock" in run.stdout
    # The same cases again with both processes polling their channel: every
    # case, its steps adding up the same way.
    asleep, awake = report["handover"]["host"], report["handover"]["host-awake"]
    assert (asleep["channel_wait"], awake["channel_wait"]) == ("asleep", "awake")
    assert set(awake["sizes"]["1 MiB"]) == expected
    for name, c in awake["sizes"]["1 MiB"].items():
        assert abs(c["mean_of_steps_sum_us"] - c["mean_total_us"]) < 0.05, (name, c)
    assert "waiting awake on the channel" in run.stdout


def test_the_busy_poll_comparison_takes_turns_and_reports_every_round(tmp_path):
    out = tmp_path / "ab.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--parts", "host", "--host-sizes", "1", "--iterations", "4",
         "--warmup", "1", "--copy-iterations", "1", "--compare-busy-poll", "0,300:0", "--rounds",
         "2", "--json-out", str(out)],
        capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    ab = json.loads(out.read_text())["busy_poll"]["host"]["1 MiB"]
    assert set(ab) == {"broker-cupy", "broker-posted-cupy", "broker-postedopen-cupy",
                       "broker-waitawake-cupy", "broker-waitdaemon-cupy"}  # fmt: skip
    for case, by_value in ab.items():
        assert set(by_value) == {"0", "300:0"}, case
        for v in by_value.values():
            assert len(v["us"]) == 2 and all(x > 0 for x in v["us"]), (case, v)
            assert min(v["us"]) <= v["median_us"] <= max(v["us"]), (case, v)
    assert "busy-poll comparison" in run.stdout
