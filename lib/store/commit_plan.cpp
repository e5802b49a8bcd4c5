// The pure commit planner: see commit_plan.hpp.
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "store/prefix_state.hpp"
#include "support/safe_path.hpp"

namespace fs = std::filesystem;

namespace redist {
namespace {

// Two files are "the same" when they have the same kind and content.
bool same_content(const installed_file& a, const installed_file& b) {
    if (a.kind != b.kind) return false;
    if (a.kind == entry_kind::symlink) return a.link_target == b.link_target;
    // A file recorded by another digest (a receipt from before piece lists)
    // counts as changed: it is rewritten once, and recorded the new way.
    return a.sha256 == b.sha256 && a.piece_size == b.piece_size && a.size == b.size;
}

// Relative directory paths ordered by depth, so that parents are created
// before children (mkdir) or children removed before parents (prune).
std::vector<std::string> by_depth(const std::set<std::string>& dirs, bool deepest_first) {
    std::vector<std::string> out(dirs.begin(), dirs.end());
    const auto depth = [](const std::string& s) { return std::count(s.begin(), s.end(), '/'); };
    std::stable_sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
        return deepest_first ? depth(a) > depth(b) : depth(a) < depth(b);
    });
    return out;
}

// "a" or, when the products differ, "a (product p)": conflict messages stay
// short in the common case and unambiguous when two products share a key.
std::string owner_label(const receipt& r, const receipt& other) {
    return r.product == other.product ? r.component : r.component + " (product " + r.product + ")";
}

}  // namespace

// ---- planning ----------------------------------------------------------------------

namespace {

// A path's owner: the receipt and its entry for the path.
struct owner {
    const receipt* r;
    const installed_file* file;
};

// Who owns what before the commit.
struct existing_owners {
    std::unordered_map<std::string, owner> kept;  // files of receipts that stay
    std::unordered_set<std::string> owned;        // every path any existing receipt owns
};

// What the staged files claim: one owner per path (the first of identical
// copies) and the directories they need.
struct staged_claims {
    std::map<std::string, owner> owners;
    std::set<std::string> dirs;
};

// Names first: a key with a '/' must never reach a path. Returns the
// product/component keys being (re)installed.
result<std::set<std::string>> replaced_keys(const std::vector<planned_stage>& staged) {
    std::set<std::string> replaced;
    for (const auto& s : staged) {
        REDIST_TRY_VOID(validate_name(s.r->product, "product"));
        REDIST_TRY_VOID(validate_name(s.r->component, "component"));
        if (journal_path_problem(s.stage, journal_role::stage))
            return make_error(error_code::internal, "stage outside .redist/staging/").with_path(s.stage);
        if (!replaced.insert(key_of(*s.r)).second)
            return make_error(error_code::conflict,
                              "component " + s.r->component + " of product " + s.r->product + " is staged twice");
    }
    return replaced;
}

// The keys of the removed components: each installed, none staged.
result<std::set<std::string>> removed_keys(const std::vector<located_receipt>& existing,
                                           const std::set<std::string>& replaced,
                                           const std::vector<component_key>& removed) {
    std::unordered_set<std::string> installed;
    for (const auto& e : existing) installed.insert(key_of(e.r));
    std::set<std::string> going;
    for (const auto& [product, component] : removed) {
        const std::string key = key_of(product, component);
        if (replaced.count(key))
            return make_error(error_code::conflict,
                              "component " + printable(key, 128) + " is both installed and removed");
        if (!installed.count(key))
            return make_error(error_code::not_found, "component " + printable(component, 64) + " of product " +
                                                         printable(product, 64) + " is not installed");
        going.insert(key);
    }
    return going;
}

// A removed component's files stay owned (redist's own: a staged file may
// replace one without overwrite_unowned) but are not kept.
existing_owners owners_before(const std::vector<located_receipt>& existing, const std::set<std::string>& leaving) {
    existing_owners out;
    for (const auto& e : existing) {
        for (const auto& f : e.r.files) out.owned.insert(f.path);
        if (leaving.count(key_of(e.r))) continue;
        for (const auto& f : e.r.files) out.kept.emplace(f.path, owner{&e.r, &f});
    }
    return out;
}

// A staged path must be plain and relative, and stay out of .redist/.
result<void> check_staged_path(const std::string& path) {
    if (const char* why = relative_path_problem(path))
        return make_error(error_code::unsafe_archive, std::string("unsafe staged path: ") + why)
            .with_path(printable(path));
    if (first_segment(path) == state_dir_name)
        return make_error(error_code::unsafe_archive, "the archive writes into .redist/, which is reserved")
            .with_path(printable(path));
    return {};
}

// The staged files, checked against the kept owners and against each other
// (every clash goes to `conflicts`); each path's first copy is moved out of
// its stage (j.moves).
result<staged_claims> claim_staged_files(const std::vector<planned_stage>& staged,
                                         const std::unordered_map<std::string, owner>& kept_owners, journal& j,
                                         std::vector<commit_conflict>& conflicts) {
    staged_claims claims;
    for (const auto& s : staged) {
        for (const auto& f : s.r->files) {
            REDIST_TRY_VOID(check_staged_path(f.path));
            const auto clash = [&](const owner& other, const char* verb) {
                conflicts.push_back({f.path, "components " + owner_label(*other.r, *s.r) + " and " +
                                                 owner_label(*s.r, *other.r) + " " + verb +
                                                 " different files at the same path"});
            };
            const auto kept = kept_owners.find(f.path);
            if (kept != kept_owners.end() && !same_content(*kept->second.file, f)) {
                clash(kept->second, "install");
                continue;
            }
            const auto [it, inserted] = claims.owners.emplace(f.path, owner{s.r, &f});
            if (!inserted) {
                if (!same_content(*it->second.file, f)) clash(it->second, "ship");
                continue;  // identical: the first component's copy is moved, this one stays in its stage
            }
            for (const auto& parent : parents_of(f.path)) claims.dirs.insert(parent);
            j.moves.push_back({s.stage + "/" + f.path, f.path});
        }
    }
    return claims;
}

// Files and directories must agree: a path that one component needs as a
// directory cannot be another's file, and the prefix must not disagree
// either. Found here, such a clash is a refusal; found by rename(2) after
// the journal was written, it would wedge the prefix. Each clash goes to `conflicts`.
void check_dirs_are_dirs(const prefix_view& prefix, const staged_claims& claims,
                         const std::unordered_map<std::string, owner>& kept_owners,
                         std::vector<commit_conflict>& conflicts) {
    for (const auto& d : claims.dirs) {
        const auto as_new = claims.owners.find(d);
        const auto as_kept = kept_owners.find(d);
        if (as_new != claims.owners.end())
            conflicts.push_back({d, "component " + as_new->second.r->component +
                                        " ships a file where another component has a directory"});
        else if (as_kept != kept_owners.end())
            conflicts.push_back({d, "component " + as_kept->second.r->component +
                                        " installed a file where a new component has a directory"});
        else if (const auto type = prefix.type_of(d);
                 type != prefix_view::node::missing && type != prefix_view::node::directory)
            conflicts.push_back({d, "a directory in the archive is a file in the prefix"});
    }
}

// A staged file never replaces a directory of the prefix, and a file that no
// receipt owns (the user's own) is never overwritten silently, unless it is
// identical or the caller allows it (--overwrite). Each one goes to `conflicts`.
void check_files_in_prefix(const prefix_view& prefix, const staged_claims& claims,
                           const std::unordered_set<std::string>& owned, bool overwrite_unowned,
                           std::vector<commit_conflict>& conflicts) {
    for (const auto& [path, who] : claims.owners) {
        const auto type = prefix.type_of(path);
        if (type == prefix_view::node::directory) {
            conflicts.push_back(
                {path, "component " + who.r->component + " ships a file where the prefix has a directory"});
            continue;
        }
        if (type == prefix_view::node::missing || overwrite_unowned || owned.count(path)) continue;
        if (!prefix.holds(path, *who.file))
            conflicts.push_back({path, "component " + who.r->component +
                                           " would overwrite a file that redist did not install "
                                           "(move it away, or use --overwrite)"});
    }
}

// One conflict per path (the first found), in path order.
void sort_conflicts(std::vector<commit_conflict>& conflicts) {
    std::stable_sort(conflicts.begin(), conflicts.end(),
                     [](const commit_conflict& a, const commit_conflict& b) { return a.path < b.path; });
    conflicts.erase(std::unique(conflicts.begin(), conflicts.end(),
                                [](const commit_conflict& a, const commit_conflict& b) { return a.path == b.path; }),
                    conflicts.end());
}

// What every commit checks before its journal: the names, the removals, and
// the files, with every conflict found (not only the first).
struct checked_commit {
    std::set<std::string> going;    // removed
    std::set<std::string> leaving;  // removed or replaced
    existing_owners before;
    staged_claims claims;
    std::vector<commit_conflict> conflicts;  // sorted by path, one per path
};

result<checked_commit> check_commit(const prefix_view& prefix, const std::vector<located_receipt>& existing,
                                    const std::vector<planned_stage>& staged, const std::vector<component_key>& removed,
                                    bool overwrite_unowned, journal& j) {
    checked_commit c;
    REDIST_TRY(const std::set<std::string> replaced, replaced_keys(staged));
    REDIST_TRY(c.going, removed_keys(existing, replaced, removed));
    c.leaving = c.going;
    c.leaving.insert(replaced.begin(), replaced.end());
    c.before = owners_before(existing, c.leaving);
    REDIST_TRY(c.claims, claim_staged_files(staged, c.before.kept, j, c.conflicts));
    check_dirs_are_dirs(prefix, c.claims, c.before.kept, c.conflicts);
    check_files_in_prefix(prefix, c.claims, c.before.owned, overwrite_unowned, c.conflicts);
    sort_conflicts(c.conflicts);
    return c;
}

// Only directories that do not exist yet are created, with the stage's
// modes: an existing directory keeps its mode and owner (setgid, sticky).
void plan_mkdirs(const prefix_view& prefix, const std::vector<planned_stage>& staged, const std::set<std::string>& dirs,
                 journal& j) {
    for (const auto& d : by_depth(dirs, /*deepest_first=*/false)) {
        if (prefix.type_of(d) != prefix_view::node::missing) continue;
        unsigned mode = 0755;
        for (const auto& s : staged) {
            if (auto m = prefix.stage_dir_mode(s.stage, d)) {
                mode = *m & 0777;
                break;
            }
        }
        j.mkdirs.push_back({d, mode | 0700});
    }
}

// Files of the replaced and removed receipts that nothing staged or kept
// owns anymore (each once), the removed receipts, then the directories that
// may become empty, deepest first, a removed product's receipt directory too.
void plan_deletes(const std::vector<located_receipt>& existing, const std::set<std::string>& leaving,
                  const std::set<std::string>& removed, const staged_claims& claims,
                  const std::unordered_map<std::string, owner>& kept_owners, journal& j) {
    std::set<std::string> prune;
    std::unordered_set<std::string> deleted;
    for (const auto& e : existing) {
        if (!leaving.count(key_of(e.r))) continue;
        for (const auto& f : e.r.files) {
            if (claims.owners.count(f.path) || kept_owners.count(f.path) || !deleted.insert(f.path).second) continue;
            j.deletes.push_back(f.path);
            for (const auto& parent : parents_of(f.path)) prune.insert(parent);
        }
    }
    for (const auto& e : existing) {
        if (!removed.count(key_of(e.r))) continue;
        j.deletes.push_back(e.rel_path);
        if (segment_count(e.rel_path) == 4) prune.insert(parents_of(e.rel_path).front());
    }
    j.prune = by_depth(prune, /*deepest_first=*/true);
}

// Receipts last: each moves from beside its stage; an old receipt of the
// same key at another place (the legacy layout) goes away.
result<void> plan_receipts(const prefix_view& prefix, const std::vector<located_receipt>& existing,
                           const std::vector<planned_stage>& staged, journal& j) {
    std::set<std::string> product_dirs;
    for (const auto& s : staged) {
        const std::string dir = std::string(receipts_rel) + "/" + s.r->product;
        if (!product_dirs.insert(dir).second) continue;
        const auto type = prefix.type_of(dir);
        if (type == prefix_view::node::missing) j.mkdirs.push_back({dir, 0755});
        else if (type != prefix_view::node::directory)
            return make_error(error_code::bad_manifest, "corrupt prefix state: not a directory").with_path(dir);
    }
    for (const auto& s : staged) {
        const std::string target = receipt_rel_path(s.r->product, s.r->component);
        // rename(2) replaces a file or a symlink; anything else there would
        // fail after the journal is written.
        const auto type = prefix.type_of(target);
        if (type == prefix_view::node::directory || type == prefix_view::node::other)
            return make_error(error_code::bad_manifest, "corrupt prefix state: a receipt that is not a file")
                .with_path(target);
        for (const auto& e : existing)
            if (key_of(e.r) == key_of(*s.r) && e.rel_path != target) j.deletes.push_back(e.rel_path);
        j.moves.push_back({s.stage + ".receipt.json", target});
        j.stages.push_back(s.stage);
    }
    return {};
}

// Every move is a rename(2), which cannot cross file systems: a target
// whose nearest existing directory is on another one than the staging area
// (a mount point inside the prefix) is refused here, before the journal is
// written, rather than by EXDEV half-way through it. One lstat per directory.
result<void> check_one_filesystem(const prefix_view& prefix, const journal& j) {
    const auto staging = prefix.device_of(std::string(staging_rel));
    if (!staging) return {};  // no staging area: nothing is staged, nothing moves
    std::unordered_map<std::string, std::optional<std::uint64_t>> devices;
    const auto device = [&](const std::string& dir) -> const std::optional<std::uint64_t>& {
        auto [it, inserted] = devices.try_emplace(dir);
        if (inserted) it->second = prefix.device_of(dir);
        return it->second;
    };
    for (const auto& m : j.moves) {
        std::vector<std::string> dirs = parents_of(m.to);
        dirs.emplace_back();  // the prefix itself
        for (const auto& dir : dirs) {
            const auto& dev = device(dir);
            if (!dev) continue;  // created by the journal, on its parent's file system
            if (*dev != *staging)
                return make_error(error_code::filesystem,
                                  "cannot commit into a different file system than the prefix's .redist/staging "
                                  "(a mount point inside the prefix?): files cannot be renamed there")
                    .with_path(dir.empty() ? std::string(".") : dir);
            break;
        }
    }
    return {};
}

}  // namespace

error conflict_error(const std::vector<commit_conflict>& conflicts) {
    if (conflicts.size() == 1)
        return make_error(error_code::conflict, conflicts[0].message).with_path(conflicts[0].path);
    // Grouped by reason, in the order each reason first comes; at most
    // k_conflicts_named paths, then how many more.
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;
    for (std::size_t i = 0; i < conflicts.size() && i < k_conflicts_named; ++i) {
        const auto& c = conflicts[i];
        auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == c.message; });
        if (g == groups.end()) g = groups.insert(groups.end(), {c.message, {}});
        g->second.push_back(printable(c.path));
    }
    std::string message = std::to_string(conflicts.size()) + " paths conflict";
    for (const auto& [why, paths] : groups) {
        message += "; " + why + ":";
        for (std::size_t i = 0; i < paths.size(); ++i) message += (i ? ", " : " ") + paths[i];
    }
    if (conflicts.size() > k_conflicts_named)
        message += "; and " + std::to_string(conflicts.size() - k_conflicts_named) + " more";
    return make_error(error_code::conflict, std::move(message));
}

result<std::vector<commit_conflict>> commit_conflicts(const prefix_view& prefix,
                                                      const std::vector<located_receipt>& existing,
                                                      const std::vector<planned_stage>& staged,
                                                      const std::vector<component_key>& removed,
                                                      bool overwrite_unowned) {
    journal unused;
    REDIST_TRY(checked_commit c, check_commit(prefix, existing, staged, removed, overwrite_unowned, unused));
    return std::move(c.conflicts);
}

// Every check runs before the journal is complete; the steps append to it in
// the order they run: file moves, mkdirs, deletes and prunes, receipts.
result<journal> plan_commit(const prefix_view& prefix, const std::vector<located_receipt>& existing,
                            const std::vector<planned_stage>& staged, const std::vector<component_key>& removed,
                            bool overwrite_unowned) {
    journal j;
    REDIST_TRY(const checked_commit c, check_commit(prefix, existing, staged, removed, overwrite_unowned, j));
    if (!c.conflicts.empty()) return conflict_error(c.conflicts);
    const std::set<std::string>& going = c.going;
    const std::set<std::string>& leaving = c.leaving;
    const existing_owners& before = c.before;
    const staged_claims& claims = c.claims;
    plan_mkdirs(prefix, staged, claims.dirs, j);
    plan_deletes(existing, leaving, going, claims, before.kept, j);
    REDIST_TRY_VOID(plan_receipts(prefix, existing, staged, j));
    REDIST_TRY_VOID(check_one_filesystem(prefix, j));
    REDIST_TRY_VOID(check_journal(j));  // the same rules a reader applies
    return j;
}

}  // namespace redist
