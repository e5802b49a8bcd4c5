// check_versions.cpp — version numbers and library names as `redist check`
// reads them (see check_versions.hpp), and header_define(), which reads a
// version a product's header states.
#include "features/check_versions.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "redist/check.hpp"
#include "support/posix_file.hpp"

namespace redist {

namespace fs = std::filesystem;

std::optional<long> header_define(std::string_view text, std::string_view name) {
    auto blank = [](char c) { return c == ' ' || c == '\t'; };
    for (std::size_t start = 0; start < text.size();) {
        const auto nl = text.find('\n', start);
        std::string_view line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
        start = nl == std::string_view::npos ? text.size() : nl + 1;
        std::size_t i = 0;
        auto skip = [&] {
            const std::size_t from = i;
            while (i < line.size() && blank(line[i])) ++i;
            return i > from;
        };
        auto word = [&](std::string_view w) {
            if (line.substr(i, w.size()) != w) return false;
            i += w.size();
            return true;
        };
        skip();
        if (!word("#")) continue;
        skip();
        if (!word("define") || !skip() || !word(name) || !skip()) continue;
        long value = 0;
        std::size_t digits = 0;
        for (; i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])) && digits < 9; ++i, ++digits)
            value = value * 10 + (line[i] - '0');
        if (digits == 0 || (i < line.size() && !blank(line[i]) && line[i] != '\r' && line[i] != '/')) continue;
        return value;
    }
    return std::nullopt;
}

namespace checking {

std::vector<int> version_parts(std::string_view v) {
    std::vector<int> out;
    std::size_t i = 0;
    while (i < v.size()) {
        if (!std::isdigit(static_cast<unsigned char>(v[i]))) return {};
        int n = 0;
        while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i])) && n < 100000000)
            n = n * 10 + (v[i++] - '0');
        out.push_back(n);
        if (i < v.size()) {
            if (v[i] != '.') return {};
            ++i;
        }
    }
    return out;
}

// Two versions agree when they are equal on the parts both have
// ("9.19.0" and "9.19.0.56" agree; "9.19" and "9.22.0" do not).
bool versions_agree(const std::vector<int>& a, const std::vector<int>& b) {
    const std::size_t n = std::min(a.size(), b.size());
    return std::equal(a.begin(), a.begin() + static_cast<long>(n), b.begin());
}

int compare_versions(const std::vector<int>& a, const std::vector<int>& b) {
    for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
        const int x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

// "libcudnn.so.9.19.0" -> {"libcudnn.so", "9.19.0"}; names without ".so." -> {name, ""}.
std::pair<std::string, std::string> split_so_name(const std::string& name) {
    const auto at = name.find(".so.");
    if (at == std::string::npos) return {name, ""};
    return {name.substr(0, at + 3), name.substr(at + 4)};
}

// Whether a file is one of the driver's libraries (libcuda.so*,
// libnvidia-ml.so*): the check never loads those from the prefix, and
// the system's copy is no shadow of them: it is the one the check uses.
bool is_driver_library(const std::string& filename) {
    const auto stem = split_so_name(filename).first;
    return stem == "libcuda.so" || stem == "libnvidia-ml.so";
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    for (std::size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size())
        s.replace(at, from.size(), to);
    return s;
}

// The CUDA major of a receipt: its variant's ("cuda12"), else the cuda product's release.
std::optional<int> cuda_major_of(const receipt& r) {
    std::vector<int> parts;
    if (r.variant && r.variant->starts_with("cuda")) parts = version_parts(r.variant->substr(4));
    if (parts.empty() && r.product == "cuda") parts = version_parts(r.release_label);
    return parts.empty() ? std::nullopt : std::optional<int>(parts[0]);
}

// A machine file of at most `limit` bytes (read_file reads past the size of
// 0 that files under /proc report), or "" when it cannot be read.
std::string read_small_file(const fs::path& p, std::size_t limit) {
    auto text = read_file(p, limit, follow_links::yes);
    return text.ok() ? std::move(*text) : std::string();
}

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..." -> "580.65.06"
std::optional<std::string> kernel_module_version(const fs::path& file) {
    const std::string text = read_small_file(file, 4096);
    const auto at = text.find("Kernel Module");
    if (at == std::string::npos) return std::nullopt;
    std::istringstream words(text.substr(at + 13));
    std::string w;
    while (words >> w && w.size() < 32)
        if (!version_parts(w).empty() && w.find('.') != std::string::npos) return w;
    return std::nullopt;
}

}  // namespace checking

}  // namespace redist
