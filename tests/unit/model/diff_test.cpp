// Manifest diffs over the real manifests in tests/data/manifests, the alias
// table (cuda_cccl <-> cccl), and an artifact replaced in place.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "model/diff.hpp"
#include "redist/diff.hpp"

using namespace redist;

namespace {

manifest load(const std::string& product, const std::string& label) {
    const std::string path = std::string(REDIST_TEST_DATA) + "/manifests/" + product + "/redistrib_" + label + ".json";
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    auto m = parse_manifest(ss.str(), path);
    REQUIRE(m.ok());
    return std::move(*m);
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST_CASE("cuDNN 9.8.0 -> 9.27.0: a component added, versions, platforms, variants, sizes") {
    const auto d = diff_manifests(load("cudnn", "9.8.0"), load("cudnn", "9.27.0"));
    CHECK(d.old_label == "9.8.0");
    CHECK(d.new_label == "9.27.0");
    CHECK(d.added == std::vector<std::string>{"cudnn_jit"});
    CHECK(d.removed.empty());
    CHECK(d.renamed.empty());
    REQUIRE(d.versions.size() == 2);
    CHECK(d.versions[0].component == "cudnn");
    CHECK(d.versions[0].from == "9.8.0.87");
    CHECK(d.versions[0].to == "9.27.0.42");
    CHECK(d.platforms_added == std::vector<std::string>{"windows-arm64"});
    CHECK(d.platforms_removed == std::vector<std::string>{"linux-aarch64"});
    CHECK(d.variants_added == std::vector<std::string>{"cuda13"});
    CHECK(d.variants_removed == std::vector<std::string>{"cuda11"});
    CHECK(d.old_total_size > 0);
    CHECK(d.new_total_size > 0);
    CHECK_FALSE(d.has_replacement());  // new releases ship new files, nothing swapped in place
    const auto rebuilt = std::count_if(d.artifacts.begin(), d.artifacts.end(), [](const auto& a) {
        return a.kind == artifact_change_kind::rebuilt && a.component == "cudnn" && a.platform == "linux-x86_64" &&
               a.variant == std::optional<std::string>("cuda12");
    });
    CHECK(rebuilt == 1);
    const std::string json = manifest_diff_to_json(d);
    CHECK(json.find("\"components_added\": [\n    \"cudnn_jit\"\n  ]") != std::string::npos);
    CHECK(json.find("\"change\": \"added\"") != std::string::npos);
}

TEST_CASE("CUDA 12.9.1 -> 13.0.0: components added and removed") {
    const auto d = diff_manifests(load("cuda", "12.9.1"), load("cuda", "13.0.0"));
    for (const auto* c : {"cuda_compat", "cuda_demo_suite", "cuda_nvprof", "cuda_nvvp", "libcudla"})
        CHECK(contains(d.removed, c));
    for (const auto* c : {"cuda_crt", "cuda_ctadvisor", "cuda_culibos", "libnvptxcompiler", "libnvvm"})
        CHECK(contains(d.added, c));
    CHECK(d.removed.size() == 5);
    CHECK(d.added.size() == 5);
    CHECK(d.renamed.empty());  // both releases still call it cuda_cccl
}

TEST_CASE("a renamed component (cuda_cccl -> cccl) is reported as renamed, and found by either name") {
    const manifest before = load("cuda", "12.9.1");
    manifest after = load("cuda", "13.0.0");
    auto it = std::find_if(after.components.begin(), after.components.end(),
                           [](const component& c) { return c.key == "cuda_cccl"; });
    REQUIRE(it != after.components.end());
    it->key = "cccl";
    for (auto& a : it->artifacts) a.component = "cccl";

    const auto d = diff_manifests(before, after);
    REQUIRE(d.renamed.size() == 1);
    CHECK(d.renamed[0].from == "cuda_cccl");
    CHECK(d.renamed[0].to == "cccl");
    CHECK_FALSE(contains(d.added, "cccl"));
    CHECK_FALSE(contains(d.removed, "cuda_cccl"));
    const bool version_under_new_name = std::any_of(d.versions.begin(), d.versions.end(),
                                                    [](const auto& v) { return v.component == "cccl"; });
    CHECK(version_under_new_name);

    // Backwards too: the old name in a newer manifest.
    const auto back = diff_manifests(after, before);
    REQUIRE(back.renamed.size() == 1);
    CHECK(back.renamed[0].from == "cccl");
    CHECK(back.renamed[0].to == "cuda_cccl");

    REQUIRE(find_component_or_alias(after, "cuda_cccl") != nullptr);
    CHECK(find_component_or_alias(after, "cuda_cccl")->key == "cccl");
    CHECK(find_component_or_alias(before, "cccl")->key == "cuda_cccl");
    CHECK(find_component_or_alias(before, "no_such_component") == nullptr);
    REQUIRE(component_aliases().size() >= 1);
    CHECK(component_aliases()[0].old_key == "cuda_cccl");
}

TEST_CASE("an artifact replaced in place: same relative_path, new hash and size") {
    const manifest before = load("cudnn", "9.27.0");
    manifest after = before;
    auto& a = after.components[0].artifacts[0];
    a.sha256 = std::string(64, 'f');
    a.size += 10;
    const auto d = diff_manifests(before, after);
    CHECK(d.has_replacement());
    REQUIRE(d.artifacts.size() == 1);
    CHECK(d.artifacts[0].kind == artifact_change_kind::replaced_in_place);
    CHECK(d.artifacts[0].old_relative_path == d.artifacts[0].new_relative_path);
    CHECK(d.artifacts[0].new_size == d.artifacts[0].old_size + 10);
    CHECK(d.versions.empty());
    CHECK_FALSE(d.empty());
    CHECK(d.new_total_size == d.old_total_size + 10);
    CHECK(diff_manifests(before, before).empty());
}

TEST_CASE("artifacts added and removed with a platform") {
    const manifest before = load("cudnn", "9.27.0");
    manifest after = before;
    auto& arts = after.components[0].artifacts;
    const std::string dropped = arts.front().platform;
    arts.erase(std::remove_if(arts.begin(), arts.end(), [&](const artifact& x) { return x.platform == dropped; }),
               arts.end());
    const auto d = diff_manifests(before, after);
    REQUIRE_FALSE(d.artifacts.empty());
    for (const auto& ch : d.artifacts) {
        CHECK(ch.kind == artifact_change_kind::removed);
        CHECK(ch.platform == dropped);
        CHECK(ch.new_relative_path.empty());
    }
    const auto back = diff_manifests(after, before);
    for (const auto& ch : back.artifacts) CHECK(ch.kind == artifact_change_kind::added);
}
