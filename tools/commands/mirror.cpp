// `redist mirror` — copy releases into a local mirror with the upstream
// layout (a cache warmer for CI fleets and air-gapped sites). The work is
// redist::mirror_releases(); this file parses options and renders.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "commands/commands.hpp"
#include "common/observer.hpp"
#include "common/printable.hpp"
#include "redist/json_writer.hpp"
#include "redist/lockfile.hpp"
#include "redist/mirror.hpp"
#include "redist/platform.hpp"
#include "redist/urls.hpp"

namespace redist_tools {

namespace {

struct mirror_args {
    std::string product;
    std::vector<std::string> versions;
    std::string dest;
    std::vector<std::string> platforms;
    std::vector<int> cuda;
    std::vector<std::string> components;
    source_options source;
    bool from_cache = false;
    std::string recompress;
    std::string sign_key;  // --sign-key FILE
    std::vector<std::string> mount_from;
    std::vector<std::string> from_locks;  // --from-lock FILE
    unsigned jobs = 1;
    bool json = false;
    bool quiet = false;
};

const char* status_word(redist::mirror_status s) {
    switch (s) {
        case redist::mirror_status::downloaded: return "downloaded";
        case redist::mirror_status::replaced: return "replaced";
        case redist::mirror_status::up_to_date: return "up to date";
        case redist::mirror_status::mounted: return "mounted";
    }
    return "?";
}

void write_report(redist::json_writer& w, const redist::mirror_report& report) {
    w.begin_object();
    w.field("product", report.product);
    w.field("redist_dir", report.redist_dir.string());
    w.field("index", report.index_path.string());
    w.field("bytes_downloaded", report.bytes_downloaded);
    w.field("copies_made", static_cast<std::uint64_t>(report.copies_made));
    w.key("releases").begin_array();
    for (const auto& r : report.releases) {
        w.begin_object();
        w.field("label", r.label);
        w.field("manifest_url", r.manifest_url);
        w.field("manifest_path", r.manifest_path.string());
        w.field("manifest_sha256", r.manifest_sha256);
        w.field("manifest_status", redist::to_string(r.manifest_status));
        w.key("files").begin_array();
        for (const auto& f : r.files) {
            w.begin_object();
            w.field("component", f.component);
            w.field("platform", f.platform);
            w.field("variant", f.variant);
            w.field("relative_path", f.relative_path);
            w.field("path", f.path.string());
            w.field("url", f.url);
            w.field("sha256", f.sha256);
            w.field("size", f.size);
            w.field("status", redist::to_string(f.status));
            w.end_object();
        }
        w.end_array();
        w.field("sidecar_path", r.sidecar_path.string());
        w.field("signed_by", r.signed_by);
        w.key("missing_platforms").begin_array();
        for (const auto& p : r.missing_platforms) w.value(p);
        w.end_array();
        w.field("kept_from_earlier", static_cast<std::uint64_t>(r.kept_from_earlier));
        w.key("copies").begin_array();
        for (const auto& c : r.copies) {
            w.begin_object();
            w.field("original_sha256", c.original_sha256);
            w.field("original_size", c.original_size);
            w.field("relative_path", c.relative_path);
            w.field("path", c.path.string());
            w.field("compression", c.compression);
            w.field("sha256", c.sha256);
            w.field("size", c.size);
            w.field("tar_sha256", c.tar_sha256);
            w.field("tar_size", c.tar_size);
            if (c.tar_piece_bytes != 0) {
                w.field("tar_piece_bytes", c.tar_piece_bytes);
                w.field("tar_list_sha256", c.tar_list_sha256);
            }
            if (!c.tree_sha256.empty()) w.field("tree_sha256", c.tree_sha256);
            w.field("status", c.status == redist::mirror_status::up_to_date ? "up_to_date" : "recompressed");
            w.end_object();
        }
        w.end_array();
        w.end_object();
    }
    w.end_array();
    w.end_object();
}

// One report as an object; with --from-lock, an array of one per release.
void print_json(const std::vector<redist::mirror_report>& reports, bool from_locks) {
    redist::json_writer w(2);
    if (from_locks) w.begin_array();
    for (const auto& r : reports) write_report(w, r);
    if (from_locks) w.end_array();
    std::printf("%s\n", w.str().c_str());
}

// --from-lock: one request per release the locks pin (the union of every
// lock's artifacts of it), each mirroring exactly those artifacts.
redist::result<std::vector<redist::mirror_request>> requests_from_locks(const std::vector<std::string>& locks,
                                                                        const redist::mirror_request& base) {
    std::map<std::tuple<std::string, std::string, std::string>, redist::mirror_request> by_release;
    for (const auto& path : locks) {
        REDIST_TRY(const std::string text, redist::read_project_document(path, redist::kMaxLockFileBytes, "lock file"));
        REDIST_TRY(const auto releases, redist::releases_of_lock(text, path));
        for (const auto& lock : releases) {
            auto& req = by_release[{lock.product, lock.release_label, lock.manifest_sha256}];
            if (!req.pin) {
                req = base;
                req.product = lock.product;
                req.versions = {lock.release_label};
                req.pin = redist::mirror_pin{lock.manifest_sha256, {}};
            }
            for (const auto& a : lock.artifacts) {
                auto& pinned = req.pin->artifacts;
                if (std::none_of(pinned.begin(), pinned.end(),
                                 [&](const auto& p) { return p.relative_path == a.entry.relative_path; }))
                    pinned.push_back({a.entry.relative_path, a.entry.sha256, a.entry.size});
                if (std::find(req.platforms.begin(), req.platforms.end(), a.entry.platform) == req.platforms.end())
                    req.platforms.push_back(a.entry.platform);  // what the report says; the pins decide
            }
        }
    }
    std::vector<redist::mirror_request> out;
    for (auto& [key, req] : by_release) out.push_back(std::move(req));
    return out;
}

// --from-cache: a release whose manifest (or index) no source left in the
// cache gets one line naming the sources looked up and what to do.
redist::error explain_not_cached(redist::error e, const redist::mirror_request& req) {
    if (e.code != redist::error_code::not_found || !e.message.starts_with("offline, and not in the cache")) return e;
    std::string looked_up;
    for (const auto& base : req.sources.mirrors) looked_up += redist::sanitize_url(redist::to_url(base)) + ", ";
    looked_up += redist::sanitize_url(req.base_url);
    e.message = "no manifest of " + req.product + " in the cache from " + looked_up +
                " (a fetch keeps it under the URL it came from: name that source with --mirror or --base-url, "
                "or mirror without --from-cache)";
    return e;
}

int run_mirror(const mirror_args& args) {
    if (args.dest.empty()) return usage_error("--dest DIR or --to DIR|URL is required");
    const bool from_locks = !args.from_locks.empty();
    if (from_locks && (!args.product.empty() || !args.versions.empty()))
        return usage_error("give PRODUCT VERSIONS or --from-lock, not both");
    if (from_locks && (!args.platforms.empty() || !args.cuda.empty() || !args.components.empty()))
        return usage_error(
            "--from-lock mirrors exactly what the locks pin: --platform, --cuda and --component "
            "do not apply");
    if (!from_locks && (args.product.empty() || args.versions.empty()))
        return usage_error("PRODUCT and VERSIONS are required (or --from-lock FILE)");
    redist::mirror_request req;
    req.dest = args.dest;
    req.product = args.product;
    req.versions = args.versions;
    req.platforms = args.platforms;
    req.cuda_majors = args.cuda;
    req.components = args.components;
    req.base_url = args.source.effective_base_url();
    req.transfer = args.source.transfer();
    req.sources.attempts_per_source = args.source.effective_retries();
    req.sources.mirrors = args.source.mirrors;  // tried before the base for archives (never for manifests)
    req.sources.fallback_bases = args.source.fallback_bases();
    req.scratch_cache_dir = effective_cache_dir(args.source.cache_dir);
    req.sources.shared_cache = args.source.shared_cache;
    if (args.from_cache) {
        req.sources.cache_dir = effective_cache_dir(args.source.cache_dir);
        req.sources.offline = true;
        req.sources.shared_cache = args.source.shared_cache;
        // The cache keeps a manifest and an index under the URL they came
        // from: a fetch through a mirror ($REDIST_MIRRORS, --mirror) left
        // them under the mirror's. Offline, those are looked up first; the
        // base (NVIDIA's by default) is only ever a cache key here.
        req.sources.mirrors = args.source.effective_mirrors();
    }
    req.jobs = args.jobs;
    if (args.recompress == "zstd") req.recompress = redist::recompression::zstd;
    if (!args.sign_key.empty()) req.sign_key = args.sign_key;
    req.mount_from = args.mount_from;
    if (req.platforms.empty() && !from_locks) {
        auto host = redist::detect_host_platform(redist::host_probe::system());
        if (!host.ok()) return report_error(host.error_value());
        req.platforms.push_back(*host);
    }
    std::vector<redist::mirror_request> requests{req};
    if (from_locks) {
        auto pinned = requests_from_locks(args.from_locks, req);
        if (!pinned.ok()) return report_error(pinned.error_value());
        requests = std::move(pinned).value();
    }

    // Plain lines, one per finished file (CI logs); on a terminal, a
    // transient percentage on stderr for the file being downloaded (with
    // --jobs > 1, for whichever file reported last).
    const bool tty = !args.json && !args.quiet && ::isatty(STDERR_FILENO);
    int last_percent = -1;
    std::mutex mutex;
    std::string product;  // of the request running
    console_observer observer(args.quiet || args.json);
    observer.mirror = [&](const redist::mirror_event& e) {
        if (args.json || args.quiet) return;
        using redist::mirror_step;
        std::lock_guard lock(mutex);
        if (e.step == mirror_step::resolving) {
            std::printf("%s %s\n", printable(product).c_str(), printable(e.label).c_str());
        } else if (e.step == mirror_step::downloading && tty && e.bytes_total > 0) {
            const int percent = static_cast<int>(e.bytes_done * 100 / e.bytes_total);
            if (percent != last_percent) {
                std::fprintf(stderr, "\r  %3d%% %s", percent, printable(e.relative_path).c_str());
                std::fflush(stderr);
                last_percent = percent;
            }
        } else if (e.step == mirror_step::recompressing && tty) {
            std::fprintf(stderr, "\r  recompressing %s", printable(e.relative_path).c_str());
            std::fflush(stderr);
            last_percent = 0;  // blanked when it finishes
        } else if (e.step == mirror_step::finished) {
            // Blank the percentage line (plain spaces: no terminal escapes).
            if (last_percent >= 0)
                std::fprintf(stderr, "\r%*s\r", static_cast<int>(printable(e.relative_path).size() + 16), "");
            last_percent = -1;
            const char* word = e.copy && e.status != redist::mirror_status::up_to_date ? "recompressed"
                                                                                       : status_word(e.status);
            std::printf("  %-11s %s (%s)\n", word, printable(e.relative_path).c_str(),
                        human_size(e.bytes_total).c_str());
            std::fflush(stdout);
        }
    };

    std::vector<redist::mirror_report> reports;
    for (auto& r : requests) {
        product = r.product;
        r.observer = &observer;
        auto report = redist::mirror_releases(r);
        if (last_percent >= 0) std::fprintf(stderr, "\n");
        last_percent = -1;
        if (!report.ok())
            return report_error(args.from_cache ? explain_not_cached(report.error_value(), r) : report.error_value());
        for (const auto& release : report->releases)
            if (!release.missing_platforms.empty()) {  // also under -q: the run did less than asked
                std::string list;
                for (const auto& p : release.missing_platforms) list += (list.empty() ? "" : ", ") + p;
                std::fprintf(stderr, "%s: warning: %s %s has nothing for %s: mirrored for the other platforms\n",
                             tool_name.c_str(), printable(r.product).c_str(), printable(release.label).c_str(),
                             printable(list).c_str());
            }
        reports.push_back(std::move(report).value());
    }

    if (args.json) {
        print_json(reports, from_locks);
        return 0;
    }
    if (args.quiet) return 0;
    std::size_t releases = 0, files = 0, fetched = 0, mounted = 0, copies = 0, copies_made = 0, kept = 0;
    std::uint64_t bytes = 0;
    bool signed_any = false;
    for (const auto& report : reports) {
        releases += report.releases.size();
        bytes += report.bytes_downloaded;
        copies_made += report.copies_made;
        for (const auto& r : report.releases) {
            files += r.files.size();
            copies += r.copies.size();
            kept += r.kept_from_earlier;
            for (const auto& f : r.files) {
                fetched += f.status == redist::mirror_status::downloaded || f.status == redist::mirror_status::replaced;
                mounted += f.status == redist::mirror_status::mounted;
            }
            if (!r.signed_by.empty() && !signed_any) {
                signed_any = true;
                std::printf("signed the copies' records with key %s\n", r.signed_by.c_str());
            }
        }
    }
    const std::string where = reports.size() == 1 ? reports.front().redist_dir.string() : args.dest;
    std::printf("mirrored %zu release%s, %zu artifact%s into %s: %zu fetched (%s), %zu up to date", releases,
                releases == 1 ? "" : "s", files, files == 1 ? "" : "s", printable(where).c_str(), fetched,
                human_size(bytes).c_str(), files - fetched - mounted);
    if (mounted > 0) std::printf(", %zu mounted", mounted);
    if (kept > 0) std::printf("; %zu more kept from earlier runs", kept);
    if (args.recompress == "zstd")
        std::printf("; %zu zstd cop%s, %zu recompressed", copies, copies == 1 ? "y" : "ies", copies_made);
    std::printf("\n");
    if (copies > 0 && args.sign_key.empty())
        std::fprintf(stderr,
                     "%s: warning: the copies are not signed (--sign-key KEY): clients install the originals, "
                     "never an unsigned copy\n",
                     tool_name.c_str());
    return 0;
}

}  // namespace

void add_mirror_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<mirror_args>();
    auto* cmd = app.add_subcommand("mirror", "Copy releases into a local mirror (upstream layout, verified)");
    cmd->add_option("PRODUCT", args->product, "cudnn, cuda, ... (not with --from-lock)");
    cmd->add_option("VERSIONS", args->versions, "Comma-separated: 9.27.0,9.8.0 (each 9.27.0, 9.27, 9 or latest)")
        ->delimiter(',');
    cmd->add_option("--from-lock", args->from_locks,
                    "Mirror exactly what this lock pins (redist.lock of `redist sync`, or a lock of `redist lock`): "
                    "every release, platform, variant and artifact it lists, the manifest checked against the "
                    "pinned SHA-256. Repeatable: the union of several projects' locks (a fleet's cache warmer)")
        ->type_name("FILE");
    auto* dest = cmd->add_option("--dest", args->dest,
                                 "The mirror root: files go to DIR/<product>/redist/ (created if needed)")
                     ->type_name("DIR");
    auto* to =
        cmd->add_option(
               "--to", args->dest,
               "Where to mirror: a directory (as --dest), or a registry, oci://HOST[:PORT]/NAMESPACE "
               "(https) or oci+http://... (plain http): repository NAMESPACE/<product>, one tag per "
               "release, each archive a blob named by its SHA-256; or an OCI image layout on disk, oci-layout:DIR "
               "(DIR/<product>/index.json, blobs/sha256/). Credentials: "
               "REDIST_OCI_AUTH=REGISTRY=USER:PASSWORD (REGISTRY: HOST[:PORT] for https, oci+http://HOST[:PORT] "
               "for plain http), else docker's config.json (docs/fleet.md). Pushes are retried as downloads are "
               "(--retries, Retry-After, --stall-timeout)")
            ->type_name("DIR|URL");
    dest->excludes(to);
    to->excludes(dest);
    cmd->add_option("--platform", args->platforms,
                    "Platform to mirror; repeatable or comma-separated (default: this machine's)")
        ->delimiter(',')
        ->check(platform_check())
        ->type_name("P");
    cmd->add_option("--cuda", args->cuda,
                    "CUDA major of the variants to mirror; repeatable or comma-separated (default: every variant "
                    "offered). Artifacts without a variant are always mirrored")
        ->delimiter(',')
        ->transform(cuda_major_transform())
        ->type_name("N");
    cmd->add_option("--component", args->components, "Components to mirror, comma-separated (default: all)")
        ->delimiter(',')
        ->type_name("a,b");
    cmd->add_option("--base-url", args->source.base_url,
                    "Upstream: <base>/<product>/redist/. http(s)://, file:// or a local directory. "
                    "Default: $REDIST_BASE_URL, else NVIDIA's")
        ->type_name("URL");
    cmd->add_option("--ca-file", args->source.ca_file, "CA bundle for HTTPS")->type_name("FILE");
    cmd->add_option("--mirror", args->source.mirrors,
                    "Another <base> to try before --base-url for the archives (repeatable; verified against the "
                    "upstream manifest, which always comes from --base-url)")
        ->type_name("URL");
    cmd->add_flag("--from-cache", args->from_cache,
                  "Seed the mirror from the local download cache only (manifests and archives a fetch left "
                  "there; re-verified; no request): manifests are looked up under --mirror (else "
                  "$REDIST_MIRRORS), then --base-url; fails naming what is missing");
    cmd->add_option("--cache-dir", args->source.cache_dir,
                    "The cache for --from-cache, whose scratch/ also holds a registry push's downloads and the "
                    "copies --recompress unpacks (default: $REDIST_CACHE_DIR, else $XDG_CACHE_HOME/redist)")
        ->type_name("DIR");
    cmd->add_option("--recompress", args->recompress,
                    "Also store beside each .tar.xz/.txz archive a multi-frame zstd copy of its tar stream "
                    "(<path>.tar.zst) and record it in recompressed_<version>.json: the copy's SHA-256 and size, "
                    "the tar's SHA-256 and hash list, and the digest of the tree it unpacks to (the copy is "
                    "unpacked once, in the cache's scratch/, to learn it). Clients that read the manifest from "
                    "this mirror and trust the record's signer (--sign-key) may install the copy instead: it "
                    "decodes some ten times faster, and what it unpacks to is checked against the record before "
                    "anything is committed. Copies recorded under the same key are kept, not made again. The "
                    "manifest stays byte for byte")
        ->check(CLI::IsMember({"zstd"}))
        ->type_name("zstd");
    cmd->add_option("--sign-key", args->sign_key,
                    "With --recompress: the Ed25519 private key (PEM, `openssl genpkey -algorithm ed25519`) that "
                    "signs each release's record (recompressed_<version>.json.sig). Clients use a copy only "
                    "under a key they trust (--trusted-key): docs/fleet.md")
        ->type_name("FILE");
    cmd->add_option("--mount-from", args->mount_from,
                    "Registry target: other products under the same NAMESPACE (e.g. cuda) whose repositories a "
                    "missing blob is mounted from instead of downloaded and uploaded; comma-separated")
        ->delimiter(',')
        ->type_name("PRODUCT");
    cmd->add_option("--jobs,-j", args->jobs, "Artifacts downloaded at once (default 1)")
        ->check(CLI::Range(1u, 64u))
        ->type_name("N");
    cmd->add_option("--retries", args->source.retries,
                    "Attempts per source for transient network failures (default 4; backoff with jitter, "
                    "Retry-After honoured), for downloads and for every request to a registry target")
        ->check(CLI::Range(1, 100))
        ->type_name("N");
    cmd->add_option("--stall-timeout", args->source.stall_timeout,
                    "Seconds without a byte moving, either way, before a transfer counts as failed and is "
                    "retried: downloads, and uploads to a registry target (default 60)")
        ->check(CLI::Range(1L, 3600L))
        ->type_name("S");
    add_report_flags(*cmd, args->json, args->quiet, "Print one JSON report at the end instead of progress",
                     "Print only errors and warnings (the exit code says the rest)");
    cmd->footer(
        std::string(
            "\nWrites DIR/<product>/redist/redistrib_<version>.json (the manifest as published), each "
            "selected\nartifact under its relative_path, and index.html, so that DIR works as --base-url "
            "(served over\nHTTP or as a local directory). Every file is verified (size and SHA-256) before "
            "it is renamed into\nplace; files already present and correct are not fetched again. A release "
            "whose artifact path is not an\narchive's, or names a file another release in DIR holds with "
            "other content, is refused (exit 4).\n\n"
            "Examples:\n"
            "  redist mirror cudnn 9.27.0,9.8.0 --dest /srv/mirror --platform linux-x86_64,linux-sbsa\n"
            "  redist mirror cuda 12.9.1 --dest /srv/mirror --component cuda_nvcc,cuda_cudart --cuda 12\n"
            "  redist mirror cudnn 9.19.0 --to oci://registry.example:5000/nvidia   (then: --mirror the same "
            "URL)\n"
            "  redist mirror cudnn 9.19.0 --dest /srv/mirror --recompress zstd   (zstd copies for fleets)\n"
            "  redist mirror --from-lock app/redist.lock --from-lock tools/redist.lock --to oci-layout:/srv/oci\n\n"
            "A registry tag or layout index of a release keeps what earlier runs mirrored (other platforms,\n"
            "variants, components): mirroring adds, it never replaces. A release that has nothing for one of\n"
            "the platforms asked for is mirrored for the others, with a warning.\n\n") +
        exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_mirror(*args); }; });
}

}  // namespace redist_tools
