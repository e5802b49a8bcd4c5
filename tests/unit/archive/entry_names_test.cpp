// The rules of archive entry names and symlink targets (lib/archive/entry_names.hpp),
// checked on the text alone; unpack_test checks them again through whole archives.
#include <catch2/catch.hpp>

#include "archive/entry_names.hpp"

using namespace redist;

namespace {

// The segments of an accepted name, joined again (nullopt: refused).
std::optional<std::string> accepted(std::string_view name) {
    std::vector<std::string_view> segments;
    if (split_entry_name(name, segments)) return std::nullopt;
    return join_segments(segments, 0);
}

}  // namespace

TEST_CASE("entry names: './', '.', doubled and trailing slashes are tolerated") {
    CHECK(accepted("cudnn-linux/include/cudnn.h") == "cudnn-linux/include/cudnn.h");
    CHECK(accepted("./cudnn-linux/lib/") == "cudnn-linux/lib");
    CHECK(accepted("a//b/./c/") == "a/b/c");
    CHECK(accepted("..a/a..b") == "..a/a..b");  // dots inside a name are a name
    std::vector<std::string_view> segments;
    REQUIRE_FALSE(split_entry_name("top/lib/libx.so", segments));
    CHECK(join_segments(segments, 1) == "lib/libx.so");  // the top-level directory stripped
}

TEST_CASE("entry names: absolute, '..', empty and non-UTF-8 names are refused with a reason") {
    std::vector<std::string_view> segments;
    CHECK(split_entry_name("", segments) == "empty entry name");
    CHECK(split_entry_name("/etc/passwd", segments) == "absolute path in archive");
    CHECK(split_entry_name("top/../../etc", segments) == "'..' in entry name");
    CHECK(split_entry_name("..", segments) == "'..' in entry name");
    CHECK(split_entry_name("top/lib/..", segments) == "'..' in entry name");
    CHECK(split_entry_name("top/caf\xe9", segments) == "entry name is not valid UTF-8");
    CHECK(accepted("top/caf\xc3\xa9") == "top/caf\xc3\xa9");
}

TEST_CASE("symlink targets: leading '..' only, no deeper than the link's directory") {
    CHECK_FALSE(check_symlink_target("libx.so.9", 0));
    CHECK_FALSE(check_symlink_target("../lib/libx.so", 1));
    CHECK_FALSE(check_symlink_target("../../include", 2));
    CHECK(check_symlink_target("../../include", 1) == "symlink target points outside the stage");
    CHECK(check_symlink_target("../x", 0) == "symlink target points outside the stage");
    // A '..' after a name could walk back out through another symlink ("a -> ." then "b -> a/..").
    CHECK(check_symlink_target("a/../x", 3) == "symlink target has '..' after a name");
    CHECK(check_symlink_target("/usr/lib/libx.so", 5) == "absolute symlink target");
    CHECK(check_symlink_target("", 1) == "empty symlink target");
    CHECK(check_symlink_target("x\xff", 1) == "symlink target is not valid UTF-8");
}

TEST_CASE("symlink targets into the reserved .redist directory are recognised at the link's depth") {
    CHECK(symlink_points_into_reserved(".redist", 0));
    CHECK(symlink_points_into_reserved("../../.redist/receipts", 2));
    CHECK(symlink_points_into_reserved("./../.redist", 1));
    CHECK_FALSE(symlink_points_into_reserved("../.redist", 2));  // lib/.redist, not the prefix's
    CHECK_FALSE(symlink_points_into_reserved("../lib/.redist", 1));
    CHECK_FALSE(symlink_points_into_reserved(".redistx", 0));
}

TEST_CASE("entry names in errors are escaped whole") {
    const std::string long_name(5000, 'a');
    CHECK(printable_entry(long_name) == long_name);  // never cut
    CHECK(printable_entry("a\nb\x1b[0m") != "a\nb\x1b[0m");
    CHECK(printable_entry("a\nb").find('\n') == std::string::npos);
}
