// work_pool.cpp — see work_pool.hpp.
#include "support/work_pool.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "support/stopwatch.hpp"

namespace redist {

work_pool::work_pool(unsigned threads, limits lim) : limits_(lim) {
    if (threads == 0) threads = 1;
    workers_.reserve(threads);
    try {
        for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { run_worker(); });
    } catch (...) {
        // Could not start them all: stop the ones that did start, then rethrow.
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        work_ready_.notify_all();
        for (auto& w : workers_) w.join();
        throw;
    }
}

work_pool::~work_pool() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    work_ready_.notify_all();
    room_.notify_all();
    for (auto& w : workers_) w.join();
}

bool work_pool::reserve(std::size_t bytes, std::size_t slots, const std::atomic<bool>& stop) {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] {
        if (stop.load(std::memory_order_acquire)) return true;
        const bool idle = bytes_ == 0 && slots_ == 0;
        return idle || (bytes_ + bytes <= limits_.max_bytes && slots_ + slots <= limits_.max_slots);
    });
    if (stop.load(std::memory_order_acquire)) return false;
    bytes_ += bytes;
    slots_ += slots;
    return true;
}

void work_pool::release(std::size_t bytes, std::size_t slots) noexcept {
    {
        std::lock_guard lock(mutex_);
        bytes_ -= bytes;
        slots_ -= slots;
    }
    room_.notify_all();
}

void work_pool::wake() noexcept {
    // Taking the lock orders the caller's stop flag before the waiters' check.
    { std::lock_guard lock(mutex_); }
    room_.notify_all();
}

void work_pool::post(std::function<void()> task, lane which, std::uint64_t priority) {
    {
        std::lock_guard lock(mutex_);
        if (which == lane::bulk) {
            bulk_tasks_.push_back(bulk_task{priority, bulk_posted_++, std::move(task)});
            std::push_heap(bulk_tasks_.begin(), bulk_tasks_.end(), runs_later);
        } else {
            tasks_.push_back(std::move(task));
        }
    }
    work_ready_.notify_one();
}

void work_pool::run_worker() {
    for (;;) {
        std::function<void()> task;
        bool bulk = false;
        {
            const auto idle_since = std::chrono::steady_clock::now();
            std::unique_lock lock(mutex_);
            work_ready_.wait(lock, [&] { return stopping_ || !tasks_.empty() || !bulk_tasks_.empty(); });
            idle_ns_.fetch_add(ns_since(idle_since), std::memory_order_relaxed);
            bulk = tasks_.empty();
            if (!bulk) {
                task = std::move(tasks_.front());
                tasks_.pop_front();
            } else if (!bulk_tasks_.empty()) {
                std::pop_heap(bulk_tasks_.begin(), bulk_tasks_.end(), runs_later);
                task = std::move(bulk_tasks_.back().run);
                bulk_tasks_.pop_back();
            } else {
                return;  // stopping, and nothing left to run
            }
        }
        const auto started = std::chrono::steady_clock::now();
        try {
            task();
        } catch (...) {  // NOLINT(bugprone-empty-catch): documented in the header
        }
        (bulk ? bulk_busy_ns_ : busy_ns_).fetch_add(ns_since(started), std::memory_order_relaxed);
    }
}

double work_pool::busy_seconds(lane which) const noexcept {
    return static_cast<double>((which == lane::bulk ? bulk_busy_ns_ : busy_ns_).load()) / 1e9;
}
double work_pool::idle_seconds() const noexcept { return static_cast<double>(idle_ns_.load()) / 1e9; }

}  // namespace redist
