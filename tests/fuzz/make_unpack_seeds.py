#!/usr/bin/env python3
"""Writes the seed corpus of unpack_fuzz (tests/fuzz/unpack_seeds/): small
archives in the formats the unpacker reads, benign and hostile. Each file's
first byte selects the format for the fuzz target (see unpack_fuzz.cpp), the
second the write chunk size; the archive follows. Re-run to regenerate:
    python3 tests/fuzz/make_unpack_seeds.py
"""

import io
import lzma
import os
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "unpack_seeds")
TOP = "pkg-linux-x86_64-1.0-archive"
XZ, TAR, ZIP = 0, 1, 2


def tar(members, fmt=tarfile.GNU_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for name, kind, payload in members:
            ti = tarfile.TarInfo(name)
            ti.mode, ti.mtime = (0o755 if kind == "dir" else 0o644), 1735689600
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
            elif kind == "symlink":
                ti.type, ti.linkname = tarfile.SYMTYPE, payload
            elif kind == "hardlink":
                ti.type, ti.linkname = tarfile.LNKTYPE, payload
            elif kind == "fifo":
                ti.type = tarfile.FIFOTYPE
            if kind == "file":
                ti.size = len(payload)
                tf.addfile(ti, io.BytesIO(payload))
            else:
                tf.addfile(ti)
    # Without tarfile's 10 KiB record padding: the end marker is enough.
    data = buf.getvalue().rstrip(b"\0")
    return data + bytes(-len(data) % 512 + 1024)


def benign():
    return [(TOP, "dir", None), (f"{TOP}/lib", "dir", None), (f"{TOP}/lib/libx.so.1", "file", b"\x7fELF" * 64),
            (f"{TOP}/lib/libx.so", "symlink", "libx.so.1"), (f"{TOP}/lib/libx.hard", "hardlink", f"{TOP}/lib/libx.so.1"),
            (f"{TOP}/include/x.h", "file", b"int x(void);\n"), (f"{TOP}/LICENSE", "file", b"license\n")]


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "benign.tar.xz": (XZ, lzma.compress(tar(benign()), preset=0)),
        "benign.tar": (TAR, tar(benign())),
        "benign_pax.tar": (TAR, tar(benign(), tarfile.PAX_FORMAT)),
        "dotdot.tar": (TAR, tar([(TOP, "dir", None), (f"{TOP}/../x", "file", b"x")])),
        "symlink_escape.tar.xz": (XZ, lzma.compress(tar([(TOP, "dir", None), (f"{TOP}/l", "symlink", "../../x"),
                                                          (f"{TOP}/l/f", "file", b"x")]), preset=0)),
        "reserved.tar": (TAR, tar([(TOP, "dir", None), (f"{TOP}/.redist/receipts/x.json", "file", b"{}")])),
        "fifo.tar": (TAR, tar([(TOP, "dir", None), (f"{TOP}/p", "fifo", None)])),
    }
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{TOP}/bin/tool.exe", b"MZ" * 100)
        zf.writestr(f"{TOP}/LICENSE", b"license\n")
        zf.writestr(f"{TOP}/../evil.txt", b"x")
    seeds["mixed.zip"] = (ZIP, zbuf.getvalue())
    for name, (fmt, data) in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes([fmt, 7]) + data)


if __name__ == "__main__":
    main()
