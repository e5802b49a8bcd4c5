#include "redist/urls.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>

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

std::string artifact_url(std::string_view directory, std::string_view relative_path, std::string_view sha256) {
    constexpr std::string_view redist_dir = "/redist/";
    if (is_oci_url(directory) && directory.ends_with(redist_dir)) {
        std::string out(directory.substr(0, directory.size() - redist_dir.size()));
        out += "/blobs/sha256:";
        out += sha256;
        return out;
    }
    return join_url(directory, relative_path);
}

std::string mirror_artifact_url(std::string_view mirror, std::string_view product, std::string_view relative_path,
                                std::string_view sha256) {
    return artifact_url(join_url(join_url(to_url(mirror), product), "redist/"), relative_path, sha256);
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
