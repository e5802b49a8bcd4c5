#!/bin/bash
# device.sh (GPU machine, repo root, .carry-check/ carried): evidence for `redist check`.
#   1. pack the image's real cuDNN 9.19 (pip wheel) the NVIDIA way (as ../shared/device/e2e.sh does),
#      serve it on loopback, install it with cudnn-fetch (which runs the CPU checks after the install);
#   2. `redist check --gpu`: must pass, the convolution must match the CPU reference;
#   3. time the CPU-only checks on that tree (the < 200 ms goal), several runs;
#   4. break it on purpose and show each finding: a shadowing cuDNN of another version on
#      LD_LIBRARY_PATH, a missing dependency, a driver too old for the CUDA 13 variant.
# Everything goes to $OUT/check-gpu.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; exec > >(tee $OUT/check-gpu.log) 2>&1
C=$PWD/.carry-check; W=/tmp/gc; rm -rf $W; mkdir -p $W/www
tar -C $W -xJf $C/libs.tar.xz; RL=$W/carry-libs; B=$C/bin
r() { LD_LIBRARY_PATH=$RL "$@"; }
# The tools need the carried Debian libraries, but the checks must see the machine's loader path,
# not ours: `redist` passes its own $LD_LIBRARY_PATH on as the user's. So the tools run through
# ld.so --library-path, which leaves the environment alone.
LDSO=$(ls /lib64/ld-linux-x86-64.so.2)
t() { local tool=$1; shift; "$LDSO" --library-path "$RL" "$B/$tool" "$@"; }
echo "== host: $(nproc) cores; $(nvidia-smi -L | head -1); driver $(cat /proc/driver/nvidia/version | head -1)"
t redist --version || exit 1
PC=$(python3 -c "import importlib.util as u; print(list(u.find_spec('nvidia.cudnn').submodule_search_locations)[0])")
V=$(awk '/define CUDNN_MAJOR/{a=$3}/define CUDNN_MINOR/{b=$3}/define CUDNN_PATCHLEVEL/{c=$3}END{print a"."b"."c}' $PC/include/cudnn_version.h)
echo "== pip cuDNN $V at $PC"
top=cudnn-linux-x86_64-$V.1_cuda13-archive; A=$W/src/$top; mkdir -p $A/lib $A/include
cp -a $PC/include/*.h $A/include/; echo "cuDNN license placeholder" > $A/LICENSE
for f in $PC/lib/libcudnn*.so.9; do b=$(basename $f .so.9); cp $f $A/lib/$b.so.$V; ln -s $b.so.$V $A/lib/$b.so.9; ln -s $b.so.9 $A/lib/$b.so; done
rel=cudnn/linux-x86_64/$top.tar.xz; mkdir -p $W/www/cudnn/redist/cudnn/linux-x86_64
tar -C $W/src -cf - $top | xz -T0 -1 > $W/www/cudnn/redist/$rel; du -h $W/www/cudnn/redist/$rel
python3 - $W/www/cudnn/redist $rel $V <<'PY'
import hashlib, json, os, sys
root, rel, v = sys.argv[1:]; p = os.path.join(root, rel); h = hashlib.sha256(); m = hashlib.md5()
with open(p, "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""): h.update(b); m.update(b)
json.dump({"release_date": "2026-01-01", "release_label": v, "release_product": "cudnn", "cudnn": {"name": "NVIDIA CUDA Deep Neural Network library",
  "license": "cudnn", "version": v + ".1", "linux-x86_64": {"cuda13": {"relative_path": rel, "sha256": h.hexdigest(), "md5": m.hexdigest(), "size": str(os.path.getsize(p))}}}},
  open(os.path.join(root, f"redistrib_{v}.json"), "w"), indent=4)
PY
(cd $W/www && setsid python3 -m http.server 18081 --bind 127.0.0.1 >/dev/null 2>&1 &); sleep 1; U=http://127.0.0.1:18081
P=$W/cudnn
echo; echo "== 1. install with cudnn-fetch (CPU checks run after the install)"
t cudnn-fetch $V --base-url $U --prefix $P --cuda 13 --platform linux-x86_64 --cache-dir $W/cache; echo "cudnn-fetch rc=$?"
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-<unset>}"
echo; echo "== 2. redist check --gpu"
t redist check --prefix $P --gpu; echo "check --gpu rc=$?"
echo; echo "== 3. CPU-only checks on the cuDNN tree, 7 runs (internal time = what fetch adds)"
for i in 1 2 3 4 5 6 7; do s=$(date +%s%N); t redist check --prefix $P -q | tail -1 | grep -o 'in [0-9.]* s'; e=$(date +%s%N); echo "   wall incl. redist start: $(( (e-s)/1000000 )) ms"; done
echo; echo "== 3a. what fetch adds: cudnn-fetch --force (from the cache) runs the checks after the install, 5 runs"
for i in 1 2 3 4 5; do t cudnn-fetch $V --base-url $U --prefix $P --cuda 13 --platform linux-x86_64 --cache-dir $W/cache --force | grep '^checked'; done
echo; echo "== 3b. --json"
t redist check --prefix $P --json | head -30
echo; echo "== 4a. broken: a cuDNN of another version (fake, cudnnGetVersion 9.10.2) first on LD_LIBRARY_PATH"
mkdir -p $W/shadow; cp $C/fakes/libcudnn-9.10.2.so $W/shadow/libcudnn.so.9
LD_LIBRARY_PATH=$W/shadow t redist check --prefix $P; echo "check rc=$?"
echo; echo "== 4b. broken: a second component needing libmissing.so.1, installed into the same prefix"
(cd $C && python3 -c "import sys; sys.path.insert(0, '.'); import test_check as tc; tc.make_release('$W/demo', 'demo', '1.0.0', 'demo', '1.0.0', tc.versioned_lib('fakes/libbroken.so', '1.0.0', 'libbroken.so.1'))")
t redist fetch --manifest $W/demo/demo/redist/redistrib_1.0.0.json --prefix $P --platform linux-x86_64 --cuda 13 --no-cache; echo "fetch rc=$?"
t redist check --prefix $P; echo "check rc=$?"
t redist remove --prefix $P --component demo
echo; echo "== 4c. broken: a driver too old for the CUDA 13 variant (fake libcuda.so.1 reporting 12.4 first on LD_LIBRARY_PATH)"
mkdir -p $W/olddriver; cp $C/fakes/libcuda-12040.so $W/olddriver/libcuda.so.1
LD_LIBRARY_PATH=$W/olddriver t redist check --prefix $P; echo "check rc=$?"
echo "-- and the preflight of a fetch with it:"
LD_LIBRARY_PATH=$W/olddriver t cudnn-fetch $V --base-url $U --prefix $W/cudnn2 --cuda 13 --platform linux-x86_64 --cache-dir $W/cache --no-check; echo "fetch rc=$?"
echo; echo "== 5. repaired: the same prefix, nothing on LD_LIBRARY_PATH"
t redist check --prefix $P --gpu; echo "check --gpu rc=$?"
