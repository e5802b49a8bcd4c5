"""Credentials in a source URL are never stored: a mirror named as
http://user:TOKEN@host/... in $REDIST_MIRRORS is used, but no record the
cache or the prefix keeps (drift history, remembered documents, receipts,
the sbom) and no lock written by `redist lock` holds the token, in clear or
as the name of a file."""

import os
import unittest

import support

TOKEN = "s3cr3tTOKENxyz"


class StoredCredentials(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.cache = os.path.join(self.dir, "cache")
        base = support.nginx_base_url()
        scheme, rest = base.split("://", 1)
        self.mirror = f"{scheme}://user:{TOKEN}@{rest}"
        # The base URL cannot answer: every byte comes from the mirror.
        self.env = {"REDIST_MIRRORS": self.mirror, "REDIST_BASE_URL": None, "REDIST_CACHE_DIR": None}
        self.common = ("--base-url", "http://127.0.0.1:9/none", "--platform", "linux-x86_64", "--cuda", "12",
                       "--component", "cudnn", "--cache-dir", self.cache)

    def assert_no_token(self, root):
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                self.assertNotIn(TOKEN, name, os.path.join(dirpath, name))
            for name in filenames:
                path = os.path.join(dirpath, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as f:
                    self.assertNotIn(TOKEN.encode(), f.read(), path)

    def test_no_record_keeps_the_mirror_credentials(self):
        prefix = os.path.join(self.dir, "prefix")
        fetched = support.run_tool("redist", "fetch", "cudnn", "9.27.0", "--prefix", prefix, *self.common,
                                   env=self.env, check=0)
        self.assertNotIn(TOKEN, fetched.stdout + fetched.stderr)
        history = os.path.join(self.cache, "history", "urls")
        self.assertTrue(os.listdir(history))  # the drift history was written
        lock = os.path.join(self.dir, "redist.lock")
        locked = support.run_tool("redist", "lock", "cudnn", "9.27.0", "-o", lock, *self.common, env=self.env,
                                  check=0)
        self.assertNotIn(TOKEN, locked.stdout + locked.stderr)
        sbom = os.path.join(self.dir, "sbom.json")
        made = support.run_tool("redist", "sbom", "--prefix", prefix, "--format", "spdx-json", "-o", sbom,
                                 "--cache-dir", self.cache, env=self.env, check=0)
        self.assertNotIn(TOKEN, made.stdout + made.stderr)
        for root in (self.cache, prefix, lock, sbom):
            if os.path.isdir(root):
                self.assert_no_token(root)
            else:
                with open(root, "rb") as f:
                    self.assertNotIn(TOKEN.encode(), f.read(), root)


if __name__ == "__main__":
    unittest.main()
