// The commit journal: its JSON form, the rules a journal read back must
// follow, and applying it (roll forward, or roll back when nothing moved).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <unordered_map>

#include "redist/json_writer.hpp"
#include "store/prefix_state.hpp"
#include "support/debug_pause.hpp"
#include "support/json_reader.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"

namespace fs = std::filesystem;

namespace redist {
namespace {

// The journal is read back from disk: a bound far above any real one, far below what would hurt.
constexpr std::uint64_t max_journal_bytes = 512ull << 20;

bool starts_with_dir(std::string_view p, std::string_view dir) {
    return p.size() > dir.size() && p.compare(0, dir.size(), dir) == 0 && p[dir.size()] == '/';
}

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
}  // namespace

// ---- the commit journal ------------------------------------------------------------
//
// {"journal_version": 2, "mkdirs": [{"path", "mode"}...], "moves": [{"from", "to"}...],
//  "deletes": [path...], "prune": [dir...], "stages": [dir...]}   (prefix-relative)

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

result<void> check_journal(const journal& j) {
    const auto check = [](const std::string& where, std::string_view p, journal_role role) -> result<void> {
        if (const char* why = journal_path_problem(p, role))
            return make_error(error_code::bad_manifest, "corrupt commit journal: '" + printable(p) + "' is " + why)
                .with_json_path(where);
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
        if (stage.ok()) remove_stage(*stage);  // else check_journal() refused such a journal already
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

}  // namespace

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
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
        if (!S_ISREG(st.st_mode))
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
    // Temp files of atomic writes that never got renamed.
    std::error_code ec;
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

}  // namespace redist
