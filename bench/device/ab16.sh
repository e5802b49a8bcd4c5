#!/bin/bash
# ab16.sh [ROUNDS] (GPU machine, repo root, .carry/ carried): paired rounds of the floor and redist builds only,
# more of them than paired16.sh fits in one call. It prepares the same mirrors as ../shared/device/e2e.sh (that
# script without its GPU builds and race.py; multi.py still packs and serves the 14 components and races them
# once, 3 runs), then runs paired16.py with only the floor and the builds (PAIRED_AB_ONLY=1): .carry/bin, and
# .carry/bin-b when packed. PAIRED_VARIANTS / PAIRED_ONE_VARIANTS / PAIRED_SCENARIOS pass through (see paired16.py).
# Prepare here:  bash bench/device/pack16.sh build [build-b]      Output: $OUT/ab16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/ab16.log") 2>&1
C=$PWD/.carry
# e2e.sh, less the nvcc and CMake builds (GPU) and race.py: what is left packs, serves and installs.
sed -e '/^echo "== nvcc build/,/^(cd \$W\/cm/d' -e '/race\.py/d' "$C/e2e.sh" > "$C/e2e-lite.sh"
bash "$C/e2e-lite.sh"
bins=("$C/bin"); [ -d "$C/bin-b" ] && bins+=("$C/bin-b")
PAIRED_AB_ONLY=1 python3 "$C/paired16.py" "${1:-10}" "${bins[@]}"
