// The dry run's forecast (--dry-run): the plan of an install and every
// conflict its commit would refuse, from the file lists known before
// unpacking (the cache's extracted trees, matching receipts), and, for
// forecast_install, from the archives it reads into the cache first. The
// install itself is install.cpp; both plan with plan_install.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "pipeline/install_rules.hpp"
#include "redist/cache.hpp"
#include "redist/install.hpp"
#include "redist/prefix.hpp"
#include "store/cache_trees.hpp"
#include "store/stage.hpp"
#include "support/posix_file.hpp"

namespace fs = std::filesystem;

namespace redist {

namespace {

// The files an artifact the plan (re)installs would write, where they are
// known before it is unpacked: its extracted tree's list in the cache, else
// the receipt of the same archive (a --reinstall); with the exclude globs
// applied as install() applies them. nullopt: unknown until it is unpacked.
std::optional<std::vector<installed_file>> known_files(const install_request& request, const release_plan& release,
                                                       const artifact& a, const std::vector<receipt>& receipts,
                                                       const blob_cache* cache) {
    std::optional<std::vector<installed_file>> files = cache ? tree_files(*cache, a.sha256) : std::nullopt;
    if (!files) {
        const receipt* same = current_receipt(request, release, a, receipts);
        if (!same) return std::nullopt;
        files = same->files;  // excluded already
    }
    std::erase_if(*files, [&](const installed_file& f) { return path_excluded(f.path, request.exclude); });
    return files;
}

// The known file lists of a plan's items: what the items that write files
// would write (as receipts), and the components whose files leave.
struct known_lists {
    std::vector<receipt> incoming;
    std::vector<component_ref> remove;
};

// Marks the items whose files are known now (files_known) and gathers their
// lists; nothing in the prefix is read.
known_lists known_file_lists(const install_request& request, const std::vector<receipt>& receipts,
                             const blob_cache* cache, install_plan& plan) {
    known_lists out;
    for (auto& item : plan.items) {
        if (item.action == plan_action::remove) out.remove.push_back({item.product, item.component});
        if (item.action == plan_action::remove || item.action == plan_action::unchanged) continue;
        const release_plan& release = request.releases[item.release];
        const artifact& a = release.artifacts[item.artifact];
        auto files = known_files(request, release, a, receipts, cache);
        if (!files) {
            // Its new files are not known, but its installed ones leave: they
            // are in nobody's way (as a removal, not as a kept component).
            if (std::any_of(receipts.begin(), receipts.end(), [&](const receipt& r) {
                    return r.product == item.product && r.component == item.component;
                }))
                out.remove.push_back({item.product, item.component});
            continue;
        }
        item.files_known = true;
        receipt& r = out.incoming.emplace_back();
        fill_receipt(release, a, std::string(), r);
        r.files = std::move(*files);
    }
    return out;
}

// Fills plan.conflicts with what the commit would refuse among the known
// file lists: the commit's own checks (forecast_conflicts), which hash the
// prefix's files in the way; so run once per forecast.
result<void> forecast_plan_conflicts(const install_request& request, const fs::path& prefix, const known_lists& known,
                                     install_plan& plan) {
    REDIST_TRY(const auto conflicts,
               forecast_conflicts(prefix, known.incoming, known.remove, request.overwrite_unowned));
    for (const auto& c : conflicts) plan.conflicts.push_back({c.path, c.message});
    return {};
}

// What a forecast starts from: the prefix, its receipts (none when it does
// not exist) and the cache, opened read-only (nullopt: none).
struct forecast_inputs {
    fs::path prefix;
    std::vector<receipt> receipts;
    std::optional<blob_cache> cache;
    const blob_cache* cache_or_null() const { return cache ? &*cache : nullptr; }
};

result<forecast_inputs> open_inputs(const install_request& request) {
    forecast_inputs in;
    in.prefix = fs::absolute(request.prefix).lexically_normal();
    REDIST_TRY(receipt_scan scan, scan_receipts(in.prefix));
    in.receipts = std::move(scan.receipts);
    REDIST_TRY(in.cache, blob_cache::open_if_possible(request.sources.cache_dir, request.sources.shared_cache));
    return in;
}

}  // namespace

result<install_plan> plan_install(const install_request& request) {
    REDIST_TRY(const forecast_inputs in, open_inputs(request));
    install_plan plan = plan_install(request, in.receipts, in.cache_or_null());
    const known_lists known = known_file_lists(request, in.receipts, in.cache_or_null(), plan);
    REDIST_TRY_VOID(forecast_plan_conflicts(request, in.prefix, known, plan));
    return plan;
}

result<install_plan> forecast_install(const install_request& request) {
    REDIST_TRY(const forecast_inputs in, open_inputs(request));
    install_plan plan = plan_install(request, in.receipts, in.cache_or_null());
    // The conflicts are forecast once, when every list that can be known is:
    // after the archives below are read, not also before.
    known_lists known = known_file_lists(request, in.receipts, in.cache_or_null(), plan);
    // The artifacts whose files only their archive can tell.
    install_request reading = request;
    std::size_t unknown = 0;
    std::uint64_t unknown_bytes = 0;
    for (auto& release : reading.releases) release.artifacts.clear();
    for (const auto& item : plan.items) {
        if (item.files_known || item.action == plan_action::remove || item.action == plan_action::unchanged) continue;
        const artifact& a = request.releases[item.release].artifacts[item.artifact];
        reading.releases[item.release].artifacts.push_back(a);
        ++unknown;
        add_saturating(unknown_bytes, a.size);
    }
    if (unknown > 0 && in.cache) {
        // A throwaway prefix beside the cache (same filesystem: its trees are
        // linked, not copied); the scratch directory is removed when released.
        const fs::path parent = in.cache->scratch_root();
        const unique_fd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (!parent_fd) return errno_error("cannot open directory", parent, errno);
        REDIST_TRY(const scratch_dir scratch, claim_scratch_dir(parent_fd.get(), parent, "dry-run-"));
        std::erase_if(reading.releases, [](const release_plan& r) { return r.artifacts.empty(); });
        reading.prefix = scratch.path() / "prefix";
        reading.keep_unlisted = true;
        reading.reinstall = true;
        reading.exclude.clear();  // the tree is the archive's; the forecast applies the excludes
        if (auto read = install_stages(reading, false); !read.ok()) return std::move(read).error_value();
        // The read archives' trees are in the cache now: their lists are known.
        known = known_file_lists(request, in.receipts, in.cache_or_null(), plan);
        plan.archives_read = unknown;
        plan.archive_bytes_read = unknown_bytes;
    }
    REDIST_TRY_VOID(forecast_plan_conflicts(request, in.prefix, known, plan));
    return plan;
}

}  // namespace redist
