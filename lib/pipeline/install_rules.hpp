// pipeline/install_rules.hpp (internal) — rules install() applies
// (install.cpp), exposed for the unit tests and the dry run's forecast
// (forecast.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "redist/install.hpp"
#include "redist/manifest.hpp"
#include "redist/prefix.hpp"

namespace redist {

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
