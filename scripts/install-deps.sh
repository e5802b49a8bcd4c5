#!/usr/bin/env bash
# Installs redist's dependencies from Debian 12's archive.
#
#   install-deps.sh             everything: building, running, and the whole
#                               test suite (Catch2, clang for the fuzz targets,
#                               nginx for the end-to-end tests, ...)
#   install-deps.sh --minimal   only what building and running the tools and
#                               scripts/demo.sh need
#
# Safe to re-run; skips apt entirely when everything is already there.
set -euo pipefail

minimal=(
  build-essential cmake ninja-build pkg-config
  libsimdjson-dev libcurl4-openssl-dev libarchive-dev liblzma-dev libzstd-dev libssl-dev
  libcli11-dev
  libelf-dev                        # redist check: ELF reader (elfutils)
  libtomlplusplus-dev               # redist.toml project files
  python3 xz-utils                  # scripts/make_demo_mirror.py
  ca-certificates                   # HTTPS to NVIDIA's servers
)
tests=(
  git catch2
  python3-jsonschema                # SBOM schema validation in the tests
  clang libclang-rt-14-dev          # libFuzzer targets
  nginx-light zstd openssl          # e2e fixtures: loopback server, archives, TLS
  docker-registry                   # e2e: a real OCI registry (CNCF distribution 2.8)
  skopeo                            # e2e: a real third-party OCI client copies what redist pushes
  debootstrap help2man              # release bundle (package.sh): chroot test, man pages
)

case "${1:-}" in
  "") packages=("${minimal[@]}" "${tests[@]}") ;;
  --minimal) packages=("${minimal[@]}") ;;
  *) echo "usage: $0 [--minimal]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's nginx package may start a system nginx on port 80; the tests run
# their own on loopback and never need it.
# The same for docker-registry's system service (port 5000): the tests start
# their own on a free loopback port.
if [ -z "${1:-}" ] && command -v service >/dev/null 2>&1; then
  service nginx stop >/dev/null 2>&1 || true
  service docker-registry stop >/dev/null 2>&1 || true
fi
echo "install-deps: all dependencies present${1:+ ($1)}"
