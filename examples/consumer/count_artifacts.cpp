// count_artifacts — parses a redistrib manifest with the installed redist
// library and prints how many artifacts it lists.
//
//   count_artifacts MANIFEST.json
//   -> "<release_label>: <N> components, <M> artifacts"
//
// Exit status: 0, 2 for usage, otherwise redist::exit_code_for() of the error.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <redist/error.hpp>
#include <redist/manifest.hpp>

int main(int argc, char* argv[]) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: count_artifacts MANIFEST.json\n");
        return 2;
    }
    std::ifstream in(argv[1], std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "count_artifacts: cannot open %s\n", argv[1]);
        return redist::exit_code_for(redist::error_code::filesystem);
    }
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};

    // The library never throws or prints: errors come back in the result.
    const auto parsed = redist::parse_manifest(text, argv[1]);
    if (!parsed) {
        std::fprintf(stderr, "count_artifacts: %s\n", parsed.error_value().describe().c_str());
        return redist::exit_code_for(parsed.error_value().code);
    }
    const redist::manifest& m = parsed.value();
    std::printf("%s: %zu components, %zu artifacts\n", m.release_label.c_str(), m.components.size(),
                m.artifact_count());
    return 0;
}
