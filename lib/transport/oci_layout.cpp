// oci_layout.cpp — OCI image layouts on disk: reading them as a source,
// writing them as a mirror target (transport/oci_layout.hpp).
//
// Hazards that shape this file:
// - Every byte of a layout is input (the mirror directory may sit on shared
//   storage): index.json is capped and parsed strictly (fuzzed), every blob
//   is checked against its digest before it is believed.
// - Nothing inside DIR is followed: each directory is opened with openat(2)
//   O_DIRECTORY|O_NOFOLLOW relative to its parent, each file with
//   O_NOFOLLOW|O_NONBLOCK and fstat'ed as a regular file before a byte is read.
//   Writes go through those descriptors too (/proc/self/fd/<fd>/<name> names
//   the directory itself, so atomic_write never walks DIR/P again).
// - A reader must never see a release whose blobs are missing: blobs first,
//   then the manifest blob, index.json last, each renamed into place.
#include "transport/oci_layout.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "archive/sha256.hpp"
#include "model/urls.hpp"
#include "redist/atomic_write.hpp"
#include "redist/json_writer.hpp"
#include "support/debug_pause.hpp"
#include "support/json_reader.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"
#include "transport/http_request.hpp"

namespace redist {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kRefName = "org.opencontainers.image.ref.name";
constexpr std::string_view kIndexType = "application/vnd.oci.image.index.v1+json";
constexpr std::string_view kLayoutFile = R"({"imageLayoutVersion":"1.0.0"})";
constexpr std::size_t kMaxIndexBytes = 4u << 20;
constexpr std::size_t kMaxDocumentBytes = 64u << 20;
constexpr std::size_t kScheme = 11;  // "oci-layout:"

// Where an oci-layout: URL points.
struct layout_location {
    fs::path root;  // DIR
    std::string product;
    oci_url::kind what = oci_url::kind::base;
    std::string reference;  // document: the label; blob: "sha256:<hex>"
    std::string title;      // document: the layer's title (redistrib_<label>.json, recompressed_<label>.json)
    fs::path product_dir() const { return root / product; }
};

result<layout_location> parse_layout_url(std::string_view url) {
    const auto bad = [&](const std::string& why) {
        return make_error(error_code::usage, "not an image layout URL (" + why + ")").with_url(std::string(url));
    };
    if (!is_oci_layout_url(url)) return bad("expected oci-layout:DIR");
    std::string_view path = url.substr(kScheme);
    if (path.empty() || path.front() != '/' || path.find('\0') != std::string_view::npos)
        return bad("an absolute path is required");
    layout_location out;
    auto tail = split_oci_path(path, "a layout");
    if (!tail.ok()) return bad(tail.error_value().message);
    if (!*tail) return bad("no /<product>/redist/ or /<product>/blobs/ in it");
    const std::string_view head = (*tail)->head;
    out.what = (*tail)->what;
    out.reference = std::move((*tail)->reference);
    out.title = std::move((*tail)->title);
    const auto slash = head.rfind('/');
    out.product = std::string(head.substr(slash + 1));
    out.root = fs::path(std::string(head.substr(0, slash))).lexically_normal();
    if (slash == 0) out.root = "/";
    if (name_problem(out.product) != nullptr) return bad("the product must be a plain name");
    for (const auto& part : out.root)
        if (part == "..") return bad("'..' in the path");
    return out;
}

error layout_error(std::string_view what, const fs::path& path, int err, error_code code) {
    if (err == ELOOP || err == ENOTDIR)
        return make_error(code, "refusing a symlink or a non-directory in the image layout").with_path(path.string());
    return errno_error(what, path, err, err == ENOENT ? error_code::not_found : code);
}

// A directory below `parent_fd`, never through a symlink.
result<unique_fd> open_directory_at(int parent_fd, const std::string& name, const fs::path& shown, error_code code) {
    unique_fd fd(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return layout_error("cannot open directory", shown, errno, code);
    return fd;
}

// A regular file below `dir_fd`, never through a symlink, never blocking.
result<unique_fd> open_file_at(int dir_fd, const std::string& name, const fs::path& shown, error_code code,
                               struct ::stat& st) {
    unique_fd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC));
    if (!fd) return layout_error("cannot open", shown, errno, code);
    if (::fstat(fd.get(), &st) != 0) return errno_error("cannot read", shown, errno, code);
    if (!S_ISREG(st.st_mode))
        return make_error(code, "refusing a file that is not a regular file in the image layout")
            .with_path(shown.string());
    return fd;
}

// All of a small regular file. Outcomes: ok | `code` | not_found | bad_manifest (too large).
result<std::string> read_small_at(int dir_fd, const std::string& name, const fs::path& shown, std::size_t max_bytes,
                                  error_code code) {
    struct ::stat st {};
    REDIST_TRY(const unique_fd fd, open_file_at(dir_fd, name, shown, code, st));
    if (static_cast<std::uint64_t>(st.st_size) > max_bytes)
        return make_error(error_code::bad_manifest, "larger than " + std::to_string(max_bytes >> 20) + " MiB")
            .with_path(shown.string());
    std::string out(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t got = 0;
    while (got < out.size()) {
        REDIST_TRY(const std::size_t n, read_some(fd.get(), out.data() + got, out.size() - got, shown, code));
        if (n == 0) break;
        got += n;
    }
    out.resize(got);
    return out;
}

// The product's layout directory and its blobs/sha256 directory.
struct layout_dirs {
    unique_fd product, blobs;
};

result<layout_dirs> open_layout(const layout_location& at, error_code code) {
    // DIR itself is the user's to name (it may be a symlink); nothing below it is followed.
    const unique_fd root(::open(at.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root) return errno_error("cannot open the image layout directory", at.root, errno, error_code::not_found);
    layout_dirs out;
    REDIST_TRY(out.product, open_directory_at(root.get(), at.product, at.product_dir(), code));
    REDIST_TRY(const unique_fd blobs, open_directory_at(out.product.get(), "blobs", at.product_dir() / "blobs", code));
    REDIST_TRY(out.blobs, open_directory_at(blobs.get(), "sha256", at.product_dir() / "blobs" / "sha256", code));
    return out;
}

result<std::vector<oci_index_entry>> read_index_at(int product_fd, const fs::path& product_dir, error_code code,
                                                   std::string* annotations = nullptr) {
    const fs::path shown = product_dir / "index.json";
    REDIST_TRY(const std::string text, read_small_at(product_fd, "index.json", shown, kMaxIndexBytes, code));
    return parse_oci_index(text, shown.string(), annotations);
}

// A small blob, checked against its digest and size.
result<std::string> read_blob(int blobs_fd, const fs::path& product_dir, const std::string& digest, std::uint64_t size,
                              std::size_t max_bytes) {
    const std::string hex = digest.substr(7);
    const fs::path shown = product_dir / "blobs" / "sha256" / hex;
    if (size > max_bytes)
        return make_error(error_code::bad_manifest, "blob larger than " + std::to_string(max_bytes >> 20) + " MiB")
            .with_path(shown.string());
    REDIST_TRY(std::string bytes, read_small_at(blobs_fd, hex, shown, max_bytes, error_code::network));
    REDIST_TRY_VOID(check_oci_blob(bytes, digest, size, shown.string()));
    return bytes;
}

// The redistrib JSON of a label: index.json -> the image manifest tagged
// with it -> the layer titled as the URL names it.
result<std::string> layout_document(const layout_location& at) {
    REDIST_TRY(const layout_dirs dirs, open_layout(at, error_code::network));
    const fs::path dir = at.product_dir();
    REDIST_TRY(const auto entries, read_index_at(dirs.product.get(), dir, error_code::network));
    const auto entry = std::find_if(entries.rbegin(), entries.rend(),
                                    [&](const oci_index_entry& e) { return e.ref_name == at.reference; });
    if (entry == entries.rend())
        return make_error(error_code::not_found, "no manifest named '" + at.reference + "' in the image layout")
            .with_path((dir / "index.json").string());
    REDIST_TRY(const std::string manifest,
               read_blob(dirs.blobs.get(), dir, entry->digest, entry->size, oci_max_manifest_bytes));
    return oci_release_document(
        manifest, at.title, (dir / "blobs" / "sha256" / entry->digest.substr(7)).string(), [&](const oci_layer& layer) {
            return read_blob(dirs.blobs.get(), dir, layer.digest, layer.size, kMaxDocumentBytes);
        });
}

// /proc/self/fd/<fd>/<name>: `name` in the directory `fd` is, without
// walking the path to that directory again.
fs::path in_dir(const unique_fd& fd, const std::string& name) {
    return fs::path("/proc/self/fd") / std::to_string(fd.get()) / name;
}

result<void> write_in(const unique_fd& dir_fd, const fs::path& shown_dir, const std::string& name,
                      std::string_view bytes, durability how) {
    auto written = atomic_write(in_dir(dir_fd, name), bytes, how);
    if (!written.ok()) return std::move(written).error_value().with_path((shown_dir / name).string());
    return {};
}

// A directory below `parent_fd`, created when missing, never through a symlink.
result<unique_fd> make_directory_at(int parent_fd, const std::string& name, const fs::path& shown) {
    if (::mkdirat(parent_fd, name.c_str(), 0777 & ~process_umask()) != 0 && errno != EEXIST)
        return errno_error("cannot create directory", shown, errno);
    return open_directory_at(parent_fd, name, shown, error_code::filesystem);
}

}  // namespace

result<std::vector<oci_index_entry>> parse_oci_index(std::string_view body, std::string_view source,
                                                     std::string* annotations) {
    std::vector<oci_index_entry> out;
    std::uint64_t schema = 0;
    // Each entry is taken whole (raw, to be written back as it is), then read
    // for what redist needs from it.
    const auto entry_reader = [&](json::value& item) -> result<void> {
        oci_index_entry e;
        REDIST_TRY_VOID(item.get_raw_object(e.raw));
        auto read = json::read_document(
            e.raw, source, "image layout index",
            {{"mediaType", [&](json::value& v) { return v.get(e.media_type); }},
             {"digest", [&](json::value& v) { return v.get(e.digest); }, true},
             {"size", [&](json::value& v) { return v.get(e.size); }, true},
             {"annotations", [&](json::value& v) {
                  return v.read_object({{kRefName, [&](json::value& t) { return t.get(e.ref_name); }}});
              }}});
        if (!read.ok()) {
            error why = std::move(read).error_value();
            why.json_path = why.json_path.empty() ? item.path() : item.path() + "." + why.json_path;
            return why;
        }
        if (!valid_oci_digest(e.digest)) return item.bad("digest is not sha256:<64 lower-case hex digits>");
        out.push_back(std::move(e));
        return {};
    };
    std::string own_annotations;
    REDIST_TRY_VOID(
        json::read_document(body, source, "image layout index",
                            {{"schemaVersion", [&](json::value& v) { return v.get(schema); }, true},
                             {"manifests", [&](json::value& v) { return v.for_each(entry_reader); }, true},
                             {"annotations", [&](json::value& v) { return v.get_raw_object(own_annotations); }}}));
    if (schema != 2)
        return make_error(error_code::bad_manifest, "not an image index (schemaVersion is not 2)")
            .with_source(std::string(source))
            .with_json_path("schemaVersion");
    if (annotations != nullptr) *annotations = std::move(own_annotations);
    return out;
}

std::string oci_index_document(const std::vector<oci_index_entry>& manifests, std::string_view annotations) {
    json_writer w;
    w.begin_object();
    w.field("schemaVersion", 2);
    w.field("mediaType", kIndexType);
    w.key("manifests").begin_array();
    for (const auto& m : manifests) {
        if (!m.raw.empty()) {
            w.raw(m.raw);  // as another run or tool wrote it
            continue;
        }
        w.begin_object();
        w.field("mediaType", m.media_type.empty() ? oci_manifest_media_type : std::string_view(m.media_type));
        w.field("digest", m.digest);
        w.field("size", m.size);
        if (!m.ref_name.empty()) w.key("annotations").begin_object().field(kRefName, m.ref_name).end_object();
        w.end_object();
    }
    w.end_array();
    if (!annotations.empty()) w.key("annotations").raw(annotations);
    w.end_object();
    return w.str();
}

result<void> oci_layout_download(const std::string& url, const transfer_options& options, download_callbacks& callbacks,
                                 std::uint64_t resume_from, std::optional<std::uint64_t> range_last,
                                 transfer_failure_info* failure) {
    auto parsed = parse_layout_url(url);
    if (!parsed.ok()) return make_error(error_code::network, parsed.error_value().message).with_url(url);
    const layout_location& at = *parsed;
    if (at.what == oci_url::kind::document) {
        if (range_last) return make_error(error_code::internal, "a document is not fetched in ranges");
        REDIST_TRY(const std::string body, layout_document(at));
        return deliver_document(body, callbacks, resume_from);
    }
    if (at.what != oci_url::kind::blob)
        return make_error(error_code::network, "an image layout URL names no blob or document here").with_url(url);
    REDIST_TRY(const layout_dirs dirs, open_layout(at, error_code::network));
    const std::string hex = at.reference.substr(7);
    struct ::stat st {};
    REDIST_TRY(const unique_fd fd, open_file_at(dirs.blobs.get(), hex, at.product_dir() / "blobs" / "sha256" / hex,
                                                error_code::network, st));
    return read_open_file(fd.get(), url, options, callbacks, resume_from, range_last, failure);
}

result<std::vector<std::string>> oci_layout_list_tags(const std::string& base, const std::string& product) {
    REDIST_TRY(const layout_location at, parse_layout_url(join_url(join_url(base, product), "redist/")));
    REDIST_TRY(const layout_dirs dirs, open_layout(at, error_code::network));
    REDIST_TRY(const auto entries, read_index_at(dirs.product.get(), at.product_dir(), error_code::network));
    std::vector<std::string> tags;
    for (const auto& e : entries)
        if (valid_oci_tag(e.ref_name)) tags.push_back(e.ref_name);
    return tags;
}

// ---- writing -------------------------------------------------------------------------------

result<std::unique_ptr<oci_layout_writer>> oci_layout_writer::open(const std::string& base,
                                                                   const std::string& product) {
    if (base.size() <= kScheme) return make_error(error_code::usage, "oci-layout: needs a directory (oci-layout:DIR)");
    REDIST_TRY(const layout_location at, parse_layout_url(join_url(join_url(to_url(base), product), "redist/")));
    std::unique_ptr<oci_layout_writer> w(new oci_layout_writer());
    w->dir_ = at.product_dir();
    std::error_code ec;
    create_directories_masked(at.root, ec);
    if (ec) return errno_error("cannot create directory", at.root, ec.value());
    const unique_fd root(::open(at.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root) return errno_error("cannot open directory", at.root, errno);
    REDIST_TRY(w->dir_fd_, make_directory_at(root.get(), at.product, w->dir_));
    REDIST_TRY(const unique_fd blobs, make_directory_at(w->dir_fd_.get(), "blobs", w->dir_ / "blobs"));
    REDIST_TRY(w->blobs_fd_, make_directory_at(blobs.get(), "sha256", w->dir_ / "blobs" / "sha256"));
    REDIST_TRY(w->scratch_, claim_scratch_dir(w->dir_fd_.get(), w->dir_, ".redist-scratch-"));
    // The layout's marker: kept as it is when it already says version 1.0.0.
    auto marker = read_small_at(w->dir_fd_.get(), "oci-layout", w->dir_ / "oci-layout", 4096, error_code::filesystem);
    if (!marker.ok() || marker->find("\"1.0.0\"") == std::string::npos)
        REDIST_TRY_VOID(write_in(w->dir_fd_, w->dir_, "oci-layout", kLayoutFile, durability::contents));
    return w;
}

oci_layout_writer::~oci_layout_writer() { scratch_.release(); }

result<bool> oci_layout_writer::has_blob(const std::string& sha256, std::uint64_t size) {
    struct ::stat st {};
    auto fd = open_file_at(blobs_fd_.get(), sha256, dir_ / "blobs" / "sha256" / sha256, error_code::filesystem, st);
    if (!fd.ok() || static_cast<std::uint64_t>(st.st_size) != size) return false;
    auto digest = file_digest(fd->get(), 0, dir_ / "blobs" / "sha256" / sha256);
    return digest.ok() && *digest == sha256;
}

result<void> oci_layout_writer::push_blob(const std::string& sha256, const fs::path& file) {
    // `file` is the verified download in scratch(): moved, never copied.
    if (file.parent_path() != scratch_.path())
        return make_error(error_code::internal, "a layout blob must come from its scratch directory")
            .with_path(file.string());
    if (::renameat(scratch_.fd(), file.filename().c_str(), blobs_fd_.get(), sha256.c_str()) != 0)
        return errno_error("cannot rename into place", dir_ / "blobs" / "sha256" / sha256, errno);
    return {};
}

result<void> oci_layout_writer::push_blob(const std::string& sha256, std::string_view bytes) {
    if (sha256_hex(bytes) != sha256) return make_error(error_code::internal, "blob bytes do not match their digest");
    return write_in(blobs_fd_, dir_ / "blobs" / "sha256", sha256, bytes, durability::contents);
}

result<std::vector<oci_index_entry>> oci_layout_writer::read_index(std::string* annotations) {
    struct ::stat st {};
    if (::fstatat(dir_fd_.get(), "index.json", &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
        return std::vector<oci_index_entry>();
    // Another release's entries are kept: an index.json that cannot be read is not overwritten.
    return read_index_at(dir_fd_.get(), dir_, error_code::filesystem, annotations);
}

result<std::optional<std::string>> oci_layout_writer::tag_digest(const std::string& tag) {
    REDIST_TRY(const auto entries, read_index());
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        if (it->ref_name != tag) continue;
        REDIST_TRY(const bool intact, has_blob(it->digest.substr(7), it->size));
        return intact ? std::optional<std::string>(it->digest) : std::nullopt;
    }
    return std::optional<std::string>();
}

result<unique_fd> oci_layout_writer::lock_index() {
    // The product directory itself is the lock (flock on a descriptor of its
    // own): the layout keeps only what the image-spec names, no lock file.
    unique_fd fd(::openat(dir_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return errno_error("cannot open directory", dir_, errno);
    while (::flock(fd.get(), LOCK_EX) != 0) {
        if (errno != EINTR) return errno_error("cannot lock", dir_, errno);
    }
    return fd;
}

result<void> oci_layout_writer::put_manifest(const std::string& tag, const std::string& json,
                                             std::string_view media_type) {
    const std::string sha256 = sha256_hex(json);
    REDIST_TRY_VOID(push_blob(sha256, std::string_view(json)));
    // index.json is read, changed and renamed over: two runs writing one
    // layout at once would each drop the other's release. One at a time,
    // held until the rename is done.
    REDIST_TRY(const unique_fd lock, lock_index());
    std::string annotations;  // the index's own, kept
    REDIST_TRY(auto entries, read_index(&annotations));
    debug_pause("layout-index");  // tests: another run meets the lock here
    std::erase_if(entries, [&](const oci_index_entry& e) { return e.ref_name == tag; });
    entries.push_back({std::string(media_type), "sha256:" + sha256, tag, json.size()});
    std::sort(entries.begin(), entries.end(),
              [](const oci_index_entry& a, const oci_index_entry& b) { return a.ref_name < b.ref_name; });
    return write_in(dir_fd_, dir_, "index.json", oci_index_document(entries, annotations), durability::full);
}

}  // namespace redist
