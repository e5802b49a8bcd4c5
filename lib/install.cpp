// The prefix: receipts, lock, stages, journaled commit, verify, remove.
// See include/redist/install.hpp for the layout and the commit protocol.
#include "redist/install.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <simdjson.h>
#include <sstream>

#include "debug_pause.hpp"
#include "file_lock.hpp"
#include "redist/json_writer.hpp"
#include "redist/verify.hpp"

namespace fs = std::filesystem;

namespace redist {
namespace {

constexpr std::string_view state_dir_name = ".redist";

fs::path state_dir(const fs::path& prefix) { return prefix / state_dir_name; }
fs::path receipts_dir(const fs::path& prefix) { return state_dir(prefix) / "receipts"; }
fs::path staging_dir(const fs::path& prefix) { return state_dir(prefix) / "staging"; }
fs::path journal_path(const fs::path& prefix) { return state_dir(prefix) / "transaction.json"; }

error fs_error(const std::string& what, const fs::path& path, int err) {
    return make_error(error_code::filesystem, what + ": " + std::strerror(err)).with_path(path.string());
}

error fs_error(const std::string& what, const fs::path& path, const std::error_code& ec) {
    return make_error(error_code::filesystem, what + ": " + ec.message()).with_path(path.string());
}

std::string now_iso8601() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

result<std::string> read_whole_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return fs_error("cannot open", path, errno);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return fs_error("cannot read", path, errno);
    return ss.str();
}

void fsync_path(const fs::path& path, bool directory) {
    const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

// Writes a small file atomically: temp file, fsync, rename, fsync directory.
result<void> write_file_atomically(const fs::path& path, std::string_view content) {
    const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return fs_error("cannot create", tmp, errno);
    std::size_t written = 0;
    while (written < content.size()) {
        const ssize_t n = ::write(fd, content.data() + written, content.size() - written);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            return fs_error("cannot write", tmp, err);
        }
        written += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        return fs_error("cannot write", tmp, err);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        return fs_error("cannot rename into place", path, err);
    }
    fsync_path(path.parent_path(), true);
    return {};
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
    return a.sha256 == b.sha256 && a.size == b.size;
}

// ---- the commit journal ----------------------------------------------------------
//
// {"mkdirs": [[path, mode]...], "moves": [[from, to]...], "deletes": [path...],
//  "prune": [dir...], "stages": [dir...]}   (absolute paths)
struct journal {
    std::vector<std::pair<std::string, unsigned>> mkdirs;
    std::vector<std::pair<std::string, std::string>> moves;
    std::vector<std::string> deletes;
    std::vector<std::string> prune;  // directories to remove if they became empty (deepest first)
    std::vector<std::string> stages;
};

std::string journal_to_json(const journal& j) {
    json_writer w(0);
    w.begin_object();
    w.key("mkdirs").begin_array();
    for (const auto& [path, mode] : j.mkdirs) w.begin_array().value(path).value(mode).end_array();
    w.end_array();
    w.key("moves").begin_array();
    for (const auto& [from, to] : j.moves) w.begin_array().value(from).value(to).end_array();
    w.end_array();
    w.key("deletes").begin_array();
    for (const auto& p : j.deletes) w.value(p);
    w.end_array();
    w.key("prune").begin_array();
    for (const auto& p : j.prune) w.value(p);
    w.end_array();
    w.key("stages").begin_array();
    for (const auto& p : j.stages) w.value(p);
    w.end_array();
    w.end_object();
    return w.str();
}

result<journal> journal_from_json(const std::string& text, const fs::path& source) {
    auto fail = [&](const char* field) {
        return make_error(error_code::bad_manifest, "corrupt commit journal").with_source(source.string())
            .with_json_path(field);
    };
    simdjson::ondemand::parser parser;
    simdjson::padded_string padded(text);
    simdjson::ondemand::document doc;
    if (parser.iterate(padded).get(doc)) return fail("");
    simdjson::ondemand::object root;
    if (doc.get_object().get(root)) return fail("");
    journal j;
    for (auto field : root) {
        std::string_view key;
        if (field.unescaped_key().get(key)) return fail("");
        simdjson::ondemand::array arr;
        if (field.value().get_array().get(arr)) return fail(std::string(key).c_str());
        for (auto item : arr) {
            if (key == "mkdirs" || key == "moves") {
                simdjson::ondemand::array pair;
                if (item.get_array().get(pair)) return fail(std::string(key).c_str());
                std::string first;
                std::string second;
                std::uint64_t mode = 0;
                int index = 0;
                for (auto part : pair) {
                    if (index == 0) {
                        std::string_view s;
                        if (part.get_string().get(s)) return fail(std::string(key).c_str());
                        first = s;
                    } else if (key == "mkdirs") {
                        if (part.get_uint64().get(mode)) return fail("mkdirs");
                    } else {
                        std::string_view s;
                        if (part.get_string().get(s)) return fail("moves");
                        second = s;
                    }
                    ++index;
                }
                if (index != 2) return fail(std::string(key).c_str());
                if (key == "mkdirs") j.mkdirs.emplace_back(first, static_cast<unsigned>(mode));
                else j.moves.emplace_back(first, second);
            } else {
                std::string_view s;
                if (item.get_string().get(s)) return fail(std::string(key).c_str());
                if (key == "deletes") j.deletes.emplace_back(s);
                else if (key == "prune") j.prune.emplace_back(s);
                else if (key == "stages") j.stages.emplace_back(s);
            }
        }
    }
    return j;
}

bool is_directory_no_follow(const fs::path& p) {
    struct stat st{};
    return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists_no_follow(const fs::path& p) {
    struct stat st{};
    return ::lstat(p.c_str(), &st) == 0;
}

// Applies a journal. Every step is idempotent, so an interrupted apply can be
// re-run from the start (roll forward).
result<void> apply_journal(const journal& j) {
    for (const auto& [dir, mode] : j.mkdirs) {
        if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return fs_error("cannot create directory", dir, errno);
        if (!is_directory_no_follow(dir)) return fs_error("not a directory", dir, ENOTDIR);
        ::chmod(dir.c_str(), mode & 07777 ? mode & 0777 : 0755);
    }
    std::size_t moved = 0;
    for (const auto& [from, to] : j.moves) {
        if (moved++ == j.moves.size() / 2) debug_pause("mid-commit");
        if (!exists_no_follow(from)) continue;  // already moved by an earlier, interrupted apply
        if (::rename(from.c_str(), to.c_str()) != 0) return fs_error("cannot move into place", to, errno);
    }
    for (const auto& path : j.deletes) {
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) return fs_error("cannot remove", path, errno);
    }
    for (const auto& dir : j.prune) ::rmdir(dir.c_str());  // fails harmlessly when not empty
    for (const auto& stage : j.stages) {
        std::error_code ec;
        fs::remove_all(stage, ec);
    }
    return {};
}

// Writes the journal, applies it, removes it.
result<void> run_transaction(const fs::path& prefix, const journal& j) {
    const fs::path path = journal_path(prefix);
    REDIST_TRY_VOID(write_file_atomically(path, journal_to_json(j)));
    REDIST_TRY_VOID(apply_journal(j));
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return fs_error("cannot remove", path, errno);
    fsync_path(state_dir(prefix), true);
    return {};
}

result<void> recover_prefix(const fs::path& prefix) {
    const fs::path path = journal_path(prefix);
    if (exists_no_follow(path)) {
        REDIST_TRY(const std::string text, read_whole_file(path));
        REDIST_TRY(const journal j, journal_from_json(text, path));
        REDIST_TRY_VOID(apply_journal(j));
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) return fs_error("cannot remove", path, errno);
    }
    // Under the lock, every stage is a leftover of a dead process.
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(staging_dir(prefix), ec)) {
        std::error_code ignored;
        fs::remove_all(entry.path(), ignored);
    }
    // Temp files of atomic writes that never got renamed.
    for (const auto& entry : fs::directory_iterator(receipts_dir(prefix), ec)) {
        if (entry.path().string().find(".tmp.") != std::string::npos) {
            std::error_code ignored;
            fs::remove(entry.path(), ignored);
        }
    }
    return {};
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

}  // namespace

// ---- receipts ----------------------------------------------------------------------

std::string receipt_to_json(const receipt& r) {
    json_writer w(2);
    w.begin_object();
    w.field("schema", 1);
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
            w.field("sha256", f.sha256);
        }
        w.field("mode", f.mode);
        w.end_object();
    }
    w.end_array();
    w.end_object();
    return w.str() + "\n";
}

result<receipt> receipt_from_json(std::string_view json, std::string_view source) {
    auto fail = [&](const std::string& path, const char* what = "malformed receipt") {
        return make_error(error_code::bad_manifest, what).with_source(std::string(source)).with_json_path(path);
    };
    simdjson::ondemand::parser parser;
    simdjson::padded_string padded(json);
    simdjson::ondemand::document doc;
    if (parser.iterate(padded).get(doc)) return fail("", "receipt is not JSON");
    simdjson::ondemand::object root;
    if (doc.get_object().get(root)) return fail("", "receipt is not a JSON object");
    receipt r;
    for (auto field : root) {
        std::string_view key;
        if (field.unescaped_key().get(key)) return fail("");
        const std::string k(key);
        auto value = field.value();
        auto read_string = [&](std::string& out) -> bool {
            std::string_view s;
            if (value.get_string().get(s)) return false;
            out = s;
            return true;
        };
        if (k == "product" || k == "release_label" || k == "component" || k == "component_version" ||
            k == "platform" || k == "url" || k == "archive_sha256" || k == "installed_at") {
            std::string* target = k == "product" ? &r.product
                                  : k == "release_label" ? &r.release_label
                                  : k == "component" ? &r.component
                                  : k == "component_version" ? &r.component_version
                                  : k == "platform" ? &r.platform
                                  : k == "url" ? &r.url
                                  : k == "archive_sha256" ? &r.archive_sha256
                                                          : &r.installed_at;
            if (!read_string(*target)) return fail(k);
        } else if (k == "variant") {
            bool is_null = false;
            if (value.is_null().get(is_null)) return fail(k);
            if (!is_null) {
                std::string v;
                if (!read_string(v)) return fail(k);
                r.variant = v;
            }
        } else if (k == "archive_size") {
            if (value.get_uint64().get(r.archive_size)) return fail(k);
        } else if (k == "files") {
            simdjson::ondemand::array files;
            if (value.get_array().get(files)) return fail(k);
            std::size_t index = 0;
            for (auto item : files) {
                const std::string item_path = "files[" + std::to_string(index++) + "]";
                simdjson::ondemand::object obj;
                if (item.get_object().get(obj)) return fail(item_path);
                installed_file f;
                for (auto ff : obj) {
                    std::string_view fk;
                    if (ff.unescaped_key().get(fk)) return fail(item_path);
                    auto fv = ff.value();
                    std::string_view s;
                    std::uint64_t n = 0;
                    if (fk == "path") {
                        if (fv.get_string().get(s)) return fail(item_path + ".path");
                        f.path = s;
                    } else if (fk == "type") {
                        if (fv.get_string().get(s)) return fail(item_path + ".type");
                        if (s == "file") f.kind = entry_kind::regular;
                        else if (s == "symlink") f.kind = entry_kind::symlink;
                        else return fail(item_path + ".type");
                    } else if (fk == "target") {
                        if (fv.get_string().get(s)) return fail(item_path + ".target");
                        f.link_target = s;
                    } else if (fk == "sha256") {
                        if (fv.get_string().get(s)) return fail(item_path + ".sha256");
                        f.sha256 = s;
                    } else if (fk == "size") {
                        if (fv.get_uint64().get(n)) return fail(item_path + ".size");
                        f.size = n;
                    } else if (fk == "mode") {
                        if (fv.get_uint64().get(n)) return fail(item_path + ".mode");
                        f.mode = static_cast<unsigned>(n);
                    }
                }
                // A receipt path must stay inside the prefix, or remove/verify could be aimed elsewhere.
                if (f.path.empty() || f.path.front() == '/' || f.path.find("..") != std::string::npos)
                    return fail(item_path + ".path", "unsafe path in receipt");
                r.files.push_back(std::move(f));
            }
        }
    }
    if (r.component.empty()) return fail("component", "receipt has no component");
    return r;
}

result<std::vector<receipt>> read_receipts(const fs::path& prefix) {
    std::vector<receipt> out;
    std::error_code ec;
    const fs::path dir = receipts_dir(prefix);
    if (!fs::exists(dir, ec)) return out;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const auto& p = entry.path();
        if (p.extension() != ".json" || p.string().find(".tmp.") != std::string::npos) continue;
        REDIST_TRY(const std::string text, read_whole_file(p));
        REDIST_TRY(receipt r, receipt_from_json(text, p.string()));
        out.push_back(std::move(r));
    }
    if (ec) return fs_error("cannot list receipts", dir, ec);
    std::sort(out.begin(), out.end(), [](const receipt& a, const receipt& b) { return a.component < b.component; });
    return out;
}

// ---- the prefix lock ------------------------------------------------------------------

result<prefix_lock> prefix_lock::acquire(const fs::path& prefix_in, const std::function<void()>& on_wait) {
    std::error_code ec;
    const fs::path prefix = fs::absolute(prefix_in, ec).lexically_normal();
    for (const auto& dir : {prefix, state_dir(prefix), receipts_dir(prefix), staging_dir(prefix)}) {
        fs::create_directories(dir, ec);
        if (ec) return fs_error("cannot create directory", dir, ec);
    }
    REDIST_TRY(const int fd, lock_file_exclusive(state_dir(prefix) / "lock", on_wait));
    prefix_lock lock;
    lock.prefix_ = prefix;
    lock.fd_ = fd;
    REDIST_TRY_VOID(recover_prefix(prefix));
    return lock;
}

prefix_lock::prefix_lock(prefix_lock&& other) noexcept : prefix_(std::move(other.prefix_)), fd_(other.fd_) {
    other.fd_ = -1;
}

prefix_lock& prefix_lock::operator=(prefix_lock&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        prefix_ = std::move(other.prefix_);
        fd_ = other.fd_;
        other.fd_ = -1;
    }
    return *this;
}

prefix_lock::~prefix_lock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

// ---- stages ---------------------------------------------------------------------------

result<fs::path> make_stage(const fs::path& prefix, std::string_view name) {
    static std::atomic<unsigned> counter{0};
    std::error_code ec;
    const fs::path dir = staging_dir(fs::absolute(prefix, ec).lexically_normal()) /
                         (std::string(name) + "." + std::to_string(::getpid()) + "." + std::to_string(counter++));
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
    if (ec) return fs_error("cannot create stage", dir, ec);
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
    const std::string licenses = "share/licenses/" + staged.new_receipt.component;
    std::vector<installed_file> files;
    bool created_licenses = false;
    for (const auto& e : entries) {
        if (e.kind == entry_kind::directory) continue;
        installed_file f;
        f.path = e.path;
        f.kind = e.kind == entry_kind::symlink ? entry_kind::symlink : entry_kind::regular;
        f.size = e.size;
        f.sha256 = e.sha256;
        f.link_target = e.kind == entry_kind::symlink ? e.link_target : std::string();
        f.mode = e.mode;
        if (e.path.find('/') == std::string::npos) {
            // A top-level file (LICENSE, README, ...): every component keeps its own copy.
            const fs::path dest_dir = staged.stage_dir / licenses;
            std::error_code ec;
            if (!created_licenses) {
                fs::create_directories(dest_dir, ec);
                if (ec) return fs_error("cannot create directory", dest_dir, ec);
                created_licenses = true;
            }
            const fs::path from = staged.stage_dir / e.path;
            const fs::path to = dest_dir / e.path;
            if (::rename(from.c_str(), to.c_str()) != 0) return fs_error("cannot move", from, errno);
            f.path = licenses + "/" + e.path;
        }
        files.push_back(std::move(f));
    }
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
    files.erase(std::unique(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path == b.path; }),
                files.end());
    staged.new_receipt.files = std::move(files);
    if (staged.new_receipt.installed_at.empty()) staged.new_receipt.installed_at = now_iso8601();
    return {};
}

// ---- commit ---------------------------------------------------------------------------

result<void> commit_stages(const prefix_lock& lock, std::vector<staged_component> staged, bool overwrite_unowned) {
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
    auto existing_or_error = read_receipts(prefix);
    if (!existing_or_error.ok()) return abandon(std::move(existing_or_error).error_value());
    const std::vector<receipt> existing = std::move(existing_or_error).value();

    std::set<std::string> replaced;  // component keys being (re)installed
    for (const auto& s : staged) replaced.insert(s.new_receipt.component);

    // Who owns what after the commit: files of components that stay...
    struct owner {
        std::string component;
        const installed_file* file;
    };
    std::map<std::string, owner> kept_owners;
    for (const auto& r : existing) {
        if (replaced.count(r.component)) continue;
        for (const auto& f : r.files) kept_owners.emplace(f.path, owner{r.component, &f});
    }

    // ...and the staged files, checked against those and against each other.
    journal j;
    std::map<std::string, owner> new_owners;
    std::set<std::string> dirs;
    for (const auto& s : staged) {
        for (const auto& f : s.new_receipt.files) {
            const auto kept = kept_owners.find(f.path);
            if (kept != kept_owners.end() && !same_content(*kept->second.file, f)) {
                return abandon(make_error(error_code::conflict, "components " + kept->second.component + " and " +
                                                            s.new_receipt.component +
                                                            " install different files at the same path")
                    .with_path((prefix / f.path).string()));
            }
            const auto [it, inserted] = new_owners.emplace(f.path, owner{s.new_receipt.component, &f});
            if (!inserted) {
                if (!same_content(*it->second.file, f)) {
                    return abandon(make_error(error_code::conflict, "components " + it->second.component + " and " +
                                                                s.new_receipt.component +
                                                                " ship different files at the same path")
                        .with_path((prefix / f.path).string()));
                }
                continue;  // identical: the first component's copy is moved, this one stays in its stage
            }
            for (const auto& parent : parents_of(f.path)) dirs.insert(parent);
            j.moves.emplace_back((s.stage_dir / f.path).string(), (prefix / f.path).string());
        }
    }
    // A directory we need must not be a file (or symlink) in the prefix.
    for (const auto& d : dirs) {
        const fs::path p = prefix / d;
        if (exists_no_follow(p) && !is_directory_no_follow(p)) {
            return abandon(make_error(error_code::conflict, "a directory in the archive is a file in the prefix")
                               .with_path(p.string()));
        }
    }
    // A file that no receipt owns (the user's own) is never overwritten
    // silently, unless it is identical or the caller allows it (--force).
    if (!overwrite_unowned) {
        std::set<std::string> owned;
        for (const auto& r : existing)
            for (const auto& f : r.files) owned.insert(f.path);
        for (const auto& [path, who] : new_owners) {
            if (owned.count(path)) continue;
            const fs::path p = prefix / path;
            struct stat st{};
            if (::lstat(p.c_str(), &st) != 0) continue;
            bool identical = false;
            if (who.file->kind == entry_kind::symlink) {
                std::error_code ec;
                identical = S_ISLNK(st.st_mode) && fs::read_symlink(p, ec).string() == who.file->link_target;
            } else if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) == who.file->size) {
                auto digest = sha256_file(p);
                identical = digest.ok() && *digest == who.file->sha256;
            }
            if (!identical) {
                return abandon(make_error(error_code::conflict, "component " + who.component +
                                                                    " would overwrite a file that redist did not "
                                                                    "install (move it away, or use --force)")
                                   .with_path(p.string()));
            }
        }
    }

    // Directories shallowest first, with the stage's modes.
    for (const auto& d : by_depth(dirs, /*deepest_first=*/false)) {
        unsigned mode = 0755;
        for (const auto& s : staged) {
            struct stat st{};
            if (::lstat((s.stage_dir / d).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
                mode = st.st_mode & 0777;
                break;
            }
        }
        j.mkdirs.emplace_back((prefix / d).string(), mode | 0700);
    }

    // Stale files: owned by a replaced component's old receipt, not shipped anymore, not owned by anyone else.
    std::set<std::string> prune;
    for (const auto& r : existing) {
        if (!replaced.count(r.component)) continue;
        for (const auto& f : r.files) {
            if (new_owners.count(f.path) || kept_owners.count(f.path)) continue;
            j.deletes.push_back((prefix / f.path).string());
            for (const auto& parent : parents_of(f.path)) prune.insert(parent);
        }
    }
    for (const auto& d : by_depth(prune, /*deepest_first=*/true)) j.prune.push_back((prefix / d).string());

    // Receipts are written into the stages first and moved last.
    for (auto& s : staged) {
        if (s.new_receipt.installed_at.empty()) s.new_receipt.installed_at = now_iso8601();
        const fs::path receipt_tmp = s.stage_dir.string() + ".receipt.json";
        auto written = write_file_atomically(receipt_tmp, receipt_to_json(s.new_receipt));
        if (!written.ok()) return abandon(std::move(written).error_value());
        j.moves.emplace_back(receipt_tmp.string(), (receipts_dir(prefix) / (s.new_receipt.component + ".json")).string());
        j.stages.push_back(s.stage_dir.string());
    }
    return run_transaction(prefix, j);
}

bool commit_pending(const fs::path& prefix) noexcept { return exists_no_follow(journal_path(prefix)); }

// ---- verify and remove ------------------------------------------------------------------

result<std::vector<verify_problem>> verify_prefix(const fs::path& prefix) {
    REDIST_TRY(const std::vector<receipt> receipts, read_receipts(prefix));
    std::vector<verify_problem> problems;
    for (const auto& r : receipts) {
        for (const auto& f : r.files) {
            const fs::path p = prefix / f.path;
            struct stat st{};
            if (::lstat(p.c_str(), &st) != 0) {
                problems.push_back({r.component, f.path, "missing"});
                continue;
            }
            if (f.kind == entry_kind::symlink) {
                if (!S_ISLNK(st.st_mode)) {
                    problems.push_back({r.component, f.path, "type changed (expected a symlink)"});
                    continue;
                }
                std::error_code ec;
                const auto target = fs::read_symlink(p, ec);
                if (ec || target.string() != f.link_target)
                    problems.push_back({r.component, f.path, "symlink target changed (expected " + f.link_target +
                                                                 ", found " + target.string() + ")"});
                continue;
            }
            if (!S_ISREG(st.st_mode)) {
                problems.push_back({r.component, f.path, "type changed (expected a regular file)"});
                continue;
            }
            if (static_cast<std::uint64_t>(st.st_size) != f.size) {
                problems.push_back({r.component, f.path, "size changed (expected " + std::to_string(f.size) +
                                                             ", found " + std::to_string(st.st_size) + ")"});
                continue;
            }
            auto digest = sha256_file(p);
            if (!digest.ok()) {
                problems.push_back({r.component, f.path, "unreadable (" + digest.error_value().message + ")"});
            } else if (*digest != f.sha256) {
                problems.push_back({r.component, f.path, "modified (sha256 " + *digest + ", expected " + f.sha256 + ")"});
            }
        }
    }
    return problems;
}

result<void> remove_component(const prefix_lock& lock, const std::string& component) {
    const fs::path& prefix = lock.prefix();
    REDIST_TRY(const std::vector<receipt> receipts, read_receipts(prefix));
    const receipt* target = nullptr;
    std::set<std::string> owned_by_others;
    for (const auto& r : receipts) {
        if (r.component == component) target = &r;
        else for (const auto& f : r.files) owned_by_others.insert(f.path);
    }
    if (!target) {
        std::string installed;
        for (const auto& r : receipts) installed += (installed.empty() ? "" : ", ") + r.component;
        return make_error(error_code::not_found, "component " + component + " is not installed (installed: " +
                                                     (installed.empty() ? "none" : installed) + ")")
            .with_path(prefix.string());
    }
    journal j;
    std::set<std::string> prune;
    for (const auto& f : target->files) {
        if (owned_by_others.count(f.path)) continue;
        j.deletes.push_back((prefix / f.path).string());
        for (const auto& parent : parents_of(f.path)) prune.insert(parent);
    }
    for (const auto& d : by_depth(prune, /*deepest_first=*/true)) j.prune.push_back((prefix / d).string());
    j.deletes.push_back((receipts_dir(prefix) / (component + ".json")).string());
    return run_transaction(prefix, j);
}

}  // namespace redist
