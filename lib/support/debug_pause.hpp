// Test seam for the crash-safety tests (internal to the library).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace redist {

// REDIST_DEBUG_PAUSE=<point> makes the process print
// "redist-debug: paused at <point>" on stderr and sleep, so that a test can
// SIGKILL it at exactly that point. Points: mid-download (half the archive
// received, hashed and unpacked), after-unpack, before-commit, mid-commit
// (journal written, half of the renames done), layout-index (an image
// layout's index.json read, under its lock, before the rewrite). The pause lasts 120 s, or
// REDIST_DEBUG_PAUSE_SECONDS (1 to 600), after which the process goes on, so
// that a test can watch another process meet it there (verify waiting for a
// commit). Unset: costs one getenv.
inline void debug_pause(const char* point) {
    static const char* const wanted = std::getenv("REDIST_DEBUG_PAUSE");
    if (!wanted || std::strcmp(wanted, point) != 0) return;
    long seconds = 120;
    if (const char* text = std::getenv("REDIST_DEBUG_PAUSE_SECONDS")) {
        const long asked = std::strtol(text, nullptr, 10);
        if (asked >= 1 && asked <= 600) seconds = asked;
    }
    std::fprintf(stderr, "redist-debug: paused at %s\n", point);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
}

// REDIST_DEBUG_FAIL=<point> makes the step at that point fail as if the disk
// were full (ENOSPC), so that a test can check what a failed commit leaves.
// Points: journal-write (writing the commit journal), commit-mkdir (the
// commit's first new directory), mid-commit (the rename half-way through the
// moves, after others were done). Unset: costs one getenv.
inline bool debug_fail(const char* point) {
    static const char* const wanted = std::getenv("REDIST_DEBUG_FAIL");
    return wanted && std::strcmp(wanted, point) == 0;
}

}  // namespace redist
