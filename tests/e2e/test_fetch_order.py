"""Which artifact `redist fetch` starts first: with fewer job
slots than artifacts, the largest archive goes first (its download and
decode are the longest; started last, they would be the run's tail). Checked
on tests/fixtures/fault_server.py's own request log, whose began/ended
counters order every request's start and end."""

import os
import unittest

import support

LABEL = "12.9.1"
PLATFORM = "linux-x86_64"
CLEAN_ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None}


class FetchOrder(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.root = os.path.join(self.dir, "root")
        support.copy_mirror(self.root, products=["cuda"])
        self.server = support.FaultServer(self.root, os.path.join(self.dir, "server"))
        self.addCleanup(self.server.stop)
        self.sizes = {}  # URL path -> size
        for _comp, platform, _variant, rec in support.iter_artifacts(support.load_manifest("cuda", LABEL)):
            if platform == PLATFORM:
                self.sizes["/cuda/redist/" + rec["relative_path"]] = int(rec["size"])
        assert len(set(self.sizes.values())) >= 4, self.sizes

    def fetch(self, *limit):
        prefix = os.path.join(self.dir, "prefix-" + "-".join(limit).strip("-"))
        support.run_tool("redist", "fetch", "cuda", LABEL, "--base-url", self.server.url(), "--prefix", prefix,
                         "--no-cache", "--platform", PLATFORM, "--all", *limit, "--no-check", "--quiet",
                         env=CLEAN_ENV, check=True)
        log = [e for e in self.server.log() if e["path"] in self.sizes]
        self.assertEqual(sorted(e["path"] for e in log), sorted(self.sizes), "each archive once")
        self.assertTrue(all(e["status"] == 200 for e in log), log)
        return sorted(log, key=lambda e: e["began"])

    def assert_one_at_a_time_largest_first(self, log):
        sizes = [self.sizes[e["path"]] for e in log]
        self.assertEqual(sizes, sorted(sizes, reverse=True), log)
        # One job: each download ended before the next one began.
        for earlier, later in zip(log, log[1:]):
            self.assertLess(earlier["ended"], later["began"], log)

    def test_one_job_fetches_the_largest_archive_first(self):
        self.assert_one_at_a_time_largest_first(self.fetch("--jobs", "1"))

    def test_one_thread_means_one_job_by_default(self):
        # The default number of artifacts at once is counted from the run's
        # thread budget (--threads), not from every core of the machine.
        self.assert_one_at_a_time_largest_first(self.fetch("--threads", "1"))


if __name__ == "__main__":
    unittest.main()
