#!/usr/bin/env bash
# The GitHub Action's install step (action.yml), in the project's directory:
# `redist sync --locked` (the project's redist.lock, exactly), or the given
# `redist fetch` arguments; then the prefix's environment for later steps
# (`redist env --format github`: <PRODUCT>_ROOT, CUDA_HOME, CPATH, ... to
# $GITHUB_ENV, bin/ to $GITHUB_PATH).
#
# Inputs (the action's, as the runner passes them):
#   INPUT_FETCH   arguments for `redist fetch` instead of a sync, e.g.
#                 "cudnn 9.19.0 --prefix /opt/cudnn"; --prefix is required
#   INPUT_LOCK_FILE  the lock sync installs (default: the project's redist.lock)
#   INPUT_PREFIX  the prefix whose environment is exported (default: the
#                 project's; with INPUT_FETCH, the --prefix it names)
#   REDIST        the tool (the install step's output; default: redist on PATH)
# Outputs ($GITHUB_OUTPUT): prefix.
set -euo pipefail

: "${GITHUB_ENV:?runs in a GitHub Actions step (GITHUB_ENV is not set)}"
: "${GITHUB_OUTPUT:?runs in a GitHub Actions step (GITHUB_OUTPUT is not set)}"
redist=${REDIST:-redist}
prefix=${INPUT_PREFIX:-}

if [ -n "${INPUT_FETCH:-}" ]; then
    # Word-split as a shell would, without running anything: no globbing, no expansion.
    set -f
    # shellcheck disable=SC2206
    fetch_args=(${INPUT_FETCH})
    set +f
    if [ -z "$prefix" ]; then
        for ((i = 0; i < ${#fetch_args[@]}; i++)); do
            case "${fetch_args[i]}" in
                --prefix) prefix=${fetch_args[i + 1]:-} ;;
                --prefix=*) prefix=${fetch_args[i]#--prefix=} ;;
            esac
        done
    fi
    if [ -z "$prefix" ]; then
        echo "redist-action: error: the 'fetch' input needs --prefix DIR (where to install)" >&2
        exit 2
    fi
    "$redist" fetch "${fetch_args[@]}"
else
    sync_args=(sync --locked)
    [ -n "${INPUT_LOCK_FILE:-}" ] && sync_args+=(--lock-file "$INPUT_LOCK_FILE")
    "$redist" "${sync_args[@]}"
fi

env_args=(env --format github)
[ -n "$prefix" ] && env_args+=(--prefix "$prefix")
"$redist" "${env_args[@]}"
if [ -z "$prefix" ]; then
    prefix=$("$redist" list --json | sed -n 's/^ *"prefix": *"\(.*\)",\{0,1\}$/\1/p' | head -n 1)
fi
echo "prefix=$prefix" >> "$GITHUB_OUTPUT"
