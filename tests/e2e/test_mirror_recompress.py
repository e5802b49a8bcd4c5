"""`redist mirror --recompress zstd --sign-key KEY`: beside each .tar.xz
original a multi-frame zstd copy of the same tar stream, described by the
sidecar recompressed_<label>.json and its Ed25519 signature (which openssl
verifies), in a directory and in a registry; re-runs recompress nothing; a
record the run's key did not sign (planted, or unsigned) is never reused:
its copy is made again from the verified original; a registry mounts blobs
from another product's repository instead of downloading them
(--mount-from)."""

import gzip
import hashlib
import json
import lzma
import os
import random
import subprocess
import sys
import unittest

import support

sys.path.insert(0, os.path.join(support.source_dir(), "tests", "fixtures"))
import registry_fixture  # noqa: E402

LABEL = "9.19.0"
PLATFORM = "linux-x86_64"
XZ_REL = f"cudnn/{PLATFORM}/cudnn-{PLATFORM}-{LABEL}.56_cuda12-archive.tar.xz"
ZST_REL = f"cudnn/{PLATFORM}/cudnn-{PLATFORM}-{LABEL}.56_cuda12-archive.tar.zst"
GZ_REL = f"libextra/{PLATFORM}/libextra-{PLATFORM}-{LABEL}-archive.tar.gz"
ENV = {"REDIST_MIRRORS": None, "REDIST_BASE_URL": None, "REDIST_OCI_AUTH": None, "DOCKER_CONFIG": None}


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def write_upstream(root, products=("cudnn",)):
    """<root>/<product>/redist/: one release with a .tar.xz of a bit more
    than one 8 MiB zstd frame of tar, and a .tar.gz (which gets no copy)."""
    rng = random.Random(7)
    gz = gzip.compress(b"libextra tar stand-in", mtime=0)  # not recompressed: only its suffix matters
    words = [bytes(rng.choice(b"abcdefghij") for _ in range(12)) for _ in range(512)]
    big = b" ".join(rng.choice(words) for _ in range(800_000))  # ~10 MiB, compresses well
    for product in products:
        redist = os.path.join(root, product, "redist")
        top = os.path.basename(XZ_REL)[:-len(".tar.xz")]
        xz = support.write_xz_archive(redist, XZ_REL, top, {"lib/libcudnn.so.9": big, "LICENSE": b"license\n"},
                                      preset=1)
        gz_path = os.path.join(redist, GZ_REL)
        os.makedirs(os.path.dirname(gz_path), exist_ok=True)
        with open(gz_path, "wb") as f:
            f.write(gz)
        doc = {"release_date": "2026-01-01", "release_label": LABEL, "release_product": product,
               "cudnn": {"name": "cuDNN", "license": "test", "version": LABEL + ".56",
                         PLATFORM: {"cuda12": support.artifact_entry(XZ_REL, xz)}},
               "libextra": {"name": "extra", "license": "test", "version": "1.0",
                            PLATFORM: support.artifact_entry(GZ_REL, gz)}}
        with open(os.path.join(redist, f"redistrib_{LABEL}.json"), "w") as f:
            json.dump(doc, f, indent=4)
    return xz


def frames(path):
    """`zstd -lv` of the file: its frame count and decompressed size."""
    out = subprocess.run(["zstd", "-lv", path], capture_output=True)
    return out.stdout.decode() + out.stderr.decode()


class RecompressBase(unittest.TestCase):
    def setUp(self):
        self.scratch = support.make_scratch_dir(self.id())
        self.upstream = os.path.join(self.scratch, "upstream")
        self.xz = write_upstream(self.upstream, products=("cudnn", "cudnnx"))
        self.tar = lzma.decompress(self.xz)
        self.env = dict(ENV, XDG_CACHE_HOME=os.path.join(self.scratch, "cache"))
        self.key, self.pub = support.make_key_pair(self.scratch)

    def mirror(self, to, *extra, product="cudnn", sign=True):
        keys = ("--sign-key", self.key) if sign else ()
        res = support.run_tool("redist", "mirror", product, LABEL, "--to", to, "--platform", PLATFORM,
                               "--base-url", support.file_base_url(self.upstream), "--recompress", "zstd",
                               "--json", *keys, *extra, env=self.env, check=0)
        return json.loads(res.stdout)

    def check_sidecar(self, sidecar, copy):
        manifest = os.path.join(self.upstream, "cudnn", "redist", f"redistrib_{LABEL}.json")
        with open(manifest, "rb") as f:
            manifest_sha = sha256(f.read())
        self.assertEqual(sidecar, {
            "format": "redist-recompressed-2",
            "release_label": LABEL,
            "manifest_sha256": manifest_sha,
            "copies": [{
                "original_sha256": sha256(self.xz),
                "original_size": str(len(self.xz)),
                "relative_path": ZST_REL,
                "compression": "zstd",
                "sha256": sha256(copy),
                "size": str(len(copy)),
                "tar_sha256": sha256(self.tar),
                "tar_size": str(len(self.tar)),
                # One 8 MiB piece per frame; the list of a one-piece tar is its SHA-256.
                "tar_piece_bytes": str(8 << 20),
                "tar_list_sha256": support.hash_list(self.tar, 8 << 20),
                # What the copy unpacks to, as a client digests it (computed here from the tar alone).
                "tree_sha256": support.tree_digest(self.tar),
            }]})


class DirectoryMirror(RecompressBase):
    def test_copy_sidecar_and_a_rerun_that_recompresses_nothing(self):
        dest = os.path.join(self.scratch, "mirror")
        redist = os.path.join(dest, "cudnn", "redist")
        out = self.mirror(dest)
        self.assertEqual(out["copies_made"], 1)
        release = out["releases"][0]
        self.assertEqual([c["relative_path"] for c in release["copies"]], [ZST_REL])  # none for the .tar.gz

        with open(os.path.join(redist, ZST_REL), "rb") as f:
            copy = f.read()
        # The copy decodes to exactly the original's tar, in several frames that record their size.
        self.assertEqual(subprocess.run(["zstd", "-dc"], input=copy, capture_output=True, check=True).stdout,
                         self.tar)
        listing = frames(os.path.join(redist, ZST_REL))
        self.assertRegex(listing, r"# Zstandard Frames: *[2-9]", listing)
        self.assertNotRegex(listing, r"Decompressed Size: *(Unknown|-)", listing)

        sidecar = os.path.join(redist, f"recompressed_{LABEL}.json")
        self.check_sidecar(support.load_json(sidecar), copy)
        self.assertEqual(release["sidecar_path"], sidecar)
        # The record's signature is the operator's, and openssl accepts it.
        self.assertEqual(release["signed_by"], support.key_fingerprint(self.pub))
        self.assertTrue(support.verify_signature(self.pub, sidecar, sidecar + ".sig"))
        # NVIDIA's manifest stays byte for byte.
        with open(os.path.join(self.upstream, "cudnn", "redist", f"redistrib_{LABEL}.json"), "rb") as a, \
                open(os.path.join(redist, f"redistrib_{LABEL}.json"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertFalse(os.path.exists(os.path.join(redist, GZ_REL[:-len(".tar.gz")] + ".tar.zst")))

        # A second run recompresses nothing and changes no byte.
        before = support.tree_snapshot(dest)
        again = self.mirror(dest)
        self.assertEqual(again["copies_made"], 0)
        self.assertEqual([c["status"] for c in again["releases"][0]["copies"]], ["up_to_date"])
        self.assertEqual(support.tree_snapshot(dest), before)
        plain = support.run_tool("redist", "mirror", "cudnn", LABEL, "--to", dest, "--platform", PLATFORM,
                                 "--base-url", support.file_base_url(self.upstream), "--recompress", "zstd",
                                 "--sign-key", self.key, env=self.env, check=0)
        self.assertIn(f"up to date  {ZST_REL}", plain.stdout)
        self.assertIn("1 zstd copy, 0 recompressed", plain.stdout)

        # A damaged copy is made again, and the sidecar still matches it.
        with open(os.path.join(redist, ZST_REL), "r+b") as f:
            f.write(b"\0\0\0\0")
        repaired = self.mirror(dest)
        self.assertEqual(repaired["copies_made"], 1)
        with open(os.path.join(redist, ZST_REL), "rb") as f:
            self.check_sidecar(support.load_json(os.path.join(redist, f"recompressed_{LABEL}.json")), f.read())

        # A sidecar that does not parse is not trusted for anything: the copy is made again, the sidecar rewritten.
        for garbage in (b"{", b'{"format": "redist-recompressed-2", "copies": [{"sha256": 1}]}'):
            with open(os.path.join(redist, f"recompressed_{LABEL}.json"), "wb") as f:
                f.write(garbage)
            again = self.mirror(dest)
            self.assertEqual(again["copies_made"], 1)
            with open(os.path.join(redist, ZST_REL), "rb") as f:
                self.check_sidecar(support.load_json(os.path.join(redist, f"recompressed_{LABEL}.json")), f.read())

    def test_a_planted_record_is_never_reused_nor_signed(self):
        # Anyone who can write the target plants a record and a copy of another tar, consistent with each other.
        dest = os.path.join(self.scratch, "mirror")
        self.mirror(dest)
        redist = os.path.join(dest, "cudnn", "redist")
        sidecar = os.path.join(redist, f"recompressed_{LABEL}.json")
        evil_tar = self.tar + b"\0" * 1024  # another tar stream
        evil = subprocess.run(["zstd", "-q", "-c"], input=evil_tar, capture_output=True, check=True).stdout
        with open(os.path.join(redist, ZST_REL), "wb") as f:
            f.write(evil)
        record = support.load_json(sidecar)
        record["copies"][0].update(sha256=sha256(evil), size=str(len(evil)), tar_sha256=sha256(evil_tar),
                                   tar_size=str(len(evil_tar)))
        support.save_json(sidecar, record)
        os.remove(sidecar + ".sig")  # unsigned, as a planter without the key leaves it
        out = self.mirror(dest)
        self.assertEqual(out["copies_made"], 1)  # made again from the verified original
        with open(os.path.join(redist, ZST_REL), "rb") as f:
            copy = f.read()
        self.assertEqual(subprocess.run(["zstd", "-dc"], input=copy, capture_output=True, check=True).stdout,
                         self.tar)
        self.check_sidecar(support.load_json(sidecar), copy)
        self.assertTrue(support.verify_signature(self.pub, sidecar, sidecar + ".sig"))

    def test_without_a_key_the_record_is_unsigned_and_said_so(self):
        dest = os.path.join(self.scratch, "mirror")
        self.mirror(dest)  # signed first
        sidecar = os.path.join(dest, "cudnn", "redist", f"recompressed_{LABEL}.json")
        self.assertTrue(os.path.exists(sidecar + ".sig"))
        res = support.run_tool("redist", "mirror", "cudnn", LABEL, "--to", dest, "--platform", PLATFORM,
                               "--base-url", support.file_base_url(self.upstream), "--recompress", "zstd",
                               env=self.env, check=0)
        self.assertIn("not signed", res.stderr)
        self.assertIn("1 recompressed", res.stdout)  # a record signed by no key of this run is not reused
        self.assertFalse(os.path.exists(sidecar + ".sig"))  # no stale signature is left beside the record
        # A key that cannot sign fails before anything is fetched.
        public_only = support.run_tool("redist", "mirror", "cudnn", LABEL, "--to", dest, "--platform", PLATFORM,
                                       "--base-url", support.file_base_url(self.upstream), "--recompress", "zstd",
                                       "--sign-key", self.pub, env=self.env, check=None)
        self.assertEqual(public_only.returncode, 2, public_only.stderr)
        self.assertIn(self.pub, public_only.stderr)

    def test_one_sidecar_entry_per_original(self):
        # The same archive under two paths: one copy, one entry (the client refuses a second entry).
        redist_up = os.path.join(self.upstream, "cudnn", "redist")
        manifest_file = os.path.join(redist_up, f"redistrib_{LABEL}.json")
        doc = support.load_json(manifest_file)
        dup = f"cudnn_dup/{PLATFORM}/cudnn_dup-{PLATFORM}-{LABEL}-archive.tar.xz"
        os.makedirs(os.path.dirname(os.path.join(redist_up, dup)))
        with open(os.path.join(redist_up, dup), "wb") as f:
            f.write(self.xz)
        doc["cudnn_dup"] = {"name": "dup", "license": "test", "version": "1",
                            PLATFORM: support.artifact_entry(dup, self.xz)}
        support.save_json(manifest_file, doc)
        dest = os.path.join(self.scratch, "mirror")
        out = self.mirror(dest, "--jobs", "2")
        self.assertEqual(out["copies_made"], 1)
        sidecar = support.load_json(os.path.join(dest, "cudnn", "redist", f"recompressed_{LABEL}.json"))
        self.assertEqual([c["original_sha256"] for c in sidecar["copies"]], [sha256(self.xz)])

    def test_no_copy_over_a_path_a_manifest_lists(self):
        # An upstream that publishes the .tar.zst itself keeps its own file: no copy is written there.
        redist_up = os.path.join(self.upstream, "cudnn", "redist")
        manifest_file = os.path.join(redist_up, f"redistrib_{LABEL}.json")
        doc = support.load_json(manifest_file)
        zst = b"not a copy, the upstream's own bytes"
        with open(os.path.join(redist_up, ZST_REL), "wb") as f:
            f.write(zst)
        doc["cudnn_zst"] = {"name": "zst", "license": "test", "version": "1",
                            PLATFORM: support.artifact_entry(ZST_REL, zst)}
        support.save_json(manifest_file, doc)
        dest = os.path.join(self.scratch, "mirror")
        res = support.run_tool("redist", "mirror", "cudnn", LABEL, "--to", dest, "--platform", PLATFORM,
                               "--base-url", support.file_base_url(self.upstream), "--recompress", "zstd",
                               "--component", "cudnn", env=self.env, check=0)
        self.assertNotIn("  recompressed", res.stdout)
        self.assertIn("0 zstd copies, 0 recompressed", res.stdout)
        self.assertFalse(os.path.exists(os.path.join(dest, "cudnn", "redist", ZST_REL)))
        self.assertFalse(os.path.exists(os.path.join(dest, "cudnn", "redist", f"recompressed_{LABEL}.json")))


def needs_registry(cls):
    return unittest.skipUnless(os.access(registry_fixture.REGISTRY, os.X_OK),
                               "docker-registry is not installed (scripts/install-deps.sh)")(cls)


@needs_registry
class RegistryMirror(RecompressBase):
    def setUp(self):
        super().setUp()
        self.registry = registry_fixture.Registry(os.path.join(self.scratch, "registry"))
        self.registry.__enter__()
        self.addCleanup(self.registry.__exit__)

    def image_manifest(self, product="cudnn"):
        return json.loads(support.http_get(
            f"http://127.0.0.1:{self.registry.port}/v2/nvidia/{product}/manifests/{LABEL}",
            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})[2])

    def test_sidecar_and_copy_layers_then_a_rerun_that_recompresses_nothing(self):
        out = self.mirror(self.registry.url)
        self.assertEqual(out["copies_made"], 1)
        layers = {l["annotations"]["org.opencontainers.image.title"]: l for l in self.image_manifest()["layers"]}
        self.assertIn(ZST_REL, layers)
        sidecar_layer = layers[f"recompressed_{LABEL}.json"]
        self.assertEqual(sidecar_layer["mediaType"], "application/vnd.redist.recompressed.v1+json")
        signature_layer = layers[f"recompressed_{LABEL}.json.sig"]
        self.assertEqual(signature_layer["mediaType"], "application/vnd.redist.recompressed.signature.v1")
        self.assertTrue(support.verify_signature(
            self.pub, self.registry.blob_data_path(sidecar_layer["digest"][len("sha256:"):]),
            self.registry.blob_data_path(signature_layer["digest"][len("sha256:"):])))
        with open(self.registry.blob_data_path(layers[ZST_REL]["digest"][len("sha256:"):]), "rb") as f:
            copy = f.read()
        self.assertEqual(subprocess.run(["zstd", "-dc"], input=copy, capture_output=True, check=True).stdout,
                         self.tar)
        with open(self.registry.blob_data_path(sidecar_layer["digest"][len("sha256:"):]), "rb") as f:
            self.check_sidecar(json.loads(f.read()), copy)

        # The re-run finds the previous copies through the sidecar's URL
        # (oci+http://.../cudnn/redist/recompressed_<label>.json: the tag's
        # titled layer, checked against its digest) and the blob by digest.
        manifest_before = self.image_manifest()
        again = self.mirror(self.registry.url)
        self.assertEqual(again["copies_made"], 0)
        self.assertEqual(again["releases"][0]["manifest_status"], "up_to_date")
        self.assertEqual(self.image_manifest(), manifest_before)

    def test_blobs_are_mounted_from_another_product(self):
        # A repository without the blobs: the registry answers 202 and they are uploaded as usual.
        first = self.mirror(self.registry.url, "--mount-from", "cudnnx", product="cudnn")
        self.assertEqual(sorted(f["status"] for f in first["releases"][0]["files"]), ["downloaded", "downloaded"])
        # The upload sessions those 202s opened were closed (DELETE), not left to the registry's purge:
        # distribution removes a closed session's data and start time (its empty folders stay).
        uploads = os.path.join(self.registry.storage, "docker", "registry", "v2", "repositories", "nvidia", "cudnn",
                               "_uploads")
        self.assertEqual([os.path.join(d, f) for d, _, files in os.walk(uploads) for f in files
                          if f in ("data", "startedat")], [])
        # The second product's archives are gone upstream: only a mount can place them.
        for rel in (XZ_REL, GZ_REL):
            os.remove(os.path.join(self.upstream, "cudnnx", "redist", rel))
        out = self.mirror(self.registry.url, "--mount-from", "cudnn", product="cudnnx")
        self.assertEqual(sorted(f["status"] for f in out["releases"][0]["files"]), ["mounted", "mounted"])
        self.assertEqual(out["bytes_downloaded"], 0)
        layers = {l["annotations"]["org.opencontainers.image.title"]: l["digest"]
                  for l in self.image_manifest("cudnnx")["layers"]}
        self.assertEqual(layers[XZ_REL], "sha256:" + sha256(self.xz))
        # Mounted blobs are served from the second repository.
        status, _headers, body = support.http_get(
            f"http://127.0.0.1:{self.registry.port}/v2/nvidia/cudnnx/blobs/sha256:{sha256(self.xz)}")
        self.assertEqual(status, 200)
        self.assertEqual(body, self.xz)


if __name__ == "__main__":
    unittest.main()
