// archive/extractor.hpp — the extraction loop, shared by the tar stream and
// the zip file: every entry of an opened libarchive reader is checked
// (entry_names.hpp) before anything touches the disk, then written under the
// stage: regular files through file_jobs (file_writer.hpp), directories,
// symlinks and hardlinks through libarchive's disk writer.
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "archive/chunk_queue.hpp"
#include "archive/file_writer.hpp"
#include "archive/unpack.hpp"
#include "redist/error.hpp"
#include "support/unique_fd.hpp"

namespace redist::unpacking {

// ---- RAII for the C handles --------------------------------------------------
struct archive_read_deleter {
    void operator()(archive* a) const noexcept { archive_read_free(a); }
};
struct archive_write_deleter {
    void operator()(archive* a) const noexcept { archive_write_free(a); }
};
using archive_reader = std::unique_ptr<archive, archive_read_deleter>;
using archive_writer = std::unique_ptr<archive, archive_write_deleter>;

inline std::string error_text(archive* a, const char* fallback = "unknown libarchive error") {
    const char* s = archive_error_string(a);
    return s ? s : fallback;
}

// The error of an archive whose decoded output passes max_output_bytes.
error expansion_error(std::uint64_t cap);

// Writes the entries of an opened libarchive reader under `stage`, checking
// each one before anything touches the disk. Regular files go through the
// file_jobs above; directories, symlinks and hardlinks through libarchive's
// disk writer (their namespace change is all there is to them).
class extractor {
public:
    extractor(std::string stage, const unpack_options& options, std::shared_ptr<write_state> state)
        : stage_(std::move(stage)), options_(options), state_(std::move(state)) {}

    // The chunk that the reader's callback handed to libarchive last (a tar
    // stream from our xz decoder): file data inside a decoded block is passed
    // to the writers as slices of it, not copied (see slice_of).
    void read_from(const std::shared_ptr<chunk>* current) noexcept { current_chunk_ = current; }

    // Outcomes: ok | bad_archive | unsafe_archive | filesystem | internal | cancelled.
    // Waits for every file it handed to the workers before returning.
    result<void> run(archive* in);

    // After run(): the entries in archive order, replaced ones left out.
    std::vector<unpacked_entry> take_entries();

    std::uint64_t wait_ns() const noexcept { return wait_ns_; }
    // File data copied into admitted blocks rather than passed on as slices.
    std::uint64_t copied_bytes() const noexcept { return copied_bytes_; }

private:
    // Where an entry goes: its stage-relative path and the depth of its directory.
    struct placement {
        std::string rel;
        std::size_t depth = 0;
        bool skip = false;  // the stage root or the top directory itself
    };

    result<void> run_entries(archive* in);

    error unsafe(const std::string& message, const std::string& original) const;

    error bad_data(const std::string& message, const std::string& original) const;

    error os_error(const std::string& what, const std::string& path, int err) const;

    // Counts `bytes` more of decoded output against the cap.
    bool within_cap(std::uint64_t bytes);

    // libarchive's own security checks (symlink in the path, "..") fail with
    // errno 0 or ARCHIVE_ERRNO_MISC: that is the second line of defence
    // tripping, so it is reported as unsafe_archive. A real errno (ENOSPC,
    // EACCES, EROFS, ...) is a filesystem error about the path we wrote.
    error write_error(archive* out, const std::string& original, const std::string& target) const;

    // Steps 1-5 of one entry; nothing touches the disk before step 4.
    result<void> write_entry(archive* in, archive_entry* entry);

    // 1. Validate the original name, before any rewriting.
    result<placement> place_entry(archive_entry* entry, const std::string& original);

    // 2. Kind checks; fills the record (and, for a hardlink, the job whose
    // digest it shares).
    result<void> classify_entry(archive_entry* entry, const std::string& original, const placement& place,
                                unpacked_entry& record, std::shared_ptr<file_job>& job);

    result<void> classify_hardlink(archive_entry* entry, const std::string& original, unpacked_entry& record,
                                   std::shared_ptr<file_job>& job);

    // Writing below a symlink of this archive would land wherever it points;
    // the confined walk (and libarchive) would refuse too, but this gives a
    // clear message.
    result<void> check_not_below_symlink(const std::string& rel, const std::string& original) const;

    // 4a. Directories, symlinks and hardlinks: libarchive's disk writer.
    // ARCHIVE_WARN counts as failure: for write_disk it means a mode, time or
    // link could not be restored as archived.
    result<void> write_other(archive_entry* entry, const std::string& original, const std::string& target_path);

    // 4b. A regular file: created here, written and hashed by the workers.
    result<std::shared_ptr<file_job>> write_regular(archive* in, archive_entry* entry, const std::string& original,
                                                    const std::string& rel, const std::string& target_path,
                                                    unsigned mode);

    // Copies the entry's data blocks into pool-admitted blocks of the job.
    result<void> copy_data(archive* in, file_job& job, const std::string& original, std::uint64_t declared);

    // Data that libarchive returned from inside a decoded xz block (it points
    // into the chunk its read callback handed over, not into a buffer of its
    // own) becomes a slice that holds the block: no copy on this one thread.
    // Such a block carries its lease of the decoders' memory until the last slice is
    // written, so that memory, not the pool's admission, bounds it. Anything
    // else (streamed 1 MiB chunks without a lease, libarchive's own gzip/zstd
    // buffers, zip) is copied into admitted blocks.
    block_ptr slice_of(const std::byte* bytes, std::size_t len, std::uint64_t offset) const;

    result<block_ptr> new_block(std::uint64_t offset, std::uint64_t wanted);

    // Waits for the pool to admit `bytes` of buffers and `slots` open files.
    result<void> reserve(std::size_t bytes, std::size_t slots);

    // Opens (creating when missing) the directory `dir` (stage-relative,
    // "" = the stage) one segment at a time, never following a symlink. The
    // last one opened is kept for the next file.
    result<int> open_dir(const std::string& dir, const std::string& original);

    // One segment of open_dir. A missing directory is created as libarchive
    // would (0777 minus the umask); a file in the way is replaced, as
    // libarchive replaces it; a symlink in the way is an unsafe archive.
    result<unique_fd> open_or_make_dir(int at, const std::string& name, const std::string& path,
                                       const std::string& original);

    // A new file of our own at rel, 0600 until its job finishes: O_EXCL so an
    // earlier entry of the same name is replaced (unlinked, as libarchive
    // does; a hardlink to it keeps the old content), O_NOFOLLOW so nothing
    // planted is followed. One slot of the pool is held until the job ends.
    result<unique_fd> create_regular(const std::string& rel, const std::string& original,
                                     const std::string& target_path);

    // 5. Remember it. A later entry with the same path replaces the earlier one.
    void remember(unpacked_entry record, std::shared_ptr<file_job> job);

    std::string stage_;                                      // canonical, absolute, no trailing slash
    const std::shared_ptr<chunk>* current_chunk_ = nullptr;  // see read_from
    std::uint64_t copied_bytes_ = 0;                         // file data copied, not sliced (--profile)
    const unpack_options& options_;
    std::shared_ptr<write_state> state_;
    archive_writer out_;
    unique_fd stage_fd_;
    std::string parent_dir_;  // stage-relative; parent_fd_ is open on it
    unique_fd parent_fd_;
    std::optional<std::string> top_;
    std::vector<std::string_view> segments_;  // scratch
    std::vector<unpacked_entry> entries_;
    std::vector<std::shared_ptr<file_job>> jobs_;         // per entry: the job with its digest (regular, hardlink)
    std::unordered_map<std::string, std::size_t> index_;  // stage-relative path -> its latest entry in entries_
    std::unordered_set<std::string> symlinks_;
    std::uint64_t output_ = 0;  // decoded bytes so far, for max_output_bytes
    std::uint64_t wait_ns_ = 0;
};

}  // namespace redist::unpacking
