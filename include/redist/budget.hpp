// redist/budget.hpp — the limits one run shares, and what it measured.
//
// One install runs several artifacts at once. Their xz blocks decode, and
// their files are written, on one pool of worker threads, and one memory
// gate bounds the decoders' buffers (lib/support/budget.hpp, lib/archive/xz_decode.hpp);
// run_limits sizes both.
//
// Defaults (a field left at 0):
//   threads    = the CPUs this process may run on (sched_getaffinity), further
//                capped by a cgroup v2 cpu.max quota when there is one.
//   max_memory = clamp(available / 8, 256 MiB, 1 GiB), where available is the
//                smaller of physical RAM and the cgroup v2 memory.max. It
//                covers the decoders' multi-threading memory, the writers'
//                buffers and the queues between stages; it is a target, not a
//                hard cap: a block that does not fit still decodes when
//                nothing else is held, and a block without recorded sizes
//                streams on its artifact's own thread (its dictionary, 8 MiB
//                for xz -6, up to the budget, is not counted).
//
// Process-wide side effect: the first budget of 4 threads or more fixes glibc's malloc mmap
// threshold at 256 KiB (mallopt M_MMAP_THRESHOLD), so that freed large
// buffers leave the process instead of staying in per-thread arenas, which
// glibc's self-raising default lets them do (250 MiB above a 1 GiB budget on
// 16 cores). It is left alone when MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES
// (glibc.malloc.mmap_threshold) set one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "redist/error.hpp"
#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

struct run_limits {
    unsigned threads = 0;          // 0 = the default above
    std::uint64_t max_memory = 0;  // bytes; 0 = the default above
};

// Per-stage time of one run, summed over the artifacts (and the threads of a
// stage). busy: working; wait: blocked on the stage before or after it.
struct stage_time {
    std::string stage;  // "transfer" (busy: the archive hash), "decoder", "extractor", "writers"
    double busy_seconds = 0;
    double wait_seconds = 0;
    // transfer: bytes received; decoder: bytes decoded; extractor: file data
    // it copied for the writers (data inside a decoded xz block is passed on
    // without a copy, so with a pool this is mostly 0 for .tar.xz).
    std::uint64_t bytes = 0;
};

// When a step of the run ended, in seconds since the run's budget was made:
// the first and last artifact to get there, and how many did.
struct profile_mark {
    std::string event;  // e.g. "xz block began", "downloaded", "decoded", "extracted", "unpacked", "committed"
    double first_seconds = 0;
    double last_seconds = 0;
    unsigned count = 0;
};

struct run_profile {
    std::vector<stage_time> stages;   // stages that did any work, in pipeline order
    std::vector<profile_mark> marks;  // in the order they were first reached
    unsigned threads = 0;             // the run's thread budget
    std::uint64_t max_memory = 0;     // the run's memory budget
    std::uint64_t peak_rss = 0;       // the process's peak resident set (bytes; 0 = unknown)
};

class run_budget;  // lib/support/budget.hpp: opaque to users of the library

// A budget for one run (an install): pass it in install_request::budget (or
// unpack_options::budget) and every artifact of the run shares it.
// Outcomes: ok | internal (the writer threads could not start).
result<std::shared_ptr<run_budget>> make_run_budget(const run_limits& limits = {});

// What the run measured so far (call it after install() for the whole run).
run_profile profile_of(const run_budget& budget);

REDIST_API_END
}  // namespace redist
