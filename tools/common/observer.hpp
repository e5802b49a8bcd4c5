// The tools' one fetch_observer: turns the library's typed events into the
// words on stderr (retries, source changes, waits, resumes). Progress goes to
// a renderer the command supplies (progress_display for fetch, lines for
// mirror); the summary after an install is print_install_summary.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "redist/install.hpp"
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
    void on_resume(const redist::resume_event& e) override;
    void on_copy_failure(const redist::copy_failure_event& e) override;
    void on_mirror(const redist::mirror_event& e) override;

private:
    void line(const std::string& text);
    bool quiet_;
    std::mutex mutex_;
};

// The lines of a live progress display, from the components' states: at most
// max_bars bars of the components downloading now (the earliest started),
// then one total bar (bytes done of all, rate, ETA, how many are done and
// how many bars are hidden); while the commit runs, one "committing N
// components" line instead. Finished components have no line (the summary
// lists them). No line is longer than width - 1 columns.
struct progress_state {
    int order = 0;  // 1 for the first component heard of
    redist::fetch_stage stage = redist::fetch_stage::waiting;
    std::uint64_t done = 0, total = 0;
    std::uint64_t resumed = 0;  // bytes an earlier run left (not counted in the rate)
    std::chrono::steady_clock::time_point started;
};
std::vector<std::string> render_progress(const std::map<std::string, progress_state>& states,
                                         std::chrono::steady_clock::time_point started,
                                         std::chrono::steady_clock::time_point now, int width, std::size_t max_bars);

// Renders progress events to stdout, thread-safe; disabled, it only counts
// (bytes_received). On a terminal: the lines of
// render_progress, redrawn in place (at most 10 times a second) and sized to
// the terminal at each redraw; finish() clears them. Elsewhere: no bars, one
// line per component when it is done (or failed).
class progress_display {
public:
    progress_display(bool enabled, bool tty, std::size_t max_bars = 6);
    void operator()(const redist::progress_event& e);
    // Clears the live lines (the summary follows).
    void finish();
    // Archive bytes received so far, those of earlier runs included.
    std::uint64_t bytes_received();

private:
    void redraw(std::chrono::steady_clock::time_point now, bool force);
    bool enabled_;
    bool tty_;
    std::size_t max_bars_;
    std::mutex mutex_;
    std::map<std::string, progress_state> states_;
    int count_ = 0;
    int drawn_lines_ = 0;
    std::chrono::steady_clock::time_point started_;
    std::chrono::steady_clock::time_point last_draw_{};
};

// The summary of an install on stdout: per release a line and a short table
// of what was installed (component, version, size, whether it came from the
// cache); one line naming what was already installed; a line per removed
// component; then "<prefix>: N products for <platform>: N components
// installed, N unchanged, N removed". No URLs (--json has them).
void print_install_summary(const redist::install_report& report, double seconds, const std::string& platform);

}  // namespace redist_tools
