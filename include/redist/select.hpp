// redist/select.hpp — choosing artifacts from a manifest. No I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/manifest.hpp"

namespace redist {

struct selection_request {
    std::string platform;                 // required, e.g. "linux-x86_64"
    std::optional<int> cuda_major;        // e.g. 12; nullopt = let select() choose
    std::vector<std::string> components;  // empty = every component available
};

struct selection {
    std::vector<artifact> artifacts;  // in manifest order
    // The CUDA variant that was used for variant-specific components, if any
    // (the requested one, or the newest available when none was requested).
    std::optional<int> cuda_major;
    bool cuda_major_defaulted = false;  // true when select() chose the newest
};

// The CUDA major versions offered by the requested components on `platform`
// (from their cuda<N> variant keys), ascending.
std::vector<int> available_cuda_majors(const manifest& m, const std::string& platform,
                                       const std::vector<std::string>& components);

// Picks one artifact per component for the platform and CUDA variant.
// For each component on the platform:
//   - with a variant requested: the "cuda<N>" artifact if present, else the
//     plain (variant-less) artifact, which CUDA toolkit components use;
//   - with no variant requested: the newest variant offered by the requested
//     components (reported in selection.cuda_major), else the plain artifact.
//     "Newest" is the newest that every requested component lacking a plain
//     artifact on the platform offers, so one lagging component does not
//     break the default; without such a common variant, the newest overall
//     (which then fails for the laggard, naming what it offers).
// Named components must all exist and have the platform; with an empty
// component list, components without the platform (e.g. samples that ship
// only "source") are skipped.
// Outcomes:
//   ok         at least one artifact
//   not_found  a requested component does not exist, or has nothing for the
//              platform/variant, or nothing at all matches. The message (one
//              line) lists what is available (components, platforms, variants).
//   usage      request.platform is empty
result<selection> select_artifacts(const manifest& m, const selection_request& request);

// The one error for a component name the manifest lacks (fetch, show, mirror
// and sync all report it so): "unknown component 'cublas' (did you mean
// 'libcublas'?)" when one is close (redist/suggest.hpp), otherwise the list of
// the manifest's components. Code not_found; the caller adds the source.
error unknown_component(const manifest& m, const std::string& name);

}  // namespace redist
