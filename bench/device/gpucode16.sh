#!/bin/bash
# gpucode16.sh (GPU machine, repo root, .carry/ from ../shared/device/pack.sh, plus the scripts
# copied into it): the `gpu-code` check of `redist check` against the real GPU.
#  1. the image's cuDNN (pip wheel, else /usr/local/cuda/lib64), packed the NVIDIA way and installed
#     with cudnn-fetch: `redist check` (full, then --quick) must pass, with code for this GPU in
#     every library that has a fatbin;
#  2. the fatbin lists the check reads must equal cuobjdump's --list-elf / --list-ptx, per library;
#  3. a library built with nvcc for sm_80 only (and one for sm_80 + sm_90), installed from a small
#     generated release: the sm_80 one is reported, the other not; a program built the same way
#     shows what the failure is on this GPU.
# Also runs here (no GPU): then pass GPUCODE_CC=9.0 to judge for a given compute capability.
# Everything goes to $OUT/gpucode16.log.
set -u; OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; exec > >(tee "$OUT/gpucode16.log") 2>&1
C=${CARRY:-$PWD/.carry}; W=${GPUCODE_WORK:-/tmp/gg}; rm -rf "$W"; mkdir -p "$W/www"
tar -C "$W" -xJf "$C/libs.tar.xz"; RL=$W/carry-libs; B=$C/bin
LDSO=$(ls /lib64/ld-linux-x86-64.so.2)
t() { local tool=$1; shift; "$LDSO" --library-path "$RL" "$B/$tool" "$@"; }
CCARG=(); [ -n "${GPUCODE_CC:-}" ] && CCARG=(--compute-capability "$GPUCODE_CC")
export PATH=$PATH:/usr/local/cuda/bin
echo "== host: $(nproc) cores; $(nvidia-smi -L 2>/dev/null | head -1); cuobjdump: $(command -v cuobjdump || echo none)"

# ---- 1. the real cuDNN --------------------------------------------------------
PC=$(python3 -c "import importlib.util as u; print(list(u.find_spec('nvidia.cudnn').submodule_search_locations)[0])" 2>/dev/null)
[ -f "$PC/include/cudnn_version.h" ] || PC=/usr/local/cuda
LIBDIR=$PC/lib; [ -e "$LIBDIR/libcudnn.so.9" ] || LIBDIR=$PC/lib64
V=$(awk '/define CUDNN_MAJOR/{a=$3}/define CUDNN_MINOR/{b=$3}/define CUDNN_PATCHLEVEL/{c=$3}END{print a"."b"."c}' "$PC/include/cudnn_version.h")
top=cudnn-linux-x86_64-$V.1_cuda13-archive; A=$W/src/$top; mkdir -p "$A/lib" "$A/include"
cp -a "$PC"/include/cudnn*.h "$A/include/"; echo "license placeholder" > "$A/LICENSE"
for f in "$LIBDIR"/libcudnn*.so.9; do b=$(basename "$f" .so.9); cp -L "$f" "$A/lib/$b.so.$V"; ln -s "$b.so.$V" "$A/lib/$b.so.9"; ln -s "$b.so.9" "$A/lib/$b.so"; done
manifest() {  # manifest ROOT REL LABEL PRODUCT COMPONENT VERSION VARIANT
  python3 - "$@" <<'PY'
import hashlib, json, os, sys
root, rel, label, product, comp, version, variant = sys.argv[1:]
p = os.path.join(root, rel); h = hashlib.sha256(); m = hashlib.md5()
with open(p, "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""): h.update(b); m.update(b)
rec = {"relative_path": rel, "sha256": h.hexdigest(), "md5": m.hexdigest(), "size": str(os.path.getsize(p))}
json.dump({"release_label": label, "release_product": product, comp: {"name": comp, "license": "test", "version": version,
  "linux-x86_64": {variant: rec} if variant else rec}}, open(os.path.join(root, f"redistrib_{label}.json"), "w"))
PY
}
rel=cudnn/linux-x86_64/$top.tar.xz; mkdir -p "$W/www/cudnn/redist/cudnn/linux-x86_64"
tar -C "$W/src" -cf - "$top" | xz -T0 -1 > "$W/www/cudnn/redist/$rel"
manifest "$W/www/cudnn/redist" "$rel" "$V" cudnn cudnn "$V.1" cuda13
P=$W/cudnn
t cudnn-fetch "$V" --base-url "file://$W/www" --prefix "$P" --cuda 13 --platform linux-x86_64 --no-cache --quiet --no-check || exit 1
echo "== 1. redist check (full) on cuDNN $V"
t redist check --prefix "$P" "${CCARG[@]}" | grep -E "gpu-code|gpu:|driver|libraries \("; echo "check rc=${PIPESTATUS[0]}"
echo "== 1b. redist check --quick, 3 runs: the report's seconds"
for i in 1 2 3; do t redist check --quick --json --prefix "$P" "${CCARG[@]}" | python3 -c "
import json,sys; d=json.load(sys.stdin); g=[f for f in d['findings'] if f['check']=='gpu-code']
print('quick: ok=%s seconds=%.3f gpu-code findings=%d (%s)' % (d['ok'], d['seconds'], len(g), ', '.join(sorted(set(f['severity'] for f in g)))))"; done

# ---- 2. our fatbin lists against cuobjdump's -----------------------------------
echo "== 2. fatbin lists: redist check against cuobjdump"
t redist check --quick --json --prefix "$P" "${CCARG[@]}" > "$W/quick.json"
if command -v cuobjdump >/dev/null; then
  python3 - "$W/quick.json" "$P" <<'PY'
import json, os, re, subprocess, sys
doc = json.load(open(sys.argv[1])); prefix = sys.argv[2]; seen = set(); bad = 0
for f in doc["findings"]:
    if f["check"] != "gpu-code" or f["path"] in seen: continue
    seen.add(f["path"])
    m = re.search(r"carries (.*?)\)?$", f["message"]); text = m.group(1) if m else ""
    ours_sass = set(re.findall(r"\b(sm_\d+[af]?)\b", text.split("PTX")[0]))
    ours_ptx = set(a.replace("compute_", "sm_") for a in re.findall(r"\b(compute_\d+[af]?)\b", text))
    lib = os.path.join(prefix, f["path"])
    def listed(flag, ext):
        out = subprocess.run(["cuobjdump", flag, lib], capture_output=True, text=True).stdout
        return set(re.findall(r"\.(sm_\d+[af]?)\." + ext, out))
    elf, ptx = listed("--list-elf", "cubin"), listed("--list-ptx", "ptx")
    # cuobjdump's file names drop the f of a family-specific entry (sm_100f is "sm_100"), keep the a.
    plain = lambda names: {n[:-1] if n.endswith("f") else n for n in names}
    same = elf == plain(ours_sass) and ptx == plain(ours_ptx); bad += not same
    print(("MATCH" if same else "DIFF "), f["path"], "SASS", sorted(ours_sass), "PTX", sorted(ours_ptx),
          "" if same else f"cuobjdump: ELF {sorted(elf)} PTX {sorted(ptx)}")
print(f"{len(seen)} libraries compared, {bad} differ")
PY
else
  echo "no cuobjdump here: skipped"
fi

# ---- 3. a library without code for this GPU -----------------------------------
echo "== 3. libk80 (sm_80 only) and libk90 (sm_80 + sm_90), built with nvcc $(nvcc --version | tail -1)"
K=$W/k; mkdir -p "$K"; cd "$K" || exit 1
cat > k.cu <<'CU'
#include <cstdio>
__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" int launch_twice(void) {
  float* d = nullptr; cudaMalloc(&d, 32 * sizeof(float)); twice<<<1, 32>>>(d);
  cudaError_t e = cudaDeviceSynchronize(); if (e == cudaSuccess) e = cudaGetLastError(); cudaFree(d);
  std::printf("launch: %s\n", cudaGetErrorString(e)); return e;
}
CU
echo 'extern "C" int launch_twice(void); int main() { return launch_twice() ? 1 : 0; }' > main.cu
nvcc -shared -Xcompiler -fPIC -gencode arch=compute_80,code=sm_80 k.cu -o libk80.so.1.0.0 -Xlinker -soname=libk80.so.1
nvcc -shared -Xcompiler -fPIC -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 k.cu -o libk90.so.1.0.0 -Xlinker -soname=libk90.so.1
ln -s libk80.so.1.0.0 libk80.so.1; ln -s libk90.so.1.0.0 libk90.so.1
for k in 80 90; do nvcc main.cu -L. -l:libk$k.so.1.0.0 -o run$k && echo "run$k: $(LD_LIBRARY_PATH=. ./run$k 2>&1)"; done
dtop=libk-linux-x86_64-1.0.0-archive; mkdir -p "$W/src/$dtop/lib"; cp libk80.so.1.0.0 libk90.so.1.0.0 "$W/src/$dtop/lib/"
drel=libk/linux-x86_64/$dtop.tar.xz; mkdir -p "$W/www/demo/redist/libk/linux-x86_64"
tar -C "$W/src" -cf - "$dtop" | xz -1 > "$W/www/demo/redist/$drel"
manifest "$W/www/demo/redist" "$drel" 1.0.0 demo libk 1.0.0 ""
t redist fetch demo 1.0.0 --base-url "file://$W/www" --prefix "$W/demo" --platform linux-x86_64 --no-cache --quiet --no-check || exit 1
t redist check --prefix "$W/demo" "${CCARG[@]}" | grep -E "gpu-code|gpu:|libraries \("; echo "check rc=${PIPESTATUS[0]}"
t redist check --quick --prefix "$W/demo" "${CCARG[@]}" > /dev/null; echo "check --quick rc=$?"
