#!/bin/bash
# ab16.sh [ROUNDS] (GPU machine, repo root, .carry/ carried with a bin-b): an A/B of two builds with more rounds
# than paired16.sh fits in one call. It prepares the same mirrors as ../shared/device/e2e.sh (that script without
# its GPU builds and race.py; multi.py still packs and serves the 14 components and races them once, 3 runs),
# then runs paired16.py with only the floor and the two builds (PAIRED_AB_ONLY=1).
# Prepare here:  bash bench/device/pack16.sh build build-b      Output: $OUT/ab16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/ab16.log") 2>&1
C=$PWD/.carry
[ -d "$C/bin-b" ] || { echo "ab16.sh: .carry/bin-b is missing (pack16.sh BUILD BUILD_B)"; exit 2; }
# e2e.sh, less the nvcc and CMake builds (GPU) and race.py: what is left packs, serves and installs.
sed -e '/^echo "== nvcc build/,/^(cd \$W\/cm/d' -e '/race\.py/d' "$C/e2e.sh" > "$C/e2e-lite.sh"
bash "$C/e2e-lite.sh"
PAIRED_AB_ONLY=1 python3 "$C/paired16.py" "${1:-10}" "$C/bin" "$C/bin-b"
