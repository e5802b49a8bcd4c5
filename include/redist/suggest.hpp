// redist/suggest.hpp — "did you mean ...?" for names a person typed.
//
// A typo in a subcommand, a flag, a product, a component or a platform should
// end in one line that names the likely intent, as cargo, uv and git do,
// rather than in a list of 44 names or an HTTP 404.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

// " (did you mean 'X'?)" where X is the candidate `typed` most likely
// meant, or "" when none is close. In order: a case-insensitive match; a
// known alias of a platform (`aarch64`, `arm64` -> `linux-sbsa`; `x86_64`
// -> `linux-x86_64`); a candidate that is `typed` with a conventional
// prefix ("lib", "cuda_", "linux-", ...: `cublas` is `libcublas`, `nvcc` is
// `cuda_nvcc`); then the nearest by edit distance (insertions, deletions,
// substitutions and swaps of neighbours), within about a third of the
// typed length. A tie between equally good candidates suggests nothing: a
// guess that may be wrong is worse than none. Never suggests `typed`
// itself. X is escaped for display (redist::printable).
std::string did_you_mean(std::string_view typed, const std::vector<std::string>& candidates);

REDIST_API_END
}  // namespace redist
