// redist/platform.hpp — host platform and CUDA variant detection.
//
// Detection reads the machine through a host_probe, so tests can describe any
// machine (a Jetson, a box without CUDA) without depending on this one.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

struct host_probe {
    // uname(2) machine field: "x86_64", "aarch64", ...
    std::function<std::string()> machine;
    // Reads a whole file; nullopt if it does not exist, is no regular file or
    // is unreadable.
    std::function<std::optional<std::string>(const std::string& path)> read_file;
    // Whether `path` names a regular file (a symlink to one counts).
    std::function<bool(const std::string& path)> is_file;
    // Environment lookup; nullopt if unset.
    std::function<std::optional<std::string>(const std::string& name)> getenv;
    // Where a toolkit is looked for after $CUDA_HOME and $CUDA_PATH.
    std::string default_toolkit = "/usr/local/cuda";
    // Nothing runs a command: what is found on the machine is read, never
    // executed (installing never executes installed code).

    // The real machine.
    static host_probe system();
};

// x86_64 -> linux-x86_64; aarch64 -> linux-sbsa, except on Jetson/Tegra
// (/etc/nv_tegra_release exists, or /proc/device-tree/compatible mentions
// "tegra"), which maps to linux-aarch64; ppc64le -> linux-ppc64le.
// Outcomes: ok | not_found (unknown machine; message says to pass --platform).
result<std::string> detect_host_platform(const host_probe& probe);

// The platform keys NVIDIA's manifests use: linux-x86_64, linux-sbsa,
// linux-aarch64 (Jetson), linux-ppc64le, linux-all, windows-x86_64,
// windows-arm64, source.
const std::vector<std::string>& known_platforms();

// Why `platform` (from --platform or a project file) is none of them, with
// the likely intent ("unknown platform 'linux-x86-64' (did you mean
// 'linux-x86_64'?)"), or nullopt when it is one. A platform that is not
// known would select nothing from any manifest: refused before anything is
// read, not after a download.
std::optional<std::string> platform_problem(std::string_view platform);

// Where a CUDA version was found: a toolkit's files (the variant to build
// against), or the system driver's answer (the newest CUDA it runs).
enum class cuda_origin : std::uint8_t { toolkit, driver };

struct cuda_detection {
    int major = 0;             // e.g. 13
    std::optional<int> minor;  // e.g. 0, where known
    std::string version;       // "13.0.1" where known, "13.0" from cuda.h or the driver
    std::string reason;        // "CUDA_HOME=/usr/local/cuda, version.json"; the driver: where its libcuda is
    cuda_origin origin = cuda_origin::toolkit;
};

// Finds the installed CUDA toolkit from its files alone, never running
// anything: the first of $CUDA_HOME, $CUDA_PATH, /usr/local/cuda and the
// directory above the first `nvcc` on PATH (<dir>/bin/nvcc: found, never run)
// that holds a readable version.json ({"cuda": {"version": "13.0.1"}}) or,
// failing that, include/cuda.h (`#define CUDA_VERSION 13000`: 13.0).
// Returns nullopt when no toolkit is found.
std::optional<cuda_detection> detect_cuda(const host_probe& probe);

// What the system's NVIDIA driver supports, as cuDriverGetVersion encodes it
// (12080: CUDA 12.8), as a detection of origin driver; `where` is the
// libcuda.so.1 that answered (redist::detect_driver asks it, never one in a
// prefix). nullopt for a value that is no CUDA version (below 1000).
std::optional<cuda_detection> cuda_from_driver(int encoded, std::string where);

REDIST_API_END
}  // namespace redist
