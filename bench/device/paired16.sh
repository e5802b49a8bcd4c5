#!/bin/bash
# paired16.sh [ROUNDS] (GPU machine, repo root, .carry/ carried): ../shared/device/e2e.sh as is (packs and serves
# the mirrors, installs cuDNN, runs the GPU convolutions, race.py and multi.py), then paired16.py: ROUNDS (default 7)
# paired rounds of the one-archive and 14-component scenarios, with .carry/bin and, when present, .carry/bin-b.
# Prepare here:  bash bench/device/pack16.sh build [build-b]      Output: $OUT/paired16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/paired16.log") 2>&1
C=$PWD/.carry
bash "$C/e2e.sh"
bins=("$C/bin"); [ -d "$C/bin-b" ] && bins+=("$C/bin-b")
python3 "$C/paired16.py" "${1:-7}" "${bins[@]}"
