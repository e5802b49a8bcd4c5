// Internal: the commit journal and the pure commit planner. journal.cpp
// writes and applies what is planned here.
//
// The journal names every path relative to the prefix. When it is read back
// (roll forward after a crash) it is validated like any other input: a path
// that is not plain and relative, or that reaches into .redist/ anywhere but
// the staging area and the receipts, makes it corrupt (bad_manifest, exit 4)
// and nothing is applied. So a planted transaction.json cannot rename, delete
// or remove_all anything outside the prefix or in redist's own state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "redist/prefix.hpp"

namespace redist {

inline constexpr std::string_view state_dir_name = ".redist";
inline constexpr std::string_view staging_rel = ".redist/staging";
inline constexpr std::string_view receipts_rel = ".redist/receipts";

struct journal {
    struct mkdir_step {
        std::string path;
        unsigned mode = 0755;
        bool operator==(const mkdir_step&) const = default;
    };
    struct move_step {
        std::string from;  // under .redist/staging/
        std::string to;
        bool operator==(const move_step&) const = default;
    };
    std::vector<mkdir_step> mkdirs;    // parents first; created with `mode` only if missing
    std::vector<move_step> moves;      // renames; a missing `from` was done by an earlier run
    std::vector<std::string> deletes;  // unlinks (files, symlinks, receipts)
    std::vector<std::string> prune;    // directories removed if they became empty (deepest first)
    std::vector<std::string> stages;   // .redist/staging/<name>, removed at the end

    bool operator==(const journal&) const = default;
};

std::string journal_to_json(const journal& j);
// Outcomes: ok | bad_manifest (source and json_path name the bad value).
result<journal> journal_from_json(std::string_view text, std::string_view source);
// The rules journal_from_json enforces, for a journal built in memory.
// Outcomes: ok | bad_manifest (json_path names the step).
result<void> check_journal(const journal& j);

// Where receipts live: .redist/receipts/<product>/<component>.json. Receipts
// of redist before 0.2 lie at .redist/receipts/<component>.json (legacy) and
// are still read. Both names must pass validate_name().
std::string receipt_rel_path(std::string_view product, std::string_view component);
std::string legacy_receipt_rel_path(std::string_view component);

// A receipt and the prefix-relative file it was read from.
struct located_receipt {
    receipt r;
    std::string rel_path;
};

// What the planner needs to know about the disk, as an interface so that
// tests can plan without a prefix (like ninja's VirtualFileSystem).
class prefix_view {
public:
    enum class node { missing, directory, regular, symlink, other };
    virtual ~prefix_view() = default;
    // The type of <prefix>/<relative>, not following a symlink there.
    virtual node type_of(const std::string& relative) const = 0;
    // True when <prefix>/<relative> holds exactly `file` (same type and content).
    virtual bool holds(const std::string& relative, const installed_file& file) const = 0;
    // The permission bits of directory <prefix>/<stage>/<relative>, if it is one.
    virtual std::optional<unsigned> stage_dir_mode(const std::string& stage, const std::string& relative) const = 0;
    // The file system (st_dev) of <prefix>/<relative>, not following a
    // symlink there, or nullopt when it is missing. "" is the prefix itself.
    virtual std::optional<std::uint64_t> device_of(const std::string& relative) const = 0;
};

// One staged component: its stage (prefix-relative, ".redist/staging/<name>")
// and its new receipt. The receipt JSON is expected at "<stage>.receipt.json".
struct planned_stage {
    std::string stage;
    const receipt* r = nullptr;
};

// A component as (product, component), both validated names.
using component_key = std::pair<std::string, std::string>;

// One path a commit refuses to write, and why.
struct commit_conflict {
    std::string path;     // prefix-relative, as the archive or receipt names it
    std::string message;  // one line, without the path: "component cudnn would overwrite a file that ..."
    bool operator==(const commit_conflict&) const = default;
};

// How many paths conflict_error() names before it says how many more.
inline constexpr std::size_t k_conflicts_named = 100;

// The error of a commit refused for `conflicts` (sorted, not empty): one
// conflict is its message with its path; several are counted and named
// (grouped by reason, the first k_conflicts_named paths, then how many more),
// so that the user can move every one of them away at once.
error conflict_error(const std::vector<commit_conflict>& conflicts);

// Plans a commit that installs the `staged` components and removes the
// `removed` ones (each in `existing`, none staged), all or nothing; either
// list may be empty. Everything that can refuse it is decided here, before
// any journal exists. A removed component's files are redist's own: a staged
// file may replace one without overwrite_unowned, and is then never deleted.
// A file that a removed or replaced component shares with one that stays (or
// is staged) stays. Outcomes:
//   ok            the journal to run;
//   bad_manifest  a staged product or component that is not a valid name;
//   unsafe_archive a staged path that is not plain and relative, or lies in .redist/;
//   not_found     a removed component that is not in `existing`;
//   conflict      a component both staged and removed (or staged twice);
//                 else every path of these (conflict_error): two components
//                 with different content at one path; a file in one and a
//                 directory in another (or in the prefix); an unowned file
//                 that differs, unless overwrite_unowned.
//   filesystem    a move whose target directory (the nearest one that
//                 exists) is on another file system than .redist/staging (a
//                 mount point inside the prefix): rename(2) would fail with
//                 EXDEV after the journal is written.
result<journal> plan_commit(const prefix_view& prefix, const std::vector<located_receipt>& existing,
                            const std::vector<planned_stage>& staged, const std::vector<component_key>& removed,
                            bool overwrite_unowned);

// The conflicts plan_commit() would refuse the commit for, every one of them
// (sorted by path, one per path), found by the same checks; empty when
// there is none. For a forecast (--dry-run), where the staged receipts'
// file lists come from elsewhere (the cache's trees). Outcomes: as
// plan_commit() but `conflict` only for a component staged twice or both
// staged and removed, and no `filesystem`.
result<std::vector<commit_conflict>> commit_conflicts(const prefix_view& prefix,
                                                      const std::vector<located_receipt>& existing,
                                                      const std::vector<planned_stage>& staged,
                                                      const std::vector<component_key>& removed,
                                                      bool overwrite_unowned);

}  // namespace redist
