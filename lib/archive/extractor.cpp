// archive/extractor.cpp — see extractor.hpp.
#include "archive/extractor.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "archive/entry_names.hpp"
#include "support/posix_file.hpp"
#include "support/stopwatch.hpp"

namespace redist::unpacking {
namespace {

std::string size_text(std::uint64_t bytes) {
    if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
    return std::to_string(bytes) + " bytes";
}

}  // namespace

error expansion_error(std::uint64_t cap) {
    return make_error(error_code::unsafe_archive,
                      "archive expands to more than " + size_text(cap) +
                          ", the limit for data whose hash is not yet known (see --max-expansion)");
}

result<void> extractor::run(archive* in) {
    auto r = run_entries(in);
    if (!r) state_->on_error(r.error_value());  // stops the workers' remaining blocks
    state_->wait_idle();
    if (!r) return r;
    if (state_->stop.load(std::memory_order_acquire)) return make_error(error_code::cancelled, "unpacking stopped");
    // Runs the deferred directory fixups (modes, times), after the files in them.
    if (archive_write_close(out_.get()) < ARCHIVE_OK)
        return make_error(error_code::filesystem, std::string("cannot finish directories: ") + error_text(out_.get()))
            .with_path(stage_)
            .with_source(options_.source);
    return {};
}

std::vector<unpacked_entry> extractor::take_entries() {
    std::vector<unpacked_entry> out;
    out.reserve(entries_.size());
    for (std::size_t i = 0; i < entries_.size(); ++i) {
        if (index_.at(entries_[i].path) != i) continue;  // replaced by a later entry
        if (jobs_[i]) {
            entries_[i].sha256 = jobs_[i]->sha256();
            entries_[i].piece_size = jobs_[i]->piece_size();
            entries_[i].size = jobs_[i]->size();
        }
        out.push_back(std::move(entries_[i]));
    }
    return out;
}

result<void> extractor::run_entries(archive* in) {
    {
        std::lock_guard umask_lock(umask_mutex());  // it flips the process umask: see posix_file.hpp
        out_.reset(archive_write_disk_new());
    }
    if (!out_) return make_error(error_code::internal, "archive_write_disk_new failed");
    // SECURE_SYMLINKS and SECURE_NODOTDOT, the second line of defence of
    // unpack.hpp; not NOABSOLUTEPATHS (split_entry_name() checked the
    // original name before it was made absolute under the stage), nor
    // OWNER (files belong to whoever installs). PERM restores the mode bits as archived (minus
    // setuid/setgid/sticky, cleared below) and ignores the umask; TIME
    // restores mtimes. Directory modes and times are applied by
    // libarchive's deferred fixup at archive_write_close(), so a read-only
    // directory does not block the files that follow it.
    const int flags = ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                      ARCHIVE_EXTRACT_SECURE_NODOTDOT;
    if (archive_write_disk_set_options(out_.get(), flags) != ARCHIVE_OK)
        return make_error(error_code::internal, "archive_write_disk_set_options failed");
    stage_fd_ = unique_fd(::open(stage_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!stage_fd_) return os_error("cannot open staging directory", stage_, errno);

    for (;;) {
        if (state_->stop.load(std::memory_order_acquire)) return make_error(error_code::cancelled, "unpacking stopped");
        archive_entry* entry = nullptr;
        const int r = archive_read_next_header(in, &entry);
        if (r == ARCHIVE_EOF) break;
        // ARCHIVE_WARN here (e.g. a malformed pax attribute or a name that
        // cannot be converted) is treated as failure: we would rather stop
        // than install a tree that differs from what the archive meant.
        if (r < ARCHIVE_OK) return bad_data(error_text(in), "");
        REDIST_TRY_VOID(write_entry(in, entry));
    }
    return {};
}

error extractor::unsafe(const std::string& message, const std::string& original) const {
    return make_error(error_code::unsafe_archive, printable_entry(message))
        .with_path(printable_entry(original))
        .with_source(options_.source);
}

error extractor::bad_data(const std::string& message, const std::string& original) const {
    return make_error(error_code::bad_archive, printable_entry(message))
        .with_path(printable_entry(original))
        .with_source(options_.source);
}

error extractor::os_error(const std::string& what, const std::string& path, int err) const {
    return errno_error(what, printable_entry(path), err).with_source(options_.source);
}

bool extractor::within_cap(std::uint64_t bytes) {
    output_ += bytes;
    return options_.max_output_bytes == 0 || output_ <= options_.max_output_bytes;
}

error extractor::write_error(archive* out, const std::string& original, const std::string& target) const {
    const int en = archive_errno(out);
    if (en <= 0) return unsafe(error_text(out), original);
    // libarchive's text alone ("write failed") hides the cause: add errno's ("No space left on device").
    std::string message = error_text(out);
    const std::string cause = std::strerror(en);
    if (message.find(cause) == std::string::npos) message += ": " + cause;
    return make_error(error_code::filesystem, printable_entry(message))
        .with_path(printable_entry(target))
        .with_source(options_.source);
}

result<void> extractor::write_entry(archive* in, archive_entry* entry) {
    const char* raw_name = archive_entry_pathname(entry);
    if (!raw_name) return make_error(error_code::bad_archive, "entry without a name").with_source(options_.source);
    const std::string original = raw_name;
    REDIST_TRY(const placement place, place_entry(entry, original));  // 1
    if (place.skip) return {};
    // (An exclude predicate on place.rel belongs here: after validation,
    // before anything is written; libarchive skips the data itself.)
    if (!within_cap(512)) return expansion_error(options_.max_output_bytes);  // a tar header's worth
    unpacked_entry record;
    record.path = place.rel;
    std::shared_ptr<file_job> job;
    REDIST_TRY_VOID(classify_entry(entry, original, place, record, job));  // 2
    REDIST_TRY_VOID(check_not_below_symlink(place.rel, original));
    // 3. Drop setuid/setgid/sticky.
    const unsigned mode = static_cast<unsigned>(archive_entry_perm(entry)) & 0777u;
    archive_entry_set_perm(entry, static_cast<mode_t>(mode));
    if (record.kind != entry_kind::hardlink) {
        record.mode = mode;
        // The times restored on what is written (a hardlink keeps its target's).
        if (archive_entry_mtime_is_set(entry))
            record.mtime = {true, archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)};
        if (archive_entry_atime_is_set(entry))
            record.atime = {true, archive_entry_atime(entry), archive_entry_atime_nsec(entry)};
    }
    const std::string target_path = stage_ + "/" + place.rel;
    if (record.kind == entry_kind::regular) {  // 4
        REDIST_TRY(job, write_regular(in, entry, original, place.rel, target_path, mode));
    } else {
        REDIST_TRY_VOID(write_other(entry, original, target_path));
    }
    remember(std::move(record), std::move(job));  // 5
    return {};
}

result<extractor::placement> extractor::place_entry(archive_entry* entry, const std::string& original) {
    if (auto bad = split_entry_name(original, segments_)) return unsafe(*bad, original);
    const bool plain_dir = archive_entry_filetype(entry) == AE_IFDIR && !archive_entry_hardlink(entry);
    placement place;
    if (segments_.empty()) {
        // "./" itself is the stage root: nothing to create.
        if (plain_dir) return placement{{}, 0, true};
        return unsafe("empty entry name", original);
    }
    std::size_t first = 0;
    if (options_.strip_top_level) {
        if (!top_) top_ = std::string(segments_.front());
        else if (segments_.front() != *top_) return unsafe("more than one top-level directory", original);
        if (segments_.size() == 1) {
            if (plain_dir) return placement{{}, 0, true};  // the top directory itself
            return unsafe("entry outside the top-level directory", original);
        }
        first = 1;
    }
    if (segments_[first] == kReservedDir)
        return unsafe("entry under .redist/, which is reserved for redist's own metadata", original);
    place.rel = join_segments(segments_, first);
    place.depth = segments_.size() - first - 1;
    return place;
}

result<void> extractor::classify_entry(archive_entry* entry, const std::string& original, const placement& place,
                                       unpacked_entry& record, std::shared_ptr<file_job>& job) {
    if (archive_entry_hardlink(entry)) return classify_hardlink(entry, original, record, job);
    switch (archive_entry_filetype(entry)) {
        case AE_IFREG: record.kind = entry_kind::regular; return {};
        case AE_IFDIR: record.kind = entry_kind::directory; return {};
        case AE_IFLNK: {
            record.kind = entry_kind::symlink;
            const char* target = archive_entry_symlink(entry);
            if (!target) return unsafe("symlink without a target", original);
            if (auto bad = check_symlink_target(target, place.depth)) return unsafe(*bad, original);
            if (symlink_points_into_reserved(target, place.depth))
                return unsafe("symlink into .redist/, which is reserved for redist's own metadata", original);
            record.link_target = target;
            return {};
        }
        case AE_IFCHR:
        case AE_IFBLK: return unsafe("device node in archive", original);
        case AE_IFIFO: return unsafe("fifo in archive", original);
        case AE_IFSOCK: return unsafe("socket in archive", original);
        default: return unsafe("unsupported entry type in archive", original);
    }
}

result<void> extractor::classify_hardlink(archive_entry* entry, const std::string& original, unpacked_entry& record,
                                          std::shared_ptr<file_job>& job) {
    // pax lets a hardlink carry data; libarchive then truncates and
    // rewrites the file it links to, and every record of that inode
    // would lie. Real archives never do this: refuse it.
    if (archive_entry_size_is_set(entry) && archive_entry_size(entry) > 0)
        return unsafe("hardlink entry carries data (it would rewrite an earlier file)", original);
    if (auto bad = split_entry_name(archive_entry_hardlink(entry), segments_))
        return unsafe("hardlink target: " + *bad, original);
    std::size_t tfirst = 0;
    if (options_.strip_top_level) {
        if (segments_.size() < 2 || segments_.front() != *top_)
            return unsafe("hardlink target outside the top-level directory", original);
        tfirst = 1;
    }
    std::string target_rel = join_segments(segments_, tfirst);
    auto it = index_.find(target_rel);
    if (it == index_.end() ||
        (entries_[it->second].kind != entry_kind::regular && entries_[it->second].kind != entry_kind::hardlink))
        return unsafe("hardlink target is not an earlier file of the archive", original);
    // The target's digest may still be in the works: share its job, and
    // read both when every file is done. libarchive links a data-less
    // hardlink without touching the inode's mode or times, so the link
    // does not race the target's last task.
    const unpacked_entry& target = entries_[it->second];
    job = jobs_[it->second];
    record.kind = entry_kind::hardlink;
    record.size = target.size;
    record.sha256 = target.sha256;
    record.piece_size = target.piece_size;
    record.mode = target.mode;
    record.link_target = target_rel;
    archive_entry_copy_hardlink(entry, (stage_ + "/" + target_rel).c_str());
    return {};
}

result<void> extractor::check_not_below_symlink(const std::string& rel, const std::string& original) const {
    for (std::size_t pos = rel.find('/'); pos != std::string::npos; pos = rel.find('/', pos + 1))
        if (symlinks_.count(rel.substr(0, pos))) return unsafe("entry below a symlink of the archive", original);
    return {};
}

result<void> extractor::write_other(archive_entry* entry, const std::string& original, const std::string& target_path) {
    parent_dir_.clear();  // the namespace may change under the cached directory
    parent_fd_.reset();
    archive_entry_copy_pathname(entry, target_path.c_str());
    {
        // Every header flips the process umask to 0 and back, as
        // archive_write_disk_new() does (see posix_file.hpp).
        std::lock_guard umask_lock(umask_mutex());
        if (archive_write_header(out_.get(), entry) < ARCHIVE_OK) return write_error(out_.get(), original, target_path);
    }
    if (archive_write_finish_entry(out_.get()) < ARCHIVE_OK) return write_error(out_.get(), original, target_path);
    return {};
}

result<std::shared_ptr<file_job>> extractor::write_regular(archive* in, archive_entry* entry,
                                                           const std::string& original, const std::string& rel,
                                                           const std::string& target_path, unsigned mode) {
    REDIST_TRY(unique_fd fd, create_regular(rel, original, target_path));
    file_meta meta;
    meta.path = target_path;
    meta.mode = mode;
    meta.times[0] = archive_entry_atime_is_set(entry)
                        ? timespec{archive_entry_atime(entry), archive_entry_atime_nsec(entry)}
                        : timespec{0, UTIME_NOW};
    meta.times[1] = archive_entry_mtime_is_set(entry)
                        ? timespec{archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}
                        : timespec{0, UTIME_NOW};
    if (archive_entry_size_is_set(entry) && archive_entry_size(entry) > 0)
        meta.declared_size = static_cast<std::uint64_t>(archive_entry_size(entry));
    // Inline writes hash and write on the extractor (see "Inline writes"): nothing to split.
    meta.split = meta.declared_size && *meta.declared_size >= kSplitBytes && !state_->inline_writes;
    const auto declared = meta.declared_size.value_or(0);
    auto job = std::make_shared<file_job>(state_, std::move(fd), std::move(meta));
    state_->file_started();
    // Whatever happens below, the job gets its end marker, so that it
    // finishes (closing its descriptor) and wait_idle() returns.
    struct ender {
        file_job& job;
        ~ender() { job.add(nullptr); }
    } end_guard{*job};
    REDIST_TRY_VOID(copy_data(in, *job, original, declared));
    return job;
}

result<void> extractor::copy_data(archive* in, file_job& job, const std::string& original, std::uint64_t declared) {
    block_ptr block;
    std::uint64_t pos = 0;
    for (;;) {
        const void* buf = nullptr;
        std::size_t len = 0;
        la_int64_t offset = 0;
        const int r = archive_read_data_block(in, &buf, &len, &offset);
        if (r == ARCHIVE_EOF) break;
        if (r < ARCHIVE_OK) return bad_data(error_text(in), original);
        if (offset < 0 || static_cast<std::uint64_t>(offset) < pos)
            return bad_data("overlapping data blocks", original);
        // Holes count: they cost hashing time, and a dense copy later.
        if (!within_cap(static_cast<std::uint64_t>(offset) - pos + len))
            return expansion_error(options_.max_output_bytes);
        auto at = static_cast<std::uint64_t>(offset);
        const auto* bytes = static_cast<const std::byte*>(buf);
        pos = at + len;
        if (state_->inline_writes) {
            REDIST_TRY_VOID(job.write_now(bytes, len, at));
            continue;
        }
        if (auto slice = slice_of(bytes, len, at)) {
            if (block) job.add(std::exchange(block, nullptr));
            job.add(std::move(slice));
            continue;
        }
        while (len > 0) {
            if (!block || block->offset + block->size != at || block->size == block->capacity) {
                if (block) job.add(std::move(block));
                REDIST_TRY(block, new_block(at, declared > at ? declared - at : len));
            }
            const std::size_t n = std::min(len, block->capacity - block->size);
            std::memcpy(block->bytes.get() + block->size, bytes, n);
            copied_bytes_ += n;
            block->size += n;
            at += n;
            bytes += n;
            len -= n;
        }
    }
    if (block) job.add(std::move(block));
    // The end of the data may be a hole: it counts against the cap too.
    if (declared > pos && !within_cap(declared - pos)) return expansion_error(options_.max_output_bytes);
    return {};
}

block_ptr extractor::slice_of(const std::byte* bytes, std::size_t len, std::uint64_t offset) const {
    if (!current_chunk_ || !*current_chunk_) return nullptr;
    const auto& source = *current_chunk_;
    const std::byte* begin = source->data();
    if (!source->leased() || bytes < begin || bytes > begin + source->size ||
        len > static_cast<std::size_t>(begin + source->size - bytes))
        return nullptr;
    auto block = std::make_shared<data_block>();
    block->source = source;
    block->slice = bytes;
    block->size = len;
    block->offset = offset;
    return block;
}

result<block_ptr> extractor::new_block(std::uint64_t offset, std::uint64_t wanted) {
    const auto capacity = static_cast<std::size_t>(std::clamp<std::uint64_t>(wanted, 1, kBlockBytes));
    REDIST_TRY_VOID(reserve(capacity, 0));
    reservation undo{state_->pool, capacity, 0};  // until the block owns the reservation
    auto block = std::make_shared<data_block>();
    block->capacity = capacity;
    block->bytes = state_->take_buffer(capacity);
    block->offset = offset;
    block->state = state_;  // from here on, the block releases what was reserved
    undo.pool = nullptr;
    return block;
}

result<void> extractor::reserve(std::size_t bytes, std::size_t slots) {
    const auto waited = std::chrono::steady_clock::now();
    if (!state_->pool->reserve(bytes, slots, state_->stop))
        return make_error(error_code::cancelled, "unpacking stopped");
    wait_ns_ += ns_since(waited);
    return {};
}

result<int> extractor::open_dir(const std::string& dir, const std::string& original) {
    if (dir.empty()) return stage_fd_.get();
    if (parent_fd_ && parent_dir_ == dir) return parent_fd_.get();
    parent_fd_.reset();
    parent_dir_.clear();
    unique_fd cur;
    int at = stage_fd_.get();
    std::optional<error> failed;
    std::string walked = stage_;
    for_each_segment(dir, [&](std::string_view seg) {
        walked.append("/").append(seg);
        auto next = open_or_make_dir(at, std::string(seg), walked, original);
        if (!next) {
            failed = std::move(next).error_value();
            return false;
        }
        cur = std::move(*next);
        at = cur.get();
        return true;
    });
    if (failed) return *failed;
    parent_fd_ = std::move(cur);
    parent_dir_ = dir;
    return parent_fd_.get();
}

result<unique_fd> extractor::open_or_make_dir(int at, const std::string& name, const std::string& path,
                                              const std::string& original) {
    for (int attempt = 0; attempt < 2; ++attempt) {
        unique_fd fd(::openat(at, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (fd) return fd;
        const int err = errno;
        if (err == ENOENT) {
            if (::mkdirat(at, name.c_str(), static_cast<mode_t>(0777 & ~process_umask())) != 0 && errno != EEXIST)
                return os_error("cannot create directory", path, errno);
            continue;
        }
        struct stat st {};
        if ((err == ELOOP || err == ENOTDIR) && ::fstatat(at, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (S_ISLNK(st.st_mode)) return unsafe("entry below a symlink", original);
            if (::unlinkat(at, name.c_str(), 0) != 0) return os_error("cannot replace", path, errno);
            continue;
        }
        return os_error("cannot open directory", path, err);
    }
    return os_error("cannot open directory", path, EAGAIN);
}

result<unique_fd> extractor::create_regular(const std::string& rel, const std::string& original,
                                            const std::string& target_path) {
    const auto slash = rel.rfind('/');
    const std::string dir = slash == std::string::npos ? std::string() : rel.substr(0, slash);
    const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
    REDIST_TRY(const int at, open_dir(dir, original));
    REDIST_TRY_VOID(reserve(0, 1));
    reservation slot{state_->pool, 0, 1};
    for (int attempt = 0; attempt < 2; ++attempt) {
        unique_fd fd(::openat(at, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (fd) {
            slot.pool = nullptr;  // the job's now
            return fd;
        }
        if (errno != EEXIST) return os_error("cannot create", target_path, errno);
        if (::unlinkat(at, name.c_str(), 0) != 0 &&
            (errno != EISDIR || ::unlinkat(at, name.c_str(), AT_REMOVEDIR) != 0))
            return os_error("cannot replace", target_path, errno);
    }
    return os_error("cannot create", target_path, EEXIST);
}

void extractor::remember(unpacked_entry record, std::shared_ptr<file_job> job) {
    if (record.kind == entry_kind::symlink) symlinks_.insert(record.path);
    else symlinks_.erase(record.path);
    index_.insert_or_assign(record.path, entries_.size());
    entries_.push_back(std::move(record));
    jobs_.push_back(std::move(job));
}

}  // namespace redist::unpacking
