#!/usr/bin/env bash
# The whole test suite: dependencies, build, then every CTest test (unit
# tests, end-to-end tests against nginx on loopback, fuzz smoke runs, CMake
# package tests); then the unit and end-to-end tests again in an ASan+UBSan
# tree and in a TSan tree (presets asan and tsan in CMakePresets.json).
#
# REDIST_SANITIZERS selects the sanitizer passes: "asan tsan" (the default),
# one of them, or "" for none (a quick local run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

# ---- static checks ---------------------------------------------------------------
# Both are on (default 1); set one to 0 in the environment to skip it locally.
#   format: scripts/check-format.sh --all, every tracked C++ file against
#           .clang-format (Debian 12's clang-format 14; `scripts/check-format.sh
#           --fix` rewrites what you changed);
#   tidy:   scripts/tidy.sh --strict over lib/: no function above a cognitive
#           complexity of 60 and no bugprone-/performance- finding (.clang-tidy;
#           on). About 170 s of CPU: 1.5 to 2 minutes on 2 cores.
# They run before the build: a style or complexity failure is reported in
# seconds, not after the sanitizer passes.
REDIST_FORMAT_CHECK=${REDIST_FORMAT_CHECK:-1}
REDIST_TIDY=${REDIST_TIDY:-1}
need_tool() {  # COMMAND PACKAGE: apt-get install PACKAGE unless COMMAND exists
    command -v "$1" >/dev/null 2>&1 && return 0
    echo "test.sh: installing $2"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2" >/dev/null
}
if [ "$REDIST_FORMAT_CHECK" = 1 ]; then
    need_tool clang-format clang-format
    bash scripts/check-format.sh --all
fi
# layers: lib/'s folders are layers (scripts/check-layers.py): at most three
#         includes run upward, and no header include cycle.
python3 scripts/check-layers.py
if [ "$REDIST_TIDY" = 1 ]; then
    need_tool clang-tidy clang-tidy
    bash scripts/tidy.sh --strict
fi

# ---- compiler cache -------------------------------------------------------------
# Three trees are compiled (normal, asan, tsan: about 12 of the run's 34
# minutes on 2 cores). Through ccache, a later run of this script on the same
# machine, in a fresh clone anywhere, compiles only what changed: BASEDIR
# makes the paths under the clone relative, NOHASHDIR leaves the build
# directory out of the hash (the debug info then names the first clone's
# directory; nothing here reads it). CMake takes the launcher from the
# environment when it configures a new tree. REDIST_CCACHE=0 turns it off.
if [ "${REDIST_CCACHE:-1}" = 1 ]; then
    need_tool ccache ccache
    export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
    export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
    ccache --zero-stats >/dev/null
fi

bash scripts/build.sh
build_dir=${BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j 2 --timeout 900
python3 scripts/skip-report.py "$build_dir"  # how many were skipped, and why

# ---- sanitizer passes ----------------------------------------------------------
# Each preset builds the library, the tools and the unit tests with its
# sanitizer into build-<preset>/; the e2e tests of that tree run the tools of
# that tree (REDIST_BIN_DIR, tests/CMakeLists.txt), so they are checked too.
# Not in these trees, by cache options of the presets:
#   fuzz.*     the libFuzzer targets are built by clang++ with ASan+UBSan
#              already, and ran above;
#   cmake.*    the package tests install and build consumer projects: they
#              test packaging, and a sanitized libredist.a would need the
#              consumers to link the sanitizer runtime;
#   e2e.test_examples   the examples are not built there (they are plain
#              library users, covered by the unit and e2e tests).
#
# Sanitizer reports go to files under build-<preset>/sanitizer-logs/ as well
# as failing the process (halt_on_error, see the test presets): a report from
# a tool whose exit status a test does not check, or from a background tool
# a test killed, still fails this script. No suppressions are needed.
run_sanitized() {
    local preset=$1 logs="build-$1/sanitizer-logs" start=$SECONDS status=0
    echo "test.sh: $preset: configure and build"
    cmake --preset "$preset" >/dev/null
    cmake --build --preset "$preset" -j "$(nproc)"
    rm -rf "$logs" && mkdir -p "$logs"
    echo "test.sh: $preset: unit and e2e tests"
    ASAN_OPTIONS="log_path=$PWD/$logs/asan" UBSAN_OPTIONS="log_path=$PWD/$logs/ubsan" \
        TSAN_OPTIONS="log_path=$PWD/$logs/tsan" ctest --preset "$preset" || status=$?
    python3 scripts/skip-report.py "build-$preset"
    if [ -n "$(ls -A "$logs")" ]; then
        echo "test.sh: $preset: sanitizer reports:" >&2
        for f in "$logs"/*; do echo "==== $f" >&2; cat "$f" >&2; done
        status=1
    fi
    # Remember what failed for the summary at the very end: CI shows only the
    # tail of the log, and the next pass's output would push this out of it.
    if [ "$status" != 0 ]; then
        local failed_list="build-$preset/Testing/Temporary/LastTestsFailed.log"
        [ -s "$failed_list" ] && sed "s/^/  $preset: failed test /" "$failed_list" >>"$summary"
        grep -h "SUMMARY:" "$logs"/* 2>/dev/null | sort | uniq -c | sed "s/^/  $preset: /" >>"$summary" || true
    fi
    echo "test.sh: $preset: $((SECONDS - start)) s, status $status"
    return "$status"
}

failed=()
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
for preset in ${REDIST_SANITIZERS-asan tsan}; do
    run_sanitized "$preset" || failed+=("$preset")
done
if [ "${REDIST_CCACHE:-1}" = 1 ]; then
    echo "test.sh: ccache: $(ccache --print-stats | awk -F'\t' '$1=="direct_cache_hit"||$1=="preprocessed_cache_hit"{h+=$2} $1=="cache_miss"{m=$2} END{print h+0 " hits, " m+0 " misses since its stats were last zeroed"}')"
fi
if ((${#failed[@]})); then
    echo "test.sh: failed under: ${failed[*]}" >&2
    cat "$summary" >&2
    exit 1
fi
