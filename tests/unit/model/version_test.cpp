// Tests for redist/version.hpp: label ordering, index parsing, spec resolution.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "model/index_html.hpp"
#include "redist/version.hpp"

using redist::compare_versions;
using redist::parse_index_html;
using redist::resolve_version_spec;

namespace {

int sign(int v) { return v < 0 ? -1 : v > 0 ? 1 : 0; }

// An nginx autoindex page as nginx-light renders it (padding, dates, sizes,
// the "../" parent link, a subdirectory, and .sha256 side files).
std::string nginx_autoindex_page() {
    return R"(<html>
<head><title>Index of /cudnn/redist/</title></head>
<body>
<h1>Index of /cudnn/redist/</h1><hr><pre><a href="../">../</a>
<a href="cudnn/">cudnn/</a>                                             12-Aug-2025 10:01       -
<a href="cudnn_samples/">cudnn_samples/</a>                                     12-Aug-2025 10:01       -
<a href="redistrib_8.9.7.json">redistrib_8.9.7.json</a>                               05-Dec-2023 18:33    13291
<a href="redistrib_9.10.0.json">redistrib_9.10.0.json</a>                              12-Jun-2025 09:12     8123
<a href="redistrib_9.27.0.json">redistrib_9.27.0.json</a>                              12-Aug-2025 10:01     9401
<a href="redistrib_9.27.0.json.sha256">redistrib_9.27.0.json.sha256</a>                       12-Aug-2025 10:01       87
<a href="redistrib_9.9.0.json">redistrib_9.9.0.json</a>                               02-May-2025 11:40     8123
<a href="redistrib_9.2.1.json">redistrib_9.2.1.json</a>                               01-Jul-2024 08:00     7000
</pre><hr></body>
</html>
)";
}

// NVIDIA's own listing style: single quotes, a mix of absolute, "./" and bare
// hrefs, extra attributes, upper-case tags, URL-encoded characters, and links
// that must be ignored.
std::string nvidia_style_page() {
    return R"(<!DOCTYPE html>
<html><head><link href='/static/style.css' rel='stylesheet'></head>
<body>
<!-- <a href='redistrib_99.0.0.json'>commented out</a> -->
<table>
<tr><td><a href='redistrib_9.0.0.json'>redistrib_9.0.0.json</a></td></tr>
<tr><td><A class='file' HREF='./redistrib_9.8.0.json' title='a > b'>redistrib_9.8.0.json</A></td></tr>
<tr><td><a href="https://developer.download.nvidia.com/compute/cudnn/redist/redistrib_9.12.0.json">x</a></td></tr>
<tr><td><a href='/compute/cudnn/redist/redistrib%5F9.13.0%2Ejson'>encoded</a></td></tr>
<tr><td><a href='redistrib_9.20.0.json?download=1#top'>query</a></td></tr>
<tr><td><a href='redistrib_9.0.0.json'>duplicate</a></td></tr>
<tr><td><a href='redistrib_.json'>empty label</a></td></tr>
<tr><td><a href='redistrib_9.1.0.json.md5'>md5</a></td></tr>
<tr><td><a href='redistrib_..%2F..%2Fetc.json'>traversal</a></td></tr>
<tr><td><a href='redistrib_9.3.0.json/'>a directory</a></td></tr>
<tr><td><a href='cudnn/'>cudnn/</a></td></tr>
<tr><td><a href='../'>Parent Directory</a></td></tr>
<tr><td><abbr href='redistrib_7.0.0.json'>not a link</abbr></td></tr>
<tr><td><a href=redistrib_8.5.0.json>unquoted</a></td></tr>
</table></body></html>
)";
}

}  // namespace

TEST_CASE("compare_versions orders numeric fields numerically", "[version]") {
    CHECK(compare_versions("9.10.0", "9.9.0") > 0);
    CHECK(compare_versions("9.9.0", "9.10.0") < 0);
    CHECK(compare_versions("25.06.0", "25.5") > 0);  // 6 > 5, not "06" < "5"
    CHECK(compare_versions("25.5", "25.06.0") < 0);
    CHECK(compare_versions("9.27.0", "9.27.0") == 0);
    CHECK(compare_versions("10.0", "9.99") > 0);
    CHECK(compare_versions("5.0.0.6", "5.0.0") > 0);
    // Huge numbers must not overflow.
    CHECK(compare_versions("1.99999999999999999999999", "1.100000000000000000000000") < 0);
}

TEST_CASE("compare_versions: a strict prefix is older", "[version]") {
    CHECK(compare_versions("9.1", "9.1.0") < 0);
    CHECK(compare_versions("9.1.0", "9.1") > 0);
    CHECK(compare_versions("9", "9.0.0") < 0);
}

TEST_CASE("compare_versions: mixed fields and a total order", "[version]") {
    CHECK(compare_versions("1.0rc1", "1.0rc2") < 0);
    CHECK(compare_versions("1.0a", "1.0b") < 0);
    CHECK(compare_versions("1.beta", "1.alpha") > 0);
    // Numerically equal but spelled differently: not equal, deterministic.
    CHECK(compare_versions("25.06", "25.6") != 0);
    CHECK(sign(compare_versions("25.06", "25.6")) == -sign(compare_versions("25.6", "25.06")));

    // Antisymmetry and transitivity over a tricky set (numeric, mixed,
    // alphabetic, leading zeros, prefixes, empty fields).
    const std::vector<std::string> labels = {"9",    "10",    "1a",   "9.0",  "9.0.0", "09",  "a",  "",
                                             "9.a",  "9.1b",  "9.10", "9.9",  "0rc1",  "rc1", "1.", ".1",
                                             "25.5", "25.06", "25.6", "9.27", "9.2",   "90.1"};
    for (const auto& a : labels) {
        CHECK(compare_versions(a, a) == 0);
        for (const auto& b : labels) {
            INFO(a << " vs " << b);
            CHECK(sign(compare_versions(a, b)) == -sign(compare_versions(b, a)));
            if (a != b) CHECK(compare_versions(a, b) != 0);
            for (const auto& c : labels) {
                if (compare_versions(a, b) < 0 && compare_versions(b, c) < 0) {
                    INFO("and " << c);
                    CHECK(compare_versions(a, c) < 0);
                }
            }
        }
    }

    // Sorting any permutation gives the same result.
    std::vector<std::string> shuffled = labels;
    auto by_version = [](const std::string& x, const std::string& y) { return compare_versions(x, y) < 0; };
    std::sort(shuffled.begin(), shuffled.end(), by_version);
    const auto expected = shuffled;
    std::mt19937 rng(42);
    for (int round = 0; round < 20; ++round) {
        std::shuffle(shuffled.begin(), shuffled.end(), rng);
        std::sort(shuffled.begin(), shuffled.end(), by_version);
        CHECK(shuffled == expected);
    }
}

TEST_CASE("parse_index_html reads an nginx autoindex page", "[version][index]") {
    const auto labels = parse_index_html(nginx_autoindex_page());
    const std::vector<std::string> expected = {"9.27.0", "9.10.0", "9.9.0", "9.2.1", "8.9.7"};
    CHECK(labels == expected);
}

TEST_CASE("parse_index_html reads an NVIDIA-style listing", "[version][index]") {
    const auto labels = parse_index_html(nvidia_style_page());
    const std::vector<std::string> expected = {"9.20.0", "9.13.0", "9.12.0", "9.8.0", "9.0.0", "8.5.0"};
    CHECK(labels == expected);
}

TEST_CASE("parse_index_html copes with junk", "[version][index]") {
    CHECK(parse_index_html("").empty());
    CHECK(parse_index_html("no html at all").empty());
    CHECK(parse_index_html("<a href=").empty());
    CHECK(parse_index_html("<a href='redistrib_1.0.json").size() == 1);     // unterminated quote: tolerated
    CHECK(parse_index_html("<a href=\"redistrib_1.0.json\"").size() == 1);  // unterminated tag
    CHECK(parse_index_html("<!-- <a href='redistrib_1.0.json'>").empty());  // unterminated comment
    CHECK(parse_index_html("<a href='redistrib_1.0.json%'>x</a>").empty());
    CHECK(parse_index_html("<a href='redistrib_1 0.json'>x</a>").empty());
    CHECK(parse_index_html("<a\nhref\n=\n'redistrib_2.0.json'>x</a>") == std::vector<std::string>{"2.0"});
}

TEST_CASE("resolve_version_spec: latest, exact and whole-field prefixes", "[version][spec]") {
    // Deliberately unsorted input.
    const std::vector<std::string> labels = {"9.2.1", "9.27.0", "8.9.7", "90.1", "9.10.0", "9.27.0", "9.9.0"};

    auto resolve = [&](const char* spec) {
        auto r = resolve_version_spec(spec, labels);
        INFO(spec << ": " << (r ? std::string() : r.error_value().describe()));
        REQUIRE(r.ok());
        return r.value();
    };
    CHECK(resolve("latest") == "90.1");
    CHECK(resolve("9.27.0") == "9.27.0");
    CHECK(resolve("9") == "9.27.0");  // not 90.1
    CHECK(resolve("9.27") == "9.27.0");
    CHECK(resolve("9.2") == "9.2.1");  // not 9.27.0
    CHECK(resolve("9.9") == "9.9.0");
    CHECK(resolve("8") == "8.9.7");
    CHECK(resolve("90") == "90.1");
    CHECK(resolve("9.09") == "9.9.0");  // fields compare as numbers
}

TEST_CASE("resolve_version_spec: not_found lists what is available", "[version][spec]") {
    const std::vector<std::string> labels = {"9.27.0", "9.10.0", "8.9.7"};
    for (const char* spec : {"7", "9.27.1", "9.2", "9.27.0.1", "10"}) {
        const auto r = resolve_version_spec(spec, labels);
        INFO(spec);
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::not_found);
        const auto& message = r.error_value().message;
        CHECK(message.find(spec) != std::string::npos);
        CHECK(message.find("9.27.0, 9.10.0, 8.9.7") != std::string::npos);  // newest first
        CHECK(message.find('\n') == std::string::npos);
    }

    const auto none = resolve_version_spec("latest", {});
    REQUIRE_FALSE(none.ok());
    CHECK(none.error_value().code == redist::error_code::not_found);

    // Long lists are truncated.
    std::vector<std::string> many;
    for (int i = 1; i <= 25; ++i) many.push_back("1." + std::to_string(i));
    const auto r = resolve_version_spec("2", many);
    REQUIRE_FALSE(r.ok());
    const auto& message = r.error_value().message;
    CHECK(message.find("1.25, 1.24") != std::string::npos);
    CHECK(message.find("1.16") != std::string::npos);
    CHECK(message.find("1.15,") == std::string::npos);
    CHECK(message.find("15 more") != std::string::npos);
}

TEST_CASE("resolve_version_spec: malformed specs are usage errors", "[version][spec]") {
    const std::vector<std::string> labels = {"9.27.0"};
    for (const char* spec : {"", "9..1", "9.", ".9"}) {
        const auto r = resolve_version_spec(spec, labels);
        INFO("'" << spec << "'");
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == redist::error_code::usage);
    }
}
