// mirror.cpp — copies releases into a local mirror with the upstream layout.
//
// Hazards that shape this file:
// - A mirror is served to other machines: a file under its final name must
//   be complete and verified. Everything goes through "<file>.part.<pid>",
//   is hashed while it streams, fsync'ed, then renamed (atomic on one
//   filesystem). A crash leaves at most a .part file, swept by the next run.
// - The manifest decides what "complete" means for a release, so it is
//   written last; index.html (what `redist versions` reads) is rewritten only
//   after a manifest lands.
// - Release labels and the product name become file names: they are checked
//   to be plain names, so a hostile manifest cannot write outside the mirror.
//   relative_path values are already validated by the manifest parser.
#include "redist/mirror.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "redist/fetch.hpp"
#include "redist/urls.hpp"
#include "redist/verify.hpp"

namespace redist {

namespace fs = std::filesystem;

const char* to_string(mirror_status status) noexcept {
    switch (status) {
        case mirror_status::downloaded: return "downloaded";
        case mirror_status::replaced: return "replaced";
        case mirror_status::up_to_date: return "up_to_date";
    }
    return "unknown";
}

namespace {

// Owns a file descriptor; closes it once.
class unique_fd {
public:
    explicit unique_fd(int fd = -1) noexcept : fd_(fd) {}
    ~unique_fd() { reset(); }
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;
    int get() const noexcept { return fd_; }
    // Closes now and reports close(2)'s result (NFS reports write errors there).
    int close_checked() noexcept {
        const int rc = fd_ >= 0 ? ::close(fd_) : 0;
        fd_ = -1;
        return rc;
    }
    void reset() noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_;
};

error errno_error(const std::string& what, const fs::path& path, int err) {
    return make_error(error_code::filesystem, what + ": " + std::strerror(err)).with_path(path.string());
}

bool is_plain_name(std::string_view name) {
    if (name.empty() || name == "." || name == "..") return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-' || c == '+';
    });
}

result<void> write_all(int fd, const std::byte* data, std::size_t size, const fs::path& path) {
    while (size > 0) {
        const ssize_t n = ::write(fd, data, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno_error("cannot write", path, errno);
        }
        data += n;
        size -= static_cast<std::size_t>(n);
    }
    return {};
}

fs::path part_path(const fs::path& final_path) {
    return fs::path(final_path.string() + ".part." + std::to_string(::getpid()));
}

// Removes "<name>.part.<pid>" siblings left by processes that no longer run
// (a live pid may be another mirror run writing the same file: leave it).
void sweep_stale_parts(const fs::path& final_path) noexcept {
    std::error_code ec;
    const std::string prefix = final_path.filename().string() + ".part.";
    for (const auto& entry : fs::directory_iterator(final_path.parent_path(), ec)) {
        const std::string name = entry.path().filename().string();
        if (!name.starts_with(prefix)) continue;
        const std::string pid_text = name.substr(prefix.size());
        if (pid_text.empty() || !std::all_of(pid_text.begin(), pid_text.end(), [](char c) { return c >= '0' && c <= '9'; }))
            continue;
        const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
        const bool ours = pid == static_cast<long>(::getpid());
        if (ours || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)) {
            std::error_code rm_ec;
            fs::remove(entry.path(), rm_ec);
        }
    }
}

// fsync + close + rename of a fully written part file.
result<void> publish(unique_fd& fd, const fs::path& part, const fs::path& final_path) {
    // Without fsync a power loss after the rename could leave an empty or
    // short file under the final name, which is exactly what must not happen.
    if (::fsync(fd.get()) != 0) return errno_error("cannot sync", part, errno);
    if (fd.close_checked() != 0) return errno_error("cannot close", part, errno);
    if (::rename(part.c_str(), final_path.c_str()) != 0) return errno_error("cannot rename into place", final_path, errno);
    return {};
}

// Writes `bytes` to `final_path` atomically (part file, fsync, rename).
result<void> write_file_atomically(const fs::path& final_path, std::string_view bytes) {
    std::error_code ec;
    fs::create_directories(final_path.parent_path(), ec);
    if (ec) return errno_error("cannot create directory", final_path.parent_path(), ec.value());
    sweep_stale_parts(final_path);
    const fs::path part = part_path(final_path);
    unique_fd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return errno_error("cannot create", part, errno);
    auto written = write_all(fd.get(), reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), part);
    if (written.ok()) written = publish(fd, part, final_path);
    if (!written.ok()) {
        fd.reset();
        fs::remove(part, ec);
    }
    return written;
}

// What is at `path` compared with the expected content: nullopt if absent
// (or not a regular file), else whether size and SHA-256 match.
std::optional<bool> existing_matches(const fs::path& path, std::uint64_t size, const std::string& sha256) {
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (ec || !fs::is_regular_file(st)) return std::nullopt;
    const auto actual_size = fs::file_size(path, ec);
    if (ec) return false;
    if (actual_size != size) return false;
    auto digest = sha256_file(path);
    return digest.ok() && *digest == sha256;
}

void sleep_backoff(double initial, int attempt) {
    const double seconds = std::min(20.0, initial * std::pow(2.0, attempt - 1));
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

struct download_target {
    std::string url;
    fs::path final_path;
    std::uint64_t size = 0;
    std::string sha256;
};

// Downloads one artifact into place, verifying size and SHA-256 while the
// bytes stream. Outcomes: ok | not_found | network | integrity | filesystem.
result<void> download_verified(const download_target& t, const mirror_request& request,
                               const std::function<void(std::uint64_t)>& on_bytes) {
    std::error_code ec;
    fs::create_directories(t.final_path.parent_path(), ec);
    if (ec) return errno_error("cannot create directory", t.final_path.parent_path(), ec.value());
    sweep_stale_parts(t.final_path);
    const fs::path part = part_path(t.final_path);
    const std::string where = sanitize_url(t.url);

    for (int attempt = 1;; ++attempt) {
        unique_fd fd(::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (fd.get() < 0) return errno_error("cannot create", part, errno);
        sha256_hasher hasher;
        std::uint64_t received = 0;

        download_callbacks callbacks;
        callbacks.on_response = [&](const response_info& info) -> result<void> {
            // A Content-Length that disagrees with the manifest: fail before
            // spending the bandwidth.
            if (!info.partial && info.content_length >= 0 && static_cast<std::uint64_t>(info.content_length) != t.size)
                return make_error(error_code::integrity, "size mismatch (Content-Length)")
                    .with_url(where)
                    .with_expected_actual(std::to_string(t.size), std::to_string(info.content_length));
            return {};
        };
        callbacks.on_data = [&](const std::byte* data, std::size_t n) -> result<void> {
            // More bytes than the manifest says: stop now rather than fill the disk.
            if (received + n > t.size)
                return make_error(error_code::integrity, "size mismatch (more bytes than the manifest says)")
                    .with_url(where)
                    .with_expected_actual(std::to_string(t.size), "more than " + std::to_string(received + n - 1));
            REDIST_TRY_VOID(write_all(fd.get(), data, n, part));
            hasher.update(data, n);
            received += n;
            if (on_bytes) on_bytes(received);
            return {};
        };

        transfer_failure_info failure;
        auto fetched = download(t.url, request.transfer, callbacks, 0, &failure);
        result<void> outcome = fetched;
        if (outcome.ok()) outcome = check_integrity(t.size, t.sha256, received, hasher.finish_hex(), where);
        if (outcome.ok()) outcome = publish(fd, part, t.final_path);
        if (outcome.ok()) return {};

        fd.reset();
        fs::remove(part, ec);
        error e = std::move(outcome).error_value();
        if (e.code == error_code::integrity && e.path.empty()) e.path = t.final_path.string();
        const bool retry = e.code == error_code::network && failure.transient && attempt < request.attempts;
        if (!retry) return e;
        sleep_backoff(request.initial_backoff_seconds, attempt);
    }
}

struct picked {
    const component* comp = nullptr;
    artifact art;
};

// The artifacts of one release that the request selects, deduplicated by
// relative_path. Outcomes: ok | not_found | bad_manifest.
result<std::vector<picked>> select_for_mirror(const resolved_release& release, const mirror_request& request) {
    const manifest& m = release.parsed;
    const std::string what = release.product + " " + release.label;
    const std::set<std::string> wanted(request.components.begin(), request.components.end());
    const std::set<std::string> platforms(request.platforms.begin(), request.platforms.end());
    const std::set<int> majors(request.cuda_majors.begin(), request.cuda_majors.end());

    for (const auto& name : wanted) {
        if (m.find_component(name)) continue;
        std::string available;
        for (const auto& c : m.components) available += (available.empty() ? "" : ", ") + c.key;
        return make_error(error_code::not_found, what + " has no component '" + name + "' (available: " + available + ")")
            .with_source(sanitize_url(release.manifest_url));
    }

    std::vector<picked> out;
    std::map<std::string, std::size_t> by_path;
    std::set<std::string> platforms_hit;
    std::set<int> majors_hit;
    std::set<std::string> platforms_offered;
    std::set<int> majors_offered;
    for (const auto& c : m.components) {
        if (!wanted.empty() && !wanted.count(c.key)) continue;
        for (const auto& a : c.artifacts) {
            platforms_offered.insert(a.platform);
            if (!platforms.count(a.platform)) continue;
            if (auto major = a.cuda_major()) majors_offered.insert(*major);
            if (a.variant && !majors.empty()) {
                const auto major = a.cuda_major();
                if (!major || !majors.count(*major)) continue;
                majors_hit.insert(*major);
            }
            platforms_hit.insert(a.platform);
            if (auto it = by_path.find(a.relative_path); it != by_path.end()) {
                if (out[it->second].art.sha256 != a.sha256 || out[it->second].art.size != a.size)
                    return make_error(error_code::bad_manifest,
                                      "one relative_path with two different hashes or sizes: " + a.relative_path)
                        .with_source(sanitize_url(release.manifest_url))
                        .with_json_path(a.component + "." + a.platform + (a.variant ? "." + *a.variant : ""));
                continue;
            }
            by_path.emplace(a.relative_path, out.size());
            out.push_back({&c, a});
        }
    }

    auto join = [](const auto& items, auto&& fmt) {
        std::string s;
        for (const auto& i : items) s += (s.empty() ? "" : ", ") + fmt(i);
        return s.empty() ? std::string("none") : s;
    };
    // The variant first: a missing variant also empties its platforms.
    for (int major : majors) {
        if (majors_hit.count(major)) continue;
        return make_error(error_code::not_found,
                          what + " offers no cuda" + std::to_string(major) + " variant on the requested platforms " +
                              "(offered: " + join(majors_offered, [](int v) { return "cuda" + std::to_string(v); }) +
                              ")")
            .with_source(sanitize_url(release.manifest_url));
    }
    for (const auto& p : request.platforms) {
        if (platforms_hit.count(p)) continue;
        return make_error(error_code::not_found,
                          what + " has nothing for platform " + p +
                              (majors.empty() ? "" : " and the requested CUDA variants") + " (platforms: " +
                              join(platforms_offered, [](const std::string& s) { return s; }) + ")")
            .with_source(sanitize_url(release.manifest_url));
    }
    return out;
}

void emit(const mirror_request& request, const mirror_event& event) {
    if (request.on_progress) request.on_progress(event);
}

result<mirrored_release> mirror_one(const mirror_request& request, const std::string& spec, const fs::path& redist_dir,
                                    std::uint64_t& bytes_downloaded) {
    emit(request, {spec, {}, mirror_step::resolving, mirror_status::downloaded, 0, 0});
    release_request rr;
    rr.product = request.product;
    rr.version_spec = spec;
    rr.base_url = request.base_url;
    rr.sources = request.sources;
    rr.sources.mirrors.clear();
    REDIST_TRY(const resolved_release release, resolve_release(rr, request.transfer));
    if (!is_plain_name(release.label))
        return make_error(error_code::bad_manifest, "release label is not a plain file name: '" + release.label + "'")
            .with_source(sanitize_url(release.manifest_url));

    const std::string& manifest_text = release.manifest_text;  // the bytes exactly as published
    const std::string& manifest_digest = release.manifest_sha256;

    REDIST_TRY(const std::vector<picked> picks, select_for_mirror(release, request));

    mirrored_release out;
    out.label = release.label;
    out.manifest_url = sanitize_url(release.manifest_url);
    out.manifest_sha256 = manifest_digest;

    for (const auto& p : picks) {
        const artifact& a = p.art;
        mirrored_file f;
        f.component = a.component;
        f.platform = a.platform;
        f.variant = a.variant;
        f.relative_path = a.relative_path;
        f.path = redist_dir / fs::path(a.relative_path);
        std::string url = join_url(release.artifact_base_url, a.relative_path);
        if (request.sources.cache_dir) {
            // Seed from the local cache: the blob is re-verified as it streams.
            const fs::path blob = *request.sources.cache_dir / "blobs" / "sha256" / a.sha256;
            std::error_code ec;
            if (fs::is_regular_file(blob, ec)) url = "file://" + fs::absolute(blob, ec).string();
            else if (request.sources.offline)
                return make_error(error_code::not_found, "not in the cache (" + blob.string() + ")")
                    .with_url(sanitize_url(url));
        }
        f.url = sanitize_url(url);
        f.sha256 = a.sha256;
        f.size = a.size;

        emit(request, {release.label, a.relative_path, mirror_step::checking, mirror_status::downloaded, 0, a.size});
        const auto present = existing_matches(f.path, a.size, a.sha256);
        if (present && *present) {
            f.status = mirror_status::up_to_date;
        } else {
            f.status = present ? mirror_status::replaced : mirror_status::downloaded;
            emit(request, {release.label, a.relative_path, mirror_step::downloading, f.status, 0, a.size});
            REDIST_TRY_VOID(download_verified({url, f.path, a.size, a.sha256}, request, [&](std::uint64_t done) {
                emit(request, {release.label, a.relative_path, mirror_step::downloading, f.status, done, a.size});
            }));
            bytes_downloaded += a.size;
        }
        emit(request, {release.label, a.relative_path, mirror_step::finished, f.status, a.size, a.size});
        out.files.push_back(std::move(f));
    }

    // Last: the manifest (so the release is advertised only when complete),
    // then the listing.
    const std::string manifest_name = "redistrib_" + release.label + ".json";
    out.manifest_path = redist_dir / manifest_name;
    const auto present = existing_matches(out.manifest_path, manifest_text.size(), manifest_digest);
    if (present && *present) {
        out.manifest_status = mirror_status::up_to_date;
    } else {
        out.manifest_status = present ? mirror_status::replaced : mirror_status::downloaded;
        REDIST_TRY_VOID(write_file_atomically(out.manifest_path, manifest_text));
    }
    emit(request, {release.label, manifest_name, mirror_step::finished, out.manifest_status, manifest_text.size(),
                   manifest_text.size()});
    REDIST_TRY_VOID(write_mirror_index(redist_dir));
    return out;
}

std::string html_escape(std::string_view text) {
    std::string out;
    for (char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '\'': out += "&#39;"; break;
            case '"': out += "&quot;"; break;
            default: out += c;
        }
    }
    return out;
}

}  // namespace

result<void> write_mirror_index(const fs::path& redist_dir) {
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(redist_dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || name[0] == '.' || name.find(".part.") != std::string::npos) continue;
        std::error_code type_ec;
        if (entry.is_directory(type_ec)) {
            names.push_back(name + "/");
        } else if (name.starts_with("redistrib_") && name.ends_with(".json") && entry.is_regular_file(type_ec)) {
            names.push_back(name);
        }
    }
    if (ec) return errno_error("cannot list", redist_dir, ec.value());
    std::sort(names.begin(), names.end());

    // The shape of NVIDIA's listing, which list_versions() parses.
    std::string title = "Index of " + redist_dir.parent_path().filename().string() + "/redist";
    std::string html = "<html>\n<head><title>" + html_escape(title) + "</title></head>\n<body>\n<h1>" +
                       html_escape(title) + "</h1>\n<a href='../'>Parent Directory</a><br>\n";
    for (const auto& n : names) html += "<a href='" + html_escape(n) + "'>" + html_escape(n) + "</a><br>\n";
    html += "</body>\n</html>\n";
    return write_file_atomically(redist_dir / "index.html", html);
}

result<mirror_report> mirror_releases(const mirror_request& request) {
    if (!is_plain_name(request.product))
        return make_error(error_code::usage, "the product must be a plain name like 'cudnn', not '" + request.product + "'");
    if (request.versions.empty()) return make_error(error_code::usage, "no versions to mirror");
    if (request.platforms.empty()) return make_error(error_code::usage, "no platforms to mirror");
    if (request.dest.empty()) return make_error(error_code::usage, "no destination directory");

    std::error_code ec;
    mirror_report report;
    report.product = request.product;
    report.redist_dir = fs::absolute(request.dest, ec).lexically_normal() / request.product / "redist";
    report.index_path = report.redist_dir / "index.html";
    fs::create_directories(report.redist_dir, ec);
    if (ec) return errno_error("cannot create directory", report.redist_dir, ec.value());

    for (const auto& spec : request.versions) {
        REDIST_TRY(mirrored_release r, mirror_one(request, spec, report.redist_dir, report.bytes_downloaded));
        report.releases.push_back(std::move(r));
    }
    return report;
}

}  // namespace redist
