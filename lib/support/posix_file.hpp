// Internal: the library's one errno-to-error helper, write loop and bounded
// reader. unique_fd (lib/support/unique_fd.hpp) and the atomic writer
// (include/redist/atomic_write.hpp, public because the tools write lock files
// and SBOMs through it too) are implemented here.
//
// Hazards these exist for:
//  * Files that redist creates in places others can write (the prefix's
//    .redist/, a shared cache, a checkout) are created with O_EXCL|O_NOFOLLOW
//    under a random name, so a planted symlink is never followed and a planted
//    file is never reused.
//  * A reader of untrusted files opens with O_NONBLOCK and checks that it got a
//    regular file before reading, so a FIFO cannot hang it, and refuses files
//    above a size limit before allocating.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "redist/atomic_write.hpp"
#include "redist/error.hpp"
#include "support/unique_fd.hpp"

struct stat;

namespace redist {

// "<what>: <strerror(err)>" with the path, as one error of category `code`.
error errno_error(std::string_view what, const std::filesystem::path& path, int err,
                  error_code code = error_code::filesystem);

// Writes every byte, retrying short writes and EINTR. Outcomes: ok | filesystem.
result<void> write_all(int fd, const void* data, std::size_t size, const std::filesystem::path& path_for_errors);

// The umask is process-wide, and libarchive's archive_write_disk_new() and
// its disk writer's archive_write_header() (every entry: libarchive 3.6.2,
// _archive_write_disk_header) read it by setting it to 0 and back. Two such
// calls at once can leave it at 0 for good, and a directory another thread
// creates meanwhile with mode 0777 comes out world-writable (seen in CI:
// share/licenses/<component> 0777, twice: the second time the first read of
// process_umask() caught a header's 0 and every directory of that run got
// 0777). So: both libarchive calls run only under umask_mutex(), and redist's
// own directories get an explicit mode, 0777 & ~process_umask() (read once,
// under the same mutex), which a momentary umask of 0 cannot widen; nothing
// of redist creates a directory through fs::create_directories (0777 less
// whatever the umask is at that moment).
std::mutex& umask_mutex();
unsigned process_umask();
// fs::create_directories with that mode for every directory it creates.
void create_directories_masked(const std::filesystem::path& dir, std::error_code& ec);
inline result<void> write_all(int fd, std::string_view bytes, const std::filesystem::path& path_for_errors) {
    return write_all(fd, bytes.data(), bytes.size(), path_for_errors);
}

// The one read loop. read_some: at most `size` bytes from the file offset
// (pread_some: from `offset`), retrying EINTR; 0 at the end of the file.
// Outcomes: ok | `code` ("cannot read", naming the path).
result<std::size_t> read_some(int fd, void* data, std::size_t size, const std::filesystem::path& path_for_errors,
                              error_code code = error_code::filesystem);
result<std::size_t> pread_some(int fd, void* data, std::size_t size, std::uint64_t offset,
                               const std::filesystem::path& path_for_errors, error_code code = error_code::filesystem);
// Reads `fd` from its offset to the end, `buffer` at a time, handing each
// block to `each`, which may stop the read by failing. Returns the bytes read.
// Outcomes: ok | filesystem (cannot read) | each's error.
template <class Each>
result<std::uint64_t> read_each_block(int fd, std::span<std::byte> buffer, const std::filesystem::path& path_for_errors,
                                      Each&& each) {
    std::uint64_t total = 0;
    for (;;) {
        REDIST_TRY(const std::size_t n, read_some(fd, buffer.data(), buffer.size(), path_for_errors));
        if (n == 0) return total;
        REDIST_TRY_VOID(each(static_cast<const std::byte*>(buffer.data()), n));
        total += n;
    }
}

enum class follow_links : std::uint8_t { no, yes };

// Opens a regular file for reading, and nothing else: what `path` names (the
// link's target with follow_links::yes; a symlink is refused with ELOOP
// otherwise) must be a regular file before the open, so that a device is never
// opened (opening one can act: a tape rewinds, a watchdog arms); the open is
// O_NONBLOCK, so a FIFO swapped in meanwhile cannot hang it; and fstat of the
// descriptor must say regular again. `st`, when given, gets that fstat.
// Outcomes: ok | filesystem (cannot open, "not a regular file").
result<unique_fd> open_regular(const std::filesystem::path& path, follow_links follow, struct ::stat* st = nullptr);

// Reads a whole regular file of at most max_bytes. With follow_links::no a
// symlink at `path` is refused (ELOOP). A FIFO, device or directory is refused
// without blocking.
// Outcomes: ok | filesystem (cannot open/read, not a regular file) |
// `too_large` (the file exceeds max_bytes; message gives both sizes).
result<std::string> read_file(const std::filesystem::path& path, std::uint64_t max_bytes,
                              follow_links follow = follow_links::no, error_code too_large = error_code::bad_manifest);

// Reads the rest of the open file `fd` (its fstat size `size_hint` is where
// the buffer starts; a file that grew since is read on), at most max_bytes.
// Outcomes as read_file's.
result<std::string> read_fd(int fd, std::uint64_t size_hint, std::uint64_t max_bytes,
                            const std::filesystem::path& path_for_errors,
                            error_code too_large = error_code::bad_manifest);

// fsync(2) of a directory, so that renames and unlinks in it are durable.
// Best effort: errors are ignored (some filesystems refuse fsync on a directory).
void fsync_directory(const std::filesystem::path& dir) noexcept;

// Removes the entry `name` of the directory `dir_fd` and, when it is a
// directory, everything below it, without ever following a symlink: each
// directory is opened with openat(O_DIRECTORY|O_NOFOLLOW) relative to its
// parent's descriptor and each entry is removed with unlinkat(2) (a directory
// with AT_REMOVEDIR), so a directory swapped for a symlink part-way is
// unlinked itself, never entered. `owner`, when set, removes only entries of
// that user id (the rest stays, and so do the directories above it). Returns
// the bytes of the regular files removed. Best effort: what cannot be removed
// stays; nesting deeper than 256 levels is left.
std::uint64_t remove_tree_at(int dir_fd, const std::string& name, std::optional<unsigned> owner = {}) noexcept;

// The names in the directory `dir_fd` ("." and ".." left out), read through
// a descriptor of its own (dir_fd's offset is not used). Empty when it cannot
// be read.
std::vector<std::string> directory_names_at(int dir_fd);

// A run's scratch directory: `<prefix><random>` under a parent directory,
// held by an exclusive flock on its own descriptor while the object lives (a
// killed run's lock goes with it). claim_scratch_dir adopts the first such
// directory no live run holds (one of ours: a directory owned by this user),
// so that the .part files a killed run left are resumed; it removes the other
// unheld ones, and makes a new directory (0700) when none is left. Releasing
// (the destructor) keeps only the .part files in it, so that a run that
// failed part-way is resumed by the next, and removes the directory when
// nothing is left.
class scratch_dir {
public:
    scratch_dir() = default;
    scratch_dir(scratch_dir&& other) noexcept = default;
    scratch_dir& operator=(scratch_dir&& other) noexcept {
        if (this != &other) {
            release();
            parent_ = std::move(other.parent_);
            fd_ = std::move(other.fd_);
            name_ = std::move(other.name_);
            path_ = std::move(other.path_);
            adopted_ = other.adopted_;
        }
        return *this;
    }
    scratch_dir(const scratch_dir&) = delete;
    scratch_dir& operator=(const scratch_dir&) = delete;
    ~scratch_dir() { release(); }
    void release() noexcept;
    int fd() const { return fd_.get(); }
    const std::filesystem::path& path() const { return path_; }
    bool adopted() const { return adopted_; }  // an earlier run's directory

private:
    friend result<scratch_dir> claim_scratch_dir(int, const std::filesystem::path&, const std::string&);
    unique_fd parent_, fd_;  // fd_: the directory, flocked
    std::string name_;
    std::filesystem::path path_;
    bool adopted_ = false;
};
// Outcomes: ok | filesystem.
result<scratch_dir> claim_scratch_dir(int parent_fd, const std::filesystem::path& parent, const std::string& prefix);
// The pid of a download in progress, file_sink's "<final name>.part.<pid>"
// (a non-empty final name, at most 9 digits), or -1 for any other name.
long part_file_pid(std::string_view name) noexcept;
// True when `name` in a scratch directory is a download a later run resumes
// (a part_file_pid name).
inline bool is_resumable_part_name(std::string_view name) noexcept { return part_file_pid(name) >= 0; }
// Removes the scratch directories starting with `prefix` under `parent_fd`
// that no live run holds (of `owner` only, when set). Returns the bytes freed.
std::uint64_t remove_unheld_scratch_dirs(int parent_fd, const std::string& prefix,
                                         std::optional<unsigned> owner) noexcept;

// Removes the temp files atomic_write left in `dir` (not below it), as
// remove_tree_at does: for a caller that holds the lock every writer of `dir`
// holds, so that no live process owns them (a killed run's leftovers).
// Best effort.
void remove_atomic_write_temps(const std::filesystem::path& dir) noexcept;

// True when `name` (a file name, not a path) is a temp file of atomic_write.
bool is_atomic_write_temp(std::string_view name) noexcept;
// True when `name` is a temp file of atomic_write for the file named `target`
// ("<target>.tmp.<random>"), e.g. one a killed run left.
bool is_atomic_write_temp_of(std::string_view name, std::string_view target) noexcept;

}  // namespace redist
