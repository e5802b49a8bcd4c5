#!/usr/bin/env python3
"""io16.py DIR...: how fast this machine writes and hashes what an unpack writes (the write tail).
For each DIR: 256 MiB of new files in 1 MiB pwrite()s from 1 thread into one file, from 4 and 8 threads into
one file (disjoint offsets: does the filesystem serialize writers of one inode?) and from 4 and 8 threads into
as many files; then SHA-256 (OpenSSL through hashlib) and a plain memory copy, for scale. Every write starts
after a sync, and the files are removed (untimed) after each case."""
import hashlib, os, sys, threading, time

MiB = 1 << 20
TOTAL = 256 * MiB
block = os.urandom(MiB)


def write_case(d, threads, files):
    paths = [os.path.join(d, f"io-{i}") for i in range(files)]
    fds = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) for p in paths]
    per_thread = TOTAL // threads

    def work(t):
        fd = fds[t % files]
        # threads sharing a file take interleaved 1 MiB slots; the others write their own file from 0
        if files == 1:
            for k in range(t, TOTAL // MiB, threads):
                os.pwrite(fd, block, k * MiB)
        else:
            for k in range(per_thread // MiB):
                os.pwrite(fd, block, k * MiB)

    os.sync()
    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts: t.start()
    for t in ts: t.join()
    dt = time.perf_counter() - t0
    for fd in fds: os.close(fd)
    for p in paths: os.remove(p)
    os.sync()
    return dt


print(f"cpu flags: sha_ni={'sha_ni' in open('/proc/cpuinfo').read()}, {os.cpu_count()} cpus")
for d in sys.argv[1:]:
    os.makedirs(d, exist_ok=True)
    for threads, files in ((1, 1), (4, 1), (8, 1), (4, 4), (8, 8), (1, 1)):
        best = min(write_case(d, threads, files) for _ in range(3))
        print(f"{d}: {threads} thread(s) into {files} file(s): {TOTAL / MiB / best:7.0f} MiB/s (best of 3)", flush=True)
data = os.urandom(64 * MiB)
t0 = time.perf_counter()
for _ in range(4):
    h = hashlib.sha256()
    for i in range(0, len(data), MiB):
        h.update(data[i:i + MiB])
print(f"sha256, one thread: {256 / (time.perf_counter() - t0):.0f} MiB/s")
t0 = time.perf_counter()
for _ in range(4):
    bytearray(data)
print(f"memory copy into fresh memory, one thread: {256 / (time.perf_counter() - t0):.0f} MiB/s")
