#!/bin/sh
# setup.sh - installs Strata's build and test dependencies on Debian 12
# with apt (when they are missing) and builds the release tree in build/.
# (prometheus serves the HTTP API's tests: a real Prometheus
# scrapes /metrics; tests/cluster/openai_client.py also needs node and npm
# (any Node 18+) to npm-install the
# official openai client into the build dir; gdb prints the threads of
# the processes still running when a cluster test fails.)
# Usage: deploy/setup.sh [--no-build]
set -eu
cd "$(dirname "$0")/.."

PKGS="meson ninja-build pkg-config cmake gcc libnng-dev libprotobuf-c-dev protobuf-c-compiler
libsodium-dev libzstd-dev libhwloc-dev check libcjson-dev libpcre2-dev clang libclang-rt-14-dev
python3 iproute2 libmicrohttpd-dev prometheus systemd gdb curl time libcurl4-openssl-dev"

# Node: any Node 18+ with npm will do (this machine's may come from
# elsewhere, e.g. NodeSource's nodejs, which carries its own npm and
# conflicts with Debian's npm package), so Debian's are added only when
# there is no node or no npm at all.
command -v node >/dev/null 2>&1 || PKGS="$PKGS nodejs"
command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm"

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "setup: installing:$missing"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
fi

if [ "${1:-}" = "--no-build" ]; then
    exit 0
fi
if [ ! -d build ]; then
    meson setup build --buildtype=release
fi
ninja -C build
echo "setup: built build/cli/strata"
