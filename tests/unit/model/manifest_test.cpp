// Tests for redist/manifest.hpp.
//
// 1. Every shared real manifest parses, and agrees with an independent reading
//    of the same bytes: simdjson's DOM API walking the tree generically (every
//    object holding a "sha256" key is an artifact), which shares no code with
//    the On-Demand parser under test.
// 2. Malformed documents, generated here from a small template, fail with
//    bad_manifest and a json_path naming the offending value.
// 3. Archive format detection and cuda_major().
#include <catch2/catch.hpp>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "model/manifest.hpp"
#include "redist/manifest.hpp"

namespace fs = std::filesystem;
using redist::archive_format;

namespace {

const fs::path manifest_dir = fs::path(REDIST_TEST_DATA) / "manifests";

std::string slurp(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    REQUIRE(in);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

std::vector<fs::path> all_manifests() {
    std::vector<fs::path> files;
    for (const auto& entry : fs::recursive_directory_iterator(manifest_dir))
        if (entry.is_regular_file() && entry.path().extension() == ".json") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    return files;
}

redist::manifest parse_file(const std::string& relative) {
    const auto path = manifest_dir / relative;
    auto parsed = redist::parse_manifest(slurp(path), path.string());
    INFO(relative << ": " << (parsed ? std::string() : parsed.error_value().describe()));
    REQUIRE(parsed.ok());
    return std::move(parsed).value();
}

std::string lower(std::string s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// (sha256, relative_path, size) — what both readings must agree on.
using artifact_key = std::tuple<std::string, std::string, std::uint64_t>;

// The independent reading: DOM API, generic walk, no knowledge of the shapes.
void collect_dom(simdjson::dom::element element, std::vector<artifact_key>& out) {
    // Bind every simdjson_result to a named value first: value_unsafe() on a
    // temporary dangles inside a range-for.
    simdjson::dom::object object;
    simdjson::dom::array array;
    if (element.get(object) == simdjson::SUCCESS) {
        std::string_view sha;
        if (object["sha256"].get(sha) == simdjson::SUCCESS) {
            std::string_view path;
            std::string_view size_text;
            REQUIRE(object["relative_path"].get(path) == simdjson::SUCCESS);
            REQUIRE(object["size"].get(size_text) == simdjson::SUCCESS);
            std::uint64_t size = 0;
            const auto [end, ec] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), size);
            REQUIRE(ec == std::errc());
            REQUIRE(end == size_text.data() + size_text.size());
            out.emplace_back(lower(std::string(sha)), std::string(path), size);
        }
        for (auto field : object) collect_dom(field.value, out);
    } else if (element.get(array) == simdjson::SUCCESS) {
        for (auto child : array) collect_dom(child, out);
    }
}

// ---- a small template for the malformed cases --------------------------------

const std::string good_sha = std::string(64, 'a');
const std::string good_md5 = std::string(32, 'b');

// Ordered key -> raw JSON value, so a case can replace or drop one field.
struct fields {
    std::vector<std::pair<std::string, std::string>> entries{
        {"relative_path", "\"cudnn/linux-x86_64/cudnn-9.0-archive.tar.xz\""},
        {"sha256", "\"" + good_sha + "\""},
        {"md5", "\"" + good_md5 + "\""},
        {"size", "\"1234\""},
    };
    fields&& with(const std::string& key, const std::string& raw) && {
        for (auto& [k, v] : entries)
            if (k == key) {
                v = raw;
                return std::move(*this);
            }
        entries.emplace_back(key, raw);
        return std::move(*this);
    }
    fields&& without(const std::string& key) && {
        entries.erase(std::remove_if(entries.begin(), entries.end(), [&](auto& e) { return e.first == key; }),
                      entries.end());
        return std::move(*this);
    }
    std::string json() const {
        std::string out = "{";
        for (const auto& [k, v] : entries) out += (out.size() > 1 ? "," : "") + ("\"" + k + "\":" + v);
        return out + "}";
    }
};

// {"cudnn": {"linux-x86_64": {"cuda12": {...}}}}
std::string with_variant(const fields& f) {
    return R"({"release_label":"9.0.0","cudnn":{"name":"cuDNN","linux-x86_64":{"cuda12":)" + f.json() + "}}}";
}
// {"cudnn": {"linux-x86_64": {...}}}
std::string with_direct(const fields& f) {
    return R"({"release_label":"9.0.0","cudnn":{"name":"cuDNN","linux-x86_64":)" + f.json() + "}}";
}

const std::string test_source = "/srv/mirror/cudnn/redist/redistrib_9.0.0.json";

redist::error expect_bad(const std::string& json, const std::string& json_path) {
    auto parsed = redist::parse_manifest(json, test_source);
    INFO("input: " << json);
    REQUIRE_FALSE(parsed.ok());
    const redist::error& err = parsed.error_value();
    INFO("error: " << err.describe());
    CHECK(err.code == redist::error_code::bad_manifest);
    CHECK(err.source == test_source);
    CHECK(err.json_path == json_path);
    const std::string described = err.describe();
    CHECK(described.find(test_source) != std::string::npos);
    CHECK(described.find(json_path) != std::string::npos);
    CHECK(described.find('\n') == std::string::npos);
    CHECK_FALSE(err.message.empty());
    return err;
}

redist::manifest expect_ok(const std::string& json) {
    auto parsed = redist::parse_manifest(json, test_source);
    INFO("input: " << json << "\nerror: " << (parsed ? std::string() : parsed.error_value().describe()));
    REQUIRE(parsed.ok());
    return std::move(parsed).value();
}

}  // namespace

// ---- 1. the real manifests ------------------------------------------------------

TEST_CASE("every shared manifest parses and agrees with an independent DOM reading", "[manifest]") {
    const auto files = all_manifests();
    REQUIRE(files.size() >= 30);  // the shared set; guards against a wrong data dir
    simdjson::dom::parser dom;
    std::size_t total = 0;
    for (const auto& path : files) {
        const std::string text = slurp(path);
        INFO(path.string());
        auto parsed = redist::parse_manifest(text, path.string());
        INFO((parsed ? std::string() : parsed.error_value().describe()));
        REQUIRE(parsed.ok());
        const auto& m = parsed.value();

        simdjson::dom::element root;
        REQUIRE(dom.parse(text).get(root) == simdjson::SUCCESS);
        std::vector<artifact_key> expected;
        collect_dom(root, expected);

        std::vector<artifact_key> actual;
        for (const auto& c : m.components)
            for (const auto& a : c.artifacts) {
                CHECK(a.component == c.key);
                CHECK(a.sha256.size() == 64);
                CHECK((a.md5.empty() || a.md5.size() == 32));
                CHECK(a.format != archive_format::unknown);
                actual.emplace_back(a.sha256, a.relative_path, a.size);
            }
        CHECK(m.artifact_count() == expected.size());
        REQUIRE(actual.size() == expected.size());
        std::sort(actual.begin(), actual.end());
        std::sort(expected.begin(), expected.end());
        CHECK(actual == expected);

        // Components: every top-level object, in document order.
        std::vector<std::string> expected_keys;
        simdjson::dom::object root_object;
        REQUIRE(root.get(root_object) == simdjson::SUCCESS);
        for (auto field : root_object)
            if (field.value.is_object()) expected_keys.emplace_back(field.key);
        std::vector<std::string> actual_keys;
        for (const auto& c : m.components) actual_keys.push_back(c.key);
        CHECK(actual_keys == expected_keys);
        total += actual.size();
    }
    CHECK(total > 1000);
}

TEST_CASE("cudnn 9.27.0 windows-arm64 holds a cuda13 variant and a plain artifact", "[manifest]") {
    const auto m = parse_file("cudnn/redistrib_9.27.0.json");
    CHECK(m.release_label == "9.27.0");
    CHECK(m.release_product == "cudnn");
    const auto* cudnn = m.find_component("cudnn");
    REQUIRE(cudnn != nullptr);
    CHECK(cudnn->version == "9.27.0.42");
    CHECK(m.find_component("nonexistent") == nullptr);

    std::vector<const redist::artifact*> arm;
    for (const auto& a : cudnn->artifacts)
        if (a.platform == "windows-arm64") arm.push_back(&a);
    REQUIRE(arm.size() == 2);
    // Manifest order: the cuda13 object comes before the direct keys.
    REQUIRE(arm[0]->variant.has_value());
    CHECK(*arm[0]->variant == "cuda13");
    CHECK(arm[0]->cuda_major() == 13);
    CHECK(arm[0]->relative_path == "cudnn/windows-arm64/cudnn-windows-arm64-9.27.0.42_cuda13-archive.zip");
    CHECK(arm[0]->sha256 == "c34d906b19df16d370d31b78b1ee480a07e6f827fdabfea63acb914528a9b85c");
    CHECK(arm[0]->size == 468155439u);
    CHECK_FALSE(arm[1]->variant.has_value());
    CHECK_FALSE(arm[1]->cuda_major().has_value());
    CHECK(arm[1]->relative_path == "cudnn/windows-arm64/cudnn-windows-arm64-9.27.0.42_cuda13.4-archive.zip");
    CHECK(arm[1]->md5 == "56543bd41fcadd374b8c5b754fd19308");
    CHECK(arm[1]->size == 481633269u);
    CHECK(arm[1]->format == archive_format::zip);
}

TEST_CASE("tensorrt sizes above 2^32 and tar.gz archives", "[manifest]") {
    const auto m = parse_file("tensorrt/redistrib_10.9.0.json");
    const auto* trt = m.find_component("tensorrt");
    REQUIRE(trt != nullptr);
    CHECK(trt->cuda_variants == std::vector<std::string>{"12"});
    REQUIRE(trt->artifacts.size() == 2);
    const auto& x86 = trt->artifacts[1];
    CHECK(x86.platform == "linux-x86_64");
    CHECK(x86.size == 6917032417ull);
    CHECK(x86.size > (1ull << 32));
    CHECK(x86.format == archive_format::tar_gz);
    CHECK(x86.cuda_major() == 12);
    CHECK(trt->artifacts[0].size == 4123115318ull);
}

TEST_CASE("cuda 11.8.0: old manifest without release_label", "[manifest]") {
    const auto m = parse_file("cuda/redistrib_11.8.0.json");
    CHECK(m.release_label.empty());
    CHECK(m.release_product.empty());
    CHECK(m.release_date == "2022-10-03");
    REQUIRE_FALSE(m.components.empty());
    CHECK(m.components.front().key == "cuda_cccl");
    const auto& cccl = m.components.front();
    CHECK(cccl.name == "CXX Core Compute Libraries");
    CHECK(cccl.license_path.empty());
    REQUIRE_FALSE(cccl.artifacts.empty());
    CHECK(cccl.artifacts.front().platform == "linux-x86_64");
    CHECK(cccl.artifacts.front().size == 1006416u);
    CHECK(cccl.artifacts.front().format == archive_format::tar_xz);
}

// ---- shapes accepted ------------------------------------------------------------

TEST_CASE("unknown keys are ignored at every level", "[manifest]") {
    const std::string json = R"({"schema": 2, "mirrors": ["a", "b"], "release_label": "1.0",
        "cudnn": {"name": "cuDNN", "future": [1, {"x": 2}], "flag": true,
          "linux-x86_64": {"note": "hi", "cuda12": {"relative_path": "a/b.tar.xz", "sha256": ")" +
                             good_sha + R"(", "size": "1", "signature": {"alg": "x"}, "extra": null}}}})";
    const auto m = expect_ok(json);
    REQUIRE(m.components.size() == 1);
    REQUIRE(m.components[0].artifacts.size() == 1);
    CHECK(m.components[0].artifacts[0].md5.empty());  // md5 is optional
}

TEST_CASE("a top-level array is unknown metadata, not a component", "[manifest]") {
    // Decision: only objects are components; a non-object top-level value
    // (array, number, ...) under an unknown key is ignored, as NVIDIA may add
    // metadata there.
    const auto m = expect_ok(R"({"cudnn": [1, 2], "x": 3, "cutensor": {"name": "n"}})");
    REQUIRE(m.components.size() == 1);
    CHECK(m.components[0].key == "cutensor");
    CHECK(m.components[0].artifacts.empty());
    CHECK(m.find_component("cudnn") == nullptr);
}

TEST_CASE("hex digests are normalized, integer sizes accepted, escaped keys decoded", "[manifest]") {
    const std::string upper_sha = std::string(32, 'A') + std::string(32, 'f');
    const auto m = expect_ok(with_variant(fields{}
                                              .with("sha256", "\"" + upper_sha + "\"")
                                              .with("md5", "\"" + std::string(32, 'E') + "\"")
                                              .with("size", "18446744073709551615")));
    const auto& a = m.components.at(0).artifacts.at(0);
    CHECK(a.sha256 == lower(upper_sha));
    CHECK(a.md5 == std::string(32, 'e'));
    CHECK(a.size == 18446744073709551615ull);

    const auto escaped = expect_ok(R"({"cudnn":{"linux-x86_64":{"\u0063uda12":{"relative_path":"a/b.zip","sha256":")" +
                                   good_sha + R"(","size":"18446744073709551615"}}}})");
    CHECK(escaped.components.at(0).artifacts.at(0).variant == std::optional<std::string>("cuda12"));
    CHECK(escaped.components.at(0).artifacts.at(0).size == 18446744073709551615ull);
}

// ---- 2. malformed manifests ---------------------------------------------------

TEST_CASE("wrong types are reported with their json_path", "[manifest][errors]") {
    expect_bad(with_variant(fields{}.with("size", "{}")), "cudnn.linux-x86_64.cuda12.size");
    expect_bad(with_variant(fields{}.with("sha256", "12")), "cudnn.linux-x86_64.cuda12.sha256");
    expect_bad(with_variant(fields{}.with("relative_path", "[\"a\"]")), "cudnn.linux-x86_64.cuda12.relative_path");
    expect_bad(with_variant(fields{}.with("md5", "null")), "cudnn.linux-x86_64.cuda12.md5");
    expect_bad(with_direct(fields{}.with("size", "true")), "cudnn.linux-x86_64.size");
    expect_bad(R"({"cudnn": {"name": 5}})", "cudnn.name");
    expect_bad(R"({"cudnn": {"version": {}}})", "cudnn.version");
    expect_bad(R"({"cudnn": {"cuda_variant": "12"}})", "cudnn.cuda_variant");
    expect_bad(R"({"cudnn": {"cuda_variant": ["12", 13]}})", "cudnn.cuda_variant[1]");
    expect_bad(R"({"release_label": 9, "cudnn": {}})", "release_label");
    expect_bad(R"({"release_date": {}, "cudnn": {}})", "release_date");
}

TEST_CASE("missing required artifact fields", "[manifest][errors]") {
    auto e = expect_bad(with_variant(fields{}.without("relative_path")), "cudnn.linux-x86_64.cuda12.relative_path");
    CHECK(e.message.find("missing") != std::string::npos);
    expect_bad(with_variant(fields{}.without("sha256")), "cudnn.linux-x86_64.cuda12.sha256");
    expect_bad(with_variant(fields{}.without("size")), "cudnn.linux-x86_64.cuda12.size");
    expect_bad(with_direct(fields{}.without("relative_path")), "cudnn.linux-x86_64.relative_path");
    expect_bad(with_direct(fields{}.without("size")), "cudnn.linux-x86_64.size");
    // A partial direct artifact beside a valid variant is still an error.
    expect_bad(R"({"cudnn":{"win":{"cuda12":)" + fields{}.json() + R"(,"sha256":")" + good_sha + R"("}}})",
               "cudnn.win.relative_path");
    // md5 alone does not make an artifact.
    expect_bad(with_direct(fields{}.without("relative_path").without("sha256").without("size")),
               "cudnn.linux-x86_64.relative_path");
    // A variant object holding nothing we know.
    expect_bad(R"({"cudnn":{"linux-x86_64":{"cuda12":{"foo":"bar"}}}})", "cudnn.linux-x86_64.cuda12");
}

TEST_CASE("a platform with neither an artifact nor variants", "[manifest][errors]") {
    expect_bad(R"({"cudnn":{"linux-x86_64":{"note":"nothing here"}}})", "cudnn.linux-x86_64");
    expect_bad(R"({"cudnn":{"name":"x","linux-sbsa":{}}})", "cudnn.linux-sbsa");
}

TEST_CASE("malformed digests", "[manifest][errors]") {
    const std::string path = "cudnn.linux-x86_64.cuda12.sha256";
    expect_bad(with_variant(fields{}.with("sha256", "\"" + std::string(63, 'a') + "\"")), path);
    expect_bad(with_variant(fields{}.with("sha256", "\"" + std::string(65, 'a') + "\"")), path);
    expect_bad(with_variant(fields{}.with("sha256", "\"" + std::string(63, 'a') + "g\"")), path);
    expect_bad(with_variant(fields{}.with("sha256", "\"\"")), path);
    expect_bad(with_variant(fields{}.with("md5", "\"" + std::string(31, 'a') + "\"")), "cudnn.linux-x86_64.cuda12.md5");
    expect_bad(with_variant(fields{}.with("md5", "\"" + std::string(31, 'a') + "z\"")),
               "cudnn.linux-x86_64.cuda12.md5");
    expect_bad(with_variant(fields{}.with("md5", "\"\"")), "cudnn.linux-x86_64.cuda12.md5");
}

TEST_CASE("malformed sizes", "[manifest][errors]") {
    const std::string path = "cudnn.linux-x86_64.cuda12.size";
    for (const std::string raw :
         {"\"\"", "\"12a\"", "\" 12\"", "\"-1\"", "\"+1\"", "\"1.5\"", "\"0x10\"", "\"18446744073709551616\"",
          "\"99999999999999999999999\"", "-1", "1.5", "1e3", "18446744073709551616", "[]", "null"}) {
        INFO("size = " << raw);
        expect_bad(with_variant(fields{}.with("size", raw)), path);
    }
    auto e = expect_bad(with_variant(fields{}.with("size", "\"18446744073709551616\"")), path);
    CHECK(e.message.find("64 bits") != std::string::npos);
    CHECK(expect_ok(with_variant(fields{}.with("size", "\"0\""))).components[0].artifacts[0].size == 0);
}

TEST_CASE("unsafe relative paths", "[manifest][errors]") {
    const std::string path = "cudnn.linux-x86_64.cuda12.relative_path";
    for (const std::string raw : {R"("/etc/passwd")",
                                  R"("a/../../b.tar.xz")",
                                  R"("..")",
                                  R"("../../../../x.zip")",
                                  R"("a/..")",
                                  R"("a\\b.zip")",
                                  R"("")",
                                  R"("a\u0000b.zip")",
                                  R"("a\u001fb.zip")",
                                  R"("a\nb.zip")",
                                  R"("a\u007fb.zip")",
                                  R"("https://evil.example/x.zip")",
                                  R"("C:/x.zip")",
                                  R"("a//b.zip")",
                                  R"("a/")",
                                  R"("//evil.example/x.zip")",
                                  R"("../a/../x.zip")",
                                  R"("./x.zip")",
                                  R"("../..")",
                                  R"("x.zip?a=b")",
                                  R"("x.zip#f")"}) {
        INFO("relative_path = " << raw);
        expect_bad(with_variant(fields{}.with("relative_path", raw)), path);
    }
    // Dots inside names are fine.
    const auto m = expect_ok(with_variant(fields{}.with("relative_path", R"("a/..b/c..d/x.tar.xz")")));
    CHECK(m.components[0].artifacts[0].relative_path == "a/..b/c..d/x.tar.xz");
    // NVIDIA's bin-archive: up to three leading ".." (to the base's parent), kept as written.
    for (const std::string rel : {"../x.zip", "../../x.zip", "../../../pool/linux-x86_64/5B515474/x.tar.xz"}) {
        INFO("relative_path = " << rel);
        const auto ok = expect_ok(with_variant(fields{}.with("relative_path", "\"" + rel + "\"")));
        CHECK(ok.components[0].artifacts[0].relative_path == rel);
    }
}

TEST_CASE("duplicate keys that the parser interprets are errors", "[manifest][errors]") {
    expect_bad(
        with_variant(fields{}.with("sha256", "\"" + good_sha + "\",\"sha256\":\"" + std::string(64, 'c') + "\"")),
        "cudnn.linux-x86_64.cuda12.sha256");
    expect_bad(R"({"cudnn":{"name":"a"},"cudnn":{"name":"b"}})", "cudnn");
    expect_bad(R"({"cudnn":{"linux-x86_64":)" + fields{}.json() + R"(,"linux-x86_64":)" + fields{}.json() + "}}",
               "cudnn.linux-x86_64");
    expect_bad(R"({"release_label":"a","release_label":"b"})", "release_label");
}

TEST_CASE("broken JSON and non-object documents", "[manifest][errors]") {
    for (const std::string json : {"", "   \n", "{", R"({"cudnn": {)", R"({"cudnn": {"name": "x"})", "[1, 2]",
                                   "\"cudnn\"", "42", "null", R"({"a": 1,})", R"({"a" 1})", "{} x", "{}}",
                                   "{\"a\": \"\xff\"}" /* invalid UTF-8 */, R"({"cudnn": {"name": "unterminated}})"}) {
        INFO("input: " << json);
        auto parsed = redist::parse_manifest(json, test_source);
        REQUIRE_FALSE(parsed.ok());
        CHECK(parsed.error_value().code == redist::error_code::bad_manifest);
        CHECK(parsed.error_value().source == test_source);
        CHECK(parsed.error_value().describe().find(test_source) != std::string::npos);
    }
    // An invalid escape inside a value that is read: simdjson's message and the path.
    auto e = expect_bad(with_variant(fields{}.with("relative_path", R"("a\qb")")),
                        "cudnn.linux-x86_64.cuda12.relative_path");
    CHECK(e.message.find("invalid JSON") != std::string::npos);
    // Top-level not an object says so.
    auto arr = redist::parse_manifest("[]", test_source);
    REQUIRE_FALSE(arr.ok());
    CHECK(arr.error_value().message.find("object") != std::string::npos);
}

TEST_CASE("a truncated real manifest is rejected, at every cut", "[manifest][errors]") {
    const std::string text = slurp(manifest_dir / "cudnn/redistrib_9.27.0.json");
    // Cut at a spread of positions, including inside strings and numbers.
    std::size_t cuts = 0;
    for (std::size_t n = 0; n + 2 < text.size(); n += 97) {
        // Trailing whitespace after the final '}' is the only harmless cut.
        const auto cut = text.substr(0, n);
        auto parsed = redist::parse_manifest(cut, "cut.json");
        INFO("cut at " << n);
        REQUIRE_FALSE(parsed.ok());
        CHECK(parsed.error_value().code == redist::error_code::bad_manifest);
        CHECK(parsed.error_value().source == "cut.json");
        ++cuts;
    }
    CHECK(cuts > 20);
}

TEST_CASE("credentials in a URL source are not repeated in errors", "[manifest][errors]") {
    auto parsed = redist::parse_manifest("{", "https://user:secret@mirror.example/redistrib_1.json");
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error_value().describe().find("secret") == std::string::npos);
    CHECK(parsed.error_value().describe().find("mirror.example/redistrib_1.json") != std::string::npos);
}

TEST_CASE("json_path keeps control characters out of messages", "[manifest][errors]") {
    auto parsed = redist::parse_manifest(R"({"cu\ndnn":{"name":1}})", test_source);
    REQUIRE_FALSE(parsed.ok());
    // The key itself is refused now (not a valid name), before its fields are read.
    CHECK(parsed.error_value().json_path == "cu?dnn");
    CHECK(parsed.error_value().describe().find('\n') == std::string::npos);
    CHECK(parsed.error_value().message.find("\\x0a") != std::string::npos);
}

TEST_CASE("component, platform and variant keys, label and product must be names", "[manifest][errors]") {
    const std::string artifact = fields{}.json();
    for (const std::string key : {"../../../../x", "/tmp/victim", "sub/comp", "..", ".", "a b", "x\\u001b[2J"}) {
        INFO("key = " << key);
        auto component = redist::parse_manifest(R"({")" + key + R"(":{"linux-x86_64":)" + artifact + "}}", test_source);
        REQUIRE_FALSE(component.ok());
        CHECK(component.error_value().code == redist::error_code::bad_manifest);
        CHECK(component.error_value().message.find("not a valid name") != std::string::npos);
        auto platform = redist::parse_manifest(R"({"cudnn":{")" + key + R"(":)" + artifact + "}}", test_source);
        REQUIRE_FALSE(platform.ok());
        CHECK(platform.error_value().message.find("not a valid name") != std::string::npos);
        auto variant = redist::parse_manifest(R"({"cudnn":{"linux-x86_64":{")" + key + R"(":)" + artifact + "}}}",
                                              test_source);
        REQUIRE_FALSE(variant.ok());
        CHECK(variant.error_value().message.find("not a valid name") != std::string::npos);
    }
    expect_bad(R"({"release_label":"../x"})", "release_label");
    expect_bad(R"({"release_product":"a/b"})", "release_product");
    expect_bad(R"({"release_label":"9.0\u0000"})", "release_label");
    expect_ok(R"({"release_date":"2024-01-01, any text","release_label":"","release_product":"cudnn"})");
    expect_bad(R"({"cudnn":{"linux-x86_64":)" + artifact + R"(},")" + std::string(129, 'a') + R"(":{"x":)" + artifact +
                   "}}",
               std::string(128, 'a') + "...");
}

TEST_CASE("relative paths are checked after percent-decoding", "[manifest][errors]") {
    const std::string path = "cudnn.linux-x86_64.cuda12.relative_path";
    for (const std::string raw :
         {R"("..%2f..%2foutside%2fx.tar.xz")", R"("..%2F..%2Fx.tar.xz")", R"("%2e%2e/x.tar.xz")", R"("%2E./x.tar.xz")",
          R"("a%5c..%5cb.tar.xz")", R"("a%5Cb.tar.xz")", R"("a%00b.tar.xz")", R"("a%0ab.tar.xz")",
          R"("a%252fb.tar.xz")", R"("%2fetc/passwd")", R"("https%3a//evil/x.zip")"}) {
        INFO("relative_path = " << raw);
        expect_bad(with_variant(fields{}.with("relative_path", raw)), path);
    }
    // Escapes of ordinary characters, and a lone '%', keep their meaning.
    const auto m = expect_ok(with_variant(fields{}.with("relative_path", R"("a/b%20c%2Bd%zz.tar.xz")")));
    CHECK(m.components[0].artifacts[0].relative_path == "a/b%20c%2Bd%zz.tar.xz");
    CHECK(redist::artifact_path_problem("a%2fb") != nullptr);
    CHECK(redist::artifact_path_problem("a/b.tar.xz") == nullptr);
}

// ---- 3. formats and variants ----------------------------------------------------

TEST_CASE("archive format detection", "[manifest][format]") {
    CHECK(redist::archive_format_from_path("a/b-archive.tar.xz") == archive_format::tar_xz);
    CHECK(redist::archive_format_from_path("b.txz") == archive_format::tar_xz);
    CHECK(redist::archive_format_from_path("TensorRT-10.9.0.34.Linux.x86_64-gnu.cuda-12.8.tar.gz") ==
          archive_format::tar_gz);
    CHECK(redist::archive_format_from_path("b.tgz") == archive_format::tar_gz);
    CHECK(redist::archive_format_from_path("x/b.tar.zst") == archive_format::tar_zst);
    CHECK(redist::archive_format_from_path("cudnn-windows-x86_64-9.27.0.42_cuda13-archive.zip") == archive_format::zip);
    CHECK(redist::archive_format_from_path("B.ZIP") == archive_format::zip);
    CHECK(redist::archive_format_from_path("b.tar") == archive_format::unknown);
    CHECK(redist::archive_format_from_path("b.xz") == archive_format::unknown);
    CHECK(redist::archive_format_from_path("b.zst") == archive_format::unknown);
    CHECK(redist::archive_format_from_path("b.tar.xz.sig") == archive_format::unknown);
    CHECK(redist::archive_format_from_path("zip") == archive_format::unknown);
    CHECK(redist::archive_format_from_path("") == archive_format::unknown);
    CHECK(std::string(redist::to_string(archive_format::tar_xz)) == "tar.xz");
    CHECK(std::string(redist::to_string(archive_format::tar_gz)) == "tar.gz");
    CHECK(std::string(redist::to_string(archive_format::tar_zst)) == "tar.zst");
    CHECK(std::string(redist::to_string(archive_format::zip)) == "zip");
    CHECK(std::string(redist::to_string(archive_format::unknown)) == "unknown");

    // The parsed artifact carries the detected format.
    const auto m = expect_ok(with_variant(fields{}.with("relative_path", R"("p/x-archive.tar.zst")")));
    CHECK(m.components[0].artifacts[0].format == archive_format::tar_zst);
}

TEST_CASE("cuda_variant parses cudaN and cudaN.M variants only", "[manifest][format]") {
    redist::artifact a;
    CHECK_FALSE(a.cuda_major().has_value());
    CHECK_FALSE(a.cuda_variant().has_value());
    const std::map<std::string, std::optional<int>> cases{{"cuda11", 11},
                                                          {"cuda12", 12},
                                                          {"cuda13", 13},
                                                          {"cuda9", 9},
                                                          {"cuda12.4", 12},
                                                          {"cuda13.2", 13},
                                                          {"cuda", std::nullopt},
                                                          {"cuda12.", std::nullopt},
                                                          {"cuda.4", std::nullopt},
                                                          {"cuda12.4.1", std::nullopt},
                                                          {"CUDA12", std::nullopt},
                                                          {"cuda-12", std::nullopt},
                                                          {"rocm6", std::nullopt},
                                                          {"cuda99999", std::nullopt},
                                                          {"cuda12.x", std::nullopt}};
    for (const auto& [variant, expected] : cases) {
        INFO(variant);
        a.variant = variant;
        CHECK(a.cuda_major() == expected);
    }
    a.variant = "cuda13.2";
    CHECK(a.cuda_variant() == redist::cuda_version{13, 2});
    a.variant = "cuda13";
    CHECK(a.cuda_variant() == redist::cuda_version{13, std::nullopt});
}

TEST_CASE("parse_cuda_version: N, N.M and N.M.P", "[manifest][format]") {
    CHECK(redist::parse_cuda_version("12") == redist::cuda_version{12, std::nullopt});
    CHECK(redist::parse_cuda_version("12.4") == redist::cuda_version{12, 4});
    CHECK(redist::parse_cuda_version("12.4.1") == redist::cuda_version{12, 4});
    for (const char* bad : {"", ".", "12.", ".4", "12..4", "12.4.1.0", "1234", "-12", "12a", " 12"}) {
        INFO(bad);
        CHECK_FALSE(redist::parse_cuda_version(bad).has_value());
    }
    CHECK(redist::to_string(redist::cuda_version{13, 2}) == "13.2");
    CHECK(redist::to_string(redist::cuda_version{13, std::nullopt}) == "13");
}
