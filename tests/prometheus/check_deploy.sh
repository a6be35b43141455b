#!/usr/bin/env bash
# deploy/prometheus checked as Prometheus would read it: the scrape config, the
# alert rules, and the rules' unit tests (promtool test rules).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$root/deploy/prometheus
promtool=${PROMTOOL:-$(command -v promtool || true)}
if [ -z "$promtool" ]; then
  echo "promtool is not installed (scripts/install-deps.sh puts it in /usr/local/bin)" >&2
  exit 1
fi

"$promtool" check config "$dir/prometheus.yml"
"$promtool" check rules "$dir/gpubroker-rules.yml"
(cd "$dir/tests" && "$promtool" test rules gpubroker-rules.test.yml)

# Debian's promtool is built without Kubernetes discovery, so it cannot load
# prometheus-kubernetes.yml: check what matters in it by hand.
/usr/bin/python3 - "$dir/prometheus-kubernetes.yml" <<'PY'
import sys, yaml
cfg = yaml.safe_load(open(sys.argv[1]))
assert cfg["rule_files"] == ["gpubroker-rules.yml"], cfg["rule_files"]
(job,) = cfg["scrape_configs"]
assert job["job_name"].startswith("gpubroker"), "the alerts select job=~\"gpubroker.*\""
assert job["kubernetes_sd_configs"] == [{"role": "pod"}]
keeps = {(tuple(r["source_labels"]), r["regex"]) for r in job["relabel_configs"]
         if r.get("action") == "keep"}
assert (("__meta_kubernetes_pod_label_app_kubernetes_io_name",), "gpubroker") in keeps, keeps
assert (("__meta_kubernetes_pod_container_port_name",), "metrics") in keeps, keeps
print(f"{sys.argv[1]}: job {job['job_name']} keeps the gpubroker pods' metrics port")
PY
