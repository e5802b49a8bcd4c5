// segment_spool.cpp — the spool of a download and its resume record (see
// segment_spool.hpp): opening a .part of ours (never a planted one), reading
// it back in order, what a record may claim (parse_segment_record, fuzzed by
// tests/fuzz/segment_record_fuzz.cpp), and giving the .part up for a temp
// file when the cache has no room.
#include "transport/segment_spool.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "support/posix_file.hpp"

namespace redist {

namespace fs = std::filesystem;

namespace segmenting {

namespace {

constexpr std::size_t kReadBlock = 1u << 20;
constexpr std::size_t kMaxRecordBytes = 64u << 10;
constexpr std::string_view kRecordMagic = "redist-segments 1";

// Bytes the spool holds (its record or the run says so): its end is an error.
result<std::size_t> read_spool_at(int fd, std::byte* data, std::size_t size, std::uint64_t offset,
                                  const fs::path& path) {
    REDIST_TRY(const std::size_t n, pread_some(fd, data, size, offset, path));
    if (n == 0)
        return make_error(error_code::filesystem, "the download spool is shorter than recorded")
            .with_path(path.string());
    return n;
}

// A .part of ours: a regular file, one link, our uid. Anything else at the
// name (a planted symlink, a hard link to someone's file) is unlinked and
// replaced by a new file (O_EXCL|O_NOFOLLOW): never followed, never reused.
result<unique_fd> open_part_file(const fs::path& path, bool& fresh) {
    fresh = false;
    unique_fd fd(::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (fd) {
        struct stat st {};
        if (::fstat(fd.get(), &st) != 0) return errno_error("cannot stat the download spool", path, errno);
        if (S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == ::geteuid()) {
            ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
            return fd;
        }
        fd.reset();
    } else if (errno != ENOENT && errno != ELOOP && errno != ENXIO && errno != EWOULDBLOCK) {
        return errno_error("cannot open the download spool", path, errno);
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
        return errno_error("cannot replace the download spool", path, errno);
    fd.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd) return errno_error("cannot create the download spool", path, errno);
    fresh = true;
    return fd;
}

}  // namespace

// EFBIG: the file may not grow (a size limit, RLIMIT_FSIZE), as good as no room.
bool no_room(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG; }

// `out_of_space` is set when the write failed for lack of room (ENOSPC, EDQUOT).
result<void> pwrite_all(int fd, const std::byte* data, std::size_t size, std::uint64_t offset, const fs::path& path,
                        bool& out_of_space) {
    while (size > 0) {
        const ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            out_of_space = no_room(errno);
            return errno_error("cannot write the download spool", path, errno);
        }
        data += n;
        size -= static_cast<std::size_t>(n);
        offset += static_cast<std::uint64_t>(n);
    }
    return {};
}
// Hands the spool's bytes [from, to) to on_data in order, through `buffer`
// (allocated on first use).
result<void> deliver_spooled(int fd, const fs::path& path, std::uint64_t from, std::uint64_t to,
                             download_callbacks& callbacks, std::unique_ptr<std::byte[]>& buffer) {
    if (!buffer) buffer = std::make_unique_for_overwrite<std::byte[]>(kReadBlock);
    while (from < to) {
        const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(to - from, kReadBlock));
        REDIST_TRY(const std::size_t got, read_spool_at(fd, buffer.get(), want, from, path));
        if (callbacks.on_data) REDIST_TRY_VOID(callbacks.on_data(buffer.get(), got));
        from += got;
    }
    return {};
}

// The file changed under a download: the spool is emptied, and so is its
// resume record, which would claim bytes no longer there (a ranged run
// keeps an empty one: its bytes are out of order; one stream's are not),
// and the caller is told to start over by a second on_response (partial = false).
result<void> empty_spool(int fd, const fs::path& path, const fs::path& part_file, std::uint64_t expected_size,
                         download_callbacks& callbacks, bool ranged) {
    if (fd >= 0 && ::ftruncate(fd, 0) != 0) return errno_error("cannot truncate the download spool", path, errno);
    if (!part_file.empty() && ranged)
        REDIST_TRY_VOID(atomic_write(segment_record_path(part_file), segment_record_to_text({expected_size, {}}),
                                     durability::none));
    if (!part_file.empty() && !ranged) remove_segment_record(part_file);
    response_info whole;
    whole.content_length = expected_size > 0 ? static_cast<std::int64_t>(expected_size) : -1;
    return callbacks.on_response ? callbacks.on_response(whole) : result<void>{};
}

namespace {

// Byte ranges already in a .part, from its record or (no record) its size;
// nullopt: start over (the .part and its record are not to be trusted).
std::optional<segment_record> present_ranges(int fd, const fs::path& part, std::uint64_t expected_size) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return std::nullopt;
    const auto file_size = static_cast<std::uint64_t>(st.st_size);
    const fs::path record = segment_record_path(part);
    struct stat rst {};
    if (::lstat(record.c_str(), &rst) != 0 && errno == ENOENT) {
        // No record: a sequentially written .part (one stream, or an older redist).
        if (expected_size != 0 && file_size > expected_size) return std::nullopt;
        segment_record sequential{expected_size, {}};
        if (file_size > 0) sequential.ranges.emplace_back(0, file_size);
        return sequential;
    }
    // Not a symlink, not a FIFO, at most 64 KiB: else unreadable, and we start over.
    auto text = read_file(record, kMaxRecordBytes, follow_links::no);
    if (!text.ok()) return std::nullopt;
    auto parsed = parse_segment_record(*text, record.string());
    if (!parsed.ok() || parsed->size != expected_size || expected_size == 0 ||
        (!parsed->ranges.empty() && parsed->ranges.back().second > file_size))
        return std::nullopt;  // a record we did not write, or for another file: trust nothing
    return std::move(parsed).value();
}

// Decimal digits only, no leading zero, at most 19 of them (no overflow).
bool parse_u64(std::string_view text, std::uint64_t& out) {
    if (text.empty() || text.size() > 19 || (text.size() > 1 && text.front() == '0')) return false;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

}  // namespace segmenting

using namespace segmenting;

// ---- the record ------------------------------------------------------------------

fs::path segment_record_path(const fs::path& part_file) {
    fs::path p = part_file;
    p += ".segments";
    return p;
}

void remove_segment_record(const fs::path& part_file) noexcept {
    std::error_code ignored;
    const fs::path record = segment_record_path(part_file);
    fs::remove(record, ignored);
    // A run killed while it rewrote the record left its atomic_write temp
    // ("<record>.tmp.<random>"). The caller holds the blob's lock, so no live
    // process is writing one. Names are matched exactly and unlinked, never
    // followed.
    const std::string record_name = record.filename().string();
    for (fs::directory_iterator it(record.parent_path(), ignored), end; !ignored && it != end; it.increment(ignored)) {
        if (is_atomic_write_temp_of(it->path().filename().string(), record_name)) {
            std::error_code also_ignored;
            fs::remove(it->path(), also_ignored);
        }
    }
}

std::string segment_record_to_text(const segment_record& record) {
    std::string out(kRecordMagic);
    out += "\nsize " + std::to_string(record.size) + "\n";
    for (const auto& [a, b] : record.ranges) out += std::to_string(a) + " " + std::to_string(b) + "\n";
    return out;
}

result<segment_record> parse_segment_record(std::string_view text, std::string_view what) {
    const auto bad = [&](const std::string& why) {
        return make_error(error_code::bad_manifest, "bad download record: " + why).with_path(std::string(what));
    };
    if (text.size() > kMaxRecordBytes) return bad("larger than 64 KiB");
    std::vector<std::string_view> lines;
    while (!text.empty()) {
        const auto nl = text.find('\n');
        if (nl == std::string_view::npos) return bad("the last line has no newline");
        lines.push_back(text.substr(0, nl));
        text.remove_prefix(nl + 1);
    }
    if (lines.size() < 2 || lines[0] != kRecordMagic) return bad("not a redist-segments 1 record");
    segment_record r;
    if (!lines[1].starts_with("size ") || !parse_u64(lines[1].substr(5), r.size) || r.size == 0)
        return bad("line 2: expected 'size N' with N > 0");
    if (lines.size() - 2 > kMaxRecordRanges) return bad("more than 4096 ranges");
    for (std::size_t i = 2; i < lines.size(); ++i) {
        const auto sp = lines[i].find(' ');
        std::uint64_t a = 0;
        std::uint64_t b = 0;
        const std::string where = "line " + std::to_string(i + 1) + ": ";
        if (sp == std::string_view::npos || !parse_u64(lines[i].substr(0, sp), a) ||
            !parse_u64(lines[i].substr(sp + 1), b))
            return bad(where + "expected 'FIRST END'");
        if (a >= b || b > r.size) return bad(where + "empty range, or beyond the size");
        if (!r.ranges.empty() && a <= r.ranges.back().second) return bad(where + "ranges must be sorted and apart");
        r.ranges.emplace_back(a, b);
    }
    return r;
}

namespace segmenting {

// An unlinked temp file in `dir` (no record, no resume).
result<void> open_temp_spool(opened_spool& s, const fs::path& dir) {
    s.path = dir;
    s.part_file.clear();
    s.present.ranges.clear();
    s.fd.reset(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
    if (s.fd) return {};
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
        return errno_error("cannot create a temporary download spool in", dir, errno);
    // No O_TMPFILE on this filesystem: a named file, unlinked at once.
    std::string name = (dir / "redist-spool.XXXXXX").string();
    s.fd.reset(::mkostemp(name.data(), O_CLOEXEC));
    if (!s.fd) return errno_error("cannot create a temporary download spool in", dir, errno);
    ::unlink(name.c_str());
    return {};
}

std::uint64_t present_bytes(const segment_record& r) {
    std::uint64_t n = 0;
    for (const auto& [a, b] : r.ranges) n += b - a;
    return n;
}

// Gives up the cache's .part (removed with its record: a cache that cannot
// hold the download would only fill up again), telling the caller why: a
// split download goes on in a temp spool in spool.temp_dir, one stream
// without a spool. The caller continues from the bytes it has already been given.
result<void> give_up_part(opened_spool& s, const spool_location& spool, const error& why, bool ranged) {
    s.fd.reset();
    ::unlink(spool.part_file.c_str());
    remove_segment_record(spool.part_file);
    s.part_file.clear();
    s.path.clear();
    if (ranged) REDIST_TRY_VOID(open_temp_spool(s, spool.temp_dir));
    s.present.ranges.clear();
    if (spool.on_fallback) spool.on_fallback(why);
    return {};
}

// The .part's filesystem has less room than the bytes still missing:
// the reason to give it up at once, or nullopt.
std::optional<error> lacks_room(const opened_spool& s, std::uint64_t expected_size) {
    struct statvfs vfs {};
    if (expected_size == 0 || ::fstatvfs(s.fd.get(), &vfs) != 0) return std::nullopt;
    const std::uint64_t missing = expected_size - std::min(expected_size, present_bytes(s.present));
    const auto room = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (room >= missing) return std::nullopt;
    return make_error(error_code::filesystem, "the cache has " + std::to_string(room) +
                                                  " bytes free, the download needs " + std::to_string(missing))
        .with_path(s.path.string());
}

// The spool: the .part, else (a split download) a temp file, else none.
result<opened_spool> open_spool(const spool_location& spool, std::uint64_t expected_size, bool ranged) {
    opened_spool s;
    s.present.size = expected_size;
    if (spool.part_file.empty()) {
        if (ranged && !spool.temp_dir.empty()) REDIST_TRY_VOID(open_temp_spool(s, spool.temp_dir));
        return s;
    }
    s.path = spool.part_file;
    s.part_file = spool.part_file;
    bool fresh = false;
    REDIST_TRY(s.fd, open_part_file(spool.part_file, fresh));
    if (fresh) {
        remove_segment_record(spool.part_file);
    } else if (auto present = present_ranges(s.fd.get(), spool.part_file, expected_size)) {
        s.present = std::move(*present);
    } else {
        remove_segment_record(spool.part_file);
        if (::ftruncate(s.fd.get(), 0) != 0) return errno_error("cannot truncate the download spool", s.path, errno);
    }
    if (!spool.temp_dir.empty()) {
        if (auto why = lacks_room(s, expected_size)) REDIST_TRY_VOID(give_up_part(s, spool, *why, ranged));
    }
    return s;
}

std::uint64_t prefix_of(const segment_record& r) {
    return !r.ranges.empty() && r.ranges.front().first == 0 ? r.ranges.front().second : 0;
}

// A write to the cache's .part failed for lack of room, and there is a temp_dir to go on in.
bool can_fall_back(const opened_spool& s, const spool_location& spool, bool spool_full) {
    return spool_full && !s.part_file.empty() && !spool.temp_dir.empty();
}

}  // namespace segmenting

std::uint64_t resumable_bytes(const fs::path& part_file, std::uint64_t expected_size) noexcept {
    // As open_part_file would keep it: a regular file with one link, ours.
    const unique_fd fd(::open(part_file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != ::geteuid())
        return 0;
    try {
        const auto present = present_ranges(fd.get(), part_file, expected_size);
        return present ? present_bytes(*present) : 0;
    } catch (...) {  // allocation: a report, never a failure
        return 0;
    }
}

}  // namespace redist
