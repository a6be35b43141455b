#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages that gpubroker needs to build and test.
# Idempotent: apt-get runs only when a package is missing, so a warm machine
# spends no time here. Run as root (or with sudo available).
#
#   --build-only   what building and packaging need, not the test tools
#                  (the container image's build stage)
set -euo pipefail
build_only=false
[ "${1:-}" = --build-only ] && build_only=true

packages=(
  build-essential cmake pkg-config
  protobuf-compiler libprotobuf-dev protobuf-compiler-grpc libgrpc++-dev
  libspdlog-dev libfmt-dev prometheus-cpp-dev libyaml-cpp-dev nlohmann-json3-dev
  libabsl-dev libgtest-dev libgmock-dev libsystemd-dev libcli11-dev
  clang libclang-rt-dev
  python3 python3-numpy python3-pytest python3-setuptools python3-pip
  systemd file
  # Tests: a Python gRPC client generated from proto/, Python's Prometheus client,
  # and mypy for the Python package's type hints.
  python3-grpcio python3-grpc-tools python3-protobuf python3-prometheus-client python3-yaml
  mypy
)

# Debian 12 ships the clang runtime as libclang-rt-14-dev; newer releases have
# an unversioned metapackage. Pick whichever this release knows.
resolve() {
  local p=$1
  if [ "$p" = libclang-rt-dev ]; then
    for c in libclang-rt-dev libclang-rt-14-dev libclang-rt-18-dev; do
      if apt-cache show "$c" >/dev/null 2>&1; then echo "$c"; return; fi
    done
    return
  fi
  echo "$p"
}

# Only the tests and the sanitizer build need these.
test_only=" clang libclang-rt-dev libgtest-dev libgmock-dev python3-grpcio python3-grpc-tools \
python3-protobuf python3-prometheus-client python3-yaml mypy "

missing=()
for p in "${packages[@]}"; do
  if $build_only && [[ $test_only == *" $p "* ]]; then continue; fi
  [ -n "$p" ] || continue
  p=$(resolve "$p")
  [ -n "$p" ] || continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# Node.js checks the Kubernetes manifests (tests/k8s); a machine that has it
# from elsewhere keeps its own.
if ! $build_only && ! { command -v node && command -v npm; } >/dev/null; then
  missing+=(nodejs npm)
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

$build_only && exit 0

# The manifest checker's npm packages, pinned by tests/k8s/package-lock.json.
k8s=$(cd "$(dirname "$0")/.." && pwd)/tests/k8s
if [ ! -f "$k8s/node_modules/.package-lock.json" ] ||
   [ "$k8s/package-lock.json" -nt "$k8s/node_modules/.package-lock.json" ]; then
  echo "install-deps: npm ci in tests/k8s"
  npm ci --prefix "$k8s" --no-audit --no-fund --loglevel=error
fi

# promtool checks the Prometheus rules and /metrics in the tests. It comes in
# Debian's prometheus package, whose installation also starts a Prometheus
# server: take promtool alone out of the package instead.
if ! command -v promtool >/dev/null 2>&1; then
  echo "install-deps: promtool (from Debian's prometheus package) into /usr/local/bin"
  $sudo "$(dirname "$0")/debian-binary.sh" prometheus promtool /usr/local/bin >/dev/null
fi
