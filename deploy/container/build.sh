#!/bin/sh
# build.sh - builds the OCI image of Strata from scratch (docs/deploy.md):
# no base image is pulled from any registry. mmdebstrap extracts, from
# Debian's own archive, exactly the packages that hold the shared libraries
# of the three binaries (found with ldd and dpkg -S on this Debian host) and
# what they depend on, without a shell, apt or dpkg; buildah puts that tree
# and strata, strata-coordinator and strata-worker (in /usr/local/bin) into
# an image from scratch and commits it to local container storage.
#
# Usage: deploy/container/build.sh [BUILD_DIR [IMAGE]]
#   BUILD_DIR  a meson build tree (default: build)
#   IMAGE      the image name (default: localhost/strata:RELEASE, RELEASE
#              being the build's `strata --version`)
# Needs: mmdebstrap, buildah (Debian packages of the same names), dpkg, ldd;
# root, or a user with subordinate ids (buildah unshare runs it then).
# Environment: STRATA_SUITE (default: this host's codename),
# STRATA_MIRROR (default: http://deb.debian.org/debian).
set -eu

BUILD=${1:-build}
BINS="cli/strata coordinator/strata-coordinator worker/strata-worker"
for b in $BINS; do
    [ -x "$BUILD/$b" ] || { echo "build.sh: $BUILD/$b is missing; build first (ninja -C $BUILD)" >&2; exit 1; }
done
for t in mmdebstrap buildah dpkg ldd; do
    command -v "$t" >/dev/null || { echo "build.sh: $t is not installed (apt-get install $t)" >&2; exit 1; }
done
RELEASE=$("$BUILD/cli/strata" --version | sed -n '1s/^strata //p')
IMAGE=${2:-localhost/strata:$RELEASE}
. /etc/os-release
SUITE=${STRATA_SUITE:-$VERSION_CODENAME}
MIRROR=${STRATA_MIRROR:-http://deb.debian.org/debian}

# the packages holding the libraries the binaries load (the dynamic loader
# included), by path as ldd resolves it on this host
pkgs=""
for b in $BINS; do
    for lib in $(ldd "$BUILD/$b" | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }'); do
        real=$(readlink -f "$lib")
        p=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$real" 2>/dev/null) ||
            { echo "build.sh: no Debian package holds $lib (used by $b)" >&2; exit 1; }
        p=${p%%:*}
        case " $pkgs " in *" $p "*) ;; *) pkgs="$pkgs $p" ;; esac
    done
done
include=$(echo $pkgs | tr ' ' ',')
echo "build.sh: $IMAGE from Debian $SUITE: $include"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# extract: the packages and their dependencies unpacked, no maintainer
# scripts, no essential set; documentation and the package database left out
mmdebstrap --variant=extract --include="$include" \
    --dpkgopt='path-exclude=/usr/share/*' \
    --customize-hook='rm -rf "$1/var" "$1/etc/apt" "$1/etc/dpkg"; mkdir -p "$1/tmp" "$1/etc"; ldconfig -r "$1"' \
    "$SUITE" "$tmp/rootfs.tar" "$MIRROR"

ctr=$(buildah from scratch)
buildah add "$ctr" "$tmp/rootfs.tar" /
for b in $BINS; do
    buildah copy --chmod 0755 "$ctr" "$BUILD/$b" /usr/local/bin/
done
buildah config --label org.opencontainers.image.title=strata \
    --label org.opencontainers.image.version="$RELEASE" \
    --label org.opencontainers.image.revision="$("$BUILD/cli/strata" --version | sed -n 's/^commit //p')" \
    --env PATH=/usr/local/bin --workingdir / --stop-signal SIGTERM \
    --entrypoint '["/usr/local/bin/strata"]' --cmd '--help' "$ctr"
buildah commit --rm "$ctr" "$IMAGE"
echo "build.sh: built $IMAGE"
