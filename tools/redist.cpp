// redist — fetch NVIDIA redistrib releases, verified, into a prefix.
// Each subcommand parses its options and makes one library call.
#include <chrono>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>

#include "commands/check.hpp"
#include "commands/project_commands.hpp"
#include "common/cli.hpp"
#include "common/printable.hpp"
#include "redist/cache.hpp"
#include "redist/install.hpp"
#include "redist/json_writer.hpp"
#include "redist/lockfile.hpp"
#include "redist/urls.hpp"

using namespace redist_tools;

namespace {

int cmd_versions(const std::string& product, const source_options& source, bool json) {
    auto labels = redist::list_versions(source.effective_base_url(), product, source.transfer(), source.policy());
    if (!labels.ok()) return report_error(labels.error_value());
    if (json) {
        redist::json_writer w(0);
        w.begin_array();
        for (const auto& l : *labels) w.value(l);
        w.end_array();
        std::printf("%s\n", w.str().c_str());
    } else {
        for (const auto& l : *labels) std::printf("%s\n", printable(l).c_str());
    }
    return 0;
}

struct show_args {
    std::string product;
    std::string version;
    source_options source;
    selection_options selection;
    bool json = false;
};

int cmd_show(const show_args& args) {
    if (args.source.manifest.empty() && (args.product.empty() || args.version.empty())) {
        return report_error(redist::make_error(redist::error_code::usage,
                                               "show needs PRODUCT VERSION, or --manifest PATH|URL"));
    }
    auto release = redist::resolve_release(make_release_request(args.source, args.product, args.version),
                                           args.source.transfer());
    if (!release.ok()) return report_error(release.error_value());
    const redist::manifest& m = release->parsed;

    // Filters: --component must name existing components (typos are errors).
    const std::set<std::string> wanted(args.selection.components.begin(), args.selection.components.end());
    for (const auto& name : wanted) {
        if (!m.find_component(name)) {
            std::string available;
            for (const auto& c : m.components) available += (available.empty() ? "" : ", ") + c.key;
            return report_error(redist::make_error(redist::error_code::not_found,
                                                   "no component '" + name + "' (available: " + available + ")")
                                    .with_source(release->manifest_url));
        }
    }
    std::vector<std::pair<const redist::component*, const redist::artifact*>> rows;
    for (const auto& c : m.components) {
        if (!wanted.empty() && !wanted.count(c.key)) continue;
        for (const auto& a : c.artifacts) {
            if (!args.selection.platform.empty() && a.platform != args.selection.platform) continue;
            if (args.selection.cuda && a.variant && a.cuda_major() != args.selection.cuda) continue;
            rows.emplace_back(&c, &a);
        }
    }

    if (args.json) {
        redist::json_writer w(2);
        w.begin_object();
        w.field("product", release->product);
        w.field("release_label", release->label);
        w.field("release_date", m.release_date);
        w.field("manifest_url", redist::sanitize_url(release->manifest_url));
        w.field("manifest_sha256", release->manifest_sha256);
        w.key("artifacts").begin_array();
        for (const auto& [c, a] : rows) {
            w.begin_object();
            w.field("component", a->component);
            w.field("version", c->version);
            w.field("platform", a->platform);
            w.field("variant", a->variant);
            w.field("relative_path", a->relative_path);
            w.field("url", redist::sanitize_url(redist::join_url(release->artifact_base_url, a->relative_path)));
            w.field("sha256", a->sha256);
            w.field("md5", a->md5);
            w.field("size", a->size);
            w.field("format", redist::to_string(a->format));
            w.end_object();
        }
        w.end_array();
        w.end_object();
        std::printf("%s\n", w.str().c_str());
        return 0;
    }

    std::printf("%s %s", printable(release->product).c_str(), printable(release->label).c_str());
    if (!m.release_date.empty()) std::printf(" (released %s)", printable(m.release_date).c_str());
    std::printf("\n%s\n\n", printable(redist::sanitize_url(release->manifest_url)).c_str());
    std::printf("%-28s %-14s %-16s %-8s %10s  %s\n", "COMPONENT", "VERSION", "PLATFORM", "VARIANT", "SIZE", "FORMAT");
    std::uint64_t total = 0;
    for (const auto& [c, a] : rows) {
        total += a->size;
        std::printf("%-28s %-14s %-16s %-8s %10s  %s\n", printable(a->component).c_str(), printable(c->version).c_str(),
                    printable(a->platform).c_str(), a->variant ? printable(*a->variant).c_str() : "-", human_size(a->size).c_str(),
                    redist::to_string(a->format));
    }
    std::printf("\n%zu artifacts, %s in all\n", rows.size(), human_size(total).c_str());
    return 0;
}

int cmd_verify(const std::string& prefix, bool json) {
    if (redist::commit_pending(prefix))
        std::fprintf(stderr, "%s: warning: %s: an interrupted commit is pending; the next `redist fetch` or "
                             "`redist remove` on this prefix completes it\n",
                     tool_name.c_str(), printable(prefix).c_str());
    auto problems = redist::verify_prefix(prefix);
    if (!problems.ok()) return report_error(problems.error_value());
    auto receipts = redist::read_receipts(prefix);
    if (!receipts.ok()) return report_error(receipts.error_value());
    if (receipts->empty()) {
        return report_error(redist::make_error(redist::error_code::not_found, "no redist receipts in this prefix")
                                .with_path(prefix));
    }
    if (json) {
        redist::json_writer w(2);
        w.begin_object();
        w.field("prefix", prefix);
        w.field("ok", problems->empty());
        w.key("problems").begin_array();
        for (const auto& p : *problems) {
            w.begin_object().field("component", p.component).field("path", p.path).field("problem", p.what);
            w.end_object();
        }
        w.end_array().end_object();
        std::printf("%s\n", w.str().c_str());
    } else {
        for (const auto& p : *problems)
            std::printf("%s: %s: %s\n", printable(p.component).c_str(), printable(p.path).c_str(), printable(p.what).c_str());
        std::size_t files = 0;
        for (const auto& r : *receipts) files += r.files.size();
        if (problems->empty())
            std::printf("%s: %zu components, %zu files: all match their receipts\n", printable(prefix).c_str(), receipts->size(), files);
        else
            std::printf("%s: %zu of %zu files differ from their receipts\n", printable(prefix).c_str(), problems->size(), files);
    }
    return problems->empty() ? 0 : redist::exit_code_for(redist::error_code::integrity);
}

int cmd_remove(const std::string& prefix, const std::string& product, const std::vector<std::string>& components,
               bool quiet) {
    auto lock = redist::prefix_lock::acquire(prefix, [&] {
        std::fprintf(stderr, "%s: waiting for lock on %s\n", tool_name.c_str(), printable(prefix).c_str());
    });
    if (!lock.ok()) return report_error(lock.error_value());
    // One transaction for all of them: the receipts are read once.
    std::vector<redist::component_ref> targets;
    if (components.empty()) {
        auto receipts = redist::read_receipts(lock->prefix());
        if (!receipts.ok()) return report_error(receipts.error_value());
        for (const auto& r : *receipts)
            if (product.empty() || r.product == product) targets.push_back({r.product, r.component});
    } else {
        for (const auto& component : components) targets.push_back({product, component});
    }
    auto removed = redist::remove_components(*lock, targets);
    if (!removed.ok()) return report_error(removed.error_value());
    if (!quiet)
        for (const auto& t : targets) std::printf("removed %s from %s\n", printable(t.component).c_str(), printable(prefix).c_str());
    return 0;
}

struct lock_args {
    std::string product;
    std::string version;
    source_options source;
    std::vector<std::string> platforms;  // repeatable; default: the host's
    std::vector<int> cuda;               // repeatable; default: every variant offered
    std::vector<std::string> components;
    std::string output = "redist.lock";
};

// Resolves the request once and writes every chosen artifact, per platform
// and CUDA variant, with its URL, SHA-256 and size.
int cmd_lock(const lock_args& args) {
    auto release = redist::resolve_release(make_release_request(args.source, args.product, args.version),
                                           args.source.transfer());
    if (!release.ok()) return report_error(release.error_value());
    std::vector<std::string> platforms = args.platforms;
    if (platforms.empty()) {
        auto host = redist::detect_host_platform(redist::host_probe::system());
        if (!host.ok()) return report_error(host.error_value());
        platforms.push_back(*host);
    }
    auto made = redist::make_lockfile(*release, platforms, args.cuda, args.components);
    if (!made.ok()) return report_error(made.error_value());
    const redist::lockfile& lock = *made;
    const std::string text = redist::lockfile_to_json(lock);
    if (args.output == "-") {
        std::fputs(text.c_str(), stdout);
        return 0;
    }
    const std::string tmp = args.output + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0 ||
        std::rename(tmp.c_str(), args.output.c_str()) != 0) {
        return report_error(redist::make_error(redist::error_code::filesystem, "cannot write lock file")
                                .with_path(args.output));
    }
    std::printf("locked %s %s: %zu artifacts -> %s\n", printable(lock.product).c_str(),
                printable(lock.release_label).c_str(), lock.artifacts.size(), printable(args.output).c_str());
    return 0;
}

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
    const unsigned long long scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600
                                     : unit == "d" ? 86400 : unit == "w" ? 604800 : 0;
    if (!scale) return std::nullopt;
    return std::chrono::seconds(static_cast<long long>(n * scale));
}

// "20G", "500M", "64K", "1T" (powers of 1024, an optional trailing "iB" or "B"), or plain bytes.
std::optional<std::uint64_t> parse_size(std::string text) {
    for (const char* suffix : {"iB", "B"})
        if (text.size() > std::strlen(suffix) && text.ends_with(suffix)) text.resize(text.size() - std::strlen(suffix));
    if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
    std::size_t used = 0;
    unsigned long long n = 0;
    try {
        n = std::stoull(text, &used);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    const std::string unit = text.substr(used);
    const int shift = unit.empty() ? 0 : unit == "K" || unit == "k" ? 10 : unit == "M" ? 20 : unit == "G" ? 30
                      : unit == "T" ? 40 : -1;
    if (shift < 0 || (shift && n > (UINT64_MAX >> shift))) return std::nullopt;
    return static_cast<std::uint64_t>(n) << shift;
}

int cmd_cache(const std::string& action, const std::string& cache_dir, const std::string& older_than, bool json,
              bool shared, const std::string& max_size = {}) {
    const auto root = redist::default_cache_dir(cache_dir);
    if (action == "dir" && !root.empty()) {  // no home: open() below says why
        std::printf("%s\n", root.c_str());
        return 0;
    }
    auto cache = redist::blob_cache::open(root, shared);
    if (!cache.ok()) return report_error(cache.error_value());
    if (action == "list") {
        auto entries = cache->list();
        if (!entries.ok()) return report_error(entries.error_value());
        std::uint64_t total = 0;
        redist::json_writer w(2);
        w.begin_array();
        for (const auto& e : *entries) {
            total += e.size;
            if (json) {
                w.begin_object().field("sha256", e.sha256).field("size", e.size).field("partial", e.partial);
                w.field("path", (e.partial ? cache->partial_path(e.sha256) : cache->blob_path(e.sha256)).string());
                w.end_object();
            } else {
                std::printf("%s %10s%s\n", e.sha256.c_str(), human_size(e.size).c_str(),
                            e.partial ? "  (partial download)" : "");
            }
        }
        w.end_array();
        if (json) std::printf("%s\n", w.str().c_str());
        else std::printf("%zu entries, %s in %s\n", entries->size(), human_size(total).c_str(), printable(root.string()).c_str());
        return 0;
    }
    // prune
    if (!max_size.empty()) {  // --max-size: least recently used first (cache.hpp)
        const auto limit = parse_size(max_size);
        if (!limit || !older_than.empty())
            return report_error(redist::make_error(redist::error_code::usage,
                                                   limit ? "--max-size and --older-than do not combine"
                                                         : "--max-size takes a size like 20G, 500M or 64K, not '" +
                                                               max_size + "'"));
        auto freed = cache->prune_to_size(*limit);
        if (!freed.ok()) return report_error(freed.error_value());
        std::printf("freed %s in %s\n", human_size(*freed).c_str(), printable(root.string()).c_str());
        return 0;
    }
    std::chrono::seconds age{0};
    if (!older_than.empty()) {
        auto parsed = parse_duration(older_than);
        if (!parsed)
            return report_error(redist::make_error(redist::error_code::usage,
                                                   "--older-than takes a duration like 30d, 12h, 45m or 90s, not '" +
                                                       older_than + "'"));
        age = *parsed;
    }
    auto freed = cache->prune(age);
    if (!freed.ok()) return report_error(freed.error_value());
    std::printf("freed %s in %s\n", human_size(*freed).c_str(), printable(root.string()).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // The child of `redist check` (hidden): runs before any parsing or curl setup.
    if (argc >= 2 && std::string_view(argv[1]) == "__check-probe") return check_probe_main(argc, argv);
    tool_name = "redist";
    CLI::App app{"redist: fetch NVIDIA redistrib releases (cuDNN, CUDA, cuTENSOR, ...) into a prefix.\n"
                 "Every archive is verified (size and SHA-256) before anything lands in the prefix.",
                 "redist"};
    app.set_version_flag("--version", std::string("redist ") + REDIST_VERSION);
    app.require_subcommand(1);
    app.footer(std::string("\nEnvironment:\n  REDIST_BASE_URL  default for --base-url\n"
                           "  REDIST_MIRRORS  default for --mirror (base URLs, comma- or space-separated)\n"
                           "  REDIST_CACHE_DIR, XDG_CACHE_HOME  where the download cache lives (~/.cache/redist)\n"
                           "  SSL_CERT_FILE, CURL_CA_BUNDLE  CA bundle for HTTPS\n"
                           "  http_proxy, https_proxy, no_proxy  proxies (through libcurl)\n\n") +
               exit_code_help);

    // versions
    std::string versions_product;
    source_options versions_source;
    bool versions_json = false;
    auto* versions = app.add_subcommand("versions", "List a product's releases, newest first");
    versions->add_option("PRODUCT", versions_product, "cudnn, cuda, cutensor, ...")->required();
    add_source_options(*versions, versions_source);
    versions->add_flag("--json", versions_json, "Print a JSON array");
    versions->footer(exit_code_help);

    // show
    show_args show;
    auto* show_cmd = app.add_subcommand("show", "Show the artifacts of a release (table or --json)");
    show_cmd->add_option("PRODUCT", show.product, "cudnn, cuda, ...");
    show_cmd->add_option("VERSION", show.version, "9.27.0, 9.27, 9 or latest");
    add_source_options(*show_cmd, show.source);
    add_selection_options(*show_cmd, show.selection, false);
    show_cmd->add_flag("--json", show.json, "Print one JSON object listing every (filtered) artifact");
    show_cmd->footer("\nExamples:\n  redist show cudnn 9.27 --platform linux-x86_64\n"
                     "  redist show --manifest redistrib_9.27.0.json --json\n\n" + std::string(exit_code_help));

    // fetch
    fetch_options fetch;
    auto* fetch_cmd = app.add_subcommand("fetch", "Download, verify and install components into a prefix");
    fetch_cmd->add_option("PRODUCT", fetch.product, "cudnn, cuda, ...");
    fetch_cmd->add_option("VERSION", fetch.version, "9.27.0, 9.27, 9 or latest (default)");
    add_fetch_flags(*fetch_cmd, fetch);
    fetch_cmd->footer(
        "\nThe archive's top-level directory is stripped: --prefix /opt/cudnn gives /opt/cudnn/include, "
        "/opt/cudnn/lib.\nEach archive's top-level files (LICENSE, ...) go to <prefix>/share/licenses/<component>/.\n"
        "Receipts: <prefix>/.redist/receipts/<product>/<component>.json. Re-running is a no-op when they match.\n\n"
        "Examples:\n  redist fetch cuda 12.9.1 --component cuda_nvcc,cuda_cudart --prefix /opt/cuda\n"
        "  redist fetch cudnn 9 --component cudnn,cudnn_jit --cuda 12 --prefix /opt/cudnn\n\n" +
        std::string(exit_code_help));

    // verify
    std::string verify_prefix;
    bool verify_json = false;
    auto* verify_cmd = app.add_subcommand("verify", "Check installed files against the receipts");
    verify_cmd->add_option("--prefix", verify_prefix, "The prefix to check")->required()->type_name("DIR");
    verify_cmd->add_flag("--json", verify_json, "Print a JSON report");
    verify_cmd->footer(std::string("\nExits 5 when any file is missing or changed.\n\n") + exit_code_help);

    // remove
    std::string remove_prefix;
    std::vector<std::string> remove_components;
    bool remove_quiet = false;
    auto* remove_cmd = app.add_subcommand("remove", "Remove what redist installed (all, or --component)");
    remove_cmd->add_option("--prefix", remove_prefix, "The prefix")->required()->type_name("DIR");
    remove_cmd->add_option("--component", remove_components, "Components to remove (default: all)")
        ->delimiter(',')
        ->type_name("a,b");
    remove_cmd->add_flag("--quiet,-q", remove_quiet, "Print only errors");
    std::string remove_product;
    remove_cmd->add_option("--product", remove_product, "Only this product's components")->type_name("NAME");
    remove_cmd->footer(exit_code_help);

    // cache
    std::string cache_action;
    std::string cache_dir;
    std::string cache_older_than;
    bool cache_json = false;
    auto* cache_cmd = app.add_subcommand("cache", "Manage the download cache: list, prune, dir");
    cache_cmd->add_option("ACTION", cache_action, "list | prune | dir")
        ->required()
        ->check(CLI::IsMember({"list", "prune", "dir"}));
    cache_cmd->add_option("--cache-dir", cache_dir,
                          "The cache (default: $REDIST_CACHE_DIR, else $XDG_CACHE_HOME/redist, else ~/.cache/redist)")
        ->type_name("DIR");
    cache_cmd->add_option("--older-than", cache_older_than, "prune: only entries unused for this long (30d, 12h, ...)")
        ->type_name("D");
    cache_cmd->add_flag("--json", cache_json, "list: print JSON");
    std::string cache_max_size;
    cache_cmd->add_option("--max-size", cache_max_size, "prune: evict least recently used entries down to this size (20G, 500M)")
        ->type_name("SIZE");
    bool cache_shared = false;
    cache_cmd->add_flag("--shared-cache", cache_shared, "The cache may belong to other users (see fetch --shared-cache)");
    cache_cmd->footer("\nThe cache holds verified archives by SHA-256 (blobs/sha256/<hex>), interrupted downloads\n"
                      "(<hex>.part, resumed by the next run) and per-blob locks. It is safe to share between\n"
                      "processes and to delete at any time.\n\n" + std::string(exit_code_help));

    // lock
    lock_args lock;
    auto* lock_cmd = app.add_subcommand("lock", "Resolve a request and pin it in a lock file");
    lock_cmd->add_option("PRODUCT", lock.product, "cudnn, cuda, ...")->required();
    lock_cmd->add_option("VERSION", lock.version, "9.27.0, 9.27, 9 or latest")->required();
    add_source_options(*lock_cmd, lock.source);
    lock_cmd->add_option("--platform", lock.platforms, "Platforms to lock (repeatable; default: this machine's)")
        ->type_name("P");
    lock_cmd->add_option("--cuda", lock.cuda, "CUDA majors to lock (repeatable; default: every variant offered)")
        ->type_name("N");
    lock_cmd->add_option("--component", lock.components, "Components (comma-separated; default: all)")
        ->delimiter(',')
        ->type_name("a,b");
    lock_cmd->add_option("-o,--output", lock.output, "Where to write it ('-' for stdout; default redist.lock)")
        ->type_name("FILE");
    lock_cmd->footer("\nInstall it with: redist fetch --locked redist.lock --prefix DIR [--platform P] [--cuda N]\n"
                     "That never re-resolves; if the upstream manifest changed it warns, and any locked artifact\n"
                     "that changed upstream is a hard error (exit 5).\n\n" + std::string(exit_code_help));

    command_runner selected;
    add_env_command(app, selected);
    add_mirror_command(app, selected);
    add_check_command(app, selected);
    add_sbom_command(app, selected);
    add_diff_command(app, selected);
    add_outdated_command(app, selected);
    add_init_command(app, selected);
    add_sync_command(app, selected);

    return run_tool(app, argc, argv, [&]() -> int {
        if (selected) return selected();
        if (*versions) return cmd_versions(versions_product, versions_source, versions_json);
        if (*show_cmd) return cmd_show(show);
        if (*fetch_cmd) {
            if (fetch.source.manifest.empty() && fetch.product.empty() && fetch.locked.empty())
                return report_error(redist::make_error(redist::error_code::usage,
                                                       "fetch needs PRODUCT [VERSION], or --manifest PATH|URL"));
            return run_fetch(fetch);
        }
        if (*lock_cmd) return cmd_lock(lock);
        if (*cache_cmd) return cmd_cache(cache_action, cache_dir, cache_older_than, cache_json, cache_shared, cache_max_size);
        if (*verify_cmd) return cmd_verify(verify_prefix, verify_json);
        if (*remove_cmd) return cmd_remove(remove_prefix, remove_product, remove_components, remove_quiet);
        return 2;
    });
}
