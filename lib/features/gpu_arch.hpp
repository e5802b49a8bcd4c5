// gpu_arch.hpp (internal) — the `gpu-code` check of `redist check`: does each
// installed file with CUDA kernels carry code this machine's GPUs can run?
//
// A library's kernels run on a GPU only if its fatbin (elf::read_gpu_code)
// holds SASS the GPU can execute or PTX the driver can compile for it;
// otherwise every launch fails with "no kernel image is available for
// execution on the device" (cudaErrorNoKernelImageForDevice), long after the
// install looked fine. cuDNN 9.11 dropped pre-Turing GPUs from its CUDA 12
// build this way. The rules (CUDA C++ Programming Guide, "Binary
// Compatibility" and "Feature Availability"):
//   SASS sm_XY    runs on compute capability X.Z with Z >= Y (same major);
//   SASS sm_XYf   the same (family-specific: sm_100f on 10.0 and 10.3);
//   SASS sm_XYa   on X.Y only (architecture-specific features: wgmma, ...);
//   PTX  compute_XY   is compiled by the driver for any X'.Y' >= X.Y;
//   PTX  compute_XYf  for X.Z with Z >= Y only; compute_XYa for X.Y only.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "features/elf.hpp"
#include "redist/check.hpp"
#include "redist/prefix.hpp"

namespace redist::gpu_arch {

// The entry a GPU of compute capability major.minor would use: the newest
// SASS it can run, else the newest PTX it can compile; nullopt when none.
struct usable_code {
    elf::gpu_arch arch;
    bool ptx = false;
};
std::optional<usable_code> code_for(const elf::gpu_code& code, int major, int minor);

// "SASS sm_75, sm_80, sm_90a; PTX compute_121" (what the file carries).
std::string describe(const elf::gpu_code& code);

// An installed ELF file to judge.
struct installed_library {
    const receipt* owner = nullptr;
    std::optional<int> cuda_major;  // of the owner's variant, when known
    std::string rel;                // prefix-relative path
    std::filesystem::path abs;
};

// One finding per file with GPU code and distinct compute capability among
// `gpus`: info when the file has code for it, failure when it has none (with
// the release or variant that would, where check_data's architecture table
// says), warning when its fatbin cannot be read or holds only entries of
// kinds we do not judge. Files without GPU code get no finding.
std::vector<check_finding> gpu_code_findings(const std::vector<installed_library>& files,
                                             const std::vector<driver_info::gpu>& gpus,
                                             const std::filesystem::path& prefix);

}  // namespace redist::gpu_arch
