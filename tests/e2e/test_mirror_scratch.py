"""Where `redist mirror` keeps what it downloads before the target takes it:
a push to a registry in a run directory of the cache (`<cache>/scratch/`),
never in $TMPDIR; an image layout in `DIR/<product>/.redist-scratch-*` (the
blobs' filesystem). A killed run's partial download is resumed by the next
run into the same target (one Range request for the rest), which removes the
directory when it is done; `redist cache clean` removes a killed run's
directory; a directory a live run holds is left alone."""

import fcntl
import os
import sys
import unittest

import support

sys.path.insert(0, os.path.join(support.source_dir(), "tests", "fixtures"))
import registry_fixture  # noqa: E402

LABEL = "9.27.0"
PLATFORM = "linux-x86_64"
ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None, "REDIST_DEBUG_PAUSE": None,
       "REDIST_OCI_AUTH": None, "DOCKER_CONFIG": None}


def only_cudnn_cuda12():
    for comp, platform, variant, rec in support.iter_artifacts(support.load_manifest("cudnn", LABEL)):
        if comp == "cudnn" and platform == PLATFORM and variant == "cuda12":
            return rec["relative_path"], int(rec["size"]), rec["sha256"]
    raise AssertionError("the demo manifest has no cudnn cuda12 archive")


def parts_in(directory):
    return [n for n in os.listdir(directory) if ".part." in n]


class MirrorScratch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        cls.root = os.path.join(cls.dir, "root")
        support.copy_mirror(os.path.join(cls.root, "base"), products=["cudnn"])
        cls.server = support.FaultServer(cls.root, os.path.join(cls.dir, "server"))
        cls.base = cls.server.url("/base")
        cls.rel, cls.size, cls.sha = only_cudnn_cuda12()
        cls.path = "/base/cudnn/redist/" + cls.rel

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.tmp = os.path.join(self.scratch, "tmp")
        os.makedirs(self.tmp)
        self.cache_scratch = os.path.join(self.scratch, "cache", "redist", "scratch")
        self.env = dict(ENV, XDG_CACHE_HOME=os.path.join(self.scratch, "cache"), TMPDIR=self.tmp)
        self.server.set_faults({})
        self.server.reset()

    def args(self, to):
        return ["mirror", "cudnn", LABEL, "--to", to, "--base-url", self.base, "--platform", PLATFORM,
                "--cuda", "12", "--component", "cudnn"]

    def kill_mid_download(self, to):
        """Runs a mirror into `to` until half the archive is down, then SIGKILLs it."""
        self.server.set_faults({self.path: {"stall_after": self.size // 2 + 1, "stall_seconds": 30}})
        first = support.BackgroundTool("redist", *self.args(to), env=dict(self.env, REDIST_DEBUG_PAUSE="mid-download"))
        try:
            self.assertTrue(first.wait_for_stderr("paused at mid-download", timeout=60), first.stderr)
        finally:
            first.kill()
        self.server.log()  # waits until the killed run's request has settled
        self.server.set_faults({})
        self.server.reset()

    def the_run_directory(self, parent, prefix):
        dirs = [n for n in os.listdir(parent) if n.startswith(prefix)]
        self.assertEqual(len(dirs), 1, dirs)
        return os.path.join(parent, dirs[0])

    def assert_resumed(self, kept):
        log = self.server.log(self.path)
        self.assertEqual([e["range"] for e in log], [f"bytes={kept}-"], log)
        self.assertEqual(log[0]["bytes_sent"], self.size - kept, log)

    def kept_bytes(self, run_dir):
        [part] = parts_in(run_dir)
        kept = os.path.getsize(os.path.join(run_dir, part))
        self.assertTrue(0 < kept < self.size, kept)
        return kept

    def test_a_registry_push_keeps_its_scratch_in_the_cache_and_resumes_it(self):
        with registry_fixture.Registry(os.path.join(self.scratch, "registry")) as registry:
            self.kill_mid_download(registry.url)
            self.assertEqual(os.listdir(self.tmp), [])  # nothing in $TMPDIR
            run_dir = self.the_run_directory(self.cache_scratch, "mirror-")
            kept = self.kept_bytes(run_dir)
            support.run_tool("redist", *self.args(registry.url), env=self.env, check=0, timeout=120)
            self.assert_resumed(kept)
            self.assertEqual(os.listdir(self.cache_scratch), [])  # the finished run removed it
            self.assertEqual(support.sha256_file(registry.blob_data_path(self.sha)), self.sha)

    def test_cache_clean_removes_a_killed_runs_scratch_but_not_a_live_one(self):
        with registry_fixture.Registry(os.path.join(self.scratch, "registry")) as registry:
            self.kill_mid_download(registry.url)
        run_dir = self.the_run_directory(self.cache_scratch, "mirror-")
        live = os.path.join(self.cache_scratch, "mirror-0000000000000000-live")
        os.makedirs(live)
        with open(os.path.join(live, "x.part.1"), "wb") as f:
            f.write(b"held")
        held = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)
            support.run_tool("redist", "cache", "clean", env=self.env, check=0)
            self.assertFalse(os.path.exists(run_dir))
            self.assertTrue(os.path.exists(os.path.join(live, "x.part.1")))
        finally:
            os.close(held)

    def test_a_killed_runs_copy_tree_is_removed_by_the_next_run(self):
        """`--recompress` unpacks each copy it makes once, in a run directory of the cache, for the
        tree it records: a run killed there leaves it, and the next run removes it."""
        dest = os.path.join(self.scratch, "mirror")
        key, _ = support.make_key_pair(self.scratch)
        args = [*self.args(dest), "--recompress", "zstd", "--sign-key", key]
        first = support.BackgroundTool("redist", *args, env=dict(self.env, REDIST_DEBUG_PAUSE="copy-tree"))
        try:
            self.assertTrue(first.wait_for_stderr("paused at copy-tree", timeout=60), first.stderr)
            run_dir = self.the_run_directory(self.cache_scratch, "copy-tree-")
            unpacked = [f for _, _, files in os.walk(run_dir) for f in files]
            self.assertTrue(unpacked, run_dir)
        finally:
            first.kill()
        support.run_tool("redist", *args, env=self.env, check=0, timeout=120)
        self.assertEqual(os.listdir(self.cache_scratch), [])
        self.assertEqual(os.listdir(self.tmp), [])
        self.assertTrue(os.path.exists(os.path.join(dest, "cudnn", "redist", f"recompressed_{LABEL}.json")))

    def test_a_layout_resumes_a_killed_runs_scratch_and_removes_it(self):
        layout = os.path.join(self.scratch, "layout")
        self.kill_mid_download("oci-layout:" + layout)
        product_dir = os.path.join(layout, "cudnn")
        run_dir = self.the_run_directory(product_dir, ".redist-scratch-")
        kept = self.kept_bytes(run_dir)
        # A second leftover (a run killed before its download began) goes too.
        os.makedirs(os.path.join(product_dir, ".redist-scratch-stale"))
        support.run_tool("redist", *self.args("oci-layout:" + layout), env=self.env, check=0, timeout=120)
        self.assert_resumed(kept)
        self.assertEqual([n for n in os.listdir(product_dir) if n.startswith(".redist-scratch-")], [])
        blob = os.path.join(product_dir, "blobs", "sha256", self.sha)
        self.assertEqual(support.sha256_file(blob), self.sha)
        self.assertEqual(os.listdir(self.tmp), [])


if __name__ == "__main__":
    unittest.main()
