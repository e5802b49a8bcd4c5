#!/usr/bin/env python3
"""Capped-link scenario: a CDN that caps every connection.

    python3 bench/capped_link.py --build build [--runs 1] [--connections 1,4,6,8] [--against B]

nginx on 127.0.0.1 serves the single-block cuDNN archive that bench/run.py
builds (run `python3 bench/run.py --prepare` first) with `limit_rate 10m`
per connection. Contenders, one round each per run, order rotating:

  floor            xz -T1 -dc ARCHIVE > /dev/null            (local file)
  N conn + xz      segmented_get URL SIZE --connections N --stdout 1 | xz -T1 -dc
                   (download, in-order reassembly, hash, decode)
  N conn, hash     segmented_get URL SIZE --connections N   (download + hash)
  fetch, N conn    redist fetch --manifest URL --connections N --no-cache
                   (the real install: download, hash, decode, unpack, commit)
  fetch, default   the same without --connections: one stream, which goes on
                   in ranges once it is seen to keep the decoder waiting

segmented_get (tests/tools/segmented_get.cpp, target `segmented_get`) links
lib/segmented_download and hashes the in-order stream; each run checks the
SHA-256 against the archive's. Goal: fetch with the default connections
<= 1.15x the floor.

Note on nginx's limiter (1.22 here): under limit_rate each send is at most
sendfile_max_chunk (2 MiB by default since 1.21.4), after which the
connection pauses for the bytes sent / rate (0.2 s at 10 MiB/s). A request
gets its first 2 MiB at once and the rest in 2 MiB steps every 0.2 s
(measured: 4 MiB chunks finished 0.2 s after their request, 4.3 MiB ones
0.6 s after). The chunk plan (segment_ranges.cpp plan_chunks: 4..32 MiB, about
min(offset, size - offset) / N, whole multiples of 2 MiB) keeps any chunk
from waiting a pause for a few last bytes. The "requests" column says how
many requests a run made.

With --against B (a build tree of the code before a change), B's redist
fetch runs beside each fetch contender in the same rounds, and "x B" is the
median of the per-round ratios.

Python 3 standard library, nginx, xz. Prints a table and, with --json FILE,
writes the samples.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run as bench  # noqa: E402  (timed(), ENV, BenchError, nginx_fixture: start_on_free_port, terminate)

DEFAULT_ARCHIVES = "/var/tmp/redist-bench/archives"


def find_archive(root: str) -> tuple[str, str]:
    """The single-block archive bench/run.py cached, and its SHA-256."""
    for meta_path in sorted(glob.glob(os.path.join(root, "*", "meta.json")), key=os.path.getmtime, reverse=True):
        with open(meta_path) as f:
            meta = json.load(f)
        single = meta.get("single") or {}
        path = os.path.join(os.path.dirname(meta_path), single.get("file", ""))
        if single.get("file") and os.path.isfile(path):
            return path, single.get("sha256", "")
    raise bench.BenchError(f"no single-block archive under {root}: run `python3 bench/run.py --prepare`")


class CappedNginx:
    """nginx serving one directory with limit_rate per connection."""

    def __init__(self, scratch: str, root: str, rate: str):
        self.dir, self.root, self.rate = os.path.join(scratch, "nginx"), root, rate
        self.pid = None

    def start(self) -> str:
        os.makedirs(os.path.join(self.dir, "temp"), exist_ok=True)
        user = "user root;\n" if os.geteuid() == 0 else ""
        t = os.path.join(self.dir, "temp")
        conf = os.path.join(self.dir, "nginx.conf")

        def conf_for_port(port: int) -> str:
            with open(conf, "w") as f:
                f.write(f"""{user}worker_processes 1;
daemon on;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    default_type application/octet-stream;
    log_format bytes '$status $body_bytes_sent "$http_range"';
    access_log {self.dir}/access.log bytes;
    client_body_temp_path {t}/cb; proxy_temp_path {t}/p; fastcgi_temp_path {t}/f;
    uwsgi_temp_path {t}/u; scgi_temp_path {t}/s;
    sendfile on;
    server_tokens off;
    server {{
        listen 127.0.0.1:{port};
        root {self.root};
        limit_rate {self.rate};
    }}
}}
""")
            return conf

        try:
            port = bench.nginx_fixture.start_on_free_port(self.dir, f"{self.dir}/error.log", conf_for_port)
        except RuntimeError as e:
            raise bench.BenchError(str(e)) from None
        self.pid = bench.nginx_fixture.wait_pid_file(f"{self.dir}/nginx.pid")
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if self.pid is not None:
            pid, self.pid = self.pid, None
            bench.nginx_fixture.terminate(pid)


def run_driver(cmd: str) -> tuple[float, dict]:
    """Times a shell pipeline whose segmented_get prints its JSON to stderr or stdout."""
    t0 = time.perf_counter()
    res = subprocess.run(["/bin/sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=bench.ENV)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise bench.BenchError(f"failed (exit {res.returncode}): {cmd}\n{res.stderr[-2000:]}")
    for line in (res.stdout + "\n" + res.stderr).splitlines():
        if line.startswith("{\"sha256\""):
            return wall, json.loads(line)
    raise bench.BenchError(f"no result line from: {cmd}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="build tree with bin/segmented_get")
    ap.add_argument("--archives", default=DEFAULT_ARCHIVES)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--connections", default="1,4,6,8")
    ap.add_argument("--rate", default="10m")
    ap.add_argument("--json", default=None)
    ap.add_argument("--against", default=None,
                    help="a second build tree (the code before a change): its redist fetch runs beside, "
                         "and each fetch row gets a ratio to B's")
    ap.add_argument("--fetch-connections", default="default,1,6",
                    help="redist fetch contenders: N for --connections N, 'default' for none given (0: none)")
    args = ap.parse_args(argv)

    driver = os.path.abspath(os.path.join(args.build, "bin", "segmented_get"))
    if not os.access(driver, os.X_OK):
        raise bench.BenchError(f"{driver} missing: cmake --build {args.build} --target segmented_get")
    archive, sha = find_archive(args.archives)
    size = os.path.getsize(archive)
    conns = [int(c) for c in args.connections.split(",")]
    scratch = tempfile.mkdtemp(prefix="redist-capped-")
    # What nginx serves: the archive (linked) and a manifest for it.
    served = os.path.join(scratch, "www")
    os.makedirs(served)
    os.symlink(archive, os.path.join(served, os.path.basename(archive)))
    with open(os.path.join(served, "redistrib_9.19.0.json"), "w") as f:
        json.dump({"release_label": "9.19.0", "release_product": "cudnn",
                   "cudnn": {"name": "cuDNN", "license": "cudnn", "version": "9.19.0",
                             "linux-x86_64": {"cuda13": {"relative_path": os.path.basename(archive),
                                                         "sha256": sha or hashlib.sha256(open(archive, "rb").read()).hexdigest(),
                                                         "md5": "0" * 32, "size": str(size)}}}}, f)
    redist = os.path.abspath(os.path.join(args.build, "bin", "redist"))
    builds = [("", redist)]
    if args.against:
        redist_b = os.path.abspath(os.path.join(args.against, "bin", "redist"))
        if not os.access(redist_b, os.X_OK):
            raise bench.BenchError(f"{redist_b} missing")
        builds.append((" (B)", redist_b))
    nginx = CappedNginx(scratch, served, args.rate)
    results: dict[str, list] = {}
    load = os.getloadavg()
    try:
        url = nginx.start() + "/" + os.path.basename(archive)
        contenders = [("floor: xz -T1 -dc", f"xz -T1 -dc {archive} > /dev/null", False)]
        for n in conns:
            get = f"{driver} {url} {size} --temp {scratch} --connections {n}"
            contenders.append((f"{n} conn + xz -T1 -dc", f"{get} --stdout 1 | xz -T1 -dc > /dev/null", True))
        for n in conns:
            if n > 1:
                contenders.append((f"{n} conn, hash only", f"{driver} {url} {size} --temp {scratch} --connections {n}", True))
        for n in [c.strip() for c in args.fetch_connections.split(",") if c.strip() not in ("", "0")]:
            for tag, tool in builds:
                prefix = os.path.join(scratch, f"prefix{n}{'B' if tag else ''}")
                # The default: one stream, split once it is seen to starve the decoder.
                flag = "" if n == "default" else f"--connections {int(n)}"
                name = ("fetch, default" if n == "default" else f"fetch, {n} conn") + tag
                contenders.append((name, f"rm -rf {prefix} && {tool} fetch --manifest "
                                   f"{url.rsplit('/', 1)[0]}/redistrib_9.19.0.json --prefix {prefix} --no-cache "
                                   f"--platform linux-x86_64 --cuda 13 {flag} --no-check --quiet", False))
        for r in range(args.runs):
            order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
            for name, cmd, is_driver in order:
                if is_driver:
                    wall, out = run_driver(cmd)
                    if sha and out["sha256"] != sha:
                        raise bench.BenchError(f"{name}: sha256 {out['sha256']} != {sha}")
                else:
                    wall, out = bench.timed(cmd, shell=True).wall, {}
                results.setdefault(name, []).append({"wall": wall, **out})
                print(f"  {name:28s} {wall:7.2f} s {out.get('requests', '')}", flush=True)
    finally:
        nginx.stop()
        subprocess.run(["rm", "-rf", scratch])
    floor = statistics.median(s["wall"] for s in results["floor: xz -T1 -dc"])
    print(f"\ncapped link: {os.path.basename(archive)} ({size / 2**20:.0f} MiB), limit_rate {args.rate} per "
          f"connection, load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs")
    print(f"{'contender':28s} {'median s':>9s} {'x floor':>8s} {'requests':>9s} {'x B':>6s}")
    for name, samples in results.items():
        wall = statistics.median(s["wall"] for s in samples)
        reqs = samples[-1].get("requests", "")
        # Paired: the median of per-round ratios to the same contender of B.
        against = results.get(name + " (B)")
        ratio = f"{statistics.median(a['wall'] / b['wall'] for a, b in zip(samples, against)):6.3f}" if against else ""
        print(f"{name:28s} {wall:9.2f} {wall / floor:8.2f} {reqs!s:>9s} {ratio:>6s}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"archive": archive, "size": size, "rate": args.rate, "load": load,
                       "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except bench.BenchError as e:
        print(f"capped_link: {e}", file=sys.stderr)
        sys.exit(1)
