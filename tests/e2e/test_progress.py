"""Progress output: live bars and a total on a terminal, plain lines elsewhere
(tests/e2e/test_tool_ux.py sizes them to the terminal and caps them)."""

import os
import re
import unittest

import support


class Progress(unittest.TestCase):
    def test_live_bar_on_a_tty(self):
        prefix = os.path.join(support.make_scratch_dir(self.id()), "prefix")
        res = support.run_in_pty("redist", "fetch", "cuda", "12.9.1", "--base-url", support.nginx_base_url(),
                                 "--prefix", prefix, "--platform", "linux-x86_64", "--no-cache",
                                 "--component", "cuda_nvcc,cuda_cudart", timeout=60)
        self.assertEqual(res.returncode, 0, res.stderr)
        out = res.stdout
        # A total bar (percent, bytes, ETA), redrawn in place; cleared before the summary.
        self.assertRegex(out, r"\x1b\[2Ktotal +\[[#-]+\] +\d+% .* of .* ETA ")
        self.assertIn("\x1b[2K", out)  # lines are cleared and redrawn, not appended
        summary = out[out.rindex("\x1b[J"):].replace("\r\n", "\n")  # the pty writes "\r\n"
        for component in ("cuda_nvcc", "cuda_cudart"):
            self.assertRegex(summary, r"(?m)^  " + component + r" +\S+ \(new\) +\S+ \S+ +\d+ files$")

    def test_plain_lines_when_not_a_tty(self):
        prefix = os.path.join(support.make_scratch_dir(self.id()), "prefix")
        res = support.run_tool("redist", "fetch", "cuda", "12.9.1", "--base-url", support.nginx_base_url(),
                               "--prefix", prefix, "--platform", "linux-x86_64", "--no-cache",
                               "--component", "cuda_nvcc", check=0)
        self.assertNotIn("\x1b", res.stdout + res.stderr)
        # No bars and no percentages: one line per component when it is done, then the summary.
        self.assertNotIn("downloading", res.stdout)
        self.assertRegex(res.stdout, r"(?m)^cuda_nvcc: done, \S+ \S+$")
        self.assertTrue(re.search(r"(?m)^installed cuda 12\.9\.1 into \S+: 1 component, ", res.stdout))
        self.assertRegex(res.stdout, r"(?m)^  cuda_nvcc +\S+ \(new\) +\S+ \S+ +\d+ files$")
        self.assertNotIn("http://", res.stdout[res.stdout.index("cuda_nvcc: done"):])


if __name__ == "__main__":
    unittest.main()
