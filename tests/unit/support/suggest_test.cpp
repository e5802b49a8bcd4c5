#include <catch2/catch.hpp>

#include "redist/suggest.hpp"
#include "support/suggest.hpp"

using redist::closest_match;

TEST_CASE("a swapped pair of letters is one edit") {
    const std::vector<std::string> commands{"fetch", "verify", "remove", "cache", "sync", "show"};
    CHECK(closest_match("fecth", commands) == std::optional<std::string>("fetch"));
    CHECK(closest_match("verfiy", commands) == std::optional<std::string>("verify"));
    CHECK(closest_match("snyc", commands) == std::optional<std::string>("sync"));
}

TEST_CASE("flags are matched with their dashes") {
    const std::vector<std::string> flags{"--prefix", "--platform", "--cuda", "--component", "-j"};
    CHECK(closest_match("--prefx", flags) == std::optional<std::string>("--prefix"));
    CHECK(closest_match("--platfrom", flags) == std::optional<std::string>("--platform"));
    CHECK(closest_match("--components", flags) == std::optional<std::string>("--component"));
}

TEST_CASE("a name without the manifest's conventional prefix") {
    const std::vector<std::string> components{"cuda_nvcc", "libcublas", "libcufft", "cuda_cudart", "libnvjitlink"};
    CHECK(closest_match("cublas", components) == std::optional<std::string>("libcublas"));
    CHECK(closest_match("nvcc", components) == std::optional<std::string>("cuda_nvcc"));
    CHECK(closest_match("CUBLAS", components) == std::optional<std::string>("libcublas"));
}

TEST_CASE("platform aliases only when the platform is offered") {
    const std::vector<std::string> platforms{"linux-x86_64", "linux-sbsa", "windows-x86_64", "windows-arm64"};
    CHECK(closest_match("aarch64", platforms) == std::optional<std::string>("linux-sbsa"));
    CHECK(closest_match("arm64", platforms) == std::optional<std::string>("linux-sbsa"));
    CHECK(closest_match("amd64", platforms) == std::optional<std::string>("linux-x86_64"));
    CHECK(closest_match("linux-x86-64", platforms) == std::optional<std::string>("linux-x86_64"));
    CHECK_FALSE(closest_match("aarch64", {"linux-x86_64", "windows-x86_64"}).has_value());
}

TEST_CASE("nothing close, a tie or the name itself suggests nothing") {
    const std::vector<std::string> products{"cudnn", "cuda", "cutensor", "cusparselt", "tensorrt"};
    CHECK(closest_match("cudnnn", products) == std::optional<std::string>("cudnn"));
    CHECK_FALSE(closest_match("pytorch", products).has_value());
    CHECK_FALSE(closest_match("cud", {"cuda", "cudd"}).has_value());  // a tie: one edit from both
    CHECK_FALSE(closest_match("cuda", {"cuda"}).has_value());
    CHECK_FALSE(closest_match("", products).has_value());
    CHECK_FALSE(closest_match("cudnn", {}).has_value());
}

TEST_CASE("did_you_mean escapes what it shows") {
    CHECK(redist::did_you_mean("fecth", {"fetch"}) == " (did you mean 'fetch'?)");
    CHECK(redist::did_you_mean("nothing-like-it", {"fetch"}).empty());
    CHECK(redist::did_you_mean("a\x1b", {"a\x1b["}) == " (did you mean 'a\\x1b['?)");
}
