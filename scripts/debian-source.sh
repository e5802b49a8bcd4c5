#!/usr/bin/env bash
# Fetches and unpacks Debian's source package of an installed binary package,
# the same version, from the archive apt installed it from.
#
#   debian-source.sh BINARY_PACKAGE WORK_DIR
#
# Prints the unpacked source folder, WORK_DIR/<source>-<version>/ (patches
# applied, dpkg-source -x); a later run reuses it. apt-get source checks the
# files against the archive's signed Sources index (the Debian archive
# keyring). The apt configuration is one of its own under WORK_DIR/apt/ (a
# deb-src line for that archive): the system's is left alone. Used by
# scripts/package.sh and scripts/fuzz-simdjson-asan.sh (simdjson).
set -euo pipefail
binary=${1:?usage: $0 BINARY_PACKAGE WORK_DIR}
work=$(realpath -m "${2:?usage: $0 BINARY_PACKAGE WORK_DIR}")
die() { echo "debian-source.sh: $*" >&2; exit 1; }

source_fields=$(dpkg-query -W -f='${source:Package} ${source:Version}' "$binary" 2>/dev/null) ||
    die "$binary is not installed"
read -r source version <<<"$source_fields"
dir=$work/$source-$version
if [ -d "$dir" ]; then
    echo "$dir"
    exit 0
fi
# "500 http://deb.debian.org/debian bookworm/main amd64 Packages": the archive
# the installed version comes from, as apt-cache policy lists it.
read -r uri dist < <(apt-cache policy "$binary" |
    awk '$1 ~ /^[0-9]+$/ && $2 ~ /^https?:/ && $3 ~ /\// {print $2, $3; exit}') ||
    die "no Debian archive for $binary in apt-cache policy"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || die "$keyring is missing (apt-get install debian-archive-keyring)"
apt_dir=$work/apt
rm -rf "$apt_dir"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/src"
echo "deb-src [signed-by=$keyring] $uri ${dist%%/*} ${dist#*/}" >"$apt_dir/sources.list"
apt_opts=(-q -o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=-
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache")
# As root, apt drops to the _apt user to download, which cannot write here.
[ "$(id -u)" = 0 ] && apt_opts+=(-o APT::Sandbox::User=root)
echo "debian-source.sh: fetching Debian's $source $version source from $uri ${dist%%/*}" >&2
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$apt_dir/src" && apt-get "${apt_opts[@]}" source --download-only "$source=$version" >/dev/null)
rm -rf "$dir.tmp"
dpkg-source -x "$apt_dir/src/${source}_${version#*:}.dsc" "$dir.tmp" >/dev/null 2>&1 ||
    die "dpkg-source -x $apt_dir/src/${source}_${version#*:}.dsc failed"
mv "$dir.tmp" "$dir"
echo "$dir"
