// Test seams for the crash-safety and reliability tests (internal to the
// library). They exist only in a build configured with REDIST_TEST_HOOKS=ON
// (the default when the test suite is built, CMakeLists.txt): a release build
// (scripts/package.sh) compiles every seam to nothing, so that no environment
// variable can pause, fail or reconfigure a shipped redist, and none of their
// names is in its binaries.
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
// layout's index.json read, under its lock, before the rewrite), copy-tree
// (`redist mirror --recompress` unpacked a copy it made in its scratch
// directory, before removing it). The pause lasts 120 s, or
// REDIST_DEBUG_PAUSE_SECONDS (1 to 600), after which the process goes on, so
// that a test can watch another process meet it there (verify waiting for a
// commit). Unset: costs one getenv.
#if REDIST_TEST_HOOKS
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

// The value of a test-only environment override (REDIST_TEST_FREE_BYTES,
// REDIST_HASH_THREAD), or nullptr. A macro so that a release build does not
// even hold the variable's name.
#define REDIST_TEST_OVERRIDE(name) std::getenv(name)
#else
inline void debug_pause(const char* /*point*/) {}
inline bool debug_fail(const char* /*point*/) { return false; }
#define REDIST_TEST_OVERRIDE(name) static_cast<const char*>(nullptr)
#endif

}  // namespace redist
