"""`redist env` in every format, the bash completion script, and NO_COLOR
(no terminal escape sequences in any output)."""

import json
import os
import re
import shutil
import subprocess
import unittest

import support

# A prefix name that breaks naive quoting in every target language.
AWKWARD = "pre fix 'q' $HOME \\ \"dq\""


def redist_env(prefix, fmt=None, env=None, check=0):
    args = ["env", "--prefix", prefix] + (["--format", fmt] if fmt else [])
    return support.run_tool("redist", *args, env=env, check=check)


def fish_words(line):
    """Splits one fish command line into words, undoing fish's single
    quoting (inside '...' only \\\\ and \\' are escapes)."""
    words, cur, i, quoted, have = [], "", 0, False, False
    while i < len(line):
        c = line[i]
        if quoted:
            if c == "\\" and i + 1 < len(line) and line[i + 1] in "\\'":
                cur += line[i + 1]
                i += 1
            elif c == "'":
                quoted = False
            else:
                cur += c
        elif c == "'":
            quoted, have = True, True
        elif c == " ":
            if have or cur:
                words.append(cur)
            cur, have = "", False
        else:
            cur += c
            have = True
        i += 1
    if have or cur:
        words.append(cur)
    return words


class EnvFormats(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        scratch = support.make_scratch_dir(cls.__name__)
        cls.scratch = scratch
        cls.prefix = os.path.join(scratch, AWKWARD)
        support.run_tool("cudnn-fetch", "9.27.0", "--base-url", support.file_base_url(), "--prefix", cls.prefix,
                         "--platform", "linux-x86_64", "--cuda", "12", "--no-cache", "-q", check=0)
        cls.libs = [os.path.join(cls.prefix, d) for d in ("lib", "lib64")
                    if os.path.isdir(os.path.join(cls.prefix, d))]
        assert cls.libs, os.listdir(cls.prefix)
        cls.has_bin = os.path.isdir(os.path.join(cls.prefix, "bin"))

    def test_sh_eval_in_bash(self):
        script = ('eval "$("$REDIST" env --prefix "$P")" || exit 9\n'
                  'printf "%s\\n" "$CUDNN_ROOT" "$CUDNN_HOME" "$CPATH" "$LD_LIBRARY_PATH" "$LIBRARY_PATH" "$PATH"\n')
        env = support.tool_env({"REDIST": support.tool_path("redist"), "P": self.prefix,
                                "CPATH": None, "LIBRARY_PATH": "", "LD_LIBRARY_PATH": "/old/lib",
                                "PATH": "/usr/bin:/bin"})
        res = subprocess.run(["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=60)
        self.assertEqual(res.returncode, 0, res.stderr)
        root, home, cpath, ld, lib, path = res.stdout.split("\n")[:6]
        self.assertEqual(root, self.prefix)
        self.assertEqual(home, self.prefix)
        # Unset or empty: no trailing ':' (an empty entry means the current directory).
        self.assertEqual(cpath, os.path.join(self.prefix, "include"))
        self.assertEqual(lib, ":".join(self.libs))
        self.assertEqual(ld, ":".join(self.libs) + ":/old/lib")
        bin_dirs = [os.path.join(self.prefix, "bin")] if self.has_bin else []
        self.assertEqual(path, ":".join(bin_dirs + ["/usr/bin", "/bin"]))
        # The output is only assignments: nothing else for eval to run.
        out = redist_env(self.prefix).stdout
        for line in out.splitlines():
            self.assertTrue(line.startswith("export "), line)

    def test_fish_text(self):
        out = redist_env(self.prefix, "fish").stdout
        lines = [fish_words(l) for l in out.splitlines()]
        by_name = {}
        for words in lines:
            self.assertEqual(words[:2], ["set", "-gx"], words)
            if words[2] == "--prepend":
                by_name[words[3]] = ("prepend", words[4:])
            else:
                by_name[words[2]] = ("set", words[3:])
        self.assertEqual(by_name["CUDNN_ROOT"], ("set", [self.prefix]))
        self.assertEqual(by_name["CUDNN_HOME"], ("set", [self.prefix]))
        self.assertEqual(by_name["CPATH"], ("prepend", [os.path.join(self.prefix, "include")]))
        self.assertEqual(by_name["LD_LIBRARY_PATH"], ("prepend", self.libs))
        self.assertEqual(by_name["LIBRARY_PATH"], ("prepend", self.libs))
        self.assertEqual("PATH" in by_name, self.has_bin)
        self.assertIn("\\'q\\'", out)  # fish's escape for a quote inside '...'

    @unittest.skipUnless(shutil.which("cmake"), "cmake not installed")
    def test_cmake_script(self):
        out = redist_env(self.prefix, "cmake").stdout
        env_file = os.path.join(self.scratch, "redist-env.cmake")
        with open(env_file, "w") as f:
            f.write(out)
        driver = os.path.join(self.scratch, "driver.cmake")
        with open(driver, "w") as f:
            f.write(f'include("{env_file}")\n'
                    'foreach(v CUDNN_ROOT CUDNN_HOME CPATH LIBRARY_PATH LD_LIBRARY_PATH)\n'
                    '  message("${v}=$ENV{${v}}")\n'
                    'endforeach()\n'
                    'message("CMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH}")\n')
        env = support.tool_env({"CPATH": "/old/include", "LIBRARY_PATH": None, "LD_LIBRARY_PATH": None})
        res = subprocess.run(["cmake", "-P", driver], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=60)
        self.assertEqual(res.returncode, 0, res.stderr)
        values = dict(l.split("=", 1) for l in res.stderr.splitlines() if "=" in l)
        self.assertEqual(values["CUDNN_ROOT"], self.prefix)
        self.assertEqual(values["CUDNN_HOME"], self.prefix)
        self.assertEqual(values["CPATH"], os.path.join(self.prefix, "include") + ":/old/include")
        self.assertEqual(values["LIBRARY_PATH"], ":".join(self.libs))
        self.assertEqual(values["LD_LIBRARY_PATH"], ":".join(self.libs))
        self.assertEqual(values["CMAKE_PREFIX_PATH"], self.prefix)

    def test_json_final_values(self):
        res = redist_env(self.prefix, "json", env={"CPATH": None, "LIBRARY_PATH": "/x/lib:/y/lib",
                                                   "LD_LIBRARY_PATH": "", "PATH": "/usr/bin"})
        doc = json.loads(res.stdout)
        self.assertEqual(doc["CUDNN_ROOT"], self.prefix)
        self.assertEqual(doc["CUDNN_HOME"], self.prefix)
        self.assertEqual(doc["CPATH"], os.path.join(self.prefix, "include"))
        self.assertEqual(doc["LIBRARY_PATH"], ":".join(self.libs) + ":/x/lib:/y/lib")
        self.assertEqual(doc["LD_LIBRARY_PATH"], ":".join(self.libs))
        if self.has_bin:
            self.assertEqual(doc["PATH"], os.path.join(self.prefix, "bin") + ":/usr/bin")
        self.assertNotIn("CUDA_HOME", doc)

    def test_github_files(self):
        env_file = os.path.join(self.scratch, "github_env")
        path_file = os.path.join(self.scratch, "github_path")
        for p in (env_file, path_file):
            with open(p, "w") as f:
                f.write("EARLIER=1\n")  # written by an earlier step: must be kept
        res = redist_env(self.prefix, "github", env={"GITHUB_ENV": env_file, "GITHUB_PATH": path_file,
                                                     "CPATH": None, "LD_LIBRARY_PATH": "/old"})
        self.assertIn("GITHUB_ENV", res.stdout)
        with open(env_file) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[0], "EARLIER=1")
        got = dict(l.split("=", 1) for l in lines[1:])
        self.assertEqual(got["CUDNN_ROOT"], self.prefix)
        self.assertEqual(got["CPATH"], os.path.join(self.prefix, "include"))
        self.assertEqual(got["LD_LIBRARY_PATH"], ":".join(self.libs) + ":/old")
        self.assertNotIn("PATH", got)  # bin directories go to $GITHUB_PATH
        with open(path_file) as f:
            path_lines = f.read().splitlines()
        self.assertEqual(path_lines, ["EARLIER=1"] + ([os.path.join(self.prefix, "bin")] if self.has_bin else []))

    def test_github_needs_its_variables(self):
        res = redist_env(self.prefix, "github", env={"GITHUB_ENV": None, "GITHUB_PATH": None}, check=2)
        self.assertIn("GITHUB_ENV", res.stderr)
        self.assertEqual(len(res.stderr.strip().splitlines()), 1)

    def test_prefix_without_receipts(self):
        empty = os.path.join(self.scratch, "empty")
        os.makedirs(empty, exist_ok=True)
        for prefix in (empty, os.path.join(self.scratch, "missing")):
            res = redist_env(prefix, check=3)
            self.assertEqual(res.stdout, "")
            self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
            self.assertIn("receipts", res.stderr)

    def test_the_project_is_found_and_read_as_sync_does(self):
        # Without --prefix: the prefix of redist.toml here or in the nearest
        # parent, read as a regular file only (a FIFO is one error naming
        # it, never a read that waits for a writer).
        project = support.make_scratch_dir(self.id())
        below = os.path.join(project, "sub")
        os.makedirs(below)
        toml = os.path.join(project, "redist.toml")
        with open(toml, "w") as f:
            f.write('[project]\nprefix = "prefix"\nplatforms = ["linux-x86_64"]\n\n'
                    '[products.cudnn]\nversion = "9.27.0"\n')
        res = support.run_tool("redist", "env", "--format", "json", cwd=below, check=3)  # its prefix: no receipts
        self.assertIn(os.path.join(project, "prefix"), res.stderr)
        os.remove(toml)
        os.mkfifo(toml)
        res = support.run_tool("redist", "env", cwd=below, timeout=20, check=10)
        self.assertIn(f"{toml}: cannot read the project file: not a regular file", res.stderr)
        self.assertEqual(len(res.stderr.strip().splitlines()), 1, support.describe(res))

    def test_bad_format_is_usage_error(self):
        redist_env(self.prefix, "zsh", check=2)

    def test_cuda_product_names(self):
        prefix = os.path.join(self.scratch, "cuda")
        support.run_tool("redist", "fetch", "cuda", "12.9.1", "--component", "cuda_cudart", "--base-url",
                         support.file_base_url(), "--prefix", prefix, "--platform", "linux-x86_64",
                         "--no-cache", "-q", check=0)
        doc = json.loads(redist_env(prefix, "json").stdout)
        for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"):
            self.assertEqual(doc[name], prefix)
        self.assertFalse([k for k in doc if k.startswith("CUDNN")])


class BashCompletion(unittest.TestCase):
    SCRIPT = os.path.join(support.source_dir(), "scripts", "completion", "redist.bash")

    def complete(self, *words):
        """COMPREPLY for a command line whose last word is being completed."""
        quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
        script = (f'source "{self.SCRIPT}" || exit 9\n'
                  f'COMP_WORDS=({quoted}); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n'
                  'complete -p redist >/dev/null || exit 8\n'
                  '_redist; printf "%s\\n" "${COMPREPLY[@]}"\n')
        res = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=30)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertEqual(res.stderr, "")
        return [l for l in res.stdout.splitlines() if l]

    def test_subcommand(self):
        self.assertEqual(self.complete("redist", "f"), ["fetch"])

    def test_option(self):
        self.assertEqual(self.complete("redist", "fetch", "--pl"), ["--platform"])

    def test_values(self):
        self.assertIn("linux-sbsa", self.complete("redist", "fetch", "--platform", ""))
        self.assertEqual(self.complete("redist", "show", "--platform", "=", "linux-aa"), ["linux-aarch64"])
        self.assertEqual(self.complete("redist", "env", "--format", ""), ["sh", "fish", "cmake", "json", "github"])
        self.assertEqual(sorted(self.complete("redist", "fetch", "cud")), ["cuda", "cudnn", "cudss"])
        self.assertEqual(self.complete("redist", "fetch", "cudnn", "cud"), [])  # VERSION: free-form

    def test_prefix_completes_directories(self):
        scratch = support.make_scratch_dir(self.id())
        os.makedirs(os.path.join(scratch, "opt_a"))
        with open(os.path.join(scratch, "opt_file"), "w"):
            pass
        self.assertEqual(self.complete("redist", "env", "--prefix", os.path.join(scratch, "opt")),
                         [os.path.join(scratch, "opt_a")])
        self.assertEqual(sorted(self.complete("redist", "show", "--manifest", os.path.join(scratch, "opt"))),
                         [os.path.join(scratch, "opt_a"), os.path.join(scratch, "opt_file")])

    def test_every_subcommand_and_option_in_help_is_offered(self):
        """The script is static: this catches options added to the tools but
        not to the script."""
        top = support.run_tool("redist", "--help", check=0).stdout
        subs = re.findall(r"^  ([a-z]+) {2,}", top.split("Subcommands:")[1], re.M)
        self.assertIn("mirror", subs)
        self.assertEqual(sorted(self.complete("redist", "")), sorted(subs))
        option = re.compile(r"^\s+(?:(-[a-zA-Z]),)?(--[a-z][a-z0-9-]*)", re.M)
        for sub in subs:
            with self.subTest(subcommand=sub):
                helptext = support.run_tool("redist", sub, "--help", check=0).stdout
                wanted = {o for pair in option.findall(helptext) for o in pair if o}
                offered = set(self.complete("redist", sub, "-"))
                self.assertEqual(wanted - offered, set())
        helptext = support.run_tool("cudnn-fetch", "--help", check=0).stdout
        wanted = {o for pair in option.findall(helptext) for o in pair if o}
        self.assertEqual(wanted - set(self.complete("cudnn-fetch", "-")), set())


ESC = "\x1b"


class NoColor(unittest.TestCase):
    """The tools print no terminal escape sequences, with NO_COLOR=1 and when
    writing to pipes (the only case a test can observe)."""

    def test_no_escape_sequences(self):
        scratch = support.make_scratch_dir(self.id())
        base = support.file_base_url()
        manifest = support.manifest_path("cudnn", "9.27.0")
        runs = [
            ("redist", "--help"),
            ("redist", "versions", "cudnn", "--base-url", base),
            ("redist", "show", "--manifest", manifest),
            ("redist", "show", "--manifest", manifest, "--component", "nope"),  # an error
            ("cudnn-fetch", "9.27.0", "--base-url", base, "--prefix", os.path.join(scratch, "p"),
             "--platform", "linux-x86_64", "--cuda", "12", "--no-cache"),
            ("redist", "verify", "--prefix", os.path.join(scratch, "p")),
            ("redist", "env", "--prefix", os.path.join(scratch, "p")),
            ("redist", "mirror", "cudnn", "9.27.0", "--dest", os.path.join(scratch, "m"), "--base-url", base,
             "--platform", "linux-x86_64", "--cuda", "13"),
            ("redist", "fetch", "--bogus-option"),
        ]
        for no_color in ("1", None):
            for tool, *args in runs:
                with self.subTest(tool=tool, args=args, NO_COLOR=no_color):
                    res = support.run_tool(tool, *args, env={"NO_COLOR": no_color, "TERM": "xterm-256color"})
                    self.assertNotIn(ESC, res.stdout, support.describe(res))
                    self.assertNotIn(ESC, res.stderr, support.describe(res))
                    self.assertIn(res.returncode, (0, 2, 3), support.describe(res))


if __name__ == "__main__":
    unittest.main()
