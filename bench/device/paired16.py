#!/usr/bin/env python3
"""paired16.py ROUNDS BIN [BIN_B]: the two 16-core scenarios in paired rounds, after
../shared/device/e2e.sh has prepared /tmp/ge (the cuDNN mirror on :18080, the 14-component mirror on :18081).

race.py and multi.py take medians of 3, and one machine's runs spread by 1-2 s on a ~4 s install: too few to
settle a 1.10x goal. Here every round runs the floor and each contender back to back, in an order that rotates
from round to round, and the result is the median of the per-round ratios (each contender against the floor of
its own round) besides the plain medians. With BIN_B (a second build's bin/), both builds run in every round:
an A/B on one machine at one time.

Two more contenders per scenario separate what the goal's floor leaves out: "floor + files" decodes the same way
and writes the files (`xz -T0 -dc | tar -x`, no download, no hash), and "redist, file://" installs from the same
mirror as a directory, without python's http.server in the way. PAIRED_AB_ONLY=1 in the environment leaves
out every contender but the floor and the builds (more rounds of an A/B in the same time). PAIRED_VARIANTS and
PAIRED_SCENARIOS (below) add option variants of the first build and pick scenarios.
"""
import os, shutil, statistics, subprocess, sys, time

ROUNDS = int(sys.argv[1])
BINS = sys.argv[2:]
W = "/tmp/ge"
RL = f"{W}/carry-libs"
ENV = dict(os.environ, LD_LIBRARY_PATH=RL)
CUDNN_URL, CUDA_URL = "http://127.0.0.1:18080", "http://127.0.0.1:18081"


def run(cmd, shell=False):
    """(seconds, peak RSS MiB, CPU seconds: user + sys) of one command; a failure is printed and counts as NaN."""
    t = time.perf_counter()
    # The carried libraries are for our tools only: the system's curl does not load with them.
    p = subprocess.Popen(cmd, shell=shell, executable="/bin/bash" if shell else None, env=None if shell else ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t
    if status:
        print("FAILED", cmd, p.stderr.read().decode()[-500:], flush=True)
        return float("nan"), 0.0, float("nan")
    return dt, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def fresh(*dirs):
    """Removes what a previous run wrote, then syncs, untimed: a run that follows another must not pay for the
    writeback of the 2 GiB that one left dirty (back-to-back installs did, in the first paired run)."""
    for d in dirs:
        if os.path.isfile(d):
            os.remove(d)
        shutil.rmtree(d, ignore_errors=True)
    os.sync()


cudnn_root = f"{W}/www/cudnn/redist"
cudnn_version = next(f[len("redistrib_"):-len(".json")] for f in os.listdir(cudnn_root) if f.startswith("redistrib_"))
archive = next(os.path.join(d, f) for d, _, fs in os.walk(f"{cudnn_root}/cudnn") for f in fs)
archive_url = f"{CUDNN_URL}/cudnn/redist/" + os.path.relpath(archive, cudnn_root)
cuda_root = f"{W}/m/www/cuda/redist"
cuda_archives = sorted(os.path.join(d, f) for d, _, fs in os.walk(cuda_root) for f in fs if f.endswith(".tar.xz"))


def one_archive(bin_dir, base_url=CUDNN_URL, extra=(), root=W):
    return lambda: (fresh(f"{root}/pp", f"{root}/pc"), run([f"{bin_dir}/cudnn-fetch", cudnn_version, "--base-url",
                    base_url, "--prefix", f"{root}/pp", "--cache-dir", f"{root}/pc", "--cuda", "13", "--platform",
                    "linux-x86_64", "--quiet", *extra]))[1]


def components(bin_dir, base_url=CUDA_URL, extra=()):
    return lambda: (fresh(f"{W}/mp", f"{W}/mc"), run([f"{bin_dir}/redist", "fetch", "cuda", "13.9.9", "--base-url",
                    base_url, "--prefix", f"{W}/mp", "--cache-dir", f"{W}/mc", "--platform", "linux-x86_64",
                    "--quiet", *extra]))[1]


scenarios = {
    "one archive": {
        "floor: xz -T0 -dc": lambda: (os.sync(), run(f"xz -T0 -dc {archive} > /dev/null", True))[1],
        "curl | tee sha256sum | tar -I 'xz -T0'": lambda: (fresh(f"{W}/s"), run(
            f"mkdir -p {W}/s && cd {W}/s && curl -s {archive_url} | tee >(sha256sum > sum) | tar -I 'xz -T0' -xf -",
            True))[1],
        "floor + files: xz -T0 -dc | tar -x": lambda: (fresh(f"{W}/fx"), run(
            f"mkdir -p {W}/fx && cd {W}/fx && xz -T0 -dc {archive} | tar -xf -", True))[1],
        "redist, file://": one_archive(BINS[0], f"file://{W}/www"),
    },
    "14 components": {
        "floor: all decoded at once": lambda: (os.sync(), run(
            f"printf '%s\\n' {' '.join(cuda_archives)} | xargs -P16 -n1 xz -T0 -dc > /dev/null", True))[1],
        "floor + files: each | tar -x, all at once": lambda: (fresh(f"{W}/fx"), run(
            f"printf '%s\\n' {' '.join(cuda_archives)} | xargs -P16 -I{{}} sh -c "
            f"'d={W}/fx/$(basename {{}}); mkdir -p $d && xz -T0 -dc {{}} | tar -xf - -C $d'", True))[1],
        "redist, file://": components(BINS[0], f"file://{W}/m/www"),
    },
}
if os.environ.get("PAIRED_AB_ONLY"):  # an A/B with more rounds in the same time: the floor and the builds only
    for contenders in scenarios.values():
        for name in list(contenders)[1:]:
            del contenders[name]
for i, b in enumerate(BINS):
    name = "redist" if len(BINS) == 1 else f"redist {'AB'[i]} ({b})"
    scenarios["one archive"][name] = one_archive(b)
    scenarios["14 components"][name] = components(b)

# PAIRED_TAIL=1: where one archive's time goes beyond the floor. The same decode into one file (the write
# alone), `xz | tar` and redist with the tree on tmpfs (/dev/shm: no disk filesystem), and the first build with
# fewer pool threads than cores (room beside the decoders) or a larger memory budget (no waits at the gate).
if os.environ.get("PAIRED_TAIL"):
    shm = "/dev/shm/ge"
    one = scenarios["one archive"]
    one["xz -T0 -dc > one file"] = lambda: (fresh(f"{W}/x.tar"), run(f"xz -T0 -dc {archive} > {W}/x.tar", True))[1]
    one["floor + files on tmpfs"] = lambda: (fresh(f"{shm}/fx"), run(
        f"mkdir -p {shm}/fx && cd {shm}/fx && xz -T0 -dc {archive} | tar -xf -", True))[1]
    one["redist, file://, tree and cache on tmpfs"] = one_archive(BINS[0], f"file://{W}/www", root=shm)
    for variant in ("--threads 10", "--threads 12", "--max-memory 4GiB"):
        one[f"redist {variant}"] = one_archive(BINS[0], extra=variant.split())

# PAIRED_VARIANTS="--jobs 4;--jobs 8": more 14-component contenders, the first build with those options;
# PAIRED_ONE_VARIANTS="--max-memory 4GiB": the same for one archive (cudnn-fetch).
for variant in filter(None, os.environ.get("PAIRED_VARIANTS", "").split(";")):
    scenarios["14 components"][f"redist {variant}"] = components(BINS[0], extra=variant.split())
for variant in filter(None, os.environ.get("PAIRED_ONE_VARIANTS", "").split(";")):
    scenarios["one archive"][f"redist {variant}"] = one_archive(BINS[0], extra=variant.split())
# PAIRED_SCENARIOS="14 components": only the scenarios named (comma-separated).
if os.environ.get("PAIRED_SCENARIOS"):
    keep = os.environ["PAIRED_SCENARIOS"].split(",")
    scenarios = {k: v for k, v in scenarios.items() if k in keep}
for scenario, contenders in scenarios.items():
    names = list(contenders)
    results = {n: [] for n in names}
    floor_name = names[0]
    for rnd in range(ROUNDS):
        shift = rnd % len(names)  # rotate who runs first: a warm or cold page cache favours nobody
        for n in names[shift:] + names[:shift]:
            results[n].append(contenders[n]())
    print(f"\n== {scenario}: {os.cpu_count()} cores, {ROUNDS} paired rounds")
    print("| contender | median s | runs | median of per-round ratios | ratio range | peak RSS MiB (max) | floor's RSS x "
          "| median CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    floors = [t for t, _, _ in results[floor_name]]
    floor_rss = max(r for _, r, _ in results[floor_name])
    for n in names:
        times = [t for t, _, _ in results[n]]
        ratios = [t / f for t, f in zip(times, floors)]
        rss = max(r for _, r, _ in results[n])
        cpu = statistics.median(c for _, _, c in results[n])
        print(f"| {n} | {statistics.median(times):.2f} | {' '.join(f'{t:.2f}' for t in times)} | "
              f"{statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f} | {rss:.0f} | "
              f"{rss / floor_rss:.2f} | {cpu:.2f} |", flush=True)
