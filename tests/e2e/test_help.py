"""Every `--help`: the exit-code section (made from the library's table)
agrees with README.md's table, and each subcommand's help answers the common
questions: what it does, an example or what it exits with."""

import os
import re
import unittest

import support


def readme_exit_codes():
    with open(os.path.join(support.source_dir(), "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("### Exit codes", 1)[1]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| (\d+) \| (.*) \|$", line)
        if m:
            rows[int(m.group(1))] = m.group(2)
        elif rows and not line.startswith("|"):
            break
    return rows


def help_exit_codes(text):
    """{code: words} from the "Exit codes:" section of a --help text."""
    section = text.split("Exit codes:\n", 1)[1]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\s+(\d+)  (.+)$", line)
        if not m:
            break
        rows[int(m.group(1))] = m.group(2)
    return rows


def subcommands():
    top = support.run_tool("redist", "--help", check=0).stdout
    return re.findall(r"^  ([a-z]+) {2,}", top.split("Subcommands:")[1], re.M)


class HelpExitCodes(unittest.TestCase):
    def test_top_level_help_matches_readme(self):
        readme = readme_exit_codes()
        shown = help_exit_codes(support.run_tool("redist", "--help", check=0).stdout)
        self.assertEqual(sorted(shown), sorted(readme))
        self.assertIn(130, shown)  # cancelled: once missing from two of the three copies
        for code, words in shown.items():
            summary = words.split(" (")[0]
            with self.subTest(code=code):
                self.assertTrue(readme[code].startswith(summary), f"README: {readme[code]!r}, --help: {words!r}")

    def test_every_help_shows_the_same_table(self):
        expected = help_exit_codes(support.run_tool("redist", "--help", check=0).stdout)
        for sub in subcommands():
            with self.subTest(subcommand=sub):
                text = support.run_tool("redist", sub, "--help", check=0).stdout
                self.assertEqual(help_exit_codes(text), expected)
        text = support.run_tool("cudnn-fetch", "--help", check=0).stdout
        self.assertEqual(help_exit_codes(text), expected)

    def test_codes_named_in_help_texts_exist(self):
        known = set(help_exit_codes(support.run_tool("redist", "--help", check=0).stdout))
        mention = re.compile(r"\b[Ee]xits? (?:with )?(\d+)\b|\(exit (\d+)\)")
        for sub in subcommands():
            text = support.run_tool("redist", sub, "--help", check=0).stdout.split("Exit codes:")[0]
            for m in mention.finditer(text):
                code = int(m.group(1) or m.group(2))
                with self.subTest(subcommand=sub, mention=m.group(0)):
                    self.assertIn(code, known)


# Subcommands whose --help is still only the option list (their files belong
# to other work; remove a name when its help gains a footer).
TERSE = {"init"}


class HelpAnswers(unittest.TestCase):
    def test_every_subcommand_has_a_description_and_examples_or_details(self):
        top = support.run_tool("redist", "--help", check=0).stdout
        subs = subcommands()
        # The commands main() wires up, each from tools/commands/<name>.cpp.
        for name in ("versions", "show", "fetch", "verify", "remove", "cache", "lock", "env", "mirror", "check",
                     "sbom", "diff", "outdated", "init"):
            self.assertIn(name, subs)
        for sub in subs:
            with self.subTest(subcommand=sub):
                self.assertRegex(top, rf"(?m)^  {sub} +\S")  # a one-line description
                if sub in TERSE:
                    continue
                text = support.run_tool("redist", sub, "--help", check=0).stdout
                footer = text.split("Exit codes:")[0]
                # Beyond the option list: examples, or prose on what it does.
                self.assertTrue("Examples:" in footer or re.search(r"(?m)^[A-Z][^\n]{40,}$", footer),
                                f"`redist {sub} --help` explains nothing beyond its options:\n{text}")

    def test_fetch_help_answers_where_files_go_and_how_to_pin(self):
        text = support.run_tool("redist", "fetch", "--help", check=0).stdout
        for words in ("--prefix", "Receipts", "--locked", "Examples:", "share/licenses"):
            self.assertIn(words, text)

    def test_fetch_help_puts_the_everyday_options_first(self):
        # As uv does: the everyday options, then headings for where bytes come from and for the knobs.
        for tool, args in (("redist", ["fetch"]), ("cudnn-fetch", []), ("redist", ["sync"])):
            with self.subTest(tool=tool, args=args):
                text = support.run_tool(tool, *args, "--help", check=0).stdout.split("\n\n\n")
                sections = {}
                for part in "\n\n".join(text).split("\n\n"):
                    head, _, body = part.strip("\n").partition("\n")
                    sections[head] = set(re.findall(r"(?m)^\s+(?:-[a-zA-Z],)?(--[a-z][a-z0-9-]*)", body))
                self.assertEqual([h for h in sections if h.endswith("ptions:")],
                                 ["Options:", "Source options:", "Advanced options:"])
                everyday = {"--prefix", "--platform", "--dry-run", "--force", "--json", "--quiet"}
                if args != ["sync"]:
                    everyday |= {"--cuda", "--component", "--all", "--locked", "--check", "--no-check"}
                self.assertLessEqual(everyday, sections["Options:"])
                self.assertLessEqual({"--base-url", "--mirror", "--offline", "--cache-dir", "--trusted-key"},
                                     sections["Source options:"])
                self.assertLessEqual({"--threads", "--jobs", "--connections", "--max-memory", "--link-mode",
                                      "--profile"}, sections["Advanced options:"])

    def test_cudnn_fetch_help_gives_its_own_component_default(self):
        text = " ".join(support.run_tool("cudnn-fetch", "--help", check=0).stdout.split())
        self.assertIn("(default: cudnn alone; --all for every one)", text)
        self.assertNotIn("default: all", text)

    def test_usage_errors_exit_2(self):
        self.assertEqual(support.run_tool("redist").returncode, 2)
        self.assertEqual(support.run_tool("redist", "fetch", "--prefix").returncode, 2)
        res = support.run_tool("redist", "fetch", "--prefix", "/nonexistent-redist-prefix")
        self.assertEqual(res.returncode, 2, support.describe(res))
        self.assertIn("fetch needs PRODUCT", res.stderr)


if __name__ == "__main__":
    unittest.main()
