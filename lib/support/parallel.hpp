// Internal: run numbered jobs on a few threads, each job once.
//
// fetch (one job per artifact), mirror (one per file) and verify (one per
// 8 MiB piece) each had their own copy of this loop; one of them did not
// survive a thread that could not be started.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <system_error>
#include <thread>
#include <vector>

namespace redist {

// Calls job(i) for every i in [0, count), each at most once, on up to
// `threads` threads: the calling thread and threads - 1 helpers. Each thread
// takes the next index when it finishes one, so one long job does not hold
// back the others. Once *stop (when given) is true no further index is handed
// out; the jobs already running finish. A helper that cannot be started
// (std::system_error) leaves its share to the threads that run. Returns when
// every thread has ended. A job must not throw: it reports through its own
// slot, indexed by i.
template <class Job>
void for_each_index(std::size_t count, unsigned threads, const std::atomic<bool>* stop, const Job& job) {
    std::atomic<std::size_t> next{0};
    const auto work = [&] {
        for (std::size_t i = next++; i < count && !(stop != nullptr && stop->load()); i = next++) job(i);
    };
    // No job starts no thread; the calling thread is one of `threads`.
    const std::size_t helpers = count == 0 ? 0 : std::min<std::size_t>(std::max(threads, 1u), count) - 1;
    std::vector<std::thread> pool;
    pool.reserve(helpers);
    for (std::size_t t = 0; t < helpers; ++t) {
        try {
            pool.emplace_back(work);
        } catch (const std::system_error&) {
            break;
        }
    }
    work();
    for (auto& t : pool) t.join();
}

}  // namespace redist
