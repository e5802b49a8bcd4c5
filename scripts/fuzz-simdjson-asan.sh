#!/bin/bash
# Fuzzes every JSON reader with simdjson itself under ASan+UBSan, by hand.
#
#   bash scripts/fuzz-simdjson-asan.sh BUILD_DIR [SECONDS_PER_TARGET]   (default 120)
#
# The fuzz targets of BUILD_DIR (tests/fuzz/, built with clang) instrument
# redist's code and the simdjson code inlined into it, but stage 1 and string
# unescaping run inside Debian's libsimdjson.so, which ASan cannot see: a write
# past a buffer there shows up, if at all, as an allocator CHECK in a later
# free. That is how a receipt whose variant was read twice was first seen
# (SECURITY.md, guarantee 14). This script fetches the source of the installed simdjson
# from Debian's archive (scripts/debian-source.sh: an apt configuration of its
# own, the system's is left alone), builds it with the fuzzers' sanitizers, links
# the JSON fuzz targets against it and runs each over its seed corpus, two at
# a time. New inputs go to a scratch directory, never into the seed corpora.
# Exit status: 0 when every target ran clean, 1 when one crashed (its log
# and input are kept under the work directory printed at the end).
set -euo pipefail

build=$(cd "${1:?usage: $0 BUILD_DIR [SECONDS_PER_TARGET]}" && pwd)
seconds=${2:-120}
src=$(cd "$(dirname "$0")/.." && pwd)
fuzz_lib=$build/tests/fuzz/libredist_fuzz.a
[ -f "$fuzz_lib" ] || { echo "$0: $fuzz_lib not found: build the fuzz targets first" >&2; exit 2; }
work=${FUZZ_WORK:-/var/tmp/redist-fuzz-simdjson}
mkdir -p "$work"

version=$(dpkg-query -W -f='${Version}' libsimdjson-dev)
object=$work/simdjson-$version-asan.o
if [ ! -f "$object" ]; then
    simdjson_src=$(bash "$src/scripts/debian-source.sh" libsimdjson-dev "$work/source")
    echo "building simdjson $version with ASan+UBSan (about 30 s)"
    # The same flags as the fuzz targets (tests/fuzz/CMakeLists.txt), and the
    # interface definitions of the packaged library so that layouts match.
    clang++ -std=c++20 -gline-tables-only -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
        -fno-sanitize-recover=undefined -DSIMDJSON_THREADS_ENABLED=1 \
        -c "$simdjson_src/singleheader/simdjson.cpp" -o "$object.tmp"
    mv "$object.tmp" "$object"
fi

# target  corpus  extra arguments: the JSON readers of tests/fuzz/CMakeLists.txt.
targets=(
    "receipt        $src/tests/fuzz/corpus/receipt        -dict=$src/tests/fuzz/receipt.dict"
    "manifest       $build/tests/fuzz/corpus/manifest     -dict=$src/tests/fuzz/manifest.dict"
    "lockfile       $src/tests/fuzz/corpus/lockfile       -dict=$src/tests/fuzz/lockfile.dict"
    "tree_list      $src/tests/fuzz/corpus/tree_list      -dict=$src/tests/fuzz/receipt.dict"
    "prefix_readers $src/tests/fuzz/prefix_readers_corpus"
    "project_lock   $src/tests/fuzz/project_lock_seeds"
    "drift          $src/tests/fuzz/drift_seeds"
    "segment_record $src/tests/fuzz/segment_record_seeds"
)
libdir=/usr/lib/x86_64-linux-gnu
mkdir -p "$work/bin"
for t in "${targets[@]}"; do
    read -r name _ <<< "$t"
    clang++ -std=c++20 -gline-tables-only -O1 -fno-omit-frame-pointer -fsanitize=address,undefined \
        -fno-sanitize-recover=undefined -fsanitize=fuzzer -I"$src/include" -DSIMDJSON_THREADS_ENABLED=1 \
        "$src/tests/fuzz/${name}_fuzz.cpp" "$fuzz_lib" "$libdir/libelf.so" "$object" "$libdir/libarchive.so" \
        "$libdir/liblzma.so" "$libdir/libcurl.so" "$libdir/libcrypto.so" -lpthread -o "$work/bin/${name}_fuzz" &
done
wait

run_one() {
    local name=$1 corpus=$2
    shift 2
    local dir=$work/run/$name
    rm -rf "$dir" && mkdir -p "$dir/new"
    if "$work/bin/${name}_fuzz" -max_total_time="$seconds" -artifact_prefix="$dir/" -print_final_stats=1 "$@" \
        "$dir/new" "$corpus" > "$dir.log" 2>&1; then
        echo "$name: clean, $(grep -o 'number_of_executed_units: *[0-9]*' "$dir.log" | grep -o '[0-9]*$') runs"
    else
        echo "$name: CRASHED, see $dir.log"
        return 1
    fi
}

status=0
pids=()
for t in "${targets[@]}"; do
    # shellcheck disable=SC2086  # the extra arguments are words
    run_one $t &
    pids+=($!)
    if [ ${#pids[@]} -eq 2 ]; then
        for p in "${pids[@]}"; do wait "$p" || status=1; done
        pids=()
    fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
echo "work directory: $work"
exit $status
