// Internal to lib/store/: what the prefix code (prefix.cpp, journal.cpp,
// commit_plan.cpp, receipts.cpp) shares. The layout of .redist/ is described in
// include/redist/prefix.hpp.
#pragma once

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "store/commit_plan.hpp"

namespace redist {

namespace fs = std::filesystem;

inline fs::path state_dir(const fs::path& prefix) { return prefix / state_dir_name; }
inline fs::path receipts_dir(const fs::path& prefix) { return prefix / receipts_rel; }
inline fs::path staging_dir(const fs::path& prefix) { return prefix / staging_rel; }
inline fs::path journal_path(const fs::path& prefix) { return state_dir(prefix) / "transaction.json"; }

inline error fs_error(const std::string& what, const fs::path& path, const std::error_code& ec) {
    return make_error(error_code::filesystem, what + ": " + ec.message()).with_path(path.string());
}

// Removes a stage (never following a symlink inside) and the receipt written beside it.
inline void remove_stage(const fs::path& stage) {
    std::error_code ec;
    fs::remove_all(stage, ec);
    fs::remove(stage.string() + ".receipt.json", ec);
}

inline bool is_directory_no_follow(const fs::path& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

inline bool exists_no_follow(const fs::path& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0;
}

inline std::string_view first_segment(std::string_view p) { return p.substr(0, p.find('/')); }

inline std::size_t segment_count(std::string_view p) {
    return 1 + static_cast<std::size_t>(std::count(p.begin(), p.end(), '/'));
}

// Parent directories of a prefix-relative path, deepest first ("a/b/c" -> "a/b", "a").
inline std::vector<std::string> parents_of(const std::string& relative) {
    std::vector<std::string> out;
    auto pos = relative.rfind('/');
    while (pos != std::string::npos && pos > 0) {
        out.push_back(relative.substr(0, pos));
        pos = relative.rfind('/', pos - 1);
    }
    return out;
}

inline std::string key_of(std::string_view product, std::string_view component) {
    std::string key(product);
    key += '/';
    key += component;
    return key;
}
inline std::string key_of(const receipt& r) { return key_of(r.product, r.component); }

// Why a journal path is not allowed in its role, or nullptr.
enum class journal_role { prefix_dir, move_from, move_to, remove, prune, stage };
const char* journal_path_problem(std::string_view p, journal_role role);

// Writes the journal, applies it, removes it. A failure before anything was
// moved restores the old state at once (no journal, no stages, no new
// directories); after that the journal stays, and the next writer rolls it
// forward.
result<void> run_transaction(const fs::path& prefix, const journal& j);

// Completes an interrupted commit (or rolls it back when none of its files
// was moved and it cannot be completed), then removes leftover temp files.
// Runs under the prefix lock.
result<void> recover_prefix(const fs::path& prefix);

// Every receipt file, new layout and legacy, in a stable order. A receipt
// file that cannot be read goes to `unreadable` (it blocks only its own
// component); a receipts directory that is not what redist made fails all.
result<void> scan_located_receipts(const fs::path& prefix, std::vector<located_receipt>& out,
                                   std::vector<unreadable_receipt>& unreadable);

}  // namespace redist
