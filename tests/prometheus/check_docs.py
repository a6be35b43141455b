#!/usr/bin/python3
"""Checks docs/monitoring.md (and the README's metric names) against a live
/metrics exposition read on stdin and the alert rules:

  check_docs.py --doc docs/monitoring.md --rules deploy/prometheus/gpubroker-rules.yml \\
      [--readme README.md] < metrics.txt

* every family the daemon exports has a row in the doc's metric tables, with
  its type and (for the broker's families, where the exposition has samples
  of them) exactly its labels;
* every row names a family the daemon exports (a few exist only in some
  conditions: those are listed below);
* every alert rule has a "### Name" section under "## Alerts", and every such
  section is a rule;
* every gpubroker_* metric name the README mentions is exported.
Exit status 1 with every finding on stderr."""

import argparse
import re
import sys

import yaml

TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
# Families without a series in some runs: an unlimited rlimit, no tenant with
# a quota.
CONDITIONAL = {"process_virtual_memory_max_bytes", "process_max_fds",
               "gpubroker_tenant_quota_bytes"}
SUFFIXES = ("_bucket", "_sum", "_count")


def exposition(text):
    """{family: (type, {label names} or None when it has no samples)} from the
    text format."""
    families, labels = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            families[name] = kind
        elif line and not line.startswith("#"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            names = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', line.split(" ")[0]))
            labels.setdefault(name, set()).update(names - {"le", "quantile"})
    out = {}
    for name, kind in families.items():
        keys = None
        for sample in [name] + [name + suffix for suffix in SUFFIXES]:
            if sample in labels:
                keys = (keys or set()) | labels[sample]
        out[name] = (kind, keys)
    return out


def doc_rows(doc):
    """{family: (type, {labels} or None)} from the doc's metric tables."""
    rows = {}
    for line in doc.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if len(cells) < 3 or cells[1] not in TYPES:
            continue
        name = cells[0].strip("`")
        labels = None
        if len(cells) >= 4:
            labels = set(re.findall(r"`([a-z_]+)`", cells[2]))
        rows[name] = (cells[1], labels)
    return rows


def alert_sections(doc):
    match = re.search(r"^## Alerts\n(.*?)(?=^## )", doc, re.S | re.M)
    if not match:
        return set()
    return set(re.findall(r"^### (\S+)\s*$", match.group(1), re.M))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--doc", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--readme")
    args = ap.parse_args()

    live = exposition(sys.stdin.read())
    with open(args.doc) as f:
        doc = f.read()
    rows = doc_rows(doc)
    findings = []
    if not live:
        findings.append("no metric families on stdin")

    for name, (kind, labels) in sorted(live.items()):
        if name.startswith("exposer_"):  # prometheus-cpp's own: named in the text
            if f"`{name}`" not in doc:
                findings.append(f"{name} ({kind}) is exported but not mentioned in {args.doc}")
            continue
        if name not in rows:
            findings.append(f"{name} ({kind}) is exported but has no row in {args.doc}")
            continue
        doc_kind, doc_labels = rows[name]
        if doc_kind != kind:
            findings.append(f"{name} is a {kind}, the doc says {doc_kind}")
        if doc_labels is not None and labels is not None and doc_labels != labels:
            findings.append(f"{name} has labels {sorted(labels)}, the doc says {sorted(doc_labels)}")
    for name in sorted(set(rows) - set(live) - CONDITIONAL):
        findings.append(f"{args.doc} describes {name}, which the daemon does not export")

    with open(args.rules) as f:
        rules = {r["alert"] for g in yaml.safe_load(f)["groups"] for r in g["rules"] if "alert" in r}
    sections = alert_sections(doc)
    for alert in sorted(rules - sections):
        findings.append(f"alert {alert} has no '### {alert}' section under '## Alerts'")
    for section in sorted(sections - rules):
        findings.append(f"'### {section}' under '## Alerts' is no rule of {args.rules}")

    if args.readme:
        with open(args.readme) as f:
            readme = f.read()
        # Metric names, not the C ABI's functions (gpubroker_last_error()).
        for name in sorted(set(re.findall(r"\b(gpubroker_[a-z_]+)\b(?!\()", readme))):
            if name not in live and not any(name == f + s for f in live for s in SUFFIXES):
                findings.append(f"{args.readme} names {name}, which the daemon does not export")

    for f in findings:
        print(f, file=sys.stderr)
    if findings:
        return 1
    print(f"{len(live)} families and {len(rules)} alerts described")
    return 0


if __name__ == "__main__":
    sys.exit(main())
