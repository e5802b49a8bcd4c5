#!/bin/bash
# tune16.sh (GPU machine, repo root, .carry/ carried): the 14-component cold install of multi.py
# under several budgets, to set the defaults of redist/budget.hpp from measurements.
# Runs multi.py once (packs the archives, races redist against the all-at-once decode floor),
# then times `redist fetch` cold with each setting, twice, with --profile. Output: $OUT/tune16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; exec > >(tee $OUT/tune16.log) 2>&1
C=$PWD/.carry; W=/tmp/gt; rm -rf $W; mkdir -p $W
tar -C $W -xJf $C/libs.tar.xz; RL=$W/carry-libs; B=$C/bin
python3 $C/multi.py $W/m $B $RL
U=http://127.0.0.1:18081
for setting in "" "--max-memory 2GiB" "--threads 32" "--threads 32 --max-memory 2GiB" "--jobs 4" "--jobs 4 --max-memory 2GiB"; do
  for i in 1 2; do
    rm -rf $W/p $W/c
    echo "== fetch cuda 13.9.9 cold, setting: ${setting:-default} (run $i)"
    /usr/bin/time -f "wall %e s, peak RSS %M KiB" env LD_LIBRARY_PATH=$RL $B/redist fetch cuda 13.9.9 --base-url $U \
      --prefix $W/p --cache-dir $W/c --platform linux-x86_64 --quiet --no-check --profile $setting
  done
done
