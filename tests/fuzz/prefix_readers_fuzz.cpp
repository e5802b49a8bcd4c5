// libFuzzer target for the readers of the prefix's own files and of lock
// files: receipt_from_json, journal_from_json (the commit journal) and
// lockfile_from_json, and receipt_to_json on arbitrary bytes (built by tests/fuzz/CMakeLists.txt with clang++
// -fsanitize=fuzzer,address,undefined).
//
// The first byte picks the reader; the rest is the document. Besides "never
// crash, no UB", each reader's contract is checked on every input: what is
// accepted holds only valid names and plain relative paths (so nothing read
// can name a place outside the prefix), and a refusal is a one-line
// bad_manifest error naming its source. A violated contract aborts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "model/manifest.hpp"
#include "redist/lockfile.hpp"
#include "redist/prefix.hpp"
#include "redist/printable.hpp"
#include "redist/urls.hpp"
#include "store/commit_plan.hpp"
#include "store/receipts.hpp"
#include "support/printable.hpp"
#include "support/safe_path.hpp"

namespace {

void require(bool condition) {
    if (!condition) std::abort();
}

template <class T>
void require_clean_refusal(const redist::result<T>& r, std::string_view source) {
    if (r.ok()) return;
    const redist::error& e = r.error_value();
    require(e.code == redist::error_code::bad_manifest || e.code == redist::error_code::internal);
    require(e.describe().find('\n') == std::string::npos);
    require(e.source == source);
}

void check_receipt(std::string_view text) {
    const std::string source = "/p/.redist/receipts/p/c.json";
    auto r = redist::receipt_from_json(text, source);
    require_clean_refusal(r, source);
    if (!r.ok()) return;
    require(redist::name_problem(r->product) == nullptr);
    require(redist::name_problem(r->component) == nullptr);
    for (const auto& f : r->files) {
        require(redist::relative_path_problem(f.path) == nullptr);
        require(f.path.rfind(".redist", 0) != 0 || (f.path.size() > 7 && f.path[7] != '/'));
        require(redist::confined_join("/p", f.path).ok());
    }
    // What is written is UTF-8 and reads back the same.
    const std::string json = redist::receipt_to_json(*r);
    require(redist::valid_utf8(json));
    auto again = redist::receipt_from_json(json, source);
    require(again.ok() && again->files.size() == r->files.size());
}

void check_journal(std::string_view text) {
    const std::string source = "/p/.redist/transaction.json";
    auto j = redist::journal_from_json(text, source);
    require_clean_refusal(j, source);
    if (!j.ok()) return;
    require(redist::check_journal(*j).ok());
    for (const auto& m : j->moves) {
        require(m.from.rfind(".redist/staging/", 0) == 0);
        require(redist::confined_join("/p", m.to).ok());
    }
    for (const auto& d : j->deletes) require(redist::confined_join("/p", d).ok());
    for (const auto& s : j->stages) require(s.rfind(".redist/staging/", 0) == 0);
    auto again = redist::journal_from_json(redist::journal_to_json(*j), source);
    require(again.ok() && *again == *j);
}

void check_lockfile(std::string_view text) {
    const std::string source = "redist.lock";
    auto l = redist::lockfile_from_json(text, source);
    require_clean_refusal(l, source);
    if (!l.ok()) return;
    require(redist::name_problem(l->product) == nullptr);
    for (const auto& a : l->artifacts) {
        require(redist::name_problem(a.entry.component) == nullptr);
        require(redist::name_problem(a.entry.platform) == nullptr);
        require(a.entry.relative_path.empty() || redist::artifact_path_problem(a.entry.relative_path) == nullptr);
    }
}

// Any bytes in a receipt's free-text fields (a URL, an --exclude glob from
// the command line) still make a receipt that reads back: the writer never
// emits invalid JSON, so a receipt never becomes unreadable by what it holds;
// the URL reads back as sanitize_url() made it (no user info).
void check_writer(std::string_view text) {
    redist::receipt r;
    r.product = "p";
    r.component = "c";
    r.url = std::string(text);
    r.component_version = std::string(text);
    r.exclude = {std::string(text)};
    const std::string json = redist::receipt_to_json(r);
    require(redist::valid_utf8(json));
    auto back = redist::receipt_from_json(json, "c.json");
    require(back.ok());
    // The URL is stored sanitized: a record never holds credentials.
    const std::string stored = redist::sanitize_url(std::string(text));
    require(redist::valid_utf8(stored) ? back->url == stored : redist::valid_utf8(back->url));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    switch (data[0] % 4) {
        case 0: check_receipt(text); break;
        case 1: check_journal(text); break;
        case 2: check_lockfile(text); break;
        default: check_writer(text); break;
    }
    return 0;
}
