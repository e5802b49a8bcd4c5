"""A mirror's recompressed copies (recompressed_<label>.json and its
signature beside the manifest, .tar.zst copies beside the archives),
installed by `redist fetch` from file:// mirrors this test writes: a good copy
signed by a trusted key is used (the tree equals the original's, the receipt
names both digests); an unsigned record, one signed by an untrusted key, or
no trusted key at all, a copy with wrong bytes, a copy whose tar is not the
recorded one, a record for another manifest, or a copy the lock refuses is
discarded with one line and the original installed, and nothing of it
reaches the prefix; no record means no line at all. A mirror is transport:
serving NVIDIA's manifest byte for byte does not make its copies trusted."""

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


def retar(tar: bytes, edit=None) -> bytes:
    """The same members in another tar (pax format, another owner: nothing on disk keeps either),
    with `edit(member)` applied to each member's header first."""
    src = tarfile.open(fileobj=io.BytesIO(tar))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            m.uid, m.gid, m.uname, m.gname = 4242, 4242, "mirror", "mirror"
            if edit:
                edit(m)
            out.addfile(m, io.BytesIO(data) if data is not None else None)
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
        self.key, self.pub = support.make_key_pair(self.dir)

    def write_copy(self, tar: bytes | None = None, damage: bool = False, recorded_tar: bytes | None = None,
                   manifest_sha256: str | None = None, key: str | None = "", piece: int = 0,
                   listed_tar: bytes | None = None, bytes_sha256: str | None = None,
                   tree_of: bytes | None = None) -> dict:
        """Writes the copy of the selected archive (of `tar`, default the
        original's) and its record, signed by `key` (default the trusted
        one; None: unsigned); `damage` flips a byte after recording the
        copy's digest; `recorded_tar` is the tar the record claims; `piece`
        (0: none) records the hash list of `listed_tar` (default the copy's);
        `bytes_sha256` is the digest the record states for the copy's bytes
        (default their own); `tree_of` (default: none) is the tar whose
        tree the record states the copy unpacks to."""
        tar = self.tar if tar is None else tar
        data = zstd_frames(tar, self.dir)
        entry = {"original_sha256": self.original["sha256"], "original_size": self.original["size"],
                 "relative_path": self.copy_rel, "compression": "zstd",
                 "sha256": bytes_sha256 or hashlib.sha256(data).hexdigest(), "size": str(len(data)),
                 "tar_sha256": hashlib.sha256(recorded_tar if recorded_tar is not None else tar).hexdigest(),
                 "tar_size": str(len(tar))}
        if piece:
            entry.update(tar_piece_bytes=str(piece),
                         tar_list_sha256=support.hash_list(listed_tar if listed_tar is not None else tar, piece))
        if tree_of is not None:
            entry["tree_sha256"] = support.tree_digest(tree_of)
        if damage:
            data = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
        with open(support.artifact_path(PRODUCT, self.copy_rel, self.mirror), "wb") as f:
            f.write(data)
        support.save_json(self.sidecar, {"format": "redist-recompressed-2", "release_label": LABEL,
                                         "manifest_sha256": manifest_sha256 or self.manifest_sha256,
                                         "copies": [entry]})
        self.sign(key)
        return entry

    def sign(self, key: str | None = ""):
        """(Re-)signs the record as it is now: with `key` ("" the trusted one), or removes its signature."""
        if key is None:
            if os.path.exists(self.sidecar + ".sig"):
                os.remove(self.sidecar + ".sig")
            return
        support.sign_file(key or self.key, self.sidecar)

    def fetch(self, prefix: str, *extra, check=0, trust: bool = True):
        keys = ("--trusted-key", self.pub) if trust else ()
        return support.run_tool("redist", "fetch", PRODUCT, LABEL, "--base-url", self.base, "--prefix", prefix,
                                "--no-cache", *SELECT, *keys, *extra, check=check)

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

    # ---- a copy that records its tar's hash list is checked piece by piece ----

    def big_tar(self) -> bytes:
        """The original's tar with a 600 KB file more: ten 64 KiB pieces."""
        return tar_with_extra(self.tar, "lib/blob.bin", os.urandom(600_000))

    def test_copy_checked_by_its_hash_list(self):
        big = self.big_tar()
        self.assertNotEqual(support.hash_list(big, 1 << 16), hashlib.sha256(big).hexdigest())
        # Streamed (--threads 1) and with its frames and pieces on a pool of four.
        for threads in ("1", "4"):
            with self.subTest(threads=threads):
                entry = self.write_copy(tar=big, piece=1 << 16)
                prefix = os.path.join(self.dir, "listed" + threads)
                res = self.fetch(prefix, "--threads", threads)
                self.assertNotIn("copy", res.stderr)
                r = self.receipt(prefix)
                self.assertEqual(r["copy_sha256"], entry["sha256"])
                self.assertTrue(os.path.isfile(os.path.join(prefix, "lib", "blob.bin")))
                # The list is what is checked: a record whose list is another tar's is refused,
                # though its tar_sha256 is the copy's.
                self.write_copy(tar=big, piece=1 << 16, listed_tar=self.tar)
                prefix = os.path.join(self.dir, "misl" + threads)
                res = self.fetch(prefix, "--threads", threads)
                self.assert_original_installed(prefix, res, "the mirror recorded")
                self.assertFalse(os.path.exists(os.path.join(prefix, "lib", "blob.bin")))

    def test_a_listed_copy_is_checked_by_what_it_decodes_to(self):
        """With a hash list the signed record vouches for every decoded byte, all checked before the
        stage may be committed; the copy's own SHA-256, one sequential pass, is not computed. So bytes
        encoded otherwise than the record says (the same tar in other frames) install, and damaged
        bytes still fall back: what they decode to is checked."""
        big = self.big_tar()
        other_encoding = hashlib.sha256(b"the same tar, framed otherwise").hexdigest()
        entry = self.write_copy(tar=big, piece=1 << 16, bytes_sha256=other_encoding)
        prefix = os.path.join(self.dir, "reframed")
        res = self.fetch(prefix)
        self.assertNotIn("copy", res.stderr)
        r = self.receipt(prefix)
        self.assertEqual((r["copy_sha256"], r["tar_sha256"]), (entry["sha256"], hashlib.sha256(big).hexdigest()))
        self.assertTrue(os.path.isfile(os.path.join(prefix, "lib", "blob.bin")))
        # Damaged bytes: the decoder or the list refuses them, and nothing of the copy stays.
        self.write_copy(tar=big, piece=1 << 16, damage=True)
        prefix = os.path.join(self.dir, "damaged")
        res = self.fetch(prefix)
        self.assert_original_installed(prefix, res, "copy of cudnn failed")
        self.assertFalse(os.path.exists(os.path.join(prefix, "lib", "blob.bin")))
        # Without a list the copy's bytes are what the record vouches for: their SHA-256 is checked.
        self.write_copy(tar=big, bytes_sha256=other_encoding)
        prefix = os.path.join(self.dir, "unlisted")
        self.assert_original_installed(prefix, self.fetch(prefix), "sha256 mismatch")

    def test_lock_pins_the_hash_list(self):
        big = self.big_tar()
        self.write_copy(tar=big, piece=1 << 16)
        lock = self.lock()
        pinned = self.pinned(lock)
        self.assertEqual([a.get("tar_list_sha256") for a in pinned], [support.hash_list(big, 1 << 16)])
        self.assertEqual([a.get("tar_sha256") for a in pinned], [hashlib.sha256(big).hexdigest()])
        prefix = os.path.join(self.dir, "good")
        self.fetch_locked(prefix, lock)
        self.assertTrue(os.path.isfile(os.path.join(prefix, "lib", "blob.bin")))
        # A lock whose list is not the record's: the copy is refused, the original installed.
        self.repin(lock, "tar_list_sha256", "0" * 64)
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch_locked(prefix, lock)
        self.assert_original_installed(prefix, res, "locked")
        # A lock that pins the tar alone (made before hash lists): the copy is checked by its SHA-256.
        self.repin(lock, "tar_list_sha256", None)
        prefix = os.path.join(self.dir, "old-lock")
        res = self.fetch_locked(prefix, lock)
        self.assertNotIn("copy", res.stderr)
        self.assertTrue(os.path.isfile(os.path.join(prefix, "lib", "blob.bin")))

    # ---- a copy that records its tree is checked by what lands, hashed once ----

    def test_a_copy_is_checked_by_the_tree_it_unpacks_to(self):
        """With the tree's digest the record vouches for everything that lands (each file's
        content as its receipt records it, modes, times, links); neither the copy's bytes nor its
        tar are hashed. So the same tree in another tar installs, and a tree that differs in
        anything that lands falls back, though its record states that very tar."""
        other = retar(self.tar)
        self.assertNotEqual(hashlib.sha256(other).hexdigest(), hashlib.sha256(self.tar).hexdigest())
        self.assertEqual(support.tree_digest(other), support.tree_digest(self.tar))
        other_encoding = hashlib.sha256(b"the same tree, tarred and framed otherwise").hexdigest()
        entry = self.write_copy(tar=other, recorded_tar=self.tar, tree_of=self.tar, bytes_sha256=other_encoding)
        reference = self.reference_tree()
        for threads in ("1", "4"):
            with self.subTest(threads=threads):
                prefix = os.path.join(self.dir, "tree" + threads)
                res = self.fetch(prefix, "--threads", threads)
                self.assertNotIn("copy", res.stderr)
                r = self.receipt(prefix)
                self.assertEqual(r["copy_sha256"], entry["sha256"])
                self.assertEqual(self.tree(prefix), reference)
                support.run_tool("redist", "verify", "--prefix", prefix, check=0)
        first_file = lambda m: m.isfile() and m.name.endswith(".h")
        unlike = {
            "a file more": tar_with_extra(self.tar, "include/evil.h", b"#error planted\n"),
            "another mtime": retar(self.tar, lambda m: setattr(m, "mtime", 1) if first_file(m) else None),
            "another mode": retar(self.tar, lambda m: setattr(m, "mode", 0o777) if first_file(m) else None),
        }
        for name, tar in unlike.items():
            with self.subTest(name):
                self.assertNotEqual(support.tree_digest(tar), support.tree_digest(self.tar))
                # The record states the copy's own tar: only its tree can tell.
                self.write_copy(tar=tar, recorded_tar=tar, tree_of=self.tar)
                prefix = os.path.join(self.dir, name.replace(" ", "-"))
                res = self.fetch(prefix)
                self.assert_original_installed(prefix, res, "the tree it unpacks to is not the one the mirror recorded")
                self.assertFalse(any("evil" in p for p in self.tree(prefix)))

    def test_lock_pins_the_tree(self):
        self.write_copy(tar=retar(self.tar), recorded_tar=self.tar, tree_of=self.tar)
        lock = self.lock()
        self.assertEqual([a.get("tree_sha256") for a in self.pinned(lock)], [support.tree_digest(self.tar)])
        prefix = os.path.join(self.dir, "good")
        res = self.fetch_locked(prefix, lock)
        self.assertNotIn("copy", res.stderr)
        self.assertIn("copy_sha256", self.receipt(prefix))
        # A lock whose tree is not the record's: the copy is refused, the original installed.
        self.repin(lock, "tree_sha256", "0" * 64)
        prefix = os.path.join(self.dir, "other-tree")
        self.assert_original_installed(prefix, self.fetch_locked(prefix, lock), "locked")
        # A lock that pins the tar alone (made before trees): the copy is checked by its tar, which is
        # not the recorded one here.
        self.repin(lock, "tree_sha256", None)
        prefix = os.path.join(self.dir, "old-lock")
        self.assert_original_installed(prefix, self.fetch_locked(prefix, lock), "the mirror recorded")

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
        self.sign()
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch(prefix)
        lines = [l for l in res.stderr.splitlines() if "recompressed" in l]
        self.assertEqual(len(lines), 1, res.stderr)
        self.assertIn("copies[0].relative_path", lines[0])
        self.assertNotIn("copy_sha256", self.receipt(prefix))

    def lock(self, trust: bool = True) -> str:
        path = os.path.join(self.dir, "redist.lock")
        keys = ("--trusted-key", self.pub) if trust else ()
        support.run_tool("redist", "lock", PRODUCT, LABEL, "--base-url", self.base, "--platform", "linux-x86_64",
                         "--component", "cudnn", "-o", path, *keys, check=0)
        return path

    def pinned(self, lock: str) -> list:
        """The lock's entries for the selected archive."""
        return [a for a in support.load_json(lock)["artifacts"] if a["sha256"] == self.original["sha256"]]

    def repin(self, lock: str, field: str, value: str | None):
        """Sets `field` of the selected archive's entry in the lock to `value`, or drops it (None)."""
        doc = support.load_json(lock)
        for a in doc["artifacts"]:
            if a["sha256"] == self.original["sha256"]:
                if value is None:
                    a.pop(field, None)
                else:
                    a[field] = value
        support.save_json(lock, doc)

    def fetch_locked(self, prefix: str, lock: str, check=0):
        return support.run_tool("redist", "fetch", "--locked", lock, "--base-url", self.base, "--prefix", prefix,
                                "--no-cache", "--platform", "linux-x86_64", "--cuda", "12", "--no-check",
                                "--trusted-key", self.pub, check=check)

    def test_lock_pins_the_tar_and_refuses_another(self):
        self.write_copy()
        lock = self.lock()
        good_tar = hashlib.sha256(self.tar).hexdigest()
        pinned = self.pinned(lock)
        self.assertEqual([a.get("tar_sha256") for a in pinned], [good_tar])
        # The lock names the key that vouched for the copy.
        self.assertEqual([a.get("copy_key") for a in pinned], [support.key_fingerprint(self.pub)])
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

    # ---- a mirror is transport: only a trusted key's signature makes a copy usable ----

    def assert_not_used(self, res, prefix: str, why: str):
        self.assert_original_installed(prefix, res, "not using the mirror's recompressed copies")
        self.assertIn(why, res.stderr)
        self.assertFalse(any("evil" in p for p in self.tree(prefix)))

    def test_unsigned_copy_is_not_installed_even_with_the_manifest_pinned(self):
        # The attack: NVIDIA's manifest byte for byte, plus a consistent record of a copy of another tar.
        evil = tar_with_extra(self.tar, "include/evil.h", b"#error planted\n")
        self.write_copy(tar=evil, key=None)
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch(prefix, "--manifest-sha256", self.manifest_sha256)
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assert_not_used(res, prefix, "not signed")

    def test_copy_signed_by_an_untrusted_key_is_not_installed(self):
        other, _ = support.make_key_pair(self.dir, "other")
        evil = tar_with_extra(self.tar, "include/evil.h", b"#error planted\n")
        self.write_copy(tar=evil, key=other)
        prefix = os.path.join(self.dir, "prefix")
        self.assert_not_used(self.fetch(prefix), prefix, "by no trusted key")

    def test_a_record_changed_after_signing_is_not_installed(self):
        self.write_copy()
        evil = tar_with_extra(self.tar, "include/evil.h", b"#error planted\n")
        signature = open(self.sidecar + ".sig", "rb").read()
        self.write_copy(tar=evil, key=None)  # a new record under the old signature
        with open(self.sidecar + ".sig", "wb") as f:
            f.write(signature)
        prefix = os.path.join(self.dir, "prefix")
        self.assert_not_used(self.fetch(prefix), prefix, "by no trusted key")

    def test_without_a_trusted_key_the_original_is_installed(self):
        self.write_copy()
        prefix = os.path.join(self.dir, "prefix")
        self.assert_not_used(self.fetch(prefix, trust=False), prefix, "no key is trusted")

    def test_keys_from_the_environment_and_a_bad_key_file(self):
        entry = self.write_copy()
        prefix = os.path.join(self.dir, "prefix")
        res = support.run_tool("redist", "fetch", PRODUCT, LABEL, "--base-url", self.base, "--prefix", prefix,
                               "--no-cache", *SELECT, env={"REDIST_TRUSTED_KEYS": "/nonexistent.pub:" + self.pub},
                               check=None)
        self.assertNotEqual(res.returncode, 0)  # a key that cannot be read is an error, before any request
        self.assertIn("/nonexistent.pub", res.stderr)
        self.assertFalse(os.path.exists(prefix))
        not_a_key = os.path.join(self.dir, "not-a-key.pem")
        with open(not_a_key, "w") as f:
            f.write("hello\n")
        res = self.fetch(prefix, "--trusted-key", not_a_key, check=None)
        self.assertEqual(res.returncode, 2, res.stderr)
        self.assertIn("not-a-key.pem", res.stderr)
        self.assertEqual(len(res.stderr.strip().splitlines()), 1, res.stderr)
        res = support.run_tool("redist", "fetch", PRODUCT, LABEL, "--base-url", self.base, "--prefix", prefix,
                               "--no-cache", *SELECT, env={"REDIST_TRUSTED_KEYS": self.pub}, check=0)
        self.assertEqual(self.receipt(prefix)["copy_sha256"], entry["sha256"])

    def test_a_key_from_the_users_config(self):
        entry = self.write_copy()
        config = os.path.join(self.dir, "config", "redist")
        os.makedirs(config)
        os.rename(self.pub, os.path.join(config, "mirror.pub"))
        with open(os.path.join(config, "config.toml"), "w") as f:
            f.write('trusted-keys = ["mirror.pub"]\n')  # relative to the file's directory
        prefix = os.path.join(self.dir, "prefix")
        support.run_tool("redist", "fetch", PRODUCT, LABEL, "--base-url", self.base, "--prefix", prefix,
                         "--no-cache", *SELECT, env={"XDG_CONFIG_HOME": os.path.join(self.dir, "config")}, check=0)
        self.assertEqual(self.receipt(prefix)["copy_sha256"], entry["sha256"])

    def test_lock_through_an_unsigned_mirror_pins_no_copy(self):
        evil = tar_with_extra(self.tar, "include/evil.h", b"#error planted\n")
        self.write_copy(tar=evil, key=None)
        lock = self.lock()
        self.assertNotIn("tar_sha256", json.dumps(support.load_json(lock)))
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch_locked(prefix, lock)
        self.assertNotIn("copy_sha256", self.receipt(prefix))
        self.assertFalse(any("evil" in p for p in self.tree(prefix)), res.stderr)

    def test_a_lock_pin_without_its_key_is_not_honoured(self):
        # A lock written before copies needed a signature pins the tar alone: the original is installed.
        self.write_copy()
        lock = self.lock()
        self.repin(lock, "copy_key", None)
        prefix = os.path.join(self.dir, "prefix")
        self.fetch_locked(prefix, lock)
        self.assertNotIn("copy_sha256", self.receipt(prefix))

    def test_no_record_no_line(self):
        prefix = os.path.join(self.dir, "prefix")
        res = self.fetch(prefix)
        self.assertNotIn("copy", res.stderr)
        self.assertNotIn("recompressed", res.stderr)
        self.assertNotIn("copy_sha256", self.receipt(prefix))


if __name__ == "__main__":
    unittest.main()
