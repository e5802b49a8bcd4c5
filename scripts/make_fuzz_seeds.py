#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets under tests/fuzz/corpus/.

    python3 scripts/make_fuzz_seeds.py [--out tests/fuzz/corpus]

The output is committed; re-run this after changing it (the bytes are
deterministic: fixed mtimes, owners and compression settings). The
manifest target's seeds are tests/data/manifests and are not written here.

unpack/   byte 0 selects the reader (see tests/fuzz/unpack_fuzz.cpp: bits 0-1
          0 tar.xz, 1 plain tar, 2 zip, 3 tar.zst; bit 2 no strip; bits 3-7
          write() chunk), then the archive. Well-formed archives plus one of
          each hostile shape the unpacker must refuse, so the fuzzer starts
          next to every check.
lockfile/ receipt/ index/   small valid documents and a few edge cases.

Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import lzma
import os
import shutil
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(os.path.dirname(HERE), "tests", "fuzz", "corpus")

TAR_XZ, TAR, ZIP, TAR_ZST = 0, 1, 2, 3
NO_STRIP = 4
SHA = "0123456789abcdef" * 4


def control(fmt: int, chunk_log2: int = 12, strip: bool = True) -> bytes:
    return bytes([fmt | (0 if strip else NO_STRIP) | (chunk_log2 << 3)])


# ---- zstd frames, written by hand (no zstd module needed) --------------------

def zst_frames(data: bytes, frame_bytes: int, skippable: bytes | None = None) -> bytes:
    """Frames of `frame_bytes` each, every header recording its content size
    (what a mirror's recompressed copy looks like, so the unpacker decodes them
    on its pool), content in raw blocks; a skippable frame after the first."""
    out = bytearray()
    for i, at in enumerate(range(0, len(data), frame_bytes)):
        chunk = data[at:at + frame_bytes]
        out += (0xFD2FB528).to_bytes(4, "little")
        out += bytes([0xE0]) + len(chunk).to_bytes(8, "little")  # single segment, 8-byte content size
        out += ((len(chunk) << 3) | 1).to_bytes(3, "little") + chunk  # one last raw block
        if i == 0 and skippable is not None:
            out += (0x184D2A50).to_bytes(4, "little") + len(skippable).to_bytes(4, "little") + skippable
    return bytes(out)


# ---- tar --------------------------------------------------------------------

def tar_bytes(members, fmt=tarfile.PAX_FORMAT) -> bytes:
    # No padding to a 10 KiB record: the two zero blocks end the archive,
    # and small seeds keep the fuzzer fast.
    tarfile.RECORDSIZE = tarfile.BLOCKSIZE
    """members: (name, kind, data_or_target, mode) with kind in file, dir,
    symlink, hardlink, fifo."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, kind, payload, mode in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = mode
            data = None
            if kind == "file":
                data = payload
                info.size = len(data)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = payload
            elif kind == "hardlink":
                info.type = tarfile.LNKTYPE
                info.linkname = payload
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def xz(data: bytes) -> bytes:
    return lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=6)


GOOD = [
    ("pkg", "dir", None, 0o755),
    ("pkg/include", "dir", None, 0o755),
    ("pkg/include/x.h", "file", b"#define X 1\n", 0o644),
    ("pkg/lib", "dir", None, 0o755),
    ("pkg/lib/libx.so.1", "file", b"\x7fELF fake library\n", 0o755),
    ("pkg/lib/libx.so", "symlink", "libx.so.1", 0o777),
    ("pkg/lib/libx_copy.so.1", "hardlink", "pkg/lib/libx.so.1", 0o755),
    ("pkg/LICENSE", "file", b"license text\n", 0o644),
]

HOSTILE_TAR = {
    "dotdot": [("pkg", "dir", None, 0o755), ("pkg/../../escape", "file", b"x", 0o644)],
    "absolute": [("/tmp/redist-fuzz-absolute", "file", b"x", 0o644)],
    "symlink_escape": [("pkg", "dir", None, 0o755), ("pkg/up", "symlink", "../../../..", 0o777)],
    "symlink_absolute": [("pkg", "dir", None, 0o755), ("pkg/etc", "symlink", "/etc", 0o777)],
    "write_through_symlink": [("pkg", "dir", None, 0o755), ("pkg/d", "symlink", ".", 0o777),
                              ("pkg/d/../../x", "file", b"x", 0o644)],
    "below_symlink": [("pkg", "dir", None, 0o755), ("pkg/sub", "dir", None, 0o755),
                      ("pkg/l", "symlink", "sub", 0o777), ("pkg/l/f", "file", b"x", 0o644)],
    "hardlink_outside": [("pkg", "dir", None, 0o755), ("pkg/h", "hardlink", "/etc/hostname", 0o644)],
    "hardlink_dotdot": [("pkg", "dir", None, 0o755), ("pkg/h", "hardlink", "pkg/../../x", 0o644)],
    "fifo": [("pkg", "dir", None, 0o755), ("pkg/p", "fifo", None, 0o644)],
    "setuid": [("pkg", "dir", None, 0o755), ("pkg/su", "file", b"#!/bin/sh\n", 0o4755)],
    "reserved_redist": [("pkg", "dir", None, 0o755), ("pkg/.redist", "dir", None, 0o755),
                        ("pkg/.redist/transaction.json", "file", b"{}", 0o644)],
    "two_top_levels": [("a/f", "file", b"x", 0o644), ("b/f", "file", b"y", 0o644)],
    "file_dir_clash": [("pkg", "dir", None, 0o755), ("pkg/x", "file", b"x", 0o644),
                       ("pkg/x/y", "file", b"y", 0o644)],
    "unwritable_dir": [("pkg", "dir", None, 0o755), ("pkg/ro", "dir", None, 0o000),
                       ("pkg/ro/f", "file", b"x", 0o644)],
    "long_name": [("pkg", "dir", None, 0o755), ("pkg/" + "n" * 200 + "/" + "m" * 120, "file", b"x", 0o644)],
}


# ---- zip --------------------------------------------------------------------

def zip_bytes(members) -> bytes:
    """members: (name, kind, data_or_target, mode) with kind file, dir, symlink."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, kind, payload, mode in members:
            info = zipfile.ZipInfo(name + ("/" if kind == "dir" else ""), date_time=(2024, 1, 1, 0, 0, 0))
            info.create_system = 3  # unix: the high 16 bits of external_attr are st_mode
            if kind == "dir":
                info.external_attr = (0o040000 | mode) << 16
                z.writestr(info, b"")
            elif kind == "symlink":
                info.external_attr = (0o120000 | mode) << 16
                z.writestr(info, payload.encode())
            else:
                info.external_attr = (0o100000 | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(info, payload)
    return out.getvalue()


GOOD_ZIP = [m for m in GOOD if m[1] != "hardlink"]
HOSTILE_ZIP = {
    "zip_dotdot": [("pkg/", "dir", None, 0o755), ("pkg/../../escape", "file", b"x", 0o644)],
    "zip_symlink_escape": [("pkg", "dir", None, 0o755), ("pkg/up", "symlink", "../../..", 0o777),
                           ("pkg/up/f", "file", b"x", 0o644)],
    "zip_absolute": [("/tmp/redist-fuzz-zip", "file", b"x", 0o644)],
}


def write_unpack(out: str) -> None:
    seeds = {
        "good.tar.xz": control(TAR_XZ) + xz(tar_bytes(GOOD)),
        "good_small_chunks.tar.xz": control(TAR_XZ, chunk_log2=3) + xz(tar_bytes(GOOD)),
        "good_nostrip.tar.xz": control(TAR_XZ, strip=False) + xz(tar_bytes(GOOD)),
        "good_gnu.tar": control(TAR) + tar_bytes(GOOD, fmt=tarfile.GNU_FORMAT),
        "good_ustar.tar": control(TAR, chunk_log2=9) + tar_bytes(GOOD, fmt=tarfile.USTAR_FORMAT),
        "good.tar.gz": control(TAR) + gzip.compress(tar_bytes(GOOD), mtime=0),
        "good.zip": control(ZIP) + zip_bytes(GOOD_ZIP),
        "truncated.tar.xz": control(TAR_XZ) + xz(tar_bytes(GOOD))[:200],
        "good_frames.tar.zst": control(TAR_ZST, chunk_log2=7) + zst_frames(tar_bytes(GOOD), 1024, b"skip"),
        "truncated_frames.tar.zst": control(TAR_ZST) + zst_frames(tar_bytes(GOOD), 1024)[:-100],
    }
    for name, members in HOSTILE_TAR.items():
        fmt = tarfile.GNU_FORMAT if name == "long_name" else tarfile.PAX_FORMAT
        seeds[f"{name}.tar"] = control(TAR) + tar_bytes(members, fmt=fmt)
    seeds["dotdot.tar.xz"] = control(TAR_XZ) + xz(tar_bytes(HOSTILE_TAR["dotdot"]))
    for name, members in HOSTILE_ZIP.items():
        seeds[f"{name}.zip"] = control(ZIP) + zip_bytes(members)
    write_all(os.path.join(out, "unpack"), seeds)


# ---- JSON documents ---------------------------------------------------------

def dumps(obj) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()


def write_lockfile(out: str) -> None:
    artifact = {"component": "cudnn", "version": "9.10.1.4", "platform": "linux-x86_64",
                "variant": "cuda12", "relative_path": "cudnn/linux-x86_64/cudnn-9.10.1.4_cuda12.tar.xz",
                "url": "https://example.invalid/cudnn/redist/cudnn/linux-x86_64/cudnn-9.10.1.4_cuda12.tar.xz",
                "sha256": SHA, "size": 123456}
    base = {"lock_version": 1, "product": "cudnn", "release_label": "9.10.1",
            "manifest_url": "https://example.invalid/cudnn/redist/redistrib_9.10.1.json",
            "manifest_sha256": SHA, "artifacts": [artifact]}
    no_variant = dict(artifact, component="libcudnn_license", variant=None, platform="linux-sbsa",
                      relative_path="x/y.zip")
    seeds = {
        "one.lock": dumps(base),
        "two.lock": dumps(dict(base, artifacts=[artifact, no_variant])),
        "empty_artifacts.lock": dumps(dict(base, artifacts=[])),
        "escapes.lock": dumps(dict(base, product="cu\u00e9dnn\t", artifacts=[dict(artifact, component="a\\b\"c")])),
        "dup_keys.lock": b'{"lock_version":1,"product":"a","product":"b","artifacts":[]}',
        "bad_version.lock": dumps(dict(base, lock_version=2)),
        "big_size.lock": dumps(dict(base, artifacts=[dict(artifact, size=18446744073709551615)])),
    }
    write_all(os.path.join(out, "lockfile"), seeds)


def write_receipt(out: str) -> None:
    files = [
        {"path": "include/x.h", "type": "file", "size": 12, "sha256": SHA, "mode": 420},
        {"path": "lib/libx.so", "type": "symlink", "target": "libx.so.1", "mode": 511},
        {"path": "lib/libx.so.1", "type": "file", "size": 19, "sha256": SHA, "mode": 493},
    ]
    base = {"schema": 1, "product": "cudnn", "release_label": "9.10.1", "component": "cudnn",
            "component_version": "9.10.1.4", "platform": "linux-x86_64", "variant": "cuda12",
            "url": "https://example.invalid/cudnn.tar.xz", "archive_sha256": SHA, "archive_size": 123456,
            "installed_at": "2026-11-30T12:00:00Z", "files": files}
    seeds = {
        "receipt.json": dumps(base),
        "no_variant.json": dumps(dict(base, variant=None, files=files[:1])),
        "no_files.json": dumps(dict(base, files=[])),
        "outside_paths.json": dumps(dict(base, files=[dict(files[0], path="../../etc/passwd"),
                                                      dict(files[1], path="/tmp/x", target="/etc")])),
        "dup_keys.json": b'{"schema":1,"schema":1,"component":"a","component":"b","files":[]}',
    }
    write_all(os.path.join(out, "receipt"), seeds)


def write_index(out: str) -> None:
    names = ["redistrib_9.10.1.json", "redistrib_9.8.0.json", "redistrib_25.06.0.json"]
    nvidia = ("<html>\n<head><title>Index of /compute/cudnn/redist</title></head>\n<body>\n"
              "<a href='../'>Parent Directory</a><br>\n"
              + "\n".join(f"<a href='{n}'>{n}</a><br>" for n in names) + "\n</body>\n</html>\n")
    autoindex = ("<html>\r\n<head><title>Index of /cudnn/redist/</title></head>\r\n<body>\r\n"
                 "<h1>Index of /cudnn/redist/</h1><hr><pre><a href=\"../\">../</a>\r\n"
                 + "".join(f"<a href=\"{n}\">{n}</a>                 30-Nov-2026 12:00     1234\r\n" for n in names)
                 + "</pre><hr></body>\r\n</html>\r\n")
    edge = ("<!-- <a href='redistrib_0.0.1.json'> --><A HREF=redistrib_1.0.json>x</A>"
            "<a href=\"./redistrib_9.1.0.json?x=1#f\">q</a><a href='/abs/redistrib_9.1.json'>"
            "<a href='redistrib_9%2e2.json'><a href='redistrib_..json'><a href='redistrib_-1.json'>"
            "<a href='redistrib_9.0rc1.json'><a href='redistrib_9.0.json'><a href=''>")
    seeds = {"nvidia.html": nvidia.encode(), "autoindex.html": autoindex.encode(), "edge.html": edge.encode()}
    write_all(os.path.join(out, "index"), seeds)


def write_all(directory: str, seeds: dict[str, bytes]) -> None:
    if os.path.isdir(directory):
        shutil.rmtree(directory)
    os.makedirs(directory)
    for name, data in sorted(seeds.items()):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    write_unpack(args.out)
    write_lockfile(args.out)
    write_receipt(args.out)
    write_index(args.out)


if __name__ == "__main__":
    main()
