"""A mirror's recompressed copies (recompressed_<label>.json beside the
manifest, .tar.zst copies beside the archives), installed by `redist fetch`
from file:// mirrors this test writes: a good copy is used (the tree equals the
original's, the receipt names both digests); a copy with wrong bytes, a copy
whose tar is not the recorded one, a record for another manifest, or a copy
the lock refuses is discarded with one line and the original installed, and
nothing of it reaches the prefix; no record means no line at all."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import subprocess
import tarfile
import unittest

import support

PRODUCT, LABEL = "cudnn", "9.27.0"
SELECT = ("--platform", "linux-x86_64", "--cuda", "12", "--component", "cudnn", "--no-check")
FRAME = 8 << 20


def zstd_frames(tar: bytes, work: str) -> bytes:
    """A multi-frame zstd stream of `tar`: one frame per 8 MiB slice (at least
    two frames, so that concatenation is exercised), each recording its
    content size (zstd writes it when it reads a file)."""
    step = min(FRAME, max(1, len(tar) // 2))
    out = b""
    for n, at in enumerate(range(0, len(tar), step)):
        piece = os.path.join(work, f"slice{n}")
        with open(piece, "wb") as f:
            f.write(tar[at:at + step])
        out += subprocess.run(["zstd", "-q", "-c", "-3", piece], check=True, stdout=subprocess.PIPE).stdout
        os.remove(piece)
    return out


def tar_with_extra(tar: bytes, name: str, data: bytes) -> bytes:
    """The same tar with one more member appended (a file the original lacks)."""
    src = tarfile.open(fileobj=io.BytesIO(tar))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as out:
        top = None
        for m in src.getmembers():
            top = top or m.name.split("/")[0]
            out.addfile(m, src.extractfile(m) if m.isfile() else None)
        ti = tarfile.TarInfo(f"{top}/{name}")
        ti.size, ti.mode = len(data), 0o644
        out.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class RecompressedCopies(unittest.TestCase):
    def setUp(self):
        self.dir = support.make_scratch_dir(self.id())
        self.mirror = support.copy_mirror(os.path.join(self.dir, "mirror"), products=[PRODUCT])
        self.base = support.file_base_url(self.mirror)
        with open(support.manifest_path(PRODUCT, LABEL, self.mirror), "rb") as f:
            self.manifest_sha256 = hashlib.sha256(f.read()).hexdigest()
        manifest = support.load_manifest(PRODUCT, LABEL, self.mirror)
        self.original = support.find_artifact(manifest, "cudnn", "linux-x86_64", "cuda12")
        with open(support.artifact_path(PRODUCT, self.original["relative_path"], self.mirror), "rb") as f:
            self.tar = lzma.decompress(f.read())
        self.sidecar = os.path.join(self.mirror, PRODUCT, "redist", f"recompressed_{LABEL}.json")
        self.copy_rel = self.original["relative_path"][: -len(".tar.xz")] + ".tar.zst"

    def write_copy(self, tar: bytes | None = None, damage: bool = False, recorded_tar: bytes | None = None,
                   manifest_sha256: str | None = None) -> dict:
        """Writes the copy of the selected archive (of `tar`, default the
        original's) and its record; `damage` flips a byte after recording the
        copy's digest; `recorded_tar` is the tar the record claims."""
        tar = self.tar if tar is None else tar
        data = zstd_frames(tar, self.dir)
        entry = {"original_sha256": self.original["sha256"], "relative_path": self.copy_rel, "compression": "zstd",
                 "sha256": hashlib.sha256(data).hexdigest(), "size": str(len(data)),
                 "tar_sha256": hashlib.sha256(recorded_tar if recorded_tar is not None else tar).hexdigest(),
                 "tar_size": str(len(tar))}
        if damage:
            data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        with open(support.artifact_path(PRODUCT, self.copy_rel, self.mirror), "wb") as f:
            f.write(data)
        support.save_json(self.sidecar, {"format": "redist-recompressed-1", "release_label": LABEL,
                                         "manifest_sha256": manifest_sha256 or self.manifest_sha256,
                                         "copies": [entry]})
        return entry

    def fetch(self, prefix: str, *extra, check=0):
        return support.run_tool("redist", "fetch", PRODUCT, LABEL, "--base-url", self.base, "--prefix", prefix,
                                "--no-cache", *SELECT, *extra, check=check)

    def receipt(self, prefix: str) -> dict:
        return support.load_json(os.path.join(prefix, ".redist", "receipts", PRODUCT, "cudnn.json"))

    def tree(self, prefix: str):
        return support.tree_snapshot(prefix, ignore=r"^\.redist(/|$)")

    def reference_tree(self):
        prefix = os.path.join(self.dir, "reference")
        res = self.fetch(prefix, "--no-recompressed")
        self.assertNotIn("copy", res.stderr)
        self.assertNotIn("copy_sha256", self.receipt(prefix))
        return self.tree(prefix)

    def assert_original_installed(self, prefix: str, res, needle: str):
        lines = [l for l in res.stderr.splitlines() if "copy of cudnn failed" in l or "recompressed" in l]
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertIn(needle, lines[0])
        self.assertIn("installing the original", lines[0])
        r = self.receipt(prefix)
        self.assertEqual(r["archive_sha256"], self.original["sha256"])
        self.assertNotIn("copy_sha256", r)
        self.assertNotIn("tar_sha256", r)
        self.assertEqual(self.tree(prefix), self.reference_tree())
        self.assertEqual(os.listdir(os.path.join(prefix, ".redist", "staging")), [])

    def test_copy_is_used_and_recorded(self):
        entry = self.write_copy()
        prefix = os.path.join(self.dir, "prefix")
        plan = self.fetch(prefix, "--dry-run")
        self.assertIn("recompressed copy", plan.stdout)
        self.assertFalse(os.path.exists(prefix))
        res = self.fetch(prefix, "--json")
        self.assertNotIn("copy", res.stderr)
        report = json.loads(res.stdout)
        self.assertEqual(report["components"][0]["sha256"], self.original["sha256"])
        self.assertEqual(report["components"][0]["copy_sha256"], entry["sha256"])
        self.assertTrue(report["components"][0]["url"].endswith(".tar.zst"), report)
        r = self.receipt(prefix)
        self.assertEqual(r["archive_sha256"], self.original["sha256"])
        self.assertEqual(r["archive_size"], int(self.original["size"]))
        self.assertEqual(r["copy_sha256"], entry["sha256"])
        self.assertEqual(r["tar_sha256"], hashlib.sha256(self.tar).hexdigest())
        self.assertEqual(self.tree(prefix), self.reference_tree())
        # The receipt still names the original: a re-run is a no-op, and verify passes.
        again = self.fetch(prefix, "--json")
        self.assertEqual(json.loads(again.stdout)["components"][0]["status"], "unchanged")
        support.run_tool("redist", "verify", "--prefix", prefix, check=0)

    def test_no_recompressed_installs_the_original(self):
        self.write_copy()
        prefix = os.path.join(self.dir, "prefix")
        plan = self.fetch(prefix, "--dry-run", "--no-recompressed")
        self.assertNotIn("recompressed copy", plan.stdout)
        res = self.fetch(prefix, "--no-recompressed")
        self.assertNotIn("copy", res.stderr)
        self.assertNotIn("copy_sha256", self.receipt(prefix))

    def test_copy_with_wrong_bytes_falls_back(self):
        self.write_copy(damage=True)
        prefix = os.path.join(self.dir, "prefix")
        self.assert_original_installed(prefix, self.fetch(prefix), "sha256 mismatch")

    def test_copy_whose_tar_is_not_the_recorded_one_falls_back(self):
        evil = tar_with_extra(self.tar, "include/evil.h", b"#error planted\n")
        self.write_copy(tar=evil, recorded_tar=self.tar)
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch(prefix)
        self.assert_original_installed(prefix, res, "the mirror recorded")
        self.assertFalse(any("evil" in p for p in self.tree(prefix)))

    def test_record_for_another_manifest_is_ignored_with_a_warning(self):
        self.write_copy(manifest_sha256="0" * 64)
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch(prefix)
        lines = [l for l in res.stderr.splitlines() if "recompressed" in l]
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertIn("another manifest", lines[0])
        self.assertIn(f"recompressed_{LABEL}.json", lines[0])
        self.assertIn("manifest_sha256", lines[0])
        self.assertNotIn("copy_sha256", self.receipt(prefix))

    def test_invalid_record_is_ignored_with_a_warning(self):
        self.write_copy()
        record = support.load_json(self.sidecar)
        record["copies"][0]["relative_path"] = "../../../etc/x.tar.zst"
        support.save_json(self.sidecar, record)
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch(prefix)
        lines = [l for l in res.stderr.splitlines() if "recompressed" in l]
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertIn("copies[0].relative_path", lines[0])
        self.assertNotIn("copy_sha256", self.receipt(prefix))

    def lock(self) -> str:
        path = os.path.join(self.dir, "redist.lock")
        support.run_tool("redist", "lock", PRODUCT, LABEL, "--base-url", self.base, "--platform", "linux-x86_64",
                         "--component", "cudnn", "-o", path, check=0)
        return path

    def fetch_locked(self, prefix: str, lock: str, check=0):
        return support.run_tool("redist", "fetch", "--locked", lock, "--base-url", self.base, "--prefix", prefix,
                                "--no-cache", "--platform", "linux-x86_64", "--cuda", "12", "--no-check", check=check)

    def test_lock_pins_the_tar_and_refuses_another(self):
        self.write_copy()
        lock = self.lock()
        good_tar = hashlib.sha256(self.tar).hexdigest()
        pinned = [a for a in support.load_json(lock)["artifacts"] if a["sha256"] == self.original["sha256"]]
        self.assertEqual([a.get("tar_sha256") for a in pinned], [good_tar])
        # The good copy matches the lock: used.
        prefix = os.path.join(self.dir, "good")
        self.fetch_locked(prefix, lock)
        self.assertEqual(self.receipt(prefix)["tar_sha256"], good_tar)
        # A copy of another tar, with a record consistent with it: the lock refuses it.
        evil = tar_with_extra(self.tar, "include/evil.h", b"#error planted\n")
        self.write_copy(tar=evil)
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch_locked(prefix, lock)
        self.assert_original_installed(prefix, res, "locked")
        self.assertFalse(any("evil" in p for p in self.tree(prefix)))

    def test_old_lock_without_tar_installs_the_original(self):
        lock = self.lock()  # no record yet: nothing to pin
        self.assertNotIn("tar_sha256", json.dumps(support.load_json(lock)))
        self.write_copy()
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch_locked(prefix, lock)
        self.assertNotIn("copy", res.stderr)
        self.assertNotIn("copy_sha256", self.receipt(prefix))

    def test_no_record_no_line(self):
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch(prefix)
        self.assertNotIn("copy", res.stderr)
        self.assertNotIn("recompressed", res.stderr)
        self.assertNotIn("copy_sha256", self.receipt(prefix))


if __name__ == "__main__":
    unittest.main()
