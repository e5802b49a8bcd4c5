#!/usr/bin/env python3
"""Tests of the release bundle (scripts/package.sh).

    bundle_test.py package      run scripts/package.sh into <build>/bundle/ (fixture
                                redist_bundle); check the tarball, its .sha256
                                and what lies in it
    bundle_test.py glibc        every ELF file of the bundle: no GLIBC_ symbol
                                version newer than 2.34 (objdump -T), and every
                                DT_NEEDED is glibc's or in the bundle's lib/
    bundle_test.py find_package examples/consumer/count_artifacts.cpp against
                                the CMake package of the bundle, unpacked
                                somewhere else than it was built
    bundle_test.py deb          run scripts/package.sh --deb; apt-get installs the
                                .deb into a bare bookworm chroot, its Depends from
                                Debian's archive; fetch, verify, apt-get remove
                                there (the chroot part skipped as below)
    bundle_test.py chroot       the README's steps in a bare `debootstrap
                                --variant=minbase trixie` chroot: unpack, put
                                bin/ on PATH, `redist fetch` cuDNN from a
                                file:// demo mirror, `redist verify`; skipped
                                (exit 77, with the reason) without root or
                                debootstrap, or when the Debian archive cannot
                                be reached

Each chroot is made once and kept as a tar under <build>/bundle/chroot-cache/
($REDIST_CHROOT_CACHE): about a minute to make, seconds to reuse. The Debian
archive is $REDIST_DEBIAN_MIRROR (http://deb.debian.org/debian).
Arguments as for the other tests here (cmake_support.py).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tarfile
import time

import cmake_support as cs

GLIBC_MAX = (2, 34)
SUITE = "trixie"
MANIFEST_REL = os.path.join("tests", "data", "manifests", "cudnn", "redistrib_9.27.0.json")
# glibc's own libraries: the system's, never bundled.
GLIBC_SONAMES = re.compile(r"(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|"
                           r"lib(c|m|mvec|pthread|dl|rt|resolv|util|anl)\.so\.[0-9.]+)$")


def bundle_build_dir(args) -> str:
    return os.path.join(os.path.abspath(args.build_dir), "bundle")


def bundle_tarball(args) -> str:
    version = cs.read_cache(args.build_dir)["CMAKE_PROJECT_VERSION"]
    path = os.path.join(bundle_build_dir(args), "dist", f"redist-{version}-linux-x86_64.tar.xz")
    cs.check(os.path.isfile(path), f"{path} is missing (the bundle.package test makes it)")
    return path


def unpack(tarball: str, dest: str) -> str:
    """Unpacks the bundle into DEST; returns its top folder."""
    os.makedirs(dest, exist_ok=True)
    cs.run(["tar", "-xJf", tarball, "-C", dest])
    top = os.path.join(dest, os.path.basename(tarball)[: -len(".tar.xz")])
    cs.check(os.path.isdir(top), f"{tarball} has no top folder {os.path.basename(top)}")
    return top


def is_elf(path: str) -> bool:
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def test_package(args):
    env = cs.env({"BUILD_DIR": bundle_build_dir(args),
                  "DIST_DIR": os.path.join(bundle_build_dir(args), "dist")})
    res = cs.run(["bash", os.path.join(args.source_dir, "scripts", "package.sh")], env_=env,
                 timeout=3000)
    print(res.stdout, end="")
    print(f"package.sh: {res.elapsed:.0f} s")
    tarball = bundle_tarball(args)
    with open(tarball + ".sha256") as f:
        line = f.read()
    with open(tarball, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    cs.check(line == f"{digest}  {os.path.basename(tarball)}\n",
             f"{tarball}.sha256 is {line!r}, not for {digest} (sha256sum -c format)")
    print(f"bundle: {os.path.getsize(tarball)} bytes")

    top = os.path.basename(tarball)[: -len(".tar.xz")]
    with tarfile.open(tarball) as tar:
        members = {m.name: m for m in tar.getmembers()}
    for name, m in members.items():
        cs.check(name == top or name.startswith(top + "/"), f"{name}: outside {top}/")
        cs.check(".." not in name.split("/"), f"{name}: a .. in the tar")
        cs.check(m.uid == 0 and m.gid == 0, f"{name}: owner {m.uid}:{m.gid}, not 0:0")
    soversion = ".".join(cs.read_cache(args.build_dir)["CMAKE_PROJECT_VERSION"].split(".")[:2])
    for rel in ("bin/redist", "bin/cudnn-fetch", "bin/redist-check-probe",
                f"lib/libredist.so.{soversion}", "lib/libcurl.so.4", "lib/libcrypto.so.3",
                "lib/cmake/redist/redistConfig.cmake", "lib/cmake/redist/redistSharedTargets.cmake",
                "lib/cmake/redist/RedistFetch.cmake", "include/redist/manifest.hpp",
                "share/bash-completion/completions/redist",
                "share/bash-completion/completions/cudnn-fetch",
                "share/doc/redist/third-party/simdjson/copyright"):
        cs.check(f"{top}/{rel}" in members, f"the bundle has no {rel}")
    for rel in members:
        base = rel.rsplit("/", 1)[-1]
        cs.check(not re.match(r"lib(stdc\+\+|gcc_s|simdjson|archive)\.so", base),
                 f"{rel}: the bundle links it statically, it must not ship it")
        cs.check(not base.endswith(".a") and "pkgconfig" not in rel and
                 "redistStaticTargets" not in base, f"{rel}: the bundle is shared-only")
        cs.check(not GLIBC_SONAMES.match(base), f"{rel}: glibc's, never bundled")


def glibc_versions(path: str) -> list[tuple[int, ...]]:
    res = cs.run(["objdump", "-T", path])
    return sorted({tuple(int(x) for x in v.split("."))
                   for v in re.findall(r"\bGLIBC_([0-9]+(?:\.[0-9]+)+)\b", res.stdout)})


def test_glibc(args):
    work = cs.scratch(args, "bundle_glibc")
    top = unpack(bundle_tarball(args), work)
    shipped = set(os.listdir(os.path.join(top, "lib")))
    elves = []
    for dirpath, _dirs, files in os.walk(top):
        elves += [os.path.join(dirpath, f) for f in files if is_elf(os.path.join(dirpath, f))]
    cs.check(len(elves) >= 4, f"only {len(elves)} ELF files in the bundle")
    worst = []
    for path in sorted(elves):
        rel = os.path.relpath(path, top)
        versions = glibc_versions(path)
        newest = versions[-1] if versions else (0,)
        print(f"{rel}: GLIBC_{'.'.join(map(str, newest))}")
        if newest > GLIBC_MAX:
            worst.append(f"{rel} needs GLIBC_{'.'.join(map(str, newest))}")
        for lib in cs.needed_libs(path):
            cs.check(GLIBC_SONAMES.match(lib) or lib in shipped,
                     f"{rel} needs {lib}, which is neither glibc's nor in the bundle's lib/")
    cs.check(not worst, "newer than GLIBC_2.34: " + "; ".join(worst))
    # A release carries no test seam: not even the names of the switches the
    # test builds read (lib/support/debug_pause.hpp).
    switches = test_switches(args.source_dir)
    cs.check(len(switches) >= 5, f"found only {sorted(switches)} in lib/")
    for path in sorted(elves):
        with open(path, "rb") as f:
            data = f.read()
        found = sorted(s for s in switches if s.encode() in data)
        cs.check(not found, f"{os.path.relpath(path, top)} holds the test switches {found}")


def test_switches(source_dir: str) -> set[str]:
    """The environment switches of test builds: the debug pause's and fail
    point's, and every REDIST_TEST_OVERRIDE("NAME") in lib/."""
    names = {"REDIST_DEBUG_PAUSE", "REDIST_DEBUG_PAUSE_SECONDS", "REDIST_DEBUG_FAIL", "redist-debug: paused at"}
    for dirpath, _dirs, files in os.walk(os.path.join(source_dir, "lib")):
        for name in files:
            if name.endswith((".cpp", ".hpp")):
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    names |= set(re.findall(r'REDIST_TEST_OVERRIDE\("([A-Z0-9_]+)"\)', f.read()))
    return names


def test_find_package(args):
    work = cs.scratch(args, "bundle_find_package")
    top = unpack(bundle_tarball(args), os.path.join(work, "somewhere else"))
    manifest = os.path.join(args.source_dir, MANIFEST_REL)
    project = os.path.join(work, "project")
    os.makedirs(project)
    source = os.path.join(args.source_dir, "examples", "consumer", "count_artifacts.cpp")
    with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
        f.write(f"""cmake_minimum_required(VERSION 3.19)
project(bundle_consumer LANGUAGES CXX)
find_package(redist 0.1 CONFIG REQUIRED)
if(TARGET redist::redist_static)
  message(FATAL_ERROR "the bundle has no static library, yet redist::redist_static is defined")
endif()
file(WRITE ${{CMAKE_BINARY_DIR}}/bin_dir.txt "${{REDIST_BIN_DIR}}")
add_executable(count_artifacts "{source}")
target_link_libraries(count_artifacts PRIVATE redist::redist)
""")
    build = os.path.join(work, "build")
    cs.run(cs.configure_args(args, project, build, f"-DCMAKE_PREFIX_PATH={top}"))
    cs.run([args.cmake, "--build", build])
    with open(os.path.join(build, "bin_dir.txt")) as f:
        bin_dir = f.read()
    cs.check(os.path.realpath(bin_dir) == os.path.realpath(os.path.join(top, "bin")),
             f"REDIST_BIN_DIR is {bin_dir}, not the bundle's bin/")
    exe = os.path.join(build, "count_artifacts")
    res = cs.run([exe, manifest])
    m = re.fullmatch(r"9\.27\.0: (\d+) components, (\d+) artifacts\n", res.stdout)
    cs.check(m, f"count_artifacts: unexpected output {res.stdout!r}")
    expected = cs.expected_artifact_count(args, manifest)
    cs.check(int(m.group(2)) == expected, f"{m.group(2)} artifacts, redist show says {expected}")
    res = cs.run(["ldd", exe])
    line = next((ln for ln in res.stdout.splitlines() if "libredist.so" in ln), "")
    cs.check(os.path.join(top, "lib") in line, f"libredist.so is not the bundle's: {line!r}")
    # A static consumer is refused with the component named.
    with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
        f.write("cmake_minimum_required(VERSION 3.19)\nproject(p LANGUAGES CXX)\n"
                "find_package(redist 0.1 CONFIG REQUIRED COMPONENTS static)\n")
    res = cs.run(cs.configure_args(args, project, os.path.join(work, "build-static"),
                                   f"-DCMAKE_PREFIX_PATH={top}"), check=False)
    cs.check(res.returncode != 0 and "static" in res.stdout + res.stderr,
             f"COMPONENTS static: exit {res.returncode}, not refused naming it:\n{res.stderr}")


def chroot_base(args, suite: str = SUITE) -> str:
    """A tar of a bare minbase chroot of SUITE, made once (Skip when it cannot be)."""
    if os.geteuid() != 0:
        raise cs.Skip("needs root (debootstrap and chroot)")
    debootstrap = shutil.which("debootstrap") or (
        os.path.exists("/usr/sbin/debootstrap") and "/usr/sbin/debootstrap")
    if not debootstrap:
        raise cs.Skip("debootstrap is not installed (apt-get install debootstrap)")
    if not shutil.which("chroot"):
        raise cs.Skip("chroot is not installed")
    cache = os.environ.get("REDIST_CHROOT_CACHE") or os.path.join(bundle_build_dir(args),
                                                                  "chroot-cache")
    base = os.path.join(cache, f"{suite}-minbase.tar")
    if os.path.isfile(base):
        return base
    os.makedirs(cache, exist_ok=True)
    tmp = os.path.join(cache, f"{suite}.tmp")
    cs.rm_tree(tmp)
    mirror = os.environ.get("REDIST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
    res = cs.run([debootstrap, "--variant=minbase", suite, tmp, mirror], check=False,
                 timeout=1500)
    print(f"debootstrap: {res.elapsed:.0f} s, exit {res.returncode}")
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).splitlines()[-5:])
        cs.rm_tree(tmp)
        raise cs.Skip(f"debootstrap --variant=minbase {suite} {mirror} failed "
                      f"(exit {res.returncode}; no Debian archive?):\n{tail}")
    cs.run(["tar", "-C", tmp, "-cf", base + ".tmp", "."], timeout=600)
    os.replace(base + ".tmp", base)
    cs.rm_tree(tmp)
    return base


class Chroot:
    """A fresh chroot from chroot_base()'s tar under WORK, with /proc mounted
    while in a with block (and the tree removed after)."""

    def __init__(self, base: str, work: str, path: str):
        self.root = os.path.join(work, "root")
        self.path = path
        os.makedirs(self.root)
        cs.run(["tar", "-C", self.root, "-xf", base], timeout=600)
        self.proc = os.path.join(self.root, "proc")
        self.mounted = False

    def __enter__(self):
        self.mounted = cs.run(["mount", "-t", "proc", "proc", self.proc],
                              check=False).returncode == 0
        return self

    def __exit__(self, *_exc):
        if self.mounted:
            self.mounted = cs.run(["umount", self.proc], check=False).returncode != 0
        if not self.mounted:
            cs.rm_tree(self.root)

    def run(self, *cmd, check=True, extra=()):
        return cs.run(["chroot", self.root, "/usr/bin/env", "-i", f"PATH={self.path}",
                       "HOME=/root", "LC_ALL=C.UTF-8", *extra, *cmd], check=check,
                      env_=cs.env(), timeout=900)


def demo_mirror(args, root: str) -> None:
    cs.run([sys.executable, os.path.join(args.source_dir, "scripts", "make_demo_mirror.py"),
            "--dest", os.path.join(root, "srv", "mirror"), "--products", "cudnn", "--quiet"])


def test_deb(args):
    """package.sh --deb; apt installs it into a bare bookworm chroot, with its
    Depends from Debian's archive; then fetch and verify there."""
    t0 = time.monotonic()
    env = cs.env({"BUILD_DIR": bundle_build_dir(args),
                  "DIST_DIR": os.path.join(bundle_build_dir(args), "dist")})
    res = cs.run(["bash", os.path.join(args.source_dir, "scripts", "package.sh"), "--deb"],
                 env_=env, timeout=3000)
    print(res.stdout, end="")
    version = cs.read_cache(args.build_dir)["CMAKE_PROJECT_VERSION"]
    name = f"redist_{version}_amd64.deb"
    deb = os.path.join(bundle_build_dir(args), "dist", name)
    with open(deb, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(deb + ".sha256") as f:
        cs.check(f.read() == f"{digest}  {name}\n", f"{deb}.sha256 does not match it")
    depends = cs.run(["dpkg-deb", "-f", deb, "Depends"]).stdout
    for pkg in ("libc6", "libcurl4", "libsimdjson14", "libarchive13", "libssl3"):
        cs.check(re.search(rf"\b{pkg}\b", depends), f"Depends has no {pkg}: {depends!r}")
    contents = cs.run(["dpkg-deb", "-c", deb]).stdout
    soversion = ".".join(version.split(".")[:2])
    for rel in ("usr/bin/redist", "usr/bin/cudnn-fetch", "usr/bin/redist-check-probe",
                f"usr/lib/x86_64-linux-gnu/libredist.so.{soversion}",
                "usr/lib/x86_64-linux-gnu/cmake/redist/redistConfig.cmake",
                "usr/share/bash-completion/completions/redist"):
        cs.check(f"./{rel}" in contents, f"the .deb has no /{rel}")

    base = chroot_base(args, "bookworm")
    work = cs.scratch(args, "bundle_deb")
    with Chroot(base, work, "/usr/bin:/bin:/usr/sbin:/sbin") as box:
        shutil.copy(deb, os.path.join(box.root, "tmp", name))
        shutil.copy("/etc/resolv.conf", os.path.join(box.root, "etc", "resolv.conf"))
        demo_mirror(args, box.root)
        apt_env = ("DEBIAN_FRONTEND=noninteractive",)
        res = box.run("apt-get", "update", check=False, extra=apt_env)
        if res.returncode != 0:
            raise cs.Skip(f"apt-get update in the chroot failed (no Debian archive?):\n"
                          f"{res.stderr[-500:]}")
        box.run("apt-get", "install", "-y", "--no-install-recommends", f"/tmp/{name}",
                extra=apt_env)
        box.run("redist", "fetch", "cudnn", "9", "--base-url", "file:///srv/mirror",
                "--prefix", "/opt/cudnn")
        res = box.run("redist", "verify", "--prefix", "/opt/cudnn")
        print(res.stdout + res.stderr, end="")
        box.run("apt-get", "remove", "-y", "redist", extra=apt_env)
        cs.check(not os.path.exists(os.path.join(box.root, "usr", "bin", "redist")),
                 "apt-get remove redist left /usr/bin/redist")
    print(f"deb test: {time.monotonic() - t0:.0f} s")


def test_chroot(args):
    t0 = time.monotonic()
    base = chroot_base(args)
    tarball = bundle_tarball(args)
    work = cs.scratch(args, "bundle_chroot")
    version = cs.read_cache(args.build_dir)["CMAKE_PROJECT_VERSION"]
    bundle = f"/opt/redist-{version}-linux-x86_64"
    # As the README says: unpack, put bin/ on PATH.
    with Chroot(base, work, f"{bundle}/bin:/usr/bin:/bin") as box:
        unpack(tarball, os.path.join(box.root, "opt"))
        demo_mirror(args, box.root)
        print(f"chroot ready: {time.monotonic() - t0:.0f} s")
        # Every library but glibc's comes from the bundle, none from the chroot.
        res = box.run("ldd", f"{bundle}/bin/redist")
        for line in res.stdout.splitlines():
            if "=>" not in line:
                continue
            soname = line.split("=>")[0].strip()
            path = os.path.normpath(line.split("=>")[1].split()[0])
            cs.check(GLIBC_SONAMES.match(soname) or path.startswith(f"{bundle}/lib/"),
                     f"in the chroot, redist loads {soname} from {path}")
        box.run("redist", "--version")
        box.run("redist", "fetch", "cudnn", "9", "--base-url", "file:///srv/mirror",
                "--prefix", "/opt/cudnn")
        res = box.run("redist", "verify", "--prefix", "/opt/cudnn")
        print(res.stdout + res.stderr, end="")
        box.run("cudnn-fetch", "9", "--base-url", "file:///srv/mirror", "--prefix", "/opt/cudnn-2")
        # verify can fail: a changed file is exit 5.
        prefix = os.path.join(box.root, "opt", "cudnn")
        victim = next(os.path.join(d, f) for d, _, fs in os.walk(prefix)
                      if ".redist" not in d for f in sorted(fs)
                      if os.path.isfile(os.path.join(d, f))
                      and not os.path.islink(os.path.join(d, f)))
        os.chmod(victim, 0o644)
        with open(victim, "ab") as f:
            f.write(b"changed")
        res = box.run("redist", "verify", "--prefix", "/opt/cudnn", check=False)
        cs.check(res.returncode == 5, f"verify after a change: exit {res.returncode}, not 5\n"
                 f"{res.stderr}")
    print(f"chroot test: {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    sys.exit(cs.main({"package": test_package, "glibc": test_glibc, "deb": test_deb,
                      "find_package": test_find_package, "chroot": test_chroot}))
