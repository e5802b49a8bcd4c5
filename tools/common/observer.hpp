// The tools' one run_observer: turns the library's typed events into the
// words on stderr (retries, source changes, waits, resumes). Progress goes to
// a renderer the command supplies (progress_display for fetch, lines for
// mirror); the summary after an install is print_install_summary.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "redist/install.hpp"
#include "redist/mirror.hpp"

namespace redist_tools {

class progress_display;

class console_observer : public redist::run_observer {
public:
    // quiet: nothing is printed but what the renderers print themselves.
    explicit console_observer(bool quiet) : quiet_(quiet) {}

    std::function<void(const redist::progress_event&)> progress;  // thread-safe renderer, may be empty
    std::function<void(const redist::mirror_event&)> mirror;      // may be empty
    // The live display, if any (not owned): the lines go through it, so that
    // on a terminal they are not drawn over, and a resume moves its bar.
    progress_display* display = nullptr;

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
// components" line instead. Finished (staged) components have no line (the
// summary lists them). A resumed download counts the bytes an earlier run
// left from the start (not in the rate). No line is longer than width - 1 columns.
struct progress_state {
    int order = 0;  // 1 for the first component heard of
    redist::fetch_stage stage = redist::fetch_stage::waiting;
    std::uint64_t done = 0, total = 0;
    std::uint64_t resumed = 0;  // bytes an earlier run left (resume_event; not counted in the rate)
    std::chrono::steady_clock::time_point started;
    // Off a terminal: the last heartbeat's fresh bytes, and when done last grew.
    std::uint64_t beat_fresh = 0;
    std::chrono::steady_clock::time_point beat_at, grew_at;
    bool said_done = false;  // its "done" line is out
    std::uint64_t shown() const { return std::max(done, resumed); }
    std::uint64_t fresh() const { return done - std::min(done, resumed); }
};
std::vector<std::string> render_progress(const std::map<std::string, progress_state>& states,
                                         std::chrono::steady_clock::time_point started,
                                         std::chrono::steady_clock::time_point now, int width, std::size_t max_bars);

// Renders progress events to stdout, thread-safe; disabled, it prints
// nothing (message() still writes its lines to stderr). On a terminal: the
// lines of render_progress, redrawn in place (at most 10 times a second, and
// at least once a second, so that a stalled download's rate and ETA move),
// sized to the terminal at each redraw; finish() clears them. Elsewhere
// (CI logs): no bars; one line per component when it is staged ("X: done,
// 313 MiB"), failed or stopped, and, from a timer, every `heartbeat` a line
// per download in flight ("X: 120 MiB of 313 MiB, 3.4 MiB/s"; "0 B/s,
// nothing received for 20 s" when stalled), so that a log never goes quiet
// while bytes are awaited.
class progress_display {
public:
    progress_display(bool enabled, bool tty, std::size_t max_bars = 6,
                     std::chrono::milliseconds heartbeat = std::chrono::seconds(10));
    ~progress_display();
    progress_display(const progress_display&) = delete;
    progress_display& operator=(const progress_display&) = delete;
    void operator()(const redist::progress_event& e);
    // A download goes on from `bytes` an earlier run left: its bar starts there.
    void resumed(const std::string& component, std::uint64_t bytes);
    // Writes "<text>\n" to stderr; on a terminal the live lines are cleared
    // first and drawn again below it, so that none is left behind.
    void message(const std::string& text);
    // Stops the timer and clears the live lines (the summary follows).
    void finish();

private:
    void redraw(std::chrono::steady_clock::time_point now, bool force);
    void clear();  // mutex_ held: erases what is drawn
    void heartbeat(std::chrono::steady_clock::time_point now);
    void run_timer();
    bool enabled_;
    bool tty_;
    std::size_t max_bars_;
    std::chrono::milliseconds heartbeat_;
    std::mutex mutex_;
    std::map<std::string, progress_state> states_;
    int count_ = 0;
    int drawn_lines_ = 0;
    std::chrono::steady_clock::time_point started_;
    std::chrono::steady_clock::time_point last_draw_{};
    std::condition_variable wake_;
    bool stopping_ = false;
    std::thread timer_;  // last: started once the rest is set up
};

// The summary of an install on stdout: per release a line and a short table
// of what was installed (component, version, size, whether it came from the
// cache); one line naming what was already installed; a line per removed
// component; then "<prefix>: N products for <platform>: N components
// installed, N unchanged, N removed". No URLs (--json has them).
void print_install_summary(const redist::install_report& report, double seconds, const std::string& platform);

}  // namespace redist_tools
