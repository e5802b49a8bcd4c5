#!/bin/bash
# comp16.sh [ROUNDS] (GPU machine, repo root, .carry/ carried): an A/B of the 14-component install only, as many
# paired rounds as a short call allows. It packs and serves the 14 components the way multi.py does, without
# multi.py's own race and without the cuDNN mirror (paired16.py only lists that one: a placeholder stands in),
# then runs paired16.py's "14 components" with the floor and the builds (.carry/bin, .carry/bin-b).
# Prepare here:  bash bench/device/pack16.sh build build-b      Output: $OUT/comp16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/comp16.log") 2>&1
C=$PWD/.carry; W=/tmp/ge; rm -rf $W; mkdir -p $W/www/cudnn/redist/cudnn
tar -C $W -xJf $C/libs.tar.xz; RL=$W/carry-libs
echo '{}' > $W/www/cudnn/redist/redistrib_0.0.0.json; : > $W/www/cudnn/redist/cudnn/placeholder
echo "== host: $(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo); load: $(cut -d' ' -f1-3 /proc/loadavg)"
sed '/^env = dict/,$d' "$C/multi.py" > "$C/multi-pack.py"  # multi.py up to its server: pack and serve, no race
python3 "$C/multi-pack.py" $W/m "$C/bin" $RL
bins=("$C/bin"); [ -d "$C/bin-b" ] && bins+=("$C/bin-b")
PAIRED_AB_ONLY=1 PAIRED_SCENARIOS="14 components" python3 "$C/paired16.py" "${1:-8}" "${bins[@]}"
