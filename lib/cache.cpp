#include "redist/cache.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <simdjson.h>

#include "redist/json_writer.hpp"
#include "file_lock.hpp"
#include "redist/verify.hpp"

namespace fs = std::filesystem;

namespace redist {

namespace {
error fs_error(const std::string& what, const fs::path& path, int err) {
    return make_error(error_code::filesystem, what + ": " + std::strerror(err)).with_path(path.string());
}
}  // namespace

fs::path default_cache_dir(const std::string& explicit_dir) {
    if (!explicit_dir.empty()) return explicit_dir;
    if (const char* env = std::getenv("REDIST_CACHE_DIR"); env && *env) return env;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return fs::path(xdg) / "redist";
    if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "redist";
    return fs::temp_directory_path() / "redist-cache";
}

blob_lock::blob_lock(blob_lock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
blob_lock& blob_lock::operator=(blob_lock&& other) noexcept {
    if (this != &other) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = other.fd_;
        other.fd_ = -1;
    }
    return *this;
}
blob_lock::~blob_lock() {
    if (fd_ >= 0) ::close(fd_);
}

result<blob_cache> blob_cache::open(const fs::path& root) {
    std::error_code ec;
    for (const char* sub : {"blobs/sha256", "locks", "documents"}) {
        fs::create_directories(root / sub, ec);
        if (ec) return make_error(error_code::filesystem, "cannot create cache directory: " + ec.message())
                   .with_path((root / sub).string());
    }
    blob_cache cache;
    cache.root_ = fs::absolute(root, ec).lexically_normal();
    return cache;
}

fs::path blob_cache::blob_path(const std::string& sha256) const { return root_ / "blobs" / "sha256" / sha256; }
fs::path blob_cache::partial_path(const std::string& sha256) const {
    return root_ / "blobs" / "sha256" / (sha256 + ".part");
}

result<blob_lock> blob_cache::lock_blob(const std::string& sha256, const std::function<void()>& on_wait) const {
    REDIST_TRY(const int fd, lock_file_exclusive(root_ / "locks" / (sha256 + ".lock"), on_wait));
    blob_lock lock;
    lock.fd_ = fd;
    return lock;
}

result<void> blob_cache::publish(const std::string& sha256) const {
    const fs::path from = partial_path(sha256);
    const fs::path to = blob_path(sha256);
    if (::rename(from.c_str(), to.c_str()) != 0) return fs_error("cannot publish cache blob", to, errno);
    return {};
}

result<std::vector<cache_entry>> blob_cache::list() const {
    std::vector<cache_entry> out;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root_ / "blobs" / "sha256", ec)) {
        std::string name = entry.path().filename().string();
        cache_entry e;
        if (name.ends_with(".part")) {
            e.partial = true;
            name.resize(name.size() - 5);
        }
        if (!is_sha256_hex(name)) continue;
        e.sha256 = name;
        std::error_code ignored;
        e.size = entry.file_size(ignored);
        e.last_used = entry.last_write_time(ignored);
        out.push_back(std::move(e));
    }
    if (ec) return make_error(error_code::filesystem, "cannot list cache: " + ec.message()).with_path(root_.string());
    return out;
}

std::uint64_t blob_cache::remove_tree(const std::string& sha256) const {
    const fs::path dir = root_ / "trees" / sha256;
    std::uint64_t bytes = 0;
    std::error_code ec;
    for (const auto& entry : fs::recursive_directory_iterator(dir, ec)) {
        std::error_code ignored;
        if (entry.is_regular_file(ignored) && !entry.is_symlink(ignored)) bytes += entry.file_size(ignored);
    }
    // Rename first, so that no process picks up a half-removed tree.
    const fs::path doomed = root_ / "trees" / (sha256 + ".stale." + std::to_string(::getpid()));
    fs::rename(dir, doomed, ec);
    if (ec) return 0;
    fs::remove_all(doomed, ec);
    return bytes;
}

result<std::uint64_t> blob_cache::prune(std::chrono::seconds older_than) const {
    REDIST_TRY(const auto entries, list());
    const auto now = fs::file_time_type::clock::now();
    std::uint64_t freed = 0;
    for (const auto& e : entries) {
        if (older_than.count() > 0 && now - e.last_used < older_than) continue;
        // Skip blobs that another process is working on right now.
        const fs::path lock_path = root_ / "locks" / (e.sha256 + ".lock");
        const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) continue;
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
            std::error_code ec;
            if (fs::remove(e.partial ? partial_path(e.sha256) : blob_path(e.sha256), ec)) freed += e.size;
            if (!e.partial) freed += remove_tree(e.sha256);
        }
        ::close(fd);
    }
    // Trees whose archive is gone (pruned above, or deleted by hand).
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root_ / "trees", ec)) {
        const std::string name = entry.path().filename().string();
        if (!is_sha256_hex(name) || fs::exists(blob_path(name))) continue;
        std::error_code ignored;
        if (older_than.count() > 0 && now - entry.last_write_time(ignored) < older_than) continue;
        freed += remove_tree(name);
    }
    return freed;
}

void blob_cache::store_document(const std::string& url, const std::string& body) const noexcept {
    const fs::path path = root_ / "documents" / sha256_hex(url);
    const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << body;
        if (!out) return;
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
}

std::optional<std::string> blob_cache::load_document(const std::string& url) const {
    std::ifstream in(root_ / "documents" / sha256_hex(url), std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace redist

// ---- extracted trees ------------------------------------------------------------------

namespace redist {

result<link_mode> parse_link_mode(std::string_view text) {
    if (text == "auto") return link_mode::auto_select;
    if (text == "reflink") return link_mode::reflink;
    if (text == "hardlink") return link_mode::hardlink;
    if (text == "copy") return link_mode::copy;
    return make_error(error_code::usage, "--link-mode is auto, reflink, hardlink or copy, not '" + std::string(text) + "'");
}

namespace {

std::int64_t mtime_ns(const struct stat& st) {
    return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Copies a regular file: reflink if asked/possible, else copy_file_range.
bool clone_or_copy(const fs::path& from, const fs::path& to, unsigned mode, bool allow_reflink, bool allow_copy) {
    const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) return false;
    const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        ::close(in);
        return false;
    }
    bool ok = allow_reflink && ::ioctl(out, FICLONE, in) == 0;
    if (!ok && allow_copy) {
        struct stat st{};
        ok = ::fstat(in, &st) == 0;
        off_t remaining = ok ? st.st_size : 0;
        while (ok && remaining > 0) {
            const ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, static_cast<std::size_t>(remaining), 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) ok = false;
            else remaining -= n;
        }
    }
    ok = ok && ::fchmod(out, mode & 0777) == 0;
    ::close(in);
    if (::close(out) != 0) ok = false;
    if (!ok) ::unlink(to.c_str());
    return ok;
}

}  // namespace

void blob_cache::store_tree(const std::string& sha256, const fs::path& stage,
                            const std::vector<installed_file>& files) const noexcept {
    const fs::path trees = root_ / "trees";
    const fs::path final_dir = trees / sha256;
    const fs::path tmp = trees / (sha256 + ".partial." + std::to_string(::getpid()));
    std::error_code ec;
    if (fs::exists(final_dir, ec)) return;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) return;
    json_writer w(0);
    w.begin_array();
    for (const auto& f : files) {
        const fs::path from = stage / f.path;
        const fs::path to = tmp / f.path;
        fs::create_directories(to.parent_path(), ec);
        struct stat st{};
        if (ec || ::lstat(from.c_str(), &st) != 0) {
            fs::remove_all(tmp, ec);
            return;
        }
        if (f.kind == entry_kind::symlink) {
            if (::symlink(f.link_target.c_str(), to.c_str()) != 0) {
                fs::remove_all(tmp, ec);
                return;
            }
        } else if (::link(from.c_str(), to.c_str()) != 0) {
            fs::remove_all(tmp, ec);  // EXDEV: cache on another filesystem; a copy would double the cold cost
            return;
        }
        w.begin_object().field("path", f.path).field("type", f.kind == entry_kind::symlink ? "symlink" : "file");
        w.field("size", f.size).field("sha256", f.sha256).field("target", f.link_target).field("mode", f.mode);
        w.field("mtime_ns", mtime_ns(st)).end_object();
    }
    w.end_array();
    // The list is written before the directory is renamed into place, so a
    // tree under its final name always has a list.
    std::ofstream out(tmp / ".redist-tree.json", std::ios::binary | std::ios::trunc);
    out << w.str();
    out.close();
    if (!out) {
        fs::remove_all(tmp, ec);
        return;
    }
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) fs::remove_all(tmp, ec);
}

result<std::optional<std::vector<installed_file>>> blob_cache::materialize_tree(const std::string& sha256,
                                                                                const fs::path& stage,
                                                                                link_mode mode) const {
    const fs::path dir = root_ / "trees" / sha256;
    std::ifstream in(dir / ".redist-tree.json", std::ios::binary);
    if (!in) return std::optional<std::vector<installed_file>>();
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();

    auto drop = [&]() -> result<std::optional<std::vector<installed_file>>> {
        // Rename first so that no process ever uses a half-removed tree.
        std::error_code ec;
        const fs::path doomed = root_ / "trees" / (sha256 + ".stale." + std::to_string(::getpid()));
        fs::rename(dir, doomed, ec);
        fs::remove_all(doomed, ec);
        fs::remove_all(stage, ec);
        fs::create_directories(stage, ec);
        return std::optional<std::vector<installed_file>>();
    };

    simdjson::ondemand::parser parser;
    simdjson::padded_string padded(text);
    simdjson::ondemand::document doc;
    simdjson::ondemand::array items;
    if (parser.iterate(padded).get(doc) || doc.get_array().get(items)) return drop();
    std::vector<installed_file> files;
    for (auto item : items) {
        simdjson::ondemand::object obj;
        if (item.get_object().get(obj)) return drop();
        installed_file f;
        std::int64_t recorded_mtime = 0;
        for (auto field : obj) {
            std::string_view key;
            std::string_view sv;
            std::uint64_t n = 0;
            std::int64_t i = 0;
            if (field.unescaped_key().get(key)) return drop();
            auto v = field.value();
            if (key == "path") { if (v.get_string().get(sv)) return drop(); f.path = sv; }
            else if (key == "type") { if (v.get_string().get(sv)) return drop(); f.kind = sv == "symlink" ? entry_kind::symlink : entry_kind::regular; }
            else if (key == "size") { if (v.get_uint64().get(n)) return drop(); f.size = n; }
            else if (key == "sha256") { if (v.get_string().get(sv)) return drop(); f.sha256 = sv; }
            else if (key == "target") { if (v.get_string().get(sv)) return drop(); f.link_target = sv; }
            else if (key == "mode") { if (v.get_uint64().get(n)) return drop(); f.mode = static_cast<unsigned>(n); }
            else if (key == "mtime_ns") { if (v.get_int64().get(i)) return drop(); recorded_mtime = i; }
        }
        if (f.path.empty() || f.path.front() == '/' || f.path.find("..") != std::string::npos) return drop();
        const fs::path from = dir / f.path;
        const fs::path to = stage / f.path;
        std::error_code ec;
        fs::create_directories(to.parent_path(), ec);
        if (ec) return make_error(error_code::filesystem, "cannot create directory: " + ec.message())
                   .with_path(to.parent_path().string());
        struct stat st{};
        if (::lstat(from.c_str(), &st) != 0) return drop();
        if (f.kind == entry_kind::symlink) {
            std::error_code rec;
            if (!S_ISLNK(st.st_mode) || fs::read_symlink(from, rec).string() != f.link_target) return drop();
            if (::symlink(f.link_target.c_str(), to.c_str()) != 0)
                return make_error(error_code::filesystem, std::string("cannot create symlink: ") + std::strerror(errno))
                    .with_path(to.string());
        } else {
            // The tree was built from a hash-verified archive; a changed size
            // or mtime means somebody wrote to it (e.g. through a hardlink).
            if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != f.size || mtime_ns(st) != recorded_mtime)
                return drop();
            bool placed = false;
            if (mode == link_mode::hardlink) {
                placed = ::link(from.c_str(), to.c_str()) == 0;
            } else {
                placed = clone_or_copy(from, to, f.mode, mode != link_mode::copy, mode != link_mode::reflink);
            }
            if (!placed)
                return make_error(error_code::filesystem, std::string("cannot place file from the cache: ") +
                                                              std::strerror(errno))
                    .with_path(to.string());
        }
        files.push_back(std::move(f));
    }
    return std::optional<std::vector<installed_file>>(std::move(files));
}

}  // namespace redist
