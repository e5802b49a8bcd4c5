// The tools' one fetch_observer: turns the library's typed events into the
// words on stderr (retries, source changes, waits). Progress goes to a
// renderer the command supplies (a bar for fetch, lines for mirror).
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "redist/fetch.hpp"
#include "redist/mirror.hpp"

namespace redist_tools {

class console_observer : public redist::fetch_observer {
public:
    // quiet: nothing is printed but what the renderers print themselves.
    explicit console_observer(bool quiet) : quiet_(quiet) {}

    std::function<void(const redist::progress_event&)> progress;  // thread-safe renderer, may be empty
    std::function<void(const redist::mirror_event&)> mirror;      // may be empty

    void on_progress(const redist::progress_event& e) override;
    void on_lock_wait(const redist::lock_wait_event& e) override;
    void on_blob_wait(const redist::blob_wait_event& e) override;
    void on_retry(const redist::retry_event& e) override;
    void on_source_change(const redist::source_change_event& e) override;
    void on_source_skip(const redist::source_skip_event& e) override;
    void on_cache_bypass(const redist::cache_bypass_event& e) override;
    void on_mirror(const redist::mirror_event& e) override;

private:
    void line(const std::string& text);
    bool quiet_;
    std::mutex mutex_;
};

// "retrying in 1.2 s after <reason> (attempt 2 of 4)", for tests and tools.
std::string describe_retry(const redist::retry_event& e);
// "trying <to> after <reason>".
std::string describe_source_change(const redist::source_change_event& e);

}  // namespace redist_tools
