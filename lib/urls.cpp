#include "redist/urls.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>

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

std::string to_url(std::string_view path_or_url) {
    if (path_or_url.find("://") != std::string_view::npos) return std::string(path_or_url);
    std::error_code ec;
    auto absolute = std::filesystem::absolute(std::filesystem::path(path_or_url), ec);
    if (ec) absolute = std::filesystem::path(path_or_url);
    return "file://" + absolute.lexically_normal().string();
}

}  // namespace redist
