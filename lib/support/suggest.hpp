// support/suggest.hpp (internal) — the guess behind did_you_mean
// (redist/suggest.hpp), on its own for the unit tests
// (tests/unit/support/suggest_test.cpp), and the products a missing one is
// compared with (pipeline/resolve.cpp). suggest.cpp implements both.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/suggest.hpp"

namespace redist {

// The candidate `typed` most likely meant, or nothing when none is close,
// by the rules did_you_mean states (redist/suggest.hpp); never `typed`
// itself. did_you_mean wraps its answer in words.
std::optional<std::string> closest_match(std::string_view typed, const std::vector<std::string>& candidates);

// The products NVIDIA publishes under <base>/<product>/redist/ (those with
// manifests in the test data), for suggestions when a product is not found.
const std::vector<std::string>& known_products();

}  // namespace redist
