// `redist cache list|prune|clean|dir` — the download cache: verified archives by
// SHA-256, interrupted downloads and per-blob locks.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "commands/commands.hpp"
#include "common/printable.hpp"
#include "redist/cache.hpp"
#include "redist/json_writer.hpp"

namespace redist_tools {

namespace {

struct cache_args {
    std::string action;
    std::string cache_dir;
    std::string older_than;
    bool json = false;
    bool quiet = false;  // prune, clean: no "freed" line
    bool shared = false;
    bool dry_run = false;                   // clean --dry-run
    std::optional<std::uint64_t> max_size;  // prune --max-size
};

// "30d", "12h", "45m", "90s" or plain seconds.
std::optional<std::chrono::seconds> parse_duration(const std::string& text) {
    if (text.empty()) return std::nullopt;
    std::size_t used = 0;
    unsigned long long n = 0;
    try {
        n = std::stoull(text, &used);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    const std::string unit = text.substr(used);
    const unsigned long long scale = unit.empty() || unit == "s" ? 1
                                     : unit == "m"               ? 60
                                     : unit == "h"               ? 3600
                                     : unit == "d"               ? 86400
                                     : unit == "w"               ? 604800
                                                                 : 0;
    if (!scale) return std::nullopt;
    return std::chrono::seconds(static_cast<long long>(n * scale));
}

int list_cache(const redist::blob_cache& cache, const std::filesystem::path& root, bool json) {
    auto entries = cache.list();
    if (!entries.ok()) return report_error(entries.error_value());
    std::uint64_t total = 0;
    redist::json_writer w(2);
    w.begin_array();
    for (const auto& e : *entries) {
        total += e.disk_bytes;
        if (json) {
            w.begin_object().field("sha256", e.sha256).field("size", e.size).field("disk_bytes", e.disk_bytes);
            w.field("partial", e.partial);
            w.field("path", (e.partial ? cache.partial_path(e.sha256) : cache.blob_path(e.sha256)).string());
            w.end_object();
        } else {
            std::printf("%s %10s%s\n", e.sha256.c_str(), human_size(e.disk_bytes).c_str(),
                        e.partial ? "  (partial download)" : "");
        }
    }
    w.end_array();
    if (json) std::printf("%s\n", w.str().c_str());
    else
        std::printf("%zu entries, %s in %s\n", entries->size(), human_size(total).c_str(),
                    printable(root.string()).c_str());
    return 0;
}

// clean --dry-run: what clean would free, removing nothing.
int preview_clean(const redist::blob_cache& cache, const std::filesystem::path& root, bool quiet) {
    auto entries = cache.list();
    if (!entries.ok()) return report_error(entries.error_value());
    std::uint64_t total = 0;
    for (const auto& e : *entries) total += e.size;
    if (!quiet)
        std::printf("would free %s (%zu %s) in %s\n", human_size(total).c_str(), entries->size(),
                    entries->size() == 1 ? "entry" : "entries", printable(root.string()).c_str());
    return 0;
}

// clean: everything (what prune removes with no age limit); prune: by
// --max-size (least recently used entries first, blob_cache::prune_to_size)
// or by --older-than. Then "freed 1.2 GiB in DIR", unless --quiet.
int free_space(const redist::blob_cache& cache, const std::filesystem::path& root, const cache_args& args) {
    redist::result<std::uint64_t> freed = std::uint64_t{0};
    if (args.action == "clean") freed = cache.prune(std::chrono::seconds(0));
    else if (args.max_size) freed = cache.prune_to_size(*args.max_size);
    else if (const auto age = parse_duration(args.older_than)) freed = cache.prune(*age);
    else
        return usage_error("--older-than takes a duration like 30d, 12h, 45m or 90s, not '" +
                           printable(args.older_than) + "'");
    if (!freed.ok()) return report_error(freed.error_value());
    if (!args.quiet) std::printf("freed %s in %s\n", human_size(*freed).c_str(), printable(root.string()).c_str());
    return 0;
}

int run_cache(const cache_args& args) {
    if (args.action == "prune" && args.older_than.empty() && !args.max_size)
        return usage_error(
            "cache prune needs a criterion: --older-than DURATION (30d, 12h) or --max-size SIZE (20G); `redist cache "
            "clean` removes everything");
    if (args.dry_run && args.action != "clean") return usage_error("--dry-run goes with cache clean");
    const auto root = effective_cache_dir(args.cache_dir);
    if (args.action == "dir" && !root.empty()) {  // no home: open() below says why
        std::printf("%s\n", root.c_str());
        return 0;
    }
    auto cache = redist::blob_cache::open(root, args.shared);
    if (!cache.ok()) return report_error(cache.error_value());
    if (args.action == "list") return list_cache(*cache, root, args.json);
    if (args.action == "clean" && args.dry_run) return preview_clean(*cache, root, args.quiet);
    if (args.action == "prune" && args.max_size && !args.older_than.empty())
        return usage_error("--max-size and --older-than do not combine");
    return free_space(*cache, root, args);
}

}  // namespace

void add_cache_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<cache_args>();
    auto* cmd = app.add_subcommand("cache", "Manage the download cache: list, prune, clean, dir");
    cmd->add_option("ACTION", args->action,
                    "list | prune (needs --older-than or --max-size) | clean (removes everything) | dir")
        ->required()
        ->check(CLI::IsMember({"list", "prune", "clean", "dir"}));
    cmd->add_option("--cache-dir", args->cache_dir,
                    "The cache (default: $REDIST_CACHE_DIR, else $XDG_CACHE_HOME/redist, else ~/.cache/redist)")
        ->type_name("DIR");
    cmd->add_option("--older-than", args->older_than, "prune: only entries unused for this long (30d, 12h, ...)")
        ->type_name("D");
    add_report_flags(*cmd, args->json, args->quiet, "list: print JSON",
                     "prune, clean: print only errors (list and dir print what was asked)");
    cmd->add_option("--max-size", args->max_size,
                    "prune: evict least recently used entries until the cache is at most this big (20G, 500MiB)")
        ->transform(CLI::AsSizeValue(false).description(""))
        ->type_name("SIZE");
    cmd->add_flag("--dry-run", args->dry_run, "clean: say what would be freed, remove nothing");
    cmd->add_flag("--shared-cache", args->shared, "The cache may belong to other users (see fetch --shared-cache)");
    cmd->footer(
        "\nThe cache holds verified archives by SHA-256 (blobs/sha256/<hex>), interrupted downloads\n"
        "(<hex>.part, resumed by the next run), their extracted trees (trees/<hex>) and per-blob\n"
        "locks. list shows each archive with its tree as du -s counts them (blocks on disk, hard\n"
        "links once; --json: disk_bytes, and size, the archive's). It is safe to share between\n"
        "processes and to delete at any time. prune removes only what its criterion names; clean\n"
        "removes everything (--dry-run: only says how much). Both also remove what killed runs left\n"
        "(half-stored trees, history temp files) once no live process can own it; never through a symlink.\n\n"
        "Examples:\n  redist cache list\n  redist cache prune --older-than 30d\n  redist cache prune --max-size 20G\n  "
        "redist cache clean --dry-run\n  du -sh \"$(redist cache dir)\"\n\n" +
        exit_code_help);
    cmd->final_callback([args, &selected] { selected = [args] { return run_cache(*args); }; });
}

}  // namespace redist_tools
