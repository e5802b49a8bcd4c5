#!/bin/bash
# check16.sh (GPU machine, repo root, .carry/ carried by pack16.sh): where the time of a full
# `redist check` goes on the real cuDNN tree (the goal: the CPU checks take under 200 ms).
# It installs the image's pip cuDNN as one archive (packed with xz -1: only the tree matters here),
# then times, five times each: the quick and the full check (wall, and the report's own seconds), and
# the probe child's pieces on their own: the driver query with and without cuInit, and dlopen(RTLD_NOW)
# of each library, the way the full check's loader children run them.
# Everything goes to $OUT/check16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; exec > >(tee $OUT/check16.log) 2>&1
C=$PWD/.carry; W=/tmp/gc; rm -rf $W; mkdir -p $W/www
tar -C $W -xJf $C/libs.tar.xz; RL=$W/carry-libs; B=$C/bin
LDSO=$(ls /lib64/ld-linux-x86-64.so.2)
t() { local tool=$1; shift; "$LDSO" --library-path "$RL" "$B/$tool" "$@"; }
ms() { echo $(( ($2 - $1) / 1000000 )); }
echo "== host: $(nproc) cores; $(nvidia-smi -L | head -1)"
PC=$(python3 -c "import importlib.util as u; print(list(u.find_spec('nvidia.cudnn').submodule_search_locations)[0])")
V=$(awk '/define CUDNN_MAJOR/{a=$3}/define CUDNN_MINOR/{b=$3}/define CUDNN_PATCHLEVEL/{c=$3}END{print a"."b"."c}' $PC/include/cudnn_version.h)
top=cudnn-linux-x86_64-$V.1_cuda13-archive; A=$W/src/$top; mkdir -p $A/lib $A/include
cp -a $PC/include/*.h $A/include/; echo "license placeholder" > $A/LICENSE
for f in $PC/lib/libcudnn*.so.9; do b=$(basename $f .so.9); cp $f $A/lib/$b.so.$V; ln -s $b.so.$V $A/lib/$b.so.9; ln -s $b.so.9 $A/lib/$b.so; done
rel=cudnn/linux-x86_64/$top.tar.xz; mkdir -p $W/www/cudnn/redist/cudnn/linux-x86_64
tar -C $W/src -cf - $top | xz -T0 -1 > $W/www/cudnn/redist/$rel
python3 - $W/www/cudnn/redist $rel $V <<'PY'
import hashlib, json, os, sys
root, rel, v = sys.argv[1:]; p = os.path.join(root, rel); h = hashlib.sha256(); m = hashlib.md5()
with open(p, "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""): h.update(b); m.update(b)
json.dump({"release_label": v, "release_product": "cudnn", "cudnn": {"name": "cuDNN", "license": "cudnn", "version": v + ".1",
  "linux-x86_64": {"cuda13": {"relative_path": rel, "sha256": h.hexdigest(), "md5": m.hexdigest(), "size": str(os.path.getsize(p))}}}},
  open(os.path.join(root, f"redistrib_{v}.json"), "w"))
PY
P=$W/prefix
t cudnn-fetch $V --base-url file://$W/www --prefix $P --cuda 13 --platform linux-x86_64 --no-cache --quiet --no-check || exit 1
echo "== the tree: $(du -sh $P/lib | cut -f1) in $P/lib"; ls -la $P/lib
echo "== checks, 5 runs each: wall ms (tool start included) / the report's seconds"
for depth in --quick ""; do
  for i in 1 2 3 4 5; do
    s=$(date +%s%N); sec=$(t redist check --prefix $P $depth --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['seconds'])"); e=$(date +%s%N)
    echo "redist check ${depth:-(full)}: $(ms $s $e) ms wall (python parse included), report ${sec} s"
  done
done
t redist check --prefix $P --json | python3 -c "
import json,sys; d=json.load(sys.stdin)
for f in d.get('findings', []): print('  ', f.get('severity'), f.get('check'), (f.get('message') or '')[:160])"
PROBE=$B/redist-check-probe
CUDA=$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')
echo "== the probe's pieces (libcuda: ${CUDA:-none})"
for i in 1 2 3; do
  s=$(date +%s%N); "$PROBE" --quick driver "$CUDA" >/dev/null; e=$(date +%s%N); echo "driver, quick (no cuInit): $(ms $s $e) ms"
  s=$(date +%s%N); "$PROBE" driver "$CUDA" >/dev/null; e=$(date +%s%N); echo "driver, full (cuInit + GPUs): $(ms $s $e) ms"
done
for f in $P/lib/*.so.$V; do
  s=$(date +%s%N); LD_LIBRARY_PATH=$P/lib "$PROBE" load "$f" >/dev/null; e=$(date +%s%N)
  echo "load $(basename $f) ($(du -h $f | cut -f1)): $(ms $s $e) ms"
done
s=$(date +%s%N); LD_LIBRARY_PATH=$P/lib "$PROBE" $(for f in $P/lib/*.so.$V; do echo load $f; done) >/dev/null; e=$(date +%s%N)
echo "load all in one child: $(ms $s $e) ms"
