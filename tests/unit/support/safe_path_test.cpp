// Names and confined paths (lib/support/safe_path.hpp): the one helper every path
// built from input goes through.
#include <catch2/catch.hpp>

#include "support/safe_path.hpp"

using namespace redist;
namespace fs = std::filesystem;

TEST_CASE("valid names: letters, digits and ._+-") {
    for (const char* name :
         {"cudnn", "cuda_nvcc", "libcublas", "9.27.0", "linux-x86_64", "cuda12", "a+b", "..a", "a..b"})
        CHECK(name_problem(name) == nullptr);
    CHECK(name_problem(std::string(max_name_length, 'a')) == nullptr);
}

TEST_CASE("invalid names are refused with a reason") {
    CHECK(name_problem("") != nullptr);
    CHECK(name_problem(".") != nullptr);
    CHECK(name_problem("..") != nullptr);
    CHECK(name_problem("sub/comp") != nullptr);
    CHECK(name_problem("../../../../x") != nullptr);
    CHECK(name_problem("/tmp/victim") != nullptr);
    CHECK(name_problem("a\\b") != nullptr);
    CHECK(name_problem(std::string("a\0b", 3)) != nullptr);
    CHECK(name_problem("a\x1b[31m") != nullptr);
    CHECK(name_problem("a b") != nullptr);
    CHECK(name_problem("caf\xc3\xa9") != nullptr);
    CHECK(name_problem(std::string(max_name_length + 1, 'a')) != nullptr);
}

TEST_CASE("validate_name gives a one-line bad_manifest error with the name escaped") {
    auto bad = validate_name("evil\n\x1b[2Jname", "component");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error_value().code == error_code::bad_manifest);
    const std::string text = bad.error_value().describe();
    CHECK(text.find('\n') == std::string::npos);
    CHECK(text.find('\x1b') == std::string::npos);
    CHECK(text.find("component") != std::string::npos);
    CHECK(validate_name("cudnn", "component").ok());
}

TEST_CASE("relative_path_problem accepts plain relative paths only") {
    CHECK(relative_path_problem("lib/libcudnn.so.9") == nullptr);
    CHECK(relative_path_problem("a") == nullptr);
    CHECK(relative_path_problem("a/..b/c..") == nullptr);
    for (const char* bad : {"", "/etc/passwd", "a//b", "a/", "../x", "a/../b", "a/..", "./a", "a/./b", "a\\b"})
        CHECK(relative_path_problem(bad) != nullptr);
    CHECK(relative_path_problem(std::string("a\0b", 3)) != nullptr);
}

TEST_CASE("confined_join stays under the root") {
    const fs::path root = "/opt/prefix";
    auto ok = confined_join(root, "lib/libfoo.so");
    REQUIRE(ok.ok());
    CHECK(*ok == fs::path("/opt/prefix/lib/libfoo.so"));
    auto trailing = confined_join("/opt/prefix/", "x");
    REQUIRE(trailing.ok());
    CHECK(*trailing == fs::path("/opt/prefix/x"));
    for (const char* bad : {"../../../../x", "/tmp/victim", "a/../../b", "", "a//b", "..", "a\\..\\b"}) {
        auto refused = confined_join(root, bad);
        REQUIRE_FALSE(refused.ok());
        CHECK(refused.error_value().code == error_code::bad_manifest);
    }
    CHECK_FALSE(confined_join(root, std::string("a\0/../../b", 10)).ok());
    CHECK_FALSE(confined_join("relative/root", "x").ok());
    auto from_slash = confined_join("/", "etc");
    REQUIRE(from_slash.ok());
    CHECK(*from_slash == fs::path("/etc"));
}

TEST_CASE("is_strictly_under is lexical and strict") {
    CHECK(is_strictly_under("/a/b", "/a/b/c"));
    CHECK(is_strictly_under("/a/b/", "/a/b/c"));
    CHECK_FALSE(is_strictly_under("/a/b", "/a/b"));
    CHECK_FALSE(is_strictly_under("/a/b", "/a/b/"));
    CHECK_FALSE(is_strictly_under("/a/b", "/a/bc"));
    CHECK_FALSE(is_strictly_under("/a/b", "/a/b/../c"));
    CHECK_FALSE(is_strictly_under("/a/b", "/a"));
    CHECK(is_strictly_under("/", "/x"));
}

TEST_CASE("printable escapes control characters and caps the length") {
    CHECK(printable("plain") == "plain");
    CHECK(printable("a\nb") == "a\\x0ab");
    CHECK(printable("\x1b[0m") == "\\x1b[0m");
    CHECK(printable(std::string(500, 'x'), 10).size() == 13);
}
