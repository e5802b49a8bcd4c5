// The field-table JSON reader (lib/support/json_reader.hpp) and the readers built on
// it: errors name the file and the JSON path, duplicate keys are refused.
#include <catch2/catch.hpp>

#include "redist/lockfile.hpp"
#include "redist/prefix.hpp"
#include "store/receipts.hpp"
#include "support/json_reader.hpp"

using namespace redist;

namespace {

struct sample {
    std::string name;
    std::uint64_t count = 0;
    std::optional<std::string> note;
    std::vector<std::string> items;
};

result<sample> read_sample(std::string_view text) {
    sample s;
    auto read = json::read_document(
        text, "sample.json", "sample",
        {{"name", [&](json::value& v) -> result<void> { return v.get_name(s.name, "name"); }, true},
         {"count", [&](json::value& v) -> result<void> { return v.get(s.count); }},
         {"note", [&](json::value& v) -> result<void> { return v.get(s.note); }},
         {"items", [&](json::value& v) -> result<void> {
              return v.for_each([&](json::value& item) -> result<void> {
                  std::string p;
                  REDIST_TRY_VOID(item.get_relative_path(p));
                  s.items.push_back(std::move(p));
                  return {};
              });
          }}});
    if (!read.ok()) return std::move(read).error_value();
    return s;
}

}  // namespace

TEST_CASE("json_reader reads known fields and skips unknown ones") {
    auto s = read_sample(R"({"name": "x", "extra": {"deep": [1, 2]}, "count": 3, "note": null, "items": ["a/b"]})");
    REQUIRE(s.ok());
    CHECK(s->name == "x");
    CHECK(s->count == 3);
    CHECK_FALSE(s->note);
    CHECK(s->items == std::vector<std::string>{"a/b"});
}

TEST_CASE("json_reader errors carry the source and the JSON path") {
    auto dup = read_sample(R"({"name": "x", "name": "y"})");
    REQUIRE_FALSE(dup.ok());
    CHECK(dup.error_value().code == error_code::bad_manifest);
    CHECK(dup.error_value().json_path == "name");
    CHECK(dup.error_value().message == "duplicate key");
    CHECK(dup.error_value().source == "sample.json");

    auto missing = read_sample(R"({"count": 1})");
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error_value().json_path == "name");

    auto type = read_sample(R"({"name": "x", "count": "3"})");
    REQUIRE_FALSE(type.ok());
    CHECK(type.error_value().json_path == "count");

    auto negative = read_sample(R"({"name": "x", "count": -1})");
    REQUIRE_FALSE(negative.ok());
    CHECK(negative.error_value().json_path == "count");

    auto element = read_sample(R"({"name": "x", "items": ["ok", "../escape"]})");
    REQUIRE_FALSE(element.ok());
    CHECK(element.error_value().json_path == "items[1]");

    auto name = read_sample(R"({"name": "../../x"})");
    REQUIRE_FALSE(name.ok());
    CHECK(name.error_value().json_path == "name");

    for (const char* broken : {"", "[]", "{\"name\": ", "{\"name\": \"x\"} trailing", "{\"name\": \"x\"}}"}) {
        auto e = read_sample(broken);
        REQUIRE_FALSE(e.ok());
        CHECK(e.error_value().code == error_code::bad_manifest);
        CHECK(e.error_value().describe().find('\n') == std::string::npos);
    }
}

TEST_CASE("lock files: names are validated, errors name the JSON path") {
    const std::string sha(64, 'a');
    const auto lock_with = [&](const std::string& component, const std::string& relative_path = "x.tar.xz") {
        return R"({"lock_version": 1, "product": "cudnn", "artifacts": [{"component": ")" + component +
               R"(", "platform": "linux-x86_64", "relative_path": ")" + relative_path +
               R"(", "url": "http://h/x.tar.xz", "sha256": ")" + sha + R"(", "size": 3}]})";
    };
    auto ok = lockfile_from_json(lock_with("cudnn"), "redist.lock");
    REQUIRE(ok.ok());
    CHECK(ok->artifacts.at(0).entry.size == 3);
    for (const char* key : {"../../../../x", "/tmp/victim", "sub/comp", ""}) {
        auto bad = lockfile_from_json(lock_with(key), "redist.lock");
        REQUIRE_FALSE(bad.ok());
        CHECK(bad.error_value().code == error_code::bad_manifest);
        CHECK(bad.error_value().json_path == "artifacts[0].component");
        CHECK(bad.error_value().source == "redist.lock");
    }
    auto encoded = lockfile_from_json(lock_with("cudnn", "..%2f..%2fx.tar.xz"), "redist.lock");
    REQUIRE_FALSE(encoded.ok());
    CHECK(encoded.error_value().json_path == "artifacts[0].relative_path");
    // A variant is null or a name, read once (the reader used to read it twice).
    const auto lock_with_variant = [&](const std::string& variant) {
        return R"({"lock_version": 1, "product": "cudnn", "artifacts": [{"component": "cudnn", "variant": )" + variant +
               R"(, "platform": "linux-x86_64", "relative_path": "x.tar.xz", "url": "http://h/x.tar.xz", )" +
               R"("sha256": ")" + sha + R"(", "size": 3}]})";
    };
    auto cuda13 = lockfile_from_json(lock_with_variant(R"("cuda13")"), "redist.lock");
    REQUIRE(cuda13.ok());
    CHECK(cuda13->artifacts.at(0).entry.variant == std::optional<std::string>("cuda13"));
    auto no_variant = lockfile_from_json(lock_with_variant("null"), "redist.lock");
    REQUIRE(no_variant.ok());
    CHECK_FALSE(no_variant->artifacts.at(0).entry.variant);
    for (const char* bad : {R"("")", R"("../x")", R"("cuda\13")", "13"}) {
        auto refused = lockfile_from_json(lock_with_variant(bad), "redist.lock");
        REQUIRE_FALSE(refused.ok());
        CHECK(refused.error_value().code == error_code::bad_manifest);
        CHECK(refused.error_value().json_path == "artifacts[0].variant");
    }
    auto product = lockfile_from_json(R"({"lock_version": 1, "product": "a/b", "artifacts": []})", "l");
    REQUIRE_FALSE(product.ok());
    CHECK(product.error_value().json_path == "product");
    auto dup = lockfile_from_json(R"({"lock_version": 1, "lock_version": 1, "product": "p"})", "l");
    REQUIRE_FALSE(dup.ok());
    CHECK(dup.error_value().json_path == "lock_version");
}

TEST_CASE("receipts: names, paths and duplicate keys are checked") {
    const auto receipt_with = [](const std::string& component, const std::string& path) {
        return R"({"product": "demo", "component": ")" + component + R"(", "files": [{"path": ")" + path +
               R"(", "type": "file", "size": 1, "sha256": "", "mode": 420}]})";
    };
    REQUIRE(receipt_from_json(receipt_with("a", "lib/a.so"), "r.json").ok());
    auto key = receipt_from_json(receipt_with("../../x", "lib/a.so"), "r.json");
    REQUIRE_FALSE(key.ok());
    CHECK(key.error_value().json_path == "component");
    for (const char* bad :
         {"/etc/passwd", "../x", ".redist/transaction.json", ".redist/receipts/demo/a.json", "a//b"}) {
        auto path = receipt_from_json(receipt_with("a", bad), "r.json");
        REQUIRE_FALSE(path.ok());
        CHECK(path.error_value().json_path == "files[0].path");
    }
    auto dup = receipt_from_json(R"({"product": "demo", "component": "a", "component": "b"})", "r.json");
    REQUIRE_FALSE(dup.ok());
    CHECK(dup.error_value().json_path == "component");
    auto no_product = receipt_from_json(R"({"component": "a"})", "r.json");
    REQUIRE_FALSE(no_product.ok());
    CHECK(no_product.error_value().json_path == "product");
}

TEST_CASE("json_reader refuses a second read of one value") {
    // On-Demand unescapes a string into the parser's buffer at every read, and
    // the buffer holds one read of each string: a reader that read a long
    // string twice wrote past it. The second read must not reach simdjson.
    std::string text;
    std::optional<std::string> maybe;
    std::uint64_t number = 0;
    const std::vector<std::pair<std::string, json::value_fn>> first_reads = {
        {R"({"v": "abc"})", [&](json::value& v) { return v.get(text); }},
        {R"({"v": "abc"})", [&](json::value& v) { return v.get(maybe); }},
        {R"({"v": "abc"})", [&](json::value& v) { return v.get_name(text, "v"); }},
        {R"({"v": "abc"})", [&](json::value& v) { return v.get_relative_path(text); }},
        {R"({"v": 7})", [&](json::value& v) { return v.get(number); }},
        {R"({"v": {}})", [&](json::value& v) { return v.read_object({}); }},
        {R"({"v": []})", [&](json::value& v) { return v.for_each([](json::value&) { return result<void>(); }); }},
    };
    for (std::size_t i = 0; i < first_reads.size(); ++i) {
        INFO("first read #" << i << " of " << first_reads[i].first);
        std::string second;
        auto read = json::read_document(first_reads[i].first, "twice.json", "sample",
                                        {{"v", [&](json::value& v) -> result<void> {
                                              REDIST_TRY_VOID(first_reads[i].second(v));
                                              return v.get(second);
                                          }}});
        REQUIRE_FALSE(read.ok());
        CHECK(read.error_value().code == error_code::internal);
        CHECK(read.error_value().message == "JSON value v read twice (a bug in redist)");
        CHECK(read.error_value().source == "twice.json");
        CHECK(second.empty());
    }
}

TEST_CASE("receipts: a long variant full of escapes is read once and decoded") {
    // The shape receipt_fuzz found (tests/fuzz/corpus/receipt/variant_escapes.json):
    // the variant handler read its string twice, and twice a string this long
    // overran simdjson's string buffer.
    const std::string escaped = std::string(300, '7') + R"(\\)" + std::string(200, ':') + R"(\\\\)";
    const auto r = receipt_from_json(R"({"product": "demo", "component": "a", "variant": ")" + escaped + R"("})",
                                     "r.json");
    REQUIRE_FALSE(r.ok());  // backslashes and colons are not a name
    CHECK(r.error_value().code == error_code::bad_manifest);
    CHECK(r.error_value().json_path == "variant");
    CHECK(r.error_value().message.find("is not a valid name") != std::string::npos);
    const auto ok = receipt_from_json(R"({"product": "demo", "component": "a", "variant": "cuda13"})", "r.json");
    REQUIRE(ok.ok());
    CHECK(ok->variant == std::optional<std::string>("cuda13"));
    const auto null = receipt_from_json(R"({"product": "demo", "component": "a", "variant": null})", "r.json");
    REQUIRE(null.ok());
    CHECK_FALSE(null->variant);
}
