// features/url_history.hpp (internal) — a drift history file's JSON
// (history/urls/ in the cache, drift.cpp). Programs use drift_store
// (redist/drift.hpp).
#pragma once

#include <string>
#include <string_view>

#include "redist/drift.hpp"
#include "redist/error.hpp"

namespace redist {

// Parses a history file. Outcomes: ok | bad_manifest (broken JSON, an
// unknown history_version, a missing or malformed field, more than
// kMaxHistoryEntries entries or kMaxHistoryBytes bytes; error.source =
// `source`, error.json_path names the field, e.g. "seen[2].sha256").
// Never throws, never crashes on any input (fuzzed: tests/fuzz/drift_fuzz.cpp).
result<url_history> parse_url_history(std::string_view json, std::string_view source);
std::string url_history_to_json(const url_history& history);

}  // namespace redist
