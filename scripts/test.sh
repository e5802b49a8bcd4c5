#!/usr/bin/env bash
# The whole test suite: dependencies, build, then every CTest test (unit
# tests, end-to-end tests against nginx on loopback, fuzz smoke run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
build_dir=${BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j 2 --timeout 900
