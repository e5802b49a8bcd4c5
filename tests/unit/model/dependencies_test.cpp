// Tests for redist/dependencies.hpp: the dependency table, what a prefix
// lacks of it, and the table checked against NVIDIA's published manifests.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "redist/dependencies.hpp"
#include "redist/manifest.hpp"
#include "redist/prefix.hpp"
#include "redist/select.hpp"

namespace {

using strings = std::vector<std::string>;

redist::receipt make_receipt(const std::string& product, const std::string& label, const std::string& component) {
    redist::receipt r;
    r.product = product;
    r.release_label = label;
    r.component = component;
    return r;
}

redist::manifest load_manifest(const std::string& product, const std::string& label) {
    const std::string path = std::string(REDIST_TEST_DATA) + "/manifests/" + product + "/redistrib_" + label + ".json";
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    std::ostringstream text;
    text << in.rdbuf();
    auto m = redist::parse_manifest(text.str(), path);
    REQUIRE(m.ok());
    return std::move(m).value();
}

}  // namespace

TEST_CASE("cudnn 9 needs the runtime, cuBLAS and NVRTC of its CUDA major", "[dependencies]") {
    const auto cuda12 = redist::dependencies_of("cudnn", "9.27.0", 12);
    REQUIRE(cuda12);
    CHECK(cuda12->product == "cuda");
    CHECK(cuda12->cuda_major == 12);
    CHECK(cuda12->components == strings{"cuda_cudart", "libcublas", "cuda_nvrtc"});
    // CUDA 13 moved the crt/ headers cuda_runtime_api.h includes into cuda_crt.
    const auto cuda13 = redist::dependencies_of("cudnn", "9.27.0", 13);
    REQUIRE(cuda13);
    CHECK(cuda13->cuda_major == 13);
    CHECK(cuda13->components == strings{"cuda_cudart", "cuda_crt", "libcublas", "cuda_nvrtc"});
    const auto cudnn8 = redist::dependencies_of("cudnn", "8.9.7", 11);
    REQUIRE(cudnn8);
    CHECK(cudnn8->components == strings{"cuda_cudart", "libcublas", "cuda_nvrtc"});
}

TEST_CASE("the table knows nothing it was not told", "[dependencies]") {
    CHECK_FALSE(redist::dependencies_of("cutensor", "2.3.0", 12));  // no row for the product
    CHECK_FALSE(redist::dependencies_of("cudnn", "7.6.5", 10));     // nor for the major
    CHECK_FALSE(redist::dependencies_of("cudnn", "8.9.7", 13));     // cuDNN 8 was never built for CUDA 13
    CHECK_FALSE(redist::dependencies_of("cudnn", "9.27.0", 10));
    CHECK_FALSE(redist::dependencies_of("cudnn", "latest", 12));  // a label, not a spec
    CHECK_FALSE(redist::dependencies_of("cudnn", "", 12));
}

TEST_CASE("missing dependencies: only receipts of the cuda product at that major count", "[dependencies]") {
    const auto deps = redist::dependencies_of("cudnn", "9.27.0", 12).value();
    CHECK(redist::missing_dependencies(deps, {}) == deps.components);
    CHECK_FALSE(redist::installed_dependency_release(deps, {}));

    const std::vector<redist::receipt> receipts{
        make_receipt("cudnn", "9.27.0", "cudnn"),      make_receipt("cuda", "12.4.1", "cuda_cudart"),
        make_receipt("cuda", "13.0.0", "libcublas"),    // another CUDA major: does not count
        make_receipt("other", "12.9.1", "cuda_nvrtc"),  // another product: does not count
        make_receipt("cuda", "12.9.1", "cuda_nvcc"),
    };
    CHECK(redist::missing_dependencies(deps, receipts) == strings{"libcublas", "cuda_nvrtc"});
    // The newest release of the major in the prefix, so that what is added matches it.
    CHECK(redist::installed_dependency_release(deps, receipts) == std::optional<std::string>("12.9.1"));

    const auto deps13 = redist::dependencies_of("cudnn", "9.27.0", 13).value();
    CHECK(redist::missing_dependencies(deps13, receipts) == strings{"cuda_cudart", "cuda_crt", "cuda_nvrtc"});
    CHECK(redist::installed_dependency_release(deps13, receipts) == std::optional<std::string>("13.0.0"));
}

// Every variant a real cuDNN manifest offers maps to components that the
// real CUDA release of that major has, for the platforms both publish.
TEST_CASE("the table agrees with NVIDIA's manifests", "[dependencies]") {
    const std::vector<std::pair<std::string, std::string>> cudnn{
        {"8.9.7", "12.2.2"}, {"9.8.0", "12.9.1"}, {"9.27.0", "12.9.1"}, {"9.27.0", "13.0.0"}};
    for (const auto& [label, cuda_label] : cudnn) {
        const auto m = load_manifest("cudnn", label);
        const auto toolkit = load_manifest("cuda", cuda_label);
        const int major = std::stoi(cuda_label.substr(0, cuda_label.find('.')));
        INFO("cudnn " << label << " with cuda " << cuda_label);
        REQUIRE(std::ranges::count(redist::available_cuda_majors(m, "linux-x86_64", {"cudnn"}), major) == 1);
        const auto deps = redist::dependencies_of("cudnn", label, major);
        REQUIRE(deps);
        redist::selection_request req;
        req.platform = "linux-x86_64";
        req.components = deps->components;
        const auto selected = redist::select_artifacts(toolkit, req);
        REQUIRE(selected.ok());
        CHECK(selected->artifacts.size() == deps->components.size());
        for (const auto& a : selected->artifacts) CHECK_FALSE(a.variant);  // the toolkit's artifacts are plain
    }
}
