#!/bin/bash
# verify16.sh [ROUNDS] (GPU machine, repo root, .carry/ carried): `redist verify` of the cuDNN prefix that e2e.sh
# installs (471 MiB, files above 8 MiB recorded by 8 MiB pieces), page cache warm, in paired rounds:
#   redist verify --threads 1 | redist verify (all cores) |
#   openssl dgst -sha256 over every file, serially and with `xargs -P <cores>` (one job per file: the shell's best).
# Output: $OUT/verify16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/verify16.log") 2>&1
C=$PWD/.carry
# e2e.sh, less its GPU builds, race.py and the 14 components: the cuDNN mirror and its install, nothing else.
sed -e '/^echo "== nvcc build/,/^(cd \$W\/cm/d' -e '/race\.py/d' -e '/multi\.py/d' "$C/e2e.sh" > "$C/e2e-cudnn.sh"
bash "$C/e2e-cudnn.sh" > "$OUT/e2e.log" 2>&1 || { tail -20 "$OUT/e2e.log"; exit 1; }
P=/tmp/ge/cudnn
redist() { LD_LIBRARY_PATH=/tmp/ge/carry-libs "$C/bin/redist" "$@"; }  # the libraries e2e.sh unpacked
nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; uptime
grep -o '"schema": [0-9]*' "$P"/.redist/receipts/*/*.json | head -3
files() { find "$P" -type f -not -path "$P/.redist/*" -print0; }
echo "files: $(files | tr -cd '\0' | wc -c), bytes: $(files | du -cb --files0-from=- | tail -1)"
files | xargs -0 cat > /dev/null  # warm
TIMEFORMAT=%R
for round in $(seq "${1:-7}"); do
  t1=$( { time redist verify --prefix "$P" --threads 1 > /dev/null; } 2>&1 )
  tn=$( { time redist verify --prefix "$P" > /dev/null; } 2>&1 )
  os=$( { time (files | xargs -0 openssl dgst -sha256 > /dev/null); } 2>&1 )
  op=$( { time (files | xargs -0 -n1 -P "$(nproc)" openssl dgst -sha256 > /dev/null); } 2>&1 )
  echo "round $round: verify-threads1 $t1 verify-all $tn openssl-serial $os openssl-xargs-P $op"
done
uptime
