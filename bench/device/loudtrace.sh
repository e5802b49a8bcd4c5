#!/bin/bash
# loudtrace.sh: needs bin-b built with bench/device/trace.patch; see loudtrace-2026-12-01.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
C=$PWD/.carry; W=/tmp/ge; RL=$W/carry-libs
sed -e '/^echo "== nvcc build/,/^(cd \$W\/cm/d' -e '/race\.py/d' -e '/multi\.py/d' "$C/e2e.sh" > "$C/e2e-cudnn.sh"
bash "$C/e2e-cudnn.sh" > "$OUT/e2e.log" 2>&1
V=$(find $W/www/cudnn/redist -name 'redistrib_*.json' | sed -n 's/.*redistrib_\(.*\)\.json$/\1/p')
for mode in loud quiet loud quiet loud; do
  q=; [ $mode = quiet ] && q=--quiet
  rm -rf $W/pp $W/pc; sync
  echo "== B traced, $mode"
  REDIST_TRACE=1 LD_LIBRARY_PATH=$RL "$C/bin-b/cudnn-fetch" "$V" --base-url http://127.0.0.1:18080 --prefix $W/pp --cache-dir $W/pc --cuda 13 --platform linux-x86_64 $q 2>&1 >/tmp/so.txt | grep -E "^T .* (main|run_fetch|install begins|posted 0 |install returned|recorded|checked)" | awk 'NR==1{t0=$2} {printf "%.3f %s\n", $2-t0, substr($0, index($0,$3))}'
  cat /tmp/so.txt
  rm -rf $W/pp $W/pc; sync
  s=$(date +%s%N); LD_LIBRARY_PATH=$RL "$C/bin/cudnn-fetch" "$V" --base-url http://127.0.0.1:18080 --prefix $W/pp --cache-dir $W/pc --cuda 13 --platform linux-x86_64 $q > /dev/null 2>&1; e=$(date +%s%N)
  echo "A $mode: $(( (e - s) / 1000000 )) ms"
done
exit 0
P=$C/bin/redist-check-probe; L=/usr/local/nvidia/lib64/libcuda.so.1; [ -e "$L" ] || L=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}'); echo "libcuda: $L"; ls -la "$(dirname "$L")" | grep -i "nvidia-ml\|libcuda" | head
for d in full quick full quick; do f=; [ $d = quick ] && f=--quick; s=$(date +%s%N); LD_LIBRARY_PATH=$RL $P __check-probe $f driver "$L"; e=$(date +%s%N); echo "$d: $(( (e - s) / 1000000 )) ms"; done
