#!/bin/bash
# scale16.sh (GPU machine, repo root, .carry/ carried): the 16-core scenarios after the xz blocks
# moved onto the run's shared pool (lib/archive/xz_decode.cpp).
#   1. ../shared/device/e2e.sh as is: real cuDNN 9.19 packed the NVIDIA way, installed by cudnn-fetch, the
#      GPU convolution (nvcc and CMake redist_fetch), race.py (one archive, cold) and multi.py (14 components);
#   2. one cold install of each with --profile (per-stage busy/wait times);
#   3. the 14-component install under other memory budgets, twice each, with --profile.
# Prepare here:  bash bench/device/pack16.sh build   (a RelWithDebInfo build).  Output: $OUT/scale16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; exec > >(tee $OUT/scale16.log) 2>&1
C=$PWD/.carry
bash $C/e2e.sh
W=/tmp/ge; RL=$W/carry-libs; B=$C/bin; U=http://127.0.0.1:18080
V=$(ls $W/www/cudnn/redist/ | sed -n 's/^redistrib_\(.*\)\.json$/\1/p' | head -1)
echo; echo "== 2. cold installs with --profile ($(nproc) cores)"
for i in 1 2; do
  rm -rf $W/pp $W/pc; /usr/bin/time -f "wall %e s, peak RSS %M KiB" env LD_LIBRARY_PATH=$RL $B/cudnn-fetch $V --base-url $U --prefix $W/pp --cache-dir $W/pc --cuda 13 --platform linux-x86_64 --quiet --no-check --profile
done
for i in 1 2; do
  rm -rf $W/mp $W/mc; /usr/bin/time -f "wall %e s, peak RSS %M KiB" env LD_LIBRARY_PATH=$RL $B/redist fetch cuda 13.9.9 --base-url http://127.0.0.1:18081 --prefix $W/mp --cache-dir $W/mc --platform linux-x86_64 --quiet --no-check --profile
done
echo; echo "== 3. 14 components under other budgets"
for setting in "--max-memory 768MiB" "--max-memory 1536MiB" "--max-memory 2GiB"; do
  for i in 1 2; do
    rm -rf $W/mp $W/mc; echo "-- $setting (run $i)"
    /usr/bin/time -f "wall %e s, peak RSS %M KiB" env LD_LIBRARY_PATH=$RL $B/redist fetch cuda 13.9.9 --base-url http://127.0.0.1:18081 --prefix $W/mp --cache-dir $W/mc --platform linux-x86_64 --quiet --no-check --profile $setting
  done
done
