// redist/fetch.hpp — the whole pipeline, end to end: resolve a release, pick
// artifacts, stream each one through download -> SHA-256 + size -> decode ->
// unpack into a stage, verify, and commit into the prefix.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "redist/budget.hpp"
#include "redist/cache.hpp"
#include "redist/error.hpp"
#include "redist/manifest.hpp"
#include "redist/observer.hpp"
#include "redist/platform.hpp"
#include "redist/resolve.hpp"
#include "redist/select.hpp"
#include "redist/transfer.hpp"

namespace redist {

// ---- installing ----------------------------------------------------------------

// How many artifacts a fetch runs at once by default: enough job slots that
// the others, started largest first, fit beside the largest one:
// ceil(total bytes / largest archive's bytes), within 1..cores (the run's
// thread budget, --threads).
// Why: the largest archive is the run's long pole (its download and decode
// take longest), and more artifacts at once only take bandwidth and CPU from
// it. Measured on 16 cores (bench/RESULTS.md, session 9), 14 components
// (1.3 GiB, the largest 373 MiB): 4 at once (this rule's answer) 0.96x the
// decode floor, 6: 1.00x, 8: 1.08x, all 14: 1.13x. Archives of one xz block
// decode on one thread each; with these slots the others still finish
// within the largest one's time (the bound of any order).
unsigned default_jobs(const std::vector<std::uint64_t>& archive_sizes, unsigned cores);

struct install_request {
    std::filesystem::path prefix;
    std::string product;
    std::string release_label;
    std::string artifact_base_url;
    std::vector<artifact> artifacts;                        // from select_artifacts
    std::map<std::string, std::string> component_versions;  // component key -> version, for receipts
    bool force = false;                                     // reinstall even when receipts match
    link_mode tree_link_mode = link_mode::auto_select;      // how cached trees are placed (see cache.hpp)
    unsigned jobs = 0;  // concurrent artifacts; 0 = default_jobs() of the artifacts to fetch
    // Ranged connections per archive (http/https): 0 = the default, 6
    // connections for archives of 64 MiB or more (measured:
    // bench/capped_link.py); N > 1 splits any archive of at least 8 MiB;
    // 1 = one stream. A server that ignores ranges gets one stream anyway.
    int connections = 0;
    // Threads and memory the artifacts in flight share (make_run_budget; its
    // profile_of() afterwards has the per-stage times). Null: each artifact
    // sizes its decoder and writers for the whole machine.
    std::shared_ptr<run_budget> budget;
    // Unverified bytes are bounded. The hash is known only after the last
    // byte, but unpacking runs while the bytes arrive, so a hostile archive
    // of the right size and the wrong hash could expand to gigabytes before
    // it is caught. Its decoded output (tar stream and file contents, holes
    // included) may be at most max_expansion times the manifest's size, and
    // never less than min_expansion_bytes (tiny archives are mostly tar
    // headers, which xz shrinks 50x and more). Past the cap unpacking stops,
    // the download runs to its end, and the hash decides: a mismatch is an
    // integrity failure (the next source is tried); a match is an unsafe
    // archive. Why 20: xz shrinks real CUDA payloads 1.5x (cuDNN 9.19: 471 MiB
    // -> 312 MiB) to about 6x (text-heavy header packages), so 20 leaves more
    // than 3x headroom, while an xz bomb (zeros shrink ~1000x and more) stops
    // after writing 20x the download. 0 = no cap.
    unsigned max_expansion = 20;
    std::uint64_t min_expansion_bytes = 64ull << 20;
    transfer_options transfer;
    source_policy sources;
    fetch_observer* observer = nullptr;  // not owned; null: nobody listens
};

struct component_report {
    std::string component;
    std::string version;
    std::string platform;
    std::optional<std::string> variant;
    std::string url;  // the URL that served the archive (a mirror, the base, or the cache's source)
    std::string sha256;
    std::uint64_t size = 0;
    std::size_t files = 0;
    int requests = 0;  // HTTP/file requests made for this artifact
    double seconds = 0;
    bool from_cache = false;
    bool from_tree = false;  // from the cache's extracted tree: nothing was decoded
    bool unchanged = false;  // receipts already matched: nothing was done
};

struct install_report {
    std::filesystem::path prefix;
    std::string product;
    std::string release_label;
    std::vector<component_report> components;  // in artifact order
};

// Installs the artifacts into the prefix (see install.hpp for the layout and
// the commit protocol). All artifacts are committed in one transaction, or
// none is. Each artifact's sources (cache, mirrors, base) are tried in order:
// wrong bytes (integrity, including an archive that failed to unpack before its
// hash was known) and not-found move on to the next source.
// Outcomes: ok | not_found | network | integrity | bad_archive |
// unsafe_archive | conflict | filesystem | bad_manifest (a corrupt receipt or
// journal in the prefix, or invalid names) | internal (the archive reader
// could not be set up) | cancelled (an artifact that neither staged nor
// failed; rare).
result<install_report> install(const install_request& request);

}  // namespace redist
