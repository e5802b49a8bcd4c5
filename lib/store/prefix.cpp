// The prefix: its lock, stages, the journaled commit, verify, remove.
// See include/redist/prefix.hpp for the layout and the commit protocol.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <set>
#include <unordered_set>

#include "archive/sha256.hpp"
#include "redist/prefix.hpp"
#include "redist/suggest.hpp"
#include "store/prefix.hpp"
#include "store/prefix_state.hpp"
#include "store/receipts.hpp"
#include "store/stage.hpp"
#include "support/budget.hpp"
#include "support/file_lock.hpp"
#include "support/parallel.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"
#include "support/timestamp.hpp"

namespace fs = std::filesystem;

namespace redist {
// ---- the prefix lock ------------------------------------------------------------------

void lock_fd_deleter::operator()(unique_fd* fd) const noexcept { delete fd; }

result<prefix_lock> prefix_lock::acquire(const fs::path& prefix_in, const std::function<void()>& on_wait) {
    std::error_code ec;
    const fs::path prefix = fs::absolute(prefix_in, ec).lexically_normal();
    // Creating never changes the mode of what exists, so nothing
    // above the prefix (or the prefix itself) is chmod'ed.
    create_directories_masked(prefix, ec);
    if (ec) return fs_error("cannot create directory", prefix, ec);
    // .redist/ and its parts must be ours: a symlink there (planted by an
    // archive of an older version, or by someone else) would carry every
    // write elsewhere. Each level is checked before anything is created in it.
    for (const auto& dir : {state_dir(prefix), receipts_dir(prefix), staging_dir(prefix)}) {
        if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
            return errno_error("cannot create directory", dir, errno);
        if (!is_directory_no_follow(dir))
            return make_error(error_code::bad_manifest, "corrupt prefix state: not a directory (is it a symlink?)")
                .with_path(dir.string());
    }
    REDIST_TRY(unique_fd fd, lock_file(state_dir(prefix) / "lock", lock_mode::exclusive, lock_wait::block, on_wait));
    prefix_lock lock;
    lock.prefix_ = prefix;
    lock.fd_ = held_lock_fd(new unique_fd(std::move(fd)));
    REDIST_TRY_VOID(recover_prefix(prefix));
    discard_stages(lock);  // under the lock, every stage is a leftover of a dead process
    return lock;
}

result<prefix_lock> prefix_lock::acquire_existing(const fs::path& prefix_in, const std::function<void()>& on_wait) {
    std::error_code ec;
    const fs::path prefix = fs::absolute(prefix_in, ec).lexically_normal();
    // Not followed: a symlink at .redist is refused by acquire() as corrupt.
    if (!exists_no_follow(state_dir(prefix)))
        return make_error(error_code::not_found, "no redist receipts in this prefix (redist never installed here)")
            .with_path(prefix_in.string());
    return acquire(prefix, on_wait);
}

// ---- stages ---------------------------------------------------------------------------

result<fs::path> make_stage(const fs::path& prefix, std::string_view name) {
    static std::atomic<unsigned> counter{0};
    REDIST_TRY_VOID(validate_name(name, "component"));
    std::error_code ec;
    const fs::path root = fs::absolute(prefix, ec).lexically_normal();
    REDIST_TRY(const fs::path dir,
               confined_join(root, std::string(staging_rel) + "/" + std::string(name) + "." +
                                       std::to_string(::getpid()) + "." + std::to_string(counter++)));
    fs::remove_all(dir, ec);
    if (::mkdir(dir.c_str(), 0755) != 0) return errno_error("cannot create stage", dir, errno);
    return dir;
}

void discard_stages(const prefix_lock& lock) noexcept {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(staging_dir(lock.prefix()), ec)) {
        std::error_code ignored;
        fs::remove_all(entry.path(), ignored);
    }
}

result<void> prepare_stage(staged_component& staged, const std::vector<unpacked_entry>& entries) {
    REDIST_TRY_VOID(validate_name(staged.new_receipt.component, "component"));
    const std::string licenses = "share/licenses/" + staged.new_receipt.component;
    // Paths that share an inode with a hardlink: their final content is what
    // is on disk now, whichever entry wrote it last.
    std::unordered_set<std::string> linked;
    for (const auto& e : entries) {
        if (e.kind != entry_kind::hardlink) continue;
        linked.insert(e.path);
        linked.insert(e.link_target);
    }
    std::vector<installed_file> files;
    bool created_licenses = false;
    for (const auto& e : entries) {
        if (e.kind == entry_kind::directory) continue;
        if (const char* why = relative_path_problem(e.path))
            return make_error(error_code::unsafe_archive, std::string("unsafe entry path: ") + why)
                .with_path(printable(e.path));
        installed_file f;
        f.path = e.path;
        f.kind = e.kind == entry_kind::symlink ? entry_kind::symlink : entry_kind::regular;
        f.size = e.size;
        f.sha256 = e.sha256;
        f.piece_size = e.piece_size;
        f.link_target = e.kind == entry_kind::symlink ? e.link_target : std::string();
        f.mode = e.mode;
        if (e.path.find('/') == std::string::npos) {
            // A top-level file (LICENSE, README, ...): every component keeps its own copy.
            REDIST_TRY(const fs::path dest_dir, confined_join(staged.stage_dir, licenses));
            if (!created_licenses) {
                std::error_code ec;
                create_directories_masked(dest_dir, ec);
                if (ec) return fs_error("cannot create directory", dest_dir, ec);
                created_licenses = true;
            }
            REDIST_TRY(const fs::path from, confined_join(staged.stage_dir, e.path));
            const fs::path to = dest_dir / e.path;
            if (::rename(from.c_str(), to.c_str()) != 0) return errno_error("cannot move", from, errno);
            f.path = licenses + "/" + e.path;
        }
        if (f.kind == entry_kind::regular && linked.count(e.path)) {
            REDIST_TRY(const fs::path on_disk, confined_join(staged.stage_dir, f.path));
            struct stat st {};
            if (::lstat(on_disk.c_str(), &st) != 0) return errno_error("cannot stat", on_disk, errno);
            f.size = static_cast<std::uint64_t>(st.st_size);
            f.piece_size = piece_size_for(f.size);
            REDIST_TRY(f.sha256, file_digest(on_disk, f.piece_size));
            f.mode = st.st_mode & 0777;
        }
        files.push_back(std::move(f));
    }
    std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
    files.erase(std::unique(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.path == b.path; }),
                files.end());
    staged.new_receipt.files = std::move(files);
    if (staged.new_receipt.installed_at.empty()) staged.new_receipt.installed_at = utc_now_iso8601();
    return {};
}

// ---- commit ---------------------------------------------------------------------------

namespace {

// The problem with a file that no read can change, or nullopt when only its
// digest is left to check.
std::optional<std::string> shape_problem(const fs::path& p, const installed_file& f) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return "missing";
    if (f.kind == entry_kind::symlink) {
        if (!S_ISLNK(st.st_mode)) return "type changed (expected a symlink)";
        std::error_code link_ec;
        const auto target = fs::read_symlink(p, link_ec);
        if (link_ec || target.string() != f.link_target)
            return "symlink target changed (expected " + f.link_target + ", found " + target.string() + ")";
        return "";
    }
    if (!S_ISREG(st.st_mode)) return "type changed (expected a regular file)";
    if (static_cast<std::uint64_t>(st.st_size) != f.size)
        return "size changed (expected " + std::to_string(f.size) + ", found " + std::to_string(st.st_size) + ")";
    return std::nullopt;
}

// The real prefix behind the planner's interface.
class disk_view final : public prefix_view {
public:
    explicit disk_view(const fs::path& prefix) : prefix_(prefix) {}

    node type_of(const std::string& relative) const override {
        struct stat st {};
        if (::lstat((prefix_ / relative).c_str(), &st) != 0) return node::missing;
        if (S_ISDIR(st.st_mode)) return node::directory;
        if (S_ISREG(st.st_mode)) return node::regular;
        if (S_ISLNK(st.st_mode)) return node::symlink;
        return node::other;
    }

    bool holds(const std::string& relative, const installed_file& file) const override {
        const fs::path p = prefix_ / relative;
        if (const auto problem = shape_problem(p, file)) return problem->empty();  // "": the symlink as recorded
        auto digest = file_digest(p, file.piece_size);
        return digest.ok() && *digest == file.sha256;
    }

    std::optional<unsigned> stage_dir_mode(const std::string& stage, const std::string& relative) const override {
        struct stat st {};
        if (::lstat((prefix_ / stage / relative).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return st.st_mode & 07777;
        return std::nullopt;
    }

    std::optional<std::uint64_t> device_of(const std::string& relative) const override {
        struct stat st {};
        if (::lstat((relative.empty() ? prefix_ : prefix_ / relative).c_str(), &st) != 0) return std::nullopt;
        return static_cast<std::uint64_t>(st.st_dev);
    }

private:
    fs::path prefix_;
};

}  // namespace

// Receipts that cannot be read, for a commit: one of a component that is
// removed refuses the commit; one of a staged component is repaired (the new
// receipt takes its place, and one at another place, the legacy layout, is
// deleted: returned here); the others block nothing.
result<std::vector<std::string>> repaired_receipts(const fs::path& prefix, std::vector<unreadable_receipt>& unreadable,
                                                   const std::vector<staged_component>& staged,
                                                   const std::vector<component_ref>& remove) {
    std::vector<std::string> deletes;
    for (auto& u : unreadable) {
        const auto names = [&u](const std::string& product, const std::string& component) {
            return component == u.component && (u.product.empty() || product.empty() || product == u.product);
        };
        for (const auto& ref : remove)
            if (names(ref.product, ref.component)) return std::move(u.why);
        for (const auto& s : staged) {
            const receipt& r = s.new_receipt;
            if (!names(r.product, r.component) || u.rel_path == receipt_rel_path(r.product, r.component)) continue;
            struct stat st {};
            const fs::path path = prefix / u.rel_path;                   // from validated names
            if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))  // unlink(2) would fail mid-commit
                return make_error(error_code::bad_manifest, "corrupt prefix state: a receipt that is not a file")
                    .with_path(path.string());
            deletes.push_back(u.rel_path);
        }
    }
    return deletes;
}

result<void> commit_stages(const prefix_lock& lock, std::vector<staged_component> staged, bool overwrite_unowned) {
    return commit_stages_removing(lock, std::move(staged), {}, overwrite_unowned);
}

result<void> commit_stages_removing(const prefix_lock& lock, std::vector<staged_component> staged,
                                    const std::vector<component_ref>& remove, bool overwrite_unowned) {
    const fs::path& prefix = lock.prefix();
    // Until the journal exists nothing has changed in the prefix: a refusal
    // drops the stages too, so no stage outlives a failed run.
    const auto abandon = [&staged](error e) -> error {
        for (const auto& s : staged) remove_stage(s.stage_dir);
        return e;
    };
    std::vector<located_receipt> existing;
    std::vector<unreadable_receipt> unreadable;
    auto scanned = scan_located_receipts(prefix, existing, unreadable);
    if (!scanned.ok()) return abandon(std::move(scanned).error_value());
    auto repaired = repaired_receipts(prefix, unreadable, staged, remove);
    if (!repaired.ok()) return abandon(std::move(repaired).error_value());

    std::vector<planned_stage> planned;
    for (auto& s : staged) {
        const fs::path stage = s.stage_dir.lexically_normal();
        if (stage.parent_path() != staging_dir(prefix))
            return abandon(make_error(error_code::internal, "stage outside the prefix's staging directory")
                               .with_path(stage.string()));
        if (s.new_receipt.installed_at.empty()) s.new_receipt.installed_at = utc_now_iso8601();
        planned.push_back({std::string(staging_rel) + "/" + stage.filename().string(), &s.new_receipt});
    }
    std::vector<component_key> removed;
    removed.reserve(remove.size());
    for (const auto& ref : remove) removed.emplace_back(ref.product, ref.component);
    const disk_view disk(prefix);
    auto plan = plan_commit(disk, existing, planned, removed, overwrite_unowned);
    if (plan.ok()) {
        for (const auto& rel : *repaired) plan->deletes.push_back(rel);
        auto checked = check_journal(*plan);
        if (!checked.ok()) plan = std::move(checked).error_value();
    }
    if (!plan.ok()) {
        error e = std::move(plan).error_value();
        if (!e.path.empty() && e.code != error_code::internal) e.path = (prefix / e.path).string();
        if (e.path.empty() && e.code == error_code::conflict) e.path = prefix.string();  // several paths, named in it
        return abandon(std::move(e));
    }
    // Receipts are written beside the stages first and moved last, by the journal.
    for (const auto& s : staged) {
        auto written = atomic_write(s.stage_dir.string() + ".receipt.json", receipt_to_json(s.new_receipt),
                                    durability::contents);
        if (!written.ok()) return abandon(std::move(written).error_value());
    }
    return run_transaction(prefix, *plan);
}

result<std::vector<commit_conflict>> forecast_conflicts(const fs::path& prefix, const std::vector<receipt>& incoming,
                                                        const std::vector<component_ref>& remove,
                                                        bool overwrite_unowned) {
    std::vector<located_receipt> existing;
    std::vector<unreadable_receipt> unreadable;  // a forecast: they block nothing here
    REDIST_TRY_VOID(scan_located_receipts(prefix, existing, unreadable));
    // Named as stages would be; nothing is read from them (no stage exists).
    std::vector<planned_stage> planned;
    planned.reserve(incoming.size());
    for (std::size_t i = 0; i < incoming.size(); ++i)
        planned.push_back({std::string(staging_rel) + "/forecast-" + std::to_string(i), &incoming[i]});
    std::vector<component_key> removed;
    removed.reserve(remove.size());
    for (const auto& ref : remove) removed.emplace_back(ref.product, ref.component);
    return commit_conflicts(disk_view(prefix), existing, planned, removed, overwrite_unowned);
}

bool commit_pending(const fs::path& prefix) noexcept { return exists_no_follow(journal_path(prefix)); }

// ---- verify and remove ------------------------------------------------------------------

namespace {

// A regular file whose type and size match its record: its digest is left to
// the workers, one piece at a time (the whole file when it has no pieces).
struct digest_check {
    std::size_t slot;  // where its problem goes, in receipt order
    fs::path path;
    const installed_file* file;
    std::vector<std::array<unsigned char, 32>> pieces;
    std::vector<std::string> piece_errors;  // "" when the piece was read
};

// Hashes every piece of every check on up to `threads` threads. Each piece is
// one job, so that one large library does not leave the other cores idle. A
// file without a piece list is one piece of its whole size (an empty file is
// one empty piece).
void hash_pieces(std::vector<digest_check>& checks, unsigned threads) {
    struct piece_job {
        digest_check* check;
        std::size_t index;
        std::uint64_t offset;
        std::uint64_t length;
    };
    std::vector<piece_job> jobs;
    for (auto& c : checks) {
        const std::uint64_t size = c.file->size;
        const std::uint64_t span = c.file->piece_size ? c.file->piece_size : std::max<std::uint64_t>(size, 1);
        const auto count = static_cast<std::size_t>(std::max<std::uint64_t>(1, (size + span - 1) / span));
        c.pieces.resize(count);
        c.piece_errors.resize(count);
        for (std::size_t i = 0; i < count; ++i) {
            const std::uint64_t offset = span * i;
            jobs.push_back({&c, i, offset, std::min(span, size - offset)});
        }
    }
    for_each_index(jobs.size(), threads, nullptr, [&](std::size_t j) {
        const piece_job& job = jobs[j];
        auto digest = sha256_file_range(job.check->path, job.offset, job.length);
        if (digest.ok()) job.check->pieces[job.index] = *digest;
        else job.check->piece_errors[job.index] = digest.error_value().message;
    });
}

// The prefix lock, shared (see verify_prefix). Outcomes: ok (no descriptor
// when there is no .redist/) | bad_manifest | filesystem.
result<unique_fd> lock_prefix_shared(const fs::path& prefix, const std::function<void()>& on_wait) {
    const fs::path dir = state_dir(prefix);
    const unique_fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!dir_fd && errno == ENOENT) return unique_fd();
    if (!dir_fd && (errno == ELOOP || errno == ENOTDIR))
        return make_error(error_code::bad_manifest, "corrupt prefix state: not a directory (is it a symlink?)")
            .with_path(dir.string());
    if (!dir_fd) return errno_error("cannot open", dir, errno);
    return lock_file_at(dir_fd.get(), "lock", lock_mode::shared, lock_wait::block, on_wait, dir / "lock");
}

// verify_prefix's work, under the prefix lock (shared or exclusive).
result<verify_report> verify_locked(const fs::path& prefix, unsigned threads) {
    const bool pending = commit_pending(prefix);
    REDIST_TRY(receipt_scan scan, scan_receipts(prefix));
    const std::vector<receipt>& receipts = scan.receipts;
    std::error_code ec;
    const fs::path root = fs::absolute(prefix, ec).lexically_normal();
    if (ec) return fs_error("cannot resolve", prefix, ec);
    // One slot per file, in receipt order: the report reads the same whatever
    // order the workers finish in.
    std::vector<verify_problem> slots;
    std::vector<digest_check> checks;
    for (const auto& r : receipts) {
        for (const auto& f : r.files) {
            REDIST_TRY(fs::path p, confined_join(root, f.path));
            auto problem = shape_problem(p, f);
            slots.push_back({r.component, f.path, problem.value_or("")});
            if (!problem) checks.push_back({slots.size() - 1, std::move(p), &f, {}, {}});
        }
    }
    if (threads == 0) threads = run_budget::machine_limits().threads;
    hash_pieces(checks, threads);
    for (const auto& c : checks) {
        const auto unread = std::find_if(c.piece_errors.begin(), c.piece_errors.end(),
                                         [](const auto& e) { return !e.empty(); });
        if (unread != c.piece_errors.end()) {
            slots[c.slot].what = "unreadable (" + *unread + ")";
            continue;
        }
        const std::string digest = piece_list_hex(c.pieces);
        if (digest != c.file->sha256)
            slots[c.slot].what = "modified (" + std::string(c.file->piece_size ? "sha256_pieces " : "sha256 ") +
                                 digest + ", expected " + c.file->sha256 + ")";
    }
    verify_report report;
    report.unreadable = std::move(scan.unreadable);
    report.components = receipts.size();
    report.files = slots.size();
    report.commit_pending = pending;
    for (auto& s : slots)
        if (!s.what.empty()) report.problems.push_back(std::move(s));
    return report;
}

}  // namespace

result<verify_report> verify_prefix(const fs::path& prefix, unsigned threads, const std::function<void()>& on_wait) {
    REDIST_TRY(const unique_fd lock, lock_prefix_shared(prefix, on_wait));
    return verify_locked(prefix, threads);
}

result<verify_report> verify_prefix(const prefix_lock& held, unsigned threads) {
    return verify_locked(held.prefix(), threads);
}

result<void> remove_components(const prefix_lock& lock, const std::vector<component_ref>& which) {
    const fs::path& prefix = lock.prefix();
    if (which.empty()) return {};
    std::vector<located_receipt> receipts;
    std::vector<unreadable_receipt> unreadable;
    REDIST_TRY_VOID(scan_located_receipts(prefix, receipts, unreadable));
    // A receipt that cannot be read blocks its own component only. Which
    // files it lists is unknown: they are never deleted here, but a file it
    // shares with a component that goes is deleted with that one.
    REDIST_TRY_VOID(repaired_receipts(prefix, unreadable, {}, which));
    std::map<std::string, std::set<std::string>> products_of;  // component -> products that have it
    for (const auto& e : receipts) products_of[e.r.component].insert(e.r.product);
    std::vector<component_key> targets;
    for (const auto& ref : which) {
        const auto found = products_of.find(ref.component);
        const bool known = found != products_of.end() && (ref.product.empty() || found->second.count(ref.product));
        if (!known) {
            std::vector<std::string> names;
            std::string installed;
            for (const auto& e : receipts) {
                names.push_back(e.r.component);
                installed += (installed.empty() ? "" : ", ") + e.r.component;
            }
            const std::string what = "component " + printable(ref.component, 64) +
                                     (ref.product.empty() ? "" : " of product " + printable(ref.product, 64));
            return make_error(error_code::not_found, what + " is not installed" + did_you_mean(ref.component, names) +
                                                         " (installed: " + (installed.empty() ? "none" : installed) +
                                                         ")")
                .with_path(prefix.string());
        }
        if (ref.product.empty() && found->second.size() > 1) {
            std::string products;
            for (const auto& p : found->second) products += (products.empty() ? "" : ", ") + p;
            return make_error(error_code::usage, "component " + ref.component + " is installed by several products (" +
                                                     products + "): name one with --product")
                .with_path(prefix.string());
        }
        targets.emplace_back(ref.product.empty() ? *found->second.begin() : ref.product, ref.component);
    }
    REDIST_TRY(const journal j, plan_commit(disk_view(prefix), receipts, {}, targets, false));
    return run_transaction(prefix, j);
}

result<void> remove_component(const prefix_lock& lock, const std::string& component) {
    return remove_components(lock, {component_ref{"", component}});
}

}  // namespace redist
