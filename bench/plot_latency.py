#!/usr/bin/env python3
"""Latency against size from gpubroker-bench's JSON (--json-out).

Plots the p50 of every case that names a series and a size (the hand-over
through the broker, from C++ and from Python, torch.multiprocessing, the copy
path, bare VMM and the floor), with the p99 as a bar above each point, on
log-log axes; writes a PNG.

    python3 bench/plot_latency.py bench-cuda.json docs/latency-vs-size.png

Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "gpubroker": ("tab:blue", "o", "-"),
    "gpubroker from Python, on torch.mp's Queue": ("tab:cyan", "o", "--"),
    "gpubroker cold": ("tab:purple", "D", "none"),
    "torch.mp": ("tab:red", "s", "-"),
    "copy": ("tab:gray", "^", "-"),
    "bare VMM": ("tab:green", "v", ":"),
    "floor": ("black", ".", ":"),
}


def human(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return "%g %s" % (n / scale, unit)
    return "%d B" % n


def main():
    p = argparse.ArgumentParser()
    p.add_argument("json")
    p.add_argument("png")
    p.add_argument("--title", default="")
    a = p.parse_args()
    with open(a.json) as f:
        doc = json.load(f)
    series = {}
    for r in doc.get("results", []):
        if "series" not in r or not r.get("n"):
            continue
        series.setdefault(r["series"], []).append((r["size_bytes"], r["p50_us"], r["p99_us"]))
    if not series:
        raise SystemExit("no plotted cases in %s" % a.json)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    sizes = set()
    for name, points in sorted(series.items()):
        points.sort()
        xs = [s for s, _, _ in points]
        p50 = [v for _, v, _ in points]
        up = [max(0.0, p99 - v) for _, v, p99 in points]
        sizes.update(xs)
        color, marker, line = STYLE.get(name, (None, "o", "-"))
        ax.errorbar(xs, p50, yerr=[[0] * len(up), up], label=name, color=color, marker=marker,
                    linestyle=line, capsize=3)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted(sizes))
    ax.set_xticklabels([human(s) for s in sorted(sizes)])
    ax.set_xlabel("buffer size")
    ax.set_ylabel("hand-over latency, p50 (bar: p99), µs")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(a.title or doc.get("title", ""), fontsize=8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.png, dpi=120)


if __name__ == "__main__":
    main()
