// libFuzzer target for the fatbin reader `redist check` runs on every
// installed file with CUDA kernels (lib/features/elf.hpp): parse_fatbin on
// the input as a section's bytes, and parse_gpu_code on it as an ELF file
// (libelf finds .nv_fatbin and __nv_relfatbin by name). Seeds: synthetic
// containers (fatbin_seeds/) and an ELF file with a .nv_fatbin section made
// at build time (tests/fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "features/elf.hpp"
#include "features/gpu_arch.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    redist::elf::gpu_code code;
    if (redist::elf::parse_fatbin(bytes, code).ok()) {
        // What the check prints and judges, on whatever was read.
        (void)redist::gpu_arch::describe(code);
        for (int major : {7, 9, 12}) (void)redist::gpu_arch::code_for(code, major, 0);
    }
    auto elf = redist::elf::parse_gpu_code(bytes);
    if (elf.ok()) (void)redist::gpu_arch::describe(*elf);
    return 0;
}
