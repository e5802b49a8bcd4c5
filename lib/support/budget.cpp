// budget.cpp — see budget.hpp.
#include "support/budget.hpp"

#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

#include "support/posix_file.hpp"

namespace redist {
namespace {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kMinMemory = 256 * kMiB;
constexpr std::uint64_t kMaxDefaultMemory = 1024 * kMiB;
constexpr std::uint64_t kMinDecoderMemory = 32 * kMiB;
constexpr std::uint64_t kProcessBaseline = 48 * kMiB;
constexpr unsigned kMinThreadsForMmapThreshold = 4;

// "/sys/fs/cgroup/<our cgroup v2 path>/<file>", or "" without cgroup v2.
std::string cgroup_file(const char* name) {
    auto self = read_file("/proc/self/cgroup", std::uint64_t{64} << 10, follow_links::yes);
    if (!self) return {};
    std::istringstream lines(*self);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind("0::", 0) != 0) continue;
        std::string path = line.substr(3);
        if (path.find("..") != std::string::npos) return {};
        return "/sys/fs/cgroup" + (path == "/" ? std::string() : path) + "/" + name;
    }
    return {};
}

// First line of a cgroup file, or "" when absent.
std::string cgroup_value(const char* name) {
    const std::string path = cgroup_file(name);
    if (path.empty()) return {};
    auto text = read_file(path, 4096, follow_links::yes);
    if (!text) return {};
    return text->substr(0, text->find('\n'));
}

unsigned machine_threads() {
    unsigned n = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = static_cast<unsigned>(CPU_COUNT(&set));
    if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());
    // cpu.max: "<quota> <period>" or "max <period>".
    std::istringstream quota(cgroup_value("cpu.max"));
    std::string q;
    double period = 0;
    if (quota >> q >> period && q != "max" && period > 0) {
        try {
            const double cpus = std::ceil(std::stod(q) / period);
            if (cpus >= 1 && cpus < n) n = static_cast<unsigned>(cpus);
        } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): unreadable quota, keep n
        }
    }
    return n;
}

std::uint64_t machine_memory() {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page = ::sysconf(_SC_PAGESIZE);
    std::uint64_t ram = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
                                              : 0;
    const std::string limit = cgroup_value("memory.max");
    if (!limit.empty() && limit != "max") {
        try {
            const std::uint64_t cg = std::stoull(limit);
            if (cg > 0 && (ram == 0 || cg < ram)) ram = cg;
        } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): unreadable limit, keep RAM
        }
    }
    if (ram == 0) return kMinMemory;
    return std::clamp<std::uint64_t>(ram / 8, kMinMemory, kMaxDefaultMemory);
}

std::uint64_t peak_rss() {
    auto status = read_file("/proc/self/status", std::uint64_t{64} << 10, follow_links::yes);
    if (!status) return 0;
    const auto pos = status->find("VmHWM:");
    if (pos == std::string::npos) return 0;
    std::istringstream in(status->substr(pos + 6));
    std::uint64_t kib = 0;
    in >> kib;
    return kib * 1024;
}

// glibc's malloc, tuned once per process for the first run's thread count,
// and not at all when the environment chose (MALLOC_*_ or GLIBC_TUNABLES).
// - 4 threads or more: glibc raises its mmap threshold each time a large
//   mapped block is freed (up to 32 MiB), after which the run's 1 MiB queue
//   chunks and pieces come from per-thread arenas, and their freed memory
//   stays resident there: with 16 threads and 14 archives that was 250 MiB
//   of RSS above the budget (1.10 GB against 0.82-0.89 GB with a fixed
//   threshold, same wall time). A fixed 256 KiB threshold returns every
//   large buffer to the system when it is freed.
// - Fewer: few arenas, so the opposite trade. The same chunks, freed and
//   allocated again all the time, were mapped afresh or trimmed off the
//   heap and faulted in again, and a fresh page costs 12-14 us of CPU on the
//   2-core VMs (measured). A 4 MiB threshold and a 64 MiB trim threshold keep
//   them in the heap (bench/run.py's multi-component fetch, with the memory
//   gate's byte allowance: 26,000 page faults before, 12,000 after).
void tune_malloc(unsigned threads) {
    static std::once_flag once;
    std::call_once(once, [threads] {
        const char* tunables = std::getenv("GLIBC_TUNABLES");
        if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr ||
            (tunables != nullptr && (std::string_view(tunables).find("mmap_threshold") != std::string_view::npos ||
                                     std::string_view(tunables).find("trim_threshold") != std::string_view::npos)))
            return;
        if (threads >= kMinThreadsForMmapThreshold) {
            ::mallopt(M_MMAP_THRESHOLD, 256 * 1024);
        } else {
            ::mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024);
            ::mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
        }
    });
}

}  // namespace

run_limits run_budget::machine_limits() { return {machine_threads(), machine_memory()}; }

run_budget::run_budget(run_limits limits)
    : threads_(limits.threads ? limits.threads : machine_threads()),
      memory_(limits.max_memory),
      // Kept block buffers (memory_gate.hpp): 2 on 2 cores (each costs
      // resident memory), one for every 4 workers on more, and more small
      // ones while they total 24 MiB (one xz -6 block, eight xz -1 ones).
      decode_memory_([this] { return decoder_limit(); }, std::max<std::size_t>(2, threads_ / 4), 24 * kMiB) {
    if (memory_ == 0) memory_ = machine_memory();
    tune_malloc(threads_);
    // Small budgets shrink the queues and the writers' buffers with them;
    // 1 GiB (the largest default) gives 2 MiB queues and 64 MiB of buffers.
    // (4 MiB queues gained nothing on 16 cores and cost 56 MiB more with 14
    // artifacts in flight.)
    queue_bytes_ = static_cast<std::size_t>(std::clamp<std::uint64_t>(memory_ / 512, 1 * kMiB, 8 * kMiB));
    pool_bytes_ = static_cast<std::size_t>(std::clamp<std::uint64_t>(memory_ / 16, 8 * kMiB, 64 * kMiB));
    pool_ = std::make_unique<work_pool>(threads_, work_pool::limits{pool_bytes_, 256});
}

std::uint64_t run_budget::decoder_limit() const noexcept {
    // What the budget holds besides the decoders' gate, so that the run's
    // peak RSS stays near the budget (16 cores, 14 artifacts: 1.06-1.12 GiB
    // on 1 GiB before the baseline and the hash queues were counted):
    //  - the process itself: code, libraries, libcurl's buffers, the heap;
    //  - the writers' buffers;
    //  - each artifact in flight: its input, tar and hash-worker queues;
    //  - each pool worker's kept xz decoder (xz_decode.cpp), with its
    //    dictionary: 8 MiB for the default preset.
    const std::uint64_t overhead = kProcessBaseline + pool_bytes_ +
                                   enrolled_.load(std::memory_order_relaxed) * 3 * queue_bytes_ +
                                   std::uint64_t{threads_} * kept_decoder_bytes;
    // Never below the minimum: the gate lets a request in alone anyway, but a
    // tiny limit would turn every block into a wait for all others.
    return memory_ > overhead + kMinDecoderMemory ? memory_ - overhead : kMinDecoderMemory;
}

run_budget::ticket::ticket(run_budget& budget) : budget_(&budget) {
    budget_->enrolled_.fetch_add(1, std::memory_order_relaxed);
}

run_budget::ticket::~ticket() {
    budget_->enrolled_.fetch_sub(1, std::memory_order_relaxed);
    budget_->decode_memory_.notify();  // the limit grew
}

void run_budget::add_time(profile_stage stage, std::uint64_t busy_ns, std::uint64_t wait_ns,
                          std::uint64_t bytes) noexcept {
    auto& s = stages_[static_cast<std::size_t>(stage)];
    s.busy_ns.fetch_add(busy_ns, std::memory_order_relaxed);
    s.wait_ns.fetch_add(wait_ns, std::memory_order_relaxed);
    s.bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void run_budget::mark(const char* event) noexcept {
    const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count();
    std::lock_guard lock(marks_mutex_);
    for (auto& m : marks_) {
        if (m.event != event) continue;
        m.first_seconds = std::min(m.first_seconds, at);
        m.last_seconds = std::max(m.last_seconds, at);
        ++m.count;
        return;
    }
    try {
        marks_.push_back({event, at, at, 1});
    } catch (const std::bad_alloc&) {  // a profile line less; called from pool tasks, so never throws
    }
}

run_profile run_budget::profile() const {
    static const char* const names[] = {"transfer", "decoder", "extractor", "writers"};
    static_assert(std::size(names) == static_cast<std::size_t>(profile_stage::count));
    run_profile p;
    p.threads = threads_;
    p.max_memory = memory_;
    p.peak_rss = peak_rss();
    {
        std::lock_guard lock(marks_mutex_);
        p.marks = marks_;
    }
    for (std::size_t i = 0; i < stages_.size(); ++i) {
        stage_time t;
        t.stage = names[i];
        t.busy_seconds = static_cast<double>(stages_[i].busy_ns.load()) / 1e9;
        t.wait_seconds = static_cast<double>(stages_[i].wait_ns.load()) / 1e9;
        t.bytes = stages_[i].bytes.load();
        if (static_cast<profile_stage>(i) == profile_stage::writers) {
            t.busy_seconds = pool_->busy_seconds(work_pool::lane::urgent);
            t.wait_seconds = pool_->idle_seconds();
        }
        if (t.busy_seconds > 0 || t.wait_seconds > 0 || t.bytes > 0) p.stages.push_back(std::move(t));
    }
    return p;
}

result<std::shared_ptr<run_budget>> make_run_budget(const run_limits& limits) {
    try {
        return std::make_shared<run_budget>(limits);
    } catch (const std::system_error& e) {
        return make_error(error_code::internal, std::string("cannot start writer threads: ") + e.what());
    } catch (const std::bad_alloc&) {
        return make_error(error_code::internal, "out of memory");
    }
}

run_profile profile_of(const run_budget& budget) { return budget.profile(); }

}  // namespace redist
