"""The user's config.toml ($XDG_CONFIG_HOME/redist/config.toml), through the
real tools: its base-url, mirrors, cache-dir and trusted-keys are the
defaults; the command line and the environment come before it; a file that
does not parse, or names an unknown key, is one line naming the file, the line
and the key, and nothing is installed."""

import os
import unittest

import support

LABEL = "9.27.0"
SELECT = ("--platform", "linux-x86_64", "--cuda", "12", "--component", "cudnn", "--no-check")


class UserConfig(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.config_home = os.path.join(self.dir, "config")
        self.env = {"XDG_CONFIG_HOME": self.config_home, "XDG_CACHE_HOME": os.path.join(self.dir, "xdg-cache"),
                    "REDIST_BASE_URL": None, "REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None}

    def write_config(self, text: str) -> str:
        path = os.path.join(self.config_home, "redist", "config.toml")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def fetch(self, prefix, *extra, check=0, env=None):
        return support.run_tool("redist", "fetch", "cudnn", LABEL, "--prefix", prefix, *SELECT, *extra,
                                env=dict(self.env, **(env or {})), check=check)

    def test_base_url_and_cache_dir_come_from_the_config(self):
        cache = os.path.join(self.dir, "my-cache")
        self.write_config(f'base-url = "{support.file_base_url()}"\ncache-dir = "{cache}"\nretries = 2\n')
        prefix = os.path.join(self.dir, "prefix")
        self.fetch(prefix)
        self.assertTrue(os.path.exists(os.path.join(prefix, "include", "cudnn.h")))
        self.assertTrue(os.path.isdir(os.path.join(cache, "blobs")), os.listdir(cache) if os.path.isdir(cache) else
                        "no cache")
        where = support.run_tool("redist", "cache", "dir", env=self.env, check=0)
        self.assertEqual(where.stdout.strip(), cache)
        # The environment comes first.
        other = os.path.join(self.dir, "env-cache")
        where = support.run_tool("redist", "cache", "dir", env=dict(self.env, REDIST_CACHE_DIR=other), check=0)
        self.assertEqual(where.stdout.strip(), other)

    def test_the_command_line_and_environment_come_first(self):
        self.write_config('base-url = "http://127.0.0.1:9/unreachable"\n')
        prefix = os.path.join(self.dir, "prefix")
        self.fetch(prefix, "--base-url", support.file_base_url())
        self.assertTrue(os.path.exists(os.path.join(prefix, "include", "cudnn.h")))
        env_prefix = os.path.join(self.dir, "env-prefix")
        self.fetch(env_prefix, env={"REDIST_BASE_URL": support.file_base_url()})
        self.assertTrue(os.path.exists(os.path.join(env_prefix, "include", "cudnn.h")))

    def test_a_relative_mirror_is_taken_from_the_config_directory(self):
        mirror = support.copy_mirror(os.path.join(self.config_home, "redist", "mirror"), products=["cudnn"])
        self.assertTrue(os.path.isdir(mirror))
        self.write_config('mirrors = ["mirror"]\n')
        prefix = os.path.join(self.dir, "prefix")
        self.fetch(prefix, "--base-url", "http://127.0.0.1:9/unreachable", "--retries", "1")
        self.assertTrue(os.path.exists(os.path.join(prefix, "include", "cudnn.h")))

    def test_a_broken_or_unknown_key_is_one_line_and_nothing_is_installed(self):
        for text, needle in (("mirror = [\"x\"]\n", "mirror: unknown key"), ("retries = [\n", "config.toml:1"),
                             ("retries = 0\n", "retries")):
            path = self.write_config(text)
            prefix = os.path.join(self.dir, "prefix")
            res = self.fetch(prefix, "--base-url", support.file_base_url(), check=4)
            self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
            self.assertIn(path, res.stderr)
            self.assertIn(needle, res.stderr)
            self.assertFalse(os.path.exists(prefix))


if __name__ == "__main__":
    unittest.main()
