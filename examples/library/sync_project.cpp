// sync_project — install what a project file (redist.toml) names, for this
// machine's platform, into the project's prefix: the library's `redist sync`
// in one program. It writes redist.lock beside the project file and keeps
// what a previous lock pins.
//
//   sync_project PROJECT_DIR      (reads PROJECT_DIR/redist.toml)
//
// Exit status: 0, 2 for usage, otherwise redist::exit_code_for() of the error.
#include <curl/curl.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include <redist/atomic_write.hpp>
#include <redist/sync.hpp>
#include <redist/urls.hpp>

namespace fs = std::filesystem;

namespace {

int fail(const redist::error& e) {
    std::fprintf(stderr, "sync_project: %s\n", e.describe().c_str());
    return redist::exit_code_for(e.code);
}

// The project file is input: read it as the tools do (a regular file, bounded),
// parse it strictly, and keep its prefix and local sources inside its directory.
redist::result<redist::project_file> open_project(const fs::path& file) {
    REDIST_TRY(const std::string text,
               redist::read_project_document(file, redist::kMaxProjectFileBytes, "project file"));
    REDIST_TRY(redist::project_file project, redist::parse_project(text, file));
    REDIST_TRY_VOID(redist::check_project_prefix(project));
    return project;
}

// The lock so far, if there is one; its URLs must lie under the project's own sources.
redist::result<std::optional<redist::project_lock>> read_lock(const fs::path& path,
                                                              const redist::project_file& project) {
    if (!fs::exists(path)) return std::optional<redist::project_lock>();
    REDIST_TRY(const std::string text, redist::read_project_document(path, redist::kMaxLockFileBytes, "lock file"));
    REDIST_TRY(redist::project_lock lock, redist::project_lock_from_json(text, path.string()));
    REDIST_TRY(const auto roots, redist::project_local_roots(project));
    REDIST_TRY_VOID(redist::check_lock_sources(lock, path.string(), roots));
    return std::optional<redist::project_lock>(std::move(lock));
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: sync_project PROJECT_DIR\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const fs::path dir = fs::absolute(argv[1]);
    auto project = open_project(dir / "redist.toml");
    if (!project.ok()) return fail(project.error_value());
    const fs::path lock_path = dir / "redist.lock";
    auto previous = read_lock(lock_path, *project);
    if (!previous.ok()) return fail(previous.error_value());

    // 1. Resolve every product (a locked one keeps its pins) into a project lock.
    redist::project_resolve_options resolve;
    resolve.base_url = project->base_url.empty() ? std::string(redist::default_base_url) : project->base_url;
    resolve.sources.mirrors = project->mirrors;
    resolve.previous = previous->has_value() ? &**previous : nullptr;
    resolve.detected_cuda = redist::detect_cuda(redist::host_probe::system());
    auto resolved = redist::resolve_project(*project, resolve);
    if (!resolved.ok()) return fail(resolved.error_value());
    for (const auto& note : resolved->notes) std::printf("note: %s\n", note.c_str());
    const std::string lock_text = redist::project_lock_to_json(resolved->lock);
    if (auto written = redist::atomic_write(lock_path, lock_text, redist::durability::full); !written.ok())
        return fail(written.error_value());

    // 2. This machine's platform, which the project must list.
    auto platform = redist::detect_host_platform(redist::host_probe::system());
    if (!platform.ok()) return fail(platform.error_value());
    if (std::ranges::find(project->platforms, *platform) == project->platforms.end())
        return fail(
            redist::make_error(redist::error_code::usage, "platform " + *platform + " is not in project.platforms"));

    // 3. Install what the lock pins for it, in one transaction; components the
    //    project no longer names leave the prefix (keep_unlisted = false).
    auto plans = redist::plans_for_platform(resolved->lock, *platform);
    if (!plans.ok()) return fail(plans.error_value());
    redist::install_request install{.prefix = project->prefix,
                                    .releases = std::move(plans).value(),
                                    .exclude = project->exclude,
                                    .keep_unlisted = false};
    install.sources = resolve.sources;
    auto report = redist::install(install);
    if (!report.ok()) return fail(report.error_value());

    for (const auto& release : report->releases)
        for (const auto& c : release.components)
            std::printf("%s %s %s: %zu files%s\n", release.product.c_str(), release.release_label.c_str(),
                        c.component.c_str(), c.files, c.unchanged ? " (already installed)" : "");
    for (const auto& r : report->removed) std::printf("removed %s %s\n", r.product.c_str(), r.component.c_str());
    curl_global_cleanup();
    return 0;
}
