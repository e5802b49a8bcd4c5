// Internal: the one helper the per-stage profile (budget.hpp's add_time) uses
// to turn a steady_clock start into busy or wait nanoseconds.
#pragma once

#include <chrono>
#include <cstdint>

namespace redist {

inline std::uint64_t ns_since(std::chrono::steady_clock::time_point start) {
    return static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace redist
