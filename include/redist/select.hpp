// redist/select.hpp — choosing artifacts from a manifest. No I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"
#include "redist/manifest.hpp"

namespace redist {
REDIST_API_BEGIN

// What an empty component list means.
enum class unnamed_components {
    every,  // every component (lock, sync: a project names what it wants)
    // redist fetch without --component: every component of a library family
    // (at most 4 components, or every key sharing the word before its first
    // '_': cudnn, cudnn_jit, cudnn_samples) or of a small bundle (no driver
    // component, at most 2 GiB on the platform); for any other release (the
    // CUDA toolkit) a usage error that lists the largest components and the
    // two ways out (--component, --all)
    fetch_default,
    // --all: every component except the GPU driver's (nvidia_driver,
    // nvidia_fs, fabricmanager, imex, driver_assistant, libnvidia_nscq,
    // cuda_compat*), which are never installed unless named
    all,
};

// How many of a component's artifacts on the platform are chosen.
enum class artifact_choice {
    // One, for a machine to install (fetch, lock, sync): the CUDA variant
    // rule of select_artifacts() below.
    one_per_component,
    // Every one a machine of the platform might ask for (redist mirror): the
    // plain artifact and every variant; with cuda_major, only that major's
    // variants (cuda12, cuda12.4, ...) besides the plain one. cuda_minor is
    // not used, and named components without the platform are skipped.
    every_variant,
};

struct selection_request {
    std::string platform;                 // required, e.g. "linux-x86_64"
    std::optional<int> cuda_major;        // e.g. 12; nullopt = let select() choose
    std::vector<std::string> components;  // empty = see `unnamed`
    unnamed_components unnamed = unnamed_components::every;
    std::optional<int> cuda_minor = std::nullopt;  // with cuda_major: the minor preferred (12.4 prefers "cuda12.4")
    artifact_choice choice = artifact_choice::one_per_component;
};

// For a label spec of the `cuda` product, whose releases are CUDA versions:
// with --cuda N, "latest" (or empty) becomes "N" (the newest N.x), a spec
// whose major is N stays, another is a usage error naming both (and
// `asked_by`, the setting that asked: "--cuda", "cuda ="). Other products,
// or no --cuda: the spec unchanged. fetch, `redist lock` and sync (a
// project's or a product's cuda) all go through this one rule.
result<std::string> release_spec_for_cuda(std::string_view product, const std::string& spec,
                                          std::optional<int> cuda_major, std::string_view asked_by = "--cuda");

struct selection {
    std::vector<artifact> artifacts;  // in manifest order
    // The CUDA variant that was used for variant-specific components, if any
    // (the requested one, or the newest available when none was requested).
    std::optional<int> cuda_major;
    std::optional<int> cuda_minor;      // the requested minor, if any
    bool cuda_major_defaulted = false;  // true when select() chose the newest
    // unnamed_components::all: the driver's components on the platform that
    // were left out, in manifest order, for the tool to say so.
    std::vector<std::string> left_out;
};

// The variant keys `artifacts` use, exactly as keyed, sorted and joined:
// "cuda12", "cuda13, cuda13.2"; empty when none has a variant.
std::string variant_list(const std::vector<artifact>& artifacts);

// The CUDA major versions offered by the requested components on `platform`
// (from their cuda<N> and cuda<N>.<M> variant keys), ascending.
std::vector<int> available_cuda_majors(const manifest& m, const std::string& platform,
                                       const std::vector<std::string>& components);

// Picks one artifact per component for the platform and CUDA variant.
// For each component on the platform:
//   - with a variant requested (major N, minor M where given): "cuda<N>.<M>",
//     else "cuda<N>", else the nearest "cuda<N>.<x>" (the newest below M,
//     else the oldest above; without M the newest), else the plain
//     (variant-less) artifact, which CUDA toolkit components use;
//   - with no variant requested: the newest variant offered by the requested
//     components (reported in selection.cuda_major), else the plain artifact.
//     "Newest" is the newest that every requested component lacking a plain
//     artifact on the platform offers, so one lagging component does not
//     break the default; without such a common variant, the newest overall
//     (which then fails for the laggard, naming what it offers).
// Named components must all exist and have the platform; with an empty
// component list, components without the platform (e.g. samples that ship
// only "source") are skipped.
// With artifact_choice::every_variant, instead: every artifact of each
// component on the platform that the variant filter lets through, in
// manifest order (cuda_major stays the requested one, never defaulted).
// Outcomes:
//   ok         at least one artifact
//   not_found  a requested component does not exist, or has nothing for the
//              platform/variant, or nothing at all matches. The message (one
//              line) lists what is available (components, platforms, variants).
//   usage      request.platform is empty, or fetch_default for a release
//              that is no library family
result<selection> select_artifacts(const manifest& m, const selection_request& request);

// The one error for a component name the manifest lacks (fetch, show, mirror
// and sync all report it so): "unknown component 'cublas' (did you mean
// 'libcublas'?)" when one is close (redist/suggest.hpp), otherwise the list of
// the manifest's components. Code not_found; the caller adds the source.
error unknown_component(const manifest& m, const std::string& name);

REDIST_API_END
}  // namespace redist
