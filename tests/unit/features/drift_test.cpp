// Drift history: recording, change detection, kept documents, and the
// reader of history files (hostile input; fuzzed in tests/fuzz/drift_fuzz.cpp).
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "archive/sha256.hpp"
#include "features/url_history.hpp"
#include "redist/cache.hpp"
#include "redist/drift.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace redist_test;
using namespace redist;

namespace {

fs::path only_history_file(const fs::path& cache) {
    fs::path found;
    for (const auto& e : fs::directory_iterator(cache / "history" / "urls"))
        if (e.path().extension() == ".json") found = e.path();
    return found;
}

// The history of the cache at `root`, opened (and checked) as the tools open it.
std::optional<drift_store> open_store(const fs::path& root, bool shared = false) {
    auto cache = blob_cache::open(root, shared);
    if (!cache.ok()) return std::nullopt;
    return drift_store(std::move(*cache));
}

std::string real_manifest() {
    return slurp(fs::path(REDIST_TEST_DATA) / "manifests" / "cudnn" / "redistrib_9.27.0.json");
}

const std::string kUrl = "https://example.invalid/cudnn/redist/redistrib_9.27.0.json";
const std::string kA = std::string(64, 'a');
const std::string kB = std::string(64, 'b');

}  // namespace

TEST_CASE("first sight, same again, then a change with the previous entry") {
    const fs::path cache = scratch("record");
    auto store = open_store(cache);
    REQUIRE(store);
    auto first = store->check(kUrl, kA);
    REQUIRE(first.ok());
    CHECK(first->first_time);
    CHECK_FALSE(first->changed);
    REQUIRE(store->record(kUrl, kA, 100, "2026-11-01T00:00:00Z").ok());

    auto same = store->check(kUrl, kA);
    REQUIRE(same.ok());
    CHECK_FALSE(same->first_time);
    CHECK_FALSE(same->changed);
    REQUIRE(store->record(kUrl, kA, 100, "2026-11-02T00:00:00Z").ok());

    auto changed = store->check(kUrl, kB);
    REQUIRE(changed.ok());
    CHECK(changed->changed);
    REQUIRE(changed->previous);
    CHECK(changed->previous->sha256 == kA);
    CHECK(changed->previous->first_seen == "2026-11-01T00:00:00Z");  // first seen is kept
    CHECK(changed->previous->last_seen == "2026-11-02T00:00:00Z");
    REQUIRE(store->record(kUrl, kB, 120, "2026-11-03T00:00:00Z").ok());

    auto h = store->load(kUrl);
    REQUIRE(h.ok());
    REQUIRE(*h);
    REQUIRE((*h)->seen.size() == 2);
    CHECK((*h)->seen[1].sha256 == kB);
    CHECK((*h)->seen[1].size == 120);
    // Another URL has its own history.
    auto other = store->check(kUrl + "x", kB);
    REQUIRE(other.ok());
    CHECK(other->first_time);
}

TEST_CASE("history keeps at most kMaxHistoryEntries entries, newest last") {
    const fs::path cache = scratch("bounded");
    auto store = open_store(cache);
    REQUIRE(store);
    for (std::size_t i = 0; i < kMaxHistoryEntries + 5; ++i)
        REQUIRE(store->record(kUrl, sha256_hex(std::to_string(i)), i, "2026-11-01T00:00:00Z").ok());
    auto h = store->load(kUrl);
    REQUIRE(h.ok());
    REQUIRE((*h)->seen.size() == kMaxHistoryEntries);
    CHECK((*h)->seen.back().sha256 == sha256_hex(std::to_string(kMaxHistoryEntries + 4)));
}

TEST_CASE("kept documents are verified by hash when read back") {
    const fs::path cache = scratch("documents");
    auto store = open_store(cache);
    REQUIRE(store);
    const std::string body = real_manifest();
    REQUIRE(store->record_manifest(kUrl, body).ok());
    CHECK(store->load_document(sha256_hex(body)) == body);
    auto h = store->load(kUrl);
    REQUIRE(h.ok());
    REQUIRE(*h);
    CHECK((*h)->seen.back().sha256 == sha256_hex(body));
    CHECK((*h)->seen.back().size == body.size());
    CHECK_FALSE(store->load_document(kA));           // never kept
    CHECK_FALSE(store->load_document("../../etc"));  // not a hash: never a path
    std::ofstream(cache / "history" / "documents" / sha256_hex(body), std::ios::trunc) << "tampered";
    CHECK_FALSE(store->load_document(sha256_hex(body)));
}

TEST_CASE("only a document that parses as a manifest is kept or recorded") {
    const fs::path cache = scratch("not_a_manifest");
    auto store = open_store(cache);
    REQUIRE(store);
    for (const std::string& body : {std::string("<html>502 Bad Gateway</html>"), std::string("{\"release_label\": 1}"),
                                    std::string("{\"release_label\": \"9.27.0\"")}) {
        auto kept = store->record_manifest(kUrl, body);
        REQUIRE_FALSE(kept.ok());
        CHECK(kept.error_value().code == error_code::bad_manifest);
        CHECK_FALSE(store->load_document(sha256_hex(body)));
    }
    CHECK(fs::is_empty(cache / "history" / "documents"));
    CHECK(fs::is_empty(cache / "history" / "urls"));
}

TEST_CASE("the history is opened only through an accepted cache") {
    const fs::path base = scratch("history_symlink");
    const fs::path cache = base / "cache";
    fs::create_directories(cache / "history");
    fs::create_directories(base / "outside");
    fs::create_directory_symlink(base / "outside", cache / "history" / "urls");
    for (bool shared : {false, true}) {
        auto refused = blob_cache::open(cache, shared);
        REQUIRE_FALSE(refused.ok());
        CHECK(refused.error_value().describe().find("symlink or not a directory") != std::string::npos);
    }
    CHECK(fs::is_empty(base / "outside"));
}

TEST_CASE("a corrupt history file never blocks: check reports it, record starts over") {
    const fs::path cache = scratch("corrupt");
    auto store = open_store(cache);
    REQUIRE(store);
    REQUIRE(store->record(kUrl, kA, 1).ok());
    const fs::path file = only_history_file(cache);
    REQUIRE_FALSE(file.empty());
    std::ofstream(file, std::ios::trunc) << "{\"history_version\": 1, \"url\": ";
    auto c = store->check(kUrl, kB);
    REQUIRE(c.ok());
    CHECK(c->corrupt_history);
    CHECK_FALSE(c->changed);
    REQUIRE(store->record(kUrl, kB, 2).ok());
    auto h = store->load(kUrl);
    REQUIRE(h.ok());
    REQUIRE((*h)->seen.size() == 1);
    CHECK((*h)->seen[0].sha256 == kB);

    // A history that belongs to another URL is not this URL's.
    std::ofstream(file, std::ios::trunc) << url_history_to_json({"https://other.invalid/x", {{kA, 1, "1", "1"}}});
    auto foreign = store->load(kUrl);
    REQUIRE_FALSE(foreign.ok());
    CHECK(foreign.error_value().code == error_code::bad_manifest);
}

TEST_CASE("concurrent recorders never corrupt the file") {
    const fs::path cache = scratch("concurrent");
    auto store = open_store(cache);
    REQUIRE(store);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 10; ++i) (void)store->record(kUrl, sha256_hex(std::to_string(t * 100 + i)), 1);
        });
    for (auto& t : threads) t.join();
    auto h = store->load(kUrl);
    REQUIRE(h.ok());
    CHECK((*h)->seen.size() == 40);  // the flock serializes read-modify-write: nothing lost
}

TEST_CASE("record refuses a lock file that is not a regular file, without blocking") {
    const fs::path cache = scratch("lock-fifo");
    auto store = open_store(cache);
    REQUIRE(store);
    const fs::path json = cache / "history" / "urls" / (sha256_hex(kUrl) + ".json");
    const fs::path lock = cache / "history" / "urls" / (sha256_hex(kUrl) + ".lock");
    REQUIRE(::mkfifo(lock.c_str(), 0600) == 0);
    auto recorded = store->record(kUrl, kA, 1);
    REQUIRE_FALSE(recorded.ok());
    CHECK(recorded.error_value().message.find("not a regular file") != std::string::npos);
    CHECK(recorded.error_value().path == lock.string());
    CHECK_FALSE(fs::exists(json));
}

TEST_CASE("parse_url_history: round trip and every malformed field named") {
    url_history h{kUrl, {{kA, 5, "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"}}};
    auto back = parse_url_history(url_history_to_json(h), "h.json");
    REQUIRE(back.ok());
    CHECK(back->url == kUrl);
    REQUIRE(back->seen.size() == 1);
    CHECK(back->seen[0].size == 5);

    const std::string ok_entry = "{\"sha256\": \"" + kA +
                                 "\", \"size\": 1, \"first_seen\": \"2026\", \"last_seen\": \"2026\"}";
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"[]", ""},
        {"{\"history_version\": 2, \"url\": \"u\", \"seen\": []}", "history_version"},
        {"{\"history_version\": 1, \"seen\": []}", "url"},
        {"{\"history_version\": 1, \"url\": \"u\", \"seen\": {}}", "seen"},
        {"{\"history_version\": 1, \"url\": \"u\", \"seen\": [" + ok_entry + ", 3]}", "seen[1]"},
        {"{\"history_version\": 1, \"url\": \"u\", \"seen\": [{\"sha256\": \"xyz\"}]}", "seen[0].sha256"},
        {"{\"history_version\": 1, \"url\": \"u\", \"seen\": [{\"sha256\": \"" + kA + "\", \"size\": -1}]}",
         "seen[0].size"},
        {"{\"history_version\": 1, \"url\": \"u\", \"seen\": [{\"sha256\": \"" + kA +
             "\", \"size\": 1, \"first_seen\": \"$(rm -rf /)\", \"last_seen\": \"2026\"}]}",
         "seen[0].first_seen"},
        {"{\"history_version\": 1, \"url\": \"u\", \"seen\": []} trailing", ""},
    };
    for (const auto& [text, path] : bad) {
        INFO(text);
        auto r = parse_url_history(text, "h.json");
        REQUIRE_FALSE(r.ok());
        CHECK(r.error_value().code == error_code::bad_manifest);
        CHECK(r.error_value().json_path == path);
        CHECK(r.error_value().source == "h.json");
    }
    std::string many = "{\"history_version\": 1, \"url\": \"u\", \"seen\": [";
    for (std::size_t i = 0; i <= kMaxHistoryEntries; ++i) many += (i ? "," : "") + ok_entry;
    many += "]}";
    CHECK_FALSE(parse_url_history(many, "h.json").ok());
    CHECK_FALSE(parse_url_history(std::string(kMaxHistoryBytes + 1, ' '), "h.json").ok());
}
