// Resolving a release over several bases (redist/resolve.hpp): NVIDIA's
// classic host, then its bin-archive (source_policy::fallback_bases), here two
// file:// trees.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "model/urls.hpp"
#include "redist/resolve.hpp"
#include "support.hpp"

using namespace redist;
namespace fs = std::filesystem;

namespace {

const std::string kHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

void write_release(const fs::path& base, const std::string& label, const std::string& relative_path) {
    redist_test::write(base / "cudnn" / "redist" / ("redistrib_" + label + ".json"),
                       R"({"release_label": ")" + label + R"(", "release_product": "cudnn", "cudnn": {"version": ")" +
                           label + R"(", "linux-x86_64": {"relative_path": ")" + relative_path + R"(", "sha256": ")" +
                           kHex + R"(", "size": "1"}}})");
}

struct two_bases {
    std::string classic, bin_archive;
    // `name`: a directory of its own, since CTest runs the cases of this file at once.
    explicit two_bases(const std::string& name) {
        const fs::path root = redist_test::scratch(name);
        write_release(root / "classic", "9.1.0", "cudnn/linux-x86_64/cudnn-9.1.0.tar.xz");
        write_release(root / "bin-archive", "9.2.0", "../../../pool/linux-x86_64/U/cudnn-9.2.0.tar.xz");
        classic = to_url((root / "classic").string());
        bin_archive = to_url((root / "bin-archive").string());
    }
    release_request request(const std::string& spec, bool both) const {
        release_request r;
        r.product = "cudnn";
        r.version_spec = spec;
        r.base_url = classic;
        r.sources.cache_dir = std::nullopt;
        if (both) r.sources.fallback_bases = {bin_archive};
        return r;
    }
};

}  // namespace

TEST_CASE("versions: a fallback base adds the labels it has") {
    const two_bases t("two_bases_1");
    source_policy one;
    one.cache_dir = std::nullopt;
    auto alone = list_versions(t.classic, "cudnn", {}, one);
    REQUIRE(alone.ok());
    CHECK(*alone == std::vector<std::string>{"9.1.0"});
    source_policy both = one;
    both.fallback_bases = {t.bin_archive};
    auto merged = list_versions(t.classic, "cudnn", {}, both);
    REQUIRE(merged.ok());
    std::vector<std::string> labels = *merged;
    std::sort(labels.begin(), labels.end());
    CHECK(labels == std::vector<std::string>{"9.1.0", "9.2.0"});
}

TEST_CASE("a spec picks the newest match over every base, from the base that has it") {
    const two_bases t("two_bases_2");
    auto newest = resolve_release(t.request("latest", true), {});
    REQUIRE(newest.ok());
    CHECK(newest->label == "9.2.0");
    CHECK(newest->manifest_url == manifest_url(t.bin_archive, "cudnn", "9.2.0"));
    CHECK(newest->artifact_base_url == t.bin_archive + "/cudnn/redist/");
    CHECK(artifact_url(newest->artifact_base_url, newest->parsed.components[0].artifacts[0].relative_path, kHex) ==
          t.bin_archive + "/pool/linux-x86_64/U/cudnn-9.2.0.tar.xz");

    auto exact = resolve_release(t.request("9.2.0", true), {});
    REQUIRE(exact.ok());
    CHECK(exact->artifact_base_url == t.bin_archive + "/cudnn/redist/");

    auto older = resolve_release(t.request("9.1", true), {});
    REQUIRE(older.ok());
    CHECK(older->label == "9.1.0");
    CHECK(older->artifact_base_url == t.classic + "/cudnn/redist/");

    // One base (--base-url): only its releases.
    auto alone = resolve_release(t.request("latest", false), {});
    REQUIRE(alone.ok());
    CHECK(alone->label == "9.1.0");
    CHECK_FALSE(resolve_release(t.request("9.2.0", false), {}).ok());
}
