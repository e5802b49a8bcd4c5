// sync_project — install what a project file (redist.toml) names, for this
// machine's platform, into the project's prefix: the library's `redist sync`
// in one program. It writes redist.lock beside the project file and keeps
// what a previous lock pins.
//
//   sync_project PROJECT_DIR      (reads PROJECT_DIR/redist.toml)
//
// Exit status: 0, 2 for usage, otherwise redist::exit_code_for() of the error.
#include <curl/curl.h>

#include <cstdio>
#include <filesystem>

#include <redist/platform.hpp>
#include <redist/sync.hpp>

namespace fs = std::filesystem;

namespace {

int fail(const redist::error& e) {
    std::fprintf(stderr, "sync_project: %s\n", e.describe().c_str());
    return redist::exit_code_for(e.code);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: sync_project PROJECT_DIR\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);

    // 1. Open the project: the file is read bounded and parsed strictly, its
    //    local sources stay inside its directory; its lock is beside it.
    auto project = redist::open_project({.file = fs::absolute(argv[1]) / "redist.toml"});
    if (!project.ok()) return fail(project.error_value());

    // 2. Lock it (a locked product keeps its pins; the lock is rewritten only
    //    when it changed), then install what it pins for this machine's
    //    platform in one transaction. The prefix must lie inside the
    //    project's directory; components the project no longer names leave it.
    redist::sync_request request{.lock = {.mode = redist::lock_mode::update}};
    request.lock.resolve.detected_cuda = redist::detect_cuda(redist::host_probe::system());
    auto synced = redist::sync_project(*project, request);
    if (!synced.ok()) return fail(synced.error_value());

    for (const auto& note : synced->lock.notes) std::printf("note: %s\n", note.c_str());
    for (const auto& release : synced->report.releases)
        for (const auto& c : release.components)
            std::printf("%s %s %s: %zu files%s\n", release.product.c_str(), release.release_label.c_str(),
                        c.component.c_str(), c.files, c.unchanged ? " (already installed)" : "");
    for (const auto& r : synced->report.removed) std::printf("removed %s %s\n", r.product.c_str(), r.component.c_str());
    curl_global_cleanup();
    return 0;
}
