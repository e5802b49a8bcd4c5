"""What the tools say, through the real tools: progress sized to the terminal
(a few bars and a total, nothing wider than the terminal), a compact summary,
a line on Ctrl-C (exit 130, prefix unchanged) and on resume, `remove` of a
name that is not installed, `--link-mode reflink` where blocks cannot be
shared, and a cache that cannot be used."""

import json
import os
import re
import signal
import subprocess
import time
import unittest

import support

LABEL = "9.27.0"
PLATFORM = "linux-x86_64"
CUDA = "12"
CLEAN_ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None}
ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
EXIT_NOT_FOUND = 3
EXIT_FILESYSTEM = 10
EXIT_INTERRUPTED = 130


def frames(out):
    """The redrawn lines of a live display: [[visible line, ...] per redraw]."""
    found = []
    for chunk in re.split(r"\r\x1b\[\d+A", out):
        # (the pty turns "\n" into "\r\n"; a "\r" inside a line returns to its start)
        lines = [ESCAPE.sub("", line.rstrip("\r")).split("\r")[-1] for line in chunk.split("\n") if "\x1b[2K" in line]
        if lines:
            found.append(lines)
    return found


class CudaFromFaultServer(unittest.TestCase):
    """Every CUDA component for linux-x86_64, each held back for a moment
    after its first bytes by tests/fixtures/fault_server.py, so that many
    downloads are in flight at once."""

    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        root = os.path.join(cls.dir, "root")
        support.copy_mirror(os.path.join(root, "base"), products=["cuda"])
        cls.server = support.FaultServer(root, os.path.join(cls.dir, "server"))
        cls.base = cls.server.url("/base")
        manifest = support.load_manifest("cuda", "12.9.1")
        faults = {}
        for _comp, platform, _variant, rec in support.iter_artifacts(manifest):
            if platform == PLATFORM and int(rec["size"]) > 2048:
                faults["/base/cuda/redist/" + rec["relative_path"]] = {"stall_after": 2048, "stall_seconds": 1.5}
        cls.held = len(faults)
        cls.server.set_faults(faults)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def fetch_on_pty(self, columns):
        prefix = os.path.join(support.make_scratch_dir(self.id()), "prefix")
        return support.run_in_pty("redist", "fetch", "cuda", "12.9.1", "--base-url", self.base, "--prefix", prefix,
                                  "--platform", PLATFORM, "--no-cache", "--no-check", "-j", "16",
                                  columns=columns, env=CLEAN_ENV, timeout=120)

    def test_bars_fit_the_terminal_and_are_capped(self):
        self.assertGreater(self.held, 6, "the release must have more components than bars")
        for columns in (80, 40):
            res = self.fetch_on_pty(columns)
            self.assertEqual(res.returncode, 0, res.stderr)
            out = res.stdout
            drawn = frames(out)
            self.assertTrue(drawn, out)
            for frame in drawn:
                for line in frame:
                    self.assertLess(len(line), columns, f"{line!r} is wider than {columns} columns")
                bars = [line for line in frame if not line.startswith(("total", "committing"))]
                self.assertLessEqual(len(bars), 6, frame)
            # More downloads than bars: six bars, and the total says how many more.
            self.assertTrue(any(len(f) == 7 and f[-1].startswith("total") for f in drawn), drawn)
            if columns == 80:
                self.assertTrue(any(re.search(r"^total +\[[#-]+\] +\d+% .* of .* ETA .*\d+ more", f[-1])
                                    for f in drawn), drawn)
            # The commit is a line of its own, not bars at 0%.
            self.assertTrue(any(f == [f"committing {self.held} components"] or
                                re.fullmatch(r"committing \d+ components?", f[0]) for f in drawn), drawn)
            # The live lines are cleared at the end; the summary is a short table without URLs.
            summary = out[out.rindex("\x1b[J"):].replace("\r\n", "\n")  # the pty writes "\r\n"
            self.assertRegex(summary, r"installed cuda 12\.9\.1 into \S+: \d+ components, ")
            self.assertRegex(summary, r"(?m)^  cuda_nvcc +12\.9\.86 \(new\) +\S+ \S+ +\d+ files$")
            self.assertNotIn("http://", summary)


class Interrupt(unittest.TestCase):
    """Ctrl-C during a download: one line, exit 130, the prefix as it was,
    the bytes kept in the cache; the next run resumes and says so."""

    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        root = os.path.join(cls.dir, "root")
        support.copy_mirror(os.path.join(root, "base"), products=["cudnn"])
        cls.server = support.FaultServer(root, os.path.join(cls.dir, "server"))
        cls.base = cls.server.url("/base")
        rec = support.find_artifact(support.load_manifest("cudnn", LABEL), "cudnn", PLATFORM, "cuda" + CUDA)
        cls.art = "/base/cudnn/redist/" + rec["relative_path"]
        cls.size = int(rec["size"])
        cls.sha256 = rec["sha256"]

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.prefix = os.path.join(self.scratch, "prefix")
        self.cache = os.path.join(self.scratch, "cache")
        self.server.set_faults({})
        self.server.reset()

    def args(self, label=LABEL):
        return [label, "--cuda", CUDA, "--platform", PLATFORM, "--prefix", self.prefix, "--base-url", self.base,
                "--cache-dir", self.cache, "--connections", "1", "--no-check"]

    def test_interrupt_leaves_the_prefix_and_the_next_run_resumes(self):
        support.run_tool("cudnn-fetch", *self.args("9.8.0"), "--quiet", env=CLEAN_ENV, check=0)
        before = support.tree_snapshot(self.prefix, ignore=r"^\.redist/lock$")
        n = self.size // 3
        self.server.set_faults({self.art: {"stall_after": n, "stall_seconds": 60}})
        self.server.reset()
        part = os.path.join(self.cache, "blobs", "sha256", self.sha256 + ".part")
        tool = support.BackgroundTool("cudnn-fetch", *self.args(), env=CLEAN_ENV)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and tool.proc.poll() is None:
                if os.path.exists(part) and os.path.getsize(part) >= n:
                    break
                time.sleep(0.02)
            self.assertTrue(os.path.exists(part) and os.path.getsize(part) >= n, tool.stderr)
            tool.proc.send_signal(signal.SIGINT)
            res = tool.wait(timeout=30)  # well before the 60 s stall ends
        finally:
            tool.kill()
        self.assertEqual(res.returncode, EXIT_INTERRUPTED, support.describe(res))
        lines = [line for line in res.stderr.splitlines() if "interrupted" in line]
        self.assertEqual(len(lines), 1, support.describe(res))
        self.assertRegex(lines[0], r"^cudnn-fetch: interrupted: the prefix is unchanged; \S+ \S+ of \S+ \S+ "
                                   r"downloaded stay in the cache, run the same command to resume$")
        self.assertEqual(support.tree_snapshot(self.prefix, ignore=r"^\.redist/lock$"), before)
        self.assertGreaterEqual(os.path.getsize(part), n)

        # The next run goes on from the .part, and says so.
        self.server.set_faults({})
        self.server.reset()
        res = support.run_tool("cudnn-fetch", *self.args(), env=CLEAN_ENV, check=0)
        self.assertRegex(res.stderr, r"(?m)^cudnn-fetch: resuming cudnn at \S+ \S+ of \S+ \S+$")
        log = self.server.log(self.art)
        self.assertEqual(len(log), 1, log)
        self.assertRegex(log[0]["range"] or "", r"^bytes=[1-9]\d*-")
        self.assertRegex(res.stdout, r"(?m)^installed cudnn 9\.27\.0 into ")


class Names(unittest.TestCase):
    """remove of a product or component that is not installed; reflink where
    it cannot work; a cache that cannot be created."""

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.prefix = os.path.join(self.scratch, "prefix")
        self.base = support.nginx_base_url()

    def fetch(self, prefix, *extra, env=None):
        return support.run_tool("redist", "fetch", "cudnn", LABEL, "--cuda", CUDA, "--platform", PLATFORM,
                                "--component", "cudnn,cudnn_jit", "--prefix", prefix, "--base-url", self.base,
                                "--no-check", *extra, env={**CLEAN_ENV, **(env or {})})

    def assert_one_line(self, res, code, *needles):
        self.assertEqual(res.returncode, code, support.describe(res))
        lines = res.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, support.describe(res))
        for needle in needles:
            self.assertIn(needle, lines[0], support.describe(res))

    def test_remove_of_a_name_not_installed_is_an_error(self):
        self.assertEqual(self.fetch(self.prefix, "--no-cache", "-q").returncode, 0)
        before = support.tree_snapshot(self.prefix, ignore=r"^\.redist/lock$")
        res = support.run_tool("redist", "remove", "--prefix", self.prefix, "--product", "cudnnn")
        self.assert_one_line(res, EXIT_NOT_FOUND, "product 'cudnnn' is not installed", "did you mean 'cudnn'?")
        res = support.run_tool("redist", "remove", "--prefix", self.prefix, "--component", "cudnn_jitt")
        self.assert_one_line(res, EXIT_NOT_FOUND, "cudnn_jitt is not installed", "did you mean 'cudnn_jit'?")
        self.assertEqual(support.tree_snapshot(self.prefix, ignore=r"^\.redist/lock$"), before)

    def test_a_prefix_redist_never_installed_into_is_an_error_and_stays_untouched(self):
        # A typo (no such directory) and an existing directory redist never
        # wrote: every command that reads a prefix fails naming it, and none
        # creates anything there (remove used to exit 0 and make <typo>/.redist/).
        typo, empty = os.path.join(self.scratch, "typo"), os.path.join(self.scratch, "empty")
        os.makedirs(empty)

        def assert_untouched(res):
            self.assertFalse(os.path.lexists(typo), support.describe(res))
            self.assertEqual(os.listdir(empty), [], support.describe(res))

        for prefix in (typo, empty):
            for args in (["remove", "--prefix", prefix], ["remove", "--prefix", prefix, "--component", "cudnn"],
                         ["verify", "--prefix", prefix], ["check", "--prefix", prefix],
                         ["env", "--prefix", prefix], ["outdated", "--prefix", prefix, "--base-url", self.base],
                         ["sbom", "--prefix", prefix, "--format", "spdx-json"]):
                with self.subTest(prefix=prefix, command=args[0]):
                    res = support.run_tool("redist", *args, env=CLEAN_ENV)
                    self.assert_one_line(res, EXIT_NOT_FOUND, prefix, "no redist receipts in this prefix")
                    assert_untouched(res)
            res = self.fetch(prefix, "--dry-run")
            self.assertEqual(res.returncode, 0, support.describe(res))
            assert_untouched(res)

    def test_remove_of_an_emptied_prefix_is_an_error(self):
        self.assertEqual(self.fetch(self.prefix, "--no-cache", "-q").returncode, 0)
        res = support.run_tool("redist", "remove", "--prefix", self.prefix, "-q")
        self.assertEqual(res.returncode, 0, support.describe(res))
        res = support.run_tool("redist", "remove", "--prefix", self.prefix)
        self.assert_one_line(res, EXIT_NOT_FOUND, self.prefix, "no redist receipts in this prefix")

    def test_cudnn_fetch_all_is_not_ignored(self):
        # cudnn-fetch's default is component cudnn alone; --all used to be replaced by that default.
        for extra, want in (([], ["cudnn"]), (["--all"], ["cudnn", "cudnn_jit"])):
            prefix = os.path.join(self.scratch, "all" if extra else "default")
            support.run_tool("cudnn-fetch", LABEL, "--cuda", CUDA, "--platform", PLATFORM, "--prefix", prefix,
                             "--base-url", self.base, "--no-check", "--no-cache", "-q", *extra, env=CLEAN_ENV,
                             check=0)
            self.assertEqual(sorted(os.listdir(os.path.join(prefix, ".redist", "receipts", "cudnn"))),
                             [name + ".json" for name in want])

    def test_quiet_and_json_on_report_commands(self):
        self.assertEqual(self.fetch(self.prefix, "--no-cache", "-q").returncode, 0)
        for args in (["verify", "--prefix", self.prefix], ["outdated", "--prefix", self.prefix, "--base-url", self.base]):
            res = support.run_tool("redist", *args, "-q")
            self.assertIn(res.returncode, (0, 1), support.describe(res))
            self.assertEqual(res.stdout, "", support.describe(res))
        res = support.run_tool("redist", "remove", "--prefix", self.prefix, "--component", "cudnn_jit", "--json",
                               check=0)
        self.assertEqual(json.loads(res.stdout), {"prefix": self.prefix,
                                                  "removed": [{"component": "cudnn_jit"}]})
        res = support.run_tool("redist", "remove", "--prefix", self.prefix, "-q", check=0)
        self.assertEqual(res.stdout, "")

    def test_quiet_and_json_on_the_other_commands(self):
        # -q: nothing on stdout, the exit code answers; --json: one object.
        base = ["--base-url", support.file_base_url(), "--no-cache"]
        quiet = lambda *args: support.run_tool("redist", *args, "-q", env=CLEAN_ENV)
        for args, code in ((["versions", "cudnn"], 0), (["versions", "cudnnn"], EXIT_NOT_FOUND),
                           (["show", "cudnn", LABEL, "--platform", PLATFORM, "--cuda", CUDA], 0),
                           (["show", "cudnn", LABEL, "--platform", PLATFORM, "--cuda", "11"], EXIT_NOT_FOUND),
                           (["diff", "cudnn", LABEL, LABEL], 0), (["diff", "cudnn", "9.8.0", LABEL], 1)):
            with self.subTest(args):
                res = quiet(*args, *base)
                self.assertEqual((res.returncode, res.stdout), (code, ""), support.describe(res))
        cache = os.path.join(self.scratch, "cache")
        self.assertEqual(self.fetch(self.prefix, "--cache-dir", cache, "-q").returncode, 0)
        for action in (["prune", "--older-than", "0s"], ["clean", "--dry-run"], ["clean"]):
            res = quiet("cache", *action, "--cache-dir", cache)
            self.assertEqual((res.returncode, res.stdout), (0, ""), support.describe(res))
        self.assertEqual(support.run_tool("redist", "cache", "dir", "-q", "--cache-dir", cache).stdout, cache + "\n")

        env_json = support.run_tool("redist", "env", "--prefix", self.prefix, "--json", check=0).stdout
        self.assertEqual(env_json, support.run_tool("redist", "env", "--prefix", self.prefix, "--format", "json",
                                                    check=0).stdout)
        self.assertEqual(json.loads(env_json)["CUDNN_ROOT"], self.prefix)
        gh = {"GITHUB_ENV": os.path.join(self.scratch, "gh_env"), "GITHUB_PATH": os.path.join(self.scratch, "gh_path")}
        res = support.run_tool("redist", "env", "--prefix", self.prefix, "--format", "github", "-q", env=gh, check=0)
        self.assertEqual(res.stdout, "")
        with open(gh["GITHUB_ENV"]) as f:
            self.assertIn("CUDNN_ROOT=" + self.prefix, f.read())

        sbom = os.path.join(self.scratch, "sbom.json")
        res = support.run_tool("redist", "sbom", "--prefix", self.prefix, "--format", "spdx-json", "-o", sbom,
                               "--json", "--offline", "-q", env=CLEAN_ENV, check=0)
        summary = json.loads(res.stdout)
        self.assertEqual({k: summary[k] for k in ("output", "format", "components")},
                         {"output": sbom, "format": "spdx-json", "components": 2})
        installed = sum(len(support.load_json(os.path.join(self.prefix, ".redist", "receipts", "cudnn", name))["files"])
                        for name in ("cudnn.json", "cudnn_jit.json"))
        self.assertGreaterEqual(installed, summary["files"])
        self.assertGreater(summary["files"], 0)
        self.assertEqual(res.stderr, "", "-q: no warning about the licenses it could not read offline")
        res = support.run_tool("redist", "sbom", "--prefix", self.prefix, "--format", "spdx-json", "--json")
        self.assertEqual(res.returncode, 2, support.describe(res))

        project = os.path.join(self.scratch, "redist.toml")
        res = support.run_tool("redist", "init", "--file", project, "--platform", PLATFORM, "-q", check=0)
        self.assertEqual(res.stdout, "")
        res = support.run_tool("redist", "init", "--file", project, "--check", "--json", check=0)
        parsed = json.loads(res.stdout)
        self.assertEqual((parsed["file"], parsed["platforms"]), (project, [PLATFORM]))
        self.assertIn("cudnn", [p["name"] for p in parsed["products"]])

        lock = os.path.join(self.scratch, "cudnn.lock")
        single = ["lock", "cudnn", LABEL, "--platform", PLATFORM, "--component", "cudnn", "-o", lock, *base]
        self.assertEqual(support.run_tool("redist", *single, "-q", check=0).stdout, "")
        res = support.run_tool("redist", *single, "--json", check=0)
        self.assertEqual(json.loads(res.stdout), {"lock_file": lock, "products": [
            {"name": "cudnn", "release_label": LABEL, "artifacts": len(support.load_json(lock)["artifacts"])}]})
        with open(project, "w") as f:
            f.write('[project]\nprefix = "p"\nplatforms = ["linux-x86_64"]\ncuda = "12"\n\n'
                    '[products.cudnn]\nversion = "9.27.0"\ncomponents = ["cudnn"]\n')
        res = support.run_tool("redist", "lock", "--file", project, *base, "--json", check=0)
        self.assertEqual(json.loads(res.stdout), {"lock_file": os.path.join(self.scratch, "redist.lock"),
                                                  "products": [{"name": "cudnn", "release_label": LABEL,
                                                                "artifacts": 1, "cuda_reasons": [
                                                                    {"platform": "linux-x86_64",
                                                                     "reason": "cuda12: project.cuda 12"}]}]})
        res = support.run_tool("redist", "lock", "--file", project, *base, "--upgrade", "-q", check=0)
        self.assertEqual((res.stdout, res.stderr), ("", ""))

    def reflink_works_here(self):
        a, b = os.path.join(self.scratch, "a"), os.path.join(self.scratch, "b")
        with open(a, "w") as f:
            f.write("x")
        return subprocess.run(["cp", "--reflink=always", a, b], capture_output=True).returncode == 0

    def test_reflink_where_blocks_cannot_be_shared(self):
        if self.reflink_works_here():
            self.skipTest("this filesystem can reflink")
        cache = os.path.join(self.scratch, "cache")
        for name in ("first", "second"):  # the download; then from the blob, which keeps the extracted tree
            self.assertEqual(self.fetch(os.path.join(self.scratch, name), "--cache-dir", cache, "-q").returncode, 0)
        res = self.fetch(self.prefix, "--cache-dir", cache, "--link-mode", "reflink")
        self.assert_one_line(res, EXIT_FILESYSTEM, "--link-mode reflink: the cache at " + cache,
                             "cannot share blocks", "use --link-mode auto or copy")
        self.assertFalse(os.path.exists(os.path.join(self.prefix, "include")))

    def test_unusable_cache_is_said(self):
        blocker = os.path.join(self.scratch, "not-a-directory")
        with open(blocker, "w") as f:
            f.write("")
        res = self.fetch(self.prefix, env={"HOME": os.path.join(blocker, "home"), "XDG_CACHE_HOME": None})
        self.assertEqual(res.returncode, 0, support.describe(res))
        warnings = [line for line in res.stderr.splitlines() if "no download cache" in line]
        self.assertEqual(len(warnings), 1, support.describe(res))
        self.assertIn(os.path.join(blocker, "home", ".cache", "redist"), warnings[0])
        self.assertIn("--cache-dir", warnings[0])


if __name__ == "__main__":
    unittest.main()
