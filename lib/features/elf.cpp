// ELF reading through Debian's libelf (elfutils), and the ld.so.cache parser.
//
// Why libelf rather than a hand-written reader: it is the reader behind
// eu-readelf and debuginfod, maintained and fuzzed upstream (OSS-Fuzz), and it
// handles both classes and both byte orders, section-less files and the
// corner cases (SHN_XINDEX, huge e_phnum) that small readers get wrong. We
// still treat its input as hostile: every count and string is bounded here,
// and tests/fuzz/elf_fuzz.cpp drives both parsers with random bytes.
#include "features/elf.hpp"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include "support/posix_file.hpp"

namespace redist::elf {

namespace {

constexpr std::size_t max_dynamic_entries = 1u << 16;
constexpr std::size_t max_name = 4096;
// The largest ELF file read: the largest cuDNN library is under 1 GiB.
constexpr std::uint64_t max_elf_file_size = std::uint64_t(4) << 30;

void init_libelf() {
    static std::once_flag once;
    std::call_once(once, [] { elf_version(EV_CURRENT); });
}

struct elf_closer {
    void operator()(Elf* e) const noexcept { elf_end(e); }
};
using elf_ptr = std::unique_ptr<Elf, elf_closer>;

error bad(const std::string& what) { return make_error(error_code::bad_archive, "not a usable ELF file: " + what); }

bool has_elf_magic(std::string_view head) noexcept { return head.starts_with("\177ELF"); }

// A string-table reader over raw bytes (the program-header fallback, ld.so.cache).
std::optional<std::string> string_at(std::string_view table, std::uint64_t offset) {
    if (offset >= table.size()) return std::nullopt;
    const auto rest = table.substr(static_cast<std::size_t>(offset));
    const auto nul = rest.find('\0');
    if (nul == std::string_view::npos || nul > max_name) return std::nullopt;
    return std::string(rest.substr(0, nul));
}

// Applies one dynamic entry; `str` maps a string-table offset to its text.
template <class StrFn>
result<void> apply_dyn(elf_info& info, const GElf_Dyn& dyn, StrFn&& str) {
    if (dyn.d_tag != DT_NEEDED && dyn.d_tag != DT_SONAME && dyn.d_tag != DT_RPATH && dyn.d_tag != DT_RUNPATH) return {};
    std::optional<std::string> s = str(dyn.d_un.d_val);
    if (!s) return bad("a dynamic entry points outside its string table");
    if (dyn.d_tag == DT_NEEDED) info.needed.push_back(std::move(*s));
    else if (dyn.d_tag == DT_SONAME) info.soname = std::move(*s);
    else if (dyn.d_tag == DT_RPATH) info.rpath = split_path_list(*s);
    else info.runpath = split_path_list(*s);
    return {};
}

// A string of the section `link` (elf_strptr bounds the offset).
std::optional<std::string> section_string(Elf* e, std::size_t link, std::size_t off) {
    const char* s = elf_strptr(e, link, off);
    if (!s) return std::nullopt;
    const std::size_t len = strnlen(s, max_name + 1);
    if (len > max_name) return std::nullopt;
    return std::string(s, len);
}

// SHT_DYNAMIC, the usual way: libelf converts the entries and bounds elf_strptr.
result<bool> read_dynamic_section(Elf* e, elf_info& info) {
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(e, scn)) != nullptr) {
        GElf_Shdr shdr;
        if (!gelf_getshdr(scn, &shdr)) return bad("unreadable section header");
        if (shdr.sh_type != SHT_DYNAMIC) continue;
        Elf_Data* data = elf_getdata(scn, nullptr);
        if (!data) return bad("unreadable .dynamic section");
        const std::size_t entsize = gelf_fsize(e, ELF_T_DYN, 1, EV_CURRENT);
        if (entsize == 0) return bad("unknown dynamic entry size");
        const std::size_t n = data->d_size / entsize;
        if (n > max_dynamic_entries) return bad("too many dynamic entries");
        const auto link = shdr.sh_link;
        for (std::size_t i = 0; i < n; ++i) {
            GElf_Dyn dyn;
            if (!gelf_getdyn(data, static_cast<int>(i), &dyn)) return bad("unreadable dynamic entry");
            if (dyn.d_tag == DT_NULL) break;
            REDIST_TRY_VOID(apply_dyn(
                info, dyn, [&](std::uint64_t off) { return section_string(e, link, static_cast<std::size_t>(off)); }));
        }
        info.has_dynamic = true;
        return true;
    }
    return false;
}

constexpr std::size_t max_version_entries = 1u << 14;

// gelf_get{verneed,vernaux,verdef,verdaux} take an int offset and check it
// against the data's size themselves; this keeps the cast exact.
bool offset_ok(std::size_t off, const Elf_Data* data) {
    return off <= data->d_size && off <= static_cast<std::size_t>(std::numeric_limits<int>::max());
}

// SHT_GNU_verneed: a chain of Verneed records (one per file), each with a
// chain of Vernaux (one per version). Offsets come from the file: every step
// is bounds-checked by gelf_get*, must move forward, and the counts are capped.
result<void> read_version_needs(Elf* e, Elf_Scn* scn, const GElf_Shdr& shdr, elf_info& info) {
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data) return bad("unreadable .gnu.version_r section");
    std::size_t off = 0, total = 0;
    for (std::size_t n = 0; n < shdr.sh_info && n < max_version_entries; ++n) {
        GElf_Verneed need;
        if (!offset_ok(off, data) || !gelf_getverneed(data, static_cast<int>(off), &need))
            return bad("a version need outside its section");
        auto file = section_string(e, shdr.sh_link, need.vn_file);
        if (!file) return bad("a version need names a string outside its table");
        elf_info::version_need entry{std::move(*file), {}};
        std::size_t aux = off + need.vn_aux;
        for (std::size_t k = 0; k < need.vn_cnt; ++k) {
            if (++total > max_version_entries) return bad("too many version needs");
            GElf_Vernaux vna;
            if (!offset_ok(aux, data) || !gelf_getvernaux(data, static_cast<int>(aux), &vna))
                return bad("a version need outside its section");
            auto name = section_string(e, shdr.sh_link, vna.vna_name);
            if (!name) return bad("a version need names a string outside its table");
            if ((vna.vna_flags & VER_FLG_WEAK) == 0) entry.names.push_back(std::move(*name));
            if (vna.vna_next == 0) break;
            aux += vna.vna_next;
        }
        info.version_needs.push_back(std::move(entry));
        if (need.vn_next == 0) break;
        off += need.vn_next;
    }
    return {};
}

// SHT_GNU_verdef: Verdef records, each naming its version in the first Verdaux.
result<void> read_version_defs(Elf* e, Elf_Scn* scn, const GElf_Shdr& shdr, elf_info& info) {
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (!data) return bad("unreadable .gnu.version_d section");
    std::size_t off = 0;
    for (std::size_t n = 0; n < shdr.sh_info && n < max_version_entries; ++n) {
        GElf_Verdef def;
        if (!offset_ok(off, data) || !gelf_getverdef(data, static_cast<int>(off), &def))
            return bad("a version definition outside its section");
        GElf_Verdaux vda;
        const std::size_t aux = off + def.vd_aux;
        if (def.vd_cnt > 0) {
            if (!offset_ok(aux, data) || !gelf_getverdaux(data, static_cast<int>(aux), &vda))
                return bad("a version definition outside its section");
            auto name = section_string(e, shdr.sh_link, vda.vda_name);
            if (!name) return bad("a version definition names a string outside its table");
            if ((def.vd_flags & VER_FLG_BASE) == 0) info.version_defs.push_back(std::move(*name));
        }
        if (def.vd_next == 0) break;
        off += def.vd_next;
    }
    return {};
}

result<void> read_versions(Elf* e, elf_info& info) {
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(e, scn)) != nullptr) {
        GElf_Shdr shdr;
        if (!gelf_getshdr(scn, &shdr)) return bad("unreadable section header");
        if (shdr.sh_type == SHT_GNU_verneed) REDIST_TRY_VOID(read_version_needs(e, scn, shdr, info));
        else if (shdr.sh_type == SHT_GNU_verdef) REDIST_TRY_VOID(read_version_defs(e, scn, shdr, info));
    }
    return {};
}

// Files without section headers (sstrip'ed) still have PT_DYNAMIC: find the
// string table through DT_STRTAB/DT_STRSZ and the PT_LOAD segments, as ld.so does.
result<void> read_dynamic_segment(Elf* e, const GElf_Phdr& dynph, const std::vector<GElf_Phdr>& loads,
                                  std::size_t file_size, elf_info& info) {
    if (dynph.p_offset > file_size || dynph.p_filesz > file_size - dynph.p_offset)
        return bad("PT_DYNAMIC outside the file");
    Elf_Data* data = elf_getdata_rawchunk(e, static_cast<off_t>(dynph.p_offset), dynph.p_filesz, ELF_T_DYN);
    if (!data) return bad("unreadable PT_DYNAMIC");
    const std::size_t entsize = gelf_fsize(e, ELF_T_DYN, 1, EV_CURRENT);
    if (entsize == 0) return bad("unknown dynamic entry size");
    const std::size_t n = std::min(data->d_size / entsize, max_dynamic_entries);
    std::uint64_t strtab = 0, strsz = 0;
    std::vector<GElf_Dyn> entries;
    for (std::size_t i = 0; i < n; ++i) {
        GElf_Dyn dyn;
        if (!gelf_getdyn(data, static_cast<int>(i), &dyn)) return bad("unreadable dynamic entry");
        if (dyn.d_tag == DT_NULL) break;
        if (dyn.d_tag == DT_STRTAB) strtab = dyn.d_un.d_ptr;
        if (dyn.d_tag == DT_STRSZ) strsz = dyn.d_un.d_val;
        entries.push_back(dyn);
    }
    info.has_dynamic = true;
    if (entries.empty()) return {};
    std::string_view table;
    for (const auto& ph : loads) {
        if (strtab < ph.p_vaddr || strtab - ph.p_vaddr >= ph.p_filesz) continue;
        const std::uint64_t off = ph.p_offset + (strtab - ph.p_vaddr);
        if (off > file_size) break;
        const std::uint64_t len = std::min<std::uint64_t>(
            {strsz, file_size - off, ph.p_filesz - (strtab - ph.p_vaddr)});
        Elf_Data* raw = elf_getdata_rawchunk(e, static_cast<off_t>(off), static_cast<std::size_t>(len), ELF_T_BYTE);
        if (raw && raw->d_buf) table = std::string_view(static_cast<const char*>(raw->d_buf), raw->d_size);
        break;
    }
    for (const auto& dyn : entries)
        REDIST_TRY_VOID(apply_dyn(info, dyn, [&](std::uint64_t off) { return string_at(table, off); }));
    return {};
}

result<elf_info> parse_elf_handle(Elf* e, std::size_t file_size) {
    if (elf_kind(e) != ELF_K_ELF) return bad("no ELF header");
    GElf_Ehdr ehdr;
    if (!gelf_getehdr(e, &ehdr)) return bad(std::string("bad ELF header (") + elf_errmsg(-1) + ")");
    elf_info info;
    info.elf_class = gelf_getclass(e);
    info.machine = ehdr.e_machine;
    info.type = ehdr.e_type;

    std::size_t phnum = 0;
    if (elf_getphdrnum(e, &phnum) != 0) return bad("bad program header count");
    if (phnum > 65536) return bad("too many program headers");
    std::vector<GElf_Phdr> loads;
    std::optional<GElf_Phdr> dynph;
    for (std::size_t i = 0; i < phnum; ++i) {
        GElf_Phdr ph;
        if (!gelf_getphdr(e, static_cast<int>(i), &ph)) return bad("unreadable program header");
        if (ph.p_type == PT_INTERP) info.has_interp = true;
        if (ph.p_type == PT_LOAD) loads.push_back(ph);
        if (ph.p_type == PT_DYNAMIC && !dynph) dynph = ph;
    }
    REDIST_TRY(const bool found, read_dynamic_section(e, info));
    if (!found && dynph) REDIST_TRY_VOID(read_dynamic_segment(e, *dynph, loads, file_size, info));
    // Symbol versions only sharpen the check: a file whose version sections
    // do not parse is still resolved, with no version claims made about it.
    if (found && !read_versions(e, info).ok()) {
        info.version_needs.clear();
        info.version_defs.clear();
    }
    return info;
}

}  // namespace

std::vector<std::string> split_path_list(std::string_view text, std::string_view separators) {
    std::vector<std::string> out;
    for (std::size_t start = 0; start <= text.size();) {
        const auto end = std::min(text.find_first_of(separators, start), text.size());
        if (end > start) out.emplace_back(text.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

result<elf_info> parse_elf(std::string_view bytes) {
    init_libelf();
    if (!has_elf_magic(bytes)) return bad("no ELF magic");
    // elf_memory wants a mutable buffer (it may convert in place): give it a copy.
    std::string copy(bytes);
    elf_ptr e(elf_memory(copy.data(), copy.size()));
    if (!e) return bad(std::string("libelf: ") + elf_errmsg(-1));
    return parse_elf_handle(e.get(), copy.size());
}

namespace {

// An ELF file opened for reading, mapped read-only by libelf.
struct opened_elf {
    unique_fd fd;
    elf_ptr elf;
    std::size_t size = 0;
};

// Opens `path` the way every reader of installed files does: open_regular, no
// symlink followed, at most max_elf_file_size, the ELF magic checked first.
// ELF_C_READ_MMAP maps the file: only what a reader touches is read, so a
// 250 MB library costs a few page faults.
result<opened_elf> open_elf(const std::filesystem::path& path) {
    init_libelf();
    struct stat st {};
    REDIST_TRY(unique_fd fd, open_regular(path, follow_links::no, &st));
    if (static_cast<std::uint64_t>(st.st_size) > max_elf_file_size)
        return std::move(bad("larger than " + std::to_string(max_elf_file_size >> 30) + " GiB"))
            .with_path(path.string());
    char head[4] = {};
    if (::pread(fd.get(), head, sizeof head, 0) != static_cast<ssize_t>(sizeof head) ||
        !has_elf_magic(std::string_view(head, sizeof head)))
        return std::move(bad("no ELF magic")).with_path(path.string());
    elf_ptr e(elf_begin(fd.get(), ELF_C_READ_MMAP, nullptr));
    if (!e) return std::move(bad(std::string("libelf: ") + elf_errmsg(-1))).with_path(path.string());
    return opened_elf{std::move(fd), std::move(e), static_cast<std::size_t>(st.st_size)};
}

}  // namespace

result<elf_info> read_elf_file(const std::filesystem::path& path) {
    REDIST_TRY(auto f, open_elf(path));
    auto info = parse_elf_handle(f.elf.get(), f.size);
    if (!info.ok()) return std::move(info).error_value().with_path(path.string());
    return info;
}

elf_ident read_elf_ident(const std::filesystem::path& path) noexcept {
    elf_ident out;
    // Candidates come from RPATH/RUNPATH entries and DT_NEEDED names an
    // archive chose: anything that is not a regular file (a FIFO, a device)
    // is not a library, and is never opened (open_regular).
    auto fd = open_regular(path, follow_links::yes);
    if (!fd.ok()) return out;
    unsigned char h[20] = {};
    if (::pread(fd->get(), h, sizeof h, 0) != static_cast<ssize_t>(sizeof h) ||
        !has_elf_magic(std::string_view(reinterpret_cast<const char*>(h), sizeof h)))
        return out;
    out.elf_class = h[EI_CLASS];
    // e_machine sits at offset 18 in both classes, in the file's byte order.
    out.machine = h[EI_DATA] == ELFDATA2MSB ? (unsigned(h[18]) << 8 | h[19]) : (unsigned(h[19]) << 8 | h[18]);
    return out;
}

// ---- GPU code ------------------------------------------------------------------

namespace {

constexpr std::uint32_t fatbin_magic = 0xBA55ED50u;
constexpr std::size_t fatbin_header_size = 16;  // magic, version, header size, size of the rest
// What an entry header must hold for the fields read: kind, header size,
// payload size, architecture (28), flags (40..48). Real ones are 64 to 112 bytes.
constexpr std::size_t fatbin_entry_min = 48;
constexpr std::uint16_t fatbin_kind_ptx = 1, fatbin_kind_elf = 2;
constexpr std::uint64_t fatbin_flag_arch_specific = 0x100000, fatbin_flag_family = 0x200000;
// cuBLASLt 13 has 2,775 containers and 5,424 entries; a million is no library.
constexpr std::size_t max_fatbin_entries = 1u << 20;

// A fatbin section's bytes, read where the parser looks: from memory, or
// with pread through a 4 KiB window. Why not the mapping libelf made: the
// parser touches one entry header per payload, 4,000 of them spread over
// cuDNN's 150 MB section, and a page fault each cost 5-7 us (25 ms for that
// one library, more than the rest of the quick check); pread of a window
// that covers many small entries at once costs a tenth of that.
class section_bytes {
public:
    explicit section_bytes(std::string_view memory) : memory_(memory), size_(memory.size()) {}
    section_bytes(int fd, std::uint64_t offset, std::uint64_t size) : fd_(fd), offset_(offset), size_(size) {}

    std::uint64_t size() const { return size_; }

    // The `n` bytes at `at` (n <= window; the caller keeps at + n <= size()),
    // or nullopt when the file cannot be read there.
    std::optional<std::string_view> view(std::uint64_t at, std::size_t n) {
        if (fd_ < 0) return memory_.substr(static_cast<std::size_t>(at), n);
        if (at < window_at_ || at + n > window_at_ + window_.size()) {
            window_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(window, size_ - at)));
            const ssize_t got = ::pread(fd_, window_.data(), window_.size(), static_cast<off_t>(offset_ + at));
            if (got < 0 || static_cast<std::size_t>(got) < n) {
                window_.clear();
                return std::nullopt;
            }
            window_.resize(static_cast<std::size_t>(got));
            window_at_ = at;
        }
        return std::string_view(window_).substr(static_cast<std::size_t>(at - window_at_), n);
    }

    static constexpr std::size_t window = 4096;

private:
    std::string_view memory_;
    int fd_ = -1;
    std::uint64_t offset_ = 0, size_ = 0;
    std::string window_;
    std::uint64_t window_at_ = 0;
};

// Little-endian loads at `at` of `b`; the caller has checked that they fit.
std::uint64_t load_le(std::string_view b, std::size_t at, std::size_t width) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < width; ++i) v |= std::uint64_t(static_cast<unsigned char>(b[at + i])) << (8 * i);
    return v;
}

error bad_fatbin(const std::string& what, std::uint64_t at) {
    return make_error(error_code::bad_archive, "bad fatbin: " + what + " at offset " + std::to_string(at));
}

void add_arch(std::vector<gpu_arch>& list, gpu_arch a) {
    const auto at = std::lower_bound(list.begin(), list.end(), a);
    if (at == list.end() || *at != a) list.insert(at, a);
}

bool all_zero(std::string_view b) { return b.find_first_not_of('\0') == std::string_view::npos; }

// The entries of one container, [begin, end) of the section.
result<void> parse_fatbin_entries(section_bytes& b, std::uint64_t begin, std::uint64_t end, gpu_code& into) {
    for (std::uint64_t at = begin; at < end;) {
        const std::uint64_t left = end - at;
        const auto h = b.view(at, static_cast<std::size_t>(std::min<std::uint64_t>(left, fatbin_entry_min)));
        if (!h) return bad_fatbin("unreadable", at);
        if (left < fatbin_entry_min) {
            // Padding at the end of a container is zeros; anything else is a cut entry.
            if (all_zero(*h)) return {};
            return bad_fatbin("an entry header cut short", at);
        }
        const auto kind = static_cast<std::uint16_t>(load_le(*h, 0, 2));
        const std::uint64_t header = load_le(*h, 4, 4);
        const std::uint64_t payload = load_le(*h, 8, 8);
        if (header < fatbin_entry_min || header > left) return bad_fatbin("an entry header size out of bounds", at);
        if (payload > left - header) return bad_fatbin("an entry larger than its container", at);
        if (++into.entries > max_fatbin_entries) return bad_fatbin("too many entries", at);
        const std::uint64_t arch = load_le(*h, 28, 4);
        const std::uint64_t flags = load_le(*h, 40, 8);
        gpu_arch a;
        // sm_90 is 90, sm_121 is 121: the last digit is the minor version.
        a.major = static_cast<int>(std::min<std::uint64_t>(arch / 10, 1000));
        a.minor = static_cast<int>(arch % 10);
        a.kind = (flags & fatbin_flag_arch_specific) ? gpu_arch::flavor::arch_specific
                 : (flags & fatbin_flag_family)      ? gpu_arch::flavor::family
                                                     : gpu_arch::flavor::plain;
        if (kind == fatbin_kind_elf) add_arch(into.sass, a);
        else if (kind == fatbin_kind_ptx) add_arch(into.ptx, a);
        else ++into.other;
        at += header + payload;
    }
    return {};
}

result<void> parse_fatbin_bytes(section_bytes& b, gpu_code& into) {
    for (std::uint64_t at = 0; at < b.size();) {
        const std::uint64_t left = b.size() - at;
        const auto h = b.view(at, static_cast<std::size_t>(std::min<std::uint64_t>(left, fatbin_header_size)));
        if (!h) return bad_fatbin("unreadable", at);
        // Zeros between containers are alignment.
        if (const auto zeros = std::min(h->find_first_not_of('\0'), h->size()); zeros > 0) {
            at += zeros;
            continue;
        }
        if (left < fatbin_header_size) return bad_fatbin("a container header cut short", at);
        if (load_le(*h, 0, 4) != fatbin_magic) return bad_fatbin("no container header (magic 0xBA55ED50)", at);
        const std::uint64_t version = load_le(*h, 4, 2), header = load_le(*h, 6, 2);
        const std::uint64_t size = load_le(*h, 8, 8);
        if (version != 1) return bad_fatbin("container version " + std::to_string(version) + " (not 1)", at);
        if (header < fatbin_header_size || header > left)
            return bad_fatbin("a container header size out of bounds", at);
        if (size > left - header) return bad_fatbin("a container larger than its section", at);
        if (++into.containers > max_fatbin_entries) return bad_fatbin("too many containers", at);
        REDIST_TRY_VOID(parse_fatbin_entries(b, at + header, at + header + size, into));
        at += header + size;
    }
    return {};
}

// The fatbin sections of an ELF handle, by name. `fd` >= 0: the file, of
// `file_size` bytes, is read with pread; else the handle's image in memory.
result<gpu_code> gpu_code_of(Elf* e, int fd, std::uint64_t file_size) {
    if (elf_kind(e) != ELF_K_ELF) return bad("no ELF header");
    std::size_t names = 0;
    if (elf_getshdrstrndx(e, &names) != 0) return gpu_code{};  // no section names: no fatbin to find
    gpu_code code;
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(e, scn)) != nullptr) {
        GElf_Shdr shdr;
        if (!gelf_getshdr(scn, &shdr)) return bad("unreadable section header");
        if (shdr.sh_type == SHT_NOBITS) continue;
        const auto name = section_string(e, names, shdr.sh_name);
        if (!name || (*name != ".nv_fatbin" && *name != "__nv_relfatbin")) continue;
        ++code.sections;
        result<void> parsed;
        if (fd >= 0) {
            if (shdr.sh_offset > file_size || shdr.sh_size > file_size - shdr.sh_offset)
                return bad(*name + " lies outside the file");
            section_bytes bytes(fd, shdr.sh_offset, shdr.sh_size);
            parsed = parse_fatbin_bytes(bytes, code);
        } else {
            // elf_rawdata checks that the section lies inside the image.
            Elf_Data* data = elf_rawdata(scn, nullptr);
            if (!data) return bad("unreadable " + *name + " section");
            section_bytes bytes(
                std::string_view(static_cast<const char*>(data->d_buf), data->d_buf ? data->d_size : 0));
            parsed = parse_fatbin_bytes(bytes, code);
        }
        if (!parsed.ok()) return make_error(error_code::bad_archive, *name + ": " + parsed.error_value().message);
    }
    return code;
}

}  // namespace

std::string arch_name(const gpu_arch& a, bool ptx) {
    const char* suffix = a.kind == gpu_arch::flavor::arch_specific ? "a"
                         : a.kind == gpu_arch::flavor::family      ? "f"
                                                                   : "";
    return std::string(ptx ? "compute_" : "sm_") + std::to_string(a.major) + std::to_string(a.minor) + suffix;
}

result<void> parse_fatbin(std::string_view b, gpu_code& into) {
    section_bytes bytes(b);
    return parse_fatbin_bytes(bytes, into);
}

result<gpu_code> read_gpu_code(const std::filesystem::path& path) {
    REDIST_TRY(auto f, open_elf(path));
    auto code = gpu_code_of(f.elf.get(), f.fd.get(), f.size);
    if (!code.ok()) return std::move(code).error_value().with_path(path.string());
    return code;
}

result<gpu_code> parse_gpu_code(std::string_view bytes) {
    init_libelf();
    if (!has_elf_magic(bytes)) return bad("no ELF magic");
    std::string copy(bytes);  // elf_memory wants a mutable buffer
    elf_ptr e(elf_memory(copy.data(), copy.size()));
    if (!e) return bad(std::string("libelf: ") + elf_errmsg(-1));
    return gpu_code_of(e.get(), -1, copy.size());
}

// ---- ld.so.cache -------------------------------------------------------------

namespace {

constexpr std::string_view old_magic = "ld.so-1.7.0";
constexpr std::string_view new_magic = "glibc-ld.so.cache1.1";
constexpr std::size_t new_header_size = 48;  // magic+version 20, nlibs, len_strings, flags+pad 4, ext, unused[3]
constexpr std::size_t new_entry_size = 24;   // flags, key, value, osversion, hwcap(8)
constexpr std::size_t old_entry_size = 12;   // flags, key, value

std::uint32_t load_u32(std::string_view bytes, std::size_t at) {
    std::uint32_t v;
    std::memcpy(&v, bytes.data() + at, sizeof v);  // the cache is in host byte order
    return v;
}

error bad_cache(const std::string& what) { return make_error(error_code::bad_manifest, "bad ld.so.cache: " + what); }

}  // namespace

std::uint32_t ld_cache_host_flags() noexcept {
    // FLAG_ELF_LIBC6 (3) | the architecture's FLAG_*_LIB64 bits (glibc's ldconfig.h).
#if defined(__x86_64__)
    return 0x0303;
#elif defined(__aarch64__)
    return 0x0a03;
#else
    return 0;
#endif
}

result<std::vector<ld_cache_entry>> parse_ld_cache(std::string_view bytes, std::uint32_t want_flags) {
    std::size_t base = 0;
    if (bytes.substr(0, old_magic.size()) == old_magic) {
        if (bytes.size() < 16) return bad_cache("truncated old header");
        const std::uint64_t n = load_u32(bytes, 12);
        const std::uint64_t end = 16 + n * old_entry_size;
        if (end > bytes.size()) return bad_cache("old table larger than the file");
        base = static_cast<std::size_t>((end + 7) & ~std::uint64_t{7});
        // Some writers align to 4 only: accept the new header at either place.
        if (bytes.substr(std::min<std::size_t>(base, bytes.size()), new_magic.size()) != new_magic)
            base = static_cast<std::size_t>((end + 3) & ~std::uint64_t{3});
    }
    if (base > bytes.size() || bytes.size() - base < new_header_size ||
        bytes.substr(base, new_magic.size()) != new_magic)
        return bad_cache("no glibc-ld.so.cache1.1 header");
    const std::string_view cache = bytes.substr(base);
    const std::uint64_t nlibs = load_u32(cache, 20);
    if (nlibs > (cache.size() - new_header_size) / new_entry_size) return bad_cache("entry count larger than the file");
    std::vector<ld_cache_entry> out;
    out.reserve(static_cast<std::size_t>(nlibs));
    for (std::uint64_t i = 0; i < nlibs; ++i) {
        const std::size_t at = new_header_size + static_cast<std::size_t>(i) * new_entry_size;
        const std::uint32_t flags = load_u32(cache, at);
        // Strings are NUL-terminated and addressed from the start of the new header.
        auto key = string_at(cache, load_u32(cache, at + 4));
        auto value = string_at(cache, load_u32(cache, at + 8));
        if (!key || !value) return bad_cache("entry " + std::to_string(i) + " points outside the file");
        if (want_flags && flags != want_flags) continue;
        out.push_back({std::move(*key), std::move(*value)});
    }
    return out;
}

}  // namespace redist::elf
