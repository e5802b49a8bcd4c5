#include "redist/cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

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
    const fs::path path = root_ / "locks" / (sha256 + ".lock");
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return fs_error("cannot open cache lock", path, errno);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (on_wait) on_wait();
        while (::flock(fd, LOCK_EX) != 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            ::close(fd);
            return fs_error("cannot lock", path, err);
        }
    }
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
        }
        ::close(fd);
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
