#!/usr/bin/env python3
"""redist_fetch() (cmake/RedistFetch.cmake) against a small mirror of real
libraries: a stand-in cuDNN 9.99.0 compiled here (libcudnn.so.9.99.0 with
cudnnGetVersion(), libcudnn_graph.so.9.99.0, libcudnn_adv_static.a) packed
NVIDIA-style (see cmake_support.make_cudnn_mirror).

    redist_fetch_test.py project   tests/cmake/redist_fetch_project, from
                                   RedistFetch.cmake in the source tree, over
                                   HTTP from the loopback nginx (fixture
                                   "nginx"; the mirror goes to
                                   <state>/nginx/own/<test>/, served in the
                                   test's namespace as /t/<test>/_own/, where
                                   <test> is $REDIST_E2E_TEST, default
                                   cmake_redist_fetch; removed after):
                                   targets, variables, the program runs;
                                   re-configure does not run the tool; a
                                   changed request does; errors stop the
                                   configure with the tool's message; LOCKFILE
                                   is passed as --locked.
    redist_fetch_test.py example   examples/redist_fetch against the installed
                                   package (fixture redist_installed) over
                                   file://: find_package(redist) brings
                                   redist_fetch() and the installed tool.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cmake_support as cs  # noqa: E402

EXPECTED_OUTPUT = f"cudnn version {cs.CUDNN_VERSION_NUMBER}\n"

# This test's namespace on the shared nginx (tests/fixtures/nginx_fixture.py):
# its requests are told from other tests' by the /t/<test>/ prefix.
TEST_ID = os.environ.get("REDIST_E2E_TEST") or "cmake_redist_fetch"


def read_result(path: str) -> dict:
    out = {}
    with open(path) as f:
        for line in f:
            key, _, value = line.rstrip("\n").partition("=")
            out[key] = value
    return out


def write_wrapper(work: str, real: str) -> tuple[str, str]:
    """A wrapper around the real tool that logs each call: the proof of
    whether a configure ran it."""
    log = os.path.join(work, "tool-calls.log")
    wrapper = os.path.join(work, "redist-wrapper")
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{log}'\nexec '{real}' \"$@\"\n")
    os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
    open(log, "w").close()
    return wrapper, log


def tool_calls(log: str) -> list[str]:
    with open(log) as f:
        return [line for line in f.read().splitlines() if line]


def nginx_requests(state: str, nginx_base: str, marker: str) -> int:
    """Lines of the nginx access log that contain marker, once every request
    made so far is logged: nginx writes a line after the response's last
    byte, so a tool can exit before it is there. Its one worker handles
    events in order, so once a request made now is logged, so is every
    earlier one (as tests/e2e/support.py log_barrier() does)."""
    log = os.path.join(state, "nginx", "access.log")
    token = f"/t/{TEST_ID}/__access_log_barrier__?{os.getpid()}.{time.monotonic_ns()}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        opener.open(nginx_base + token, timeout=10).close()
    except OSError:
        pass  # a 404: logged all the same
    deadline = time.monotonic() + 30
    while True:
        try:
            with open(log) as f:
                lines = f.readlines()
        except FileNotFoundError:
            lines = []
        if any(token in line for line in lines):
            return sum(1 for line in lines if marker in line)
        if time.monotonic() > deadline:
            raise cs.Failure(f"nginx did not log {token} within 30 s")
        time.sleep(0.01)


def check_program(build: str):
    exe = os.path.join(build, "cudnn_version")
    res = cs.run([exe])
    cs.check(res.stdout == EXPECTED_OUTPUT,
             f"cudnn_version printed {res.stdout!r}, expected {EXPECTED_OUTPUT!r}")
    needed = cs.needed_libs(exe)
    cs.check("libcudnn.so.9" in needed, f"cudnn_version should need libcudnn.so.9: {needed}")


def test_project(args):
    state = os.path.abspath(args.state)
    work = cs.scratch(args, "redist_fetch")
    try:
        with open(os.path.join(state, "nginx", "base_url")) as f:
            nginx_base = f.read().strip()
    except FileNotFoundError:
        raise cs.Failure("no nginx base_url: run through ctest (fixture nginx)")

    if not re.fullmatch(r"[A-Za-z0-9_]+", TEST_ID):
        raise cs.Failure(f"REDIST_E2E_TEST={TEST_ID!r}: expected [A-Za-z0-9_]+")

    # Our own mirror, served in this test's namespace from the fixture's
    # directory for it (never inside the shared demo mirror, which other
    # tests read meanwhile). Copied under a temporary name, then renamed.
    cs.make_cudnn_mirror(args, os.path.join(work, "gen"), os.path.join(work, "mirror"))
    served = os.path.join(state, "nginx", "own", TEST_ID)
    cs.rm_tree(served + ".tmp")
    shutil.copytree(os.path.join(work, "mirror"), served + ".tmp", symlinks=True)
    cs.rm_tree(served)
    os.rename(served + ".tmp", served)
    try:
        run_project_checks(args, state, work, nginx_base)
    finally:
        cs.rm_tree(served)


def run_project_checks(args, state: str, work: str, nginx_base: str):
    marker = f"/t/{TEST_ID}/_own/"
    base_url = nginx_base + marker.rstrip("/")
    wrapper, log = write_wrapper(work, os.path.join(args.build_dir, "bin", "redist"))
    env = cs.env(xdg_root=os.path.join(work, "xdg"))
    source = os.path.join(args.source_dir, "tests", "cmake", "redist_fetch_project")
    build = os.path.join(work, "build")
    result_file = os.path.join(work, "result.txt")
    common = [f"-DREDIST_SOURCE_DIR={args.source_dir}", f"-DREDIST_EXECUTABLE={wrapper}",
              f"-DTEST_BASE_URL={base_url}", f"-DTEST_RESULT_FILE={result_file}"]
    configure = cs.configure_args(args, source, build, *common)

    # 1. First configure: the tool runs once, over HTTP.
    requests_before = nginx_requests(state, nginx_base, marker)
    res = cs.run(configure, env_=env)
    calls = tool_calls(log)
    cs.check(len(calls) == 1, f"expected one tool run, got {calls}")
    cs.check(calls[0].startswith(f"fetch cudnn {cs.CUDNN_VERSION} --prefix "), calls[0])
    for opt in ("--cuda 12", "--platform linux-x86_64", f"--base-url {base_url}"):
        cs.check(opt in calls[0], f"{opt!r} not passed: {calls[0]}")
    cs.check(nginx_requests(state, nginx_base, marker) > requests_before,
             f"nginx served nothing from {marker}: was HTTP used?")

    prefix = os.path.join(build, "_redist", "cudnn")
    r = read_result(result_file)
    for var in ("cudnn_ROOT", "CUDNN_ROOT"):
        cs.check(r[var] == prefix, f"{var}={r[var]}, expected {prefix}")
    cs.check(r["CUDNN_INCLUDE_DIR"] == prefix + "/include", r["CUDNN_INCLUDE_DIR"])
    cs.check(r["CUDNN_LIBRARY_DIR"] == prefix + "/lib", r["CUDNN_LIBRARY_DIR"])
    cs.check(r["CUDNN_VERSION"] == cs.CUDNN_VERSION, f"CUDNN_VERSION={r['CUDNN_VERSION']}")
    cs.check(prefix in r["CMAKE_PREFIX_PATH"].split(";"), r["CMAKE_PREFIX_PATH"])
    targets = sorted(r["CUDNN_TARGETS"].split(";"))
    cs.check(targets == ["CUDNN::cudnn", "CUDNN::cudnn_adv_static", "CUDNN::cudnn_graph"],
             f"targets {targets}")
    for name in ("cudnn", "cudnn_graph"):
        t = f"CUDNN::{name}"
        cs.check(r[f"{t}.TYPE"] == "SHARED_LIBRARY", f"{t} type {r[f'{t}.TYPE']}")
        loc = r[f"{t}.IMPORTED_LOCATION"]
        cs.check(loc == f"{prefix}/lib/lib{name}.so.{cs.CUDNN_VERSION}", f"{t} location {loc}")
        cs.check(os.path.isfile(loc) and not os.path.islink(loc), f"{loc} is not the real file")
        cs.check(r[f"{t}.IMPORTED_SONAME"] == f"lib{name}.so.9", f"{t} soname")
        cs.check(r[f"{t}.INTERFACE_INCLUDE_DIRECTORIES"] == prefix + "/include", f"{t} includes")
    cs.check(r["CUDNN::cudnn_adv_static.TYPE"] == "STATIC_LIBRARY", "cudnn_adv_static type")

    # 2. Build and run: the program reports the version from the library.
    cs.run([args.cmake, "--build", build], env_=env)
    check_program(build)

    # 3. Re-configure: the stamp says the request is satisfied; the tool does
    # not run and nothing is downloaded.
    requests_before = nginx_requests(state, nginx_base, marker)
    res = cs.run(configure, env_=env)
    cs.check(len(tool_calls(log)) == 1, f"re-configure ran the tool: {tool_calls(log)}")
    cs.check("redist_fetch(cudnn): up to date" in res.stdout, res.stdout)
    cs.check(nginx_requests(state, nginx_base, marker) == requests_before,
             "re-configure downloaded from the mirror")
    print(f"re-configure took {res.elapsed:.2f} s (tool not run)")
    cs.check(read_result(result_file) == r, "re-configure defined different targets/variables")
    cs.run([args.cmake, "--build", build], env_=env)
    check_program(build)

    # 4. A different request (COMPONENTS) runs the tool again (which finds the
    # receipts matching: a no-op); the next configure is up to date again.
    cs.run(configure + ["-DTEST_COMPONENTS=cudnn"], env_=env)
    calls = tool_calls(log)
    cs.check(len(calls) == 2 and "--component cudnn" in calls[1], f"calls {calls}")
    res = cs.run(configure, env_=env)
    cs.check(len(tool_calls(log)) == 2 and "up to date" in res.stdout,
             f"second re-configure ran the tool: {tool_calls(log)}")

    # 5. A receipt rewritten behind CMake's back (here: removed) invalidates
    # the stamp.
    receipt = os.path.join(prefix, ".redist", "receipts", "cudnn", "cudnn.json")
    cs.check(os.path.isfile(receipt), f"no receipt at {receipt}")
    saved = open(receipt, "rb").read()
    os.unlink(receipt)
    res = cs.run(configure, env_=env, check=False)
    cs.check(len(tool_calls(log)) == 3, f"missing receipt did not rerun the tool: {tool_calls(log)}")
    if not os.path.exists(receipt):  # the tool may refuse to adopt unowned files
        with open(receipt, "wb") as f:
            f.write(saved)

    # 6. A failure stops the configure with the tool's one-line error.
    fail_build = os.path.join(work, "build-missing")
    res = cs.run(cs.configure_args(args, source, fail_build, *common,
                                   "-DTEST_VERSION=9.98.0", "-DTEST_CONFIGURE_ONLY=ON"),
                 env_=env, check=False)
    cs.check(res.returncode != 0, "configure with a missing version succeeded")
    # CMake wraps long messages: compare with whitespace collapsed.
    flat = " ".join(res.stderr.split())
    m = re.search(r"redist_fetch\(cudnn\): (.+?) exit code: (\d+)", flat)
    cs.check(m, f"no redist_fetch error in:\n{res.stderr}")
    cs.check(m.group(2) == "3", f"expected exit code 3 (not found), got {m.group(2)}")
    cs.check("9.98.0" in m.group(1), f"error does not name the version: {m.group(1)}")

    # 7. LOCKFILE is passed through as --locked <absolute path>.
    lock = os.path.join(work, "redist.lock")
    with open(lock, "w") as f:
        f.write("{}\n")
    lock_build = os.path.join(work, "build-lock")
    res = cs.run(cs.configure_args(args, source, lock_build, *common,
                                   f"-DTEST_LOCKFILE={lock}", "-DTEST_CONFIGURE_ONLY=ON"),
                 env_=env, check=False)
    last = tool_calls(log)[-1]
    cs.check(f"--locked {lock}" in last, f"LOCKFILE not passed as --locked: {last}")
    if res.returncode != 0:
        cs.check("redist_fetch(cudnn): " in res.stderr, f"unexpected failure:\n{res.stderr}")

    # 8. TRUSTED_KEY files are passed through as --trusted-key <absolute path>, each.
    keys_build = os.path.join(work, "build-keys")
    res = cs.run(cs.configure_args(args, source, keys_build, *common,
                                   "-DTEST_TRUSTED_KEYS=keys/a.pub;/etc/redist/b.pub", "-DTEST_CONFIGURE_ONLY=ON"),
                 env_=env, check=False)
    last = tool_calls(log)[-1]
    cs.check(f"--trusted-key {os.path.join(source, 'keys', 'a.pub')} --trusted-key /etc/redist/b.pub" in last,
             f"TRUSTED_KEY not passed as --trusted-key: {last}")
    cs.check(res.returncode != 0 and "a.pub" in res.stderr, f"a missing key file did not fail the configure:\n"
             f"{res.stderr}")


def test_example(args):
    install = cs.install_dir(args)
    work = cs.scratch(args, "redist_fetch_example")
    mirror = os.path.join(work, "mirror")
    cs.make_cudnn_mirror(args, os.path.join(work, "gen"), mirror)
    env = cs.env(xdg_root=os.path.join(work, "xdg"))
    build = os.path.join(work, "build")
    cs.run(cs.configure_args(args, os.path.join(args.source_dir, "examples", "redist_fetch"),
                             build, f"-DCMAKE_PREFIX_PATH={install}",
                             f"-DCUDNN_VERSION={cs.CUDNN_VERSION}", "-DFETCH_CUDART=OFF",
                             f"-DREDIST_BASE_URL=file://{mirror}"), env_=env)
    cache = cs.read_cache(build)
    tool = os.path.join(install, "bin", "redist")
    cs.check(os.path.realpath(cache.get("REDIST_EXECUTABLE", "")) == os.path.realpath(tool),
             f"REDIST_EXECUTABLE={cache.get('REDIST_EXECUTABLE')}, expected the installed {tool}")
    cs.check(os.path.isfile(os.path.join(build, "_redist", "cudnn", "include", "cudnn.h")),
             "cudnn.h not fetched")
    cs.run([args.cmake, "--build", build], env_=env)
    check_program(build)


if __name__ == "__main__":
    sys.exit(cs.main({"project": test_project, "example": test_example}))
