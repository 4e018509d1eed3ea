#!/usr/bin/env bash
# `make base-image`: build the base image both Dockerfiles start from, debian:bookworm-slim, on a machine
# that reaches Debian's package mirror but no container registry: debootstrap (minbase) + docker import.
# Where a registry is reachable, `docker pull debian:bookworm-slim` gives the official image instead; both
# carry Debian 12 and its apt sources, which is all the Dockerfiles rely on. Needs root (debootstrap).
set -euo pipefail
tag=${1:-debian:bookworm-slim}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

command -v docker >/dev/null || { echo "make base-image: the docker CLI is missing: install Docker Engine (apt-get install docker.io) and start it" >&2; exit 2; }
if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base image $tag is already present" >&2
    exit 0
fi
command -v debootstrap >/dev/null || { echo "make base-image: debootstrap is missing: apt-get install debootstrap" >&2; exit 2; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
echo "building $tag with debootstrap from $mirror (about a minute)" >&2
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 \
    || { echo "make base-image: debootstrap failed, see $root.log" >&2; exit 1; }
rm -f "$root.log"
# The apt sources of the official image: the release, its updates and the security archive.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
tar --numeric-owner -C "$root" -c . | docker import --change 'CMD ["bash"]' - "$tag" >/dev/null
echo "base image $tag built" >&2
