// archive/unpack.hpp — compressed archive bytes -> files in a staging directory.
//
// The unpacker runs on its own threads so that decoding and writing overlap
// with the download that feeds it:
//
//   caller (network + hash) --write()--> [bounded queue] --> decoder thread
//     (parses the xz container and posts its blocks to the run's worker
//     pool, lib/archive/xz_decode.hpp; pass-through for other formats)
//     --> [bounded queue] --> extractor thread (libarchive read, checks,
//     creates each file) --> writer pool (writes and hashes file data)
//
// The decoder's threads and memory and the writer pool come from a
// run_budget (lib/support/budget.hpp; limits in redist/budget.hpp) that every
// unpacker of one install shares, so that many artifacts in flight divide
// the machine instead of each taking all of it.
//
// Security: every entry name is validated *before* it is rewritten under the
// stage: no absolute paths, no "..", a single common top-level directory
// (stripped), no device nodes, FIFOs or sockets, symlink targets must resolve
// inside the stage (relative, with ".." only as leading segments), nothing is
// written below a symlink, hardlinks must point at an earlier file of the same
// archive and carry no data of their own (a pax "hardlink with data" would
// rewrite the earlier file behind its recorded hash). The name ".redist" is
// reserved at the stage root: no entry may live there, and no symlink may
// point into it (it is where the prefix keeps receipts, journal and lock).
// Entry names in errors are escaped whole by printable() (redist/printable.hpp).
//
// Unverified bytes are bounded: with max_output_bytes set, the decoded tar
// stream (xz) and the contents of the files written (holes of sparse files
// included, plus 512 bytes per entry) may not exceed it; past it, unpacking
// fails as unsafe_archive ("expands to more than ..."). libarchive's SECURE_SYMLINKS/NODOTDOT are on as a second line
// of defence (NOABSOLUTEPATHS cannot be: entries are rewritten to absolute paths under the stage, after the original
// names were checked). Owners are never restored; setuid/setgid/sticky bits are dropped.
//
// Formats: tar.xz block by block and tar.zst frame by frame on the run's
// worker pool, as xz_decode.hpp describes (zstd frames only with a pool of
// three threads or more), the tar.zst's tar stream hashed on the way; tar.gz
// by libarchive's filters in the extractor thread; zip is spooled to
// "<stage>.zip.part" beside the stage (removed afterwards) and extracted at
// finish(), because zip needs random access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/manifest.hpp"
#include "redist/prefix.hpp"  // entry_kind

namespace redist {

class run_budget;  // lib/support/budget.hpp

// A time an entry sets on what it writes, as the archive states it (the
// extractor restores them); unset: the time of writing.
struct entry_time {
    bool set = false;
    std::int64_t seconds = 0;
    long nanoseconds = 0;
    bool operator==(const entry_time&) const = default;
};

struct unpacked_entry {
    std::string path;  // relative to the stage root, top-level dir stripped, '/'-separated
    entry_kind kind = entry_kind::regular;
    std::uint64_t size = 0;        // regular files and hardlinks
    std::string sha256;            // regular files and hardlinks: digest of the content (see file_digester)
    std::string link_target;       // symlink target as stored; hardlink: stage-relative path of the target
    unsigned mode = 0;             // permission bits as written (setuid/setgid dropped)
    std::uint64_t piece_size = 0;  // of the digest: 0 (plain SHA-256) or receipt_piece_bytes
    entry_time mtime{}, atime{};   // set on what was written (hardlinks: none, the target's stay)
};

// The digest of a tree as the unpacker wrote it (what finish() returns):
// the SHA-256 of every entry, sorted by path (archive order among entries of
// one path), each as nine fields that end in a NUL: kind ("file", "dir",
// "symlink", "hardlink"), path, mode (octal), size, piece size, content
// digest, link target, mtime and atime ("<seconds>.<nanoseconds>", or "-"
// when the archive sets none). No field can hold a NUL, so two different
// lists never read alike. A recompressed copy's record states it
// (recompressed_copy::tree_sha256): these entries are everything that lands
// in the prefix, so checking them checks the copy, with no pass over its
// bytes beyond the one that digests each file for its receipt.
std::string tree_digest(const std::vector<unpacked_entry>& entries);

struct unpack_options {
    archive_format format = archive_format::tar_xz;
    bool strip_top_level = true;  // require and strip one top-level directory
    // xz and zstd: 1 decodes every block or frame on the artifact's decoder
    // thread; otherwise blocks that record their sizes, and frames that record
    // their content size, decode on the run's pool.
    unsigned decoder_threads = 0;
    // xz: a block needing more memory than this (input, output, dictionary)
    // decodes on the decoder thread as it streams; 0 = 512 MiB.
    std::uint64_t decoder_memlimit = 0;
    // xz: the block the stream waits for is handed on in parts of this many
    // bytes while it decodes, rather than whole when it ends (0: whole).
    std::size_t decoder_part_bytes = std::size_t{2} << 20;
    // Shared by the unpackers of one run; null = a budget of its own with
    // the machine's defaults (redist/budget.hpp).
    std::shared_ptr<run_budget> budget;
    // The archive's size, if known. With a shared budget the pool decodes the
    // blocks of larger archives first: their downloads end last.
    std::uint64_t size_hint = 0;
    // tar.zst: the digest tar_digest() gives of the decoded tar stream: 0
    // its SHA-256, else its hash list with pieces of this many bytes (a
    // recompressed copy's tar_piece_bytes), hashed piece by piece on the pool.
    std::uint64_t tar_piece_bytes = 0;
    // tar.zst: whether tar_digest() is computed at all. A copy checked by the
    // tree it unpacks to (tree_digest) needs none.
    bool digest_tar = true;
    std::string source;                  // URL or path, for error messages only
    std::uint64_t max_output_bytes = 0;  // cap on decoded output (see above); 0 = none
};

class stream_unpacker {
public:
    // Starts the worker threads. `stage_dir` must exist and be empty.
    // Outcomes: ok | filesystem | internal (library setup failed) |
    // bad_archive (options.format is unknown).
    static result<std::unique_ptr<stream_unpacker>> start(const std::filesystem::path& stage_dir,
                                                          const unpack_options& options);

    virtual ~stream_unpacker() = default;  // cancels and joins if still running

    // Feeds the next compressed bytes. Copies them; blocks while the queue is
    // full (back-pressure keeps memory bounded). Returns the workers' error
    // as soon as one has failed, so the caller can stop downloading.
    virtual result<void> write(const std::byte* data, std::size_t size) = 0;

    // Ends the input and waits for the workers.
    // Outcomes: ok (every entry written, in archive order) | bad_archive
    // (corrupt, truncated or unsupported archive data) | unsafe_archive (error.path names
    // the entry) | filesystem.
    virtual result<std::vector<unpacked_entry>> finish() = 0;

    // After a successful finish() of a tar.zst: the digest (hex) of the
    // decoded tar stream, its SHA-256 or its hash list (see
    // unpack_options::tar_piece_bytes); empty for other formats. A mirror's
    // recompressed copy is accepted only when this is the digest its signed
    // record states.
    virtual std::string tar_digest() const = 0;

    // Stops the workers without waiting for more input. Safe to call twice,
    // and from another thread while write() is blocked (write() then returns
    // a `cancelled` error); not concurrently with finish().
    virtual void cancel() noexcept = 0;
};

}  // namespace redist
