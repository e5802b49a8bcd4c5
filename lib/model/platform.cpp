#include "redist/platform.hpp"

#include <sys/stat.h>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include <simdjson.h>

#include "redist/manifest.hpp"
#include "redist/printable.hpp"
#include "redist/suggest.hpp"
#include "support/debug_pause.hpp"
#include "support/posix_file.hpp"

namespace redist {

namespace {

// Every file is read through the one reader (read_file): regular files only,
// bounded, never a FIFO or a device. What detection reads is small: a
// version.json, a cuda.h (under 1 MiB), /etc/nv_tegra_release and the device
// tree's compatible string.
constexpr std::uint64_t kMaxProbeBytes = 4u << 20;

std::optional<std::string> system_read_file(const std::string& path) {
    auto text = read_file(path, kMaxProbeBytes, follow_links::yes);
    if (!text.ok()) return std::nullopt;
    return std::move(text).value();
}

bool system_is_file(const std::string& path) {
    struct ::stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_tegra(const host_probe& probe) {
    if (probe.read_file("/etc/nv_tegra_release").has_value()) return true;
    // The device tree "compatible" property is a list of NUL-separated
    // strings ("nvidia,p3737-0000\0nvidia,tegra234\0"); std::string::find
    // sees across the NULs.
    const auto compatible = probe.read_file("/proc/device-tree/compatible");
    return compatible && compatible->find("tegra") != std::string::npos;
}

// Leading decimal number of "13.0.1" -> 13; nullopt if there is none or it
// is absurd.
std::optional<int> leading_major(std::string_view version) {
    int major = 0;
    std::size_t i = 0;
    for (; i < version.size() && version[i] >= '0' && version[i] <= '9'; ++i) {
        major = major * 10 + (version[i] - '0');
        if (major > 1000) return std::nullopt;
    }
    if (i == 0 || major <= 0) return std::nullopt;
    return major;
}

// version.json of a CUDA toolkit: {"cuda": {"name": "CUDA SDK", "version": "13.0.1"}, ...}.
std::optional<std::string> version_from_version_json(const std::string& text) {
    simdjson::ondemand::parser parser;
    const simdjson::padded_string padded(text);
    simdjson::ondemand::document doc;
    if (parser.iterate(padded).get(doc) != simdjson::SUCCESS) return std::nullopt;
    simdjson::ondemand::object root;
    if (doc.get_object().get(root) != simdjson::SUCCESS) return std::nullopt;
    simdjson::ondemand::object cuda;
    if (root.find_field_unordered("cuda").get_object().get(cuda) != simdjson::SUCCESS) return std::nullopt;
    std::string_view version;
    if (cuda.find_field_unordered("version").get_string().get(version) != simdjson::SUCCESS) {
        return std::nullopt;
    }
    // Copy now: the view dies with the parser.
    std::string copy(version);
    if (!leading_major(copy)) return std::nullopt;
    return copy;
}

// include/cuda.h of a toolkit: "#define CUDA_VERSION 12040" is 12.4
// (major * 1000 + minor * 10). The first such line decides.
std::optional<std::string> version_from_cuda_h(std::string_view text) {
    constexpr std::string_view kDefine = "#define CUDA_VERSION";
    for (std::size_t pos = text.find(kDefine); pos != std::string_view::npos; pos = text.find(kDefine, pos + 1)) {
        std::size_t i = pos + kDefine.size();
        if (i >= text.size() || (text[i] != ' ' && text[i] != '\t')) continue;
        while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
        long value = 0;
        std::size_t digits = 0;
        for (; i < text.size() && text[i] >= '0' && text[i] <= '9' && digits < 7; ++i, ++digits)
            value = value * 10 + (text[i] - '0');
        if (digits == 0 || value < 1000) return std::nullopt;
        return std::to_string(value / 1000) + "." + std::to_string(value % 1000 / 10);
    }
    return std::nullopt;
}

std::optional<cuda_detection> make_detection(const std::string& version, std::string reason) {
    const auto major = leading_major(version);
    if (!major) return std::nullopt;
    cuda_detection out{*major, std::nullopt, version, std::move(reason)};
    if (const auto parsed = parse_cuda_version(version.substr(0, version.find('.', version.find('.') + 1))))
        out.minor = parsed->minor;
    return out;
}

// A toolkit directory's files: version.json, else include/cuda.h. `where`
// says how the directory was found ("CUDA_HOME=/opt/cuda").
std::optional<cuda_detection> probe_toolkit_dir(const host_probe& probe, const std::string& where,
                                                const std::string& dir) {
    std::string base = dir;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    if (const auto text = probe.read_file(base + "/version.json")) {
        if (const auto version = version_from_version_json(*text))
            if (auto found = make_detection(*version, where + ", version.json")) return found;
    }
    if (const auto text = probe.read_file(base + "/include/cuda.h")) {
        if (const auto version = version_from_cuda_h(*text))
            if (auto found = make_detection(*version, where + ", include/cuda.h")) return found;
    }
    return std::nullopt;
}

// The toolkit of the first `nvcc` on PATH: the directory above its bin/.
// The file is found, never run. Relative PATH entries are skipped (they
// name a different directory in every working directory).
std::optional<std::string> nvcc_toolkit_on_path(const host_probe& probe) {
    const auto path = probe.getenv("PATH");
    if (!path) return std::nullopt;
    std::string_view rest = *path;
    while (!rest.empty()) {
        const auto colon = rest.find(':');
        std::string dir(rest.substr(0, colon));
        rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
        if (dir.empty() || dir.front() != '/') continue;
        while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
        if (!probe.is_file || !probe.is_file(dir + "/nvcc")) continue;
        const auto slash = dir.rfind('/');
        return slash == 0 ? std::string("/") : dir.substr(0, slash);
    }
    return std::nullopt;
}

}  // namespace

host_probe host_probe::system() {
    host_probe probe;
    probe.machine = [] {
        struct utsname info {};
        if (uname(&info) != 0) return std::string();
        return std::string(info.machine);
    };
    probe.read_file = system_read_file;
    probe.getenv = [](const std::string& name) -> std::optional<std::string> {
        const char* value = std::getenv(name.c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
    };
    probe.is_file = system_is_file;
    // Test builds only: a machine without /usr/local/cuda, on one that has it.
    if (const char* dir = REDIST_TEST_OVERRIDE("REDIST_TEST_DEFAULT_TOOLKIT")) probe.default_toolkit = dir;
    return probe;
}

result<std::string> detect_host_platform(const host_probe& probe) {
    const std::string machine = probe.machine();
    if (machine == "x86_64" || machine == "amd64") return std::string("linux-x86_64");
    if (machine == "aarch64" || machine == "arm64") {
        return std::string(is_tegra(probe) ? "linux-aarch64" : "linux-sbsa");
    }
    if (machine == "ppc64le") return std::string("linux-ppc64le");
    return make_error(error_code::not_found,
                      "unknown machine '" + machine +
                          "'; pass --platform (e.g. linux-x86_64, linux-sbsa, linux-aarch64, windows-x86_64)");
}

std::optional<cuda_detection> detect_cuda(const host_probe& probe) {
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
        const auto dir = probe.getenv(var);
        if (!dir || dir->empty()) continue;
        if (auto found = probe_toolkit_dir(probe, std::string(var) + "=" + *dir, *dir)) return found;
    }
    if (!probe.default_toolkit.empty())
        if (auto found = probe_toolkit_dir(probe, probe.default_toolkit, probe.default_toolkit)) return found;
    if (const auto dir = nvcc_toolkit_on_path(probe))
        if (auto found = probe_toolkit_dir(probe, "nvcc on PATH in " + *dir + "/bin", *dir)) return found;
    return std::nullopt;
}

std::optional<cuda_detection> cuda_from_driver(int encoded, std::string where) {
    if (encoded < 1000 || encoded > 1000 * 1000) return std::nullopt;
    const int major = encoded / 1000, minor = (encoded % 1000) / 10;
    return cuda_detection{major, minor, std::to_string(major) + "." + std::to_string(minor), std::move(where),
                          cuda_origin::driver};
}

const std::vector<std::string>& known_platforms() {
    static const std::vector<std::string> platforms{"linux-x86_64", "linux-sbsa",     "linux-aarch64", "linux-ppc64le",
                                                    "linux-all",    "windows-x86_64", "windows-arm64", "source"};
    return platforms;
}

std::optional<std::string> platform_problem(std::string_view platform) {
    const auto& known = known_platforms();
    if (std::find(known.begin(), known.end(), platform) != known.end()) return std::nullopt;
    const std::string hint = did_you_mean(platform, known);
    std::string list;
    for (const auto& p : known) list += (list.empty() ? "" : ", ") + p;
    return "unknown platform '" + printable(platform) + "'" + (hint.empty() ? " (known: " + list + ")" : hint);
}

}  // namespace redist
