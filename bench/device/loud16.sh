#!/bin/bash
# loud16.sh ROUNDS: one archive, paired rounds of the floor and builds A (.carry/bin) and B (.carry/bin-b) as a
# person runs cudnn-fetch: without --quiet (the preflight asks the driver before the download), output discarded.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/loud16.log") 2>&1
C=$PWD/.carry; W=/tmp/ge; RL=$W/carry-libs
sed -e '/^echo "== nvcc build/,/^(cd \$W\/cm/d' -e '/race\.py/d' -e '/multi\.py/d' "$C/e2e.sh" > "$C/e2e-cudnn.sh"
bash "$C/e2e-cudnn.sh" > "$OUT/e2e.log" 2>&1
A=$(find $W/www/cudnn -name '*.tar.xz'); V=$(find $W/www/cudnn/redist -name 'redistrib_*.json' | sed -n 's/.*redistrib_\(.*\)\.json$/\1/p')
t() { local s e; s=$(date +%s%N); "$@"; e=$(date +%s%N); echo $(( (e - s) / 1000 )); }
# The previous run's tree and cache are removed and synced before the timing starts (an earlier version timed them too).
clean() { rm -rf $W/pp $W/pc; sync; }
fetch() { LD_LIBRARY_PATH=$RL "$1/cudnn-fetch" "$V" --base-url http://127.0.0.1:18080 --prefix $W/pp --cache-dir $W/pc --cuda 13 --platform linux-x86_64 > /dev/null 2>&1; }
for i in $(seq 1 "${1:-12}"); do
  sync; f=$(t sh -c "xz -T0 -dc $A > /dev/null")
  if [ $((i % 2)) = 0 ]; then clean; a=$(t fetch "$C/bin"); clean; b=$(t fetch "$C/bin-b")
  else clean; b=$(t fetch "$C/bin-b"); clean; a=$(t fetch "$C/bin"); fi
  echo "round $i floor_us $f A_us $a B_us $b"
done
python3 - "$OUT/loud16.log" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("round ")]
f = [int(r[3]) for r in rows]; a = [int(r[5]) for r in rows]; b = [int(r[7]) for r in rows]
print("medians: floor %.3f s, A %.3f s, B %.3f s" % (st.median(f) / 1e6, st.median(a) / 1e6, st.median(b) / 1e6))
print("median of per-round ratios: A %.3fx, B %.3fx; A/B %.3f, A faster in %d of %d" % (
    st.median([x / y for x, y in zip(a, f)]), st.median([x / y for x, y in zip(b, f)]),
    st.median([x / y for x, y in zip(a, b)]), sum(x < y for x, y in zip(a, b)), len(a)))
PY
