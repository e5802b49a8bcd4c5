#!/usr/bin/env bash
# Configures and builds redist into ./build (or $BUILD_DIR).
#
#   build.sh [-DOPTION=VALUE ...] [TARGET ...]
#
# -D arguments are passed to the configure step (e.g. -DREDIST_BUILD_TESTS=OFF);
# any other argument names a target to build instead of everything
# (e.g. redist_tool cudnn-fetch_tool).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
options=() targets=()
for arg in "$@"; do
  case "$arg" in
    -D*) options+=("$arg") ;;
    *) targets+=(--target "$arg") ;;
  esac
done
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DREDIST_WERROR=ON "${options[@]}" >/dev/null
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
