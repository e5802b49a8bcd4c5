// _dl_find_object() for the release bundle (REDIST_BUNDLE).
//
// The bundle links libgcc statically (-static-libgcc, so that it needs no
// libgcc_s.so.1, whose Debian 12 build needs GLIBC_2.35). GCC 12's unwinder in
// libgcc_eh.a, built against glibc 2.36, finds a frame's unwind tables with
// _dl_find_object@GLIBC_2.35 and nothing else; the bundle must run on glibc
// 2.34. This file is linked into every program and shared library of the
// bundle, so that the unwinder's call binds here at link time: the same
// answer, found with dl_iterate_phdr (glibc 2.2.5), which is what the unwinder
// used before glibc had _dl_find_object. Hidden: a program that loads
// libredist.so keeps glibc's.
//
// Only what libgcc reads is filled in: the object's mapping and its
// PT_GNU_EH_FRAME segment (dlfo_link_map stays null).
#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <cstdint>
#include <limits>

namespace {

struct search {
    std::uintptr_t address;
    dl_find_object* result;
};

int visit(dl_phdr_info* info, size_t /*size*/, void* data) noexcept {
    auto* wanted = static_cast<search*>(data);
    std::uintptr_t low = std::numeric_limits<std::uintptr_t>::max();
    std::uintptr_t high = 0;
    bool inside = false;
    void* eh_frame = nullptr;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& segment = info->dlpi_phdr[i];
        const std::uintptr_t start = info->dlpi_addr + segment.p_vaddr;
        if (segment.p_type == PT_LOAD) {
            const std::uintptr_t end = start + segment.p_memsz;
            low = start < low ? start : low;
            high = end > high ? end : high;
            inside = inside || (wanted->address >= start && wanted->address < end);
        } else if (segment.p_type == PT_GNU_EH_FRAME) {
            eh_frame = reinterpret_cast<void*>(start);  // NOLINT(performance-no-int-to-ptr)
        }
    }
    if (!inside) {
        return 0;  // the next object
    }
    *wanted->result = dl_find_object{};
    wanted->result->dlfo_map_start = reinterpret_cast<void*>(low);  // NOLINT(performance-no-int-to-ptr)
    wanted->result->dlfo_map_end = reinterpret_cast<void*>(high);   // NOLINT(performance-no-int-to-ptr)
    wanted->result->dlfo_eh_frame = eh_frame;
    return 1;
}

}  // namespace

extern "C" {

__attribute__((visibility("hidden"))) int _dl_find_object(void* address, dl_find_object* result) noexcept {
    search wanted{reinterpret_cast<std::uintptr_t>(address), result};
    return dl_iterate_phdr(visit, &wanted) == 1 ? 0 : -1;
}

}  // extern "C"
