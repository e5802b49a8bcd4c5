#!/usr/bin/env python3
"""watch16.py PREFIX CACHE CMD...: when each file of an install is created, stops growing and is finished.
Runs CMD (a cold cudnn-fetch into PREFIX) and polls PREFIX/.redist/staging/* every millisecond or so: a file
appears when the extractor creates it (0600), grows as the writers' pwrite()s land, and gets its own mode when
its last write and its SHA-256 are done (finalize: fchmod). Prints, per file of 8 MiB or more, those three
times since the command started, next to the command's own --profile lines (which count from its budget)."""
import os, stat, subprocess, sys, time, shutil

prefix, cache, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
for d in (prefix, cache):
    shutil.rmtree(d, ignore_errors=True)
os.sync()
seen = {}  # rel path -> [created, last growth, size, finished]
t0 = time.perf_counter()
p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
staging = os.path.join(prefix, ".redist", "staging")
while p.poll() is None:
    now = time.perf_counter() - t0
    try:
        stages = [os.path.join(staging, s) for s in os.listdir(staging)]
    except OSError:
        stages = []
    for s in stages:
        for sub in ("lib", "include", ""):
            try:
                entries = list(os.scandir(os.path.join(s, sub)))
            except OSError:
                continue
            for e in entries:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                rec = seen.setdefault(os.path.join(sub, e.name), [now, now, 0, None])
                if st.st_size != rec[2]:
                    rec[1], rec[2] = now, st.st_size
                if rec[3] is None and stat.S_IMODE(st.st_mode) != 0o600:
                    rec[3] = now
    time.sleep(0.0005)
end = time.perf_counter() - t0
err = p.stderr.read()
print(f"exit {p.returncode} after {end:.3f} s")
print("\n".join(l for l in err.splitlines() if l.startswith("profile:")))
print("| file | MiB | created | last growth | finished |")
for rel, (c, g, size, f) in sorted(seen.items(), key=lambda kv: kv[1][0]):
    if size >= 8 << 20:
        print(f"| {rel} | {size / 1048576:.0f} | {c:.3f} | {g:.3f} | {'-' if f is None else f'{f:.3f}'} |")
