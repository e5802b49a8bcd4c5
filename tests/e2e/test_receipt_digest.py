"""Receipts record a file above one 8 MiB piece by a hash list of its pieces
(archive/sha256.hpp, file_digester): the same digest whether the extractor
hashes inline (2 threads) or the pool hashes the pieces at once (4 threads);
`redist verify` catches one changed byte in a middle piece; `redist sbom`
still states the plain SHA-256; and the coreutils recipe in the docs computes
the recorded digest."""

import hashlib
import json
import os
import subprocess
import unittest

import support

PIECE = 8 << 20
BIG = 2 * PIECE + (1 << 20) + 5  # three pieces, the last one short


def piece_list_digest(data: bytes, piece: int = PIECE) -> str:
    """The oracle: hashlib alone, as documented."""
    return support.hash_list(data, piece)


class ReceiptDigest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = support.make_scratch_dir("test_receipt_digest.ReceiptDigest")
        mirror = os.path.join(cls.dir, "mirror")
        root = os.path.join(mirror, "pieceprod", "redist")
        top = "big-linux-x86_64-1.0.0-archive"
        rel = f"big/linux-x86_64/{top}.tar.xz"
        # Varied but compressible (fast to pack): every 1 KiB line differs.
        cls.payload = b"".join(hashlib.sha256(str(i).encode()).hexdigest().encode() * 16
                               for i in range(BIG // 1024 + 1))[:BIG]
        cls.small = b"#define SMALL 1\n"
        data = support.write_xz_archive(root, rel, top, {"lib/libbig.so.1": cls.payload,
                                                         "include/small.h": cls.small}, preset=0)
        doc = {"release_date": "2026-01-01", "release_label": "1.0.0", "release_product": "pieceprod",
               "big": {"name": "big", "license": "test", "version": "1.0.0",
                       "linux-x86_64": support.artifact_entry(rel, data)}}
        support.save_json(os.path.join(root, "redistrib_1.0.0.json"), doc)
        cls.base = support.file_base_url(mirror)

    def fetch(self, threads: int) -> str:
        prefix = os.path.join(self.dir, f"prefix-{threads}")
        support.rm_tree(prefix)
        support.run_tool("redist", "fetch", "pieceprod", "1.0.0", "--base-url", self.base, "--prefix", prefix,
                         "--platform", "linux-x86_64", "--threads", str(threads), "--no-cache", "--no-check",
                         "--quiet", check=0)
        return prefix

    def receipt(self, prefix: str) -> dict:
        return support.load_json(os.path.join(prefix, ".redist", "receipts", "pieceprod", "big.json"))

    def test_inline_and_pooled_hashing_record_the_same_piece_list(self):
        for threads in (2, 4):
            with self.subTest(threads=threads):
                r = self.receipt(self.fetch(threads))
                self.assertEqual(r["schema"], 2)
                files = {f["path"]: f for f in r["files"]}
                big = files["lib/libbig.so.1"]
                self.assertEqual(big["size"], BIG)
                self.assertEqual(big["piece_size"], PIECE)
                self.assertEqual(big["sha256_pieces"], piece_list_digest(self.payload))
                self.assertNotIn("sha256", big)
                small = files["include/small.h"]
                self.assertEqual(small["sha256"], hashlib.sha256(self.small).hexdigest())
                self.assertNotIn("piece_size", small)

    def test_verify_catches_a_byte_in_a_middle_piece(self):
        prefix = self.fetch(4)
        path = os.path.join(prefix, "lib", "libbig.so.1")
        os.chmod(path, 0o644)
        with open(path, "r+b") as f:  # same size, one byte of the second piece
            f.seek(PIECE + 4096)
            b = f.read(1)
            f.seek(PIECE + 4096)
            f.write(bytes([b[0] ^ 1]))
        res = support.run_tool("redist", "verify", "--prefix", prefix)
        self.assertEqual(res.returncode, 5, support.describe(res))
        self.assertIn("lib/libbig.so.1: modified (sha256_pieces ", res.stdout + res.stderr)
        self.assertIn("expected " + piece_list_digest(self.payload), res.stdout + res.stderr)
        with open(path, "r+b") as f:
            f.seek(PIECE + 4096)
            f.write(b)
        support.run_tool("redist", "verify", "--prefix", prefix, check=0)

    def test_sbom_states_the_plain_sha256(self):
        prefix = self.fetch(4)
        res = support.run_tool("redist", "sbom", "--prefix", prefix, "--format", "spdx-json", "--base-url",
                               self.base, "--no-cache", check=0)
        doc = json.loads(res.stdout)
        sums = {f["fileName"][2:]: {c["algorithm"]: c["checksumValue"] for c in f["checksums"]}
                for f in doc["files"]}
        self.assertEqual(sums["lib/libbig.so.1"]["SHA256"], hashlib.sha256(self.payload).hexdigest())
        self.assertEqual(sums["lib/libbig.so.1"]["SHA1"], hashlib.sha1(self.payload).hexdigest())

    def test_the_documented_coreutils_recipe_matches(self):
        prefix = self.fetch(2)
        path = os.path.join(prefix, "lib", "libbig.so.1")
        recipe = ("split -b 8M --filter=sha256sum \"$1\" | cut -c1-64 | tr -d '\\n' | tr a-f A-F"
                  " | basenc -d --base16 | sha256sum")
        out = subprocess.run(["bash", "-o", "pipefail", "-c", recipe, "recipe", path], check=True,
                             capture_output=True, text=True).stdout
        files = {f["path"]: f for f in self.receipt(prefix)["files"]}
        self.assertEqual(out.split()[0], files["lib/libbig.so.1"]["sha256_pieces"])
        self.assertEqual(out.split()[0], piece_list_digest(self.payload))

if __name__ == "__main__":
    unittest.main()
