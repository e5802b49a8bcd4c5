// model/diff.hpp (internal) — the one table of components NVIDIA renamed
// between releases (diff.cpp): diff_manifests (redist/diff.hpp) reports
// them as renamed, and a component is found under either name (a lock's,
// lockfile.cpp; a project's, pipeline/sync.cpp); exposed for the unit tests
// (tests/unit/model/diff_test.cpp).
#pragma once

#include <span>
#include <string_view>

#include "redist/diff.hpp"
#include "redist/manifest.hpp"

namespace redist {

// A component NVIDIA renamed between releases. This is the one table of
// renames: diffs report them as "renamed", and lookups by the old name find
// the new one (and back).
struct component_alias {
    std::string_view old_key;  // "cuda_cccl"
    std::string_view new_key;  // "cccl"
    std::string_view since;    // "CUDA 13.0"
};
std::span<const component_alias> component_aliases() noexcept;

// The component `key` in `m`; failing that, the component that the alias
// table says is the same one under its other name. Null when neither exists.
const component* find_component_or_alias(const manifest& m, std::string_view key) noexcept;

}  // namespace redist
