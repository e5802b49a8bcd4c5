#include "redist/urls.hpp"
#include "model/urls.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <utility>

#include "support/hex.hpp"
#include "support/safe_path.hpp"

namespace redist {

std::string join_url(std::string_view base, std::string_view relative) {
    std::string out(base);
    while (!out.empty() && out.back() == '/') out.pop_back();
    while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
    out += '/';
    out += relative;
    return out;
}

std::string index_url(std::string_view base, std::string_view product) {
    return join_url(join_url(base, product), "redist/");
}

std::string manifest_url(std::string_view base, std::string_view product, std::string_view label) {
    std::string name = "redistrib_";
    name += label;
    name += ".json";
    return join_url(join_url(join_url(base, product), "redist"), name);
}

std::optional<std::string> base_of_manifest_url(std::string_view url, std::string_view product,
                                                std::string_view label) {
    const std::string tail = manifest_url("", product, label);  // "/<product>/redist/redistrib_<label>.json"
    if (url.size() <= tail.size() || !url.ends_with(tail)) return std::nullopt;
    return std::string(url.substr(0, url.size() - tail.size()));
}

std::optional<std::string> base_of_artifact_url(std::string_view url, std::string_view product) {
    if (product.empty()) return std::nullopt;
    const std::string segment = "/" + std::string(product) + "/redist/";
    const auto at = url.rfind(segment);
    if (at == std::string_view::npos || at == 0 || at + segment.size() >= url.size()) return std::nullopt;
    return std::string(url.substr(0, at));
}

std::string url_directory(std::string_view url) {
    const auto slash = url.rfind('/');
    if (slash == std::string_view::npos) return {};
    return std::string(url.substr(0, slash + 1));
}

bool is_file_url(std::string_view url) noexcept {
    // Any "file:" URL, case-insensitively: download() reads every one of them
    // itself (and refuses the malformed ones), so they must never reach libcurl.
    constexpr std::string_view scheme = "file:";
    return url.size() >= scheme.size() && std::equal(scheme.begin(), scheme.end(), url.begin(), [](char a, char b) {
               return a == std::tolower(static_cast<unsigned char>(b));
           });
}

namespace {

bool iequals_prefix(std::string_view text, std::string_view prefix) noexcept {
    return text.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), text.begin(), [](char a, char b) {
               return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
           });
}

// `path` is `root` or lies below it (both lexically normal).
bool at_or_under(const std::filesystem::path& root, const std::filesystem::path& path) {
    return path == root || is_strictly_under(root, path);
}

}  // namespace

std::optional<std::string> file_url_to_path(std::string_view url, std::string& path) {
    url.remove_prefix(5);  // "file:", any case
    if (url.starts_with("//")) {
        url.remove_prefix(2);
        const auto slash = url.find('/');
        const std::string_view host = url.substr(0, slash);
        if (!host.empty() && !(host.size() == 9 && iequals_prefix(host, "localhost")))
            return "file URL names a host other than localhost";
        if (slash == std::string_view::npos) return "file URL without a path";
        url.remove_prefix(slash);
    }
    if (url.empty() || url.front() != '/') return "file URL without an absolute path";
    path.clear();
    path.reserve(url.size());
    for (std::size_t i = 0; i < url.size(); ++i) {
        if (url[i] == '%' && i + 2 < url.size() && hex_value(url[i + 1]) >= 0 && hex_value(url[i + 2]) >= 0) {
            const char c = static_cast<char>(hex_value(url[i + 1]) * 16 + hex_value(url[i + 2]));
            if (c == '/' || c == '\0') return "file URL with an encoded '/' or NUL in its path";
            path += c;
            i += 2;
        } else {
            path += url[i];
        }
    }
    for (std::size_t start = 0; start <= path.size();) {
        std::size_t end = path.find('/', start);
        if (end == std::string::npos) end = path.size();
        if (path.compare(start, end - start, "..") == 0) return "file URL with '..' in its path";
        start = end + 1;
    }
    return std::nullopt;
}

namespace {

constexpr std::string_view oci_layout_scheme = "oci-layout:";

// The local path a file:// or oci-layout: URL names, or why it names none.
std::optional<std::string> local_url_path(std::string_view url, std::string& path) {
    if (is_file_url(url)) return file_url_to_path(url, path);
    url.remove_prefix(oci_layout_scheme.size());
    if (url.empty() || url.front() != '/') return "oci-layout: without an absolute path";
    if (url.find('\0') != std::string_view::npos) return "oci-layout: path with a NUL byte";
    path = std::string(url);
    for (std::size_t start = 0; start <= path.size();) {
        const std::size_t end = std::min(path.find('/', start), path.size());
        if (path.compare(start, end - start, "..") == 0) return "oci-layout: path with '..' in it";
        start = end + 1;
    }
    return std::nullopt;
}

}  // namespace

std::vector<std::filesystem::path> local_roots(const std::vector<std::string>& urls) {
    std::vector<std::filesystem::path> out;
    for (const auto& u : urls) {
        const std::string url = to_url(u);
        std::string path;
        if ((is_file_url(url) || is_oci_layout_url(url)) && !local_url_path(url, path))
            out.push_back(std::filesystem::path(path).lexically_normal());
    }
    return out;
}

bool is_oci_layout_url(std::string_view url) noexcept { return iequals_prefix(url, oci_layout_scheme); }

bool is_local_url(std::string_view url) noexcept { return is_file_url(url) || is_oci_layout_url(url); }

bool is_oci_url(std::string_view url) noexcept {
    return iequals_prefix(url, "oci://") || iequals_prefix(url, "oci+http://") || is_oci_layout_url(url);
}

namespace {

// The scheme (lower-case) and the authority of "scheme://authority/...".
std::pair<std::string, std::string_view> scheme_and_authority(std::string_view url) {
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string_view::npos) return {};
    std::string scheme;
    for (const char c : url.substr(0, scheme_end))
        scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string_view authority = url.substr(scheme_end + 3);
    return {scheme, authority.substr(0, authority.find_first_of("/?#"))};
}

}  // namespace

std::string url_origin(std::string_view url) {
    auto [scheme, authority] = scheme_and_authority(url);
    if (scheme == "oci") scheme = "https";
    else if (scheme == "oci+http") scheme = "http";
    if (scheme != "http" && scheme != "https") return {};
    if (const auto at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
    if (authority.empty()) return {};
    const auto bracket = authority.rfind(']');
    const auto colon = authority.rfind(':');
    const bool has_port = colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket);
    const std::string_view host = has_port ? authority.substr(0, colon) : authority;
    const std::string_view port = has_port ? authority.substr(colon + 1) : std::string_view();
    if (host.empty()) return {};
    std::string out = scheme + "://";
    for (const char c : host) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out += ':';
    out += port.empty() ? std::string(scheme == "https" ? "443" : "80") : std::string(port);
    return out;
}

bool url_has_user_info(std::string_view url) noexcept {
    const auto scheme_end = url.find("://");
    if (scheme_end == std::string_view::npos) return false;
    const std::string_view rest = url.substr(scheme_end + 3);
    return rest.substr(0, rest.find_first_of("/?#")).find('@') != std::string_view::npos;
}

source_kind source_kind_of(std::string_view url) noexcept {
    if (is_file_url(url)) return source_kind::file;
    if (is_oci_layout_url(url)) return source_kind::layout;
    if (is_oci_url(url)) return source_kind::registry;
    return source_kind::http;
}

bool names_url(std::string_view text) noexcept {
    return text.find("://") != std::string_view::npos || is_oci_layout_url(text);
}

std::optional<std::string_view> oci_layout_dir(std::string_view text) noexcept {
    if (!is_oci_layout_url(text)) return std::nullopt;
    return text.substr(oci_layout_scheme.size());
}

std::string oci_layout_url(std::string_view dir) { return to_url(std::string(oci_layout_scheme) + std::string(dir)); }

namespace {

// The segments of a '/'-separated path, empty ones left out.
std::vector<std::string_view> path_segments(std::string_view path) {
    std::vector<std::string_view> out;
    for (std::size_t start = 0; start < path.size();) {
        const std::size_t end = std::min(path.find('/', start), path.size());
        if (end > start) out.push_back(path.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

bool has_dot_segment(std::string_view path) {
    for (const auto segment : path_segments(path))
        if (segment == "." || segment == "..") return true;
    return false;
}

// remove_dot_segments (RFC 3986 5.2.4) of `reference` appended to `segments`,
// never below `floor` segments: a ".." there is dropped when `clamp`, else
// refused (false).
bool append_reference(std::vector<std::string_view>& segments, std::size_t floor, bool clamp,
                      std::string_view reference, bool& directory) {
    directory = false;
    for (const auto segment : path_segments(reference)) {
        directory = segment == "." || segment == "..";
        if (segment == ".") continue;
        if (segment != "..") {
            segments.push_back(segment);
            continue;
        }
        if (segments.size() > floor) segments.pop_back();
        else if (!clamp) return false;
    }
    if (reference.ends_with('/')) directory = true;
    return true;
}

std::string joined(std::string_view prefix, const std::vector<std::string_view>& segments, bool directory) {
    std::string out(prefix);
    for (const auto segment : segments) {
        out += '/';
        out += segment;
    }
    if (directory || segments.empty()) out += '/';
    return out;
}

}  // namespace

result<std::string> resolve_reference(std::string_view directory, std::string_view relative_path) {
    if (!has_dot_segment(relative_path)) return join_url(directory, relative_path);
    // "scheme://authority" stays as it is; only the path is merged.
    const auto colon = directory.find(':');
    const auto slash = directory.find('/');
    if (colon == std::string_view::npos || colon == 0 || (slash != std::string_view::npos && slash < colon))
        return make_error(error_code::bad_manifest, "cannot resolve relative_path against a base that is not a URL")
            .with_url(sanitize_url(directory));
    std::size_t path_at = colon + 1;
    if (directory.substr(path_at).starts_with("//"))
        path_at = std::min(directory.find('/', path_at + 2), directory.size());
    const std::string_view prefix = directory.substr(0, path_at);
    std::string_view path = directory.substr(path_at);
    path = path.substr(0, path.rfind('/') == std::string_view::npos ? 0 : path.rfind('/') + 1);  // RFC 3986 5.2.3 merge
    std::vector<std::string_view> segments = path_segments(path);
    const bool file = is_file_url(directory);
    const std::size_t floor = file ? segments.size() - std::min<std::size_t>(segments.size(), 2) : 0;
    bool trailing = false;
    if (!append_reference(segments, floor, file, relative_path, trailing))
        return make_error(error_code::bad_manifest, "relative_path '" + std::string(relative_path) +
                                                        "' climbs above the root of " + sanitize_url(prefix) + "/")
            .with_url(sanitize_url(directory));
    return joined(prefix, segments, trailing);
}

std::string artifact_url(std::string_view directory, std::string_view relative_path, std::string_view sha256) {
    constexpr std::string_view redist_dir = "/redist/";
    if (is_oci_url(directory) && directory.ends_with(redist_dir)) {
        std::string out(directory.substr(0, directory.size() - redist_dir.size()));
        out += "/blobs/sha256:";
        out += sha256;
        return out;
    }
    auto resolved = resolve_reference(directory, relative_path);
    return resolved.ok() ? std::move(resolved).value() : std::string();
}

std::string mirror_artifact_path(std::string_view product, std::string_view relative_path) {
    std::vector<std::string_view> segments = {product, "redist"};
    bool trailing = false;
    (void)append_reference(segments, 0, true, relative_path, trailing);
    return joined("", segments, trailing).substr(1);
}

std::string mirror_artifact_url(std::string_view mirror, std::string_view product, std::string_view relative_path,
                                std::string_view sha256) {
    const std::string base = to_url(mirror);
    if (is_oci_url(base)) return artifact_url(join_url(join_url(base, product), "redist/"), relative_path, sha256);
    return join_url(base, mirror_artifact_path(product, relative_path));
}

std::optional<std::string> source_url_problem(std::string_view url, const std::vector<std::filesystem::path>& roots) {
    if (iequals_prefix(url, "https://") || iequals_prefix(url, "http://") ||
        (is_oci_url(url) && !is_oci_layout_url(url)))
        return std::nullopt;
    if (!is_file_url(url) && !is_oci_layout_url(url))
        return "not an http://, https://, oci://, oci+http://, oci-layout: or file:// URL";
    std::string decoded;
    if (auto bad = local_url_path(url, decoded)) return bad;
    namespace fs = std::filesystem;
    const fs::path path = fs::path(decoded).lexically_normal();
    std::error_code ec;
    const fs::path real = fs::weakly_canonical(path, ec);
    for (const auto& root : roots) {
        if (!at_or_under(root.lexically_normal(), path)) continue;
        std::error_code root_ec;
        const fs::path real_root = fs::weakly_canonical(root, root_ec);
        if (!ec && !root_ec && at_or_under(real_root, real)) return std::nullopt;
    }
    return "a local path outside the local mirrors and base URL given on the command line (or the project's own "
           "local mirror)";
}

std::string to_url(std::string_view path_or_url) {
    const bool layout = is_oci_layout_url(path_or_url);
    if (layout) {
        path_or_url.remove_prefix(oci_layout_scheme.size());
        if (path_or_url.empty()) return std::string(oci_layout_scheme);  // no directory: refused where it is used
    } else if (path_or_url.find("://") != std::string_view::npos) return std::string(path_or_url);
    std::error_code ec;
    auto absolute = std::filesystem::absolute(std::filesystem::path(path_or_url), ec);
    if (ec) absolute = std::filesystem::path(path_or_url);
    return std::string(layout ? oci_layout_scheme : "file://") + absolute.lexically_normal().string();
}

}  // namespace redist
