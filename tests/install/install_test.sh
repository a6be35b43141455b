#!/usr/bin/env bash
# Installs the build into a DESTDIR and uses only what was installed, as an
# operator and a user would: the installed daemon serves, the installed CLI
# talks to it, a Python gRPC client runs on stubs from the installed .proto
# files, a C++17 program built with find_package(gpubroker) shares a buffer
# with a C program built with pkg-config, and the daemon stops clean.
#
# install_test.sh BUILD_DIR SOURCE_DIR PREFIX BINDIR LIBDIR INCLUDEDIR SYSCONFDIR CC CXX [FLAGS]
#   BINDIR, LIBDIR, INCLUDEDIR: relative to PREFIX; SYSCONFDIR: absolute
#   FLAGS: extra compile and link flags for the two programs (sanitizers)
set -euo pipefail
build=$1 src=$2 prefix=$3 bindir=$4 libdir=$5 includedir=$6 sysconfdir=$7 cc=$8 cxx=$9
flags=${10:-}

work=$(mktemp -d "${TMPDIR:-/tmp}/gpubroker-install-XXXXXX")
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill -KILL "$daemon_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "install test: FAIL: $*" >&2
  [ -f "$work/daemon.log" ] && sed 's/^/  daemon: /' "$work/daemon.log" >&2
  exit 1
}
step() { echo "== $*"; }
# Nothing from the build tree may leak in through the environment.
unset LD_LIBRARY_PATH GPUBROKER_SOCKET_DIR GPUBROKER_CONFIG PKG_CONFIG_PATH CMAKE_PREFIX_PATH

dest=$work/dest
root=$dest$prefix
step "cmake --install into $dest"
DESTDIR=$dest cmake --install "$build" >"$work/install.log" || fail "cmake --install: $(cat "$work/install.log")"

step "installed files"
for f in "$bindir/gpubrokerd" "$bindir/gpubroker" "$libdir/libgpubroker.so" \
         "$libdir/pkgconfig/gpubroker.pc" "$libdir/cmake/gpubroker/gpubrokerConfig.cmake" \
         "$libdir/cmake/gpubroker/gpubrokerConfigVersion.cmake" \
         "$includedir/gpubroker/client.hpp" "$includedir/gpubroker/gpubroker.h" \
         lib/systemd/system/gpubroker.service lib/sysusers.d/gpubroker.conf \
         share/doc/gpubroker/operations.md share/doc/gpubroker/monitoring.md \
         share/doc/gpubroker/grpc-clients.md share/doc/gpubroker/images/dashboard.png \
         share/gpubroker/grafana/gpubroker.json share/gpubroker/prometheus/prometheus.yml \
         share/gpubroker/proto/gpubroker/v1/broker.proto; do
  [ -e "$root/$f" ] || fail "$prefix/$f is not installed"
done
# The example config goes to the system's config directory (/etc for /usr).
[ -f "$dest$sysconfdir/gpubroker/gpubroker.yaml" ] || fail "no $sysconfdir/gpubroker/gpubroker.yaml"
grep -q "^ExecStart=$prefix/$bindir/gpubrokerd " "$root/lib/systemd/system/gpubroker.service" ||
  fail "the installed unit does not start $prefix/$bindir/gpubrokerd"

step "systemd-analyze verify the installed unit"
# verify wants ExecStart= to exist: point it at the DESTDIR copy, nothing else changes.
mkdir -p "$work/unit"
sed "s|$prefix/$bindir/gpubrokerd|$root/$bindir/gpubrokerd|" \
  "$root/lib/systemd/system/gpubroker.service" >"$work/unit/gpubroker.service"
systemd-analyze verify "$work/unit/gpubroker.service" >"$work/verify.log" 2>&1 ||
  fail "systemd-analyze verify: $(cat "$work/verify.log")"
[ ! -s "$work/verify.log" ] || fail "systemd-analyze verify warns: $(cat "$work/verify.log")"
# The hardening stays where it is (systemd's exposure scale: 0 best, 100 worst).
systemd-analyze security --offline=yes --threshold=40 "$work/unit/gpubroker.service" \
  >"$work/security.log" 2>&1 || fail "exposure over 4.0: $(tail -3 "$work/security.log")"
sed -n 's/^→ /  /p' "$work/security.log"
mkdir -p "$work/sysroot/etc"
systemd-sysusers --dry-run --root="$work/sysroot" "$root/lib/sysusers.d/gpubroker.conf" \
  >"$work/sysusers.log" 2>&1 || fail "systemd-sysusers: $(cat "$work/sysusers.log")"

step "every installed program and library finds its libraries"
for f in "$root/$bindir"/* "$root/$libdir"/lib*.so*; do
  [ -L "$f" ] && continue
  missing=$(ldd "$f" 2>&1 | grep "not found" || true)
  [ -z "$missing" ] || fail "$(basename "$f"): $missing"
done

step "the installed daemon serves"
sock=$work/sock
"$root/$bindir/gpubrokerd" --socket-dir "$sock" --backend host --host-pool-bytes 64MiB \
  --metrics-address 127.0.0.1:0 >"$work/daemon.out" 2>"$work/daemon.log" &
daemon_pid=$!
for _ in $(seq 200); do
  grep -q "^gpubrokerd " "$work/daemon.out" && break
  kill -0 "$daemon_pid" 2>/dev/null || fail "the installed gpubrokerd exited"
  sleep 0.05
done
grep -q "^gpubrokerd " "$work/daemon.out" || fail "no start line from the installed gpubrokerd"
sed 's/^/  /' "$work/daemon.out"
"$root/$bindir/gpubroker" --socket-dir "$sock" status >"$work/status.txt" ||
  fail "installed CLI: status: $(cat "$work/status.txt")"

step "the installed alert rules and a gRPC client from the installed .proto files"
if command -v promtool >/dev/null; then
  promtool check rules "$root/share/gpubroker/prometheus/gpubroker-rules.yml" >"$work/rules.log" 2>&1 ||
    fail "promtool check rules: $(cat "$work/rules.log")"
fi
GPUBROKER_PROTO_DIR=$root/share/gpubroker/proto "$src/examples/grpc_python/generate.sh" \
  "$work/stubs" >"$work/stubs.log" 2>&1 || fail "stubs from the installed protos: $(cat "$work/stubs.log")"
GPUBROKER_SOCKET_DIR=$sock PYTHONPATH=$work/stubs /usr/bin/python3 \
  "$src/examples/grpc_python/hello_broker.py" >"$work/hello.txt" 2>&1 ||
  fail "hello_broker.py: $(cat "$work/hello.txt")"
grep -q "'greeting' sealed on host" "$work/hello.txt" || fail "hello_broker.py: $(cat "$work/hello.txt")"
"$root/$bindir/gpubroker" --socket-dir "$sock" free greeting >/dev/null || fail "free greeting"

step "a C++17 program built with find_package(gpubroker)"
# shellcheck disable=SC2086
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
  -DCMAKE_PREFIX_PATH="$root" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/consumer.log" 2>&1 ||
  fail "configure: $(cat "$work/consumer.log")"
cmake --build "$work/consumer" >>"$work/consumer.log" 2>&1 || fail "build: $(cat "$work/consumer.log")"
grep -q "$root/$libdir" "$work/consumer/CMakeCache.txt" || fail "find_package did not find $root"
"$work/consumer/producer" "$sock" install.check 1048576 || fail "producer"

step "the installed CLI sees it"
"$root/$bindir/gpubroker" --socket-dir "$sock" --json ls >"$work/ls.json" || fail "ls"
grep -q '"install.check"' "$work/ls.json" || fail "gpubroker ls does not show install.check: $(cat "$work/ls.json")"

python=${GPUBROKER_TEST_PYTHON:-} pydir=${GPUBROKER_TEST_PYTHON_DIR:-}
if [ -n "$pydir" ]; then
  step "the installed Python package"
  [ -f "$root/$pydir/gpubroker/__init__.py" ] || fail "no $prefix/$pydir/gpubroker"
  grep -q "\"$prefix/$libdir/libgpubroker.so.0\"" "$root/$pydir/gpubroker/_location.py" ||
    fail "the package does not name $prefix/$libdir/libgpubroker.so.0: $(cat "$root/$pydir/gpubroker/_location.py")"
  # In the DESTDIR the library is not where it will be: say where it is.
  [ -n "$python" ] && PYTHONPATH=$root/$pydir GPUBROKER_LIBRARY=$root/$libdir/libgpubroker.so.0 "$python" -c '
import sys, numpy, gpubroker
assert gpubroker.__file__.startswith(sys.argv[2]), gpubroker.__file__
with gpubroker.connect(sys.argv[1]) as client:
    buf = client.open("install.check")
    a = numpy.asarray(buf).view(numpy.uint8).reshape(-1)
    want = (numpy.arange(a.size, dtype=numpy.uint64) * 7 % 251).astype(numpy.uint8)
    assert a.size == 1048576 and (a == want).all(), "bytes differ"
    print("python: %d bytes of install.check as written" % a.size)
    del a
    buf.release()
' "$sock" "$root/$pydir" || { [ -z "$python" ] || fail "python"; }
  [ -n "$python" ] || echo "  (a sanitizer build: the package is installed, not imported)"
fi

step "a C program built with pkg-config"
export PKG_CONFIG_PATH=$root/$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest
[ "$(pkg-config --modversion gpubroker)" = "$(sed -n 's/^Version: //p' "$root/$libdir/pkgconfig/gpubroker.pc")" ]
# shellcheck disable=SC2046,SC2086
"$cc" -std=c99 -Wall -Wextra -Wpedantic -Werror $flags -c -o "$work/reader.o" \
  "$src/tests/install/reader.c" $(pkg-config --cflags gpubroker) || fail "cc with pkg-config"
# A C program links with the C compiler; an ASan+UBSan library needs the C++
# driver's sanitizer runtime.
link=$cc
[ -z "$flags" ] || link=$cxx
# shellcheck disable=SC2046,SC2086
"$link" $flags -o "$work/reader" "$work/reader.o" $(pkg-config --libs gpubroker) \
  -Wl,-rpath,"$root/$libdir" || fail "link with pkg-config"
"$work/reader" "$sock" install.check || fail "reader"
"$root/$bindir/gpubroker" --socket-dir "$sock" --json ls >"$work/ls.json" || fail "ls"
if grep -q '"install.check"' "$work/ls.json"; then fail "install.check is still there after free"; fi

step "the installed daemon stops clean"
kill -TERM "$daemon_pid"
wait "$daemon_pid" || fail "gpubrokerd exited with $?"
daemon_pid=
[ ! -e "$sock/session.sock" ] && [ ! -e "$sock/gpubroker.sock" ] || fail "sockets left behind"
echo "install test: passed"
