// Shared checks for the libFuzzer targets in tests/fuzz/. A violated contract
// aborts, which libFuzzer reports as a crash with a reproducer.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

#include "redist/error.hpp"

namespace fuzz {

inline void require(bool condition) {
    if (!condition) std::abort();
}

// Every failure of a reader of untrusted bytes is one error of the expected
// category that names its source, and renders as one line.
inline void require_clean_error(const redist::error& err, redist::error_code expected, std::string_view source) {
    require(err.code == expected);
    require(err.source == source);
    require(!err.message.empty());
    const std::string line = err.describe();
    require(line.find('\n') == std::string::npos && line.find('\r') == std::string::npos);
}

}  // namespace fuzz
