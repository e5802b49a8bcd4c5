// Where manifests and artifacts live (redist/urls.hpp): a relative_path as a
// URL reference (RFC 3986 5.2) against the manifest's directory, and where a
// mirror keeps it.
#include <catch2/catch.hpp>

#include "model/manifest.hpp"
#include "model/urls.hpp"
#include "redist/manifest.hpp"

using namespace redist;

namespace {

const std::string kHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kPool = "../../../pool/linux-x86_64/5B515474-7E78-11F1-8656-C51E4F4B317F/cudnn-9.0.tar.xz";
const std::string kBinArchive = "https://packages.nvidia.com/bin-archive/release/cudnn/redist/";

std::string resolved(std::string_view directory, std::string_view relative_path) {
    auto r = resolve_reference(directory, relative_path);
    REQUIRE(r.ok());
    return r.value();
}

std::string refusal(std::string_view directory, std::string_view relative_path) {
    auto r = resolve_reference(directory, relative_path);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::bad_manifest);
    return r.error_value().message;
}

}  // namespace

TEST_CASE("a relative_path without dot segments joins the manifest's directory, as before") {
    CHECK(resolved("https://h/compute/cudnn/redist/", "cudnn/linux-x86_64/a.tar.xz") ==
          "https://h/compute/cudnn/redist/cudnn/linux-x86_64/a.tar.xz");
    CHECK(artifact_url("https://h/cudnn/redist/", "a.tar.xz", kHex) == "https://h/cudnn/redist/a.tar.xz");
}

TEST_CASE("bin-archive: ../../../pool resolves to the origin's pool") {
    CHECK(resolved(kBinArchive, kPool) ==
          "https://packages.nvidia.com/bin-archive/pool/linux-x86_64/5B515474-7E78-11F1-8656-C51E4F4B317F/"
          "cudnn-9.0.tar.xz");
    CHECK(artifact_url(kBinArchive, kPool, kHex) == resolved(kBinArchive, kPool));
    // The merge drops the last segment of a base that does not end in '/' (RFC 3986 5.2.3).
    CHECK(resolved("https://h/a/b/redistrib_1.json", "../x.tar.xz") == "https://h/a/x.tar.xz");
    // Scheme, host, port and credentials of the base stay as they are.
    CHECK(resolved("http://u:p@127.0.0.1:8080/r/c/redist/", "../../x.tar.xz") ==
          "http://u:p@127.0.0.1:8080/r/x.tar.xz");
}

TEST_CASE("a climb to the origin's root is fine, one step above it is refused") {
    CHECK(resolved("http://127.0.0.1:1/a/cudnn/redist/", kPool) ==
          "http://127.0.0.1:1/pool/linux-x86_64/5B515474-7E78-11F1-8656-C51E4F4B317F/cudnn-9.0.tar.xz");
    const std::string why = refusal("http://u:secret@127.0.0.1:1/cudnn/redist/", kPool);
    CHECK(why.find("climbs above the root of http://") != std::string::npos);
    CHECK(why.find("secret") == std::string::npos);
    CHECK(artifact_url("http://127.0.0.1:1/cudnn/redist/", kPool, kHex).empty());
    CHECK_FALSE(resolve_reference("https://h/redist/", "../../x.tar.xz").ok());
    CHECK(resolved("https://h/redist/", "../x.tar.xz") == "https://h/x.tar.xz");
}

TEST_CASE("file://: a climb stops at <base>, two above the manifest's directory (a mirror's pool)") {
    CHECK(resolved("file:///srv/m/cudnn/redist/", kPool) ==
          "file:///srv/m/pool/linux-x86_64/5B515474-7E78-11F1-8656-C51E4F4B317F/cudnn-9.0.tar.xz");
    CHECK(resolved("file:///srv/m/cudnn/redist/", "../../x.tar.xz") == "file:///srv/m/x.tar.xz");
    CHECK(resolved("file:///srv/m/cudnn/redist/", "../x.tar.xz") == "file:///srv/m/cudnn/x.tar.xz");
    // A shallow directory: never above "/".
    CHECK(resolved("file:///m/", "../../../x.tar.xz") == "file:///x.tar.xz");
}

TEST_CASE("a base that is not a URL is refused") {
    CHECK(refusal("relative/dir/", "../x.tar.xz").find("not a URL") != std::string::npos);
    CHECK(refusal("/abs/dir/", "../x.tar.xz").find("not a URL") != std::string::npos);
}

TEST_CASE("a mirror keeps an artifact at its path relative to the mirror's base") {
    CHECK(mirror_artifact_path("cudnn", "cudnn/linux-x86_64/a.tar.xz") == "cudnn/redist/cudnn/linux-x86_64/a.tar.xz");
    CHECK(mirror_artifact_path("cudnn", kPool) ==
          "pool/linux-x86_64/5B515474-7E78-11F1-8656-C51E4F4B317F/cudnn-9.0.tar.xz");
    CHECK(mirror_artifact_path("cudnn", "../../a.tar.xz") == "a.tar.xz");
    CHECK(mirror_artifact_path("cudnn", "../a.tar.xz") == "cudnn/a.tar.xz");
    CHECK(mirror_artifact_url("http://m/base", "cudnn", kPool, kHex) ==
          "http://m/base/pool/linux-x86_64/5B515474-7E78-11F1-8656-C51E4F4B317F/cudnn-9.0.tar.xz");
    CHECK(mirror_artifact_url("http://m/base", "cudnn", "x/a.tar.xz", kHex) == "http://m/base/cudnn/redist/x/a.tar.xz");
    CHECK(mirror_artifact_url("oci://h/ns", "cudnn", kPool, kHex) == "oci://h/ns/cudnn/blobs/sha256:" + kHex);
    // A file:// base resolves the mirror's own manifest to the same place.
    CHECK(resolved("file:///srv/m/cudnn/redist/", kPool) == mirror_artifact_url("file:///srv/m", "cudnn", kPool, kHex));
}

TEST_CASE("relative_path: '..' only as a leading run of at most three") {
    CHECK(artifact_path_problem(kPool) == nullptr);
    CHECK(artifact_path_problem("../a.tar.xz") == nullptr);
    for (const char* bad :
         {"../../../../pool/a.tar.xz", "a/../../b.tar.xz", "a/../b.tar.xz", "./a.tar.xz", "a/./b.tar.xz", "../..", "..",
          "//host/a.tar.xz", "http://other/a.tar.xz", "../%2e%2e/a.tar.xz", "..%2f../a.tar.xz", "../a.tar.xz?x=1",
          "../a.tar.xz#f", "..\\a.tar.xz", "../../../"}) {
        INFO(bad);
        CHECK(artifact_path_problem(bad) != nullptr);
    }
    CHECK(std::string(artifact_path_problem("../../../../a.tar.xz")).find("more than three") != std::string::npos);
}
