// redist/check.hpp — post-install checks: does what redist installed work on
// this machine?
//
// redist proves that the bytes are right; these checks prove the next step,
// using what only the receipts know (which files, which version, which CUDA
// variant):
//   resolve   every ELF file's DT_NEEDED resolves the way ld.so would for a
//             program that puts the prefix's lib first (RPATH, the prefix,
//             LD_LIBRARY_PATH, RUNPATH with $ORIGIN, /etc/ld.so.cache, the
//             default directories);
//   runtime   libraries the installed code loads with dlopen (libcublasLt,
//             libnvrtc) are found (warnings only);
//   load      every installed library dlopen(RTLD_NOW)s, in dependency order,
//             in a child process with a clean environment, leading its own
//             process group, killed whole at the timeout (a bad library must
//             not take the caller down, nor leave a process behind);
//   version   versioned file names and version headers (cudnn_version.h)
//             agree with the receipt, and the product's own version function
//             (cudnnGetVersion, ...) returns it;
//   shadow    no other copy of an installed SONAME with another version is
//             reachable through LD_LIBRARY_PATH or ld.so.cache;
//   driver    the NVIDIA driver supports the installed CUDA variant; every
//             GPU's compute capability is one the release supports;
//   gpu-code  every installed file with CUDA kernels (a fatbin) carries SASS
//             or PTX that every GPU here can run, read from its fatbin
//             sections without running anything;
//   deps      what a release needs of the CUDA toolkit (dependencies.hpp:
//             cuDNN's cuda_cudart, libcublas, cuda_nvrtc) has receipts in the
//             prefix (warnings only: a toolkit elsewhere may provide it);
//   gpu       (opt-in) one real operation on the GPU: a cuDNN convolution
//             against a CPU reference, a cudart copy round trip, a cuBLAS GEMM.
//
// CUDA is never linked: everything CUDA goes through dlopen/dlsym in the child.
// The library never prints: the findings are data; the tools render them.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

enum class check_severity : std::uint8_t {
    info,     // something worth saying that is fine (a probe's answer, the driver found)
    warning,  // might bite (no driver on a build machine, a dlopen-only dependency missing)
    failure,  // will bite: a program using the prefix fails or misbehaves
};
const char* to_string(check_severity s) noexcept;

struct check_finding {
    std::string
        check;  // "resolve", "runtime", "load", "version", "shadow", "driver", "gpu", "gpu-code", "gpu-run", "deps"
    check_severity severity = check_severity::info;
    std::string component;  // empty for machine-wide findings (driver)
    std::string path;       // prefix-relative file the finding is about, if any
    std::string message;    // one line; names from the prefix are embedded raw: escape before printing
};

// How much runs. The parent's checks on the files (resolve, runtime,
// file-name and header versions, shadow) are the same at both depths. The
// driver is always the system's libcuda.so.1 and libnvidia-ml.so.1, never a
// copy inside the prefix (whatever path leads there).
//   full   every library dlopen(RTLD_NOW), dependencies first; the version
//          probes; the driver's version and each GPU's compute capability
//          (from NVML when it answers, else cuInit and the driver API).
//          `redist check`, and `fetch --check`.
//   quick  no installed code at all: files are read (ELF, version headers,
//          file names); one child asks the system's driver its version
//          (cuDriverGetVersion, libcuda RTLD_LAZY, never cuInit) and the GPUs
//          from NVML when it answers. What the post-install check of `fetch`
//          runs: installing must never execute what it installed. It does
//          not see what only loading shows: an undefined symbol, a failing
//          constructor, a version function that disagrees; nor GPU
//          architectures where NVML is missing or CUDA_VISIBLE_DEVICES is set
//          (the preflight before the download checks those).
enum class check_depth : std::uint8_t { full, quick };

struct driver_info;  // below

// A GPU architecture: compute capability 9.0 is {9, 0}.
struct compute_capability {
    int major = 0, minor = 0;
};

struct check_options {
    std::filesystem::path prefix;
    std::vector<std::string> components;  // empty: every installed component
    bool gpu = false;                     // also run one real operation on the GPU (implies full)
    bool load = true;                     // the child-process checks (load, probes, driver)
    check_depth depth = check_depth::full;
    // The loader search path the user's programs see (the tool passes
    // $LD_LIBRARY_PATH); searched after the prefix.
    std::string ld_library_path;
    // An executable that runs run_check_probe() when called as
    // `<helper> __check-probe OPS...` (the redist tool). Empty: fork and run
    // the probe in the forked child without exec (fine in single-threaded callers).
    std::filesystem::path helper;
    std::chrono::milliseconds timeout{60000};  // the child is killed after this
    // The driver's answer, asked before the install (driver_query below,
    // given this prefix, so that it too shuns the prefix's copies): used
    // instead of asking again when it asked the same libcuda.so.1 (asked at
    // full depth if this check is full).
    // Null: the check asks the driver itself. Not owned.
    const driver_info* driver_asked = nullptr;
    // The GPUs the architecture checks (gpu, gpu-code) judge, instead of the
    // ones the driver reports: a build machine checking for the machine it
    // builds for, and the tests. Empty: this machine's GPUs.
    std::vector<compute_capability> compute_capabilities;
    // Machine files, replaceable for tests.
    std::filesystem::path ld_so_cache = "/etc/ld.so.cache";
    std::filesystem::path driver_version_file = "/proc/driver/nvidia/version";
    std::vector<std::filesystem::path> default_dirs = {"/lib/x86_64-linux-gnu",
                                                       "/usr/lib/x86_64-linux-gnu",
                                                       "/lib/aarch64-linux-gnu",
                                                       "/usr/lib/aarch64-linux-gnu",
                                                       "/lib64",
                                                       "/usr/lib64",
                                                       "/lib",
                                                       "/usr/lib"};
};

struct check_report {
    std::filesystem::path prefix;
    std::vector<check_finding> findings;  // in check order
    std::size_t components = 0;
    std::size_t elf_files = 0;  // ELF files inspected
    std::size_t libraries = 0;  // shared libraries among them
    std::size_t loaded = 0;     // libraries the child loaded (none when quick)
    check_depth depth = check_depth::full;
    double seconds = 0;

    std::size_t count(check_severity s) const;
    bool failed() const { return count(check_severity::failure) != 0; }
};

// Runs the checks on the installed components of a prefix.
// Outcomes: ok (the report; failed checks are findings, not errors) |
// not_found (no receipts, or a --component that is not installed) |
// bad_manifest (a corrupt receipt) | filesystem.
result<check_report> run_checks(const check_options& options);

// What the installed driver and GPUs can run (for the preflight before a
// download). Asks the system's libcuda.so.1/libnvidia-ml.so.1, never one
// inside options.prefix (when set), in a child with LD_LIBRARY_PATH without it.
struct driver_info {
    std::optional<std::string> kernel_module;  // "580.65.06" from /proc/driver/nvidia/version
    std::optional<int> cuda_version;           // cuDriverGetVersion: 12040 for CUDA 12.4
    std::string libcuda;                       // where libcuda.so.1 was found, empty if not
    struct gpu {
        int index = 0;
        int major = 0, minor = 0;  // compute capability
        std::string name;
    };
    std::vector<gpu> gpus;
    std::string error;                      // why the driver could not be asked (no libcuda, cuInit failed, ...)
    check_depth depth = check_depth::full;  // quick: NVML only, never cuInit (see check_depth)
};
driver_info detect_driver(const check_options& options, check_depth depth = check_depth::full);

// detect_driver on a thread of its own, started at construction. `fetch`
// starts one before it reads the manifest: the preflight waits for it, and
// the post-install check reuses the answer (check_options::driver_asked)
// instead of asking again after the install, where it set the quick check's
// time (NVML answers in 20-25 ms on the H200 machine; bench/RESULTS.md).
// With no libcuda.so.1 to ask it starts no process at all. `options.prefix`
// is the prefix being installed: its copies of the driver are never asked.
class driver_query {
public:
    driver_query(check_options options, check_depth depth);
    // A child still running is killed (nobody will read its answer), then
    // the thread is joined: nothing outlives the query.
    ~driver_query();
    driver_query(const driver_query&) = delete;
    driver_query& operator=(const driver_query&) = delete;

    const driver_info& wait();  // blocks until the answer is in

private:
    struct state;
    std::unique_ptr<state> state_;
};

// Warnings for installing `product` `version` built for CUDA `cuda_major` on
// this machine: a driver too old for the variant, a GPU the release no longer
// supports. Empty when it fits or nothing can be told (no driver).
std::vector<check_finding> preflight_findings(const driver_info& driver, const std::string& product,
                                              const std::string& version, std::optional<int> cuda_major);

// The child side: runs the operations the parent passed after
// `__check-probe` and reports each result through `emit`, one line at a
// time (tab-separated, flushed by the caller), so that a crash mid-way still
// leaves the lines before it. Returns the child's exit status.
int run_check_probe(const std::vector<std::string>& args, const std::function<void(std::string_view)>& emit);

// ---- helpers, public for the tools ----------------------------------------

// A printable copy of a name from an archive: control characters, DEL and
// invalid UTF-8 bytes become \xNN, backslashes \\.
std::string escape_for_display(std::string_view text);

REDIST_API_END
}  // namespace redist
