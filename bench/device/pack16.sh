#!/bin/bash
# pack16.sh BUILD_DIR: what bench/device/run16.sh needs in .carry/ (see ../shared/device/README.md):
# the shared harness's pack.sh, plus the check probe (found beside the tools) and run16.sh itself.
set -euo pipefail
B=${1:?build dir}; cd "$(dirname "$0")/../.."
bash ../shared/device/pack.sh "$B" .carry
cp "$B/bin/redist-check-probe" .carry/bin/ && strip .carry/bin/redist-check-probe
cp bench/device/run16.sh bench/device/check16.sh bench/device/scale16.sh .carry/
grep -qx '/.carry/' .git/info/exclude || echo '/.carry/' >> .git/info/exclude
du -sh .carry
