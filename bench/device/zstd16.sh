#!/bin/bash
# zstd16.sh (GPU machine, repo root, .carry/ carried, after e2e.sh prepared /tmp/ge/www): the fleet case on
# 16 cores. `redist mirror --recompress zstd` copies the real cuDNN release (the multi-block archive e2e.sh
# packed) into a directory served on loopback; then, alternating in the same 3 rounds, medians shown:
#   cudnn-fetch from that mirror (unreachable base URL; the receipt must name the copy), and from the same
#   directory as a file:// mirror (no HTTP server on the same cores),
#   xz -T0 -dc of the original (the goal's floor: <= 0.25x), xz -T1 -dc of it (info),
#   zstd -dc of the copy (info: the floor with the copy), and the verification floor (the copy's and the
#   decoded tar's SHA-256, no file written: what a copy recorded without a tree or a hash list must check), one
#   SHA-256 pass over the decoded tar alone, and one over the copy (the passes a copy recorded with its tree no
#   longer makes: what it unpacks to is checked by the files' own digests, which the receipt needs anyway);
#   and the same install pinned to two cores (taskset -c 0,1) against xz -T1 -dc there.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p $OUT; exec > >(tee $OUT/zstd16.log) 2>&1
C=$PWD/.carry; W=/tmp/ge; RL=$W/carry-libs; B=$C/bin; U=http://127.0.0.1:18080
export LD_LIBRARY_PATH=$RL:$C/zstd-libs
V=$(ls $W/www/cudnn/redist/ | sed -n 's/^redistrib_\(.*\)\.json$/\1/p' | head -1)
echo "== zstd mirror of cudnn $V ($(nproc) cores)"
# The operator's key signs the copies' records; the runners trust its public half (a copy is used only then).
openssl genpkey -algorithm ed25519 -out $W/zm.key && openssl pkey -in $W/zm.key -pubout -out $W/zm.pub || exit 1
export REDIST_TRUSTED_KEYS=$W/zm.pub
rm -rf $W/zm; s=$(date +%s.%N)
$B/redist mirror cudnn $V --base-url $U --to $W/zm --platform linux-x86_64 --cuda 13 --recompress zstd --sign-key $W/zm.key --quiet || exit 1
echo "mirror --recompress zstd took $(awk -v a=$s -v b=$(date +%s.%N) 'BEGIN{print b-a}') s"
(cd $W/zm && setsid python3 -m http.server 18082 --bind 127.0.0.1 >/dev/null 2>&1 &); sleep 1
python3 - "$W" "$B" "$V" <<'PY'
import json, os, shutil, statistics, subprocess, sys, time
W, B, V = sys.argv[1:4]
redist = f"{W}/zm/cudnn/redist"
orig = next(os.path.join(dp, f) for dp, _, fs in os.walk(f"{W}/www/cudnn/redist") for f in fs if f.endswith(".tar.xz"))
copy = json.load(open(f"{redist}/recompressed_{V}.json"))["copies"][0]
copy_path = os.path.join(redist, copy["relative_path"])
print(f"original {os.path.getsize(orig) / 2**20:.1f} MiB, copy {os.path.getsize(copy_path) / 2**20:.1f} MiB")
def fresh():
    for d in (f"{W}/zp", f"{W}/zc"):
        shutil.rmtree(d, ignore_errors=True)
fetch = f"{B}/cudnn-fetch {V} --prefix {W}/zp --cache-dir {W}/zc --mirror http://127.0.0.1:18082 --base-url http://127.0.0.1:9/x --cuda 13 --platform linux-x86_64 --quiet"
fresh(); subprocess.run(fetch, shell=True, check=True)
used = subprocess.run(["grep", "-rlq", copy["sha256"], f"{W}/zp/.redist"]).returncode == 0
print("receipt names the copy:", used)
local = fetch.replace("--mirror http://127.0.0.1:18082", f"--mirror file://{W}/zm")
cs = {"cudnn-fetch from the zstd copy": (fresh, fetch),
      "cudnn-fetch, copy from file://": (fresh, local),
      "xz -T0 -dc original": (lambda: None, f"xz -T0 -dc {orig} > /dev/null"),
      "xz -T1 -dc original": (lambda: None, f"xz -T1 -dc {orig} > /dev/null"),
      "zstd -dc copy": (lambda: None, f"{B}/zstd -dc {copy_path} > /dev/null"),
      **({"B: cudnn-fetch from the zstd copy": (fresh, fetch.replace(f"{B}/cudnn-fetch", f"{B}-b/cudnn-fetch")),
          "B: cudnn-fetch, copy from file://": (fresh, local.replace(f"{B}/cudnn-fetch", f"{B}-b/cudnn-fetch"))}
         if os.path.isdir(f"{B}-b") else {}),
      # The checks a verified install cannot skip, before any file is written:
      # the copy's SHA-256 beside the decode, and the tar's, one sequential pass.
      "verification floor": (lambda: None, f"openssl dgst -sha256 {copy_path} > /dev/null & "
                             f"{B}/zstd -dc {copy_path} | openssl dgst -sha256 > /dev/null; wait"),
      # tar_sha256 is one SHA-256 pass over the whole tar (a copy without a hash list).
      "one SHA-256 pass over the tar": (lambda: None, f"openssl dgst -sha256 {W}/copy.tar > /dev/null"),
      # The copy's own SHA-256: what a copy with a hash list no longer computes.
      "one SHA-256 pass over the copy": (lambda: None, f"openssl dgst -sha256 {copy_path} > /dev/null"),
      # Two cores of the same machine.
      "2 cores: cudnn-fetch from the zstd copy": (fresh, f"taskset -c 0,1 {fetch}"),
      "2 cores: xz -T1 -dc original": (lambda: None, f"taskset -c 0,1 xz -T1 -dc {orig} > /dev/null"),
      **({"2 cores: B: cudnn-fetch from the zstd copy":
          (fresh, f"taskset -c 0,1 " + fetch.replace(f"{B}/cudnn-fetch", f"{B}-b/cudnn-fetch"))}
         if os.path.isdir(f"{B}-b") else {})}
subprocess.run(f"{B}/zstd -dcf {copy_path} -o {W}/copy.tar -q", shell=True, check=True)
res = {k: [] for k in cs}
for r in range(3):
    names = list(cs)[r % len(cs):] + list(cs)[:r % len(cs)]
    for k in names:
        prep, cmd = cs[k]
        prep(); subprocess.run(f"cat {orig} {copy_path} {W}/copy.tar > /dev/null", shell=True)
        t = time.monotonic(); subprocess.run(cmd, shell=True, check=True); res[k].append(time.monotonic() - t)
med = {k: statistics.median(v) for k, v in res.items()}
for k, v in res.items():
    print(f"{k:32s} median {med[k]:.3f} s  runs {' '.join(f'{x:.3f}' for x in v)}")
ours = med["cudnn-fetch from the zstd copy"]
print(f"ratio vs xz -T0 -dc: {ours / med['xz -T0 -dc original']:.3f}x (goal <= 0.25x)")
print(f"ratio vs xz -T1 -dc: {ours / med['xz -T1 -dc original']:.3f}x (info)")
print(f"ratio vs zstd -dc:   {ours / med['zstd -dc copy']:.3f}x (info)")
print(f"one SHA-256 pass over the tar vs xz -T0 -dc: {med['one SHA-256 pass over the tar'] / med['xz -T0 -dc original']:.3f}x")
print(f"one SHA-256 pass over the copy vs xz -T0 -dc: {med['one SHA-256 pass over the copy'] / med['xz -T0 -dc original']:.3f}x")
two = med["2 cores: cudnn-fetch from the zstd copy"]
print(f"2 cores: ratio vs xz -T1 -dc: {two / med['2 cores: xz -T1 -dc original']:.3f}x (goal <= 0.12x)")
if "2 cores: B: cudnn-fetch from the zstd copy" in med:
    b2 = med["2 cores: B: cudnn-fetch from the zstd copy"]
    print(f"2 cores: B: ratio vs xz -T1 -dc: {b2 / med['2 cores: xz -T1 -dc original']:.3f}x, A/B {two / b2:.3f}")
print(f"verification floor vs xz -T0 -dc: {med['verification floor'] / med['xz -T0 -dc original']:.3f}x, "
      f"cudnn-fetch vs it: {ours / med['verification floor']:.3f}x")
ours = med["cudnn-fetch, copy from file://"]
print(f"file:// mirror: ratio vs xz -T0 -dc: {ours / med['xz -T0 -dc original']:.3f}x, vs zstd -dc: {ours / med['zstd -dc copy']:.3f}x")
for k in [k for k in med if k.startswith("B: ")]:
    print(f"{k}: ratio vs xz -T0 -dc {med[k] / med['xz -T0 -dc original']:.3f}x (A/B: pack16.sh's second build)")
PY
fresh_rss() { rm -rf $W/zp $W/zc; }
fresh_rss; /usr/bin/time -f "cold from the copy with --profile: wall %e s, peak RSS %M KiB" $B/cudnn-fetch $V --prefix $W/zp --cache-dir $W/zc --mirror http://127.0.0.1:18082 --base-url http://127.0.0.1:9/x --cuda 13 --platform linux-x86_64 --quiet --profile
# The server inherited the log's pipe (bash keeps the process substitution's fd open in children): stop it, or
# tee, and whoever reads the output, waits for it.
pkill -f "http.server 18082" || true
