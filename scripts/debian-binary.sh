#!/usr/bin/env bash
# Takes one program out of a Debian package without installing the package:
#   scripts/debian-binary.sh PACKAGE PROGRAM DEST_DIR
# e.g. promtool from `prometheus`, whose installation would also enable and
# start a Prometheus server on :9090. Prints the path of the program.
set -euo pipefail
package=$1 program=$2 dest=$3

if [ -x "$dest/$program" ]; then echo "$dest/$program"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 0755 "$tmp"  # apt's download user must be able to write here
if ! (cd "$tmp" && apt-get download -qq "$package" >/dev/null 2>&1); then
  # A fresh machine has no package lists yet.
  [ "$(id -u)" -eq 0 ] || { echo "$0: cannot download $package (run as root)" >&2; exit 1; }
  apt-get update -qq
  (cd "$tmp" && apt-get download -qq "$package" >/dev/null)
fi
dpkg-deb --fsys-tarfile "$tmp"/"$package"_*.deb | tar -x -C "$tmp" "./usr/bin/$program"
mkdir -p "$dest"
install -m 0755 "$tmp/usr/bin/$program" "$dest/$program"
echo "$dest/$program"
