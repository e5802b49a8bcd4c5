// The prefix: receipts, lock, stages, journaled commit, verify, remove.
// See include/redist/install.hpp for the layout and the commit protocol, and
// lib/store/commit_plan.hpp for the journal and the planner.
#include "redist/install.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <set>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include "redist/json_writer.hpp"
#include "redist/suggest.hpp"
#include "redist/verify.hpp"
#include "store/commit_plan.hpp"
#include "support/budget.hpp"
#include "support/debug_pause.hpp"
#include "support/file_lock.hpp"
#include "support/json_reader.hpp"
#include "support/parallel.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"
#include "support/timestamp.hpp"

namespace fs = std::filesystem;

namespace redist {
namespace {

// Bounds for files redist reads back from the prefix: far above any real
// receipt (a CUDA component lists a few thousand files, ~200 bytes each) or
// journal, far below what would hurt.
constexpr std::uint64_t max_receipt_bytes = 64ull << 20;
constexpr std::uint64_t max_journal_bytes = 512ull << 20;

fs::path state_dir(const fs::path& prefix) { return prefix / state_dir_name; }
fs::path receipts_dir(const fs::path& prefix) { return prefix / receipts_rel; }
fs::path staging_dir(const fs::path& prefix) { return prefix / staging_rel; }
fs::path journal_path(const fs::path& prefix) { return state_dir(prefix) / "transaction.json"; }

error fs_error(const std::string& what, const fs::path& path, const std::error_code& ec) {
    return make_error(error_code::filesystem, what + ": " + ec.message()).with_path(path.string());
}

const char* kind_name(entry_kind kind) {
    switch (kind) {
        case entry_kind::regular: return "file";
        case entry_kind::directory: return "directory";
        case entry_kind::symlink: return "symlink";
        case entry_kind::hardlink: return "hardlink";
    }
    return "file";
}

// Two files are "the same" when they have the same kind and content.
bool same_content(const installed_file& a, const installed_file& b) {
    if (a.kind != b.kind) return false;
    if (a.kind == entry_kind::symlink) return a.link_target == b.link_target;
    // A file recorded by another digest (a receipt from before piece lists)
    // counts as changed: it is rewritten once, and recorded the new way.
    return a.sha256 == b.sha256 && a.piece_size == b.piece_size && a.size == b.size;
}

bool is_directory_no_follow(const fs::path& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists_no_follow(const fs::path& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0;
}

std::string_view first_segment(std::string_view p) { return p.substr(0, p.find('/')); }

bool starts_with_dir(std::string_view p, std::string_view dir) {
    return p.size() > dir.size() && p.compare(0, dir.size(), dir) == 0 && p[dir.size()] == '/';
}

std::size_t segment_count(std::string_view p) {
    return 1 + static_cast<std::size_t>(std::count(p.begin(), p.end(), '/'));
}

// A receipt path: .redist/receipts/<product>/<component>.json or the legacy
// .redist/receipts/<component>.json, with valid names.
bool is_receipt_path(std::string_view p) {
    if (!starts_with_dir(p, receipts_rel)) return false;
    std::string_view rest = p.substr(receipts_rel.size() + 1);
    if (rest.size() <= 5 || rest.substr(rest.size() - 5) != ".json") return false;
    rest.remove_suffix(5);
    const auto slash = rest.find('/');
    if (slash == std::string_view::npos) return name_problem(rest) == nullptr;
    return name_problem(rest.substr(0, slash)) == nullptr && name_problem(rest.substr(slash + 1)) == nullptr;
}

// Parent directories of a prefix-relative path, deepest first ("a/b/c" -> "a/b", "a").
std::vector<std::string> parents_of(const std::string& relative) {
    std::vector<std::string> out;
    auto pos = relative.rfind('/');
    while (pos != std::string::npos && pos > 0) {
        out.push_back(relative.substr(0, pos));
        pos = relative.rfind('/', pos - 1);
    }
    return out;
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

std::string key_of(std::string_view product, std::string_view component) {
    std::string key(product);
    key += '/';
    key += component;
    return key;
}
std::string key_of(const receipt& r) { return key_of(r.product, r.component); }

// "a" or, when the products differ, "a (product p)": conflict messages stay
// short in the common case and unambiguous when two products share a key.
std::string owner_label(const receipt& r, const receipt& other) {
    return r.product == other.product ? r.component : r.component + " (product " + r.product + ")";
}

}  // namespace

// ---- the commit journal ------------------------------------------------------------
//
// {"journal_version": 2, "mkdirs": [{"path", "mode"}...], "moves": [{"from", "to"}...],
//  "deletes": [path...], "prune": [dir...], "stages": [dir...]}   (prefix-relative)

std::string receipt_rel_path(std::string_view product, std::string_view component) {
    return std::string(receipts_rel) + "/" + std::string(product) + "/" + std::string(component) + ".json";
}

std::string legacy_receipt_rel_path(std::string_view component) {
    return std::string(receipts_rel) + "/" + std::string(component) + ".json";
}

std::string journal_to_json(const journal& j) {
    json_writer w(0);
    w.begin_object();
    w.field("journal_version", 2);
    w.key("mkdirs").begin_array();
    for (const auto& m : j.mkdirs) w.begin_object().field("path", m.path).field("mode", m.mode).end_object();
    w.end_array();
    w.key("moves").begin_array();
    for (const auto& m : j.moves) w.begin_object().field("from", m.from).field("to", m.to).end_object();
    w.end_array();
    const auto list = [&w](const char* key, const std::vector<std::string>& items) {
        w.key(key).begin_array();
        for (const auto& p : items) w.value(p);
        w.end_array();
    };
    list("deletes", j.deletes);
    list("prune", j.prune);
    list("stages", j.stages);
    w.end_object();
    return w.str();
}

namespace {

// Why a journal path is not allowed in its role, or nullptr.
enum class journal_role { prefix_dir, move_from, move_to, remove, prune, stage };

const char* journal_path_problem(std::string_view p, journal_role role) {
    if (const char* why = relative_path_problem(p)) return why;
    const bool in_state = first_segment(p) == state_dir_name;
    switch (role) {
        case journal_role::prefix_dir:  // mkdir, prune: the prefix, or a product's receipt directory
        case journal_role::prune:
            return !in_state || (starts_with_dir(p, receipts_rel) && segment_count(p) == 3 &&
                                 name_problem(p.substr(receipts_rel.size() + 1)) == nullptr)
                       ? nullptr
                       : "a directory inside .redist/";
        case journal_role::move_from:
            return starts_with_dir(p, staging_rel) && segment_count(p) >= 3 ? nullptr
                                                                            : "a move source outside .redist/staging/";
        case journal_role::move_to:
        case journal_role::remove:
            return !in_state || is_receipt_path(p) ? nullptr : "a path inside .redist/ that is not a receipt";
        case journal_role::stage:
            return starts_with_dir(p, staging_rel) && segment_count(p) == 3 ? nullptr
                                                                            : "a stage outside .redist/staging/";
    }
    return "unknown role";
}

error corrupt_journal(std::string json_path, std::string_view p, const char* why) {
    return make_error(error_code::bad_manifest, "corrupt commit journal: '" + printable(p) + "' is " + why)
        .with_json_path(std::move(json_path));
}

}  // namespace

result<void> check_journal(const journal& j) {
    const auto check = [](const std::string& where, std::string_view p, journal_role role) -> result<void> {
        if (const char* why = journal_path_problem(p, role)) return corrupt_journal(where, p, why);
        return {};
    };
    for (std::size_t i = 0; i < j.mkdirs.size(); ++i) {
        REDIST_TRY_VOID(check("mkdirs[" + std::to_string(i) + "].path", j.mkdirs[i].path, journal_role::prefix_dir));
        if (j.mkdirs[i].mode > 07777)
            return make_error(error_code::bad_manifest, "corrupt commit journal: bad mode")
                .with_json_path("mkdirs[" + std::to_string(i) + "].mode");
    }
    for (std::size_t i = 0; i < j.moves.size(); ++i) {
        REDIST_TRY_VOID(check("moves[" + std::to_string(i) + "].from", j.moves[i].from, journal_role::move_from));
        REDIST_TRY_VOID(check("moves[" + std::to_string(i) + "].to", j.moves[i].to, journal_role::move_to));
    }
    for (std::size_t i = 0; i < j.deletes.size(); ++i)
        REDIST_TRY_VOID(check("deletes[" + std::to_string(i) + "]", j.deletes[i], journal_role::remove));
    for (std::size_t i = 0; i < j.prune.size(); ++i)
        REDIST_TRY_VOID(check("prune[" + std::to_string(i) + "]", j.prune[i], journal_role::prune));
    for (std::size_t i = 0; i < j.stages.size(); ++i)
        REDIST_TRY_VOID(check("stages[" + std::to_string(i) + "]", j.stages[i], journal_role::stage));
    return {};
}

result<journal> journal_from_json(std::string_view text, std::string_view source) {
    journal j;
    std::uint64_t version = 0;
    const auto strings = [](std::vector<std::string>& out) {
        return [&out](json::value& v) -> result<void> {
            return v.for_each([&out](json::value& item) -> result<void> {
                std::string s;
                REDIST_TRY_VOID(item.get(s));
                out.push_back(std::move(s));
                return result<void>();
            });
        };
    };
    auto read = json::read_document(
        text, source, "commit journal",
        {{"journal_version", [&](json::value& v) -> result<void> { return v.get(version); }, true},
         {"mkdirs",
          [&](json::value& v) -> result<void> {
              return v.for_each([&](json::value& item) -> result<void> {
                  journal::mkdir_step step;
                  std::uint64_t mode = 0;
                  REDIST_TRY_VOID(item.read_object(
                      {{"path", [&](json::value& f) -> result<void> { return f.get(step.path); }, true},
                       {"mode", [&](json::value& f) -> result<void> { return f.get(mode); }, true}}));
                  if (mode > 07777) return item.bad("corrupt commit journal: bad mode");
                  step.mode = static_cast<unsigned>(mode);
                  j.mkdirs.push_back(std::move(step));
                  return result<void>();
              });
          }},
         {"moves",
          [&](json::value& v) -> result<void> {
              return v.for_each([&](json::value& item) -> result<void> {
                  journal::move_step step;
                  REDIST_TRY_VOID(item.read_object(
                      {{"from", [&](json::value& f) -> result<void> { return f.get(step.from); }, true},
                       {"to", [&](json::value& f) -> result<void> { return f.get(step.to); }, true}}));
                  j.moves.push_back(std::move(step));
                  return result<void>();
              });
          }},
         {"deletes", strings(j.deletes)},
         {"prune", strings(j.prune)},
         {"stages", strings(j.stages)}});
    if (!read.ok()) {
        error e = std::move(read).error_value();
        if (e.message.rfind("corrupt commit journal", 0) != 0) e.message = "corrupt commit journal: " + e.message;
        return e;
    }
    if (version != 2)
        return make_error(error_code::bad_manifest,
                          "corrupt commit journal: unsupported journal_version " + std::to_string(version))
            .with_source(std::string(source))
            .with_json_path("journal_version");
    auto checked = check_journal(j);
    if (!checked.ok()) return std::move(checked).error_value().with_source(std::string(source));
    return j;
}

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

existing_owners owners_before(const std::vector<located_receipt>& existing, const std::set<std::string>& replaced) {
    existing_owners out;
    for (const auto& e : existing) {
        for (const auto& f : e.r.files) out.owned.insert(f.path);
        if (replaced.count(key_of(e.r))) continue;
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

// The staged files, checked against the kept owners and against each other;
// each path's first copy is moved out of its stage (j.moves).
result<staged_claims> claim_staged_files(const std::vector<planned_stage>& staged,
                                         const std::unordered_map<std::string, owner>& kept_owners, journal& j) {
    staged_claims claims;
    for (const auto& s : staged) {
        for (const auto& f : s.r->files) {
            REDIST_TRY_VOID(check_staged_path(f.path));
            const auto kept = kept_owners.find(f.path);
            if (kept != kept_owners.end() && !same_content(*kept->second.file, f)) {
                return make_error(error_code::conflict, "components " + owner_label(*kept->second.r, *s.r) + " and " +
                                                            owner_label(*s.r, *kept->second.r) +
                                                            " install different files at the same path")
                    .with_path(f.path);
            }
            const auto [it, inserted] = claims.owners.emplace(f.path, owner{s.r, &f});
            if (!inserted) {
                if (!same_content(*it->second.file, f)) {
                    return make_error(error_code::conflict, "components " + owner_label(*it->second.r, *s.r) + " and " +
                                                                owner_label(*s.r, *it->second.r) +
                                                                " ship different files at the same path")
                        .with_path(f.path);
                }
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
// the journal was written, it would wedge the prefix.
result<void> check_dirs_are_dirs(const prefix_view& prefix, const staged_claims& claims,
                                 const std::unordered_map<std::string, owner>& kept_owners) {
    for (const auto& d : claims.dirs) {
        const auto as_new = claims.owners.find(d);
        if (as_new != claims.owners.end())
            return make_error(error_code::conflict, "component " + as_new->second.r->component +
                                                        " ships a file where another component has a directory")
                .with_path(d);
        const auto as_kept = kept_owners.find(d);
        if (as_kept != kept_owners.end())
            return make_error(error_code::conflict, "component " + as_kept->second.r->component +
                                                        " installed a file where a new component has a directory")
                .with_path(d);
        const auto type = prefix.type_of(d);
        if (type != prefix_view::node::missing && type != prefix_view::node::directory)
            return make_error(error_code::conflict, "a directory in the archive is a file in the prefix").with_path(d);
    }
    return {};
}

// A staged file never replaces a directory of the prefix, and a file that no
// receipt owns (the user's own) is never overwritten silently, unless it is
// identical or the caller allows it (--force).
result<void> check_files_in_prefix(const prefix_view& prefix, const staged_claims& claims,
                                   const std::unordered_set<std::string>& owned, bool overwrite_unowned) {
    for (const auto& [path, who] : claims.owners) {
        const auto type = prefix.type_of(path);
        if (type == prefix_view::node::directory)
            return make_error(error_code::conflict,
                              "component " + who.r->component + " ships a file where the prefix has a directory")
                .with_path(path);
        if (type == prefix_view::node::missing || overwrite_unowned || owned.count(path)) continue;
        if (!prefix.holds(path, *who.file))
            return make_error(error_code::conflict, "component " + who.r->component +
                                                        " would overwrite a file that redist did not install "
                                                        "(move it away, or use --force)")
                .with_path(path);
    }
    return {};
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

// Stale files: a replaced receipt's files that nothing ships or owns anymore,
// then their directories that may become empty.
void plan_stale_deletes(const std::vector<located_receipt>& existing, const std::set<std::string>& replaced,
                        const staged_claims& claims, const std::unordered_map<std::string, owner>& kept_owners,
                        journal& j) {
    std::set<std::string> prune;
    for (const auto& e : existing) {
        if (!replaced.count(key_of(e.r))) continue;
        for (const auto& f : e.r.files) {
            if (claims.owners.count(f.path) || kept_owners.count(f.path)) continue;
            j.deletes.push_back(f.path);
            for (const auto& parent : parents_of(f.path)) prune.insert(parent);
        }
    }
    for (const auto& d : by_depth(prune, /*deepest_first=*/true)) j.prune.push_back(d);
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

// Every check runs before the journal is complete; the steps append to it in
// the order they run: file moves, mkdirs, stale deletes and prunes, receipts.
result<journal> plan_commit(const prefix_view& prefix, const std::vector<located_receipt>& existing,
                            const std::vector<planned_stage>& staged, bool overwrite_unowned) {
    REDIST_TRY(const std::set<std::string> replaced, replaced_keys(staged));
    const existing_owners before = owners_before(existing, replaced);
    journal j;
    REDIST_TRY(const staged_claims claims, claim_staged_files(staged, before.kept, j));
    REDIST_TRY_VOID(check_dirs_are_dirs(prefix, claims, before.kept));
    REDIST_TRY_VOID(check_files_in_prefix(prefix, claims, before.owned, overwrite_unowned));
    plan_mkdirs(prefix, staged, claims.dirs, j);
    plan_stale_deletes(existing, replaced, claims, before.kept, j);
    REDIST_TRY_VOID(plan_receipts(prefix, existing, staged, j));
    REDIST_TRY_VOID(check_one_filesystem(prefix, j));
    REDIST_TRY_VOID(check_journal(j));  // the same rules a reader applies
    return j;
}

journal plan_remove(const std::vector<located_receipt>& existing,
                    const std::vector<std::pair<std::string, std::string>>& which) {
    std::unordered_set<std::string> targets;
    for (const auto& [product, component] : which) targets.insert(key_of(product, component));
    // One pass to find what stays owned, one over the targets: linear in the
    // receipts, however many components go.
    std::unordered_set<std::string> kept;
    for (const auto& e : existing)
        if (!targets.count(key_of(e.r)))
            for (const auto& f : e.r.files) kept.insert(f.path);
    journal j;
    std::set<std::string> prune;
    std::unordered_set<std::string> deleted;
    for (const auto& e : existing) {
        if (!targets.count(key_of(e.r))) continue;
        for (const auto& f : e.r.files) {
            if (kept.count(f.path) || !deleted.insert(f.path).second) continue;
            j.deletes.push_back(f.path);
            for (const auto& parent : parents_of(f.path)) prune.insert(parent);
        }
    }
    for (const auto& d : by_depth(prune, /*deepest_first=*/true)) j.prune.push_back(d);
    std::set<std::string> product_dirs;
    for (const auto& e : existing) {
        if (!targets.count(key_of(e.r))) continue;
        j.deletes.push_back(e.rel_path);
        if (segment_count(e.rel_path) == 4) product_dirs.insert(parents_of(e.rel_path).front());
    }
    for (const auto& d : product_dirs) j.prune.push_back(d);
    return j;
}

// ---- installing and removing in one journal ---------------------------------------

namespace {

// The prefix as a commit sees it once the removed components are gone: their
// files are redist's own, so a staged file may take the place of one without
// --force. Types are reported as they are: a directory a staged file needs
// where a removed component has a file is still a refusal (mkdir would fail).
class removing_view final : public prefix_view {
public:
    removing_view(const prefix_view& disk, const std::unordered_set<std::string>& going) : disk_(disk), going_(going) {}
    node type_of(const std::string& relative) const override { return disk_.type_of(relative); }
    bool holds(const std::string& relative, const installed_file& file) const override {
        return going_.count(relative) > 0 || disk_.holds(relative, file);
    }
    std::optional<unsigned> stage_dir_mode(const std::string& stage, const std::string& relative) const override {
        return disk_.stage_dir_mode(stage, relative);
    }
    std::optional<std::uint64_t> device_of(const std::string& relative) const override {
        return disk_.device_of(relative);
    }

private:
    const prefix_view& disk_;
    const std::unordered_set<std::string>& going_;
};

// The receipts split for the two planners: `staying` (for plan_commit: every
// receipt but the removed ones) and `for_removal` (for plan_remove: the removed
// ones plus those that stay unchanged; a replaced receipt's old files are
// plan_commit's business), with every file path the removed ones list.
struct removal_split {
    std::vector<located_receipt> staying;
    std::vector<located_receipt> for_removal;
    std::unordered_set<std::string> going_files;
};

result<removal_split> split_for_removal(const std::vector<located_receipt>& existing,
                                        const std::vector<planned_stage>& staged,
                                        const std::vector<std::pair<std::string, std::string>>& removed) {
    std::unordered_set<std::string> targets;
    for (const auto& [product, component] : removed) targets.insert(key_of(product, component));
    std::unordered_set<std::string> replaced;
    for (const auto& s : staged) replaced.insert(key_of(*s.r));
    for (const auto& key : targets)
        if (replaced.count(key))
            return make_error(error_code::conflict,
                              "component " + printable(key, 128) + " is both installed and removed");
    removal_split out;
    std::unordered_set<std::string> found;
    for (const auto& e : existing) {
        const std::string key = key_of(e.r);
        if (targets.count(key)) {
            found.insert(key);
            for (const auto& f : e.r.files) out.going_files.insert(f.path);
            out.for_removal.push_back(e);
            continue;
        }
        out.staying.push_back(e);
        if (!replaced.count(key)) out.for_removal.push_back(e);
    }
    for (const auto& [product, component] : removed)
        if (!found.count(key_of(product, component)))
            return make_error(error_code::not_found, "component " + printable(component, 64) + " of product " +
                                                         printable(product, 64) + " is not installed");
    return out;
}

}  // namespace

result<journal> plan_commit_removing(const prefix_view& prefix, const std::vector<located_receipt>& existing,
                                     const std::vector<planned_stage>& staged,
                                     const std::vector<std::pair<std::string, std::string>>& removed,
                                     bool overwrite_unowned) {
    if (removed.empty()) return plan_commit(prefix, existing, staged, overwrite_unowned);
    REDIST_TRY(const removal_split split, split_for_removal(existing, staged, removed));
    REDIST_TRY(journal j,
               plan_commit(removing_view(prefix, split.going_files), split.staying, staged, overwrite_unowned));
    const journal gone = plan_remove(split.for_removal, removed);
    // A path a staged component ships is moved in before the deletes run:
    // deleting it would delete the new file.
    std::unordered_set<std::string> skip;
    for (const auto& s : staged)
        for (const auto& f : s.r->files) skip.insert(f.path);
    skip.insert(j.deletes.begin(), j.deletes.end());
    for (const auto& d : gone.deletes)
        if (skip.insert(d).second) j.deletes.push_back(d);
    // One deepest-first order over both sets, so that a parent that only
    // becomes empty through the other plan's deletes is pruned too.
    std::set<std::string> prune(j.prune.begin(), j.prune.end());
    prune.insert(gone.prune.begin(), gone.prune.end());
    j.prune = by_depth(prune, /*deepest_first=*/true);
    REDIST_TRY_VOID(check_journal(j));
    return j;
}

// ---- applying a journal ------------------------------------------------------------

namespace {

// Tracks which prefix directories were checked to be real directories (not
// symlinks), so that a step never acts through a symlink it did not create.
class parent_guard {
public:
    explicit parent_guard(const fs::path& prefix) : prefix_(prefix) {}
    // True when every parent directory of `relative` below the prefix is a
    // real directory (or missing).
    bool parents_ok(const std::string& relative) {
        for (const auto& parent : parents_of(relative)) {
            auto [it, inserted] = checked_.emplace(parent, true);
            if (inserted) {
                struct stat st {};
                it->second = ::lstat((prefix_ / parent).c_str(), &st) != 0 || S_ISDIR(st.st_mode);
            }
            if (!it->second) return false;
        }
        return true;
    }

private:
    fs::path prefix_;
    std::unordered_map<std::string, bool> checked_;
};

// Removes the stages of `j` and the receipts written beside them.
void remove_stages(const fs::path& prefix, const journal& j) {
    for (const auto& rel : j.stages) {
        auto stage = confined_join(prefix, rel);
        if (!stage.ok()) continue;  // check_journal() refused such a journal already
        std::error_code ec;
        fs::remove_all(*stage, ec);  // does not follow symlinks inside
        fs::remove(stage->string() + ".receipt.json", ec);
    }
}

// Applies a (validated) journal. Every step is idempotent, so an interrupted
// apply can be re-run from the start (roll forward). Directories are created
// before the first move, so that once a file was moved, rolling forward needs
// only renames and unlinks, which need no free space. `changed` is set once a
// rename or an unlink was done: until then roll_back_unchanged() restores the
// old state.
result<void> apply_journal(const fs::path& prefix, const journal& j, bool& changed) {
    const auto at = [&prefix](const std::string& rel) { return confined_join(prefix, rel); };
    for (const auto& m : j.mkdirs) {
        REDIST_TRY(const fs::path dir, at(m.path));
        // Created here: then (and only then) it gets the stage's mode. A
        // directory that exists already (the user's, or ours from an earlier
        // run) keeps its mode, setgid and sticky bits included.
        // mkdir(2) with the mode already (less the umask), so that a crash
        // before the chmod leaves a sane mode.
        if (debug_fail("commit-mkdir")) return errno_error("cannot create directory", dir, ENOSPC);
        if (::mkdir(dir.c_str(), m.mode & 0777) == 0) {
            ::chmod(dir.c_str(), m.mode & 0777);
        } else if (errno != EEXIST) {
            return errno_error("cannot create directory", dir, errno);
        }
        if (!is_directory_no_follow(dir)) return errno_error("not a directory", dir, ENOTDIR);
    }
    parent_guard guard(prefix);
    std::size_t moved = 0;
    for (const auto& m : j.moves) {
        const bool half_way = moved++ == j.moves.size() / 2;
        if (half_way) debug_pause("mid-commit");
        REDIST_TRY(const fs::path from, at(m.from));
        REDIST_TRY(const fs::path to, at(m.to));
        if (!exists_no_follow(from)) continue;  // already moved by an earlier, interrupted apply
        if (!guard.parents_ok(m.to))
            return make_error(error_code::filesystem, "refusing to write through a symlinked directory")
                .with_path(to.string());
        if (half_way && debug_fail("mid-commit")) return errno_error("cannot move into place", to, ENOSPC);
        if (::rename(from.c_str(), to.c_str()) != 0) return errno_error("cannot move into place", to, errno);
        changed = true;
    }
    for (const auto& rel : j.deletes) {
        REDIST_TRY(const fs::path path, at(rel));
        if (!guard.parents_ok(rel)) continue;  // never unlink through a symlink: that file is not ours
        if (::unlink(path.c_str()) == 0) changed = true;
        else if (errno != ENOENT) return errno_error("cannot remove", path, errno);
    }
    for (const auto& rel : j.prune) {
        REDIST_TRY(const fs::path dir, at(rel));
        if (guard.parents_ok(rel)) ::rmdir(dir.c_str());  // fails harmlessly when not empty
    }
    remove_stages(prefix, j);
    return {};
}

// True when no move of `j` was done yet: every source is still in its stage.
// (A journal without moves, a removal, cannot tell; it is only rolled forward.)
bool nothing_moved(const fs::path& prefix, const journal& j) {
    if (j.moves.empty()) return false;
    return std::all_of(j.moves.begin(), j.moves.end(), [&prefix](const journal::move_step& m) {
        auto from = confined_join(prefix, m.from);
        return from.ok() && exists_no_follow(*from);
    });
}

// Undoes a journal of which nothing was moved or deleted: the directories it
// created go (deepest first; rmdir(2) keeps any that is not empty), then its
// stages and the journal itself. Frees space, needs none.
void roll_back_unchanged(const fs::path& prefix, const journal& j) {
    parent_guard guard(prefix);
    for (auto m = j.mkdirs.rbegin(); m != j.mkdirs.rend(); ++m) {
        auto dir = confined_join(prefix, m->path);
        if (dir.ok() && guard.parents_ok(m->path)) ::rmdir(dir->c_str());
    }
    remove_stages(prefix, j);
    const fs::path path = journal_path(prefix);
    ::unlink(path.c_str());
    fsync_directory(state_dir(prefix));
}

// Writes the journal, applies it, removes it. A failure before anything was
// moved restores the old state at once (no journal, no stages, no new
// directories); after that the journal stays, and the next writer rolls it
// forward.
result<void> run_transaction(const fs::path& prefix, const journal& j) {
    const fs::path path = journal_path(prefix);
    auto written = debug_fail("journal-write") ? result<void>(errno_error("cannot write", path, ENOSPC))
                                               : atomic_write(path, journal_to_json(j), durability::full);
    if (!written.ok()) {
        roll_back_unchanged(prefix, j);
        return std::move(written).error_value();
    }
    bool changed = false;
    auto applied = apply_journal(prefix, j, changed);
    if (!applied.ok()) {
        error e = std::move(applied).error_value();
        if (!changed) roll_back_unchanged(prefix, j);
        else e.message += " (the commit is journaled: the next redist fetch or remove on this prefix completes it)";
        return e;
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errno_error("cannot remove", path, errno);
    fsync_directory(state_dir(prefix));
    return {};
}

// Completes an interrupted commit. When it cannot be completed (the disk is
// full, say) and none of its files was moved yet, it is rolled back instead,
// so that the prefix is never left waiting for a hand to free space.
result<void> recover_prefix(const fs::path& prefix) {
    const fs::path path = journal_path(prefix);
    if (exists_no_follow(path)) {
        struct stat st {};
        if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
            return make_error(error_code::bad_manifest, "corrupt commit journal: not a regular file")
                .with_source(path.string());
        REDIST_TRY(const std::string text, read_file(path, max_journal_bytes));
        REDIST_TRY(const journal j, journal_from_json(text, path.string()));
        const bool unmoved = nothing_moved(prefix, j);
        bool changed = false;
        auto applied = apply_journal(prefix, j, changed);
        if (!applied.ok()) {
            if (!unmoved || changed) return applied;
            roll_back_unchanged(prefix, j);
        }
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errno_error("cannot remove", path, errno);
    }
    // Under the lock, every stage is a leftover of a dead process.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(staging_dir(prefix), ec)) {
        std::error_code ignored;
        fs::remove_all(entry.path(), ignored);
    }
    // Temp files of atomic writes that never got renamed.
    for (const auto& entry : fs::recursive_directory_iterator(receipts_dir(prefix), ec)) {
        if (is_atomic_write_temp(entry.path().filename().string())) {
            std::error_code ignored;
            fs::remove(entry.path(), ignored);
        }
    }
    // The journal's temp files (transaction.json.tmp.*) of writers killed while writing it.
    remove_atomic_write_temps(state_dir(prefix));
    return {};
}

}  // namespace

// ---- receipts ----------------------------------------------------------------------

std::string receipt_to_json(const receipt& r) {
    json_writer w(2);
    w.begin_object();
    // Schema 2: some file is recorded by a piece list ("sha256_pieces"), which
    // a reader of schema 1 would take for a file without a digest.
    // (Symlinks write no digest: only regular files count; receipt_fuzz found a
    // symlink with a piece size that made the schema differ on the next write.)
    const bool pieces = std::any_of(r.files.begin(), r.files.end(),
                                    [](const auto& f) { return f.kind == entry_kind::regular && f.piece_size != 0; });
    w.field("schema", pieces ? 2 : 1);
    w.field("product", r.product);
    w.field("release_label", r.release_label);
    w.field("component", r.component);
    w.field("component_version", r.component_version);
    w.field("platform", r.platform);
    w.field("variant", r.variant);
    w.field("url", r.url);
    w.field("archive_sha256", r.archive_sha256);
    w.field("archive_size", r.archive_size);
    w.field("installed_at", r.installed_at);
    w.key("files").begin_array();
    for (const auto& f : r.files) {
        w.begin_object();
        w.field("path", f.path);
        w.field("type", kind_name(f.kind));
        if (f.kind == entry_kind::symlink) {
            w.field("target", f.link_target);
        } else {
            w.field("size", f.size);
            if (f.piece_size == 0) {
                w.field("sha256", f.sha256);
            } else {
                w.field("sha256_pieces", f.sha256);
                w.field("piece_size", f.piece_size);
            }
        }
        w.field("mode", f.mode);
        w.end_object();
    }
    w.end_array();
    if (!r.exclude.empty() || !r.excluded.empty()) {  // absent in every receipt without --exclude
        w.key("exclude").begin_array();
        for (const auto& g : r.exclude) w.value(g);
        w.end_array();
        w.key("excluded").begin_array();
        for (const auto& path : r.excluded) w.value(path);
        w.end_array();
    }
    w.end_object();
    return w.str() + "\n";
}

namespace {

json::value_fn read_into(std::string& out) {
    return [&out](json::value& v) -> result<void> { return v.get(out); };
}

// A name that may be empty (labels of old manifests are).
json::value_fn read_optional_name(std::string& out, std::string_view what) {
    return [&out, what](json::value& v) -> result<void> { return v.get_name_or_empty(out, what); };
}

result<void> read_installed_file(json::value& item, installed_file& f) {
    std::string type = "file";
    std::uint64_t mode = 0;
    std::string pieces;
    bool has_piece_size = false;
    auto read = item.read_object({
        {"path",
         [&](json::value& v) -> result<void> {
             // A receipt path must stay inside the prefix and out of .redist/,
             // or remove/verify could be aimed elsewhere.
             REDIST_TRY_VOID(v.get_relative_path(f.path));
             if (first_segment(f.path) == state_dir_name)
                 return result<void>(v.bad("unsafe path in receipt: inside .redist/"));
             return result<void>();
         },
         true},
        {"type", read_into(type)},
        {"target", read_into(f.link_target)},
        {"sha256", read_into(f.sha256)},
        {"sha256_pieces", read_into(pieces)},
        {"piece_size",
         [&](json::value& v) -> result<void> {
             REDIST_TRY_VOID(v.get(f.piece_size));
             has_piece_size = true;
             if (f.piece_size == 0 || !valid_piece_size(f.piece_size))
                 return result<void>(v.bad("not a piece size (a power of two from 64 KiB to 1 GiB)"));
             return result<void>();
         }},
        {"size", [&](json::value& v) -> result<void> { return v.get(f.size); }},
        {"mode", [&](json::value& v) -> result<void> { return v.get(mode); }},
    });
    if (!read.ok()) return read;
    if (!pieces.empty() || has_piece_size) {
        if (!f.sha256.empty()) return item.bad("both sha256 and sha256_pieces");
        if (!has_piece_size) return item.bad("sha256_pieces without piece_size");
        if (pieces.empty()) return item.bad("piece_size without sha256_pieces");
        if (!is_sha256_hex(pieces)) return item.bad("sha256_pieces is not 64 hex digits");
        f.sha256 = std::move(pieces);
    }
    if (type == "file") f.kind = entry_kind::regular;
    else if (type == "symlink") f.kind = entry_kind::symlink;
    else return item.bad("unknown file type '" + printable(type, 32) + "'");
    if (mode > 07777) return item.bad("mode out of range");
    f.mode = static_cast<unsigned>(mode);
    return {};
}

}  // namespace

result<receipt> receipt_from_json(std::string_view text, std::string_view source) {
    receipt r;
    std::uint64_t schema = 1;
    auto read = json::read_document(
        text, source, "receipt",
        {{"schema", [&](json::value& v) -> result<void> { return v.get(schema); }},
         {"product", [&](json::value& v) -> result<void> { return v.get_name(r.product, "product"); }, true},
         {"release_label", read_optional_name(r.release_label, "release label")},
         {"component", [&](json::value& v) -> result<void> { return v.get_name(r.component, "component"); }, true},
         {"component_version", read_into(r.component_version)},
         {"platform", read_optional_name(r.platform, "platform")},
         {"variant",
          [&](json::value& v) -> result<void> { return v.get_optional_name(r.variant, "variant", /*empty_ok=*/true); }},
         {"url", read_into(r.url)},
         {"archive_sha256", read_into(r.archive_sha256)},
         {"archive_size", [&](json::value& v) -> result<void> { return v.get(r.archive_size); }},
         {"installed_at", read_into(r.installed_at)},
         {"files",
          [&](json::value& v) -> result<void> {
              return v.for_each([&](json::value& item) -> result<void> {
                  installed_file f;
                  REDIST_TRY_VOID(read_installed_file(item, f));
                  r.files.push_back(std::move(f));
                  return result<void>();
              });
          }},
         {"exclude",
          [&](json::value& v) -> result<void> {
              return v.for_each([&](json::value& item) -> result<void> {
                  std::string glob;
                  REDIST_TRY_VOID(item.get(glob));
                  r.exclude.push_back(std::move(glob));
                  return result<void>();
              });
          }},
         {"excluded", [&](json::value& v) -> result<void> {
              return v.for_each([&](json::value& item) -> result<void> {
                  std::string path;
                  REDIST_TRY_VOID(item.get_relative_path(path));
                  r.excluded.push_back(std::move(path));
                  return result<void>();
              });
          }}});
    if (!read.ok()) return std::move(read).error_value();
    if (schema != 1 && schema != 2)
        return make_error(error_code::bad_manifest, "unsupported receipt schema " + std::to_string(schema))
            .with_source(std::string(source))
            .with_json_path("schema");
    return r;
}

namespace {

error corrupt_receipt(const fs::path& path, std::string message) {
    return make_error(error_code::bad_manifest, "corrupt receipt: " + std::move(message)).with_source(path.string());
}

// Reads one receipt file, which must be a regular file whose name matches
// its content (`product` empty for the legacy layout).
result<located_receipt> read_receipt_file(const fs::path& path, const std::string& product, const std::string& stem) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return errno_error("cannot read receipt", path, errno);
    if (!S_ISREG(st.st_mode)) return corrupt_receipt(path, "not a regular file");
    REDIST_TRY(const std::string text, read_file(path, max_receipt_bytes));
    REDIST_TRY(receipt r, receipt_from_json(text, path.string()));
    if (r.component != stem || (!product.empty() && r.product != product))
        return corrupt_receipt(path, "its product and component (" + r.product + ", " + r.component +
                                         ") do not match its file name");
    located_receipt out;
    out.rel_path = product.empty() ? legacy_receipt_rel_path(stem) : receipt_rel_path(product, stem);
    out.r = std::move(r);
    return out;
}

// The message of a receipt that cannot be read: which component it blocks,
// and how to repair it. Other components are not affected.
error blocked_component(error e, const std::string& product, const std::string& component) {
    const std::string who = product.empty() ? "component " + component
                                            : "component " + component + " of product " + product;
    e.message += " (" + who +
                 " is blocked until this is repaired: fetch it again, with --force if its files were changed, "
                 "or delete the receipt to forget it)";
    return e;
}

// Every receipt file, new layout and legacy, in a stable order. A receipt
// file that cannot be read goes to `unreadable` (it blocks only its own
// component); a receipts directory that is not what redist made fails all.
result<void> scan_located_receipts(const fs::path& prefix, std::vector<located_receipt>& out,
                                   std::vector<unreadable_receipt>& unreadable) {
    const fs::path dir = receipts_dir(prefix);
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(dir, ec))) return {};
    if (!is_directory_no_follow(dir)) return corrupt_receipt(dir, "the receipts directory is not a directory");
    const auto json_stem = [](const fs::path& p) -> std::optional<std::string> {
        const std::string name = p.filename().string();
        if (is_atomic_write_temp(name) || name.size() <= 5 || name.compare(name.size() - 5, 5, ".json") != 0)
            return std::nullopt;
        return name.substr(0, name.size() - 5);
    };
    const auto read_one = [&](const fs::path& p, const std::string& product, const std::string& stem) {
        auto r = read_receipt_file(p, product, stem);
        if (r.ok()) {
            out.push_back(std::move(r).value());
            return;
        }
        error e = blocked_component(std::move(r).error_value(), product, stem);
        if (e.source.empty() && e.path.empty()) e.source = p.string();
        unreadable.push_back({product, stem,
                              product.empty() ? legacy_receipt_rel_path(stem) : receipt_rel_path(product, stem),
                              std::move(e)});
    };
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const fs::path& p = entry.path();
        const std::string name = p.filename().string();
        std::error_code sec;
        const auto status = entry.symlink_status(sec);
        if (fs::is_directory(status)) {
            if (name_problem(name)) return corrupt_receipt(p, "not a product directory");
            for (const auto& inner : fs::directory_iterator(p, ec)) {
                const auto stem = json_stem(inner.path());
                if (!stem) continue;
                if (name_problem(*stem)) return corrupt_receipt(inner.path(), "not a component name");
                read_one(inner.path(), name, *stem);
            }
            if (ec) return fs_error("cannot list receipts", p, ec);
            continue;
        }
        const auto stem = json_stem(p);
        if (!stem) continue;
        if (name_problem(*stem)) return corrupt_receipt(p, "not a component name");
        read_one(p, "", *stem);
    }
    if (ec) return fs_error("cannot list receipts", dir, ec);
    std::sort(out.begin(), out.end(), [](const located_receipt& a, const located_receipt& b) {
        return std::tie(a.r.product, a.r.component, a.rel_path) < std::tie(b.r.product, b.r.component, b.rel_path);
    });
    std::sort(unreadable.begin(), unreadable.end(),
              [](const unreadable_receipt& a, const unreadable_receipt& b) { return a.rel_path < b.rel_path; });
    return {};
}

// Every receipt; the first that cannot be read fails all (for the callers
// that must see every component: remove all, sbom, sync).
result<std::vector<located_receipt>> read_located_receipts(const fs::path& prefix) {
    std::vector<located_receipt> out;
    std::vector<unreadable_receipt> unreadable;
    REDIST_TRY_VOID(scan_located_receipts(prefix, out, unreadable));
    if (!unreadable.empty()) return std::move(unreadable.front().why);
    return out;
}

// Legacy receipts beside new ones of the same key are leftovers: the new
// layout wins (`located` is sorted, so equal keys are adjacent).
std::vector<receipt> newest_receipts(std::vector<located_receipt> located) {
    std::vector<receipt> out;
    for (std::size_t i = 0; i < located.size(); ++i) {
        if (!out.empty() && key_of(out.back()) == key_of(located[i].r)) {
            if (segment_count(located[i].rel_path) == 4) out.back() = std::move(located[i].r);
            continue;
        }
        out.push_back(std::move(located[i].r));
    }
    return out;
}

}  // namespace

result<receipt_scan> scan_receipts(const fs::path& prefix) {
    std::vector<located_receipt> located;
    receipt_scan scan;
    REDIST_TRY_VOID(scan_located_receipts(prefix, located, scan.unreadable));
    scan.receipts = newest_receipts(std::move(located));
    return scan;
}

result<std::vector<receipt>> read_receipts(const fs::path& prefix) {
    REDIST_TRY(std::vector<located_receipt> located, read_located_receipts(prefix));
    return newest_receipts(std::move(located));
}

// ---- the prefix lock ------------------------------------------------------------------

result<prefix_lock> prefix_lock::acquire(const fs::path& prefix_in, const std::function<void()>& on_wait) {
    std::error_code ec;
    const fs::path prefix = fs::absolute(prefix_in, ec).lexically_normal();
    // Creating never changes the mode of what exists, so nothing
    // above the prefix (or the prefix itself) is chmod'ed.
    create_directories_masked(prefix, ec);
    if (ec) return fs_error("cannot create directory", prefix, ec);
    // .redist/ and its parts must be ours: a symlink there (planted by an
    // archive of an older version, or by someone else) would carry every
    // write elsewhere. Each level is checked before anything is created in it.
    for (const auto& dir : {state_dir(prefix), receipts_dir(prefix), staging_dir(prefix)}) {
        if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
            return errno_error("cannot create directory", dir, errno);
        if (!is_directory_no_follow(dir))
            return make_error(error_code::bad_manifest, "corrupt prefix state: not a directory (is it a symlink?)")
                .with_path(dir.string());
    }
    REDIST_TRY(unique_fd fd, lock_file(state_dir(prefix) / "lock", lock_mode::exclusive, lock_wait::block, on_wait));
    prefix_lock lock;
    lock.prefix_ = prefix;
    lock.fd_ = std::move(fd);
    REDIST_TRY_VOID(recover_prefix(prefix));
    return lock;
}

// ---- stages ---------------------------------------------------------------------------

result<fs::path> make_stage(const fs::path& prefix, std::string_view name) {
    static std::atomic<unsigned> counter{0};
    REDIST_TRY_VOID(validate_name(name, "component"));
    std::error_code ec;
    const fs::path root = fs::absolute(prefix, ec).lexically_normal();
    REDIST_TRY(const fs::path dir,
               confined_join(root, std::string(staging_rel) + "/" + std::string(name) + "." +
                                       std::to_string(::getpid()) + "." + std::to_string(counter++)));
    fs::remove_all(dir, ec);
    if (::mkdir(dir.c_str(), 0755) != 0) return errno_error("cannot create stage", dir, errno);
    return dir;
}

void discard_stages(const prefix_lock& lock) noexcept {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(staging_dir(lock.prefix()), ec)) {
        std::error_code ignored;
        fs::remove_all(entry.path(), ignored);
    }
}

result<void> prepare_stage(staged_component& staged, const std::vector<unpacked_entry>& entries) {
    REDIST_TRY_VOID(validate_name(staged.new_receipt.component, "component"));
    const std::string licenses = "share/licenses/" + staged.new_receipt.component;
    // Paths that share an inode with a hardlink: their final content is what
    // is on disk now, whichever entry wrote it last.
    std::unordered_set<std::string> linked;
    for (const auto& e : entries) {
        if (e.kind != entry_kind::hardlink) continue;
        linked.insert(e.path);
        linked.insert(e.link_target);
    }
    std::vector<installed_file> files;
    bool created_licenses = false;
    for (const auto& e : entries) {
        if (e.kind == entry_kind::directory) continue;
        if (const char* why = relative_path_problem(e.path))
            return make_error(error_code::unsafe_archive, std::string("unsafe entry path: ") + why)
                .with_path(printable(e.path));
        installed_file f;
        f.path = e.path;
        f.kind = e.kind == entry_kind::symlink ? entry_kind::symlink : entry_kind::regular;
        f.size = e.size;
        f.sha256 = e.sha256;
        f.piece_size = e.piece_size;
        f.link_target = e.kind == entry_kind::symlink ? e.link_target : std::string();
        f.mode = e.mode;
        if (e.path.find('/') == std::string::npos) {
            // A top-level file (LICENSE, README, ...): every component keeps its own copy.
            REDIST_TRY(const fs::path dest_dir, confined_join(staged.stage_dir, licenses));
            if (!created_licenses) {
                std::error_code ec;
                create_directories_masked(dest_dir, ec);
                if (ec) return fs_error("cannot create directory", dest_dir, ec);
                created_licenses = true;
            }
            REDIST_TRY(const fs::path from, confined_join(staged.stage_dir, e.path));
            const fs::path to = dest_dir / e.path;
            if (::rename(from.c_str(), to.c_str()) != 0) return errno_error("cannot move", from, errno);
            f.path = licenses + "/" + e.path;
        }
        if (f.kind == entry_kind::regular && linked.count(e.path)) {
            REDIST_TRY(const fs::path on_disk, confined_join(staged.stage_dir, f.path));
            struct stat st {};
            if (::lstat(on_disk.c_str(), &st) != 0) return errno_error("cannot stat", on_disk, errno);
            f.size = static_cast<std::uint64_t>(st.st_size);
            f.piece_size = piece_size_for(f.size);
            REDIST_TRY(f.sha256, file_digest(on_disk, f.piece_size));
            f.mode = st.st_mode & 0777;
        }
        files.push_back(std::move(f));
    }
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
    files.erase(std::unique(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path == b.path; }),
                files.end());
    staged.new_receipt.files = std::move(files);
    if (staged.new_receipt.installed_at.empty()) staged.new_receipt.installed_at = utc_now_iso8601();
    return {};
}

// ---- commit ---------------------------------------------------------------------------

namespace {

// The real prefix behind the planner's interface.
class disk_view final : public prefix_view {
public:
    explicit disk_view(const fs::path& prefix) : prefix_(prefix) {}

    node type_of(const std::string& relative) const override {
        struct stat st {};
        if (::lstat((prefix_ / relative).c_str(), &st) != 0) return node::missing;
        if (S_ISDIR(st.st_mode)) return node::directory;
        if (S_ISREG(st.st_mode)) return node::regular;
        if (S_ISLNK(st.st_mode)) return node::symlink;
        return node::other;
    }

    bool holds(const std::string& relative, const installed_file& file) const override {
        const fs::path p = prefix_ / relative;
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0) return false;
        if (file.kind == entry_kind::symlink) {
            std::error_code ec;
            return S_ISLNK(st.st_mode) && fs::read_symlink(p, ec).string() == file.link_target;
        }
        if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != file.size) return false;
        auto digest = file_digest(p, file.piece_size);
        return digest.ok() && *digest == file.sha256;
    }

    std::optional<unsigned> stage_dir_mode(const std::string& stage, const std::string& relative) const override {
        struct stat st {};
        if (::lstat((prefix_ / stage / relative).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return st.st_mode & 07777;
        return std::nullopt;
    }

    std::optional<std::uint64_t> device_of(const std::string& relative) const override {
        struct stat st {};
        if (::lstat((relative.empty() ? prefix_ : prefix_ / relative).c_str(), &st) != 0) return std::nullopt;
        return static_cast<std::uint64_t>(st.st_dev);
    }

private:
    fs::path prefix_;
};

}  // namespace

// Receipts that cannot be read, for a commit: one of a component that is
// removed refuses the commit; one of a staged component is repaired (the new
// receipt takes its place, and one at another place, the legacy layout, is
// deleted: returned here); the others block nothing.
result<std::vector<std::string>> repaired_receipts(const fs::path& prefix, std::vector<unreadable_receipt>& unreadable,
                                                   const std::vector<staged_component>& staged,
                                                   const std::vector<component_ref>& remove) {
    std::vector<std::string> deletes;
    for (auto& u : unreadable) {
        const auto names = [&u](const std::string& product, const std::string& component) {
            return component == u.component && (u.product.empty() || product.empty() || product == u.product);
        };
        for (const auto& ref : remove)
            if (names(ref.product, ref.component)) return std::move(u.why);
        for (const auto& s : staged) {
            const receipt& r = s.new_receipt;
            if (!names(r.product, r.component) || u.rel_path == receipt_rel_path(r.product, r.component)) continue;
            struct stat st {};
            const fs::path path = prefix / u.rel_path;                   // from validated names
            if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))  // unlink(2) would fail mid-commit
                return make_error(error_code::bad_manifest, "corrupt prefix state: a receipt that is not a file")
                    .with_path(path.string());
            deletes.push_back(u.rel_path);
        }
    }
    return deletes;
}

result<void> commit_stages(const prefix_lock& lock, std::vector<staged_component> staged, bool overwrite_unowned) {
    return commit_stages_removing(lock, std::move(staged), {}, overwrite_unowned);
}

result<void> commit_stages_removing(const prefix_lock& lock, std::vector<staged_component> staged,
                                    const std::vector<component_ref>& remove, bool overwrite_unowned) {
    const fs::path& prefix = lock.prefix();
    // Until the journal exists nothing has changed in the prefix: a refusal
    // drops the stages too, so no stage outlives a failed run.
    const auto abandon = [&staged](error e) -> error {
        for (const auto& s : staged) {
            std::error_code ec;
            fs::remove_all(s.stage_dir, ec);
            fs::remove(s.stage_dir.string() + ".receipt.json", ec);
        }
        return e;
    };
    std::vector<located_receipt> existing;
    std::vector<unreadable_receipt> unreadable;
    auto scanned = scan_located_receipts(prefix, existing, unreadable);
    if (!scanned.ok()) return abandon(std::move(scanned).error_value());
    auto repaired = repaired_receipts(prefix, unreadable, staged, remove);
    if (!repaired.ok()) return abandon(std::move(repaired).error_value());

    std::vector<planned_stage> planned;
    for (auto& s : staged) {
        const fs::path stage = s.stage_dir.lexically_normal();
        if (stage.parent_path() != staging_dir(prefix))
            return abandon(make_error(error_code::internal, "stage outside the prefix's staging directory")
                               .with_path(stage.string()));
        if (s.new_receipt.installed_at.empty()) s.new_receipt.installed_at = utc_now_iso8601();
        planned.push_back({std::string(staging_rel) + "/" + stage.filename().string(), &s.new_receipt});
    }
    std::vector<std::pair<std::string, std::string>> removed;
    removed.reserve(remove.size());
    for (const auto& ref : remove) removed.emplace_back(ref.product, ref.component);
    const disk_view disk(prefix);
    auto plan = plan_commit_removing(disk, existing, planned, removed, overwrite_unowned);
    if (plan.ok()) {
        for (const auto& rel : *repaired) plan->deletes.push_back(rel);
        auto checked = check_journal(*plan);
        if (!checked.ok()) plan = std::move(checked).error_value();
    }
    if (!plan.ok()) {
        error e = std::move(plan).error_value();
        if (!e.path.empty() && e.code != error_code::internal) e.path = (prefix / e.path).string();
        return abandon(std::move(e));
    }
    // Receipts are written beside the stages first and moved last, by the journal.
    for (const auto& s : staged) {
        auto written = atomic_write(s.stage_dir.string() + ".receipt.json", receipt_to_json(s.new_receipt),
                                    durability::contents);
        if (!written.ok()) return abandon(std::move(written).error_value());
    }
    return run_transaction(prefix, *plan);
}

bool commit_pending(const fs::path& prefix) noexcept { return exists_no_follow(journal_path(prefix)); }

// ---- verify and remove ------------------------------------------------------------------

namespace {

// A regular file whose type and size match its record: its digest is left to
// the workers, one piece at a time (the whole file when it has no pieces).
struct digest_check {
    std::size_t slot;  // where its problem goes, in receipt order
    fs::path path;
    const installed_file* file;
    std::vector<std::array<unsigned char, 32>> pieces;
    std::vector<std::string> piece_errors;  // "" when the piece was read
};

// The problem with a file that no read can change, or nullopt when only its
// digest is left to check.
std::optional<std::string> shape_problem(const fs::path& p, const installed_file& f) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return "missing";
    if (f.kind == entry_kind::symlink) {
        if (!S_ISLNK(st.st_mode)) return "type changed (expected a symlink)";
        std::error_code link_ec;
        const auto target = fs::read_symlink(p, link_ec);
        if (link_ec || target.string() != f.link_target)
            return "symlink target changed (expected " + f.link_target + ", found " + target.string() + ")";
        return "";
    }
    if (!S_ISREG(st.st_mode)) return "type changed (expected a regular file)";
    if (static_cast<std::uint64_t>(st.st_size) != f.size)
        return "size changed (expected " + std::to_string(f.size) + ", found " + std::to_string(st.st_size) + ")";
    return std::nullopt;
}

// Hashes every piece of every check on up to `threads` threads. Each piece is
// one job, so that one large library does not leave the other cores idle. A
// file without a piece list is one piece of its whole size (an empty file is
// one empty piece).
void hash_pieces(std::vector<digest_check>& checks, unsigned threads) {
    struct piece_job {
        digest_check* check;
        std::size_t index;
        std::uint64_t offset;
        std::uint64_t length;
    };
    std::vector<piece_job> jobs;
    for (auto& c : checks) {
        const std::uint64_t size = c.file->size;
        const std::uint64_t span = c.file->piece_size ? c.file->piece_size : std::max<std::uint64_t>(size, 1);
        const auto count = static_cast<std::size_t>(std::max<std::uint64_t>(1, (size + span - 1) / span));
        c.pieces.resize(count);
        c.piece_errors.resize(count);
        for (std::size_t i = 0; i < count; ++i) {
            const std::uint64_t offset = span * i;
            jobs.push_back({&c, i, offset, std::min(span, size - offset)});
        }
    }
    for_each_index(jobs.size(), threads, nullptr, [&](std::size_t j) {
        const piece_job& job = jobs[j];
        auto digest = sha256_file_range(job.check->path, job.offset, job.length);
        if (digest.ok()) job.check->pieces[job.index] = *digest;
        else job.check->piece_errors[job.index] = digest.error_value().message;
    });
}

// The prefix lock, shared (see verify_prefix). Outcomes: ok (no descriptor
// when there is no .redist/) | bad_manifest | filesystem.
result<unique_fd> lock_prefix_shared(const fs::path& prefix, const std::function<void()>& on_wait) {
    const fs::path dir = state_dir(prefix);
    const unique_fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir_fd && errno == ENOENT) return unique_fd();
    if (!dir_fd && (errno == ELOOP || errno == ENOTDIR))
        return make_error(error_code::bad_manifest, "corrupt prefix state: not a directory (is it a symlink?)")
            .with_path(dir.string());
    if (!dir_fd) return errno_error("cannot open", dir, errno);
    return lock_file_at(dir_fd.get(), "lock", lock_mode::shared, lock_wait::block, on_wait, dir / "lock");
}

// verify_prefix's work, under the prefix lock (shared or exclusive).
result<verify_report> verify_locked(const fs::path& prefix, unsigned threads) {
    const bool pending = commit_pending(prefix);
    REDIST_TRY(receipt_scan scan, scan_receipts(prefix));
    const std::vector<receipt>& receipts = scan.receipts;
    std::error_code ec;
    const fs::path root = fs::absolute(prefix, ec).lexically_normal();
    if (ec) return fs_error("cannot resolve", prefix, ec);
    // One slot per file, in receipt order: the report reads the same whatever
    // order the workers finish in.
    std::vector<verify_problem> slots;
    std::vector<digest_check> checks;
    for (const auto& r : receipts) {
        for (const auto& f : r.files) {
            REDIST_TRY(fs::path p, confined_join(root, f.path));
            auto problem = shape_problem(p, f);
            slots.push_back({r.component, f.path, problem.value_or("")});
            if (!problem) checks.push_back({slots.size() - 1, std::move(p), &f, {}, {}});
        }
    }
    if (threads == 0) threads = run_budget::machine_limits().threads;
    hash_pieces(checks, threads);
    for (const auto& c : checks) {
        const auto unread = std::find_if(c.piece_errors.begin(), c.piece_errors.end(),
                                         [](const auto& e) { return !e.empty(); });
        if (unread != c.piece_errors.end()) {
            slots[c.slot].what = "unreadable (" + *unread + ")";
            continue;
        }
        const std::string digest = piece_list_hex(c.pieces);
        if (digest != c.file->sha256)
            slots[c.slot].what = "modified (" + std::string(c.file->piece_size ? "sha256_pieces " : "sha256 ") +
                                 digest + ", expected " + c.file->sha256 + ")";
    }
    verify_report report;
    report.unreadable = std::move(scan.unreadable);
    report.components = receipts.size();
    report.files = slots.size();
    report.commit_pending = pending;
    for (auto& s : slots)
        if (!s.what.empty()) report.problems.push_back(std::move(s));
    return report;
}

}  // namespace

result<verify_report> verify_prefix(const fs::path& prefix, unsigned threads, const std::function<void()>& on_wait) {
    REDIST_TRY(const unique_fd lock, lock_prefix_shared(prefix, on_wait));
    return verify_locked(prefix, threads);
}

result<verify_report> verify_prefix(const prefix_lock& held, unsigned threads) {
    return verify_locked(held.prefix(), threads);
}

result<void> remove_components(const prefix_lock& lock, const std::vector<component_ref>& which) {
    const fs::path& prefix = lock.prefix();
    if (which.empty()) return {};
    std::vector<located_receipt> receipts;
    std::vector<unreadable_receipt> unreadable;
    REDIST_TRY_VOID(scan_located_receipts(prefix, receipts, unreadable));
    // A receipt that cannot be read blocks its own component only. Which
    // files it lists is unknown: they are never deleted here, but a file it
    // shares with a component that goes is deleted with that one.
    for (auto& u : unreadable)
        for (const auto& ref : which)
            if (ref.component == u.component && (ref.product.empty() || u.product.empty() || ref.product == u.product))
                return std::move(u.why);
    std::map<std::string, std::set<std::string>> products_of;  // component -> products that have it
    for (const auto& e : receipts) products_of[e.r.component].insert(e.r.product);
    std::vector<std::pair<std::string, std::string>> targets;
    for (const auto& ref : which) {
        const auto found = products_of.find(ref.component);
        const bool known = found != products_of.end() && (ref.product.empty() || found->second.count(ref.product));
        if (!known) {
            std::string installed;
            for (const auto& e : receipts) installed += (installed.empty() ? "" : ", ") + e.r.component;
            const std::string what = ref.product.empty() ? "component " + printable(ref.component, 64)
                                                         : "component " + printable(ref.component, 64) +
                                                               " of product " + printable(ref.product, 64);
            std::vector<std::string> names;
            names.reserve(receipts.size());
            for (const auto& e : receipts) names.push_back(e.r.component);
            return make_error(error_code::not_found, what + " is not installed" + did_you_mean(ref.component, names) +
                                                         " (installed: " + (installed.empty() ? "none" : installed) +
                                                         ")")
                .with_path(prefix.string());
        }
        if (ref.product.empty() && found->second.size() > 1) {
            std::string products;
            for (const auto& p : found->second) products += (products.empty() ? "" : ", ") + p;
            return make_error(error_code::usage, "component " + ref.component + " is installed by several products (" +
                                                     products + "): name one with --product")
                .with_path(prefix.string());
        }
        targets.emplace_back(ref.product.empty() ? *found->second.begin() : ref.product, ref.component);
    }
    return run_transaction(prefix, plan_remove(receipts, targets));
}

result<void> remove_component(const prefix_lock& lock, const std::string& component) {
    return remove_components(lock, {component_ref{"", component}});
}

}  // namespace redist
