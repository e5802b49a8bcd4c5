#!/usr/bin/env bash
# Builds the release bundle: a relocatable tree that runs on any x86-64 Linux
# with glibc 2.34 or later (Ubuntu 22.04, RHEL 9, Debian 12, ...).
#
#   package.sh        dist/redist-VERSION-linux-x86_64.tar.xz and its .sha256
#   package.sh --deb  dist/redist_VERSION_amd64.deb and its .sha256: for Debian
#                     12, under /usr, on Debian's shared libraries (cpack -G
#                     DEB; Depends from dpkg-shlibdeps), in build-package/deb/
#
# The tree, redist-VERSION-linux-x86_64/:
#   bin/      redist, cudnn-fetch, redist-check-probe
#   lib/      libredist.so and the shared libraries the tools and it need from
#             Debian 12 (libcurl, OpenSSL, ...; found through an RPATH of
#             $ORIGIN/../lib, or $ORIGIN); libstdc++, libgcc, libarchive and
#             simdjson are linked in statically. glibc is the system's.
#   include/, lib/cmake/redist/   headers and the CMake package (shared only)
#   share/    bash completion, man pages, the copyright files of what is bundled
#
# Release build (CMAKE_BUILD_TYPE=Release), no tests and so no test seams
# (REDIST_TEST_HOOKS=OFF), in build-package/ ($BUILD_DIR). simdjson comes from
# Debian's source package of the installed libsimdjson-dev, fetched once into
# build-package/deps/ (scripts/debian-source.sh: apt-get source from the
# archive the machine installs from, checked against its signed index; the
# machine's apt configuration is left alone).
#
# Environment: BUILD_DIR (build-package), DIST_DIR (dist), JOBS (nproc),
# SOURCE_DATE_EPOCH (the time of the last commit): the files' time in the tar.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=bundle
case "${1:-}" in
    "") ;;
    --deb) mode=deb ;;
    *) echo "usage: $0 [--deb]" >&2; exit 2 ;;
esac
build_dir=$(realpath -m "${BUILD_DIR:-build-package}")
dist_dir=$(realpath -m "${DIST_DIR:-dist}")
jobs=${JOBS:-$(nproc)}
say() { echo "package.sh: $*"; }
die() { echo "package.sh: $*" >&2; exit 1; }

for tool in apt-get dpkg-source objdump ldd xz sha256sum; do
    command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)"
done

# ---- --deb: the Debian 12 package -----------------------------------------------
if [ "$mode" = deb ]; then
    deb_dir=$build_dir/deb
    say "building the Debian package into $deb_dir"
    cmake -S . -B "$deb_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
        -DREDIST_BUILD_TESTS=OFF -DREDIST_TEST_HOOKS=OFF -DREDIST_BUILD_FUZZERS=OFF \
        -DREDIST_BUILD_EXAMPLES=OFF >/dev/null
    cmake --build "$deb_dir" -j "$jobs"
    rm -rf "$deb_dir/cpack"
    (cd "$deb_dir" && cpack -G DEB -B "$deb_dir/cpack" >/dev/null)
    debs=("$deb_dir"/cpack/*.deb)
    [ "${#debs[@]}" = 1 ] && [ -f "${debs[0]}" ] || die "cpack made no single .deb in $deb_dir/cpack"
    mkdir -p "$dist_dir"
    deb=$(basename "${debs[0]}")
    cp "${debs[0]}" "$dist_dir/$deb.tmp" && mv "$dist_dir/$deb.tmp" "$dist_dir/$deb"
    (cd "$dist_dir" && sha256sum "$deb" >"$deb.sha256")
    say "wrote $dist_dir/$deb ($(du -k "$dist_dir/$deb" | cut -f1) KiB): Depends: $(dpkg-deb -f "$dist_dir/$deb" Depends)"
    exit 0
fi

# ---- simdjson from Debian's source package ----------------------------------
simdjson_dir=$(bash scripts/debian-source.sh libsimdjson-dev "$build_dir/deps")
[ -f "$simdjson_dir/singleheader/simdjson.cpp" ] ||
    die "Debian's simdjson source ($simdjson_dir) has no singleheader/simdjson.cpp"
# The bundle's simdjson.h must be the one the normal build compiles against.
cmp -s "$simdjson_dir/singleheader/simdjson.h" /usr/include/simdjson.h ||
    die "$simdjson_dir/singleheader/simdjson.h differs from /usr/include/simdjson.h"

# ---- build and install into the staging tree ---------------------------------
say "building into $build_dir"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DREDIST_BUNDLE=ON \
    -DREDIST_BUILD_TESTS=OFF -DREDIST_TEST_HOOKS=OFF -DREDIST_BUILD_FUZZERS=OFF \
    -DREDIST_BUILD_EXAMPLES=OFF -DCMAKE_INSTALL_LIBDIR=lib \
    -DREDIST_SIMDJSON_SOURCE="$simdjson_dir/singleheader" >/dev/null
cmake --build "$build_dir" -j "$jobs" --target redist_tool cudnn-fetch_tool redist-check-probe redist_shared
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build_dir/CMakeCache.txt")
name=redist-$version-linux-x86_64
stage=$build_dir/stage/$name
rm -rf "$build_dir/stage" && mkdir -p "$stage"
cmake --install "$build_dir" --prefix "$stage" --strip >/dev/null

# ---- the shared libraries they need ------------------------------------------
# Every library ldd resolves for the bundle's ELF files, except glibc's own
# (the system's): copied under its soname. The tools and libredist.so carry an
# RPATH ($ORIGIN/../lib, $ORIGIN) that serves the whole tree below them.
glibc_libs='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|lib(c|m|mvec|pthread|dl|rt|resolv|util|anl|nsl|BrokenLocale|thread_db)\.so\.[0-9.]+|libnss_.*|libnsl.*)$'
elf_files() { find "$stage/bin" "$stage/lib" -maxdepth 1 -type f -exec sh -c 'head -c4 "$1" | grep -q ELF' _ {} \; -print; }
mapfile -t bundle_elves < <(elf_files)
declare -A copied=()
for elf in "${bundle_elves[@]}"; do
    while read -r soname arrow path _; do
        [ "$arrow" = "=>" ] || continue
        [[ $soname =~ $glibc_libs ]] && continue
        case "$soname" in
            libstdc++.so.*|libgcc_s.so.*|libsimdjson.so.*|libarchive.so.*)
                die "$elf needs $soname, which the bundle links statically" ;;
            libredist.so.*) continue ;;
        esac
        [ "$path" != "not" ] || die "$elf: $soname not found"
        [ -n "${copied[$soname]:-}" ] && continue
        install -m 0644 "$path" "$stage/lib/$soname"
        copied[$soname]=$path
    done < <(ldd "$elf")
done
say "bundled ${#copied[@]} libraries: $(printf "%s\n" "${!copied[@]}" | sort | tr "\n" " ")"

# Their copyright files, one folder per Debian package (and simdjson's source).
third_party=$stage/share/doc/redist/third-party
mkdir -p "$third_party"
owner() {  # PATH: the Debian package that ships it (usrmerge: under /usr or not)
    local real
    real=$(realpath "$1")
    dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || echo "$1: unknown" >&2
}
packages=$(for path in "${copied[@]}" "$(sed -n 's/^REDIST_LIBARCHIVE_STATIC:FILEPATH=//p' "$build_dir/CMakeCache.txt")"; do
    owner "$path" | cut -d: -f1
done; echo libstdc++6 libgcc-s1)
for pkg in $(echo "$packages" | sort -u); do
    if [ -f "/usr/share/doc/$pkg/copyright" ]; then
        mkdir -p "$third_party/$pkg" && cp "/usr/share/doc/$pkg/copyright" "$third_party/$pkg/"
    fi
done
mkdir -p "$third_party/simdjson" && cp "$simdjson_dir/debian/copyright" "$third_party/simdjson/"

# ---- man pages, from --help ----------------------------------------------------
if command -v help2man >/dev/null; then
    mkdir -p "$stage/share/man/man1"
    for tool in "redist:fetch NVIDIA redistrib releases into an installed tree" \
        "cudnn-fetch:fetch cuDNN from NVIDIA's redistrib releases into a prefix"; do
        help2man --no-info --no-discard-stderr --version-string="$version" --name="${tool#*:}" \
            "$stage/bin/${tool%%:*}" | gzip -9n >"$stage/share/man/man1/${tool%%:*}.1.gz"
    done
else
    say "help2man is missing: no man pages"
fi

# ---- the glibc the bundle needs ------------------------------------------------
worst=$(for elf in $(elf_files); do objdump -T "$elf" | grep -o 'GLIBC_[0-9][0-9.]*'; done | sort -uV | tail -1)
[ "$(printf '%s\n' "$worst" GLIBC_2.34 | sort -V | tail -1)" = GLIBC_2.34 ] ||
    die "the bundle needs $worst (at most GLIBC_2.34)"
say "newest glibc symbol version needed: $worst"

# ---- the tar and its checksum --------------------------------------------------
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
mkdir -p "$dist_dir"
tarball=$dist_dir/$name.tar.xz
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$build_dir/stage" -cf - "$name" | xz -9 -T "$jobs" >"$tarball.tmp"
mv "$tarball.tmp" "$tarball"
(cd "$dist_dir" && sha256sum "$name.tar.xz" >"$name.tar.xz.sha256")
say "wrote $tarball ($(du -k "$tarball" | cut -f1) KiB) and $name.tar.xz.sha256"
