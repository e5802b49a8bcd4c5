// Tests for redist/select.hpp (and its rules, model/select_rules.hpp):
// choosing artifacts by platform, CUDA variant and component. Manifests are built by hand, so selection is tested
// without the parser; a few cases then run over real published manifests.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "model/select_rules.hpp"
#include "redist/manifest.hpp"
#include "redist/resolve.hpp"
#include "redist/select.hpp"

namespace {

using redist::artifact;
using redist::component;
using redist::manifest;

artifact make_artifact(const std::string& comp, const std::string& platform, std::optional<std::string> variant) {
    artifact a;
    a.component = comp;
    a.platform = platform;
    a.variant = variant;
    a.relative_path = comp + "/" + platform + "/" + comp + "-" + platform + (variant ? "_" + *variant : "") +
                      "-archive.tar.xz";
    a.sha256 = std::string(64, 'a');
    a.size = 1234;
    a.format = redist::archive_format::tar_xz;
    return a;
}

// Platform spec: {platform, {variants...}, plain?}
struct platform_spec {
    std::string platform;
    std::vector<std::string> variants;
    bool plain = false;
};

component make_component(const std::string& key, const std::vector<platform_spec>& platforms) {
    component c;
    c.key = key;
    c.name = key;
    for (const auto& p : platforms) {
        for (const auto& v : p.variants) c.artifacts.push_back(make_artifact(key, p.platform, v));
        if (p.plain) c.artifacts.push_back(make_artifact(key, p.platform, std::nullopt));
    }
    return c;
}

// Shaped like cudnn 9.27.0.
manifest cudnn_like() {
    manifest m;
    m.release_label = "9.27.0";
    m.release_product = "cudnn";
    m.components.push_back(make_component("cudnn", {{"linux-x86_64", {"cuda12", "cuda13"}},
                                                    {"linux-sbsa", {"cuda12", "cuda13"}},
                                                    {"windows-x86_64", {"cuda12", "cuda13"}},
                                                    {"windows-arm64", {"cuda13"}, true}}));
    m.components.push_back(
        make_component("cudnn_jit", {{"linux-x86_64", {"cuda12", "cuda13"}}, {"linux-sbsa", {"cuda12", "cuda13"}}}));
    m.components.push_back(make_component("cudnn_samples", {{"source", {}, true}}));
    return m;
}

// Shaped like a CUDA toolkit release: plain artifacts only.
manifest toolkit_like() {
    manifest m;
    m.release_label = "12.9.1";
    m.components.push_back(make_component("cuda_cudart", {{"linux-x86_64", {}, true}, {"linux-sbsa", {}, true}}));
    m.components.push_back(make_component("cuda_nvcc", {{"linux-x86_64", {}, true}, {"windows-x86_64", {}, true}}));
    m.components.push_back(make_component("cuda_compat", {{"linux-aarch64", {}, true}}));
    return m;
}

std::string describe(const redist::selection& s) {
    std::string out;
    for (const auto& a : s.artifacts) out += a.component + ":" + a.platform + ":" + a.variant.value_or("-") + " ";
    return out;
}

redist::selection select_ok(const manifest& m, const redist::selection_request& request) {
    auto r = redist::select_artifacts(m, request);
    INFO((r ? std::string() : r.error_value().describe()));
    REQUIRE(r.ok());
    return std::move(r).value();
}

redist::error select_fails(const manifest& m, const redist::selection_request& request) {
    auto r = redist::select_artifacts(m, request);
    INFO((r ? describe(r.value()) : std::string()));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().message.find('\n') == std::string::npos);
    return r.error_value();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::optional<std::string> read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST_CASE("available_cuda_majors lists the variants on a platform", "[select]") {
    const auto m = cudnn_like();
    CHECK(redist::available_cuda_majors(m, "linux-x86_64", {}) == std::vector<int>{12, 13});
    CHECK(redist::available_cuda_majors(m, "windows-arm64", {}) == std::vector<int>{13});
    CHECK(redist::available_cuda_majors(m, "source", {}).empty());
    CHECK(redist::available_cuda_majors(m, "linux-ppc64le", {}).empty());
    CHECK(redist::available_cuda_majors(m, "windows-x86_64", {"cudnn_jit"}).empty());
    CHECK(redist::available_cuda_majors(toolkit_like(), "linux-x86_64", {}).empty());

    manifest odd;
    odd.components.push_back(make_component("x", {{"linux-x86_64", {"cuda9", "cuda11", "cuda10", "weird"}}}));
    CHECK(redist::available_cuda_majors(odd, "linux-x86_64", {}) == std::vector<int>{9, 10, 11});
}

TEST_CASE("select_artifacts: an explicit CUDA variant", "[select]") {
    const auto m = cudnn_like();
    const auto s = select_ok(m, {"linux-x86_64", 12, {}});
    CHECK(describe(s) == "cudnn:linux-x86_64:cuda12 cudnn_jit:linux-x86_64:cuda12 ");
    CHECK(s.cuda_major == 12);
    CHECK_FALSE(s.cuda_major_defaulted);

    const auto one = select_ok(m, {"linux-sbsa", 13, {"cudnn"}});
    CHECK(describe(one) == "cudnn:linux-sbsa:cuda13 ");
}

TEST_CASE("select_artifacts: no variant requested picks the newest", "[select]") {
    const auto m = cudnn_like();
    const auto s = select_ok(m, {"linux-x86_64", std::nullopt, {}});
    CHECK(describe(s) == "cudnn:linux-x86_64:cuda13 cudnn_jit:linux-x86_64:cuda13 ");
    CHECK(s.cuda_major == 13);
    CHECK(s.cuda_major_defaulted);
}

TEST_CASE("select_artifacts: a platform with a variant and a plain artifact", "[select]") {
    const auto m = cudnn_like();
    // cuda13 exists on windows-arm64; cuda12 does not, so the plain one is used.
    CHECK(describe(select_ok(m, {"windows-arm64", 13, {}})) == "cudnn:windows-arm64:cuda13 ");
    CHECK(describe(select_ok(m, {"windows-arm64", 12, {}})) == "cudnn:windows-arm64:- ");
    const auto s = select_ok(m, {"windows-arm64", std::nullopt, {}});
    CHECK(describe(s) == "cudnn:windows-arm64:cuda13 ");
    CHECK(s.cuda_major == 13);
}

TEST_CASE("select_artifacts: plain-only components satisfy any variant", "[select]") {
    const auto m = toolkit_like();
    const auto s = select_ok(m, {"linux-x86_64", 12, {}});
    CHECK(describe(s) == "cuda_cudart:linux-x86_64:- cuda_nvcc:linux-x86_64:- ");
    const auto d = select_ok(m, {"linux-x86_64", std::nullopt, {}});
    CHECK(describe(d) == "cuda_cudart:linux-x86_64:- cuda_nvcc:linux-x86_64:- ");
    CHECK_FALSE(d.cuda_major.has_value());
    CHECK_FALSE(d.cuda_major_defaulted);
}

TEST_CASE("select_artifacts: component filtering keeps manifest order", "[select]") {
    const auto m = toolkit_like();
    const auto s = select_ok(m, {"linux-x86_64", std::nullopt, {"cuda_nvcc", "cuda_cudart", "cuda_nvcc"}});
    CHECK(describe(s) == "cuda_cudart:linux-x86_64:- cuda_nvcc:linux-x86_64:- ");
    // With every component, those without the platform are skipped silently.
    CHECK(describe(select_ok(m, {"linux-aarch64", std::nullopt, {}})) == "cuda_compat:linux-aarch64:- ");
    CHECK(describe(select_ok(cudnn_like(), {"source", std::nullopt, {}})) == "cudnn_samples:source:- ");
}

TEST_CASE("select_artifacts: the default variant is one every component has", "[select]") {
    manifest m;
    m.components.push_back(make_component("new", {{"linux-x86_64", {"cuda12", "cuda13"}}}));
    m.components.push_back(make_component("lagging", {{"linux-x86_64", {"cuda11", "cuda12"}}}));
    m.components.push_back(make_component("plain", {{"linux-x86_64", {}, true}}));
    const auto s = select_ok(m, {"linux-x86_64", std::nullopt, {}});
    CHECK(s.cuda_major == 12);
    CHECK(s.cuda_major_defaulted);
    CHECK(describe(s) == "new:linux-x86_64:cuda12 lagging:linux-x86_64:cuda12 plain:linux-x86_64:- ");
    // Alone, "new" gets its newest.
    CHECK(select_ok(m, {"linux-x86_64", std::nullopt, {"new"}}).cuda_major == 13);

    // No common variant: the newest is chosen and the laggard is reported.
    manifest disjoint;
    disjoint.components.push_back(make_component("a", {{"linux-x86_64", {"cuda13"}}}));
    disjoint.components.push_back(make_component("b", {{"linux-x86_64", {"cuda11"}}}));
    const auto e = select_fails(disjoint, {"linux-x86_64", std::nullopt, {}});
    CHECK(e.code == redist::error_code::not_found);
    CHECK(contains(e.message, "'b'"));
    CHECK(contains(e.message, "cuda13"));
    CHECK(contains(e.message, "available variants: cuda11"));
}

TEST_CASE("select_artifacts: errors list what is available", "[select]") {
    const auto m = cudnn_like();

    SECTION("unknown component") {
        const auto e = select_fails(m, {"linux-x86_64", 12, {"cudnn", "cudnn_frontend"}});
        CHECK(e.code == redist::error_code::not_found);
        CHECK(contains(e.message, "cudnn_frontend"));
        CHECK(contains(e.message, "cudnn, cudnn_jit, cudnn_samples"));
    }
    SECTION("a named component lacks the platform") {
        const auto e = select_fails(m, {"windows-x86_64", 13, {"cudnn_jit"}});
        CHECK(e.code == redist::error_code::not_found);
        CHECK(contains(e.message, "cudnn_jit"));
        CHECK(contains(e.message, "windows-x86_64"));
        CHECK(contains(e.message, "linux-x86_64, linux-sbsa"));
    }
    SECTION("no component has the platform") {
        const auto e = select_fails(m, {"linux-ppc64le", std::nullopt, {}});
        CHECK(e.code == redist::error_code::not_found);
        CHECK(contains(e.message, "linux-ppc64le"));
        CHECK(contains(e.message, "linux-x86_64, linux-sbsa, windows-x86_64, windows-arm64, source"));
    }
    SECTION("the variant is missing") {
        const auto e = select_fails(m, {"linux-x86_64", 11, {}});
        CHECK(e.code == redist::error_code::not_found);
        CHECK(contains(e.message, "cuda11"));
        CHECK(contains(e.message, "linux-x86_64"));
        CHECK(contains(e.message, "cuda12, cuda13"));
    }
    SECTION("empty platform") {
        const auto e = select_fails(m, {"", 12, {}});
        CHECK(e.code == redist::error_code::usage);
    }
    SECTION("empty manifest") {
        const auto e = select_fails(manifest{}, {"linux-x86_64", std::nullopt, {}});
        CHECK(e.code == redist::error_code::not_found);
    }
}

// Real manifests, through the parser.
TEST_CASE("select_artifacts over real manifests", "[select][real]") {
    const std::string data = REDIST_TEST_DATA;

    const auto cudnn_text = read_text(data + "/manifests/cudnn/redistrib_9.27.0.json");
    REQUIRE(cudnn_text.has_value());
    const auto cudnn = redist::parse_manifest(*cudnn_text, "cudnn/redistrib_9.27.0.json");
    INFO((cudnn ? std::string() : cudnn.error_value().describe()));
    REQUIRE(cudnn.ok());

    auto s = select_ok(*cudnn, {"windows-arm64", 13, {"cudnn"}});
    REQUIRE(s.artifacts.size() == 1);
    CHECK(s.artifacts[0].variant == std::optional<std::string>("cuda13"));
    CHECK(contains(s.artifacts[0].relative_path, "_cuda13-archive.zip"));

    s = select_ok(*cudnn, {"windows-arm64", 12, {"cudnn"}});
    REQUIRE(s.artifacts.size() == 1);
    CHECK_FALSE(s.artifacts[0].variant.has_value());
    CHECK(contains(s.artifacts[0].relative_path, "_cuda13.4-archive.zip"));

    s = select_ok(*cudnn, {"linux-x86_64", std::nullopt, {}});
    CHECK(describe(s) == "cudnn:linux-x86_64:cuda13 cudnn_jit:linux-x86_64:cuda13 ");
    CHECK(s.cuda_major_defaulted);

    const auto toolkit_text = read_text(data + "/manifests/cuda/redistrib_12.9.1.json");
    REQUIRE(toolkit_text.has_value());
    const auto toolkit = redist::parse_manifest(*toolkit_text, "cuda/redistrib_12.9.1.json");
    REQUIRE(toolkit.ok());
    s = select_ok(*toolkit, {"linux-x86_64", 12, {"cuda_cudart", "cuda_nvcc"}});
    REQUIRE(s.artifacts.size() == 2);
    CHECK(s.artifacts[0].component == "cuda_cudart");
    CHECK(s.artifacts[1].component == "cuda_nvcc");
    for (const auto& a : s.artifacts) {
        CHECK_FALSE(a.variant.has_value());
        CHECK(a.platform == "linux-x86_64");
    }
    // Every toolkit component with a linux-x86_64 artifact, none with a variant.
    const auto all = select_ok(*toolkit, {"linux-x86_64", 12, {}});
    std::size_t expected = 0;
    for (const auto& c : toolkit->components) {
        for (const auto& a : c.artifacts) expected += a.platform == "linux-x86_64" ? 1 : 0;
    }
    CHECK(all.artifacts.size() == expected);
    CHECK(expected > 20);
}

TEST_CASE("what fetch installs without --component", "[select][real]") {
    const std::string data = REDIST_TEST_DATA;
    const auto toolkit_text = read_text(data + "/manifests/cuda/redistrib_12.9.1.json");
    REQUIRE(toolkit_text.has_value());
    const auto toolkit = redist::parse_manifest(*toolkit_text, "cuda/redistrib_12.9.1.json");
    REQUIRE(toolkit.ok());
    CHECK_FALSE(redist::is_library_family(*toolkit));
    CHECK(redist::is_library_family(cudnn_like()));  // at most 4 components
    manifest nvpl;
    for (const char* key : {"nvpl_blas", "nvpl_common", "nvpl_fft", "nvpl_lapack", "nvpl_rand", "nvpl_sparse"})
        nvpl.components.push_back(make_component(key, {{"linux-sbsa", {}, true}}));
    CHECK(redist::is_library_family(nvpl));

    // The toolkit: a choice is needed, and the refusal names the ways out.
    const auto e = select_fails(*toolkit, {"linux-x86_64", 12, {}, redist::unnamed_components::fetch_default});
    CHECK(e.code == redist::error_code::usage);
    CHECK(contains(e.message, "components (up to "));
    CHECK(contains(e.message, "GiB for linux-x86_64; largest: "));
    CHECK(contains(e.message, "--component a,b"));
    CHECK(contains(e.message, "--all"));
    // --all: everything but the driver's components.
    const auto all = select_ok(*toolkit, {"linux-x86_64", 12, {}, redist::unnamed_components::all});
    const auto every = select_ok(*toolkit, {"linux-x86_64", 12, {}});
    CHECK(all.artifacts.size() < every.artifacts.size());
    for (const auto& a : all.artifacts) CHECK_FALSE(redist::is_driver_component(a.component));
    CHECK(std::any_of(every.artifacts.begin(), every.artifacts.end(),
                      [](const artifact& a) { return a.component == "nvidia_driver"; }));
    // A named driver component is installed.
    CHECK(select_ok(*toolkit, {"linux-x86_64", 12, {"nvidia_driver"}, redist::unnamed_components::fetch_default})
              .artifacts.size() == 1);
    // A library family: every component, as before.
    CHECK(describe(select_ok(cudnn_like(), {"linux-x86_64", 12, {}, redist::unnamed_components::fetch_default})) ==
          "cudnn:linux-x86_64:cuda12 cudnn_jit:linux-x86_64:cuda12 ");
}

TEST_CASE("release_spec_for_cuda: the cuda product's releases are CUDA versions", "[select]") {
    CHECK(redist::release_spec_for_cuda("cuda", "latest", 12).value() == "12");
    CHECK(redist::release_spec_for_cuda("cuda", "", 12).value() == "12");
    CHECK(redist::release_spec_for_cuda("cuda", "12.9", 12).value() == "12.9");
    CHECK(redist::release_spec_for_cuda("cuda", "latest", std::nullopt).value() == "latest");
    CHECK(redist::release_spec_for_cuda("cudnn", "latest", 12).value() == "latest");
    CHECK(redist::release_spec_for_cuda("cudnn", "9.27", 12).value() == "9.27");
    const auto e = redist::release_spec_for_cuda("cuda", "13.0.0", 12);
    REQUIRE_FALSE(e.ok());
    CHECK(e.error_value().code == redist::error_code::usage);
    CHECK(contains(e.error_value().message, "'13.0.0'"));
    CHECK(contains(e.error_value().message, "--cuda 12"));
    CHECK_FALSE(redist::release_spec_for_cuda("cuda", "120", 12).ok());  // whole fields
}

// The one CUDA variant rule fetch and sync share (resolve.hpp): its default is
// select_artifacts()'s, so a component that lags on variants does not fail.
TEST_CASE("choose_cuda_variant: the newest variant every variant-only component offers", "[select]") {
    manifest m;
    m.components.push_back(make_component("cudnn", {{"linux-x86_64", {"cuda12", "cuda13"}}}));
    m.components.push_back(make_component("cudnn_jit", {{"linux-x86_64", {"cuda12"}}}));  // lags behind
    m.components.push_back(make_component("cuda_cudart", {{"linux-x86_64", {}, true}}));  // plain only
    const auto defaulted = redist::choose_cuda_variant(m, "linux-x86_64", {}, std::nullopt, std::nullopt);
    REQUIRE(defaulted.cuda_major);
    CHECK(*defaulted.cuda_major == 12);
    CHECK(redist::select_artifacts(m, {"linux-x86_64", defaulted.cuda_major, {}}).ok());
    // A detected CUDA 13 that the laggard lacks: the same default, saying why.
    const redist::cuda_detection cuda13{13, 0, "13.0.1", "CUDA_HOME=/usr/local/cuda"};
    const auto detected = redist::choose_cuda_variant(m, "linux-x86_64", {}, std::nullopt, cuda13);
    CHECK(detected.cuda_major == std::optional<int>(12));
    CHECK(detected.reason.find("detected CUDA 13.0.1") != std::string::npos);
    // Without the laggard, CUDA 13 is both the detected and the newest.
    const auto only_cudnn = redist::choose_cuda_variant(m, "linux-x86_64", {"cudnn"}, std::nullopt, cuda13);
    CHECK(only_cudnn.cuda_major == std::optional<int>(13));
    CHECK(redist::choose_cuda_variant(m, "linux-x86_64", {"cudnn"}, std::nullopt, std::nullopt).cuda_major ==
          std::optional<int>(13));
    // An explicit major always wins.
    CHECK(redist::choose_cuda_variant(m, "linux-x86_64", {}, redist::cuda_version{13, {}}, std::nullopt).cuda_major ==
          std::optional<int>(13));
}

// Variant keys may name a minor ("cuda13.2", as CUDA 13.2's cuda_compat is
// keyed): a major request takes its own key, else its newest minor; a minor
// request prefers its exact key, else the major's, else the nearest minor.
TEST_CASE("select_artifacts: minor-keyed CUDA variants", "[select]") {
    manifest m;
    m.components.push_back(make_component("cuda_compat", {{"linux-x86_64", {"cuda13.2"}}}));
    const auto variant_of = [&](const redist::selection_request& r) {
        const auto s = select_ok(m, r);
        REQUIRE(s.artifacts.size() == 1);
        return s.artifacts[0].variant.value_or("plain");
    };
    CHECK(redist::available_cuda_majors(m, "linux-x86_64", {}) == std::vector<int>{13});
    // Nothing asked, --cuda 13, --cuda 13.2: the one cuda13.2 artifact.
    CHECK(variant_of({"linux-x86_64", std::nullopt, {"cuda_compat"}}) == "cuda13.2");
    CHECK(variant_of({"linux-x86_64", 13, {"cuda_compat"}}) == "cuda13.2");
    CHECK(variant_of({"linux-x86_64", 13, {"cuda_compat"}, redist::unnamed_components::every, 2}) == "cuda13.2");
    CHECK(variant_of({"linux-x86_64", 13, {"cuda_compat"}, redist::unnamed_components::every, 0}) == "cuda13.2");
    // Another major: refused, naming the variant as keyed, in plain grammar.
    auto e = select_fails(m, {"linux-x86_64", 12, {"cuda_compat"}});
    CHECK(contains(e.message, "component 'cuda_compat' has no cuda12 artifact for platform 'linux-x86_64'"));
    CHECK(contains(e.message, "(available variants: cuda13.2)"));
    e = select_fails(m, {"linux-x86_64", 12, {"cuda_compat"}, redist::unnamed_components::every, 4});
    CHECK(contains(e.message, "has no cuda12.4 or other cuda12 artifact"));

    manifest many;
    many.components.push_back(
        make_component("lib", {{"linux-x86_64", {"cuda12", "cuda13.0", "cuda13.1", "cuda13.4", "cuda13"}}}));
    many.components.push_back(make_component("minors", {{"linux-x86_64", {"cuda13.1", "cuda13.4"}}}));
    const auto pick = [&](std::optional<int> major, std::optional<int> minor) {
        return describe(select_ok(many, {"linux-x86_64", major, {}, redist::unnamed_components::every, minor}));
    };
    CHECK(pick(13, std::nullopt) == "lib:linux-x86_64:cuda13 minors:linux-x86_64:cuda13.4 ");
    CHECK(pick(13, 1) == "lib:linux-x86_64:cuda13.1 minors:linux-x86_64:cuda13.1 ");
    CHECK(pick(13, 3) == "lib:linux-x86_64:cuda13 minors:linux-x86_64:cuda13.1 ");  // below, else above
    CHECK(pick(13, 0) == "lib:linux-x86_64:cuda13.0 minors:linux-x86_64:cuda13.1 ");
    CHECK(pick(std::nullopt, std::nullopt) == "lib:linux-x86_64:cuda13 minors:linux-x86_64:cuda13.4 ");
    CHECK(redist::variant_list(select_ok(many, {"linux-x86_64", 13, {}}).artifacts) == "cuda13, cuda13.4");

    // A variant-only component whose keys name no CUDA version: no variant
    // can be chosen, and the message reads "has no plain artifact".
    manifest odd;
    odd.components.push_back(make_component("tool", {{"linux-x86_64", {"sm90"}}}));
    e = select_fails(odd, {"linux-x86_64", std::nullopt, {"tool"}});
    CHECK(contains(e.message, "component 'tool' has no plain artifact for platform 'linux-x86_64'"));
}

TEST_CASE("choose_cuda_variant: the toolkit's minor is preferred", "[select]") {
    manifest m;
    m.components.push_back(make_component("cuda_compat", {{"linux-x86_64", {"cuda13.0", "cuda13.2"}}}));
    const redist::cuda_detection toolkit{13, 0, "13.0.1", "CUDA_HOME=/opt/cuda, version.json"};
    const auto choice = redist::choose_cuda_variant(m, "linux-x86_64", {}, std::nullopt, toolkit);
    CHECK(choice.cuda_major == std::optional<int>(13));
    CHECK(choice.cuda_minor == std::optional<int>(0));
    CHECK(contains(choice.reason, "detected CUDA 13.0.1 (CUDA_HOME=/opt/cuda, version.json)"));
    redist::selection_request r{"linux-x86_64", choice.cuda_major, {}};
    r.cuda_minor = choice.cuda_minor;
    CHECK(describe(select_ok(m, r)) == "cuda_compat:linux-x86_64:cuda13.0 ");
    // Nothing detected: the newest minor of the newest major.
    const auto newest = redist::choose_cuda_variant(m, "linux-x86_64", {}, std::nullopt, std::nullopt);
    CHECK(newest.cuda_major == std::optional<int>(13));
    CHECK_FALSE(newest.cuda_minor.has_value());
    CHECK(describe(select_ok(m, {"linux-x86_64", newest.cuda_major, {}})) == "cuda_compat:linux-x86_64:cuda13.2 ");
    // An explicit N.M, named as asked.
    const auto asked = redist::choose_cuda_variant(m, "linux-x86_64", {}, redist::cuda_version{13, 2}, toolkit,
                                                   "project.cuda");
    CHECK(asked.cuda_minor == std::optional<int>(2));
    CHECK(asked.reason == "project.cuda 13.2");
}

// No toolkit: the system driver's CUDA caps the major, and at its own major
// its minor is preferred (a minor key above it only where nothing else is).
TEST_CASE("choose_cuda_variant: what the system driver supports", "[select]") {
    manifest m;
    m.components.push_back(make_component("cudnn", {{"linux-x86_64", {"cuda11", "cuda12", "cuda13"}}}));
    m.components.push_back(make_component("compat", {{"linux-x86_64", {"cuda12", "cuda12.9", "cuda13", "cuda13.2"}}}));
    const auto driver = [](int encoded) { return redist::cuda_from_driver(encoded, "/usr/lib/libcuda.so.1"); };
    const auto pick = [&](const redist::variant_choice& c) {
        redist::selection_request r{"linux-x86_64", c.cuda_major, {}};
        r.cuda_minor = c.cuda_minor;
        return describe(select_ok(m, r));
    };
    const auto cuda12 = redist::choose_cuda_variant(m, "linux-x86_64", {}, std::nullopt, driver(12080));
    CHECK(cuda12.cuda_major == std::optional<int>(12));
    CHECK(cuda12.reason == "no CUDA toolkit found; the system driver supports CUDA 12.8 (/usr/lib/libcuda.so.1)");
    CHECK(pick(cuda12) == "cudnn:linux-x86_64:cuda12 compat:linux-x86_64:cuda12 ");
    // CUDA 13.2 runs the cuda13.2 key; 13.0 the major's own.
    CHECK(pick(redist::choose_cuda_variant(m, "linux-x86_64", {}, std::nullopt, driver(13020))) ==
          "cudnn:linux-x86_64:cuda13 compat:linux-x86_64:cuda13.2 ");
    CHECK(pick(redist::choose_cuda_variant(m, "linux-x86_64", {}, std::nullopt, driver(13000))) ==
          "cudnn:linux-x86_64:cuda13 compat:linux-x86_64:cuda13 ");
    // A driver newer than every variant: the newest.
    CHECK(redist::choose_cuda_variant(m, "linux-x86_64", {}, std::nullopt, driver(14010)).cuda_major ==
          std::optional<int>(13));
    // A major the driver runs that the selection lacks: the newest below it, saying so.
    manifest lagging;
    lagging.components.push_back(make_component("cudnn", {{"linux-x86_64", {"cuda11", "cuda13"}}}));
    const auto lower = redist::choose_cuda_variant(lagging, "linux-x86_64", {}, std::nullopt, driver(12080));
    CHECK(lower.cuda_major == std::optional<int>(11));
    CHECK_FALSE(lower.cuda_minor.has_value());
    CHECK(contains(lower.reason, "supports CUDA 12.8 (/usr/lib/libcuda.so.1); using CUDA 11, the newest variant"));
    // Older than every variant: the newest, saying that none runs.
    const auto old = redist::choose_cuda_variant(lagging, "linux-x86_64", {}, std::nullopt, driver(10020));
    CHECK(old.cuda_major == std::optional<int>(13));
    CHECK(contains(old.reason,
                   "supports CUDA 10.2 (/usr/lib/libcuda.so.1), but the selected components offer no "
                   "variant it runs (offered: 11, 13); using CUDA 13"));
    // A toolkit or an explicit request is never second to the driver: the caller asks the driver only without them.
    const redist::cuda_detection toolkit{13, 0, "13.0.1", "CUDA_HOME=/opt/cuda, version.json"};
    CHECK(redist::choose_cuda_variant(m, "linux-x86_64", {}, std::nullopt, toolkit).cuda_major ==
          std::optional<int>(13));
    CHECK(redist::choose_cuda_variant(m, "linux-x86_64", {}, redist::cuda_version{11, {}}, driver(12080)).cuda_major ==
          std::optional<int>(11));
}

// cuda_compat (the forward-compatibility driver libraries) is the driver's,
// as nvidia_driver is: --all leaves it out and says so; named, it installs.
TEST_CASE("select_artifacts: cuda_compat is a driver component", "[select]") {
    CHECK(redist::is_driver_component("cuda_compat"));
    CHECK(redist::is_driver_component("cuda_compat_orin"));
    CHECK_FALSE(redist::is_driver_component("cuda_cudart"));
    manifest m;
    for (const char* key : {"cuda_cudart", "cuda_nvcc", "cuda_cupti", "cuda_nvrtc", "libcublas"})
        m.components.push_back(make_component(key, {{"linux-x86_64", {}, true}}));
    m.components.push_back(make_component("cuda_compat", {{"linux-x86_64", {"cuda13.2"}}}));
    m.components.push_back(make_component("nvidia_driver", {{"linux-sbsa", {}, true}}));  // not on the platform
    const auto all = select_ok(m, {"linux-x86_64", std::nullopt, {}, redist::unnamed_components::all});
    CHECK(all.artifacts.size() == 5);
    CHECK(all.left_out == std::vector<std::string>{"cuda_compat"});
    CHECK(select_ok(m, {"linux-x86_64", std::nullopt, {}}).left_out.empty());
    CHECK(select_ok(m, {"linux-x86_64", std::nullopt, {"cuda_compat"}, redist::unnamed_components::fetch_default})
              .artifacts.size() == 1);
    CHECK(select_fails(m, {"linux-x86_64", std::nullopt, {}, redist::unnamed_components::fetch_default}).code ==
          redist::error_code::usage);
}

TEST_CASE("select_artifacts: every variant, for a mirror", "[select]") {
    using redist::artifact_choice;
    manifest m;
    m.components.push_back(
        make_component("lib", {{"linux-x86_64", {"cuda12", "cuda13", "cuda13.2"}, true}, {"linux-sbsa", {"cuda12"}}}));
    m.components.push_back(make_component("tool", {{"linux-x86_64", {}, true}}));
    m.components.push_back(make_component("sbsa_only", {{"linux-sbsa", {"cuda13"}}}));
    const auto every = [&](const std::string& platform, std::optional<int> major,
                           std::vector<std::string> components = {}) {
        return redist::selection_request{.platform = platform,
                                         .cuda_major = major,
                                         .components = std::move(components),
                                         .choice = artifact_choice::every_variant};
    };
    // Every variant and the plain artifact, in manifest order; no default major.
    auto s = select_ok(m, every("linux-x86_64", std::nullopt));
    CHECK(describe(s) ==
          "lib:linux-x86_64:cuda12 lib:linux-x86_64:cuda13 lib:linux-x86_64:cuda13.2 lib:linux-x86_64:- "
          "tool:linux-x86_64:- ");
    CHECK_FALSE(s.cuda_major);
    CHECK_FALSE(s.cuda_major_defaulted);
    // A major: each of its variants (every minor), and the plain artifacts.
    s = select_ok(m, every("linux-x86_64", 13));
    CHECK(describe(s) == "lib:linux-x86_64:cuda13 lib:linux-x86_64:cuda13.2 lib:linux-x86_64:- tool:linux-x86_64:- ");
    CHECK(s.cuda_major == 13);
    // A named component without the platform is skipped, not refused.
    CHECK(describe(select_ok(m, every("linux-sbsa", 12, {"lib", "tool"}))) == "lib:linux-sbsa:cuda12 ");
    // Nothing at all: not_found, naming what there is.
    auto e = select_fails(m, every("linux-sbsa", 11));
    CHECK(e.code == redist::error_code::not_found);
    CHECK(contains(e.message, "(available variants: cuda12, cuda13)"));
    e = select_fails(m, every("linux-aarch64", std::nullopt, {"tool"}));
    CHECK(contains(e.message, "nothing for platform 'linux-aarch64'"));
    CHECK(select_fails(m, every("linux-x86_64", std::nullopt, {"nope"})).code == redist::error_code::not_found);
    // What the mirror's errors list.
    CHECK(redist::available_platforms(m, {}) == std::vector<std::string>{"linux-sbsa", "linux-x86_64"});
    CHECK(redist::available_platforms(m, {"tool"}) == std::vector<std::string>{"linux-x86_64"});
}
