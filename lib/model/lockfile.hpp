// model/lockfile.hpp (internal) — what the library does with locks besides
// reading them: an artifact and a manifest URL as a lock records them
// (lockfile.cpp, and pipeline/sync.cpp for a project lock), a version 1
// lock's artifacts for one platform, the project lock written, checked
// against its project file and turned into plans (pipeline/sync.cpp);
// exposed for the unit tests (tests/unit/pipeline/sync_test.cpp) and
// tests/fuzz/project_lock_fuzz.cpp. redist/lockfile.hpp holds the lock
// files' types and what the tools call (read, write, make, check, plan).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/lockfile.hpp"
#include "redist/manifest.hpp"
#include "redist/project.hpp"

namespace redist {

// ---- version 1 ----------------------------------------------------------------------

// `a` of `release` as a lock records it: its component's version, its
// sanitized URL and, where the release has a copy of it signed by a trusted
// key, that copy's decoded tar and the key.
locked_artifact lock_artifact(const resolved_release& release, const artifact& a);

// The locked artifacts for one platform and, where variants exist, one CUDA
// major (nullopt: the newest locked for that platform).
// Outcomes: ok | not_found (lists what the lock file holds).
result<std::vector<locked_artifact>> locked_for(const lockfile& lock, const std::string& platform,
                                                std::optional<int> cuda_major);

// Where a lock says the manifest lives: its URL on the base, even when a
// mirror served it. Mirrors are the reader's own (--mirror, the project's
// mirrors); every reader tries them first and then this base, as a plain
// fetch does, so a dead mirror falls back to the base.
std::string locked_manifest_url(const resolved_release& release);

// ---- version 2: the project lock ------------------------------------------------

// The lock file's text (lockfile.hpp: its format), as project_lock_from_json reads it.
std::string project_lock_to_json(const project_lock& lock);

// Why the lock no longer matches the project file ("products.cuda.version is
// 12.9 in redist.toml, 12.8 in the lock"), or nullopt when it does. Compares
// the inputs only: the product set, each version spec and component list,
// the platforms and the CUDA major. The prefix and exclude do not matter.
std::optional<std::string> lock_staleness(const project_lock& lock, const project_file& project);

// One product's artifacts for one platform, ready to install.
// Outcomes: ok | not_found (the lock does not list `platform`).
result<std::vector<release_plan>> plans_for_platform(const project_lock& lock, const std::string& platform);

}  // namespace redist
