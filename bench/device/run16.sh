#!/bin/bash
# run16.sh (GPU machine, repo root, .carry/ carried): the 16-core scenarios and the
# post-install check timing, with the binaries built on the 2-core machine.
#   1. ../shared/device/e2e.sh as is: real cuDNN 9.19 packed the NVIDIA way, installed by cudnn-fetch,
#      a convolution built against it (nvcc and CMake redist_fetch) run on the GPU, then race.py (one
#      archive, cold, vs xz -T0 and shell pipelines) and multi.py (14 components, cold, vs every archive
#      decoded at once, with peak RSS);
#   2. one cold install of each with --profile (per-stage busy/wait times);
#   3. the CPU-only checks on the installed cuDNN tree, timed (the post-install depth and the full one),
#      and `redist check --gpu`.
# Prepare here:  cmake --preset release-ish build, then  bash bench/device/pack16.sh build
# Everything goes to $OUT/run16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; exec > >(tee $OUT/run16.log) 2>&1
C=$PWD/.carry
bash $C/e2e.sh
W=/tmp/ge; RL=$W/carry-libs; B=$C/bin; U=http://127.0.0.1:18080
LDSO=$(ls /lib64/ld-linux-x86-64.so.2)
t() { local tool=$1; shift; "$LDSO" --library-path "$RL" "$B/$tool" "$@"; }
V=$(ls $W/www/cudnn/redist/ | sed -n 's/^redistrib_\(.*\)\.json$/\1/p' | head -1)
echo; echo "== 2. cold installs with --profile ($(nproc) cores)"
rm -rf $W/pp $W/pc; /usr/bin/time -f "wall %e s, peak RSS %M KiB" env LD_LIBRARY_PATH=$RL $B/cudnn-fetch $V --base-url $U --prefix $W/pp --cache-dir $W/pc --cuda 13 --platform linux-x86_64 --quiet --profile
rm -rf $W/mp $W/mc; /usr/bin/time -f "wall %e s, peak RSS %M KiB" env LD_LIBRARY_PATH=$RL $B/redist fetch cuda 13.9.9 --base-url http://127.0.0.1:18081 --prefix $W/mp --cache-dir $W/mc --platform linux-x86_64 --quiet --profile
echo; echo "== 3. check timing on the cuDNN tree (t() keeps the user's loader path clean)"
for depth in "--quick" ""; do
  for i in 1 2 3 4 5; do
    s=$(date +%s%N); t redist check --prefix $W/pp $depth >/dev/null 2>&1; rc=$?; e=$(date +%s%N)
    echo "redist check $depth: $(( (e - s) / 1000000 )) ms rc=$rc"
  done
done
t redist check --prefix $W/pp --gpu; echo "check --gpu rc=$?"
