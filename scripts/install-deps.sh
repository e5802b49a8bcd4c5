#!/usr/bin/env bash
# Installs the build and test dependencies from Debian 12's archive.
# Safe to re-run; skips apt entirely when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libsimdjson-dev libcurl4-openssl-dev libarchive-dev liblzma-dev libssl-dev
  catch2 libcli11-dev
  libelf-dev                        # redist check: ELF reader (elfutils)
  libtomlplusplus-dev               # redist.toml project files
  python3-jsonschema                # SBOM schema validation in the tests
  clang libclang-rt-14-dev          # libFuzzer target
  nginx-light python3 xz-utils zstd openssl ca-certificates
)

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
if command -v service >/dev/null 2>&1; then service nginx stop >/dev/null 2>&1 || true; fi
echo "install-deps: all dependencies present"
