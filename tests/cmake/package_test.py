#!/usr/bin/env python3
"""The installed package: `cmake --install`, find_package(redist), pkg-config.

    package_test.py install     cmake --install <build> --prefix <state>/cmake/install
                                and check what landed (fixture redist_installed)
    package_test.py consumer    examples/consumer against the installed package:
                                find_package(redist CONFIG), shared and static
    package_test.py pkgconfig   a one-file program built with
                                `pkg-config --cflags --libs redist` (and --static)
    package_test.py library     examples/library (docs/library.md) against the
                                installed package, run over a file:// mirror:
                                install a release, sync a project, verify and
                                check the prefixes
    package_test.py exports     libredist.so exports the public API and nothing
                                else: every redist:: symbol it defines is named
                                in the installed headers (redist/export.hpp)

The consumers parse tests/data/manifests/cudnn/redistrib_9.27.0.json and must
print the artifact count `redist show --manifest ... --json` reports.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cmake_support as cs  # noqa: E402

MANIFEST_REL = os.path.join("tests", "data", "manifests", "cudnn", "redistrib_9.27.0.json")


def project_version(args) -> str:
    return cs.read_cache(args.build_dir)["CMAKE_PROJECT_VERSION"]


def test_install(args):
    prefix = cs.install_dir(args)
    cs.rm_tree(prefix)
    cs.run([args.cmake, "--install", args.build_dir, "--prefix", prefix])
    version = project_version(args)
    libdir = os.path.join(prefix, args.libdir)
    pkgdir = os.path.join(libdir, "cmake", "redist")
    expected = [
        os.path.join(prefix, "bin", "redist"),
        os.path.join(prefix, "bin", "cudnn-fetch"),
        os.path.join(libdir, "libredist.a"),
        os.path.join(libdir, "libredist.so"),
        os.path.join(libdir, f"libredist.so.{version}"),
        os.path.join(libdir, "pkgconfig", "redist.pc"),
        os.path.join(prefix, "bin", "redist-check-probe"),
    ] + [os.path.join(prefix, "share", "bash-completion", "completions", tool)
         for tool in ("redist", "cudnn-fetch")] + [os.path.join(pkgdir, f) for f in (
        "redistConfig.cmake", "redistConfigVersion.cmake", "redistSharedTargets.cmake",
        "redistStaticTargets.cmake", "RedistFetch.cmake")]
    headers = sorted(f for f in os.listdir(os.path.join(args.source_dir, "include", "redist"))
                     if f.endswith(".hpp"))
    cs.check(headers, "no public headers in the source tree?")
    expected += [os.path.join(prefix, "include", "redist", h) for h in headers]
    missing = [p for p in expected if not os.path.exists(p)]
    cs.check(not missing, "not installed: " + ", ".join(missing))
    cs.check(os.path.islink(os.path.join(libdir, "libredist.so")),
             "libredist.so should be the development symlink")
    # The completion script is the one in the source tree, under each tool's name.
    with open(os.path.join(args.source_dir, "scripts", "completion", "redist.bash"), encoding="utf-8") as f:
        completion = f.read()
    for tool in ("redist", "cudnn-fetch"):
        with open(os.path.join(prefix, "share", "bash-completion", "completions", tool), encoding="utf-8") as f:
            cs.check(f.read() == completion, f"share/bash-completion/completions/{tool} is not redist.bash")
    # The installed tool runs (it links the static library: no rpath needed).
    res = cs.run([os.path.join(prefix, "bin", "redist"), "--version"])
    cs.check(version in res.stdout + res.stderr, f"redist --version does not say {version}")
    # The .so carries its soname and only system dependencies.
    needed = cs.needed_libs(os.path.join(libdir, f"libredist.so.{version}"))
    cs.check(any(n.startswith("libcurl") for n in needed),
             f"libredist.so should need libcurl, NEEDED={needed}")


def test_consumer(args):
    prefix = cs.install_dir(args)
    work = cs.scratch(args, "consumer")
    build = os.path.join(work, "build")
    manifest = os.path.join(args.source_dir, MANIFEST_REL)
    expected = cs.expected_artifact_count(args, manifest)
    cs.check(expected > 0, "redist show found no artifacts")

    cs.run(cs.configure_args(args, os.path.join(args.source_dir, "examples", "consumer"), build,
                             f"-DCMAKE_PREFIX_PATH={prefix}"))
    cache = cs.read_cache(build)
    pkgdir = os.path.realpath(os.path.join(prefix, args.libdir, "cmake", "redist"))
    cs.check(os.path.realpath(cache.get("redist_DIR", "")) == pkgdir,
             f"found redist at {cache.get('redist_DIR')}, not in {pkgdir}")
    cs.run([args.cmake, "--build", build])
    # The static library's link interface names its private dependencies
    # (the consumer above only pulls in the manifest parser, so it would link
    # without most of them).
    with open(os.path.join(pkgdir, "redistStaticTargets.cmake")) as f:
        static_targets = f.read()
    for dep in ("simdjson::simdjson", "CURL::libcurl", "LibArchive::LibArchive",
                "LibLZMA::LibLZMA", "zstd::libzstd_shared", "OpenSSL::Crypto"):
        cs.check(f"$<LINK_ONLY:{dep}>" in static_targets,
                 f"redist::redist_static does not carry $<LINK_ONLY:{dep}>")

    for exe, shared in (("count_artifacts", True), ("count_artifacts_static", False)):
        path = os.path.join(build, exe)
        cs.check(os.path.exists(path), f"{exe} was not built (redist::redist_static missing?)")
        res = cs.run([path, manifest])
        m = re.fullmatch(r"9\.27\.0: (\d+) components, (\d+) artifacts\n", res.stdout)
        cs.check(m, f"{exe}: unexpected output {res.stdout!r}")
        cs.check(int(m.group(2)) == expected,
                 f"{exe}: {m.group(2)} artifacts, redist show says {expected}")
        # redist::redist is the shared library, redist::redist_static is not.
        uses_so = any(n.startswith("libredist.so") for n in cs.needed_libs(path))
        cs.check(uses_so == shared, f"{exe}: links libredist.so = {uses_so}, expected {shared}")

    # examples/fetch_cudnn.cpp (resolve, select, install) links against both
    # libraries, the static one through its own link interface only, and runs.
    for exe, shared in (("fetch_cudnn", True), ("fetch_cudnn_static", False)):
        path = os.path.join(build, exe)
        cs.check(os.path.exists(path), f"{exe} was not built")
        res = cs.run([path], check=False)
        cs.check(res.returncode == 2 and "usage: fetch_cudnn" in res.stderr,
                 f"{exe}: exit {res.returncode}, stderr {res.stderr!r}")
        uses_so = any(n.startswith("libredist.so") for n in cs.needed_libs(path))
        cs.check(uses_so == shared, f"{exe}: links libredist.so = {uses_so}, expected {shared}")

    # Errors come back through the library: a broken manifest fails with the
    # bad-manifest exit code (4).
    bad = os.path.join(work, "bad.json")
    with open(bad, "w") as f:
        f.write('{"cudnn": {"linux-x86_64": {"relative_path": "a.tar.xz"}}')
    res = cs.run([os.path.join(build, "count_artifacts"), bad], check=False)
    cs.check(res.returncode == 4, f"bad manifest: exit {res.returncode}, stderr {res.stderr!r}")


def test_pkgconfig(args):
    prefix = cs.install_dir(args)
    work = cs.scratch(args, "pkgconfig")
    libdir = os.path.join(prefix, args.libdir)
    env = cs.env({"PKG_CONFIG_PATH": os.path.join(libdir, "pkgconfig")})
    manifest = os.path.join(args.source_dir, MANIFEST_REL)
    expected = cs.expected_artifact_count(args, manifest)
    source = os.path.join(args.source_dir, "examples", "consumer", "count_artifacts.cpp")

    res = cs.run(["pkg-config", "--modversion", "redist"], env_=env)
    cs.check(res.stdout.strip() == project_version(args), f"pkg-config version {res.stdout!r}")
    res = cs.run(["pkg-config", "--variable=prefix", "redist"], env_=env)
    cs.check(os.path.realpath(res.stdout.strip()) == os.path.realpath(prefix),
             f"redist.pc prefix {res.stdout.strip()!r} is not {prefix}")

    flags = shlex.split(cs.run(["pkg-config", "--cflags", "--libs", "redist"], env_=env).stdout)
    cs.check("-lredist" in flags, f"no -lredist in {flags}")
    shared_exe = os.path.join(work, "count_shared")
    cs.run([args.cxx, "-std=c++20", "-o", shared_exe, source, *flags,
            f"-Wl,-rpath,{libdir}"], env_=env)

    # Static: libredist.a plus its private dependencies. `pkg-config --static`
    # would recurse into *their* Libs.private (libcurl's nghttp2, ssh2, ...),
    # whose static/dev files a system need not have; so link libredist.a with
    # the (shared) libraries Requires.private names. --whole-archive pulls in
    # every object (the program alone would only need the manifest parser), so
    # this links only if Requires.private lists everything libredist.a needs.
    sflags = shlex.split(cs.run(["pkg-config", "--static", "--libs", "redist"], env_=env).stdout)
    for lib in ("-lsimdjson", "-lcurl", "-larchive", "-llzma", "-lcrypto"):
        cs.check(lib in sflags, f"pkg-config --static --libs redist lacks {lib}: {sflags}")
    private = cs.run(["pkg-config", "--print-requires-private", "redist"], env_=env).stdout.split()
    cs.check(private, "redist.pc has no Requires.private")
    sflags = (shlex.split(cs.run(["pkg-config", "--cflags", "redist"], env_=env).stdout)
              + ["-Wl,--whole-archive", os.path.join(libdir, "libredist.a"),
                 "-Wl,--no-whole-archive"]
              + shlex.split(cs.run(["pkg-config", "--libs", *private], env_=env).stdout)
              + ["-pthread"])
    static_exe = os.path.join(work, "count_static")
    cs.run([args.cxx, "-std=c++20", "-o", static_exe, source, *sflags], env_=env)

    for exe, shared in ((shared_exe, True), (static_exe, False)):
        res = cs.run([exe, manifest])
        m = re.fullmatch(r"9\.27\.0: \d+ components, (\d+) artifacts\n", res.stdout)
        cs.check(m and int(m.group(1)) == expected,
                 f"{exe}: {res.stdout!r}, redist show says {expected} artifacts")
        uses_so = any(n.startswith("libredist.so") for n in cs.needed_libs(exe))
        cs.check(uses_so == shared, f"{exe}: links libredist.so = {uses_so}, expected {shared}")


def check_library_doc(args):
    """Every C++ block of docs/library.md is a verbatim excerpt of examples/library/."""
    with open(os.path.join(args.source_dir, "docs", "library.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```cpp\n(.*?)```", f.read(), re.S)
    cs.check(len(blocks) >= 3, f"docs/library.md has {len(blocks)} C++ blocks")
    sources = []
    for path in glob.glob(os.path.join(args.source_dir, "examples", "library", "*.cpp")):
        with open(path, encoding="utf-8") as f:
            sources.append(f.read())
    for block in blocks:
        cs.check(any(block in text for text in sources),
                 f"docs/library.md: this block is not in examples/library/*.cpp:\n{block}")


def test_library(args):
    check_library_doc(args)
    prefix = cs.install_dir(args)
    work = cs.scratch(args, "library")
    env = cs.env(xdg_root=os.path.join(work, "xdg"))
    for sub in ("cache", "config", "data", "home"):
        os.makedirs(os.path.join(work, "xdg", sub), exist_ok=True)
    build = os.path.join(work, "build")
    cs.run(cs.configure_args(args, os.path.join(args.source_dir, "examples", "library"), build,
                             f"-DCMAKE_PREFIX_PATH={prefix}"), env_=env)
    cs.run([args.cmake, "--build", build], env_=env)
    programs = {name: os.path.join(build, name) for name in ("install_release", "sync_project", "check_prefix")}
    for name, path in programs.items():
        cs.check(any(n.startswith("libredist.so") for n in cs.needed_libs(path)),
                 f"{name} does not link libredist.so")
        res = cs.run([path], check=False, env_=env)
        cs.check(res.returncode == 2 and f"usage: {name}" in res.stderr,
                 f"{name} without arguments: exit {res.returncode}, stderr {res.stderr!r}")
    tool = os.path.join(args.build_dir, "bin", "redist")
    mirror = os.path.join(work, "mirror")
    facts = cs.make_cudnn_mirror(args, os.path.join(work, "gen"), mirror)
    library = f"lib/libcudnn.so.{cs.CUDNN_VERSION}"

    # 1. Resolve and install a release ("9" resolves to the mirror's 9.99.0).
    target = os.path.join(work, "cudnn")
    res = cs.run([programs["install_release"], f"file://{mirror}", "cudnn", "9", target], env_=env)
    cs.check(re.search(rf"^cudnn {re.escape(cs.CUDNN_BUILD)}: \d+ files$", res.stdout, re.M),
             f"install_release: unexpected output {res.stdout!r}")
    for rel in ("include/cudnn.h", library):
        cs.check(os.path.isfile(os.path.join(target, rel)), f"install_release did not install {rel}")
    cs.run([tool, "verify", "--prefix", target], env_=env)  # the tool agrees with what the library wrote
    res = cs.run([programs["install_release"], f"file://{mirror}", "cudnn", "9", target], env_=env)
    cs.check("(already installed)" in res.stdout, f"second install_release: {res.stdout!r}")
    res = cs.run([programs["install_release"], f"file://{mirror}", "cudnn", "7", target], check=False, env_=env)
    cs.check(res.returncode == 3 and "install_release: " in res.stderr,
             f"a missing release: exit {res.returncode}, stderr {res.stderr!r}")

    # 2. Verify and check the prefix; then a changed file is found.
    res = cs.run([programs["check_prefix"], target], env_=env)
    cs.check("verify: 1 components" in res.stdout and "0 problems" in res.stdout and "0 failures" in res.stdout,
             f"check_prefix: {res.stdout!r}")
    with open(os.path.join(target, "include", "cudnn.h"), "a") as f:
        f.write("/* edited */\n")
    res = cs.run([programs["check_prefix"], target], check=False, env_=env)
    cs.check(res.returncode == 5 and "include/cudnn.h" in res.stdout,
             f"check_prefix after an edit: exit {res.returncode}, stdout {res.stdout!r}")

    # 3. Sync a project: redist.toml with a mirror inside its directory.
    project = os.path.join(work, "project")
    shutil.copytree(mirror, os.path.join(project, "mirror"))
    with open(os.path.join(project, "redist.toml"), "w") as f:
        f.write('[project]\nprefix = "nvidia"\nplatforms = ["linux-x86_64"]\ncuda = "12"\n'
                'base-url = "mirror"\n\n[products.cudnn]\nversion = "9"\n')
    res = cs.run([programs["sync_project"], project], env_=env)
    cs.check(re.search(rf"^cudnn {re.escape(cs.CUDNN_VERSION)} cudnn: \d+ files$", res.stdout, re.M),
             f"sync_project: unexpected output {res.stdout!r}")
    nvidia = os.path.join(project, "nvidia")
    cs.check(os.path.isfile(os.path.join(nvidia, library)), f"sync_project did not install {library}")
    with open(os.path.join(project, "redist.lock")) as f:
        lock = f.read()
    cs.check(facts["top"] in lock, "redist.lock does not pin the archive")
    # The tool takes the library's lock as it is.
    cs.run([tool, "sync", "--frozen", "--file", os.path.join(project, "redist.toml")], env_=env)
    res = cs.run([programs["sync_project"], project], env_=env)
    cs.check("(already installed)" in res.stdout, f"second sync_project: {res.stdout!r}")
    res = cs.run([programs["check_prefix"], nvidia], env_=env)
    cs.check("verify: 1 components" in res.stdout and "0 failures" in res.stdout, f"check_prefix: {res.stdout!r}")


# Known to be public: declared in include/redist/*.hpp, used by programs.
PUBLIC_SYMBOLS = ("redist::parse_manifest", "redist::install", "redist::forecast_install", "redist::blob_cache::open",
                  "redist::error::describe", "redist::verify_prefix", "redist::run_checks", "redist::open_project",
                  "redist::lock_project", "redist::plan_sync", "redist::sync_project",
                  "redist::select_artifacts", "redist::variant_list",
                  "redist::unknown_component", "redist::escape_for_display", "redist::preflight_findings",
                  "redist::to_url", "redist::artifact_url", "redist::local_roots", "redist::base_of_artifact_url",
                  "redist::recompressed_record::find")
# Known to be internal: declared in lib/<layer>/ headers only.
INTERNAL_SYMBOLS = ("redist::confined_join", "redist::validate_name",  # lib/support/safe_path.hpp
                    "redist::read_file", "redist::errno_error",  # lib/support/posix_file.hpp
                    "redist::segmented_download", "redist::try_sources",  # lib/transport/
                    # lib/model/select_rules.hpp
                    "redist::is_library_family", "redist::is_driver_component", "redist::available_platforms",
                    "redist::cuda_version_string", "redist::header_define",  # lib/features/check_versions.hpp
                    "redist::minimum_driver_for_cuda", "redist::debian_package_hint",  # lib/features/check_data.hpp
                    # lib/model/urls.hpp
                    "redist::join_url", "redist::index_url", "redist::manifest_url", "redist::base_of_manifest_url",
                    "redist::is_oci_url", "redist::is_oci_layout_url", "redist::resolve_reference",
                    "redist::mirror_artifact_path", "redist::mirror_artifact_url", "redist::url_directory",
                    "redist::is_file_url", "redist::is_local_url", "redist::file_url_to_path",
                    "redist::source_url_problem",
                    # lib/model/recompressed_sidecar.hpp
                    "redist::recompressed_document_name", "redist::recompressed_signature_name",
                    "redist::recompressed_copy_path", "redist::recompressed_to_json", "redist::parse_recompressed",
                    "redist::check_recompressed_for",
                    # lib/pipeline/install_rules.hpp
                    "redist::plan_install", "redist::unpacked_size_estimate", "redist::check_free_space",
                    # lib/model/lockfile.hpp
                    "redist::lock_artifact", "redist::locked_for", "redist::locked_manifest_url",
                    "redist::project_lock_to_json", "redist::lock_staleness", "redist::plans_for_platform",
                    # lib/model/manifest.hpp
                    "redist::archive_format_from_path", "redist::artifact_path_problem", "redist::is_sha256_hex",
                    # lib/pipeline/sync.hpp
                    "redist::find_project", "redist::check_project_prefix", "redist::project_local_roots",
                    "redist::resolve_project", "redist::attach_locked_copies",
                    # lib/archive/signing.hpp
                    "redist::parse_trusted_key", "redist::find_signer", "redist::signing_key::read",
                    "redist::signing_key::sign",
                    "redist::closest_match", "redist::known_products",  # lib/support/suggest.hpp
                    # lib/features/mirror_target.hpp
                    "redist::write_mirror_index", "redist::mirroring::write_mirror_index",
                    "redist::component_aliases", "redist::find_component_or_alias",  # lib/model/diff.hpp
                    "redist::tree_files", "redist::blob_cache::tree_files",  # lib/store/cache_trees.hpp
                    "redist::utf8_sequence_length", "redist::valid_utf8",  # lib/support/printable.hpp
                    "redist::parse_user_config",  # lib/model/project.hpp
                    "redist::download_range",  # lib/transport/transfer.hpp
                    "redist::remove_component")  # lib/store/prefix.hpp


def named(symbol: str, name: str) -> bool:
    """`symbol` (as nm -C writes it) is the function `name`: "redist::f(int)" or,
    with an ABI tag, "redist::f[abi:cxx11](int)"."""
    return symbol.startswith(name) and symbol[len(name):len(name) + 1] in ("(", "[")


# The type_info, vtable, ... of a class are named after it.
_REDIST_SYMBOL = re.compile(r"^(?:(?:typeinfo name|typeinfo|vtable|VTT|guard variable|construction vtable) for )?"
                            r"redist::(\w+)")


def test_exports(args):
    prefix = cs.install_dir(args)
    version = project_version(args)
    library = os.path.join(prefix, args.libdir, f"libredist.so.{version}")
    res = cs.run(["nm", "-D", "--defined-only", "-C", library])
    symbols = [line.split(" ", 2)[2] for line in res.stdout.splitlines() if line.count(" ") >= 2]
    cs.check(len(symbols) > 50, f"nm found only {len(symbols)} symbols in {library}")
    for name in PUBLIC_SYMBOLS:
        cs.check(any(named(s, name) for s in symbols), f"{library} does not export {name}(...)")
    for name in INTERNAL_SYMBOLS:
        leaked = [s for s in symbols if named(s, name)]
        cs.check(not leaked, f"{library} exports the internal {leaked}")
    # The private dependencies' code stays inside (toml++ is header-only: its
    # templates are instantiated in the library).
    leaked = [s for s in symbols if s.startswith(("toml::", "simdjson::"))]
    cs.check(not leaked, f"{library} exports its dependencies' {leaked[:5]}")
    # In general: a redist:: symbol is exported only when its outermost name
    # (the function, class or variable in namespace redist) is in a public header.
    words = set()
    for header in glob.glob(os.path.join(prefix, "include", "redist", "*.hpp")):
        with open(header, encoding="utf-8") as f:
            words.update(re.findall(r"\w+", f.read()))
    cs.check("REDIST_API_BEGIN" in words, "redist/export.hpp is not installed")
    internal = sorted({s for s in symbols if (m := _REDIST_SYMBOL.match(s)) and m.group(1) not in words})
    cs.check(not internal, f"{library} exports {len(internal)} symbols no public header declares: "
             + "; ".join(internal[:10]))


if __name__ == "__main__":
    sys.exit(cs.main({"install": test_install, "consumer": test_consumer,
                      "pkgconfig": test_pkgconfig, "exports": test_exports,
                      "library": test_library}))
