// Internal to the library: a component's stage, and committing stages into
// the prefix (the prefix itself, its receipts and its lock are in
// include/redist/prefix.hpp).
#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

#include "archive/unpack.hpp"
#include "redist/error.hpp"
#include "redist/prefix.hpp"
#include "store/commit_plan.hpp"

namespace redist {

// Creates a fresh, empty stage directory under <prefix>/.redist/staging/.
// `name` must be a valid name (a component key). Outcomes: ok | bad_manifest | filesystem.
result<std::filesystem::path> make_stage(const std::filesystem::path& prefix, std::string_view name);

// Removes every stage under <prefix>/.redist/staging/ (after a failed install;
// under the lock, all stages belong to the lock holder).
void discard_stages(const prefix_lock& lock) noexcept;

// One component, unpacked and verified in its stage, ready to commit.
struct staged_component {
    std::filesystem::path stage_dir;
    receipt new_receipt;  // files filled from the unpacked entries (paths after relocation)
};

// Moves the stage's top-level files (LICENSE, README, ...) to
// share/licenses/<component>/ inside the stage, and turns the unpacked entries
// into the receipt's file list. Hardlinks become regular files; every file
// that shares an inode with a hardlink is re-hashed from the stage, so that
// the receipt matches the disk even when a later hardlink entry carried data.
// Outcomes: ok | bad_manifest (component key) | unsafe_archive (an entry path
// that is not plain and relative) | filesystem.
result<void> prepare_stage(staged_component& staged, const std::vector<unpacked_entry>& entries);

// Commits staged components into the prefix in one transaction:
//   - two staged components with different content at one path, or a staged
//     file that differs from another installed component's file: conflict
//     (nothing changes; the error names both components and the path);
//   - files of a replaced component (same component key) that the new version
//     no longer ships are deleted, unless another component owns them;
//   - a file in the prefix that no receipt owns and that differs from the
//     staged one is a conflict, unless overwrite_unowned (--force);
//   - a path that is a file in one component and a directory in another, or
//     a directory in the prefix where a file goes (or the reverse): conflict;
//   - receipts are written last, to receipts/<product>/<component>.json.
// Every refusal is decided before the journal is written: the stages are
// removed, no journal is left, and the prefix is untouched.
// Requires the prefix lock. Outcomes: ok | conflict | bad_manifest (invalid
// product/component) | unsafe_archive (a staged path in .redist/) | filesystem.
result<void> commit_stages(const prefix_lock& lock, std::vector<staged_component> staged,
                           bool overwrite_unowned = false);

// commit_stages() that also removes the installed components `remove` (each
// named by product AND component) in the same journal: all or nothing, rolled
// forward after a crash like any commit. A removed component goes as with
// remove_components() (its files but those another component keeps or a
// staged one ships, its receipt, directories that become empty); a staged
// file may replace a removed component's file without overwrite_unowned.
// `staged` may be empty. Outcomes: as commit_stages(), plus not_found (a
// component to remove is not installed) and conflict (one both staged and
// removed); on any refusal the stages are removed and the prefix is untouched.
result<void> commit_stages_removing(const prefix_lock& lock, std::vector<staged_component> staged,
                                    const std::vector<component_ref>& remove, bool overwrite_unowned = false);

// What commit_stages_removing() would refuse for conflicts, every one of
// them, if components with these receipts were staged (their file lists;
// no stage is read) and `remove` removed: a forecast, for --dry-run, by the
// same checks (commit_conflicts). Reads the prefix (a missing one has no
// files and no receipts) and hashes the files in the way; changes nothing and
// takes no lock. Outcomes: ok | bad_manifest | unsafe_archive | not_found |
// conflict (a component named twice, or both staged and removed) | filesystem.
result<std::vector<commit_conflict>> forecast_conflicts(const std::filesystem::path& prefix,
                                                        const std::vector<receipt>& incoming,
                                                        const std::vector<component_ref>& remove,
                                                        bool overwrite_unowned);

}  // namespace redist
