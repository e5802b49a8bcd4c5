// redist-check-probe — the child process of `redist check` (see
// lib/features/check_probe.cpp for the protocol). A separate, tiny executable because
// it starts on every check: it links only libc, libstdc++ and libdl, so it
// starts in a millisecond where `redist __check-probe` (which works too)
// first loads curl, TLS and archive libraries it does not need.
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "redist/check.hpp"

int main(int argc, char** argv) {
    int first = 1;
    if (argc > 1 && std::string_view(argv[1]) == "__check-probe") first = 2;
    std::vector<std::string> args(argv + first, argv + argc);
    return redist::run_check_probe(args, [](std::string_view line) {
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);  // a crash in the next dlopen must not lose this line
    });
}
