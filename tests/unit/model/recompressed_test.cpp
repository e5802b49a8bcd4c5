// Tests for redist/recompressed.hpp and model/recompressed_sidecar.hpp: the
// sidecar a mirror writes beside a manifest to describe its recompressed
// (.tar.zst) copies. Every rule of the
// format is checked by a document that breaks it; a valid one round-trips.
#include <catch2/catch.hpp>

#include <string>

#include "model/recompressed_sidecar.hpp"
#include "redist/lockfile.hpp"
#include "redist/manifest.hpp"

namespace {

const std::string A(64, 'a');
const std::string B(64, 'b');
const std::string C(64, 'c');
const std::string D(64, 'd');

std::string copy_json(const std::string& original = A, const std::string& path = "c/x-1.tar.zst",
                      const std::string& extra = "") {
    return R"({"original_sha256": ")" + original + R"(", "original_size": "5", "relative_path": ")" + path +
           R"(", "compression": "zstd", "sha256": ")" + B + R"(", "size": "10", "tar_sha256": ")" + C +
           R"(", "tar_size": "20")" + extra + "}";
}

std::string doc(const std::string& copies, const std::string& head = R"("format": "redist-recompressed-2")") {
    return "{" + head + R"(, "release_label": "1.0", "manifest_sha256": ")" + D + R"(", "copies": [)" + copies + "]}";
}

redist::error parse_error(const std::string& json) {
    auto r = redist::parse_recompressed(json, "http://m/recompressed_1.0.json");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == redist::error_code::bad_manifest);
    CHECK(r.error_value().source == "http://m/recompressed_1.0.json");
    return r.error_value();
}

redist::manifest one_artifact_manifest(const std::string& path = "c/x-1.tar.xz") {
    redist::manifest m;
    m.release_label = "1.0";
    redist::component c;
    c.key = "c";
    redist::artifact a;
    a.component = "c";
    a.platform = "linux-x86_64";
    a.relative_path = path;
    a.sha256 = A;
    a.size = 5;
    c.artifacts.push_back(a);
    m.components.push_back(c);
    return m;
}

}  // namespace

TEST_CASE("recompressed: a valid record is read, lower-cased, and round-trips") {
    std::string upper = A;
    for (auto& ch : upper) ch = 'A';
    auto r = redist::parse_recompressed(doc(copy_json(upper)), "s");
    REQUIRE(r.ok());
    CHECK(r->release_label == "1.0");
    CHECK(r->manifest_sha256 == D);
    REQUIRE(r->copies.size() == 1);
    const auto& c = r->copies[0];
    CHECK(c.original_sha256 == A);
    CHECK(c.relative_path == "c/x-1.tar.zst");
    CHECK(c.sha256 == B);
    CHECK(c.size == 10);
    CHECK(c.tar_sha256 == C);
    CHECK(c.tar_size == 20);
    CHECK(r->find(upper) == &r->copies[0]);
    CHECK(r->find(B) == nullptr);
    const std::string written = redist::recompressed_to_json(*r);
    auto again = redist::parse_recompressed(written, "s");
    REQUIRE(again.ok());
    CHECK(redist::recompressed_to_json(*again) == written);
}

TEST_CASE("recompressed: unknown keys are skipped, an empty copy list is valid") {
    CHECK(redist::parse_recompressed(doc(copy_json(A, "c/x-1.tar.zst", R"(, "later": [1])")), "s").ok());
    auto empty = redist::parse_recompressed(doc(""), "s");
    REQUIRE(empty.ok());
    CHECK(empty->copies.empty());
}

TEST_CASE("recompressed: the format must be redist-recompressed-2") {
    // Version 1 records named no original's size: a signature could not bind it.
    CHECK(parse_error(doc(copy_json(), R"("format": "redist-recompressed-1")")).json_path == "format");
    CHECK(parse_error(doc(copy_json(), R"("format": "redist-recompressed-3")")).json_path == "format");
    CHECK(parse_error(R"({"release_label": "1.0", "manifest_sha256": ")" + D + R"(", "copies": []})")
              .message.find("format") != std::string::npos);
}

TEST_CASE("recompressed: broken JSON and duplicate keys are refused") {
    parse_error("{");
    parse_error("[]");
    CHECK(parse_error(doc(copy_json(A, "c/x-1.tar.zst", R"(, "sha256": ")" + B + "\""))).json_path ==
          "copies[0].sha256");
    parse_error(doc(copy_json()) + "x");
}

TEST_CASE("recompressed: every copy field is required and checked") {
    const std::string good = copy_json();
    for (const char* key : {"original_sha256", "original_size", "relative_path", "compression", "sha256", "size",
                            "tar_sha256", "tar_size"}) {
        // Renaming a key drops it.
        std::string broken = good;
        const std::string quoted = std::string("\"") + key + "\"";
        broken.replace(broken.find(quoted), quoted.size(), "\"x_renamed\"");
        INFO(key);
        parse_error(doc(broken));
    }
    CHECK(parse_error(doc(copy_json("abc"))).json_path == "copies[0].original_sha256");
    CHECK(parse_error(doc(copy_json(std::string(64, 'g')))).json_path == "copies[0].original_sha256");
    std::string lz = copy_json();
    lz.replace(lz.find("zstd"), 4, "lz4");
    CHECK(parse_error(doc(lz)).json_path == "copies[0].compression");
    std::string size_number = copy_json();
    size_number.replace(size_number.find(R"("10")"), 4, "10");
    CHECK(parse_error(doc(size_number)).json_path == "copies[0].size");
    std::string size_big = copy_json();
    size_big.replace(size_big.find(R"("20")"), 4, R"("18446744073709551616")");
    CHECK(parse_error(doc(size_big)).json_path == "copies[0].tar_size");
    std::string size_sign = copy_json();
    size_sign.replace(size_sign.find(R"("10")"), 4, R"("-1")");
    CHECK(parse_error(doc(size_sign)).json_path == "copies[0].size");
}

TEST_CASE("recompressed: a copy's tar hash list is read, checked and round-trips") {
    const std::string list = R"(, "tar_piece_bytes": "8388608", "tar_list_sha256": ")" + A + R"(")";
    auto r = redist::parse_recompressed(doc(copy_json(A, "c/x-1.tar.zst", list)), "s");
    REQUIRE(r.ok());
    CHECK(r->copies[0].tar_piece_bytes == 8388608);
    CHECK(r->copies[0].tar_list_sha256 == A);
    const std::string written = redist::recompressed_to_json(*r);
    CHECK(written.find("tar_list_sha256") != std::string::npos);
    auto again = redist::parse_recompressed(written, "s");
    REQUIRE(again.ok());
    CHECK(again->copies[0].tar_piece_bytes == 8388608);
    CHECK(redist::recompressed_to_json(*again) == written);
    // Without a list, the written record has none (older readers see what they know).
    auto plain = redist::parse_recompressed(doc(copy_json()), "s");
    REQUIRE(plain.ok());
    CHECK(plain->copies[0].tar_piece_bytes == 0);
    CHECK(redist::recompressed_to_json(*plain).find("tar_piece_bytes") == std::string::npos);

    CHECK(parse_error(doc(copy_json(A, "c/x-1.tar.zst", R"(, "tar_piece_bytes": "8388608")"))).json_path ==
          "copies[0]");
    CHECK(parse_error(doc(copy_json(A, "c/x-1.tar.zst", R"(, "tar_list_sha256": ")" + A + R"(")"))).json_path ==
          "copies[0]");
    for (const char* bytes : {"0", "1000", "32768", "134217728", "2147483648", "-1", "8M"}) {
        CAPTURE(bytes);
        const std::string bad = R"(, "tar_piece_bytes": ")" + std::string(bytes) + R"(", "tar_list_sha256": ")" + A +
                                R"(")";
        CHECK(parse_error(doc(copy_json(A, "c/x-1.tar.zst", bad))).json_path == "copies[0].tar_piece_bytes");
    }
    const std::string short_list = R"(, "tar_piece_bytes": "65536", "tar_list_sha256": "abc")";
    CHECK(parse_error(doc(copy_json(A, "c/x-1.tar.zst", short_list))).json_path == "copies[0].tar_list_sha256");
}

TEST_CASE("recompressed: a copy's tree digest is read, checked and round-trips") {
    auto r = redist::parse_recompressed(doc(copy_json(A, "c/x-1.tar.zst", R"(, "tree_sha256": ")" + B + R"(")")), "s");
    REQUIRE(r.ok());
    CHECK(r->copies[0].tree_sha256 == B);
    const std::string written = redist::recompressed_to_json(*r);
    auto again = redist::parse_recompressed(written, "s");
    REQUIRE(again.ok());
    CHECK(again->copies[0].tree_sha256 == B);
    CHECK(redist::recompressed_to_json(*again) == written);
    // Without one, the written record has none.
    auto plain = redist::parse_recompressed(doc(copy_json()), "s");
    REQUIRE(plain.ok());
    CHECK(plain->copies[0].tree_sha256.empty());
    CHECK(redist::recompressed_to_json(*plain).find("tree_sha256") == std::string::npos);
    for (const char* bad : {R"("abc")", "1", R"("")", "null"})
        CHECK(parse_error(doc(copy_json(A, "c/x-1.tar.zst", std::string(R"(, "tree_sha256": )") + bad))).json_path ==
              "copies[0].tree_sha256");
}

TEST_CASE("recompressed: a copy's path must be safe and end in .tar.zst") {
    // A leading run of at most three ".." is a bin-archive pool path (manifest.hpp); nothing else climbs.
    for (const char* path : {"../../../../x.tar.zst", "c/../x.tar.zst", "/abs/x.tar.zst", "c//x.tar.zst",
                             "c/%2e%2e/x.tar.zst", "http://evil/x.tar.zst", "c/x-1.tar.xz", "c/x-1.tar.zst.sh", ""}) {
        INFO(path);
        CHECK(parse_error(doc(copy_json(A, path))).json_path == "copies[0].relative_path");
    }
}

TEST_CASE("recompressed: a copy of a bin-archive pool file keeps the pool path") {
    auto r = redist::parse_recompressed(doc(copy_json(A, "../../../pool/linux-x86_64/u/x-1.tar.zst")), "s");
    REQUIRE(r.ok());
    CHECK(r->copies[0].relative_path == "../../../pool/linux-x86_64/u/x-1.tar.zst");
}

TEST_CASE("recompressed: a second copy of one original is refused") {
    CHECK(parse_error(doc(copy_json() + "," + copy_json())).json_path == "copies[1]");
}

TEST_CASE("recompressed: the manifest digest and label are checked") {
    CHECK(parse_error(R"({"format": "redist-recompressed-2", "release_label": "1.0", "manifest_sha256": "x", )"
                      R"("copies": []})")
              .json_path == "manifest_sha256");
    CHECK(parse_error(R"({"format": "redist-recompressed-2", "release_label": "../x", "manifest_sha256": ")" + D +
                      R"(", "copies": []})")
              .json_path == "release_label");
}

TEST_CASE("recompressed: documents over 4 MiB are refused") {
    const std::string big = doc(copy_json()) + std::string(redist::kMaxRecompressedBytes, ' ');
    CHECK(parse_error(big).message.find("4 MiB") != std::string::npos);
}

TEST_CASE("recompressed: copy paths and the document name") {
    CHECK(redist::recompressed_document_name("9.19.0") == "recompressed_9.19.0.json");
    CHECK(redist::recompressed_signature_name("9.19.0") == "recompressed_9.19.0.json.sig");
    CHECK(redist::recompressed_copy_path("a/b-1.tar.xz") == "a/b-1.tar.zst");
    CHECK(redist::recompressed_copy_path("a/b-1.txz") == "a/b-1.tar.zst");
    CHECK(redist::recompressed_copy_path("a/b-1.zip").empty());
    CHECK(redist::recompressed_copy_path("a/b-1.tar.gz").empty());
}

TEST_CASE("recompressed: a record is checked against the manifest it belongs to") {
    auto r = redist::parse_recompressed(doc(copy_json()), "s");
    REQUIRE(r.ok());
    const auto m = one_artifact_manifest();
    CHECK(redist::check_recompressed_for(*r, m, D, "s").ok());
    std::string upper_d = D;
    for (auto& ch : upper_d) ch = 'D';
    CHECK(redist::check_recompressed_for(*r, m, upper_d, "s").ok());

    auto other = redist::check_recompressed_for(*r, m, A, "s");
    REQUIRE_FALSE(other.ok());
    CHECK(other.error_value().json_path == "manifest_sha256");
    CHECK(other.error_value().message.find("another manifest") != std::string::npos);

    auto m2 = m;
    m2.release_label = "2.0";
    auto label = redist::check_recompressed_for(*r, m2, D, "s");
    REQUIRE_FALSE(label.ok());
    CHECK(label.error_value().json_path == "release_label");

    auto moved = redist::check_recompressed_for(*r, one_artifact_manifest("c/y-1.tar.xz"), D, "s");
    REQUIRE_FALSE(moved.ok());
    CHECK(moved.error_value().json_path == "copies[0].relative_path");

    auto resized = one_artifact_manifest();
    resized.components[0].artifacts[0].size = 6;
    auto size = redist::check_recompressed_for(*r, resized, D, "s");
    REQUIRE_FALSE(size.ok());
    CHECK(size.error_value().json_path == "copies[0].original_size");

    auto zip = redist::check_recompressed_for(*r, one_artifact_manifest("c/x-1.zip"), D, "s");
    REQUIRE_FALSE(zip.ok());
    CHECK(zip.error_value().json_path == "copies[0].original_sha256");

    auto stranger = redist::parse_recompressed(doc(copy_json(B)), "s");
    REQUIRE(stranger.ok());
    auto unknown = redist::check_recompressed_for(*stranger, m, D, "s");
    REQUIRE_FALSE(unknown.ok());
    CHECK(unknown.error_value().json_path == "copies[0].original_sha256");
}

TEST_CASE("recompressed: a lock pins the copy's tar and its signer, and old locks stay valid") {
    redist::resolved_release release;
    release.product = "c";
    release.label = "1.0";
    release.manifest_url = "http://m/c/redist/redistrib_1.0.json";
    release.artifact_base_url = "http://m/c/redist/";
    release.manifest_sha256 = D;
    release.parsed = one_artifact_manifest();
    auto plain = redist::make_lockfile(release, {"linux-x86_64"}, {}, {});
    REQUIRE(plain.ok());
    const std::string old_text = redist::lockfile_to_json(*plain);
    CHECK(old_text.find("tar_sha256") == std::string::npos);
    auto old_lock = redist::lockfile_from_json(old_text, "redist.lock");
    REQUIRE(old_lock.ok());
    auto old_plan = redist::plan_from_lock(*old_lock, "linux-x86_64", std::nullopt, {});
    REQUIRE(old_plan.ok());
    CHECK(old_plan->from_lock);
    CHECK(old_plan->locked_tar_sha256.empty());

    auto record = redist::parse_recompressed(doc(copy_json()), "s");
    REQUIRE(record.ok());
    release.recompressed = *record;
    // Copies no trusted key signed are never pinned.
    auto unsigned_lock = redist::make_lockfile(release, {"linux-x86_64"}, {}, {});
    REQUIRE(unsigned_lock.ok());
    CHECK(unsigned_lock->artifacts[0].tar_sha256.empty());
    release.recompressed_signer = B;
    auto pinned = redist::make_lockfile(release, {"linux-x86_64"}, {}, {});
    REQUIRE(pinned.ok());
    REQUIRE(pinned->artifacts.size() == 1);
    CHECK(pinned->artifacts[0].tar_sha256 == C);
    CHECK(pinned->artifacts[0].copy_key == B);
    const std::string text = redist::lockfile_to_json(*pinned);
    auto back = redist::lockfile_from_json(text, "redist.lock");
    REQUIRE(back.ok());
    CHECK(back->artifacts[0].tar_sha256 == C);
    CHECK(redist::lockfile_to_json(*back) == text);
    auto plan = redist::plan_from_lock(*back, "linux-x86_64", std::nullopt, {});
    REQUIRE(plan.ok());
    CHECK(plan->locked_tar_sha256.at(A) == C);
    CHECK(plan->locked_tar_list_sha256.empty());  // the record has no hash list: nothing to pin
    // A copy with a hash list: the lock pins it beside the tar's SHA-256.
    release.recompressed.copies[0].tar_piece_bytes = 1u << 16;
    release.recompressed.copies[0].tar_list_sha256 = D;
    auto listed = redist::make_lockfile(release, {"linux-x86_64"}, {}, {});
    REQUIRE(listed.ok());
    CHECK(listed->artifacts[0].tar_list_sha256 == D);
    auto listed_back = redist::lockfile_from_json(redist::lockfile_to_json(*listed), "redist.lock");
    REQUIRE(listed_back.ok());
    CHECK(listed_back->artifacts[0].tar_list_sha256 == D);
    auto listed_plan = redist::plan_from_lock(*listed_back, "linux-x86_64", std::nullopt, {});
    REQUIRE(listed_plan.ok());
    CHECK(listed_plan->locked_tar_list_sha256.at(A) == D);
    CHECK(listed_plan->locked_tree_sha256.empty());
    // A copy with its tree's digest: the lock pins that too.
    release.recompressed.copies[0].tree_sha256 = B;
    auto treed = redist::make_lockfile(release, {"linux-x86_64"}, {}, {});
    REQUIRE(treed.ok());
    CHECK(treed->artifacts[0].tree_sha256 == B);
    auto treed_back = redist::lockfile_from_json(redist::lockfile_to_json(*treed), "redist.lock");
    REQUIRE(treed_back.ok());
    auto treed_plan = redist::plan_from_lock(*treed_back, "linux-x86_64", std::nullopt, {});
    REQUIRE(treed_plan.ok());
    CHECK(treed_plan->locked_tree_sha256.at(A) == B);
    CHECK(treed_plan->locked_tar_list_sha256.at(A) == D);
    // A pin without its signer (a lock from before signatures) is not honoured.
    auto keyless = *back;
    keyless.artifacts[0].copy_key.clear();
    auto keyless_plan = redist::plan_from_lock(keyless, "linux-x86_64", std::nullopt, {});
    REQUIRE(keyless_plan.ok());
    CHECK(keyless_plan->locked_tar_sha256.empty());

    std::string bad = text;
    bad.replace(bad.find(C), 64, "nope");
    auto refused = redist::lockfile_from_json(bad, "redist.lock");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().json_path == "artifacts[0].tar_sha256");
}
