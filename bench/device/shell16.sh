#!/bin/bash
# shell16.sh [ROUNDS] (GPU machine, repo root, .carry/ carried): one archive only, paired rounds of every
# contender of paired16.py (the floor, the best shell pipeline `curl | tee sha256sum | tar -I 'xz -T0'`, the floor
# with the files written, redist from file:// and redist over http) for .carry/bin alone: is redist faster than the
# shell, and where does it stand against the floor on this machine. Output: $OUT/shell16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/shell16.log") 2>&1
C=$PWD/.carry
# e2e.sh, less its GPU builds, race.py and the 14 components: the cuDNN mirror on :18080 and nothing else.
sed -e '/^echo "== nvcc build/,/^(cd \$W\/cm/d' -e '/race\.py/d' -e '/multi\.py/d' "$C/e2e.sh" > "$C/e2e-cudnn.sh"
bash "$C/e2e-cudnn.sh" > "$OUT/e2e.log" 2>&1 || { tail -20 "$OUT/e2e.log"; exit 1; }
nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; uptime
PAIRED_SCENARIOS="one archive" python3 "$C/paired16.py" "${1:-12}" "$C/bin"
uptime
