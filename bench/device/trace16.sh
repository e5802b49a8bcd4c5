#!/bin/bash
# trace16.sh (GPU machine, repo root, .carry/ carried): per-block and per-file timelines of one archive's install.
# Needs a cudnn-fetch built with bench/device/trace.patch applied (REDIST_TRACE=1 prints 'T <time> <event>'
# lines: xz blocks posted/began/decoded/handed, files created/hashed/finished, fetch's steps). The results:
# bench/device/trace16-2026-12-01.log; bench/RESULTS.md explains them.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/trace16.log") 2>&1
C=$PWD/.carry; W=/tmp/ge; RL=$W/carry-libs; B=$C/bin
sed -e '/^echo "== nvcc build/,/^(cd \$W\/cm/d' -e '/race\.py/d' -e '/multi\.py/d' "$C/e2e.sh" > "$C/e2e-cudnn.sh"
bash "$C/e2e-cudnn.sh" > $OUT/e2e.log 2>&1
A=$(find $W/www/cudnn -name '*.tar.xz'); V=$(ls $W/www/cudnn/redist | sed -n 's/^redistrib_\(.*\)\.json$/\1/p')
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket)'
xz --robot -lv "$A" | head -40 > $OUT/xzlist.txt
tar -tvJf "$A" > $OUT/tarlist.txt
for i in 1 2 3 4 5 6 7 8; do
  sync; s=$(date +%s.%N); xz -T0 -dc "$A" > /dev/null; e=$(date +%s.%N); echo "floor $i: $(awk -v a=$s -v b=$e 'BEGIN{print b-a}')"
  rm -rf $W/pp $W/pc; sync
  s=$(date +%s.%N)
  REDIST_TRACE=1 LD_LIBRARY_PATH=$RL $B/cudnn-fetch "$V" --base-url http://127.0.0.1:18080 --prefix $W/pp --cache-dir $W/pc --cuda 13 --platform linux-x86_64 --quiet 2> $OUT/trace$i.txt
  e=$(date +%s.%N); echo "redist $i: $(awk -v a=$s -v b=$e 'BEGIN{print b-a}') start $s"
done
