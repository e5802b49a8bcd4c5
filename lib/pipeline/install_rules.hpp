// pipeline/install_rules.hpp (internal) — rules install() applies
// (install.cpp): its plan, the free-space preflight, and what install.cpp
// and the dry run's forecast (forecast.cpp) share; exposed for the unit
// tests (tests/unit/pipeline/install_test.cpp, sync_test.cpp).
// redist/install.hpp holds what a program calls: install(),
// forecast_install, kept_in_cache.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "redist/cache.hpp"
#include "redist/error.hpp"
#include "redist/install.hpp"
#include "redist/manifest.hpp"
#include "redist/prefix.hpp"

namespace redist {

// ---- the plan ---------------------------------------------------------------------

// The plan of `request`, given the prefix's receipts and the cache (null:
// none). No side effects: nothing is written, locked or downloaded.
install_plan plan_install(const install_request& request, const std::vector<receipt>& receipts,
                          const blob_cache* cache);

// The same for a caller that holds nothing (--dry-run): reads the prefix's
// receipts (none when it does not exist) and opens the cache read-only;
// then forecasts the commit's conflicts (install_plan::conflicts) from the
// file lists known without unpacking anything: the cache's extracted trees,
// and the receipt of an artifact reinstalled as it is. It hashes the
// prefix's files in the way, as the commit would; nothing is written.
// forecast_install starts with it (forecast.cpp).
// Outcomes: ok | filesystem (a cache that cannot be trusted, a prefix that
// cannot be read) | bad_manifest (a corrupt receipts directory).
result<install_plan> plan_install(const install_request& request);

// ---- the free-space preflight -------------------------------------------------------

// What an archive of `archive_size` bytes takes at least once unpacked:
// 3/2 of its size. xz shrinks real CUDA payloads by 1.5x at the least
// (cuDNN 9.19: 471 MiB unpacked from 312 MiB) and by up to about 6x (headers),
// so this is a floor: a preflight that refused installs which fit would be
// worse than one that lets a few fail later. Saturates instead of wrapping.
std::uint64_t unpacked_size_estimate(std::uint64_t archive_size) noexcept;

// The free-space check of install() (install_request::check_free_space),
// on its own. `needed_prefix` and `needed_cache` are bytes; `cache_dir` may
// be empty (no cache). Where both lie on one filesystem, their sum must
// fit. REDIST_TEST_FREE_BYTES (tests only) replaces the free space statvfs
// reports.
// Outcomes: ok | filesystem (names the directory, what is needed and what is free).
result<void> check_free_space(const std::filesystem::path& prefix, std::uint64_t needed_prefix,
                              const std::filesystem::path& cache_dir, std::uint64_t needed_cache);

// ---- the jobs and their receipts ------------------------------------------------------

// How many artifacts a fetch runs at once by default: enough job slots that
// the others, started largest first, fit beside the largest one:
// ceil(total bytes / largest archive's bytes), within 1..cores (the run's
// thread budget, --threads).
// Why: the largest archive is the run's long pole (its download and decode
// take longest), and more artifacts at once only take bandwidth and CPU from
// it. Measured on 16 cores (bench/RESULTS.md), 14 components
// (1.3 GiB, the largest 373 MiB): 4 at once (this rule's answer) 0.96x the
// decode floor, 6: 1.00x, 8: 1.08x, all 14: 1.13x. Archives of one xz block
// decode on one thread each; with these slots the others still finish
// within the largest one's time (the bound of any order).
unsigned default_jobs(const std::vector<std::uint64_t>& archive_sizes, unsigned cores);

// The receipt already has this artifact of `product`, made with these exclude globs.
bool receipt_current(const receipt& r, const std::string& product, const artifact& a,
                     const std::vector<std::string>& exclude);

// What install.cpp and the dry run's forecast (forecast.cpp) share:
// a receipt's fields for artifact `a` of `release` (its files aside);
void fill_receipt(const release_plan& release, const artifact& a, const std::string& url, receipt& r);
// sum += n, saturating at UINT64_MAX (hostile sizes);
void add_saturating(std::uint64_t& sum, std::uint64_t n);
// the receipt of `receipts` that already has `a` (receipt_current), or null;
const receipt* current_receipt(const install_request& request, const release_plan& release, const artifact& a,
                               const std::vector<receipt>& receipts);
// install(), or (commit false) everything before the commit: the stages
// are made (and the cache keeps their trees) and then discarded.
result<install_report> install_stages(const install_request& request, bool commit);

}  // namespace redist
