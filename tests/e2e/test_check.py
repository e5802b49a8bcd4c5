"""`redist check`: broken installs built at test time from tiny fake libraries
(cc -shared), installed through the real tool from a file:// release, each
giving its exact finding and exit code. Also the post-install check of
`fetch`/`cudnn-fetch` (--check, --no-check, --json) and the real cuDNN under
/usr/local/cuda/lib64 when present."""

import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import time
import unittest

import support

CC = shutil.which("cc") or shutil.which("gcc")
EXIT_CHECK_FAILED = 11
EXIT_NOT_FOUND = 3


def build_lib(out, soname, source, link=()):
    """Compiles `source` (C) into the shared library `out` with this SONAME."""
    src = out + ".c"
    with open(src, "w") as f:
        f.write(source)
    subprocess.run([CC, "-shared", "-fPIC", "-o", out, src, f"-Wl,-soname,{soname}", *link],
                   check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.unlink(src)
    return out


def fake_cudnn(out, encoded):
    return build_lib(out, "libcudnn.so.9", f"#include <stddef.h>\nsize_t cudnnGetVersion(void) {{ return {encoded}; }}\n")


def fake_libcuda(out, encoded, log=None):
    """With `log`: appends a line to that file each time it is asked its version."""
    # cuInit says CUDA_ERROR_NO_DEVICE (100): the driver answers, no GPU is usable.
    count = (f"FILE* f = fopen(\"{log}\", \"a\"); if (f) {{ fputs(\"asked\\n\", f); fclose(f); }} "
             if log else "")
    return build_lib(out, "libcuda.so.1",
                     "#include <stdio.h>\n"
                     f"int cuDriverGetVersion(int* v) {{ {count}*v = {encoded}; return 0; }}\n"
                     "int cuInit(unsigned f) { (void)f; return 100; }\n"
                     "int cuDeviceGetCount(int* n) { *n = 0; return 0; }\n"
                     "int cuDeviceGet(int* d, int i) { *d = i; return 0; }\n"
                     "int cuDeviceGetAttribute(int* v, int a, int d) { (void)a; (void)d; *v = 0; return 0; }\n")


def times_asked(log):
    if not os.path.exists(log):
        return 0
    with open(log) as f:
        return len(f.read().splitlines())


def fake_nvml(out, gpus):
    """libnvidia-ml.so.1 listing `gpus`: (major, minor, name) each."""
    caps = "".join(f"  if (d == (void*){i + 1}) {{ *ma = {ma}; *mi = {mi}; }}\n" for i, (ma, mi, _) in enumerate(gpus))
    names = "".join(f"  if (d == (void*){i + 1}) snprintf(n, len, \"%s\", \"{name}\");\n"
                    for i, (_, _, name) in enumerate(gpus))
    return build_lib(out, "libnvidia-ml.so.1",
                     "#include <stdio.h>\n"
                     "int nvmlInit_v2(void) { return 0; }\n"
                     "int nvmlShutdown(void) { return 0; }\n"
                     f"int nvmlDeviceGetCount_v2(unsigned* n) {{ *n = {len(gpus)}; return 0; }}\n"
                     "int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) { *d = (void*)(unsigned long)(i + 1); return 0; }\n"
                     f"int nvmlDeviceGetCudaComputeCapability(void* d, int* ma, int* mi) {{\n{caps}  return 0; }}\n"
                     f"int nvmlDeviceGetName(void* d, char* n, unsigned len) {{\n{names}  return 0; }}\n")


def make_release(mirror, product, label, component, version, lib_files, variant="cuda13", compress="xz", extra=()):
    """Writes <mirror>/<product>/redist/redistrib_<label>.json and one archive
    laid out like NVIDIA's (<top>-archive/lib/...). lib_files: (name in lib/,
    source path or ("symlink", target)); extra: (path under the top, bytes)."""
    top = f"{component}-linux-x86_64-{version}_{variant}-archive"
    rel = f"{component}/linux-x86_64/{top}.tar.{'xz' if compress == 'xz' else 'gz'}"
    root = os.path.join(mirror, product, "redist")
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tar"
    with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as tf:
        for d in (top, f"{top}/lib"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(ti)
        ti = tarfile.TarInfo(f"{top}/LICENSE")
        ti.size = 8
        tf.addfile(ti, __import__("io").BytesIO(b"license\n"))
        for name, data in extra:
            ti = tarfile.TarInfo(f"{top}/{name}")
            ti.size = len(data)
            tf.addfile(ti, __import__("io").BytesIO(data))
        for name, src in lib_files:
            if isinstance(src, tuple):
                ti = tarfile.TarInfo(f"{top}/lib/{name}")
                ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, src[1], 0o777
                tf.addfile(ti)
            else:
                tf.add(src, f"{top}/lib/{name}", recursive=False)
    cmd = ["xz", "-1", "-T2", "-c", tmp] if compress == "xz" else ["gzip", "-1", "-c", tmp]
    with open(path, "wb") as f:
        subprocess.run(cmd, stdout=f, check=True)
    os.unlink(tmp)
    data_hash, md5, size = hashlib.sha256(), hashlib.md5(), os.path.getsize(path)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            data_hash.update(chunk)
            md5.update(chunk)
    record = {"relative_path": rel, "sha256": data_hash.hexdigest(), "md5": md5.hexdigest(), "size": str(size)}
    doc = {"release_date": "2026-01-01", "release_label": label, "release_product": product,
           component: {"name": f"fake {component}", "license": "test", "version": version,
                       "linux-x86_64": {variant: record} if variant else record}}
    manifest = os.path.join(root, f"redistrib_{label}.json")
    support.save_json(manifest, doc)
    return manifest


def cudnn_version_h(version):
    major, minor, patch = version.split(".")[:3]
    return ("include/cudnn_version.h",
            f"#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n#define CUDNN_PATCHLEVEL {patch}\n".encode())


def marker_lib(out, soname, marker, fork_delay=None, body=""):
    """A library whose constructor writes `marker` (installed code running);
    with fork_delay, a forked child writes it that many seconds later."""
    write = f'FILE* f = fopen("{marker}", "a"); if (f) {{ fprintf(f, "%d\\n", (int)getpid()); fclose(f); }}'
    if fork_delay is not None:
        write = f"if (fork() == 0) {{ sleep({fork_delay}); {write} _exit(0); }}"
    return build_lib(out, soname, "#include <stdio.h>\n#include <unistd.h>\n"
                     f"__attribute__((constructor)) static void ran(void) {{ {write} }}\n{body}")


def versioned_lib(lib, version, soname):
    """The NVIDIA layout: lib.so.X.Y.Z (the file), SONAME and .so symlinks."""
    name = f"{soname.split('.so')[0]}.so.{version}"
    return [(name, lib), (soname, ("symlink", name)), (soname.split(".so")[0] + ".so", ("symlink", soname))]


def env_without_loader_path(extra=None):
    env = {"LD_LIBRARY_PATH": None}
    env.update(extra or {})
    return env


@unittest.skipUnless(CC, "no C compiler")
class CheckFindings(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.mirror = os.path.join(self.dir, "mirror")
        self.libs = os.path.join(self.dir, "libs")
        os.makedirs(self.libs)

    def install(self, manifest, prefix, *extra, env=None, check=0, tool="redist"):
        args = ["fetch", "--manifest", manifest] if tool == "redist" else ["--manifest", manifest]
        return support.run_tool(tool, *args, "--prefix", prefix, "--platform", "linux-x86_64", "--cuda", "13",
                                "--no-cache", *extra, env=env_without_loader_path(env), check=check)

    def check(self, prefix, *extra, env=None, check=None):
        return support.run_tool("redist", "check", "--prefix", prefix, *extra, env=env_without_loader_path(env),
                                check=check)

    def good_cudnn_release(self, label="9.19.0", encoded=91900):
        lib = fake_cudnn(os.path.join(self.libs, f"libcudnn-{label}.so"), encoded)
        return make_release(self.mirror, "cudnn", label, "cudnn", label, versioned_lib(lib, label, "libcudnn.so.9"))

    def test_missing_dependency_names_who_needs_it(self):
        missing = build_lib(os.path.join(self.libs, "libmissing.so.1"), "libmissing.so.1", "int missing(void) { return 1; }\n")
        broken = build_lib(os.path.join(self.libs, "libbroken.so"), "libbroken.so.1",
                           "int missing(void);\nint broken(void) { return missing(); }\n",
                           link=[missing])
        manifest = make_release(self.mirror, "demo", "1.0.0", "demo", "1.0.0", versioned_lib(broken, "1.0.0", "libbroken.so.1"))
        prefix = os.path.join(self.dir, "prefix")
        # The install itself succeeds: a failed check is one warning line. The
        # post-install check is the quick one: the ELF resolution finds it,
        # nothing is loaded.
        res = self.install(manifest, prefix)
        self.assertIn("warning: 1 post-install checks failed, first: resolve: lib/libbroken.so.1.0.0 needs "
                      "libmissing.so.1: not found", res.stderr)
        res = self.check(prefix, check=EXIT_CHECK_FAILED)
        self.assertIn("FAIL resolve: lib/libbroken.so.1.0.0 needs libmissing.so.1: not found\n", res.stdout)
        # dlerror() verbatim, from the child.
        self.assertIn("FAIL load: dlopen(lib/libbroken.so.1.0.0): libmissing.so.1: cannot open shared object file: "
                      "No such file or directory", res.stdout)
        self.assertIn("2 failed", res.stdout)
        # The dependency on the loader path fixes both.
        res = self.check(prefix, env={"LD_LIBRARY_PATH": self.libs}, check=0)
        self.assertNotIn("FAIL", res.stdout)
        # --check runs the full check (the dlopen too) and turns the warning into exit 11; --no-check skips it.
        res = self.install(manifest, prefix, "--force", "--check", check=EXIT_CHECK_FAILED)
        self.assertIn("FAIL resolve: lib/libbroken.so.1.0.0 needs libmissing.so.1: not found\n", res.stderr)
        self.assertIn("FAIL load: dlopen(lib/libbroken.so.1.0.0): libmissing.so.1: cannot open shared object file",
                      res.stderr)
        self.assertIn("error: 2 post-install checks failed (--check)", res.stderr)
        res = self.install(manifest, prefix, "--force", "--no-check", check=0)
        self.assertNotIn("post-install", res.stderr)

    def test_runtime_dependency_hint_runs_as_printed(self):
        # A cuDNN for CUDA 12 without cuBLAS: the hint is a whole command, with
        # the prefix and the CUDA major, that installs what is missing.
        lib = fake_cudnn(os.path.join(self.libs, "libcudnn.so"), 91900)
        manifest = make_release(self.mirror, "cudnn", "9.19.0", "cudnn", "9.19.0",
                                versioned_lib(lib, "9.19.0", "libcudnn.so.9"), variant="cuda12")
        prefix = os.path.join(self.dir, "pre fix")  # a space: the hint quotes it
        support.run_tool("redist", "fetch", "--manifest", manifest, "--prefix", prefix, "--platform",
                         "linux-x86_64", "--cuda", "12", "--no-cache", "--no-check", check=0)
        res = self.check(prefix)
        hints = re.findall(r"libcublasLt\.so\.12 \(.*?\): not found; install it with: (redist fetch .*?), or ",
                           res.stdout)
        self.assertEqual(len(hints), 1, res.stdout)
        self.assertIn("--prefix '" + prefix + "'", hints[0])
        argv = shlex.split(hints[0])
        res = support.run_tool(*argv, env={"REDIST_BASE_URL": support.nginx_base_url()}, check=0)
        receipt = support.load_json(os.path.join(prefix, ".redist", "receipts", "cuda", "libcublas.json"))
        self.assertEqual(receipt["release_label"], "12.9.1")

    def test_dependency_renamed_in_the_binary(self):
        # A NEEDED entry edited in the file (as a hostile archive could): resolved by
        # what the file says, not by what it was linked against.
        fake_z_dir = os.path.join(self.dir, "z")
        os.makedirs(fake_z_dir)
        z = build_lib(os.path.join(fake_z_dir, "libz.so.1"), "libz.so.1", "int zfake(void) { return 0; }\n")
        needs_z = build_lib(os.path.join(self.libs, "libneedsz.so"), "libneedsz.so.1",
                            "int zfake(void);\nint f(void) { return zfake(); }\n", link=[z])
        # Rename the NEEDED entry's library so that nothing on this machine satisfies it.
        with open(needs_z, "rb") as f:
            data = f.read().replace(b"libz.so.1\0", b"libq.so.1\0")
        with open(needs_z, "wb") as f:
            f.write(data)
        manifest = make_release(self.mirror, "demo", "1.0.0", "demo", "1.0.0", versioned_lib(needs_z, "1.0.0", "libneedsz.so.1"))
        prefix = os.path.join(self.dir, "prefix")
        self.install(manifest, prefix, "--no-check")
        res = self.check(prefix, check=EXIT_CHECK_FAILED)
        self.assertIn("FAIL resolve: lib/libneedsz.so.1.0.0 needs libq.so.1: not found\n", res.stdout)
        helptext = support.run_tool("redist", "check", "--help", check=0).stdout
        self.assertIn(" 11  a post-install check failed", helptext)

    def test_version_probe_disagrees_with_the_manifest(self):
        # The files say 9.22.0 (the manifest's version), the code says 9.19.0.
        lib = fake_cudnn(os.path.join(self.libs, "libcudnn.so"), 91900)
        manifest = make_release(self.mirror, "cudnn", "9.22.0", "cudnn", "9.22.0", versioned_lib(lib, "9.22.0", "libcudnn.so.9"))
        prefix = os.path.join(self.dir, "prefix")
        self.install(manifest, prefix, "--no-check")
        res = self.check(prefix, check=EXIT_CHECK_FAILED)
        self.assertIn("FAIL version: lib/libcudnn.so.9.22.0: cudnnGetVersion() = 91900 (9.19.0), but the receipt says "
                      "cudnn 9.22.0\n", res.stdout)
        doc = json.loads(self.check(prefix, "--json", check=EXIT_CHECK_FAILED).stdout)
        self.assertFalse(doc["ok"])
        versions = [f for f in doc["findings"] if f["check"] == "version" and f["severity"] == "failure"]
        self.assertEqual(len(versions), 1, doc)
        self.assertEqual(versions[0]["path"], "lib/libcudnn.so.9.22.0")
        self.assertEqual(versions[0]["component"], "cudnn")

    def test_mixed_file_versions_in_one_component(self):
        lib = fake_cudnn(os.path.join(self.libs, "libcudnn.so"), 91900)
        ops = build_lib(os.path.join(self.libs, "libcudnn_ops.so"), "libcudnn_ops.so.9", "int ops(void) { return 0; }\n")
        files = versioned_lib(lib, "9.19.0", "libcudnn.so.9") + versioned_lib(ops, "9.18.1", "libcudnn_ops.so.9")
        manifest = make_release(self.mirror, "cudnn", "9.19.0", "cudnn", "9.19.0", files)
        prefix = os.path.join(self.dir, "prefix")
        self.install(manifest, prefix, "--no-check")
        res = self.check(prefix, check=EXIT_CHECK_FAILED)
        self.assertIn("FAIL version: lib/libcudnn_ops.so.9.18.1 is version 9.18.1, but cudnn is 9.19.0: the component "
                      "mixes versions\n", res.stdout)

    def test_shadowing_copy_on_ld_library_path(self):
        prefix = os.path.join(self.dir, "prefix")
        self.install(self.good_cudnn_release(), prefix, "--no-check")
        res = self.check(prefix, check=0)
        self.assertIn("ok   version: cudnnGetVersion() = 91900 (9.19.0): matches cudnn 9.19.0", res.stdout)
        self.assertIn("all checks passed", res.stdout)
        other = os.path.join(self.dir, "other")
        os.makedirs(other)
        fake_cudnn(os.path.join(other, "libcudnn.so.9"), 91002)
        res = self.check(prefix, env={"LD_LIBRARY_PATH": other}, check=EXIT_CHECK_FAILED)
        self.assertIn(f"FAIL shadow: libcudnn.so.9: another copy (version 9.10.2) at {other}/libcudnn.so.9 through "
                      "LD_LIBRARY_PATH; LD_LIBRARY_PATH is searched before DT_RUNPATH, so programs load that copy "
                      "instead of cudnn 9.19.0, and mixing cuDNN sub-libraries of two versions fails with "
                      "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH\n", res.stdout)
        # The same version elsewhere is no problem.
        shutil.rmtree(other)
        os.makedirs(other)
        fake_cudnn(os.path.join(other, "libcudnn.so.9"), 91900)
        self.check(prefix, env={"LD_LIBRARY_PATH": other}, check=0)

    def test_driver_too_old_for_the_cuda_variant(self):
        prefix = os.path.join(self.dir, "prefix")
        manifest = self.good_cudnn_release()
        driver = os.path.join(self.dir, "driver")
        os.makedirs(driver)
        fake_libcuda(os.path.join(driver, "libcuda.so.1"), 12040)
        # Preflight: warned before the download.
        res = self.install(manifest, prefix, "--no-check", env={"LD_LIBRARY_PATH": driver})
        expected = ("the driver supports CUDA 12.4, but cudnn 9.19.0 for CUDA 13 needs driver >= 580.65.06: use "
                    "--cuda 12, or upgrade the driver")
        self.assertIn(f"warning: {expected} (checked before downloading)", res.stderr)
        res = self.check(prefix, env={"LD_LIBRARY_PATH": driver}, check=EXIT_CHECK_FAILED)
        self.assertIn(f"FAIL driver: {expected}\n", res.stdout)
        self.assertIn("supports CUDA 12.4", res.stdout)
        # A driver new enough passes (cuInit's "no device" stays a warning).
        fake_libcuda(os.path.join(driver, "libcuda.so.1"), 13000)
        res = self.check(prefix, env={"LD_LIBRARY_PATH": driver}, check=0)
        self.assertIn("WARN driver: the driver answered, but no GPU is usable: cuInit: CUDA error (100)", res.stdout)
        self.check(prefix, "--strict", env={"LD_LIBRARY_PATH": driver}, check=EXIT_CHECK_FAILED)

    def test_gpu_architecture_from_nvml_without_cuinit(self):
        # NVML (beside libcuda) lists the GPUs without a CUDA context, so both
        # depths judge the architecture, and the fake cuInit ("no device") is
        # never called. With CUDA_VISIBLE_DEVICES set, CUDA is asked instead.
        prefix = os.path.join(self.dir, "prefix")
        self.install(self.good_cudnn_release(), prefix, "--no-check")
        driver = os.path.join(self.dir, "driver")
        os.makedirs(driver)
        fake_libcuda(os.path.join(driver, "libcuda.so.1"), 13000)
        fake_nvml(os.path.join(driver, "libnvidia-ml.so.1"), [(9, 0, "Fake H200"), (6, 1, "Fake Pascal")])
        env = {"LD_LIBRARY_PATH": driver, "CUDA_VISIBLE_DEVICES": None}
        expected = ("FAIL gpu: GPU 1 (Fake Pascal) has compute capability 6.1; cudnn 9.19.0 for CUDA 13 supports 7.5 "
                    "and newer (CUDA 13.0 release notes: Turing (7.5) and newer)\n")
        for depth in ("--quick", "--component=cudnn"):
            res = self.check(prefix, depth, env=env, check=EXIT_CHECK_FAILED)
            self.assertIn(expected, res.stdout)
            self.assertNotIn("GPU 0", res.stdout)
            self.assertNotIn("cuInit", res.stdout)
        # Only supported GPUs: passes, in both depths.
        fake_nvml(os.path.join(driver, "libnvidia-ml.so.1"), [(9, 0, "Fake H200")])
        self.check(prefix, "--quick", env=env, check=0)
        res = self.check(prefix, env=env, check=0)
        self.assertNotIn("no GPU", res.stdout)
        # CUDA_VISIBLE_DEVICES narrows what CUDA sees, which NVML ignores: the full check asks cuInit.
        res = self.check(prefix, env={"LD_LIBRARY_PATH": driver, "CUDA_VISIBLE_DEVICES": "0"}, check=0)
        self.assertIn("WARN driver: the driver answered, but no GPU is usable: cuInit: CUDA error (100)", res.stdout)

    def test_fetch_asks_the_driver_once(self):
        # One child asks the driver while the manifest is read and the archive
        # unpacks; the preflight and the post-install check both use its answer.
        driver = os.path.join(self.dir, "driver")
        os.makedirs(driver)
        log = os.path.join(self.dir, "asked.log")
        fake_libcuda(os.path.join(driver, "libcuda.so.1"), 13000, log)
        fake_nvml(os.path.join(driver, "libnvidia-ml.so.1"), [(9, 0, "Fake H200")])
        env = {"LD_LIBRARY_PATH": driver, "CUDA_VISIBLE_DEVICES": None}
        doc = json.loads(self.install(self.good_cudnn_release(), os.path.join(self.dir, "a"), "--json", env=env).stdout)
        self.assertTrue(doc["check"]["ok"], doc)
        self.assertIn("supports CUDA 13.0", json.dumps(doc["check"]["findings"]))
        self.assertEqual(times_asked(log), 1)
        # --quiet: no preflight; the quick check still gets the answer asked ahead.
        self.install(self.good_cudnn_release(), os.path.join(self.dir, "b"), "--quiet", env=env, check=0)
        self.assertEqual(times_asked(log), 2)
        # What was asked ahead is what the check would have found: a driver
        # too old fails --check, asked once, as `redist check` says afterwards.
        fake_libcuda(os.path.join(driver, "libcuda.so.1"), 12040, log)
        prefix = os.path.join(self.dir, "c")
        res = self.install(self.good_cudnn_release(), prefix, "--quiet", "--check", env=env, check=EXIT_CHECK_FAILED)
        expected = ("FAIL driver: the driver supports CUDA 12.4, but cudnn 9.19.0 for CUDA 13 needs driver >= "
                    "580.65.06: use --cuda 12, or upgrade the driver\n")
        self.assertIn(expected, res.stderr)
        self.assertEqual(times_asked(log), 3)
        self.assertIn(expected, self.check(prefix, env=env, check=EXIT_CHECK_FAILED).stdout)
        self.assertEqual(times_asked(log), 4)  # `redist check` asks for itself
        # --quiet --no-check: nobody reads an answer, so nothing asks.
        self.install(self.good_cudnn_release(), os.path.join(self.dir, "d"), "--quiet", "--no-check", env=env, check=0)
        self.assertEqual(times_asked(log), 4)

    def test_fetch_stops_asking_when_nobody_needs_the_answer(self):
        # A re-run that finds every receipt matching checks nothing: the driver
        # child still asking (here: a driver that hangs) is killed, not waited for.
        driver = os.path.join(self.dir, "driver")
        os.makedirs(driver)
        hang, pid_file = os.path.join(self.dir, "hang"), os.path.join(self.dir, "child.pid")
        build_lib(os.path.join(driver, "libcuda.so.1"), "libcuda.so.1",
                  "#include <stdio.h>\n#include <unistd.h>\n"
                  f"int cuDriverGetVersion(int* v) {{ if (access(\"{hang}\", F_OK) == 0) {{ "
                  f"FILE* f = fopen(\"{pid_file}.part\", \"w\"); if (f) {{ fprintf(f, \"%d\", (int)getpid()); fclose(f); "
                  f"rename(\"{pid_file}.part\", \"{pid_file}\"); }} "
                  "sleep(120); } *v = 13000; return 0; }\n")
        env = {"LD_LIBRARY_PATH": driver, "CUDA_VISIBLE_DEVICES": None}
        prefix = os.path.join(self.dir, "prefix")
        manifest = self.good_cudnn_release()
        self.install(manifest, prefix, "--quiet", env=env, check=0)
        open(hang, "w").close()
        started = time.monotonic()
        self.install(manifest, prefix, "--quiet", env=env, check=0)  # nothing to install, nothing to check
        self.assertLess(time.monotonic() - started, 30)  # waiting would take the child timeout, 60 s
        # The pid file appears whole (written aside, then renamed) or not at all:
        # a child killed between fopen and fclose leaves only the .part file.
        if os.path.exists(pid_file):  # else the child was killed before it wrote its pid
            with open(pid_file) as f:
                self.assertFalse(os.path.exists(f"/proc/{int(f.read())}"), "the driver child outlived the run")

    def test_driver_libraries_in_the_prefix_are_never_loaded(self):
        # An archive that brings lib/libcuda.so.1 and lib/libnvidia-ml.so.1
        # (here: constructors that leave a marker): the check asks the
        # system's driver, at every depth, even with
        # the prefix on LD_LIBRARY_PATH, and never loads the prefix's copies.
        driver = os.path.join(self.dir, "driver")
        os.makedirs(driver)
        log = os.path.join(self.dir, "asked.log")
        fake_libcuda(os.path.join(driver, "libcuda.so.1"), 13000, log)
        fake_nvml(os.path.join(driver, "libnvidia-ml.so.1"), [(9, 0, "Fake H200")])
        marker = os.path.join(self.dir, "prefix-driver-ran")
        bad_cuda = marker_lib(os.path.join(self.libs, "libcuda.so.1"), "libcuda.so.1", marker,
                              body="int cuDriverGetVersion(int* v) { *v = 12040; return 0; }\n")
        bad_nvml = marker_lib(os.path.join(self.libs, "libnvidia-ml.so.1"), "libnvidia-ml.so.1", marker,
                              body="int nvmlInit_v2(void) { return 0; }\n")
        # A library that needs libcuda.so.1 by name: loaded with the system's.
        user = build_lib(os.path.join(self.libs, "libuser.so"), "libuser.so.1", "int cuDriverGetVersion(int*);\n"
                         "int user(void) { int v; return cuDriverGetVersion(&v); }\n", link=[bad_cuda])
        lib = fake_cudnn(os.path.join(self.libs, "libcudnn.so"), 91900)
        manifest = make_release(self.mirror, "cudnn", "9.19.0", "cudnn", "9.19.0",
                                versioned_lib(lib, "9.19.0", "libcudnn.so.9") + versioned_lib(user, "9.19.0", "libuser.so.1")
                                + [("libcuda.so.1", bad_cuda), ("libnvidia-ml.so.1", bad_nvml)])
        prefix = os.path.join(self.dir, "prefix")
        env = {"LD_LIBRARY_PATH": f"{prefix}/lib:{driver}", "CUDA_VISIBLE_DEVICES": None}
        res = self.install(manifest, prefix, env=env, check=0)
        self.assertIn("libraries resolve (quick", res.stdout)
        self.assertEqual(times_asked(log), 1)  # asked once, of the system's driver, and reused
        res = self.install(manifest, prefix, "--force", "--check", env=env, check=0)
        self.assertIn("resolve and load", res.stdout)
        for depth in ("--quick", "--component=cudnn"):
            res = self.check(prefix, depth, env=env, check=0)
            self.assertIn(f"supports CUDA 13.0 ({driver}/libcuda.so.1)", res.stdout)
            self.assertNotIn("Pascal", res.stdout)
        self.assertFalse(os.path.exists(marker), "the check loaded a driver library from the prefix")
        # Without a system driver the library that needs libcuda.so.1 is not loaded at all.
        res = self.check(prefix, env={"LD_LIBRARY_PATH": f"{prefix}/lib"}, check=0)
        self.assertIn("WARN load: lib/libuser.so.9.19.0 is not loaded: it needs libcuda.so.1, and the check never "
                      "loads the driver's libraries from the prefix (the system has none)", res.stdout)
        self.assertFalse(os.path.exists(marker), "the check loaded a driver library from the prefix")

    def test_no_driver_is_a_warning(self):
        prefix = os.path.join(self.dir, "prefix")
        self.install(self.good_cudnn_release(), prefix, "--no-check")
        res = self.check(prefix, check=0)
        if os.path.exists("/proc/driver/nvidia/version"):
            self.skipTest("this machine has an NVIDIA driver")
        self.assertIn("WARN driver: no NVIDIA driver found", res.stdout)

    def test_no_receipts_exits_3(self):
        empty = os.path.join(self.dir, "empty")
        os.makedirs(empty)
        res = self.check(empty, check=EXIT_NOT_FOUND)
        self.assertIn("no redist receipts in this prefix", res.stderr)

    def test_fetch_json_carries_the_findings(self):
        missing = build_lib(os.path.join(self.libs, "libmissing.so.1"), "libmissing.so.1", "int missing(void) { return 1; }\n")
        broken = build_lib(os.path.join(self.libs, "libbroken.so"), "libbroken.so.1",
                           "int missing(void);\nint broken(void) { return missing(); }\n", link=[missing])
        manifest = make_release(self.mirror, "demo", "1.0.0", "demo", "1.0.0", versioned_lib(broken, "1.0.0", "libbroken.so.1"))
        prefix = os.path.join(self.dir, "prefix")
        doc = json.loads(self.install(manifest, prefix, "--json").stdout)
        self.assertFalse(doc["check"]["ok"])
        self.assertEqual(doc["check"]["depth"], "quick")
        self.assertEqual(doc["check"]["loaded"], 0)
        self.assertEqual(doc["check"]["failures"], 1)
        self.assertIn("needs libmissing.so.1: not found", json.dumps(doc["check"]["findings"]))

    def test_post_install_quick_check_keeps_its_findings(self):
        # What the quick post-install check promises (docs/check.md): the
        # version the headers state, shadowing copies and the driver's
        # version, each found by reading files, running nothing installed.
        lib = fake_cudnn(os.path.join(self.libs, "libcudnn.so"), 91900)
        manifest = make_release(self.mirror, "cudnn", "9.22.0", "cudnn", "9.22.0", versioned_lib(lib, "9.22.0", "libcudnn.so.9"),
                                extra=[cudnn_version_h("9.19.0")])
        prefix = os.path.join(self.dir, "prefix")
        res = self.install(manifest, prefix)
        self.assertIn("warning: 1 post-install checks failed, first: version: include/cudnn_version.h says 9.19.0, but "
                      "the receipt says cudnn 9.22.0", res.stderr)
        prefix = os.path.join(self.dir, "good")
        good = make_release(self.mirror, "cudnn", "9.19.0", "cudnn", "9.19.0", versioned_lib(lib, "9.19.0", "libcudnn.so.9"),
                            extra=[cudnn_version_h("9.19.0")])
        res = self.install(good, prefix, "--json")
        doc = json.loads(res.stdout)["check"]
        self.assertTrue(doc["ok"], doc)
        self.assertEqual((doc["depth"], doc["loaded"]), ("quick", 0))
        self.assertIn("include/cudnn_version.h says 9.19.0: matches cudnn 9.19.0", json.dumps(doc["findings"]))
        self.assertNotIn("cudnnGetVersion", json.dumps(doc["findings"]))  # nothing installed was called
        # The same depth through `redist check --quick`; a shadowing copy's
        # version comes from its file name.
        other = os.path.join(self.dir, "other")
        os.makedirs(other)
        fake_cudnn(os.path.join(other, "libcudnn.so.9.10.2"), 91002)
        os.symlink("libcudnn.so.9.10.2", os.path.join(other, "libcudnn.so.9"))
        res = self.check(prefix, "--quick", env={"LD_LIBRARY_PATH": other}, check=EXIT_CHECK_FAILED)
        self.assertIn(f"FAIL shadow: libcudnn.so.9: another copy (version 9.10.2) at {other}/libcudnn.so.9 through "
                      "LD_LIBRARY_PATH", res.stdout)
        self.assertIn("(quick: nothing loaded)", res.stdout)
        driver = os.path.join(self.dir, "driver")
        os.makedirs(driver)
        fake_libcuda(os.path.join(driver, "libcuda.so.1"), 12040)
        res = self.check(prefix, "--quick", env={"LD_LIBRARY_PATH": driver}, check=EXIT_CHECK_FAILED)
        self.assertIn("FAIL driver: the driver supports CUDA 12.4, but cudnn 9.19.0 for CUDA 13 needs driver >= "
                      "580.65.06: use --cuda 12, or upgrade the driver\n", res.stdout)
        # Quick asks the driver its version only: no cuInit, so no "no GPU is usable".
        fake_libcuda(os.path.join(driver, "libcuda.so.1"), 13000)
        res = self.check(prefix, "--quick", env={"LD_LIBRARY_PATH": driver}, check=0)
        self.assertIn("ok   driver: driver (kernel module version unknown) supports CUDA 13.0", res.stdout)
        self.assertNotIn("cuInit", res.stdout)
        # The help says what runs after an install and what --check adds.
        helptext = " ".join(support.run_tool("redist", "fetch", "--help", check=0).stdout.split())
        self.assertIn("Without it a quick check runs and only warns", helptext)
        self.assertIn("Run the full `redist check` after installing", helptext)

    def test_installing_runs_no_installed_code(self):
        # libcudnn.so.9 and libcudart.so.13 whose constructors leave a marker
        # (one at once, one from a forked child a second later): a plain
        # fetch, --quiet, --json and cudnn-fetch read the files and never load them.
        marker = os.path.join(self.dir, "ran")
        cudnn = marker_lib(os.path.join(self.libs, "libcudnn.so"), "libcudnn.so.9", marker,
                           body="#include <stddef.h>\nsize_t cudnnGetVersion(void) { return 91900; }\n")
        cudart = marker_lib(os.path.join(self.libs, "libcudart.so"), "libcudart.so.13", marker, fork_delay=1,
                            body="int cudaRuntimeGetVersion(int* v) { *v = 13000; return 0; }\n")
        manifest = make_release(self.mirror, "cudnn", "9.19.0", "cudnn", "9.19.0",
                                versioned_lib(cudnn, "9.19.0", "libcudnn.so.9") +
                                versioned_lib(cudart, "9.19.0", "libcudart.so.13"), extra=[cudnn_version_h("9.19.0")])
        for i, extra in enumerate([(), ("--quiet",), ("--json",)]):
            self.install(manifest, os.path.join(self.dir, f"p{i}"), *extra, check=0)
        self.install(manifest, os.path.join(self.dir, "p3"), tool="cudnn-fetch", check=0)
        time.sleep(2)  # the forked child's delay, had anything run it
        self.assertFalse(os.path.exists(marker), "installing ran a constructor from the archive")
        # `redist check` (and fetch --check) load them, as their help says.
        helptext = " ".join(support.run_tool("redist", "check", "--help", check=0).stdout.split())
        self.assertIn("runs code from the installed libraries", helptext)
        self.check(os.path.join(self.dir, "p0"), check=None)
        self.assertTrue(os.path.exists(marker))

    def test_check_timeout_kills_the_whole_process_group(self):
        # A constructor that forks a child (which writes a marker 3 s later)
        # and then hangs: at the timeout the loader's whole process group is
        # killed, the grandchild with it.
        marker = os.path.join(self.dir, "grandchild-ran")
        pid_file = os.path.join(self.dir, "grandchild.pid")
        hang = build_lib(os.path.join(self.libs, "libhang.so"), "libhang.so.1",
                         "#include <stdio.h>\n#include <unistd.h>\n"
                         "__attribute__((constructor)) static void ran(void) {\n"
                         "  pid_t c = fork();\n"
                         f'  if (c == 0) {{ sleep(3); FILE* f = fopen("{marker}", "w"); if (f) fclose(f); _exit(0); }}\n'
                         f'  FILE* f = fopen("{pid_file}", "w"); if (f) {{ fprintf(f, "%d", (int)c); fclose(f); }}\n'
                         "  sleep(120);\n}\n")
        manifest = make_release(self.mirror, "demo", "1.0.0", "demo", "1.0.0", versioned_lib(hang, "1.0.0", "libhang.so.1"))
        prefix = os.path.join(self.dir, "prefix")
        self.install(manifest, prefix, check=0)  # nothing loaded: no hang, no fork
        self.assertFalse(os.path.exists(pid_file))
        started = time.monotonic()
        res = self.check(prefix, "--timeout", "1", check=EXIT_CHECK_FAILED)
        self.assertLess(time.monotonic() - started, 30)
        self.assertIn("FAIL load: dlopen(lib/libhang.so.1.0.0): the check process timed out and was killed", res.stdout)
        with open(pid_file) as f:
            grandchild = int(f.read())
        time.sleep(4)
        self.assertFalse(os.path.exists(marker), "the check left a process of the library behind")
        self.assertFalse(os.path.exists(f"/proc/{grandchild}/cmdline") and
                         open(f"/proc/{grandchild}/cmdline").read() != "", "the grandchild is still running")

    def test_runpath_naming_a_fifo_does_not_hang_the_check(self):
        # RUNPATH points at a directory where the needed library's name is a
        # FIFO: a blocking open would wait for a writer forever.
        fifo_dir = os.path.join(self.dir, "fifo")
        os.makedirs(fifo_dir)
        dep = build_lib(os.path.join(self.libs, "libdep.so.1"), "libdep.so.1", "int dep(void) { return 0; }\n")
        user = build_lib(os.path.join(self.libs, "libuser.so"), "libuser.so.1",
                         "int dep(void);\nint user(void) { return dep(); }\n",
                         link=[dep, f"-Wl,-rpath,{fifo_dir}", "-Wl,--enable-new-dtags"])
        os.mkfifo(os.path.join(fifo_dir, "libdep.so.1"))
        manifest = make_release(self.mirror, "demo", "1.0.0", "demo", "1.0.0", versioned_lib(user, "1.0.0", "libuser.so.1"))
        prefix = os.path.join(self.dir, "prefix")
        res = support.run_tool("redist", "fetch", "--manifest", manifest, "--prefix", prefix, "--platform",
                               "linux-x86_64", "--cuda", "13", "--no-cache", env=env_without_loader_path(), check=0,
                               timeout=60)
        self.assertIn("warning: 1 post-install checks failed, first: resolve: lib/libuser.so.1.0.0 needs libdep.so.1: "
                      "not found", res.stderr)
        res = support.run_tool("redist", "check", "--quick", "--prefix", prefix, env=env_without_loader_path(),
                               check=EXIT_CHECK_FAILED, timeout=60)
        self.assertIn("FAIL resolve: lib/libuser.so.1.0.0 needs libdep.so.1: not found", res.stdout)

    def test_symbol_version_missing_from_an_older_dependency(self):
        # Built against a libdep that defines DEP_2.0; the machine has an older
        # one with DEP_1.0 only: ld.so says "version `DEP_2.0' not found". The
        # quick check finds it from the version sections, without loading.
        def dep(where, versions):
            os.makedirs(where, exist_ok=True)
            script = os.path.join(where, "dep.map")
            with open(script, "w") as f:
                f.write("".join(f"{v} {{ global: dep_{v.replace('.', '_')}; }};\n" for v in versions))
            src = "".join(f"int dep_{v.replace('.', '_')}(void) {{ return 0; }}\n" for v in versions)
            return build_lib(os.path.join(where, "libdep.so.1"), "libdep.so.1", src, link=[f"-Wl,--version-script={script}"])
        new_dep = dep(os.path.join(self.dir, "new"), ["DEP_1.0", "DEP_2.0"])
        user = build_lib(os.path.join(self.libs, "libuser.so"), "libuser.so.1",
                         "int dep_DEP_2_0(void);\nint user(void) { return dep_DEP_2_0(); }\n", link=[new_dep])
        old = os.path.dirname(dep(os.path.join(self.dir, "old"), ["DEP_1.0"]))
        manifest = make_release(self.mirror, "demo", "1.0.0", "demo", "1.0.0", versioned_lib(user, "1.0.0", "libuser.so.1"))
        prefix = os.path.join(self.dir, "prefix")
        res = self.install(manifest, prefix, env={"LD_LIBRARY_PATH": old})
        expected = (f"lib/libuser.so.1.0.0 needs version DEP_2.0 of libdep.so.1, which {old}/libdep.so.1 does not "
                    "define: it is older than the one the library was built against")
        self.assertIn(f"warning: 1 post-install checks failed, first: resolve: {expected}", res.stderr)
        res = self.check(prefix, env={"LD_LIBRARY_PATH": old}, check=EXIT_CHECK_FAILED)
        self.assertIn(f"FAIL resolve: {expected}\n", res.stdout)
        self.assertIn("version `DEP_2.0' not found", res.stdout)  # the load agrees (dlerror verbatim)
        self.check(prefix, "--quick", env={"LD_LIBRARY_PATH": os.path.dirname(new_dep)}, check=0)

    def test_quick_check_does_not_load_what_it_does_not_probe(self):
        # The documented limit of the quick depth: a library that fails only
        # when loaded (here: its constructor aborts) passes the post-install
        # check; the full check (redist check, fetch --check) catches it.
        lib = build_lib(os.path.join(self.libs, "libboom.so"), "libboom.so.1",
                        "#include <stdlib.h>\n__attribute__((constructor)) static void boom(void) { abort(); }\n")
        manifest = make_release(self.mirror, "demo", "1.0.0", "demo", "1.0.0", versioned_lib(lib, "1.0.0", "libboom.so.1"))
        prefix = os.path.join(self.dir, "prefix")
        res = self.install(manifest, prefix, check=0)
        self.assertIn("checked: 1 libraries resolve (quick", res.stdout)
        res = self.check(prefix, check=EXIT_CHECK_FAILED)
        self.assertIn("FAIL load: dlopen(lib/libboom.so.1.0.0): the check process was killed by signal 6", res.stdout)
        self.install(manifest, prefix, "--force", "--check", check=EXIT_CHECK_FAILED)

    @unittest.skipUnless(shutil.which("cmake"), "cmake not installed")
    def test_redist_fetch_check_fails_the_configure(self):
        missing = build_lib(os.path.join(self.libs, "libmissing.so.1"), "libmissing.so.1", "int missing(void) { return 1; }\n")
        broken = build_lib(os.path.join(self.libs, "libbroken.so"), "libbroken.so.1",
                           "int missing(void);\nint broken(void) { return missing(); }\n", link=[missing])
        manifest = make_release(self.mirror, "demo", "1.0.0", "demo", "1.0.0", versioned_lib(broken, "1.0.0", "libbroken.so.1"))
        project = os.path.join(self.dir, "project")
        os.makedirs(project)
        module = os.path.join(support.source_dir(), "cmake", "RedistFetch.cmake")

        def configure(check):
            with open(os.path.join(project, "CMakeLists.txt"), "w") as f:
                f.write("cmake_minimum_required(VERSION 3.24)\nproject(p LANGUAGES NONE)\n"
                        f'set(REDIST_EXECUTABLE "{support.tool_path("redist")}")\ninclude("{module}")\n'
                        f'redist_fetch(demo MANIFEST "{manifest}" CUDA 13 PLATFORM linux-x86_64 {check})\n')
            build = os.path.join(self.dir, "build-" + (check or "plain"))
            return subprocess.run(["cmake", "-S", project, "-B", build], env=support.tool_env(env_without_loader_path()),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)

        res = configure("")
        self.assertEqual(res.returncode, 0, res.stderr)  # a warning only
        res = configure("CHECK")
        self.assertNotEqual(res.returncode, 0, res.stdout)
        flat = " ".join(res.stderr.split())  # CMake wraps messages
        self.assertIn("redist_fetch(demo): FAIL resolve: lib/libbroken.so.1.0.0 needs libmissing.so.1: not found", flat)
        self.assertIn("exit code: 11", res.stderr)

    def test_hostile_names_are_escaped(self):
        lib = build_lib(os.path.join(self.libs, "libx.so"), "libx.so.1",
                        "int needs(void);\nint x(void) { return needs(); }\n",
                        link=[build_lib(os.path.join(self.libs, "libesc.so.1"), "libesc\x1b[31m.so.1", "int needs(void) { return 0; }\n")])
        manifest = make_release(self.mirror, "demo", "1.0.0", "demo", "1.0.0", versioned_lib(lib, "1.0.0", "libx.so.1"))
        prefix = os.path.join(self.dir, "prefix")
        self.install(manifest, prefix, "--no-check")
        res = self.check(prefix, check=EXIT_CHECK_FAILED)
        self.assertNotIn("\x1b", res.stdout)
        self.assertIn("needs libesc\\x1b[31m.so.1: not found", res.stdout)


REAL_CUDNN = sorted(glob.glob("/usr/local/cuda/lib64/libcudnn*.so.9"))


@unittest.skipUnless(REAL_CUDNN, "no cuDNN under /usr/local/cuda/lib64")
class RealCudnn(unittest.TestCase):
    def test_real_cudnn_passes_the_cpu_checks(self):
        work = support.make_scratch_dir(self.id())
        version = "9.19.0"
        mirror = os.path.join(work, "mirror")
        files = []
        for lib in REAL_CUDNN:
            stem = os.path.basename(lib)[: -len(".so.9")]
            files += [(f"{stem}.so.{version}", lib), (f"{stem}.so.9", ("symlink", f"{stem}.so.{version}")),
                      (f"{stem}.so", ("symlink", f"{stem}.so.9"))]
        # gzip -1: packing 470 MB with xz would take minutes.
        manifest = make_release(mirror, "cudnn", version, "cudnn", version + ".1", files, compress="gz")
        prefix = os.path.join(work, "prefix")
        res = support.run_tool("cudnn-fetch", "--manifest", manifest, "--prefix", prefix, "--platform", "linux-x86_64",
                               "--cuda", "13", "--no-cache", "--check", env={"LD_LIBRARY_PATH": None}, check=0,
                               timeout=600)
        self.assertIn("checked: 8 libraries resolve and load", res.stdout)
        res = support.run_tool("redist", "check", "--prefix", prefix, env={"LD_LIBRARY_PATH": None}, check=0)
        self.assertIn("ok   version: cudnnGetVersion() = 91900 (9.19.0): matches cudnn 9.19.0.1", res.stdout)
        self.assertIn("8 libraries (8 loaded): 0 failed", res.stdout)
        # The post-install depth on the same tree: nothing is loaded.
        res = support.run_tool("redist", "check", "--quick", "--json", "--prefix", prefix,
                               env={"LD_LIBRARY_PATH": None}, check=0)
        doc = json.loads(res.stdout)
        self.assertTrue(doc["ok"], doc)
        self.assertEqual((doc["depth"], doc["libraries"], doc["loaded"]), ("quick", 8, 0))
        self.assertNotIn("cudnnGetVersion", json.dumps(doc["findings"]))
        # The GPU code in its fatbins: an H200 (9.0) has code in every library, a V100 (7.0) only in
        # the precompiled engines (cuDNN 9.11+ dropped pre-Turing GPUs), and the finding names the release
        # and variant that has code for it.
        res = support.run_tool("redist", "check", "--quick", "--json", "--prefix", prefix, "--compute-capability",
                               "9.0", env={"LD_LIBRARY_PATH": None}, check=0)
        code = [f for f in json.loads(res.stdout)["findings"] if f["check"] == "gpu-code"]
        self.assertEqual(len(code), 5)  # libcudnn.so.9 and libcudnn_heuristic.so.9 have no fatbin
        self.assertEqual({f["severity"] for f in code}, {"info"})
        res = support.run_tool("redist", "check", "--quick", "--json", "--prefix", prefix, "--compute-capability",
                               "sm_70", env={"LD_LIBRARY_PATH": None}, check=EXIT_CHECK_FAILED)
        failed = [f for f in json.loads(res.stdout)["findings"] if f["check"] == "gpu-code" and f["severity"] == "failure"]
        self.assertIn("lib/libcudnn_ops.so.9.19.0", [f["path"] for f in failed])
        self.assertNotIn("lib/libcudnn_engines_precompiled.so.9.19.0", [f["path"] for f in failed])
        for f in failed:
            self.assertIn("has no code for GPU 0 (target, compute capability 7.0)", f["message"])
            self.assertIn("cudnn 9.10 for CUDA 12 supports compute capability 7.0", f["message"])
            self.assertIn("redist fetch cudnn 9.10 --cuda 12 --prefix", f["message"])


NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None)
KERNEL = "__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n" \
         "extern \"C\" void launch(float* x) { twice<<<1, 32>>>(x); }\n"


@unittest.skipUnless(NVCC, "no nvcc (CUDA toolkit)")
class GpuCode(unittest.TestCase):
    """Real nvcc output: a library built for sm_80 alone has no code for a 9.0 GPU."""

    def build(self, out, soname, *gencode):
        src = os.path.join(self.dir, "k.cu")
        with open(src, "w") as f:
            f.write(KERNEL)
        args = [NVCC, "-shared", "-Xcompiler", "-fPIC", "-o", out, src, f"-Xlinker=-soname={soname}"]
        for g in gencode:
            args += ["-gencode", g]
        subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return out

    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())

    def test_a_library_without_code_for_the_gpu_is_reported(self):
        k80 = self.build(os.path.join(self.dir, "libk80.so"), "libk80.so.1", "arch=compute_80,code=sm_80")
        k90 = self.build(os.path.join(self.dir, "libk90.so"), "libk90.so.1", "arch=compute_80,code=sm_80",
                         "arch=compute_90a,code=sm_90a", "arch=compute_90,code=compute_90")
        mirror = os.path.join(self.dir, "mirror")
        manifest = make_release(mirror, "demo", "1.0.0", "libk", "1.0.0",
                                [("libk80.so.1.0.0", k80), ("libk90.so.1.0.0", k90)], variant="cuda13")
        prefix = os.path.join(self.dir, "prefix")
        support.run_tool("redist", "fetch", "--manifest", manifest, "--prefix", prefix, "--platform", "linux-x86_64",
                         "--cuda", "13", "--no-cache", "--no-check", env={"LD_LIBRARY_PATH": None}, check=0)

        def check(*cc, code=None):
            return support.run_tool("redist", "check", "--quick", "--prefix", prefix, "--compute-capability", *cc,
                                    env={"LD_LIBRARY_PATH": None}, check=code)

        res = check("9.0", code=EXIT_CHECK_FAILED)
        self.assertIn("FAIL gpu-code: lib/libk80.so.1.0.0 has no code for GPU 0 (target, compute capability 9.0): "
                      "it carries SASS sm_80 and no PTX; running there takes SASS sm_90 (or sm_90a) or PTX compute_90 "
                      "or older, else its kernels fail with \"no kernel image is available for execution on the "
                      "device\"", res.stdout)
        self.assertIn("ok   gpu-code: lib/libk90.so.1.0.0: code for GPU 0 (target, compute capability 9.0): SASS "
                      "sm_90a (carries SASS sm_80, sm_90a; PTX compute_90)", res.stdout)
        # An Ada (8.9) runs the sm_80 SASS; a Blackwell (10.0) only the PTX, compiled by the driver.
        res = check("8.9,10.0", code=EXIT_CHECK_FAILED)
        self.assertIn("ok   gpu-code: lib/libk80.so.1.0.0: code for GPU 0 (target, compute capability 8.9): SASS sm_80",
                      res.stdout)
        self.assertIn("FAIL gpu-code: lib/libk80.so.1.0.0 has no code for GPU 1 (target, compute capability 10.0)",
                      res.stdout)
        self.assertIn("ok   gpu-code: lib/libk90.so.1.0.0: code for GPU 1 (target, compute capability 10.0): PTX "
                      "compute_90, compiled by the driver at first use", res.stdout)
        check("8.0", code=0)
        res = check("nine", code=2)
        self.assertIn("--compute-capability takes X.Y (9.0) or sm_XY (sm_90), not 'nine'", res.stderr)


if __name__ == "__main__":
    unittest.main()
