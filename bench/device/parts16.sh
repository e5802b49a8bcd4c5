#!/bin/bash
# parts16.sh [ROUNDS] (GPU machine, repo root, .carry/ carried with bin-b): one archive only, paired rounds of the
# floor, build A (.carry/bin), build B (.carry/bin-b) and A with --no-check (what the post-install check costs),
# then 4 runs of A with --profile (its timeline: when the straggler block's parts went on, when the install ended).
# A hands the block the stream waits for on in parts as it decodes, B only whole blocks.
# Prepare here:  bash bench/device/pack16.sh build build-b      Output: $OUT/parts16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/parts16.log") 2>&1
C=$PWD/.carry; W=/tmp/ge
# e2e.sh, less its GPU builds, race.py and the 14 components: the cuDNN mirror on :18080 and nothing else.
sed -e '/^echo "== nvcc build/,/^(cd \$W\/cm/d' -e '/race\.py/d' -e '/multi\.py/d' "$C/e2e.sh" > "$C/e2e-cudnn.sh"
bash "$C/e2e-cudnn.sh" > "$OUT/e2e.log" 2>&1 || { tail -20 "$OUT/e2e.log"; exit 1; }
nproc; lscpu | grep -E 'Model name|^CPU\(s\)'
PAIRED_AB_ONLY=1 PAIRED_SCENARIOS="one archive" PAIRED_ONE_VARIANTS="--no-check" \
  python3 "$C/paired16.py" "${1:-20}" "$C/bin" "$C/bin-b"
V=$(find $W/www/cudnn/redist -name 'redistrib_*.json' | sed -n 's/.*redistrib_\(.*\)\.json$/\1/p')
for i in 1 2 3 4; do
  rm -rf $W/pp $W/pc; sync
  echo "== A --profile, run $i"
  LD_LIBRARY_PATH=$W/carry-libs "$C/bin/cudnn-fetch" "$V" --base-url http://127.0.0.1:18080 --prefix $W/pp \
    --cache-dir $W/pc --cuda 13 --platform linux-x86_64 --quiet --profile 2>&1 | grep '^profile'
done
