#!/usr/bin/python3
"""Renders deploy/grafana/gpubroker.json's panels from a live run, as an
operator would see them in Grafana:

  scripts/dashboard-snapshot.py --bin-dir build/bin --out docs/images/dashboard.png

It starts a gpubrokerd (host backend) with three tenants, a Prometheus that
scrapes it every second and evaluates deploy/prometheus/gpubroker-rules.yml,
and a load of real client processes (Python over the stubs of proto/, one uid
per tenant): producers that fill their quota and are refused, consumers that
open the producers' shared buffers, workers that are killed holding memory,
buffers whose TTL passes. Then it runs every panel's own query against that
Prometheus (query_range) and draws the panels where the dashboard puts them.
Needs root (the workers' uids), python3-matplotlib, and the prometheus binary
(taken from Debian's package without installing it, into --tools-dir).
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
TENANTS = {"training": 2001, "inference": 2002, "etl": 2003}
CONFIG = """tenants:
  - {name: training, uids: [2001], quota: 192MiB}
  - {name: inference, uids: [2002], quota: 96MiB}
  - {name: etl, uids: [2003]}
"""
# Seconds into the run: when each part of the load starts and stops.
PHASES = {"training": (15, 110), "inference": (30, 110), "crashes": (55, 100), "ttl": (70, 95)}
RUN_SECONDS = 130
SNAPSHOT_AT = 92  # the moment whose values the stat and bar panels show


# Load ------------------------------------------------------------------------

def worker(args):
    """One client process; args.worker says what it does until args.stop."""
    sys.path[:0] = [args.stubs, os.path.join(ROOT, "examples", "grpc_python")]
    import grpc
    import gpubroker_grpc
    from gpubroker.v1 import broker_pb2

    rng = random.Random(os.getpid())
    session = gpubroker_grpc.Session(args.socket_dir, client_name=f"load/{args.worker}")
    held = []  # (id, name)
    n = 0

    def allocate(size, **fields):
        r = session.call("Allocate", broker_pb2.AllocateRequest(size=size, **fields))
        m = session.map(getattr(r, "import"), r.buffer.id)
        m[:min(size, 1 << 16)] = os.urandom(min(size, 1 << 16))
        m.close()
        session.call("Seal", broker_pb2.SealRequest(id=r.buffer.id))
        return r.buffer.id

    if args.worker == "crash":  # hold memory, then be killed by the parent
        for i in range(3):
            try:
                allocate(rng.choice([8, 16, 24]) * MiB)
            except grpc.RpcError as e:  # the pool is full: hold what we got
                if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
        print("held", flush=True)
        time.sleep(3600)
    while time.time() < args.stop:
        try:
            if args.worker == "producer":
                n += 1
                name = f"batch.{os.getpid()}.{n}"
                held.append((allocate(rng.choice([4, 8, 12, 16]) * MiB, name=name,
                                      share_with=["inference"]), name))
                if len(held) > 12:
                    old, _ = held.pop(0)
                    session.call("Release", broker_pb2.ReleaseRequest(id=old, free=True))
                time.sleep(rng.uniform(0.2, 0.5))
            elif args.worker == "consumer":
                listed = [b for b in session.call("List", broker_pb2.ListRequest()).buffers
                          if b.tenant == "training" and b.state == broker_pb2.BUFFER_STATE_SEALED]
                if listed:
                    b = rng.choice(listed)
                    r = session.call("Open", broker_pb2.OpenRequest(
                        ref=broker_pb2.BufferRef(id=b.id)))
                    own = [x for x in session.call("List", broker_pb2.ListRequest()).buffers
                           if x.tenant == "inference"]
                    if len(own) < 6:
                        allocate(8 * MiB)
                    time.sleep(rng.uniform(0.05, 0.2))
                    session.call("Release", broker_pb2.ReleaseRequest(id=r.buffer.id))
                else:
                    time.sleep(0.2)
            elif args.worker == "ttl":
                # Kept with a TTL, and our own lease dropped: the TTL alone ends it.
                kept = allocate(rng.choice([8, 16]) * MiB, keep=True,
                                ttl_ms=rng.randint(3000, 8000))
                session.call("Release", broker_pb2.ReleaseRequest(id=kept))
                time.sleep(1.0)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.NOT_FOUND:  # freed between List and Open
                continue
            if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            # Over quota: give back the oldest and go on, as a real producer would.
            if held:
                old, _ = held.pop(0)
                session.call("Release", broker_pb2.ReleaseRequest(id=old, free=True))
            time.sleep(0.3)
    session.close()


def spawn_worker(args, stubs, role, tenant, stop):
    uid = TENANTS[tenant]
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--worker", role, "--socket-dir",
         args.socket_dir, "--stubs", stubs, "--stop", str(stop)],
        user=uid, group=0, extra_groups=[], stdout=subprocess.PIPE, text=True)


def crash_loop(args, stubs, start, stop):
    """A crash loop in one workload: each worker dies by SIGKILL holding memory."""
    time.sleep(max(0.0, start - time.time()))
    while time.time() < stop:
        victim = spawn_worker(args, stubs, "crash", "etl", 0)
        victim.stdout.readline()
        time.sleep(2.0)
        victim.kill()
        victim.wait()
        victim.stdout.close()
        time.sleep(1.0)


def run_load(args, stubs, t0):
    crashes = threading.Thread(target=crash_loop, args=(args, stubs, t0 + PHASES["crashes"][0],
                                                        t0 + PHASES["crashes"][1]))
    crashes.start()
    plan = [("training", "producer", 2), ("inference", "consumer", 3), ("ttl", "ttl", 1)]
    tenant_of = {"producer": "training", "consumer": "inference", "ttl": "etl"}
    procs = []
    for phase, role, count in sorted(plan, key=lambda x: PHASES[x[0]][0]):
        time.sleep(max(0.0, t0 + PHASES[phase][0] - time.time()))
        for _ in range(count):
            procs.append(spawn_worker(args, stubs, role, tenant_of[role], t0 + PHASES[phase][1]))
    crashes.join()
    for p in procs:
        p.wait()
        p.stdout.close()
        if p.returncode != 0:
            raise RuntimeError(f"a load worker failed ({p.returncode})")


# Prometheus --------------------------------------------------------------------

def query_range(prom, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"http://{prom}/api/v1/query_range?{q}", timeout=30) as r:
        body = json.load(r)
    if body["status"] != "success":
        raise RuntimeError(f"{expr}: {body}")
    return body["data"]["result"]


def grafana_to_promql(expr):
    return expr.replace("$__rate_interval", "10s").replace("$instance", ".*")


def legend(fmt, metric):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt) or \
        ",".join(f"{k}={v}" for k, v in metric.items() if k != "__name__")


# Drawing ------------------------------------------------------------------------

BG, PANEL, TEXT, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
COLORS = ["#73bf69", "#f2cc0c", "#5794f2", "#ff780a", "#f2495c", "#b877d9", "#8ab8ff", "#fade2a"]


def scaled(unit, values):
    """(values in a readable unit, the unit's label)."""
    peak = max([abs(v) for v in values if v == v] + [0])  # NaN != NaN
    if unit in ("bytes", "Bps"):
        for label, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)):
            if peak >= f or f == 1:
                return [v / f for v in values], label + ("/s" if unit == "Bps" else "")
    if unit == "percentunit":
        return [v * 100 for v in values], "%"
    if unit == "s":
        for label, f in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
            if peak >= f or label == "µs":
                return [v / f for v in values], label
    if unit in ("reqps", "ops"):
        return values, "/s"
    return values, ""


def draw(dashboard, series, snapshot, t0, out, alerts):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dashboard["panels"])
    unit_in = 0.34
    fig = plt.figure(figsize=(24 * 0.9, bottom * unit_in + 1.2), facecolor=BG)
    fig.text(0.01, 1 - 0.35 / (bottom * unit_in + 1.2), dashboard["title"] + ": a live run",
             color=TEXT, fontsize=16, weight="bold", va="top")
    fig.text(0.99, 1 - 0.35 / (bottom * unit_in + 1.2),
             f"host backend, 3 tenants, {RUN_SECONDS} s; numbers and bars at t={SNAPSHOT_AT} s "
             "(the dashed line)", color=TEXT, fontsize=10, ha="right", va="top")
    top_margin = 1.0 / (bottom * unit_in + 1.2)
    usable = 1 - top_margin - 0.45 / (bottom * unit_in + 1.2)

    def box(g, inner=True):
        """The panel's place in figure fractions; inside it, room for the title,
        the tick labels and the x label."""
        x = g["x"] / 24
        w = g["w"] / 24
        y = 1 - top_margin - (g["y"] + g["h"]) / bottom * usable
        h = g["h"] / bottom * usable
        if not inner:
            return [x, y, w, h]
        return [x + 0.03, y + 0.032, w - 0.036, h - 0.05]

    for p in dashboard["panels"]:
        g = p["gridPos"]
        if p["type"] == "row":
            x, y, w, h = box(g, inner=False)
            fig.text(x, y + h / 2, p["title"], color=TEXT, fontsize=12, weight="bold", va="center")
            continue
        unit = p["fieldConfig"]["defaults"].get("unit", "short")
        ax = fig.add_axes(box(g), facecolor=PANEL)
        for s in ax.spines.values():
            s.set_color(GRID)
        ax.set_title(p["title"], color=TEXT, fontsize=10, loc="left")
        ax.tick_params(colors=TEXT, labelsize=7)
        results = series[p["id"]]
        if p["type"] == "timeseries":
            stacked = p["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get(
                "mode") == "normal"
            base = None
            # One scale for the whole panel: the peak of all its series.
            everything, ylabel = scaled(unit, [v for _, _, vs in results for v in vs])
            offset = 0
            for i, (name, ts, vs) in enumerate(results):
                vs_scaled = everything[offset:offset + len(vs)]
                offset += len(vs)
                if stacked:
                    import numpy as np
                    below = base if base is not None else np.zeros(len(vs_scaled))
                    top = below + np.nan_to_num(np.array(vs_scaled))
                    ax.fill_between(ts, below, top, color=COLORS[i % len(COLORS)], alpha=0.5,
                                    linewidth=1, label=name)
                    base = top
                else:
                    ax.plot(ts, vs_scaled, color=COLORS[i % len(COLORS)], linewidth=1.2, label=name)
                ax.set_ylabel(ylabel, color=TEXT, fontsize=8)
            ax.axvline(SNAPSHOT_AT, color=TEXT, linestyle="--", linewidth=0.6, alpha=0.6)
            ax.set_xlim(0, RUN_SECONDS)
            ax.grid(color=GRID, linewidth=0.5)
            ax.set_xlabel("s into the run", color=TEXT, fontsize=7)
            if results:
                ax.legend(fontsize=6.5, facecolor=PANEL, edgecolor=GRID, labelcolor=TEXT,
                          loc="upper left", ncol=2 if len(results) > 3 else 1)
            else:
                ax.text(0.5, 0.5, "no data", color=TEXT, transform=ax.transAxes, ha="center")
        elif p["type"] == "stat":
            ax.set_xticks([])
            ax.set_yticks([])
            value = sum(snapshot[p["id"]].values()) if snapshot[p["id"]] else None
            if value is None:
                text = "no data"
            else:
                v, label = scaled(unit, [value])
                text = f"{v[0]:.0f} {label}" if unit != "s" else f"{value:.0f} s"
            ax.text(0.5, 0.45, text, color=COLORS[0], fontsize=22, weight="bold",
                    transform=ax.transAxes, ha="center", va="center")
        elif p["type"] == "bargauge":
            ax.set_yticks([])
            values = snapshot[p["id"]]
            names = list(values)
            steps = p["fieldConfig"]["defaults"]["thresholds"]["steps"]

            def color(v):
                c = steps[0]["color"]
                for s in steps[1:]:
                    if v >= s["value"]:
                        c = s["color"]
                return {"green": "#73bf69", "orange": "#ff9830", "red": "#f2495c"}.get(c, c)

            for i, name in enumerate(names):
                v = values[name]
                ax.barh(i, 1.0, color=GRID, height=0.6)
                ax.barh(i, min(v, 1.0), color=color(v), height=0.6)
                ax.text(0.01, i, f"{name}  {v * 100:.0f}%", color="#ffffff", fontsize=8,
                        va="center", transform=ax.get_yaxis_transform())
            ax.set_xlim(0, 1)
            ax.set_ylim(-0.6, max(len(names), 1) - 0.4)
            ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
            if not names:
                ax.text(0.5, 0.5, "no data", color=TEXT, transform=ax.transAxes, ha="center")
    if alerts:
        fig.text(0.01, 0.004, "Alerts pending or firing during the run (rules of "
                 "deploy/prometheus): " + ", ".join(alerts), color=TEXT, fontsize=9)
    fig.savefig(out, dpi=80, facecolor=BG)


# Orchestration ----------------------------------------------------------------------

def wait_http(url, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "images", "dashboard.png"))
    ap.add_argument("--tools-dir", default=os.path.join(ROOT, "build", "tools"))
    ap.add_argument("--worker")
    ap.add_argument("--socket-dir")
    ap.add_argument("--stubs")
    ap.add_argument("--stop", type=float)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if os.geteuid() != 0:
        sys.exit("dashboard-snapshot: run as root (the load runs one uid per tenant)")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit("dashboard-snapshot: needs python3-matplotlib (apt-get install python3-matplotlib)")
    prometheus = subprocess.run([os.path.join(ROOT, "scripts", "debian-binary.sh"), "prometheus",
                                 "prometheus", args.tools_dir], check=True, capture_output=True,
                                text=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="gpubroker-dashboard-")
    os.chmod(work, 0o755)
    stubs = os.path.join(work, "stubs")
    subprocess.run([os.path.join(ROOT, "examples", "grpc_python", "generate.sh"), stubs],
                   check=True)
    os.chmod(work, 0o755)
    for d, _, files in os.walk(work):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(os.path.join(d, f), 0o644)
    args.socket_dir = os.path.join(work, "sockets")
    with open(os.path.join(work, "gpubroker.yaml"), "w") as f:
        f.write(CONFIG)
    daemon = subprocess.Popen(
        [os.path.join(args.bin_dir, "gpubrokerd"), "--socket-dir", args.socket_dir, "--backend",
         "host", "--host-pool-bytes", "512MiB", "--metrics-address", "127.0.0.1:0", "--config",
         os.path.join(work, "gpubroker.yaml")],
        stdout=subprocess.PIPE, stderr=open(os.path.join(work, "gpubrokerd.log"), "w"), text=True)
    start_line = daemon.stdout.readline()
    metrics = start_line.rsplit("metrics ", 1)[1].strip()
    os.chmod(args.socket_dir, 0o755)
    prom_addr = "127.0.0.1:19090"
    shutil.copy(os.path.join(ROOT, "deploy", "prometheus", "gpubroker-rules.yml"), work)
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [gpubroker-rules.yml]
scrape_configs:
  - job_name: gpubroker
    static_configs: [{{targets: ["{metrics}"]}}]
""")
    prom = subprocess.Popen([prometheus, f"--config.file={work}/prometheus.yml",
                             f"--storage.tsdb.path={work}/tsdb", f"--web.listen-address={prom_addr}",
                             "--log.level=warn"], stderr=open(os.path.join(work, "prom.log"), "w"))
    try:
        wait_http(f"http://{prom_addr}/-/ready")
        t0 = time.time()
        print(f"dashboard-snapshot: daemon at {metrics}, Prometheus at {prom_addr}; "
              f"load for {RUN_SECONDS} s", flush=True)
        run_load(args, stubs, t0)
        time.sleep(max(0.0, t0 + RUN_SECONDS - time.time()) + 2)
        end = t0 + RUN_SECONDS

        with open(os.path.join(ROOT, "deploy", "grafana", "gpubroker.json")) as f:
            dashboard = json.load(f)
        series, snapshot = {}, {}
        for p in dashboard["panels"]:
            if p["type"] == "row":
                continue
            series[p["id"]], snapshot[p["id"]] = [], {}
            for t in p["targets"]:
                for r in query_range(prom_addr, grafana_to_promql(t["expr"]), t0, end, 1):
                    name = legend(t.get("legendFormat", ""), r["metric"])
                    # On one grid of whole seconds; NaN where the series has no
                    # sample (a gap in the line, as Grafana draws it).
                    got = {round(float(v[0]) - t0): float(v[1]) for v in r["values"]}
                    ts = list(range(0, RUN_SECONDS + 1))
                    vs = [got.get(x, float("nan")) for x in ts]
                    series[p["id"]].append((name, ts, vs))
                    if SNAPSHOT_AT in got:
                        snapshot[p["id"]][name] = got[SNAPSHOT_AT]
        alerts = sorted({f"{r['metric']['alertname']} ({r['metric']['alertstate']})"
                         for r in query_range(prom_addr, "ALERTS", t0, end, 1)})
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        draw(dashboard, series, snapshot, t0, args.out, alerts)
        print(f"dashboard-snapshot: wrote {args.out}; alerts seen: {', '.join(alerts) or 'none'}")
    finally:
        prom.send_signal(signal.SIGTERM)
        prom.wait()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
