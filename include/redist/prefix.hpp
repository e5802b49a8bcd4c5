// redist/prefix.hpp — the prefix: staging, commit, receipts, verify, remove.
//
// Layout of a prefix managed by redist:
//   <prefix>/...                               the installed files
//   <prefix>/share/licenses/<component>/...    each archive's top-level files
//                                              (LICENSE, README, ...), one copy per component
//   <prefix>/.redist/lock                      prefix lock (flock), held by every writer
//   <prefix>/.redist/receipts/<product>/<component>.json
//                                              one receipt per installed component, keyed
//                                              by product AND component (two products may
//                                              ship the same component key); receipts of
//                                              older versions at receipts/<component>.json
//                                              are still read, and replaced on upgrade
//   <prefix>/.redist/staging/<id>/             stages being unpacked (same filesystem)
//   <prefix>/.redist/transaction.json          commit journal, present only mid-commit
//
// Commit protocol (crash safety without an fsync per file): everything is
// unpacked and verified in stages first. The commit writes a journal listing
// every rename and deletion, atomically (write + rename), then applies it.
// A process killed before the journal exists leaves the prefix untouched
// (stale stages are swept by the next writer). A process killed after it is
// rolled forward by the next writer (every step is idempotent). Receipts are
// written last, by the same journal. A commit that fails (rather than being
// killed) before its first rename restores the old state at once; a journal
// that cannot be completed before any file moved is rolled back by the next
// writer. Every rename stays on one file system: that is checked while
// planning, before the journal exists.
//
// Hostile input: product names, component keys and labels are validated
// names (letters, digits, ._+-), and every path made from input is joined
// under the prefix by one confining helper. Receipts and the journal are
// validated when read; a path in them that is not relative, or that points
// into .redist/ other than the staging area and the receipts, makes the file
// corrupt (bad_manifest, exit 4) and nothing is done. Only directories that
// redist creates get a mode; existing ones are never chmod'ed.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

class unique_fd;
// A held flock (a descriptor of the library's own), released when it goes.
struct lock_fd_deleter {
    void operator()(unique_fd* fd) const noexcept;
};
using held_lock_fd = std::unique_ptr<unique_fd, lock_fd_deleter>;

enum class entry_kind : std::uint8_t { regular, directory, symlink, hardlink };

struct installed_file {
    std::string path;                       // prefix-relative, '/'-separated
    entry_kind kind = entry_kind::regular;  // regular, symlink (hardlinks are recorded as regular)
    std::uint64_t size = 0;
    std::string sha256;       // regular files: the digest of archive/sha256.hpp's file_digester
    std::string link_target;  // symlinks
    unsigned mode = 0;
    std::uint64_t piece_size = 0;  // of the digest: 0 (the plain SHA-256) or its pieces' size
};

struct receipt {
    std::string product;
    std::string release_label;
    std::string component;
    std::string component_version;
    std::string platform;
    std::optional<std::string> variant;
    std::string url;             // where the archive came from (sanitized)
    std::string archive_sha256;  // the manifest's archive, even when a copy was installed
    std::uint64_t archive_size = 0;
    // Installed from a mirror's recompressed copy (recompressed.hpp): its
    // SHA-256 and that of the decoded tar. Empty otherwise (and in older receipts).
    std::string copy_sha256;
    std::string tar_sha256;
    std::string installed_at;           // ISO 8601 UTC
    std::vector<installed_file> files;  // sorted by path
    // --exclude / redist.toml exclude: the globs applied, and the archive
    // paths (prefix-relative, sorted) they skipped. Skipped paths are not in
    // `files`, so verify does not miss them. Written only when not empty.
    std::vector<std::string> exclude;
    std::vector<std::string> excluded;
};

// Holds <prefix>/.redist/lock (flock(2), exclusive) for its lifetime. Creates
// the prefix and .redist/ if needed. Before returning, rolls forward an
// interrupted commit and removes stale stages.
class prefix_lock {
public:
    // on_wait is called once if another process holds the lock, before blocking.
    // Outcomes: ok | filesystem.
    static result<prefix_lock> acquire(const std::filesystem::path& prefix, const std::function<void()>& on_wait = {});
    // The same for a command that only changes what redist installed
    // (remove): a prefix without .redist/ (a typo, or a directory redist never
    // installed into) is not_found, naming it, and nothing is created there.
    // Outcomes: ok | not_found | filesystem | bad_manifest (as acquire()).
    static result<prefix_lock> acquire_existing(const std::filesystem::path& prefix,
                                                const std::function<void()>& on_wait = {});
    const std::filesystem::path& prefix() const { return prefix_; }

private:
    prefix_lock() = default;
    std::filesystem::path prefix_;
    held_lock_fd fd_;
};

// The receipts currently in the prefix, sorted by (product, component).
// Outcomes: ok (empty if none) | bad_manifest (a corrupt receipt: bad JSON or
// content, a symlink or other non-file in the receipts directory, or a
// receipt whose product/component does not match its file name) | filesystem.
// The first receipt that cannot be read fails it all; its message names the
// receipt's path and how to repair it.
result<std::vector<receipt>> read_receipts(const std::filesystem::path& prefix);
// The same, for a command that needs something installed: not_found ("no
// redist receipts in this prefix", then ` (` `hint` `)` when given; path =
// `prefix`) when there is none.
result<std::vector<receipt>> read_installed_receipts(const std::filesystem::path& prefix, std::string_view hint = {});

// A receipt file that cannot be read (not JSON, bad content, not a regular
// file, named for another component): it blocks only its own component.
struct unreadable_receipt {
    std::string product;    // from its file name; empty for the legacy layout
    std::string component;  // from its file name
    std::string rel_path;   // .redist/receipts/...
    error why;              // source = its path; the message says how to repair it
};
struct receipt_scan {
    std::vector<receipt> receipts;  // those that could be read, as read_receipts()
    std::vector<unreadable_receipt> unreadable;
};
// Every receipt that can be read, and the ones that cannot: for the commands
// that work on some components (fetch, verify, remove --component), which go
// on with the others. Outcomes: ok | bad_manifest (the receipts directory,
// or a product directory in it, is not what redist made) | filesystem.
result<receipt_scan> scan_receipts(const std::filesystem::path& prefix);

// True while <prefix>/.redist/transaction.json exists: a commit was
// interrupted, and the next lock holder (fetch, remove) completes it.
bool commit_pending(const std::filesystem::path& prefix) noexcept;

struct verify_problem {
    std::string component;
    std::string path;
    // "missing", "modified (sha256 …)" (or "sha256_pieces …" for a file recorded by its pieces),
    // "type changed", "symlink target changed", "size changed"
    std::string what;
};
struct verify_report {
    std::size_t components = 0;            // receipts read (0: nothing redist installed is here)
    std::size_t files = 0;                 // entries they list, all checked
    std::vector<verify_problem> problems;  // empty if all is well
    // Receipts that could not be read: their components are not checked, the
    // others are.
    std::vector<unreadable_receipt> unreadable;
    bool commit_pending = false;  // an interrupted commit's journal is there (its writer is gone)
};
// Checks every installed file against the receipts, hashing files and the
// pieces of large ones on `threads` threads at once (0: the CPUs this process
// may use). Problems come in receipt order whatever the threads. The receipts
// are read once, so the counts are those of the receipts checked; a receipt
// that cannot be read is reported in `unreadable` and the others are still
// checked.
// It holds the prefix lock shared (<prefix>/.redist/lock, opened without
// following a symlink) while it reads: a writer holds it exclusively from
// before its journal is written until its commit is done, so verify never
// sees half a commit, and a journal it finds is one of a dead writer
// (commit_pending). on_wait is called once before it blocks on a writer; a
// prefix without .redist/ is read without a lock (it has no receipts).
// Outcomes: ok | bad_manifest (also: .redist is not a directory) | filesystem.
result<verify_report> verify_prefix(const std::filesystem::path& prefix, unsigned threads = 0,
                                    const std::function<void()>& on_wait = {});
// The same for a caller that holds the prefix lock (exclusive): nothing else
// can write the prefix meanwhile, and a second flock of ours would wait for
// it forever.
result<verify_report> verify_prefix(const prefix_lock& held, unsigned threads = 0);

// A component to remove; an empty product matches any product, as long as
// only one product in the prefix has that component.
struct component_ref {
    std::string product;
    std::string component;
};

// Removes exactly what the components installed (files owned by a component
// that stays are kept), then directories that became empty, then their
// receipts, in one transaction. Reads every receipt once: linear in their size.
// Requires the lock. Outcomes: ok | not_found (no such receipt) | usage (the
// component is installed by several products: name one) | bad_manifest
// (a corrupt receipt) | filesystem.
result<void> remove_components(const prefix_lock& lock, const std::vector<component_ref>& which);

REDIST_API_END
}  // namespace redist
