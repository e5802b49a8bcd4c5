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
bash scripts/build.sh
build_dir=${BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j 2 --timeout 900

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
    if [ -n "$(ls -A "$logs")" ]; then
        echo "test.sh: $preset: sanitizer reports:" >&2
        for f in "$logs"/*; do echo "==== $f" >&2; cat "$f" >&2; done
        status=1
    fi
    echo "test.sh: $preset: $((SECONDS - start)) s, status $status"
    return "$status"
}

failed=()
for preset in ${REDIST_SANITIZERS-asan tsan}; do
    run_sanitized "$preset" || failed+=("$preset")
done
if ((${#failed[@]})); then
    echo "test.sh: failed under: ${failed[*]}" >&2
    exit 1
fi
