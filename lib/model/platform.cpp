#include "redist/platform.hpp"

#include <sys/utsname.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string_view>

#include <simdjson.h>

#include "redist/printable.hpp"
#include "redist/suggest.hpp"

namespace redist {

namespace {

std::optional<std::string> system_read_file(const std::string& path) {
    // ifstream happily "opens" a directory on Linux and then fails to read;
    // reject it up front so that a directory never reads as an empty file.
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return std::nullopt;
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    // /proc and /sys files report size 0, so read until EOF instead of
    // trusting the size.
    std::string text;
    char buffer[4096];
    while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
        text.append(buffer, static_cast<std::size_t>(in.gcount()));
        if (in.eof()) break;
    }
    if (in.bad()) return std::nullopt;
    return text;
}

struct pipe_closer {
    void operator()(std::FILE* f) const noexcept {
        if (f != nullptr) pclose(f);
    }
};

std::optional<std::string> system_run(const std::string& command) {
    // stderr goes to /dev/null: the library never prints, and "sh: nvcc: not
    // found" would otherwise land on the user's terminal.
    const std::string wrapped = "( " + command + " ) 2>/dev/null";
    std::unique_ptr<std::FILE, pipe_closer> pipe(popen(wrapped.c_str(), "r"));
    if (!pipe) return std::nullopt;
    std::string out;
    char buffer[4096];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, pipe.get())) > 0) out.append(buffer, n);
    // pclose() gives the exit status; a command that is missing (sh exits 127)
    // or fails must not count as having produced output.
    const int status = pclose(pipe.release());
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
    return out;
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

// `nvcc --version` ends with
//   "Cuda compilation tools, release 13.0, V13.0.88"
// The "V" build version is the more precise; "release X.Y" is the fallback.
std::optional<std::string> version_from_nvcc_output(std::string_view out) {
    const auto release = out.find("release ");
    if (release == std::string_view::npos) return std::nullopt;
    auto take_version = [&](std::size_t pos) {
        std::size_t end = pos;
        while (end < out.size() && ((out[end] >= '0' && out[end] <= '9') || out[end] == '.')) ++end;
        std::string v(out.substr(pos, end - pos));
        while (!v.empty() && v.back() == '.') v.pop_back();
        return v;
    };
    const auto vpos = out.find(", V", release);
    if (vpos != std::string_view::npos) {
        std::string v = take_version(vpos + 3);
        if (leading_major(v)) return v;
    }
    std::string v = take_version(release + 8);
    if (leading_major(v)) return v;
    return std::nullopt;
}

std::optional<cuda_detection> make_detection(const std::string& version, std::string reason) {
    const auto major = leading_major(version);
    if (!major) return std::nullopt;
    return cuda_detection{*major, version, std::move(reason)};
}

std::optional<cuda_detection> probe_toolkit_dir(const host_probe& probe, const std::string& var,
                                                const std::string& dir) {
    std::string base = dir;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    if (const auto text = probe.read_file(base + "/version.json")) {
        if (const auto version = version_from_version_json(*text)) {
            return make_detection(*version, var + "=" + dir + " (version.json: " + *version + ")");
        }
    }
    if (const auto out = probe.run(shell_quote(base + "/bin/nvcc") + " --version")) {
        if (const auto version = version_from_nvcc_output(*out)) {
            return make_detection(*version, var + "=" + dir + " (bin/nvcc --version: " + *version + ")");
        }
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
    probe.run = system_run;
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
        if (auto found = probe_toolkit_dir(probe, var, *dir)) return found;
    }
    if (const auto text = probe.read_file("/usr/local/cuda/version.json")) {
        if (const auto version = version_from_version_json(*text)) {
            if (auto found = make_detection(*version, "/usr/local/cuda/version.json: " + *version)) return found;
        }
    }
    if (const auto out = probe.run("nvcc --version")) {
        if (const auto version = version_from_nvcc_output(*out)) {
            if (auto found = make_detection(*version, "nvcc on PATH (nvcc --version: " + *version + ")")) {
                return found;
            }
        }
    }
    return std::nullopt;
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
