#!/usr/bin/python3
"""Checks the Grafana dashboard and the alert rules against a live /metrics
exposition read on stdin:

  check_dashboard.py --dashboard deploy/grafana/gpubroker.json \\
      --rules deploy/prometheus/gpubroker-rules.yml [--promtool promtool] < metrics.txt

* the dashboard is well formed: unique panel ids, panels inside the 24-column
  grid and not overlapping, a query on every panel;
* every metric that a panel, an annotation, a variable or an alert names is one
  that the daemon exports (a renamed metric breaks dashboards silently);
* every gpubroker_* family the daemon exports is on some panel;
* every dashboard query is valid PromQL (promtool check rules on the queries,
  with Grafana's variables given values).
Exit status 1 with every finding on stderr."""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

METRIC = re.compile(r"\b((?:gpubroker|process)_[a-zA-Z0-9_]+)")
# Families that need no panel of their own.
# gpubroker_build_info: the Node variable's source; gpubroker_zeroed_bytes_total:
# an audit of the zeroing rule (docs/security.md), queried when asked, no panel;
# gpubroker_session_busy_poll_window_seconds: read when tuning the busy poll,
# whose cost and effect the CPU panel shows (its seconds polled, the turns
# that found the thread asleep).
NOT_ON_DASHBOARD = {"gpubroker_build_info", "gpubroker_zeroed_bytes_total",
                    "gpubroker_session_busy_poll_window_seconds"}


def exported(text):
    samples, families = set(), set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            families.add(line.split()[2])
        elif line and not line.startswith("#"):
            samples.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return samples, families


def grafana_exprs(dashboard):
    out = []  # (where, expr)
    for p in dashboard["panels"]:
        for t in p.get("targets", []):
            out.append((f'panel "{p["title"]}"', t.get("expr", "")))
    for a in dashboard.get("annotations", {}).get("list", []):
        if "expr" in a:
            out.append((f'annotation "{a["name"]}"', a["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            out.append((f'variable "{v["name"]}"', v.get("definition", "")))
    return out


def layout_findings(dashboard):
    findings, ids, cells = [], set(), {}
    for p in dashboard["panels"]:
        if p["id"] in ids:
            findings.append(f'panel id {p["id"]} is used twice')
        ids.add(p["id"])
        g = p["gridPos"]
        if g["x"] < 0 or g["w"] <= 0 or g["x"] + g["w"] > 24:
            findings.append(f'panel "{p["title"]}" lies outside the 24-column grid')
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    findings.append(f'panels "{cells[(x, y)]}" and "{p["title"]}" overlap')
                    break
                cells[(x, y)] = p["title"]
            else:
                continue
            break
        if p["type"] != "row" and not any(t.get("expr") for t in p.get("targets", [])):
            findings.append(f'panel "{p["title"]}" has no query')
    return findings


def promql_findings(exprs, promtool):
    rules = []
    for i, (where, expr) in enumerate(exprs):
        if expr.startswith("label_values("):
            continue  # Grafana's own function, not PromQL
        q = (expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")
             .replace("$instance", ".*"))
        rules.append({"record": f"dashboard:query_{i}", "expr": q})
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
    try:
        r = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    return [] if r.returncode == 0 else [f"promtool rejects a dashboard query:\n{r.stdout}{r.stderr}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--rules", action="append", default=[])
    ap.add_argument("--promtool", default="promtool")
    args = ap.parse_args()

    samples, families = exported(sys.stdin.read())
    if not families:
        print("no metrics on stdin", file=sys.stderr)
        return 1
    with open(args.dashboard) as f:
        dashboard = json.load(f)
    findings = layout_findings(dashboard)

    exprs = grafana_exprs(dashboard)
    named_by_alerts = []
    for path in args.rules:
        with open(path) as f:
            for group in yaml.safe_load(f)["groups"]:
                for rule in group["rules"]:
                    named_by_alerts.append((f'rule "{rule.get("alert") or rule.get("record")}"',
                                            rule["expr"]))
    for where, expr in exprs + named_by_alerts:
        for name in METRIC.findall(expr):
            if name not in samples and name not in families:
                findings.append(f"{where} uses {name}, which the daemon does not export")

    on_dashboard = {n for _, e in exprs for n in METRIC.findall(e)}
    for family in sorted(families):
        if family.startswith("gpubroker_") and family not in NOT_ON_DASHBOARD:
            shown = any(s == family or s.startswith(family + "_") for s in on_dashboard)
            if not shown:
                findings.append(f"{family} is on no panel of {args.dashboard}: add it "
                                "(or list it in NOT_ON_DASHBOARD with the reason)")

    findings += promql_findings(exprs, args.promtool)
    for f in findings:
        print(f, file=sys.stderr)
    if findings:
        return 1
    print(f"{len(dashboard['panels'])} panels and {len(named_by_alerts)} rules check out "
          f"against {len(families)} exported families")
    return 0


if __name__ == "__main__":
    sys.exit(main())
