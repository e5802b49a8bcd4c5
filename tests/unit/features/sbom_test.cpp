// SBOMs: rendering (SPDX 2.3, CycloneDX 1.5), license mapping, the SPDX
// package verification code, and collecting from a real prefix.
// Schema validation against the official schemas is in tests/e2e/test_sbom.py.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

#include "archive/sha256.hpp"
#include "redist/prefix.hpp"
#include "redist/sbom.hpp"
#include "store/stage.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace redist_test;
using namespace redist;

namespace {

sbom_document two_component_doc() {
    sbom_document doc;
    doc.name = "opt-cudnn";
    doc.created = "2026-11-30T12:00:00Z";
    doc.tool_version = "0.1.0";
    sbom_component a;
    a.installed.product = "cudnn";
    a.installed.release_label = "9.27.0";
    a.installed.component = "cudnn";
    a.installed.component_version = "9.27.0.42";
    a.installed.platform = "linux-x86_64";
    a.installed.variant = "cuda12";
    a.installed.url = "https://example.invalid/cudnn/redist/cudnn/linux-x86_64/cudnn-9.27.0.42_cuda12-archive.tar.xz";
    a.installed.archive_sha256 = std::string(64, 'b');
    a.license = "cudnn";
    a.files = {{"include/empty.h", 0, sha256_hex(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
               {"lib/abc.so", 3, sha256_hex("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d"}};
    sbom_component b = a;
    b.installed.component = "helper";
    b.installed.variant.reset();
    b.license = "MIT";
    b.files.resize(1);
    doc.components = {a, b};
    return doc;
}

}  // namespace

TEST_CASE("sbom formats parse by name") {
    CHECK(parse_sbom_format("spdx-json").value() == sbom_format::spdx_json);
    CHECK(parse_sbom_format("cyclonedx-json").value() == sbom_format::cyclonedx_json);
    const auto bad = parse_sbom_format("spdx");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error_value().code == error_code::usage);
    CHECK(bad.error_value().message.find("cyclonedx-json") != std::string::npos);
}

TEST_CASE("SPDX: packages, files with SHA-1 and SHA-256, verification code, licenses") {
    const std::string out = render_sbom(two_component_doc(), sbom_format::spdx_json);
    CHECK(out.find("\"spdxVersion\": \"SPDX-2.3\"") != std::string::npos);
    // Known answer: SHA-1 over the sorted SHA-1s of "" and "abc" (SPDX 2.3 §7.9).
    CHECK(out.find("\"packageVerificationCodeValue\": \"29d0dbdfff975c93e2d75e5024fe8b650ec847af\"") !=
          std::string::npos);
    CHECK(out.find("\"fileName\": \"./lib/abc.so\"") != std::string::npos);
    CHECK(out.find(sha256_hex("abc")) != std::string::npos);
    // "cudnn" is no SPDX identifier: a LicenseRef with extracted text; MIT is one.
    CHECK(out.find("\"licenseDeclared\": \"LicenseRef-cudnn\"") != std::string::npos);
    CHECK(out.find("\"licenseDeclared\": \"MIT\"") != std::string::npos);
    CHECK(out.find("\"licenseId\": \"LicenseRef-cudnn\"") != std::string::npos);
    CHECK(out.find("share/licenses/cudnn/") != std::string::npos);
    CHECK(out.find("redist:variant=cuda12") != std::string::npos);
    CHECK(out.find("\"downloadLocation\": \"https://example.invalid/cudnn/") != std::string::npos);
    // Deterministic: same document, same bytes; another timestamp, another namespace.
    CHECK(render_sbom(two_component_doc(), sbom_format::spdx_json) == out);
    auto later = two_component_doc();
    later.created = "2026-12-01T00:00:00Z";
    const std::string other = render_sbom(later, sbom_format::spdx_json);
    const std::regex ns("\"documentNamespace\": \"([^\"]+)\"");
    std::smatch m1, m2;
    REQUIRE(std::regex_search(out, m1, ns));
    REQUIRE(std::regex_search(other, m2, ns));
    CHECK(m1[1] != m2[1]);
}

TEST_CASE("CycloneDX: components with files, named and SPDX licenses, a UUID serial number") {
    const std::string out = render_sbom(two_component_doc(), sbom_format::cyclonedx_json);
    CHECK(out.find("\"specVersion\": \"1.5\"") != std::string::npos);
    CHECK(std::regex_search(out, std::regex("\"serialNumber\": \"urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-"
                                            "[89ab][0-9a-f]{3}-[0-9a-f]{12}\"")));
    CHECK(out.find("\"id\": \"MIT\"") != std::string::npos);
    CHECK(out.find("\"name\": \"cudnn\"") != std::string::npos);
    CHECK(out.find("\"alg\": \"SHA-1\"") != std::string::npos);
    CHECK(out.find("\"type\": \"file\"") != std::string::npos);
    CHECK(out.find("\"name\": \"redist:variant\"") != std::string::npos);
    CHECK(out.find("pkg:generic/nvidia/cudnn@9.27.0.42?checksum=sha256:") != std::string::npos);
}

namespace {

// Above one 8 MiB piece: its receipt records a piece list.
const std::string& big_library() {
    static const std::string bytes = [] {
        std::string b((8u << 20) + 4096, '\0');
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>(i * 13 % 251);
        return b;
    }();
    return bytes;
}

}  // namespace

TEST_CASE("collect_sbom hashes every installed regular file and refuses a modified one") {
    const fs::path prefix = scratch("collect") / "prefix";
    {
        auto lock = prefix_lock::acquire(prefix);
        REQUIRE(lock.ok());
        auto stage = make_stage(lock->prefix(), "comp");
        REQUIRE(stage.ok());
        std::vector<unpacked_entry> entries;
        for (const auto& [path, content] : std::vector<std::pair<std::string, std::string>>{
                 {"include/a.h", "abc"}, {"lib/libx.so.1", "library"}, {"lib/libbig.so", big_library()}}) {
            write(*stage / path, content);
            entries.push_back({path, entry_kind::regular, content.size(), receipt_digest_oracle(content), "", 0644,
                               piece_size_for(content.size())});
        }
        fs::create_symlink("libx.so.1", *stage / "lib/libx.so");
        entries.push_back({"lib/libx.so", entry_kind::symlink, 0, "", "libx.so.1", 0777});
        staged_component staged;
        staged.stage_dir = *stage;
        staged.new_receipt.product = "demo";
        staged.new_receipt.release_label = "1.0.0";
        staged.new_receipt.component = "comp";
        staged.new_receipt.component_version = "1.0.0.1";
        staged.new_receipt.platform = "linux-x86_64";
        staged.new_receipt.url = "file:///mirror/demo/comp.tar.xz";
        staged.new_receipt.archive_sha256 = std::string(64, 'c');
        REQUIRE(prepare_stage(staged, entries).ok());
        std::vector<staged_component> all;
        all.push_back(std::move(staged));
        REQUIRE(commit_stages(*lock, std::move(all)).ok());
    }
    sbom_request req;
    req.prefix = prefix;
    req.licenses[{"demo", "comp"}] = "MIT";
    req.created = "2026-11-30T12:00:00Z";
    auto doc = collect_sbom(req);
    REQUIRE(doc.ok());
    REQUIRE(doc->components.size() == 1);
    const auto& c = doc->components[0];
    CHECK(c.license == "MIT");
    CHECK(doc->name == "prefix");
    std::vector<std::string> paths;
    for (const auto& f : c.files) paths.push_back(f.path);
    // the symlink is not a file
    CHECK(paths == std::vector<std::string>{"include/a.h", "lib/libbig.so", "lib/libx.so.1"});
    CHECK(c.files[0].sha256 == sha256_hex("abc"));
    CHECK(c.files[0].sha1 == "a9993e364706816aba3e25717850c26c9cd0d89d");
    // The receipt records the large file by its piece list; the SBOM states its plain SHA-256.
    CHECK(c.files[1].sha256 == sha256_hex(big_library()));
    CHECK(c.files[1].size == big_library().size());

    // The large file with one byte changed, same size: the piece list catches it.
    std::string changed = big_library();
    changed[(8u << 20) + 7] ^= 1;
    write(prefix / "lib/libbig.so", changed);
    auto big_modified = collect_sbom(req);
    REQUIRE_FALSE(big_modified.ok());
    CHECK(big_modified.error_value().code == error_code::integrity);
    CHECK(big_modified.error_value().path.find("lib/libbig.so") != std::string::npos);
    write(prefix / "lib/libbig.so", big_library());
    REQUIRE(collect_sbom(req).ok());

    // A modified file: the SBOM would lie, so it is an integrity error naming the file.
    write(prefix / "lib/libx.so.1", "LIBRARY");
    auto modified = collect_sbom(req);
    REQUIRE_FALSE(modified.ok());
    CHECK(modified.error_value().code == error_code::integrity);
    CHECK(modified.error_value().path.find("lib/libx.so.1") != std::string::npos);

    // A file replaced by a symlink pointing outside the prefix is not followed.
    fs::remove(prefix / "lib/libx.so.1");
    write(prefix.parent_path() / "outside", "library");
    fs::create_symlink("../../outside", prefix / "lib/libx.so.1");
    auto escaped = collect_sbom(req);
    REQUIRE_FALSE(escaped.ok());
    CHECK(escaped.error_value().path.find("lib/libx.so.1") != std::string::npos);
}

TEST_CASE("collect_sbom on a prefix without receipts is not_found") {
    const fs::path prefix = scratch("empty");
    auto doc = collect_sbom({prefix, {}, {}, "0.1.0"});
    REQUIRE_FALSE(doc.ok());
    CHECK(doc.error_value().code == error_code::not_found);
}
