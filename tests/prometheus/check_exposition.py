#!/usr/bin/python3
"""Reads a Prometheus text exposition on stdin and checks that a Prometheus
client library accepts its names: each family parses to a name of its own, and
declaring every family with prometheus_client (as an exporter or a bridge in
Python would) raises no "Duplicated timeseries" error. Exit status 1 with the
reason on stderr when the library refuses; 0 and a summary otherwise."""

import sys

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, Summary
from prometheus_client.parser import text_string_to_metric_families

KINDS = {"counter": Counter, "gauge": Gauge, "histogram": Histogram, "summary": Summary,
         "info": Info}


def main() -> int:
    families = list(text_string_to_metric_families(sys.stdin.read()))
    if not families:
        print("no metric families in the input", file=sys.stderr)
        return 1
    seen = {}
    for f in families:
        if f.name in seen:
            print(f"family name {f.name!r} is used by a {seen[f.name]} and a {f.type}",
                  file=sys.stderr)
            return 1
        seen[f.name] = f.type
    registry = CollectorRegistry()
    for f in families:
        kind = KINDS.get(f.type)
        if kind is None:
            continue
        labels = sorted({k for s in f.samples for k in s.labels if k not in ("le", "quantile")})
        try:
            kind(f.name, f.documentation or f.name, labels, registry=registry)
        except ValueError as e:
            print(f"prometheus_client refuses {f.type} {f.name!r}: {e}", file=sys.stderr)
            return 1
    print(f"{len(families)} families accepted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
