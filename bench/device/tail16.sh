#!/bin/bash
# tail16.sh [ROUNDS] (GPU machine, repo root, .carry/ carried): where one archive's time goes beyond the
# `xz -T0 -dc` floor on 16 cores. Packs and serves the cuDNN archive as ../shared/device/e2e.sh does (without its
# GPU builds, race.py and multi.py), prints what the machine writes to (filesystems, cgroup limits, dirty-page
# settings), runs paired16.py's one-archive scenario with PAIRED_TAIL=1 (the floor writing one file, `xz | tar`
# and redist on tmpfs, redist with fewer threads or more memory), then --profile timelines of a few variants.
# Prepare here:  bash bench/device/pack16.sh build      Output: $OUT/tail16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/tail16.log") 2>&1
C=$PWD/.carry; W=/tmp/ge; RL=$W/carry-libs; B=$C/bin
sed -e '/^echo "== nvcc build/,/^(cd \$W\/cm/d' -e '/race\.py/d' -e '/multi\.py/d' "$C/e2e.sh" > "$C/e2e-cudnn.sh"
bash "$C/e2e-cudnn.sh"
A=$(find $W/www/cudnn -name '*.tar.xz'); V=$(ls $W/www/cudnn/redist | sed -n 's/^redistrib_\(.*\)\.json$/\1/p')
echo "== machine"
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\))'
df -hT /tmp $W /dev/shm; grep -E ' (/|/tmp|/dev/shm) ' /proc/mounts
for f in /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.high; do
  [ -r "$f" ] && echo "$f: $(cat "$f")"; done
for f in dirty_ratio dirty_background_ratio dirty_bytes dirty_background_bytes dirty_expire_centisecs; do
  echo "vm.$f = $(cat /proc/sys/vm/$f)"; done
xz --robot -lv "$A" | awk '$1=="totals"{print "archive: " $2 " streams, " $3 " blocks, " $4 " B packed, " $5 " B unpacked"}'
mkdir -p /dev/shm/ge
PAIRED_TAIL=1 PAIRED_SCENARIOS="one archive" python3 "$C/paired16.py" "${1:-6}" "$B"
echo "== --profile timelines (2 runs each)"
TIMEFORMAT="wall %R s, user %U s, sys %S s"
U=http://127.0.0.1:18080
for variant in "" "--threads 10" "--max-memory 4GiB" "file"; do
  url=$U; opts=$variant; [ "$variant" = file ] && { url=file://$W/www; opts=; }
  for i in 1 2; do
    rm -rf $W/pp $W/pc; sync
    echo "-- cudnn-fetch ${variant:-(default)} run $i"
    # shellcheck disable=SC2086  # the options are words
    time LD_LIBRARY_PATH=$RL $B/cudnn-fetch "$V" --base-url "$url" --prefix $W/pp --cache-dir $W/pc --cuda 13 \
      --platform linux-x86_64 --quiet --profile $opts
  done
done
