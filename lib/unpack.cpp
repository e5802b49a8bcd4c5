// unpack.cpp — the streaming unpacker: bounded queues, a liblzma decoder
// thread and a libarchive extractor thread. See include/redist/unpack.hpp.
//
// Why we decode xz ourselves: Debian's libarchive 3.6.2 decodes xz on one
// thread only, and its read filter sits in the same thread as the disk
// writes. Running lzma_stream_decoder_mt in a thread of its own lets a
// multi-block archive use every core, and even for a single-block archive it
// keeps hashing and writing files off the decoder's core.
//
// Threads and ownership:
//   write()   --[input_ queue]-->  decoder thread (xz only)  --[tar_ queue]-->
//   extractor thread (libarchive read from the queue, secure write to disk).
// For tar.gz and tar.zst the extractor reads input_ directly and lets
// libarchive's filters decode. Zip needs random access, so its bytes are
// spooled to `<stage>.zip.part` and extracted in finish().
//
// Errors: the first failure wins (fail()), and aborts both queues so that
// every blocked push/pop returns at once; the threads then run to their end
// and are joined by finish(), cancel() or the destructor.
#include "redist/unpack.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <lzma.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "redist/verify.hpp"

namespace redist {
namespace {

namespace fs = std::filesystem;

// ---- tuning ---------------------------------------------------------------
// Queue bounds are in bytes, so peak memory does not depend on the archive
// size or on how the caller slices its writes.
constexpr std::size_t kInputQueueBytes = 8u << 20;   // compressed bytes waiting
constexpr std::size_t kTarQueueBytes = 8u << 20;     // decoded tar bytes waiting
constexpr std::size_t kLzmaOutBuffer = 1u << 20;     // one decoded chunk
constexpr std::size_t kMinInputChunk = 64u << 10;    // small writes are coalesced
constexpr std::size_t kMaxInputChunk = 1u << 20;     // large writes are split
constexpr std::size_t kZipReadBlock = 1u << 20;
constexpr std::size_t kMaxSpares = 4;                // recycled buffers kept per queue

// ---- a chunk of bytes without the zero-fill of std::vector ------------------
struct chunk {
    std::unique_ptr<std::byte[]> bytes;
    std::size_t size = 0;
    std::size_t capacity = 0;

    static chunk make(std::size_t capacity) {
        chunk c;
        c.bytes = std::make_unique_for_overwrite<std::byte[]>(capacity);
        c.capacity = capacity;
        return c;
    }
};

// A FIFO of chunks bounded by the bytes it holds. push() blocks while full;
// pop() blocks while empty. close() ends the stream normally (pop drains what
// is left, then reports end); abort() wakes everyone and makes both fail.
class chunk_queue {
public:
    explicit chunk_queue(std::size_t capacity) : capacity_(capacity) {}

    enum class pop_result { ok, end, aborted };

    // Copies `size` bytes, appending to the last queued chunk while it has
    // room, so 1-byte writes do not become 1-byte chunks. False if aborted.
    bool push_copy(const std::byte* data, std::size_t size) {
        std::unique_lock lock(mutex_);
        while (size > 0) {
            not_full_.wait(lock, [&] { return aborted_ || bytes_ < capacity_; });
            if (aborted_) return false;
            if (queue_.empty() || queue_.back().size == queue_.back().capacity) {
                if (!spares_.empty()) {
                    queue_.push_back(std::move(spares_.back()));
                    spares_.pop_back();
                } else {
                    queue_.push_back(chunk::make(std::clamp(size, kMinInputChunk, kMaxInputChunk)));
                }
            }
            chunk& back = queue_.back();
            const std::size_t n = std::min(size, back.capacity - back.size);
            std::memcpy(back.bytes.get() + back.size, data, n);
            back.size += n;
            bytes_ += n;
            data += n;
            size -= n;
            not_empty_.notify_one();
        }
        return true;
    }

    // Moves a whole chunk in (the decoder's output). False if aborted.
    bool push(chunk&& c) {
        std::unique_lock lock(mutex_);
        not_full_.wait(lock, [&] { return aborted_ || bytes_ < capacity_; });
        if (aborted_) return false;
        bytes_ += c.size;
        queue_.push_back(std::move(c));
        not_empty_.notify_one();
        return true;
    }

    pop_result pop(chunk& out) {
        std::unique_lock lock(mutex_);
        not_empty_.wait(lock, [&] { return aborted_ || closed_ || !queue_.empty(); });
        if (aborted_) return pop_result::aborted;
        if (queue_.empty()) return pop_result::end;
        out = std::move(queue_.front());
        queue_.pop_front();
        bytes_ -= out.size;
        not_full_.notify_one();
        return pop_result::ok;
    }

    // Buffer recycling: consumers hand back the chunks they are done with and
    // producers reuse them, so a steady stream does not malloc/munmap (and
    // page-fault) a fresh buffer per chunk, and reused buffers stay in cache.
    void recycle(chunk&& c) {
        if (!c.bytes) return;
        std::lock_guard lock(mutex_);
        if (spares_.size() < kMaxSpares) {
            c.size = 0;
            spares_.push_back(std::move(c));
        }
    }

    chunk spare_or_make(std::size_t capacity) {
        {
            std::lock_guard lock(mutex_);
            if (!spares_.empty() && spares_.back().capacity == capacity) {
                chunk c = std::move(spares_.back());
                spares_.pop_back();
                return c;
            }
        }
        return chunk::make(capacity);
    }

    void close() {
        std::lock_guard lock(mutex_);
        closed_ = true;
        not_empty_.notify_all();
    }

    void abort() {
        std::lock_guard lock(mutex_);
        aborted_ = true;
        not_empty_.notify_all();
        not_full_.notify_all();
    }

private:
    std::mutex mutex_;
    std::condition_variable not_full_;
    std::condition_variable not_empty_;
    std::deque<chunk> queue_;
    std::vector<chunk> spares_;
    std::size_t bytes_ = 0;
    const std::size_t capacity_;
    bool closed_ = false;
    bool aborted_ = false;
};

// ---- RAII for the C handles --------------------------------------------------
struct archive_read_deleter {
    void operator()(archive* a) const noexcept { archive_read_free(a); }
};
struct archive_write_deleter {
    void operator()(archive* a) const noexcept { archive_write_free(a); }
};
using archive_reader = std::unique_ptr<archive, archive_read_deleter>;
using archive_writer = std::unique_ptr<archive, archive_write_deleter>;

struct lzma_guard {
    lzma_stream* strm;
    ~lzma_guard() { lzma_end(strm); }
};

class unique_fd {
public:
    unique_fd() = default;
    explicit unique_fd(int fd) : fd_(fd) {}
    unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    unique_fd& operator=(unique_fd&& o) noexcept {
        if (this != &o) {
            reset();
            fd_ = std::exchange(o.fd_, -1);
        }
        return *this;
    }
    ~unique_fd() { reset(); }
    int get() const noexcept { return fd_; }
    // Returns close()'s result: on NFS a failed write may only show up here.
    int reset() noexcept { return fd_ >= 0 ? ::close(std::exchange(fd_, -1)) : 0; }

private:
    int fd_ = -1;
};

// ---- entry-name validation -----------------------------------------------------

// Splits an archive entry name into its segments. Tolerates "./" prefixes,
// "." segments and doubled or trailing slashes (directory entries end in '/').
// Returns a message when the name is unsafe: absolute, contains "..", empty.
std::optional<std::string> split_entry_name(std::string_view name,
                                            std::vector<std::string_view>& segments) {
    segments.clear();
    if (name.empty()) return "empty entry name";
    if (name.front() == '/') return "absolute path in archive";
    std::size_t start = 0;
    while (start <= name.size()) {
        std::size_t end = name.find('/', start);
        if (end == std::string_view::npos) end = name.size();
        const std::string_view seg = name.substr(start, end - start);
        if (seg == "..") return "'..' in entry name";
        if (!seg.empty() && seg != ".") segments.push_back(seg);
        start = end + 1;
    }
    return std::nullopt;
}

std::string join_segments(const std::vector<std::string_view>& segments, std::size_t first) {
    std::string out;
    for (std::size_t i = first; i < segments.size(); ++i) {
        if (!out.empty()) out += '/';
        out += segments[i];
    }
    return out;
}

// A symlink target is accepted when it is relative and has the shape
// "../" * k followed by plain names, with k no deeper than the link's own
// directory inside the stage. Why not just collapse ".." lexically: a ".."
// that follows a name can walk back out through another symlink of the
// archive ("a -> ." then "b -> a/.."), which lexical resolution misses. With
// ".." only up front, the climb happens through real directories (libarchive
// refuses to write through symlinks), and the descent can only pass through
// symlinks that were themselves checked to stay inside.
std::optional<std::string> check_symlink_target(std::string_view target, std::size_t link_depth) {
    if (target.empty()) return "empty symlink target";
    if (target.front() == '/') return "absolute symlink target";
    std::size_t ups = 0;
    bool descended = false;
    std::size_t start = 0;
    while (start <= target.size()) {
        std::size_t end = target.find('/', start);
        if (end == std::string_view::npos) end = target.size();
        const std::string_view seg = target.substr(start, end - start);
        if (seg == "..") {
            if (descended) return "symlink target has '..' after a name";
            ++ups;
        } else if (!seg.empty() && seg != ".") {
            descended = true;
        }
        start = end + 1;
    }
    if (ups > link_depth) return "symlink target points outside the stage";
    return std::nullopt;
}

// Archive bytes shown to a person: C0 controls, DEL and (UTF-8 encoded) C1
// controls become \xNN, so that an entry name cannot send escape sequences
// to the user's terminal. Everything else, UTF-8 included, is kept.
std::string printable(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    const auto escape = [&](unsigned char c) {
        static const char digits[] = "0123456789abcdef";
        out += "\\x";
        out += digits[c >> 4];
        out += digits[c & 15];
    };
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c == 0x7f) {
            escape(c);
        } else if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                   static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
            escape(c);
            escape(static_cast<unsigned char>(text[++i]));
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

// The name of the reserved metadata directory at the prefix's root.
constexpr std::string_view kReservedDir = ".redist";

// True if a symlink whose directory lies `link_depth` levels below the stage
// root, with a target already accepted by check_symlink_target(), points into
// the reserved directory: "../" * link_depth followed by ".redist".
bool symlink_points_into_reserved(std::string_view target, std::size_t link_depth) {
    std::size_t ups = 0;
    std::size_t start = 0;
    while (start <= target.size()) {
        std::size_t end = target.find('/', start);
        if (end == std::string_view::npos) end = target.size();
        const std::string_view seg = target.substr(start, end - start);
        if (seg == "..") {
            ++ups;
        } else if (!seg.empty() && seg != ".") {
            return ups == link_depth && seg == kReservedDir;
        }
        start = end + 1;
    }
    return false;
}

std::string size_text(std::uint64_t bytes) {
    if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
    return std::to_string(bytes) + " bytes";
}

error expansion_error(std::uint64_t cap) {
    return make_error(error_code::unsafe_archive,
                      "archive expands to more than " + size_text(cap) +
                          ", the limit for data whose hash is not yet known (see --max-expansion)");
}

// Feeds `count` zero bytes to the hasher: sparse-file holes read back as zeros.
void hash_zeros(sha256_hasher& hasher, std::uint64_t count) {
    static const std::byte zeros[64 * 1024] = {};
    while (count > 0) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(count, sizeof zeros));
        hasher.update(zeros, n);
        count -= n;
    }
}

// ---- the extraction loop (shared by the tar stream and the zip file) ---------------

// Writes the entries of an opened libarchive reader under `stage`, checking
// each one before anything touches the disk.
class extractor {
public:
    extractor(std::string stage, const unpack_options& options)
        : stage_(std::move(stage)), options_(options) {}

    // Outcomes: ok | bad_archive | unsafe_archive | filesystem | internal.
    // `interrupted()` tells whether a read failure came from our own abort (the
    // real cause was recorded elsewhere).
    result<void> run(archive* in) {
        archive_writer out(archive_write_disk_new());
        if (!out) return make_error(error_code::internal, "archive_write_disk_new failed");
        // SECURE_SYMLINKS: never write through a symlink already on disk.
        // SECURE_NODOTDOT: never accept ".." in the path handed to libarchive.
        // No SECURE_NOABSOLUTEPATHS: we hand libarchive absolute paths under the
        // stage on purpose; the *original* entry name was checked for being
        // absolute (and for "..") by split_entry_name() before the rewrite,
        // which is what that flag would have protected.
        // No ARCHIVE_EXTRACT_OWNER: owners are never restored (files belong to
        // whoever installs). PERM restores the mode bits as archived (minus
        // setuid/setgid/sticky, cleared below) and ignores the umask; TIME
        // restores mtimes. Directory modes and times are applied by
        // libarchive's deferred fixup at archive_write_close(), so a read-only
        // directory does not block the files that follow it.
        const int flags = ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
                          ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT;
        if (archive_write_disk_set_options(out.get(), flags) != ARCHIVE_OK)
            return make_error(error_code::internal, "archive_write_disk_set_options failed");

        for (;;) {
            archive_entry* entry = nullptr;
            const int r = archive_read_next_header(in, &entry);
            if (r == ARCHIVE_EOF) break;
            // ARCHIVE_WARN here (e.g. a malformed pax attribute or a name that
            // cannot be converted) is treated as failure: we would rather stop
            // than install a tree that differs from what the archive meant.
            if (r < ARCHIVE_OK) return read_error(in, "");
            auto written = write_entry(in, out.get(), entry);
            if (!written) return written;
        }
        // Runs the deferred directory fixups (modes, times).
        if (archive_write_close(out.get()) < ARCHIVE_OK)
            return make_error(error_code::filesystem,
                              std::string("cannot finish directories: ") + error_text(out.get()))
                .with_path(stage_)
                .with_source(options_.source);
        return {};
    }

    std::vector<unpacked_entry> take_entries() {
        std::vector<unpacked_entry> out;
        out.reserve(entries_.size());
        for (std::size_t i = 0; i < entries_.size(); ++i)
            if (!replaced_[i]) out.push_back(std::move(entries_[i]));
        return out;
    }

private:
    static std::string error_text(archive* a) {
        const char* s = archive_error_string(a);
        return s ? s : "unknown libarchive error";
    }

    error unsafe(std::string message, const std::string& original) const {
        return make_error(error_code::unsafe_archive, printable(message))
            .with_path(printable(original))
            .with_source(options_.source);
    }

    error read_error(archive* in, const std::string& original) const {
        error e = make_error(error_code::bad_archive, printable(error_text(in)));
        e.path = printable(original);
        e.source = options_.source;
        return e;
    }

    // Counts `bytes` more of decoded output against the cap.
    bool within_cap(std::uint64_t bytes) {
        output_ += bytes;
        return options_.max_output_bytes == 0 || output_ <= options_.max_output_bytes;
    }

    // libarchive's own security checks (symlink in the path, "..") fail with
    // errno 0 or ARCHIVE_ERRNO_MISC: that is the second line of defence
    // tripping, so it is reported as unsafe_archive. A real errno (ENOSPC,
    // EACCES, EROFS, ...) is a filesystem error about the path we wrote.
    error write_error(archive* out, const std::string& original, const std::string& target) const {
        const int en = archive_errno(out);
        if (en <= 0) return unsafe(error_text(out), original);
        // libarchive's text alone ("write failed") hides the cause: add errno's ("No space left on device").
        std::string message = error_text(out);
        const std::string cause = std::strerror(en);
        if (message.find(cause) == std::string::npos) message += ": " + cause;
        return make_error(error_code::filesystem, printable(message))
            .with_path(printable(target))
            .with_source(options_.source);
    }

    result<void> write_entry(archive* in, archive* out, archive_entry* entry) {
        const char* raw_name = archive_entry_pathname(entry);
        if (!raw_name) return make_error(error_code::bad_archive, "entry without a name")
                                  .with_source(options_.source);
        const std::string original = raw_name;

        // 1. Validate the original name, before any rewriting.
        if (auto bad = split_entry_name(original, segments_)) return unsafe(*bad, original);
        const mode_t type = archive_entry_filetype(entry);
        const char* hardlink = archive_entry_hardlink(entry);
        if (segments_.empty()) {
            // "./" itself is the stage root: nothing to create.
            if (type == AE_IFDIR && !hardlink) return {};
            return unsafe("empty entry name", original);
        }
        std::size_t first = 0;
        if (options_.strip_top_level) {
            if (!top_) top_ = std::string(segments_.front());
            else if (segments_.front() != *top_)
                return unsafe("more than one top-level directory", original);
            if (segments_.size() == 1) {
                if (type == AE_IFDIR && !hardlink) return {};  // the top directory itself
                return unsafe("entry outside the top-level directory", original);
            }
            first = 1;
        }
        if (segments_[first] == kReservedDir)
            return unsafe("entry under .redist/, which is reserved for redist's own metadata", original);
        std::string rel = join_segments(segments_, first);
        const std::size_t depth = segments_.size() - first - 1;  // of the entry's directory
        if (!within_cap(512)) return expansion_error(options_.max_output_bytes);  // a tar header's worth

        // 2. Kind checks.
        unpacked_entry record;
        record.path = rel;
        if (hardlink) {
            // pax lets a hardlink carry data; libarchive then truncates and
            // rewrites the file it links to, and every record of that inode
            // would lie. Real archives never do this: refuse it.
            if (archive_entry_size_is_set(entry) && archive_entry_size(entry) > 0)
                return unsafe("hardlink entry carries data (it would rewrite an earlier file)", original);
            if (auto bad = split_entry_name(hardlink, segments_))
                return unsafe("hardlink target: " + *bad, original);
            std::size_t tfirst = 0;
            if (options_.strip_top_level) {
                if (segments_.size() < 2 || segments_.front() != *top_)
                    return unsafe("hardlink target outside the top-level directory", original);
                tfirst = 1;
            }
            std::string target_rel = join_segments(segments_, tfirst);
            auto it = index_.find(target_rel);
            if (it == index_.end() || replaced_[it->second] ||
                (entries_[it->second].kind != entry_kind::regular &&
                 entries_[it->second].kind != entry_kind::hardlink))
                return unsafe("hardlink target is not an earlier file of the archive", original);
            const unpacked_entry& target = entries_[it->second];
            record.kind = entry_kind::hardlink;
            record.size = target.size;
            record.sha256 = target.sha256;
            record.mode = target.mode;
            record.link_target = target_rel;
            archive_entry_copy_hardlink(entry, (stage_ + "/" + target_rel).c_str());
        } else {
            switch (type) {
                case AE_IFREG: record.kind = entry_kind::regular; break;
                case AE_IFDIR: record.kind = entry_kind::directory; break;
                case AE_IFLNK: {
                    record.kind = entry_kind::symlink;
                    const char* target = archive_entry_symlink(entry);
                    if (!target) return unsafe("symlink without a target", original);
                    if (auto bad = check_symlink_target(target, depth)) return unsafe(*bad, original);
                    if (symlink_points_into_reserved(target, depth))
                        return unsafe("symlink into .redist/, which is reserved for redist's own metadata",
                                      original);
                    record.link_target = target;
                    break;
                }
                case AE_IFCHR:
                case AE_IFBLK: return unsafe("device node in archive", original);
                case AE_IFIFO: return unsafe("fifo in archive", original);
                case AE_IFSOCK: return unsafe("socket in archive", original);
                default: return unsafe("unsupported entry type in archive", original);
            }
        }
        // Writing below a symlink of this archive would land wherever it points;
        // libarchive would refuse too, but this gives a clear message.
        for (std::size_t pos = rel.find('/'); pos != std::string::npos; pos = rel.find('/', pos + 1))
            if (symlinks_.count(rel.substr(0, pos)))
                return unsafe("entry below a symlink of the archive", original);

        // 3. Rewrite under the stage. Drop setuid/setgid/sticky.
        const unsigned mode = static_cast<unsigned>(archive_entry_perm(entry)) & 0777u;
        archive_entry_set_perm(entry, static_cast<mode_t>(mode));
        if (record.kind != entry_kind::hardlink) record.mode = mode;
        const std::string target_path = stage_ + "/" + rel;
        archive_entry_copy_pathname(entry, target_path.c_str());

        // 4. Write. ARCHIVE_WARN counts as failure: for write_disk it means a
        // mode, time or link could not be restored as archived.
        if (archive_write_header(out, entry) < ARCHIVE_OK)
            return write_error(out, original, target_path);
        if (record.kind == entry_kind::regular || record.kind == entry_kind::hardlink) {
            const bool hash = record.kind == entry_kind::regular;
            sha256_hasher hasher;
            std::uint64_t pos = 0;
            for (;;) {
                const void* buf = nullptr;
                std::size_t len = 0;
                la_int64_t offset = 0;
                const int r = archive_read_data_block(in, &buf, &len, &offset);
                if (r == ARCHIVE_EOF) break;
                if (r < ARCHIVE_OK) return read_error(in, original);
                if (offset < 0 || static_cast<std::uint64_t>(offset) < pos)
                    return make_error(error_code::bad_archive, "overlapping data blocks")
                        .with_path(printable(original))
                        .with_source(options_.source);
                // Holes count: they cost hashing time, and a dense copy later.
                if (!within_cap(static_cast<std::uint64_t>(offset) - pos + len))
                    return expansion_error(options_.max_output_bytes);
                if (hash) hash_zeros(hasher, static_cast<std::uint64_t>(offset) - pos);
                if (len > 0 && archive_write_data_block(out, buf, len, offset) < ARCHIVE_OK)
                    return write_error(out, original, target_path);
                if (hash) hasher.update(buf, len);
                pos = static_cast<std::uint64_t>(offset) + len;
            }
            if (hash) {
                // A sparse file may end in a hole; libarchive extends the file to
                // the declared size at finish_entry.
                if (archive_entry_size_is_set(entry) && archive_entry_size(entry) > 0 &&
                    static_cast<std::uint64_t>(archive_entry_size(entry)) > pos) {
                    if (!within_cap(static_cast<std::uint64_t>(archive_entry_size(entry)) - pos))
                        return expansion_error(options_.max_output_bytes);
                    hash_zeros(hasher, static_cast<std::uint64_t>(archive_entry_size(entry)) - pos);
                    pos = static_cast<std::uint64_t>(archive_entry_size(entry));
                }
                record.size = pos;
                record.sha256 = hasher.finish_hex();
            }
        }
        if (archive_write_finish_entry(out) < ARCHIVE_OK) return write_error(out, original, target_path);

        // 5. Remember it. A later entry with the same path replaces the earlier one.
        if (auto it = index_.find(rel); it != index_.end()) {
            replaced_[it->second] = true;
            index_.erase(it);
        }
        if (record.kind == entry_kind::symlink) symlinks_.insert(rel);
        else symlinks_.erase(rel);
        index_.emplace(rel, entries_.size());
        entries_.push_back(std::move(record));
        replaced_.push_back(false);
        return {};
    }

    std::string stage_;  // canonical, absolute, no trailing slash
    const unpack_options& options_;
    std::optional<std::string> top_;
    std::vector<std::string_view> segments_;  // scratch
    std::vector<unpacked_entry> entries_;
    std::vector<bool> replaced_;
    std::unordered_map<std::string, std::size_t> index_;  // stage-relative path -> entries_
    std::unordered_set<std::string> symlinks_;
    std::uint64_t output_ = 0;  // decoded bytes so far, for max_output_bytes
};

// ---- the unpacker ------------------------------------------------------------

error lzma_error(lzma_ret ret, bool finishing) {
    switch (ret) {
        case LZMA_FORMAT_ERROR: return make_error(error_code::bad_archive, "not an xz stream");
        case LZMA_OPTIONS_ERROR: return make_error(error_code::bad_archive, "unsupported xz options");
        case LZMA_DATA_ERROR: return make_error(error_code::bad_archive, "corrupt xz data");
        case LZMA_BUF_ERROR:
            return make_error(error_code::bad_archive,
                              finishing ? "truncated xz data" : "xz decoder made no progress");
        case LZMA_MEM_ERROR: return make_error(error_code::internal, "xz decoder out of memory");
        case LZMA_MEMLIMIT_ERROR:
            return make_error(error_code::bad_archive, "xz data needs more memory than allowed");
        default: return make_error(error_code::internal, "xz decoder failed (lzma_ret " +
                                                             std::to_string(static_cast<int>(ret)) + ")");
    }
}

class unpacker_impl final : public stream_unpacker {
public:
    unpacker_impl(std::string stage, const unpack_options& options)
        : stage_(std::move(stage)), options_(options) {}

    ~unpacker_impl() override { cancel(); }

    result<void> start_workers() {
        try {
            switch (options_.format) {
                case archive_format::tar_xz:
                    decoder_ = std::thread([this] { guarded([this] { decode_xz(); }); });
                    extractor_ = std::thread([this] { guarded([this] { extract_stream(tar_); }); });
                    break;
                case archive_format::tar_gz:
                case archive_format::tar_zst:
                    extractor_ = std::thread([this] { guarded([this] { extract_stream(input_); }); });
                    break;
                case archive_format::zip: {
                    spool_path_ = stage_ + ".zip.part";
                    spool_ = unique_fd(::open(spool_path_.c_str(),
                                              O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
                    if (spool_.get() < 0)
                        return make_error(error_code::filesystem,
                                          std::string("cannot create spool file: ") + std::strerror(errno))
                            .with_path(spool_path_);
                    break;
                }
                case archive_format::unknown:
                    return make_error(error_code::bad_archive, "unsupported archive format")
                        .with_source(options_.source);
            }
        } catch (const std::system_error& e) {
            return make_error(error_code::internal, std::string("cannot start thread: ") + e.what());
        }
        return {};
    }

    result<void> write(const std::byte* data, std::size_t size) override {
        if (finished_) return make_error(error_code::internal, "write after finish");
        if (failed_.load(std::memory_order_acquire)) return current_error();
        if (size == 0) return {};
        if (options_.format == archive_format::zip) return spool(data, size);
        bool pushed = false;
        try {
            pushed = input_.push_copy(data, size);
        } catch (const std::bad_alloc&) {
            fail(make_error(error_code::internal, "out of memory"));
        }
        if (!pushed) return current_error();
        return {};
    }

    result<std::vector<unpacked_entry>> finish() override {
        if (finished_) return make_error(error_code::internal, "finish called twice");
        finished_ = true;
        if (options_.format == archive_format::zip) {
            auto r = extract_zip();
            remove_spool();
            if (!r) fail(std::move(r).error_value());
        } else {
            input_.close();
            join();
        }
        if (failed_.load(std::memory_order_acquire)) return current_error();
        return std::move(entries_);
    }

    void cancel() noexcept override {
        if (!finished_ || decoder_.joinable() || extractor_.joinable())
            fail(make_error(error_code::cancelled, "unpacking cancelled").with_source(options_.source));
        join();
        remove_spool();
    }

private:
    // Runs a thread body; an exception (bad_alloc from a queue or a hasher)
    // becomes the recorded error instead of std::terminate.
    template <class F>
    void guarded(F&& body) noexcept {
        try {
            body();
        } catch (const std::bad_alloc&) {
            fail(make_error(error_code::internal, "out of memory"));
        } catch (const std::exception& e) {
            fail(make_error(error_code::internal, e.what()));
        } catch (...) {
            fail(make_error(error_code::internal, "unknown exception in unpacker thread"));
        }
    }

    void fail(error e) noexcept {
        {
            std::lock_guard lock(error_mutex_);
            if (!error_) {
                try {
                    if (e.source.empty()) e.source = options_.source;
                    error_ = std::move(e);
                } catch (...) {
                    error_ = make_error(error_code::internal, "out of memory");
                }
                failed_.store(true, std::memory_order_release);
            }
        }
        input_.abort();
        tar_.abort();
    }

    error current_error() {
        std::lock_guard lock(error_mutex_);
        return error_ ? *error_ : make_error(error_code::internal, "unpacker stopped");
    }

    void join() noexcept {
        if (decoder_.joinable()) decoder_.join();
        if (extractor_.joinable()) extractor_.join();
    }

    void remove_spool() noexcept {
        if (spool_path_.empty()) return;
        spool_.reset();
        ::unlink(spool_path_.c_str());
        spool_path_.clear();
    }

    // ---- xz decoder thread
    void decode_xz() {
        lzma_stream strm = LZMA_STREAM_INIT;
        lzma_mt mt{};
        mt.flags = LZMA_CONCATENATED;
        mt.threads = options_.decoder_threads ? options_.decoder_threads
                                              : std::max(1u, std::thread::hardware_concurrency());
        mt.timeout = 0;  // block until there is output: we have nothing else to do
        // Above memlimit_threading the decoder falls back to fewer threads
        // (down to one); memlimit_stop is where it would give up, which we
        // never want for a hash-verified download.
        mt.memlimit_threading = options_.decoder_memlimit;
        mt.memlimit_stop = UINT64_MAX;
        lzma_ret ret = lzma_stream_decoder_mt(&strm, &mt);
        if (ret != LZMA_OK) {
            fail(lzma_error(ret, false));
            return;
        }
        lzma_guard guard{&strm};

        chunk in;
        chunk out = tar_.spare_or_make(kLzmaOutBuffer);
        std::uint64_t decoded = 0;  // also counts what follows the tar end marker
        strm.next_out = reinterpret_cast<std::uint8_t*>(out.bytes.get());
        strm.avail_out = out.capacity;
        lzma_action action = LZMA_RUN;
        for (;;) {
            if (strm.avail_in == 0 && action == LZMA_RUN) {
                input_.recycle(std::move(in));
                const auto got = input_.pop(in);
                if (got == chunk_queue::pop_result::aborted) return;
                if (got == chunk_queue::pop_result::end) {
                    action = LZMA_FINISH;
                } else {
                    strm.next_in = reinterpret_cast<const std::uint8_t*>(in.bytes.get());
                    strm.avail_in = in.size;
                }
            }
            ret = lzma_code(&strm, action);
            if (ret != LZMA_OK && ret != LZMA_STREAM_END) {
                fail(lzma_error(ret, action == LZMA_FINISH));
                return;
            }
            if (strm.avail_out == 0 || ret == LZMA_STREAM_END) {
                out.size = out.capacity - strm.avail_out;
                decoded += out.size;
                if (options_.max_output_bytes != 0 && decoded > options_.max_output_bytes) {
                    fail(expansion_error(options_.max_output_bytes));
                    return;
                }
                if (out.size > 0) {
                    if (!tar_.push(std::move(out))) return;
                    out = tar_.spare_or_make(kLzmaOutBuffer);
                }
                strm.next_out = reinterpret_cast<std::uint8_t*>(out.bytes.get());
                strm.avail_out = out.capacity;
            }
            if (ret == LZMA_STREAM_END) {
                tar_.close();
                return;
            }
        }
    }

    // ---- extractor thread (tar streams)
    struct read_source {
        chunk_queue* queue;
        chunk current;
    };

    // libarchive's read callback contract: return the byte count and point
    // *buffer at data that stays valid until the next call; 0 is end of
    // input; ARCHIVE_FATAL (with an error set) aborts the read.
    static la_ssize_t read_callback(archive* a, void* user, const void** buffer) {
        auto* src = static_cast<read_source*>(user);
        src->queue->recycle(std::move(src->current));  // libarchive is done with it
        switch (src->queue->pop(src->current)) {
            case chunk_queue::pop_result::ok:
                *buffer = src->current.bytes.get();
                return static_cast<la_ssize_t>(src->current.size);
            case chunk_queue::pop_result::end: return 0;
            case chunk_queue::pop_result::aborted: break;
        }
        archive_set_error(a, ECANCELED, "unpacking stopped");
        return ARCHIVE_FATAL;
    }

    void extract_stream(chunk_queue& queue) {
        archive_reader in(archive_read_new());
        if (!in) {
            fail(make_error(error_code::internal, "archive_read_new failed"));
            return;
        }
        archive_read_support_format_tar(in.get());
        if (options_.format != archive_format::tar_xz) {
            // Explicit filters, not archive_read_support_filter_all(): "all"
            // also registers lrzip/lzop/grzip, which run external programs
            // chosen by the data's magic bytes.
            archive_read_support_filter_gzip(in.get());
            archive_read_support_filter_zstd(in.get());
            archive_read_support_filter_xz(in.get());
            archive_read_support_filter_bzip2(in.get());
        }
        read_source src{&queue, {}};
        if (archive_read_open(in.get(), &src, nullptr, &read_callback, nullptr) != ARCHIVE_OK) {
            fail(make_error(error_code::bad_archive, archive_error_string(in.get())
                                                          ? archive_error_string(in.get())
                                                          : "cannot open archive"));
            return;
        }
        extractor ex(stage_, options_);
        auto r = ex.run(in.get());
        if (!r) {
            fail(std::move(r).error_value());
            return;
        }
        // The tar end marker may come before the end of the data (block
        // padding). Drain the rest so the xz decoder reaches the end of the
        // stream and verifies its checks, rather than blocking on a full queue.
        chunk scratch;
        for (;;) {
            const auto got = queue.pop(scratch);
            if (got == chunk_queue::pop_result::aborted) return;
            if (got == chunk_queue::pop_result::end) break;
        }
        entries_ = ex.take_entries();
    }

    // ---- zip: spool, then extract with the seekable reader
    result<void> spool(const std::byte* data, std::size_t size) {
        while (size > 0) {
            const ssize_t n = ::write(spool_.get(), data, size);
            if (n < 0) {
                if (errno == EINTR) continue;
                error e = make_error(error_code::filesystem,
                                     std::string("cannot write spool file: ") + std::strerror(errno))
                              .with_path(spool_path_);
                fail(e);
                return e;
            }
            data += n;
            size -= static_cast<std::size_t>(n);
        }
        return {};
    }

    result<void> extract_zip() {
        if (spool_.reset() != 0)
            return make_error(error_code::filesystem,
                              std::string("cannot write spool file: ") + std::strerror(errno))
                .with_path(spool_path_);
        archive_reader in(archive_read_new());
        if (!in) return make_error(error_code::internal, "archive_read_new failed");
        // The seekable reader trusts the central directory, as unzip does;
        // the streaming one guesses from local headers and fails on zips whose
        // sizes sit only in data descriptors.
        archive_read_support_format_zip_seekable(in.get());
        if (archive_read_open_filename(in.get(), spool_path_.c_str(), kZipReadBlock) != ARCHIVE_OK)
            return make_error(error_code::bad_archive, archive_error_string(in.get())
                                                           ? archive_error_string(in.get())
                                                           : "cannot open zip archive")
                .with_source(options_.source);
        extractor ex(stage_, options_);
        auto r = ex.run(in.get());
        if (!r) return r;
        entries_ = ex.take_entries();
        return {};
    }

    const std::string stage_;
    const unpack_options options_;
    chunk_queue input_{kInputQueueBytes};
    chunk_queue tar_{kTarQueueBytes};
    std::thread decoder_;
    std::thread extractor_;
    std::mutex error_mutex_;
    std::optional<error> error_;
    std::atomic<bool> failed_{false};
    bool finished_ = false;
    std::vector<unpacked_entry> entries_;  // written by the extractor, read after join
    std::string spool_path_;
    unique_fd spool_;
};

}  // namespace

result<std::unique_ptr<stream_unpacker>> stream_unpacker::start(const fs::path& stage_dir,
                                                                const unpack_options& options) {
    std::error_code ec;
    // Canonical: libarchive's SECURE_SYMLINKS walks the whole absolute path
    // from "/" and refuses any symlink on it, including one above the stage
    // (a symlinked /tmp or home directory).
    const fs::path stage = fs::canonical(stage_dir, ec);
    if (ec)
        return make_error(error_code::filesystem, "cannot resolve staging directory: " + ec.message())
            .with_path(stage_dir.string());
    if (!fs::is_directory(stage, ec))
        return make_error(error_code::filesystem, "staging directory is not a directory")
            .with_path(stage.string());
    if (!fs::is_empty(stage, ec) || ec)
        return make_error(error_code::filesystem, "staging directory is not empty")
            .with_path(stage.string());
    try {
        auto impl = std::make_unique<unpacker_impl>(stage.string(), options);
        REDIST_TRY_VOID(impl->start_workers());
        return std::unique_ptr<stream_unpacker>(std::move(impl));
    } catch (const std::bad_alloc&) {
        return make_error(error_code::internal, "out of memory");
    }
}

}  // namespace redist
