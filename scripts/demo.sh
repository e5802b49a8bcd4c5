#!/usr/bin/env bash
# Quick-start demo: installs the build dependencies, builds only the tools it
# runs (redist, cudnn-fetch and the check probe; no tests, fuzzers or
# examples) into ./build-demo (or $DEMO_BUILD_DIR), generates a local demo mirror
# of NVIDIA's layout (small generated archives, real hashes) and runs
# cudnn-fetch against it. No internet needed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --minimal
build_dir=${DEMO_BUILD_DIR:-build-demo}  # not BUILD_DIR: that is the test build's (test.sh)
# Tests off also leaves out the package tests (their option lives in tests/).
BUILD_DIR=$build_dir bash scripts/build.sh -DREDIST_BUILD_TESTS=OFF -DREDIST_BUILD_FUZZERS=OFF \
  -DREDIST_BUILD_EXAMPLES=OFF redist_tool cudnn-fetch_tool
demo=${DEMO_DIR:-/tmp/redist-demo}
python3 scripts/make_demo_mirror.py --dest "$demo/mirror" --quiet --force
rm -rf "$demo/cudnn" "$demo/cache"
set -x
"$build_dir/bin/redist" versions cudnn --base-url "file://$demo/mirror"
"$build_dir/bin/cudnn-fetch" 9 --base-url "file://$demo/mirror" --prefix "$demo/cudnn" --cache-dir "$demo/cache"
"$build_dir/bin/redist" verify --prefix "$demo/cudnn"
{ set +x; } 2>/dev/null
echo "Installed tree:"
(cd "$demo/cudnn" && find . -mindepth 1 -path ./.redist -prune -o \( -type l -printf '%M %P -> %l\n' \) -o \( ! -type l -printf '%M %P\n' \) | sort -k2)
