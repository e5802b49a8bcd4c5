// store/prefix.hpp (internal) — a shorthand of remove_components()
// (redist/prefix.hpp) for one component, which the unit tests
// (tests/unit/store/prefix_test.cpp) remove with; prefix.cpp defines it.
#pragma once

#include <string>

#include "redist/error.hpp"
#include "redist/prefix.hpp"

namespace redist {

// remove_components() for one component of any product.
result<void> remove_component(const prefix_lock& lock, const std::string& component);

}  // namespace redist
