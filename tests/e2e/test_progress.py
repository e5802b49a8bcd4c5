"""Progress output: a live bar per artifact on a terminal, plain lines elsewhere."""

import os
import pty
import re
import subprocess
import unittest

import support


class Progress(unittest.TestCase):
    def test_live_bar_on_a_tty(self):
        prefix = os.path.join(support.make_scratch_dir(self.id()), "prefix")
        # A pseudo-terminal as stdout, so the tool sees a TTY.
        master, slave = pty.openpty()
        proc = subprocess.Popen([support.tool_path("redist"), "fetch", "cuda", "12.9.1", "--base-url",
                                 support.nginx_base_url(), "--prefix", prefix, "--platform", "linux-x86_64",
                                 "--no-cache", "--component", "cuda_nvcc,cuda_cudart"],
                                stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=support.tool_env())
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=60)
        os.close(master)
        out = b"".join(chunks).decode(errors="replace")
        self.assertEqual(proc.returncode, 0, proc.stderr.read().decode())
        # One bar line per artifact: [####...] percent, bytes, rate, ETA, stage; redrawn in place.
        for component in ("cuda_nvcc", "cuda_cudart"):
            self.assertRegex(out, component + r"\s+\[[#-]{30}\]\s+100\.0%.*ETA.*done")
        self.assertIn("\x1b[2K", out)  # lines are cleared and redrawn, not appended

    def test_plain_lines_when_not_a_tty(self):
        prefix = os.path.join(support.make_scratch_dir(self.id()), "prefix")
        res = support.run_tool("redist", "fetch", "cuda", "12.9.1", "--base-url", support.nginx_base_url(),
                               "--prefix", prefix, "--platform", "linux-x86_64", "--no-cache",
                               "--component", "cuda_nvcc", check=0)
        self.assertNotIn("\x1b", res.stdout + res.stderr)
        self.assertRegex(res.stdout, r"(?m)^cuda_nvcc: downloading +\d+% of .* at .*/s$")
        self.assertRegex(res.stdout, r"(?m)^cuda_nvcc: done$")
        self.assertTrue(re.search(r"(?m)^installed cuda cuda_nvcc ", res.stdout))


if __name__ == "__main__":
    unittest.main()
