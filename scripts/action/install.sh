#!/usr/bin/env bash
# The GitHub Action's first step (action.yml): puts redist on PATH and says
# where its cache is. A `redist` already on PATH is used as it is; otherwise
# the release bundle is downloaded, checked against its .sha256 and unpacked
# under $RUNNER_TEMP, and its bin/ is appended to $GITHUB_PATH.
#
# Inputs (the action's, as the runner passes them):
#   INPUT_VERSION     the bundle's version (default: this action's own, from
#                     the tag it was used at: v0.1.0 -> 0.1.0)
#   INPUT_BUNDLE_URL  where the bundle is (default: this action repository's
#                     GitHub release of that version); its .sha256 sits beside it
# Outputs ($GITHUB_OUTPUT): redist (the tool's path), version, cache-dir.
set -euo pipefail

: "${GITHUB_PATH:?runs in a GitHub Actions step (GITHUB_PATH is not set)}"
: "${GITHUB_OUTPUT:?runs in a GitHub Actions step (GITHUB_OUTPUT is not set)}"

say() { echo "redist-action: $*" >&2; }

if tool=$(command -v redist 2>/dev/null); then
    say "using $tool ($("$tool" --version))"
else
    version=${INPUT_VERSION:-}
    if [ -z "$version" ]; then
        ref=${GITHUB_ACTION_REF:-}
        version=${ref#v}
    fi
    case "$version" in
        '' | *[!0-9A-Za-z.+~-]*)
            say "error: no bundle version: set the action's 'version' input (for example 0.1.0)"
            exit 2 ;;
    esac
    name="redist-$version-linux-x86_64.tar.xz"
    url=${INPUT_BUNDLE_URL:-"${GITHUB_SERVER_URL:-https://github.com}/${GITHUB_ACTION_REPOSITORY:?}/releases/download/v$version/$name"}
    if [ "$(uname -m)" != x86_64 ]; then
        say "error: the bundle is for x86_64 Linux; this runner is $(uname -m) (put a redist on PATH first)"
        exit 2
    fi
    dest="${RUNNER_TEMP:?runs in a GitHub Actions step (RUNNER_TEMP is not set)}/redist-$version"
    work=$(mktemp -d "$RUNNER_TEMP/redist-download.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    say "downloading $url"
    curl -fsSL --retry 5 --retry-connrefused -o "$work/$name" "$url"
    curl -fsSL --retry 5 --retry-connrefused -o "$work/$name.sha256" "$url.sha256"
    # The .sha256 names the file as package.sh wrote it; only its digest is taken.
    want=$(awk 'NR == 1 { print $1 }' "$work/$name.sha256")
    have=$(sha256sum "$work/$name" | awk '{ print $1 }')
    if [ "${#want}" -ne 64 ] || [ "$want" != "$have" ]; then
        say "error: $url: SHA-256 $have does not match its .sha256 (${want:-empty})"
        exit 5
    fi
    rm -rf "$dest"
    mkdir -p "$dest"
    tar -xJf "$work/$name" -C "$dest" --strip-components=1 --no-same-owner
    tool="$dest/bin/redist"
    [ -x "$tool" ] || { say "error: $url: no bin/redist in the bundle"; exit 5; }
    echo "$dest/bin" >> "$GITHUB_PATH"
    say "installed $("$tool" --version) into $dest"
fi

{
    echo "redist=$tool"
    echo "version=$("$tool" --version | awk '{ print $NF }')"
    echo "cache-dir=$("$tool" cache dir)"
} >> "$GITHUB_OUTPUT"
