#!/usr/bin/env bash
# Configures and builds redist into ./build (or $BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDIST_WERROR=ON >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
