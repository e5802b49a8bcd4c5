// The library end to end: resolve a version, pick artifacts, install them
// with a progress callback, and handle errors.
//
//   fetch_cudnn BASE_URL VERSION PREFIX      e.g. fetch_cudnn file:///tmp/redist-demo/mirror 9 /tmp/cudnn
#include <curl/curl.h>

#include <cstdio>
#include <mutex>

#include "redist/install.hpp"
#include "redist/platform.hpp"
#include "redist/select.hpp"

namespace {

// Every error carries a code (for the exit status) and a one-line description
// naming the URL, file or JSON path it is about.
int fail(const redist::error& e) {
    std::fprintf(stderr, "fetch_cudnn: %s\n", e.describe().c_str());
    return redist::exit_code_for(e.code);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: fetch_cudnn BASE_URL VERSION PREFIX\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);  // once per program; the library never does it

    // 1. Resolve "9" / "9.27" / "latest" to a release and parse its manifest.
    redist::release_request release_req;
    release_req.product = "cudnn";
    release_req.version_spec = argv[2];
    release_req.base_url = argv[1];
    auto release = redist::resolve_release(release_req, redist::transfer_options{});
    if (!release.ok()) return fail(release.error_value());

    // 2. Pick the artifacts for this machine and the newest CUDA variant.
    auto platform = redist::detect_host_platform(redist::host_probe::system());
    if (!platform.ok()) return fail(platform.error_value());
    auto selection = redist::select_artifacts(release->parsed, {*platform, std::nullopt, {"cudnn"}});
    if (!selection.ok()) return fail(selection.error_value());
    std::printf("cudnn %s for %s", release->label.c_str(), platform->c_str());
    if (selection->cuda_major) std::printf(" (%s)", redist::variant_list(selection->artifacts).c_str());
    std::printf("\n");

    // 3. Install, with an observer (called from worker threads).
    struct printer : redist::run_observer {
        std::mutex print_mutex;
        void on_progress(const redist::progress_event& e) override {
            std::lock_guard lock(print_mutex);
            std::printf("  %s: %s %llu/%llu bytes\n", e.component.c_str(), redist::to_string(e.stage),
                        static_cast<unsigned long long>(e.bytes_done), static_cast<unsigned long long>(e.bytes_total));
        }
    } observer;
    redist::install_request req;
    req.prefix = argv[3];
    redist::release_plan plan{release->product, release->label, release->artifact_base_url, selection->artifacts, {}};
    for (const auto& c : release->parsed.components) plan.component_versions[c.key] = c.version;
    req.releases.push_back(std::move(plan));
    req.sources.cache_dir = std::nullopt;  // no cache: always download
    req.observer = &observer;
    auto report = redist::install(req);
    if (!report.ok()) return fail(report.error_value());

    for (const auto& c : report->releases.front().components)
        std::printf("%s %s: %zu files %s\n", c.component.c_str(), c.version.c_str(), c.files,
                    c.unchanged ? "(already installed)" : "installed");
    curl_global_cleanup();
    return 0;
}
