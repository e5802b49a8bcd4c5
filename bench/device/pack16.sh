#!/bin/bash
# pack16.sh BUILD_DIR [BUILD_B]: what bench/device/*16.sh need in .carry/ (see ../shared/device/README.md):
# the shared harness's pack.sh, plus the check probe (found beside the tools) and the scripts themselves.
# BUILD_B: a second build (another commit, same libraries) whose tools go to .carry/bin-b for the A/B rows of
# paired16.sh and zstd16.sh.
set -euo pipefail
B=${1:?build dir}; B=$(realpath "$B"); BB=${2:+$(realpath "$2")}; cd "$(dirname "$0")/../.."
bash ../shared/device/pack.sh "$B" .carry
cp "$B/bin/redist-check-probe" .carry/bin/ && strip .carry/bin/redist-check-probe
cp bench/device/run16.sh bench/device/check16.sh bench/device/scale16.sh bench/device/paired16.sh \
  bench/device/paired16.py bench/device/ab16.sh bench/device/tail16.sh \
  bench/device/loud16.sh bench/device/parts16.sh bench/device/shell16.sh \
  bench/device/comp16.sh bench/device/verify16.sh bench/device/zstd16.sh .carry/
# zstd16.sh's floor: the zstd command and the one library of it that the carried ones lack.
cp /usr/bin/zstd .carry/bin/ && rm -rf .carry/zstd-libs && mkdir -p .carry/zstd-libs && cp -L /lib/x86_64-linux-gnu/liblz4.so.1 .carry/zstd-libs/
rm -rf .carry/bin-b
if [ -n "$BB" ]; then
  # The check probe too: without it B's tools would run `redist __check-probe`, a larger binary to start.
  mkdir -p .carry/bin-b && cp "$BB/bin/redist" "$BB/bin/cudnn-fetch" "$BB/bin/redist-check-probe" .carry/bin-b/
  strip .carry/bin-b/*
fi
grep -qx '/.carry/' .git/info/exclude || echo '/.carry/' >> .git/info/exclude
du -sh .carry
