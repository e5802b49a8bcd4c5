// list_artifacts — prints the artifacts of a redistrib manifest.
//
//   list_artifacts MANIFEST.json [platform]
//
// One line per artifact: component, platform, variant (or "-"), size in
// bytes, relative_path. With a platform, only what select_artifacts() would
// install there (newest CUDA variant) is listed.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "redist/manifest.hpp"
#include "redist/select.hpp"

namespace {

void print(const redist::artifact& a) {
    std::printf("%s\t%s\t%s\t%llu\t%s\n", a.component.c_str(), a.platform.c_str(), a.variant ? a.variant->c_str() : "-",
                static_cast<unsigned long long>(a.size), a.relative_path.c_str());
}

int fail(const redist::error& e) {
    std::fprintf(stderr, "list_artifacts: %s\n", e.describe().c_str());
    return redist::exit_code_for(e.code);
}

}  // namespace

int main(int argc, char* argv[]) {
    if (argc < 2 || argc > 3) {
        std::fprintf(stderr, "usage: list_artifacts MANIFEST.json [platform]\n");
        return 2;
    }
    const std::string path = argv[1];
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    if (!in) return fail(redist::make_error(redist::error_code::filesystem, "cannot open manifest").with_path(path));
    // An empty file sets failbit on `text`; the parser reports it as bad JSON.
    text << in.rdbuf();
    if (in.bad())
        return fail(redist::make_error(redist::error_code::filesystem, "cannot read manifest").with_path(path));
    const auto parsed = redist::parse_manifest(text.str(), path);
    if (!parsed) return fail(parsed.error_value());
    const redist::manifest& m = parsed.value();

    if (argc == 2) {
        for (const auto& c : m.components) {
            for (const auto& a : c.artifacts) print(a);
        }
        return 0;
    }

    redist::selection_request request;
    request.platform = argv[2];
    const auto chosen = redist::select_artifacts(m, request);
    if (!chosen) return fail(chosen.error_value());
    if (chosen->cuda_major_defaulted) {
        std::fprintf(stderr, "list_artifacts: using %s (newest available)\n",
                     redist::variant_list(chosen->artifacts).c_str());
    }
    for (const auto& a : chosen->artifacts) print(a);
    return 0;
}
