#!/usr/bin/env bash
# ctest k8s.manifests: the Kubernetes manifests checked offline, and the
# daemon config they carry checked by the daemon itself.
# check_manifests.sh SOURCE_DIR GPUBROKERD
set -euo pipefail
src=$1 daemon=$2
here=$src/tests/k8s
if [ ! -d "$here/node_modules/kubernetes-models" ]; then
  echo "tests/k8s/node_modules is missing: run scripts/install-deps.sh" >&2
  exit 1
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/gpubroker-k8s-XXXXXX")
trap 'rm -rf "$out"' EXIT
node "$here/check-manifests.mjs" "$out" "$src"/deploy/k8s/*.yaml
"$daemon" --check-config "$out/gpubroker.yaml" --socket-dir /run/gpubroker
