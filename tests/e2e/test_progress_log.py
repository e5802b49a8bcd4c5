"""What a running download says, through the real tools, against
tests/fixtures/fault_server.py (throttled with "rate", held with "stall_*"):
off a terminal a line per download at least every 10 s (a stalled one
included) and each component's "done" as soon as it is staged, not at the
commit; Ctrl-C and SIGTERM state the bytes the cache really keeps (measured
here from the cache's files), the next run resumes from them and says so; a
server that dies part-way gets an error that says what is kept; on a
terminal (a pty for stdout and stderr both, replayed through a tiny terminal
emulator) nothing drawn is left behind, a resumed bar starts where the last
run stopped and a finished small download leaves the bars (`sync`)."""

import os
import pty
import re
import signal
import subprocess
import threading
import time
import unittest

import support

LABEL = "9.27.0"
PLATFORM = "linux-x86_64"
CLEAN_ENV = {"REDIST_MIRRORS": None, "REDIST_CACHE_DIR": None, "REDIST_BASE_URL": None}
EXIT_NETWORK = 6
EXIT_INTERRUPTED = 130
ESCAPE = re.compile(r"\x1b\[(\d*)([A-Za-z])")


def human_size(n):
    """The tools' human_size (tools/common/cli.cpp): "17 B", "6.2 KiB", "189 KiB"."""
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    value, unit = float(n), 0
    while value >= 1024 and unit < 4:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{n} B"
    return f"{value:.1f} {units[unit]}" if value < 10 else f"{value:.0f} {units[unit]}"


class TimedTool:
    """A tool whose stdout and stderr lines are timestamped as they arrive
    through the pipes: [(seconds since the start, "out" | "err", line)]."""

    def __init__(self, *args, env=None):
        self.started = time.monotonic()
        self.proc = subprocess.Popen([support.tool_path("redist"), *[str(a) for a in args]],
                                     env=support.tool_env(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        self.lines = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._pump, args=(s, tag), daemon=True)
                         for s, tag in ((self.proc.stdout, "out"), (self.proc.stderr, "err"))]
        for t in self._threads:
            t.start()

    def _pump(self, stream, tag):
        for line in stream:
            with self._lock:
                self.lines.append((time.monotonic() - self.started, tag, line.rstrip("\n")))

    def wait(self, timeout=120):
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for t in self._threads:
                t.join(timeout=5)
            for stream in (self.proc.stdout, self.proc.stderr):
                stream.close()
        return self.proc.returncode

    def first(self, pattern):
        """(seconds, line) of the first line matching `pattern`, or None."""
        for at, _tag, line in self.lines:
            if re.search(pattern, line):
                return at, line
        return None

    def text(self):
        return "\n".join(f"{at:6.2f} {tag} {line}" for at, tag, line in self.lines)


class PtyTool:
    """A tool with one pseudo-terminal as its stdout and stderr (as in an
    interactive shell), `columns` wide; output() is what it wrote there."""

    def __init__(self, *args, columns=100, env=None):
        import fcntl
        import struct
        import termios
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
        self.proc = subprocess.Popen([support.tool_path("redist"), *[str(a) for a in args]],
                                     env=support.tool_env({**(env or {}), "COLUMNS": columns}),
                                     stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
        os.close(slave)
        self._master = master
        self._chunks = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not data:
                break
            self._chunks.append(data)

    def output(self):
        return b"".join(self._chunks).decode(errors="replace")

    def wait(self, timeout=120):
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._thread.join(timeout=5)
            os.close(self._master)
        return self.proc.returncode


def screen(out):
    """The terminal's lines after `out`: a minimal emulator of what the tools
    send (text, \\r, \\n, ESC[nA up, ESC[2K erase the line, ESC[J erase below)."""
    lines, row, col = [""], 0, 0

    def put(text):
        nonlocal col
        line = lines[row].ljust(col)
        lines[row] = line[:col] + text + line[col + len(text):]
        col += len(text)

    pos = 0
    for m in list(ESCAPE.finditer(out)) + [None]:
        text = out[pos:m.start() if m else len(out)]
        for piece in re.split(r"([\r\n])", text):
            if piece == "\r":
                col = 0
            elif piece == "\n":
                row += 1
                if row == len(lines):
                    lines.append("")
            elif piece:
                put(piece)
        if m is None:
            break
        pos = m.end()
        arg, op = m.group(1), m.group(2)
        if op == "A":
            row = max(0, row - int(arg or 1))
        elif op == "K":  # 2: the whole line; none: from the cursor on (the cursor stays)
            lines[row] = "" if arg == "2" else lines[row][:col]
        elif op == "J":  # from the cursor to the end of the screen
            lines[row] = lines[row][:col]
            del lines[row + 1:]
    return [line.rstrip() for line in lines]


class ProgressCase(unittest.TestCase):
    """cudnn 9.27.0 (cudnn, 189 KiB, and cudnn_jit, 16 KiB) from the fault server."""

    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir(cls.__module__ + "." + cls.__name__)
        cls.root = os.path.join(cls.dir, "root")
        support.copy_mirror(os.path.join(cls.root, "base"), products=["cudnn"])
        cls.server = support.FaultServer(cls.root, os.path.join(cls.dir, "server"))
        manifest = support.load_manifest("cudnn", LABEL)
        cls.rec = {c: support.find_artifact(manifest, c, PLATFORM, "cuda12") for c in ("cudnn", "cudnn_jit")}
        cls.art = "/base/cudnn/redist/" + cls.rec["cudnn"]["relative_path"]
        cls.size = int(cls.rec["cudnn"]["size"])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.prefix = os.path.join(self.scratch, "prefix")
        self.cache = os.path.join(self.scratch, "cache")
        self.server.set_faults({})
        self.server.reset()

    def fetch_args(self, components="cudnn", base=None, *extra):
        return ["fetch", "cudnn", LABEL, "--cuda", "12", "--platform", PLATFORM, "--component", components,
                "--prefix", self.prefix, "--base-url", base or self.server.url("/base"), "--cache-dir", self.cache,
                "--connections", "1", "--no-check", *extra]

    def part(self, component="cudnn"):
        return os.path.join(self.cache, "blobs", "sha256", self.rec[component]["sha256"] + ".part")

    def kept_in_cache(self, components):
        """What the cache holds of these archives, from its files: a verified
        blob whole, else its .part (one stream: no resume record)."""
        kept = 0
        for c in components:
            blob = self.blob(c)
            self.assertFalse(os.path.exists(blob + ".part.segments"), "a one-stream download keeps no record")
            kept += os.path.getsize(blob) if os.path.exists(blob) else (
                os.path.getsize(blob + ".part") if os.path.exists(blob + ".part") else 0)
        return kept

    def blob(self, component):
        return os.path.join(self.cache, "blobs", "sha256", self.rec[component]["sha256"])

    def wait_until(self, proc, ready, what, timeout=30):
        """Polls ready() (a file there, a size reached) until it holds; fails
        when the tool exits first or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if ready():
                return
            time.sleep(0.02)
        self.fail(f"{what}: never seen (exit code {proc.poll()})")

    def wait_for_part(self, proc, at_least, verified=(), timeout=30):
        """Until cudnn's .part holds `at_least` bytes, which the server sends
        before it holds back the rest: nothing more arrives, so what the cache
        keeps is settled. `verified`: components whose archive must also be
        in the cache whole (a verified blob) by then."""
        def ready():
            part = self.part()
            return (os.path.exists(part) and os.path.getsize(part) >= at_least
                    and all(os.path.exists(self.blob(c)) for c in verified))
        self.wait_until(proc, ready, f"{at_least} bytes of cudnn in the cache, and {list(verified)} verified",
                        timeout)

    def interrupt_mid_download(self, sig=signal.SIGINT, components="cudnn"):
        """A fetch held after a third of cudnn (the other components in the
        cache whole), stopped by `sig`: its result."""
        n = self.size // 3
        self.server.set_faults({self.art: {"stall_after": n, "stall_seconds": 60}})
        self.server.reset()
        tool = support.BackgroundTool("redist", *self.fetch_args(components), env=CLEAN_ENV)
        try:
            self.wait_for_part(tool.proc, n, verified=[c for c in components.split(",") if c != "cudnn"])
            tool.proc.send_signal(sig)
            res = tool.wait(timeout=30)  # well before the 60 s stall ends
        finally:
            tool.kill()
        self.server.set_faults({})
        self.server.reset()
        return res


class OffTerminal(ProgressCase):
    def test_a_slow_download_is_never_silent_and_each_component_is_done_when_staged(self):
        # cudnn: the first half at a tenth of its size a second (5 s), then
        # nothing for 16 s (a stall), then the rest (5 s): about 26 s.
        # cudnn_jit comes at once.
        self.server.set_faults({self.art: {"rate": self.size / 10, "stall_after": self.size // 2,
                                           "stall_seconds": 16}})
        tool = TimedTool(*self.fetch_args("cudnn,cudnn_jit"), env=CLEAN_ENV)
        self.assertEqual(tool.wait(), 0, tool.text())
        log = tool.text()
        cudnn_done = tool.first(r"^cudnn: done, 189 KiB$")
        jit_done = tool.first(r"^cudnn_jit: done, 16 KiB$")
        summary = tool.first(r"^installed cudnn 9\.27\.0 into ")
        self.assertTrue(cudnn_done and jit_done and summary, log)
        self.assertGreater(cudnn_done[0], 20, "the download must last: " + log)
        # Never silent for long while it lasts: the gaps between lines, from
        # the first line to cudnn's done.
        times = [at for at, _tag, _line in tool.lines if at <= cudnn_done[0]]
        gaps = [b - a for a, b in zip(times, times[1:])]
        self.assertLessEqual(max(gaps), 12, log)
        beats = [(at, line) for at, _tag, line in tool.lines if re.match(r"^cudnn: \S+ \S+ of 189 KiB, ", line)]
        self.assertGreaterEqual(len(beats), 2, log)
        for _at, line in beats:
            self.assertRegex(line, r"^cudnn: \d[\d.]* (B|KiB) of 189 KiB, \d[\d.]* (B|KiB)/s"
                                   r"(, nothing received for \d+ s)?$")
        # The stall is said as one: no bytes, and for how long.
        self.assertTrue(any(re.search(r", 0 B/s, nothing received for 1\d s$", line) for _at, line in beats), log)
        # cudnn_jit is done as soon as it is staged, while cudnn still downloads,
        # not at the commit; cudnn's done comes before the summary.
        self.assertLess(jit_done[0], 5, log)
        self.assertLess(jit_done[0], beats[0][0], log)
        self.assertLess(cudnn_done[0], summary[0] + 0.001, log)
        self.assertEqual(len([1 for _a, _t, line in tool.lines if re.match(r"^cudnn_jit: done", line)]), 1, log)
        self.assertNotIn("\x1b", log)

    def test_interrupt_states_what_the_cache_keeps_and_the_next_run_resumes(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(signal=sig.name):
                support.rm_tree(self.cache)
                support.rm_tree(self.prefix)
                res = self.interrupt_mid_download(sig, "cudnn,cudnn_jit")
                self.assertEqual(res.returncode, EXIT_INTERRUPTED, support.describe(res))
                part = os.path.getsize(self.part())
                self.assertGreater(part, 0)
                kept = self.kept_in_cache(["cudnn", "cudnn_jit"])  # cudnn_jit's verified blob, cudnn's .part
                total = self.size + int(self.rec["cudnn_jit"]["size"])
                lines = [line for line in res.stderr.splitlines() if "interrupted" in line]
                self.assertEqual(lines, [f"redist: interrupted: the prefix is unchanged; {human_size(kept)} of "
                                         f"{human_size(total)} downloaded stay in the cache, run the same command "
                                         "to resume"], support.describe(res))
                self.assertRegex(res.stdout, r"(?m)^cudnn: stopped$")
                self.assertNotRegex(res.stdout, r"(?m)^cudnn: failed$")
                # The next run takes those bytes and says so.
                res = support.run_tool("redist", *self.fetch_args("cudnn,cudnn_jit"), env=CLEAN_ENV, check=0)
                self.assertIn(f"redist: resuming cudnn at {human_size(part)} of {human_size(self.size)}\n",
                              res.stderr)
                log = self.server.log(self.art)
                self.assertEqual([e["range"] for e in log], [f"bytes={part}-"], log)

    def test_only_a_partial_download_kept(self):
        res = self.interrupt_mid_download(signal.SIGINT)
        self.assertEqual(res.returncode, EXIT_INTERRUPTED, support.describe(res))
        part = os.path.getsize(self.part())
        self.assertIn(f"; {human_size(part)} of {human_size(self.size)} downloaded stay in the cache, ", res.stderr)

    def test_nothing_kept_without_a_cache(self):
        n = self.size // 3
        self.server.set_faults({self.art: {"stall_after": n, "stall_seconds": 60}})
        args = [a for a in self.fetch_args() if a not in ("--cache-dir", self.cache)] + ["--no-cache"]
        tool = support.BackgroundTool("redist", *args, env=CLEAN_ENV)
        staging = os.path.join(self.prefix, ".redist", "staging")

        def unpacked():
            # Files unpacked from the first bytes are in the download's stage:
            # the download is under way (and held by the server after n bytes).
            stages = [os.path.join(staging, d) for d in (os.listdir(staging) if os.path.isdir(staging) else ())]
            return any(files for stage in stages if os.path.isdir(stage) for _dir, _subdirs, files in os.walk(stage))

        try:
            self.wait_until(tool.proc, unpacked, "a file unpacked into the stage")
            tool.proc.send_signal(signal.SIGINT)
            res = tool.wait(timeout=30)
        finally:
            tool.kill()
        self.assertEqual(res.returncode, EXIT_INTERRUPTED, support.describe(res))
        self.assertIn("redist: interrupted: the prefix is unchanged; nothing downloaded is kept, run the same "
                      "command to start again\n", res.stderr)

    def test_a_server_that_dies_part_way(self):
        root = self.root
        server = support.FaultServer(root, os.path.join(self.scratch, "server"))
        port = server.port
        n = self.size // 3
        server.set_faults({self.art: {"stall_after": n, "stall_seconds": 60}})
        try:
            tool = support.BackgroundTool("redist", *self.fetch_args(base=server.url("/base")), "--retries", "2",
                                          env=CLEAN_ENV)
            self.wait_for_part(tool.proc, n)
            server.stop()  # mid-body: the connection closes, and nothing answers any more
            res = tool.wait(timeout=60)
        finally:
            tool.kill()
            server.stop()
        self.assertEqual(res.returncode, EXIT_NETWORK, support.describe(res))
        part = os.path.getsize(self.part())
        errors = [line for line in res.stderr.splitlines() if line.startswith("redist: error: ")]
        self.assertEqual(len(errors), 1, support.describe(res))
        self.assertTrue(errors[0].endswith(f"; {human_size(part)} of {human_size(self.size)} downloaded stay in "
                                           "the cache, run the same command to resume"), support.describe(res))
        # Back up: the same command resumes.
        server = support.FaultServer(root, os.path.join(self.scratch, "server2"), port=port)
        try:
            res = support.run_tool("redist", *self.fetch_args(base=server.url("/base")), env=CLEAN_ENV, check=0)
            self.assertIn(f"redist: resuming cudnn at {human_size(part)} of ", res.stderr)
            self.assertEqual(res.returncode, 0, support.describe(res))
        finally:
            server.stop()


class OnTerminal(ProgressCase):
    def assert_nothing_drawn_is_left(self, lines):
        for line in lines:
            self.assertNotRegex(line, r"\[[#-]{5,}\]|\d+% ", lines)

    def test_interrupt_and_resume_leave_no_stale_line(self):
        n = self.size // 3
        self.server.set_faults({self.art: {"stall_after": n, "stall_seconds": 60}})
        tool = PtyTool(*self.fetch_args(), env=CLEAN_ENV)
        self.wait_for_part(tool.proc, n)
        tool.proc.send_signal(signal.SIGINT)
        self.assertEqual(tool.wait(timeout=30), EXIT_INTERRUPTED, tool.output())
        lines = screen(tool.output())
        part = os.path.getsize(self.part())
        self.assertIn(f"redist: interrupted: the prefix is unchanged; {human_size(part)} of {human_size(self.size)} "
                      "downloaded stay in the cache, run the same command to resume", lines)
        self.assert_nothing_drawn_is_left(lines)

        # The rest at a pace that lets the bars be drawn (about 3 s).
        self.server.set_faults({self.art: {"rate": (self.size - part) / 3}})
        self.server.reset()
        tool = PtyTool(*self.fetch_args(), env=CLEAN_ENV)
        self.assertEqual(tool.wait(timeout=60), 0, tool.output())
        out = tool.output()
        lines = screen(out)
        resuming = f"redist: resuming cudnn at {human_size(part)} of {human_size(self.size)}"
        self.assertIn(resuming, lines, lines)
        self.assertTrue(any(re.match(r"installed cudnn 9\.27\.0 into ", line) for line in lines), lines)
        self.assert_nothing_drawn_is_left(lines)
        # Every bar drawn after the resume line starts at the kept bytes, not at 0 %.
        after = out[out.index("resuming cudnn"):]
        percents = [int(p) for p in re.findall(r"cudnn +\[[#-]+\] +(\d+)% ", after)]
        self.assertTrue(percents, out)
        self.assertGreaterEqual(min(percents), part * 100 // self.size, out)

    def test_sync_leaves_no_finished_bar(self):
        project = os.path.join(self.scratch, "redist.toml")
        with open(project, "w") as f:
            f.write(f'[project]\nprefix = "prefix"\nplatforms = ["{PLATFORM}"]\ncuda = "12"\n'
                    f'base-url = "{self.server.url("/base")}"\n\n'
                    f'[products.cudnn]\nversion = "{LABEL}"\ncomponents = ["cudnn", "cudnn_jit"]\n')
        # cudnn takes about 3 s; cudnn_jit (16 KiB) comes at once.
        self.server.set_faults({self.art: {"rate": self.size / 3}})
        tool = PtyTool("sync", "--file", project, "--platform", PLATFORM, "--cache-dir", self.cache, env=CLEAN_ENV)
        self.assertEqual(tool.wait(timeout=60), 0, tool.output())
        out = tool.output()
        frames = [f for f in re.split(r"\r\x1b\[\d+A", out) if "\x1b[2K" in f]
        with_cudnn = [f for f in frames if re.search(r"\x1b\[2Kcudnn +\[", f)]
        self.assertGreater(len(with_cudnn), 3, out)
        # Once cudnn_jit is in, it leaves the bars: the later frames (cudnn
        # still downloading) count it done.
        self.assertNotIn("cudnn_jit", with_cudnn[-1], out)
        self.assertRegex(with_cudnn[-1], r"1 of 2 done", out)
        lines = screen(out)
        self.assert_nothing_drawn_is_left(lines)


if __name__ == "__main__":
    unittest.main()
