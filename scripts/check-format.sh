#!/usr/bin/env bash
# Checks C++ formatting against .clang-format.
#
#   scripts/check-format.sh              files changed since the merge base
#                                        with $FORMAT_BASE (default: main),
#                                        plus uncommitted and untracked ones
#   scripts/check-format.sh --all        every tracked C++ file
#   scripts/check-format.sh --fix [...]  rewrite the files instead of checking
#
# Exits 1 and lists the files when any is not formatted. CI runs it as --all
# (scripts/test.sh, REDIST_FORMAT_CHECK).
set -euo pipefail
cd "$(dirname "$0")/.."

fix=0 all=0
for arg in "$@"; do
    case $arg in
        --fix) fix=1 ;;
        --all) all=1 ;;
        *) echo "usage: $0 [--all] [--fix]" >&2; exit 2 ;;
    esac
done
fmt=$(command -v clang-format || command -v clang-format-14 || true)
if [ -z "$fmt" ]; then
    echo "check-format.sh: clang-format not found (apt-get install clang-format)" >&2
    exit 2
fi

pattern='\.(cpp|hpp|h|cc)$'
if ((all)); then
    mapfile -t files < <(git ls-files | grep -E "$pattern" || true)
else
    base=$(git merge-base HEAD "${FORMAT_BASE:-main}" 2>/dev/null || git rev-parse HEAD)
    mapfile -t files < <({ git diff --name-only --diff-filter=d "$base"; git ls-files --others --exclude-standard; } |
        grep -E "$pattern" | sort -u || true)
fi

bad=()
for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    if ((fix)); then
        "$fmt" -i "$f"
    elif ! "$fmt" --dry-run -Werror "$f" >/dev/null 2>&1; then
        bad+=("$f")
    fi
done
if ((${#bad[@]})); then
    printf 'not formatted (scripts/check-format.sh --fix, or clang-format -i FILE):\n' >&2
    printf '  %s\n' "${bad[@]}" >&2
    echo "check-format.sh: ${#bad[@]} of ${#files[@]} file(s) need formatting" >&2
    exit 1
fi
echo "check-format.sh: ${#files[@]} file(s) formatted"
