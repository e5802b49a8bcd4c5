"""The GitHub Action (action.yml) through the scripts its steps run
(scripts/action/install.sh, run.sh), against the runner's file protocol:
$GITHUB_PATH, $GITHUB_ENV and $GITHUB_OUTPUT are files the steps append to.
A redist on PATH is used as it is; otherwise the bundle is downloaded, its
SHA-256 checked against its .sha256 (a mismatch: exit 5, nothing on PATH),
and its bin/ put on PATH. The run step syncs the project's lock exactly
(`sync --locked`: a stale lock fails and exports nothing) or runs the given
fetch, then exports the prefix's environment. action.yml wires exactly these
steps and outputs, and keys the cache on the lock's hash."""

import hashlib
import os
import re
import subprocess
import tarfile
import unittest

import support

PLATFORM = "linux-x86_64"
LABEL = "9.27.0"


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


class ActionYml(unittest.TestCase):
    def test_the_steps_are_the_tested_scripts_and_the_cache_follows_the_lock(self):
        text = read(os.path.join(support.source_dir(), "action.yml"))
        self.assertIn('run: bash "$GITHUB_ACTION_PATH/scripts/action/install.sh"', text)
        self.assertIn('run: bash "$GITHUB_ACTION_PATH/scripts/action/run.sh"', text)
        self.assertIn("uses: actions/cache@v4", text)
        self.assertIn("path: ${{ steps.install.outputs.cache-dir }}", text)
        self.assertIn("hashFiles(format('{0}/{1}', inputs.working-directory, inputs.lock-file))", text)
        # Every step output the action reads is one the scripts write.
        written = {"install": set(), "run": set()}
        for step in written:
            script = read(os.path.join(support.source_dir(), "scripts", "action", step + ".sh"))
            written[step] = set(re.findall(r'echo "([a-z-]+)=', script))
        for step, name in re.findall(r"steps\.(install|run)\.outputs\.([a-z-]+)", text):
            self.assertIn(name, written[step], f"steps.{step}.outputs.{name}")
        # Every input the scripts read is passed by the action.
        for step in written:
            script = read(os.path.join(support.source_dir(), "scripts", "action", step + ".sh"))
            for name in set(re.findall(r"\$\{(INPUT_[A-Z_]+)", script)):
                self.assertIn(f"{name}: ${{{{ inputs.", text, name)


class ActionSteps(unittest.TestCase):
    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.runner_temp = os.path.join(self.scratch, "runner-temp")
        os.makedirs(self.runner_temp)
        self.files = {}
        for name in ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT"):
            self.files[name] = os.path.join(self.scratch, name.lower())
            open(self.files[name], "w").close()
        self.cache = os.path.join(self.scratch, "cache")

    def step(self, script, env=None, cwd=None, with_redist_on_path=True):
        system_path = "/usr/local/bin:/usr/bin:/bin"
        for d in system_path.split(":"):
            if os.path.exists(os.path.join(d, "redist")):
                self.skipTest(f"a redist in {d} would be found on PATH")
        path = (support.bin_dir() + ":" if with_redist_on_path else "") + system_path
        full = support.tool_env(dict(self.files, RUNNER_TEMP=self.runner_temp, PATH=path,
                                     XDG_CACHE_HOME=self.cache, REDIST_MIRRORS=None, REDIST_BASE_URL=None,
                                     REDIST_CACHE_DIR=None, **(env or {})))
        return subprocess.run(["bash", os.path.join(support.source_dir(), "scripts", "action", script)],
                              env=full, cwd=cwd or self.scratch, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=300)

    def written(self, name):
        return read(self.files[name])

    def outputs(self):
        return dict(line.split("=", 1) for line in self.written("GITHUB_OUTPUT").splitlines())

    def assert_ok(self, res):
        self.assertEqual(res.returncode, 0, f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}")

    # ---- install.sh

    def test_a_redist_on_path_is_used_as_it_is(self):
        res = self.step("install.sh")
        self.assert_ok(res)
        self.assertEqual(self.written("GITHUB_PATH"), "")
        version = support.run_tool("redist", "--version", check=0).stdout.split()[-1]
        self.assertEqual(self.outputs(), {"redist": support.tool_path("redist"), "version": version,
                                          "cache-dir": os.path.join(self.cache, "redist")})

    def make_bundle(self, version="0.1.0"):
        """A bundle as package.sh lays it out, whose bin/redist runs the tool under test."""
        name = f"redist-{version}-linux-x86_64"
        top = os.path.join(self.scratch, "bundle", name)
        os.makedirs(os.path.join(top, "bin"))
        stub = os.path.join(top, "bin", "redist")
        with open(stub, "w") as f:
            f.write(f'#!/bin/sh\nexec "{support.tool_path("redist")}" "$@"\n')
        os.chmod(stub, 0o755)
        archive = os.path.join(self.scratch, "dist", name + ".tar.xz")
        os.makedirs(os.path.dirname(archive))
        with tarfile.open(archive, "w:xz") as tar:
            tar.add(top, arcname=name)
        with open(archive, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with open(archive + ".sha256", "w") as f:
            f.write(f"{digest}  {name}.tar.xz\n")
        return archive

    def test_the_bundle_is_checked_unpacked_and_put_on_path(self):
        archive = self.make_bundle()
        res = self.step("install.sh", {"INPUT_VERSION": "0.1.0", "INPUT_BUNDLE_URL": "file://" + archive},
                        with_redist_on_path=False)
        self.assert_ok(res)
        bin_dir = os.path.join(self.runner_temp, "redist-0.1.0", "bin")
        self.assertEqual(self.written("GITHUB_PATH"), bin_dir + "\n")
        out = self.outputs()
        self.assertEqual(out["redist"], os.path.join(bin_dir, "redist"))
        self.assertEqual(out["cache-dir"], os.path.join(self.cache, "redist"))
        # Nothing of the download is left in the runner's temp directory but the tree.
        self.assertEqual(os.listdir(self.runner_temp), ["redist-0.1.0"])

    def test_the_default_url_is_the_tags_github_release(self):
        # No bundle-url, no version input: the tag's version, from
        # $GITHUB_SERVER_URL/<action repository>/releases/download/v<version>/,
        # following GitHub's redirect to where the asset is stored (here a
        # loopback server standing in for github.com).
        archive = self.make_bundle()
        name = os.path.basename(archive)
        root = os.path.join(self.scratch, "server")
        assets = os.path.join(root, "storage")
        os.makedirs(assets)
        for f in (name, name + ".sha256"):
            os.rename(os.path.join(os.path.dirname(archive), f), os.path.join(assets, f))
        server = support.FaultServer(root, os.path.join(self.scratch, "fault"))
        self.addCleanup(server.stop)
        release = "/acme/redist/releases/download/v0.1.0/"
        server.set_faults({release + f: {"status": 302, "location": "/storage/" + f} for f in (name, name + ".sha256")})
        res = self.step("install.sh", {"GITHUB_SERVER_URL": f"http://127.0.0.1:{server.port}",
                                       "GITHUB_ACTION_REPOSITORY": "acme/redist", "GITHUB_ACTION_REF": "v0.1.0"},
                        with_redist_on_path=False)
        self.assert_ok(res)
        self.assertIn(f"downloading http://127.0.0.1:{server.port}{release}{name}", res.stderr + res.stdout)
        self.assertEqual(self.outputs()["version"], "0.1.0")
        self.assertEqual(self.written("GITHUB_PATH"), os.path.join(self.runner_temp, "redist-0.1.0", "bin") + "\n")
        self.assertEqual([e["path"] for e in server.log()],
                         [release + name, "/storage/" + name, release + name + ".sha256", "/storage/" + name + ".sha256"])

    def test_a_bundle_that_does_not_match_its_sha256_is_refused(self):
        archive = self.make_bundle()
        with open(archive + ".sha256", "w") as f:
            f.write("0" * 64 + "  redist-0.1.0-linux-x86_64.tar.xz\n")
        res = self.step("install.sh", {"INPUT_VERSION": "0.1.0", "INPUT_BUNDLE_URL": "file://" + archive},
                        with_redist_on_path=False)
        self.assertEqual(res.returncode, 5, res.stderr)
        self.assertIn("does not match its .sha256", res.stderr)
        self.assertEqual(self.written("GITHUB_PATH"), "")
        self.assertEqual(self.written("GITHUB_OUTPUT"), "")
        self.assertEqual(os.listdir(self.runner_temp), [])
        # No version anywhere: a usage error, not a guess.
        res = self.step("install.sh", {"GITHUB_ACTION_REF": ""}, with_redist_on_path=False)
        self.assertEqual(res.returncode, 2, res.stderr)

    # ---- run.sh

    def make_project(self):
        project = os.path.join(self.scratch, "project")
        os.makedirs(project)
        with open(os.path.join(project, "redist.toml"), "w") as f:
            f.write(f'[project]\nprefix = "prefix"\nplatforms = ["{PLATFORM}"]\ncuda = "12"\n'
                    f'base-url = "{support.nginx_base_url()}"\n\n'
                    f'[products.cudnn]\nversion = "{LABEL}"\ncomponents = ["cudnn"]\n')
        support.run_tool("redist", "lock", cwd=project, env={"XDG_CACHE_HOME": self.cache}, check=0)
        return project

    def test_sync_installs_the_lock_and_exports_the_prefix(self):
        project = self.make_project()
        prefix = os.path.join(project, "prefix")
        res = self.step("run.sh", {"INPUT_LOCK_FILE": "redist.lock", "REDIST": support.tool_path("redist")},
                        cwd=project)
        self.assert_ok(res)
        self.assertIn(f"CUDNN_ROOT={prefix}\n", self.written("GITHUB_ENV"))
        self.assertIn(f"CPATH={prefix}/include", self.written("GITHUB_ENV"))
        self.assertEqual(self.outputs(), {"prefix": prefix})
        support.run_tool("redist", "verify", "--prefix", prefix, check=0)

    def test_a_stale_lock_fails_and_exports_nothing(self):
        project = self.make_project()
        toml = os.path.join(project, "redist.toml")
        with open(toml, "a") as f:
            f.write('\n[products.cuda]\nversion = "12.9.1"\ncomponents = ["cuda_cudart"]\n')
        res = self.step("run.sh", {"REDIST": support.tool_path("redist")}, cwd=project)
        self.assertNotEqual(res.returncode, 0, res.stderr)
        self.assertEqual(self.written("GITHUB_ENV"), "")
        self.assertEqual(self.written("GITHUB_OUTPUT"), "")
        self.assertFalse(os.path.exists(os.path.join(project, "prefix")))

    def test_fetch_arguments_install_into_their_prefix(self):
        prefix = os.path.join(self.scratch, "opt", "cudnn")
        fetch = (f"cudnn {LABEL} --platform {PLATFORM} --cuda 12 --component cudnn "
                 f"--base-url {support.file_base_url()} --no-cache --prefix=")
        res = self.step("run.sh", {"INPUT_FETCH": fetch + prefix})
        self.assert_ok(res)
        self.assertIn(f"CUDNN_ROOT={prefix}\n", self.written("GITHUB_ENV"))
        self.assertEqual(self.outputs(), {"prefix": prefix})
        res = self.step("run.sh", {"INPUT_FETCH": f"cudnn {LABEL}"})
        self.assertEqual(res.returncode, 2, res.stderr)
        self.assertIn("needs --prefix", res.stderr)


if __name__ == "__main__":
    unittest.main()
