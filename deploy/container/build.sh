#!/usr/bin/env bash
# Builds gpubroker's image with no image registry: debootstrap makes a Debian
# 12 root file system from the machine's own Debian mirror, `podman import`
# turns it into the base image, `podman build --isolation chroot` builds
# deploy/container/Dockerfile on it (the CUDA backends too when the host has a
# CUDA toolkit, mounted read-only into the build), and then the image is
# tried: the daemon runs in a container, a producer in a second container on
# the same socket directory, and a consumer and the CLI outside it, on the
# host, open and check the producer's buffer through the mounted directory.
#
# deploy/container/build.sh [--no-cuda] [--skip-run]
# Environment: WORK (default build-container/), DEBIAN_MIRROR (default: the
# first of this machine's apt sources), IMAGE (default gpubroker:VERSION),
# HOST_BIN (the host-side client programs; default build/bin).
# Needs root, debootstrap and podman. CI skips it for time; docs/operations.md
# has the result of a run.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
with_cuda=true run=true
for a in "$@"; do
  case $a in
    --no-cuda) with_cuda=false ;;
    --skip-run) run=false ;;
    *) echo "usage: $0 [--no-cuda] [--skip-run]" >&2; exit 2 ;;
  esac
done
version=$(sed -n 's/^project(gpubroker VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
work=${WORK:-$repo/build-container}
image=${IMAGE:-gpubroker:$version}
base=localhost/gpubroker-base:bookworm
host_bin=${HOST_BIN:-$repo/build/bin}
mkdir -p "$work"
step() { echo; echo "== $* ($(date -u +%T))"; }

mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(grep -hoE '^(URIs:|deb) +[a-z]+://[^ ]+' /etc/apt/sources.list.d/*.sources \
             /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}')
fi
[ -n "$mirror" ] || { echo "no Debian mirror: set DEBIAN_MIRROR" >&2; exit 1; }

if ! podman image exists "$base"; then
  if [ ! -x "$work/rootfs/usr/bin/apt-get" ]; then
    step "debootstrap bookworm from $mirror"
    rm -rf "$work/rootfs"
    debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log"
  fi
  step "podman import $base"
  tar -C "$work/rootfs" -c . | podman import - "$base"
fi

volumes=()
if $with_cuda && [ -d /usr/local/cuda/ ]; then
  cuda=$(readlink -f /usr/local/cuda)
  volumes=(-v "$cuda:/usr/local/cuda:ro")
  echo "CUDA toolkit $cuda: the image gets the CUDA backends"
fi
step "podman build $image"
podman build --isolation chroot --network host "${volumes[@]}" --build-arg BASE="$base" \
  -f deploy/container/Dockerfile -t "$image" . 2>&1 | tee "$work/build.log" | grep -E \
  '^(STEP|COMMIT)|gpubroker: |Package: |Depends: |Installed-Size|error' || true
podman image exists "$image" || { echo "podman build failed: $work/build.log" >&2; exit 1; }
podman image ls "$image"
$run || exit 0

step "the daemon in a container, clients in and out of it"
# What `podman run` needs on a machine that is itself a container: no cgroups
# of its own, the host's network (metrics on loopback) and the host's
# rlimits, which the default (nofile 1048576) would exceed.
run_flags=(--cgroups=disabled --network host --ulimit host --security-opt label=disable)
sock=$(mktemp -d "${TMPDIR:-/tmp}/gpubroker-sock-XXXXXX")
chown 10001:10001 "$sock"
chmod 0750 "$sock"
daemon=gpubroker-try-$$
cleanup() {
  podman rm -f "$daemon" "$daemon-producer" >/dev/null 2>&1 || true
  rm -rf "$sock"
}
trap cleanup EXIT
podman run -d --name "$daemon" "${run_flags[@]}" -v "$sock:/run/gpubroker" "$image" \
  --config=/etc/gpubroker/gpubroker.yaml --socket-dir=/run/gpubroker \
  --metrics-address=127.0.0.1:0 --health-address=127.0.0.1:0 >/dev/null
for _ in $(seq 100); do [ -S "$sock/gpubroker.sock" ] && break; sleep 0.1; done
podman logs "$daemon"
[ -S "$sock/gpubroker.sock" ] || { echo "the daemon in the container did not start" >&2; exit 1; }
ls -ln "$sock"

# A producer in a second container of the image, on the same directory.
podman run -d --name "$daemon-producer" "${run_flags[@]}" -v "$sock:/run/gpubroker" \
  --entrypoint gpubroker-demo-producer "$image" camera0.frame >/dev/null
# The consumer and the CLI on the host, built from this tree.
GPUBROKER_SOCKET_DIR=$sock "$host_bin/gpubroker-demo-consumer" camera0.frame </dev/null
GPUBROKER_SOCKET_DIR=$sock "$host_bin/gpubroker" status
podman stop -t 10 "$daemon-producer" >/dev/null
podman logs "$daemon-producer"
podman stop -t 20 "$daemon" >/dev/null
echo "daemon exit code: $(podman inspect -f '{{.State.ExitCode}}' "$daemon")"
[ ! -e "$sock/session.sock" ] || { echo "sockets left behind" >&2; exit 1; }
echo "container: passed"
