// libFuzzer target for the readers `redist check` feeds with files from
// archives and the machine: the ELF reader (libelf underneath, our bounds on
// top), the ld.so.cache parser, and header_define (the post-install check
// reads versions from headers such as cudnn_version.h). Every input goes to
// all three; the binary readers reject each other's format at its magic, so
// the corpus can mix them.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "features/check_versions.hpp"
#include "features/elf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    auto elf = redist::elf::parse_elf(bytes);
    if (elf.ok()) {
        // Touch everything the checks use, so that ASan sees any bad string.
        std::size_t total = elf->soname.size();
        for (const auto& n : elf->needed) total += n.size();
        for (const auto& n : elf->runpath) total += n.size();
        for (const auto& n : elf->rpath) total += n.size();
        (void)total;
    }
    for (std::uint32_t flags : {0u, redist::elf::ld_cache_host_flags()}) {
        auto cache = redist::elf::parse_ld_cache(bytes, flags);
        if (cache.ok())
            for (const auto& e : *cache) (void)(e.soname.size() + e.path.size());
    }
    for (const char* name : {"CUDNN_MAJOR", "CUDART_VERSION", ""}) (void)redist::header_define(bytes, name);
    return 0;
}
