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
# deploy/container/build.sh [--no-cuda] [--skip-run] [--skip-build]
#   --skip-build: try the image built last time
# Environment: WORK (default build-container/), DEBIAN_MIRROR (default: the
# first of this machine's apt sources), IMAGE (default gpubroker:VERSION),
# HOST_BIN (the host-side client programs; default build/bin).
# Needs root, debootstrap and podman. CI skips it for time; docs/operations.md
# has the result of a run.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
with_cuda=true run=true build=true
for a in "$@"; do
  case $a in
    --no-cuda) with_cuda=false ;;
    --skip-run) run=false ;;
    --skip-build) build=false ;;
    *) echo "usage: $0 [--no-cuda] [--skip-run] [--skip-build]" >&2; exit 2 ;;
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
             /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}' || true)
fi
[ -n "$mirror" ] || { echo "no Debian mirror: set DEBIAN_MIRROR" >&2; exit 1; }

if $build && ! podman image exists "$base"; then
  if [ ! -x "$work/rootfs/usr/bin/apt-get" ]; then
    step "debootstrap bookworm from $mirror"
    rm -rf "$work/rootfs"
    debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log"
  fi
  step "podman import $base"
  tar -C "$work/rootfs" -c . | podman import - "$base"
fi

volumes=()
if $build && $with_cuda && [ -d /usr/local/cuda/ ]; then
  cuda=$(readlink -f /usr/local/cuda)
  volumes=(-v "$cuda:/usr/local/cuda:ro")
  echo "CUDA toolkit $cuda: the image gets the CUDA backends"
fi
if $build; then
step "podman build $image"
podman build --isolation chroot --network host "${volumes[@]}" --build-arg BASE="$base" \
  -f deploy/container/Dockerfile -t "$image" . 2>&1 | tee "$work/build.log" | grep -E \
  '^(STEP|COMMIT)|gpubroker: |Package: |Depends: |Installed-Size|error' || true
fi
podman image exists "$image" || { echo "no image $image (podman build: $work/build.log)" >&2; exit 1; }
podman image ls "$image"
$run || exit 0

step "the daemon in a container, clients in and out of it"
# `podman run` on a machine that is itself a container needs no cgroups of
# its own and the host's network; where crun still cannot set the rlimits
# (EPERM on RLIMIT_NOFILE/NPROC, even to the host's own values), each
# container's root file system (podman create + podman mount) runs under
# unshare (mount, PID, IPC, UTS namespaces) + chroot as the image's user.
run_flags=(--cgroups=disabled --network host --security-opt label=disable)
mode=podman
if ! podman run --rm "${run_flags[@]}" --entrypoint /usr/bin/gpubrokerd "$image" --version \
     >"$work/run-probe.log" 2>&1; then
  mode=chroot
  echo "podman run: $(tail -1 "$work/run-probe.log"); running the image's file system with unshare + chroot"
fi
sock=$(mktemp -d "${TMPDIR:-/tmp}/gpubroker-sock-XXXXXX")
chown 10001:10001 "$sock"
chmod 0750 "$sock"
names=() pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for n in "${names[@]}"; do
    podman umount "$n" >/dev/null 2>&1 || true
    podman rm -f "$n" >/dev/null 2>&1 || true
  done
  rm -rf "$sock"
}
trap cleanup EXIT

# start NAME PROGRAM ARGS...: PROGRAM of the image, in a container of its own,
# with the socket directory mounted at /run/gpubroker; logs in $work/NAME.log.
start() {
  local name=$1 program=$2
  shift 2
  names+=("$name")
  if [ "$mode" = podman ]; then
    podman run -d --name "$name" "${run_flags[@]}" -v "$sock:/run/gpubroker" \
      --entrypoint "$program" "$image" "$@" >/dev/null
  else
    podman create --name "$name" "$image" >/dev/null
    local root
    root=$(podman mount "$name")
    unshare --mount --pid --fork --kill-child --ipc --uts -- /bin/sh -c '
      set -e; sock=$1 root=$2; shift 2
      mount --bind "$sock" "$root/run/gpubroker"
      mount -t proc proc "$root/proc"
      exec chroot "$root" setpriv --reuid 10001 --regid 10001 --clear-groups --no-new-privs \
        env -i PATH=/usr/bin:/bin GPUBROKER_SOCKET_DIR=/run/gpubroker "$@"' \
      sh "$sock" "$root" "$program" "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
  fi
}
# stop NAME: SIGTERM to the program, then its exit code in $code.
stop() {
  local name=$1 i
  if [ "$mode" = podman ]; then
    podman stop -t 20 "$name" >/dev/null
    podman logs "$name" >"$work/$name.log" 2>&1
    code=$(podman inspect -f '{{.State.ExitCode}}' "$name")
  else
    for i in "${!names[@]}"; do [ "${names[$i]}" = "$name" ] && break; done
    # The program is unshare's child (process 1 of its PID namespace):
    # unshare itself would pass on no SIGTERM.
    kill -TERM "$(pgrep -P "${pids[$i]}")"
    code=0
    wait "${pids[$i]}" || code=$?
  fi
}

# The producer runs as the image's user (10001), the consumer outside as
# root: one tenant for both, or each would see only its own buffers.
printf 'tenants:\n  - name: demo\n    uids: [0, 10001]\n' >"$sock/try.yaml"
daemon=gpubroker-try-$$
start "$daemon" /usr/bin/gpubrokerd --config=/run/gpubroker/try.yaml \
  --socket-dir=/run/gpubroker --metrics-address=127.0.0.1:0 --health-address=127.0.0.1:0
for _ in $(seq 100); do [ -S "$sock/gpubroker.sock" ] && break; sleep 0.1; done
[ -S "$sock/gpubroker.sock" ] || { echo "the daemon did not start" >&2; cat "$work/$daemon.log"; exit 1; }
sleep 0.2
[ "$mode" = podman ] && podman logs "$daemon" | head -3 || head -3 "$work/$daemon.log"
ls -ln "$sock"

# A producer in a second container of the image, on the same directory; the
# consumer and the CLI on the host, built from this tree.
start "$daemon-producer" /usr/bin/gpubroker-demo-producer camera0.frame
GPUBROKER_SOCKET_DIR=$sock "$host_bin/gpubroker-demo-consumer" camera0.frame </dev/null
GPUBROKER_SOCKET_DIR=$sock "$host_bin/gpubroker" status
stop "$daemon-producer"
echo "producer exit code: $code"
cat "$work/$daemon-producer.log"
stop "$daemon"
echo "daemon exit code: $code"
tail -4 "$work/$daemon.log"
[ "$code" = 0 ] || { echo "the daemon did not stop cleanly" >&2; exit 1; }
[ ! -e "$sock/session.sock" ] || { echo "sockets left behind" >&2; exit 1; }
echo "container ($mode): passed"
