// select_rules.hpp (internal) — the rules select_artifacts() (redist/select.hpp)
// applies to a release's components, apart from the one selector so that
// the tests can pin them down: which releases are one library family, which
// components belong to the GPU driver; and what a release offers, for the
// errors of the mirror (which selects with artifact_choice::every_variant).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "redist/manifest.hpp"

namespace redist {

// A release whose components are one library family: at most 4 components,
// or every key sharing the word before its first '_' (cudnn, cudnn_jit,
// cudnn_samples; nvpl_blas ... nvpl_tensor). The CUDA toolkit (49
// components, the driver among them) is not one: installing all of it is
// gigabytes nobody asked for, so `redist fetch` wants a choice
// (unnamed_components::fetch_default).
bool is_library_family(const manifest& m);

// Components that install or belong to the GPU driver (nvidia_driver,
// nvidia_fs, fabricmanager, imex, driver_assistant, libnvidia_nscq, and
// cuda_compat*, the forward-compatibility driver libraries): never
// installed unless named with --component (unnamed_components::all).
bool is_driver_component(std::string_view key);

// The platforms the requested components (empty: all) have artifacts for,
// sorted: "linux-sbsa, linux-x86_64" in an error that a platform has nothing.
std::vector<std::string> available_platforms(const manifest& m, const std::vector<std::string>& components);

}  // namespace redist
