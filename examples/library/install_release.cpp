// install_release — resolve a release and install it into a prefix: the
// library's `redist fetch`, in one program.
//
//   install_release BASE_URL PRODUCT VERSION PREFIX
//   e.g. install_release https://developer.download.nvidia.com/compute cudnn 9 /opt/cudnn
//
// Exit status: 0, 2 for usage, otherwise redist::exit_code_for() of the error.
#include <curl/curl.h>

#include <cstdio>
#include <string>

#include <redist/install.hpp>

namespace {

// Every error names the URL, file or JSON path it is about, in one line.
int fail(const redist::error& e) {
    std::fprintf(stderr, "install_release: %s\n", e.describe().c_str());
    return redist::exit_code_for(e.code);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: install_release BASE_URL PRODUCT VERSION PREFIX\n");
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);  // once per program: the library never calls it

    // 1. "9", "9.27", "9.27.0" or "latest" to a release, and its manifest.
    //    Requests are plain structs: name the fields you set, the rest keep
    //    their defaults (new fields do not break this code).
    const redist::release_request request{.product = argv[2], .version_spec = argv[3], .base_url = argv[1]};
    auto release = redist::resolve_release(request, redist::transfer_options{});
    if (!release.ok()) return fail(release.error_value());

    // 2. The artifacts for this machine; the newest CUDA variant when there are variants.
    auto platform = redist::detect_host_platform(redist::host_probe::system());
    if (!platform.ok()) return fail(platform.error_value());
    auto selected = redist::select_artifacts(release->parsed, {.platform = *platform, .cuda_major = std::nullopt});
    if (!selected.ok()) return fail(selected.error_value());

    // 3. Install: download, verify (size and SHA-256 from the manifest),
    //    unpack into a stage and commit, all or nothing.
    redist::release_plan plan{.product = release->product,
                              .label = release->label,
                              .artifact_base_url = release->artifact_base_url,
                              .artifacts = selected->artifacts};
    for (const auto& c : release->parsed.components) plan.component_versions[c.key] = c.version;
    redist::install_request install{.prefix = argv[4], .releases = {std::move(plan)}};
    install.sources.cache_dir = redist::default_cache_dir();  // as the tools: ~/.cache/redist
    auto report = redist::install(install);
    if (!report.ok()) return fail(report.error_value());

    for (const auto& c : report->releases.front().components)
        std::printf("%s %s: %zu files%s\n", c.component.c_str(), c.version.c_str(), c.files,
                    c.unchanged ? " (already installed)" : "");
    curl_global_cleanup();
    return 0;
}
