#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy: bugprone-*, performance-*, cognitive
# complexity above 60) over lib/*/*.cpp with build-dev/compile_commands.json,
# then lists the functions above the complexity ceiling and counts the
# other findings per check. The full output is in build-dev/clang-tidy.log.
#
#   scripts/tidy.sh            report; exit 0
#   scripts/tidy.sh --strict   exit 1 if there is any finding (CI:
#                              scripts/test.sh runs this when REDIST_TIDY=1)
#   scripts/tidy.sh FILE...    only these files
#
# The compile commands are GCC's: clang-tidy is told to ignore the GCC-only
# warning options (-Wshadow=local), which would otherwise be an error in every
# file.
set -euo pipefail
cd "$(dirname "$0")/.."

strict=0
if [ "${1-}" = "--strict" ]; then strict=1; shift; fi
tidy=$(command -v clang-tidy || command -v clang-tidy-14 || true)
if [ -z "$tidy" ]; then
    echo "tidy.sh: clang-tidy not found (apt-get install clang-tidy)" >&2
    exit 2
fi

# Configuring is enough: nothing lib/ includes is generated. It runs every
# time (about 2 s once configured) so that a new file is in
# compile_commands.json, and works from a clean clone.
build_dir=build-dev
cmake --preset dev >/dev/null

# Largest files first: with one clang-tidy per core, the longest runs do not
# start last. About 170 s of CPU for all of lib/ (40 % of it parsing), so
# about 90 s on 2 cores.
if (($#)); then files=("$@"); else mapfile -t files < <(ls -S lib/*/*.cpp); fi
log=$build_dir/clang-tidy.log
status=0
printf '%s\n' "${files[@]}" |
    xargs -P "$(nproc)" -n 1 "$tidy" -p "$build_dir" --quiet --extra-arg=-Wno-unknown-warning-option \
        >"$log" 2>"$log.stderr" || status=$?

# "lib/pipeline/install.cpp:506:6: warning: function 'run_job' has cognitive complexity of 209 (threshold 60) [...]"
echo "Functions above the cognitive-complexity ceiling:"
grep -E "warning: function '.*' has cognitive complexity of [0-9]+" "$log" |
    sed -E "s/^([^:]+:[0-9]+):[0-9]+: warning: function '([^']*)' has cognitive complexity of ([0-9]+).*/\3  \2  \1/" |
    sort -rn -k1,1 | uniq | sed "s|$PWD/||; s/^/  /" || echo "  (none)"
# A warning in a header is reported once per file that includes it: count
# each location once.
unique=$(grep -E "^[^ ]+:[0-9]+:[0-9]+: (warning|error): " "$log" | sort -u || true)
echo "Other findings per check:"
grep -v "cognitive complexity" <<<"$unique" | grep -oE "\[[a-z0-9.,-]+\]$" | sort | uniq -c | sort -rn |
    sed 's/^/  /' || echo "  (none)"
findings=$(grep -c . <<<"$unique" || true)
echo "tidy.sh: $findings finding(s); details in $log"
# clang-tidy exits non-zero when it could not check a file (a compile error,
# a missing compilation database): that must not pass as "no findings".
if ((status != 0)); then
    echo "tidy.sh: clang-tidy failed (status $status); its messages:" >&2
    grep -v -E "^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$|^Suppressed [0-9]+ warnings|^Use -header-filter|^Found compiler error" \
        "$log.stderr" | tail -20 >&2 || true
fi
if ((strict && (findings > 0 || status != 0))); then exit 1; fi
