#!/bin/bash
# prepare.sh BUILD_DIR DEST: everything bench/check/device.sh needs on the GPU machine, in DEST
# (the binaries and their Debian libraries through ../shared/device/pack.sh, the probe helper,
# the fake libraries for the broken cases, and the release builder of tests/e2e/test_check.py).
set -euo pipefail
B=${1:?build dir}; D=${2:?dest}; HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
PACK=${PACK:-/work/shared/device/pack.sh}
rm -rf "$D"; mkdir -p "$D/fakes"
(cd "$REPO" && bash "$PACK" "$B" "$D")
cp "$B/bin/redist-check-probe" "$D/bin/" && strip "$D/bin/redist-check-probe"
cp "$HERE/device.sh" "$REPO/tests/e2e/test_check.py" "$REPO/tests/e2e/support.py" "$D/"
f=$D/fakes
printf '#include <stddef.h>\nsize_t cudnnGetVersion(void) { return 91002; }\n' > $f/c.c
cc -shared -fPIC -o $f/libcudnn-9.10.2.so $f/c.c -Wl,-soname,libcudnn.so.9
printf 'int cuDriverGetVersion(int* v) { *v = 12040; return 0; }\nint cuInit(unsigned f) { (void)f; return 0; }\n' > $f/c.c
cc -shared -fPIC -o $f/libcuda-12040.so $f/c.c -Wl,-soname,libcuda.so.1
printf 'int missing(void) { return 1; }\n' > $f/c.c
cc -shared -fPIC -o $f/libmissing.so.1 $f/c.c -Wl,-soname,libmissing.so.1
printf 'int missing(void);\nint broken(void) { return missing(); }\n' > $f/c.c
cc -shared -fPIC -o $f/libbroken.so $f/c.c -Wl,-soname,libbroken.so.1 $f/libmissing.so.1
rm -f $f/c.c $f/libmissing.so.1
du -sh "$D"
