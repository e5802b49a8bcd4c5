#!/bin/bash
# Needs the same patched build as trace16.sh; REDIST_EXP_AFTER_HASH=1 (in that patch) posts a split file's writes
# after its hash, per MiB. Result: no difference (bench/device/exp16-2026-12-01.log); not kept.
# exp16.sh ROUNDS: paired rounds of floor / redist / redist with REDIST_EXP_AFTER_HASH=1 (same binary)
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/exp16.log") 2>&1
C=$PWD/.carry; W=/tmp/ge; RL=$W/carry-libs; B=$C/bin
sed -e '/^echo "== nvcc build/,/^(cd \$W\/cm/d' -e '/race\.py/d' -e '/multi\.py/d' "$C/e2e.sh" > "$C/e2e-cudnn.sh"
bash "$C/e2e-cudnn.sh" > $OUT/e2e.log 2>&1
A=$(find $W/www/cudnn -name '*.tar.xz'); V=$(ls $W/www/cudnn/redist | sed -n 's/^redistrib_\(.*\)\.json$/\1/p')
t() { local s e; s=$(date +%s%N); "$@"; e=$(date +%s%N); echo $(( (e - s) / 1000 )); }
fetch() { rm -rf $W/pp $W/pc; sync; LD_LIBRARY_PATH=$RL $B/cudnn-fetch "$V" --base-url http://127.0.0.1:18080 --prefix $W/pp --cache-dir $W/pc --cuda 13 --platform linux-x86_64 --quiet; }
for i in $(seq 1 ${1:-10}); do
  sync; f=$(t sh -c "xz -T0 -dc $A > /dev/null")
  if [ $((i % 2)) = 0 ]; then a=$(t fetch); b=$(REDIST_EXP_AFTER_HASH=1 t fetch); else b=$(REDIST_EXP_AFTER_HASH=1 t fetch); a=$(t fetch); fi
  echo "round $i floor_us $f base_us $a exp_us $b"
done
python3 - "$OUT/exp16.log" <<'PY'
import sys, statistics as st
rows=[l.split() for l in open(sys.argv[1]) if l.startswith("round ")]
f=[int(r[3]) for r in rows]; a=[int(r[5]) for r in rows]; b=[int(r[7]) for r in rows]
print("median floor %.3f base %.3f exp %.3f" % (st.median(f)/1e6, st.median(a)/1e6, st.median(b)/1e6))
print("median of paired ratios: base %.3fx exp %.3fx; exp/base %.3f" % (st.median([x/y for x,y in zip(a,f)]), st.median([x/y for x,y in zip(b,f)]), st.median([y/x for x,y in zip(a,b)])))
PY
for i in 1 2 3; do
  for v in exp base; do
    if [ $v = exp ]; then REDIST_TRACE=1 REDIST_EXP_AFTER_HASH=1 fetch 2> /tmp/tr.txt; else REDIST_TRACE=1 fetch 2> /tmp/tr.txt; fi
    echo "== $v $i" >> $OUT/traces.txt
    grep -v "created\|hashed\|\.h$\|LICENSE" /tmp/tr.txt | awk 'NR==1{t0=$2} /^T/{printf "%.3f %s\n", $2-t0, substr($0, index($0,$3))}' >> $OUT/traces.txt
  done
done
