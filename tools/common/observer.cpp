// Renders the library's events. See observer.hpp.
#include "common/observer.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "common/cli.hpp"
#include "common/printable.hpp"

namespace redist_tools {

void console_observer::line(const std::string& text) {
    if (quiet_) return;
    std::lock_guard lock(mutex_);
    const std::string out = tool_name + ": " + printable(text);
    if (display) return display->message(out);
    std::fprintf(stderr, "%s\n", out.c_str());
}

void console_observer::on_progress(const redist::progress_event& e) {
    if (progress) progress(e);
}

void console_observer::on_lock_wait(const redist::lock_wait_event& e) {
    line("waiting for lock on " + e.prefix.string() + " (another redist is installing there)");
}

void console_observer::on_blob_wait(const redist::blob_wait_event& e) {
    line(e.component + ": waiting for another process downloading the same archive");
}

// "<component>: retrying in 1.2 s after <reason> (attempt 2 of 4)".
void console_observer::on_retry(const redist::retry_event& e) {
    char delay[32];
    std::snprintf(delay, sizeof delay, "%.1f s", e.delay_seconds);
    line((e.component.empty() ? e.url : e.component) + ": retrying in " + delay +
         (e.retry_after ? " (the server's Retry-After)" : "") + " after " + e.reason.describe() + " (attempt " +
         std::to_string(e.next_attempt) + " of " + std::to_string(e.attempts) + ")");
}

void console_observer::on_source_change(const redist::source_change_event& e) {
    line((e.component.empty() ? e.from_url : e.component) + ": trying the next source (" + e.to_url + ") after " +
         e.reason.describe());
}

void console_observer::on_source_skip(const redist::source_skip_event& e) {
    line("skipping " + e.source + " for the rest of this run: it failed " + std::to_string(e.failures) +
         " times in a row without answering (" + e.reason.describe() + ")");
}

void console_observer::on_cache_bypass(const redist::cache_bypass_event& e) {
    line(e.component + ": warning: downloading without the cache, which cannot hold the archive (" +
         e.reason.describe() + "); it is not cached");
}

void console_observer::on_resume(const redist::resume_event& e) {
    if (display) display->resumed(e.component, e.bytes_done);
    line("resuming " + e.component + " at " + human_size(e.bytes_done) + " of " + human_size(e.bytes_total));
}

// A copy is only a faster way to the same files: a warning, never a failure.
void console_observer::on_copy_failure(const redist::copy_failure_event& e) {
    if (e.component.empty())
        line("warning: not using the mirror's recompressed copies: " + e.reason.describe() +
             "; installing the originals");
    else line("copy of " + e.component + " failed (" + e.reason.describe() + "); installing the original");
}

void console_observer::on_mirror(const redist::mirror_event& e) {
    if (mirror) mirror(e);
}

// ---- progress ------------------------------------------------------------------------

namespace {

using clock_type = std::chrono::steady_clock;

// Columns of the terminal on `fd` (TIOCGWINSZ), else $COLUMNS, else 80.
int terminal_width(int fd) {
    winsize ws{};
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    if (const char* env = std::getenv("COLUMNS"); env && *env) {
        char* end = nullptr;
        const long n = std::strtol(env, &end, 10);
        if (*end == '\0' && n > 0 && n < 10000) return static_cast<int>(n);
    }
    return 80;
}

// At most width - 1 columns: a line that reaches the last column makes some
// terminals wrap, and the redraw would move up one line too few.
std::string fit(std::string text, int width) {
    const std::size_t most = static_cast<std::size_t>(std::max(1, width - 1));
    if (text.size() > most) text.resize(most);
    return text;
}

std::uint64_t per_second(std::uint64_t bytes, clock_type::time_point since, clock_type::time_point now) {
    const double seconds = std::chrono::duration<double>(now - since).count();
    return seconds > 0.05 ? static_cast<std::uint64_t>(static_cast<double>(bytes) / seconds) : 0;
}

std::string describe_eta(std::uint64_t left, std::uint64_t rate) {
    if (rate == 0) return "?";
    const auto s = static_cast<unsigned long long>(left / rate);
    char buf[32];
    if (s >= 3600) std::snprintf(buf, sizeof buf, "%lluh%02llum", s / 3600, s % 3600 / 60);
    else if (s >= 60) std::snprintf(buf, sizeof buf, "%llum%02llus", s / 60, s % 60);
    else std::snprintf(buf, sizeof buf, "%llus", s);
    return buf;
}

int percent_of(std::uint64_t done, std::uint64_t total) {
    if (total == 0) return 0;
    return static_cast<int>(std::min<std::uint64_t>(100, done * 100 / total));
}

// "<label> [####----] <right>": the bar takes what the label and the right
// part leave (at most 40 columns), or is left out below 5.
std::string bar_line(const std::string& label, std::size_t label_width, int percent, const std::string& right,
                     int width) {
    std::string out = label.substr(0, label_width);
    out.resize(label_width, ' ');
    const int room = width - 1 - static_cast<int>(label_width) - 3 - static_cast<int>(right.size());
    const int bar = std::min(40, room);
    if (bar >= 5) {
        const int filled = bar * percent / 100;
        out += " [" + std::string(static_cast<std::size_t>(filled), '#') +
               std::string(static_cast<std::size_t>(bar - filled), '-') + "]";
    }
    return fit(out + right, width);
}

}  // namespace

std::vector<std::string> render_progress(const std::map<std::string, progress_state>& states,
                                         clock_type::time_point started, clock_type::time_point now, int width,
                                         std::size_t max_bars) {
    std::size_t committing = 0, components = 0, finished = 0;
    std::uint64_t done = 0, total = 0, fresh = 0;
    std::vector<std::pair<int, const std::string*>> active;
    for (const auto& [name, s] : states) {
        if (s.stage == redist::fetch_stage::unchanged) continue;
        ++components;
        done += s.shown();
        total += s.total;
        fresh += s.fresh();
        if (s.stage == redist::fetch_stage::committing) ++committing;
        if (s.stage == redist::fetch_stage::done || s.stage == redist::fetch_stage::staged ||
            (s.total > 0 && s.done >= s.total))
            ++finished;
        else if (s.stage == redist::fetch_stage::downloading) active.emplace_back(s.order, &name);
    }
    if (committing > 0)
        return {
            fit("committing " + std::to_string(committing) + (committing == 1 ? " component" : " components"), width)};
    if (components == 0) return {};
    std::sort(active.begin(), active.end());
    const std::size_t shown = std::min(active.size(), max_bars);
    std::size_t label_width = 5;  // "total"
    for (std::size_t i = 0; i < shown; ++i) label_width = std::max(label_width, printable(*active[i].second).size());
    label_width = std::min<std::size_t>(label_width, std::max(5, std::min(24, width / 3)));

    std::vector<std::string> lines;
    for (std::size_t i = 0; i < shown; ++i) {
        const progress_state& s = states.at(*active[i].second);
        const int pct = percent_of(s.shown(), s.total);
        const std::string right = " " + std::to_string(pct) + "% " + human_size(s.shown()) + " of " +
                                  human_size(s.total);
        lines.push_back(bar_line(printable(*active[i].second), label_width, pct, right, width));
    }
    const std::uint64_t rate = per_second(fresh, started, now);
    const int pct = percent_of(done, total);
    std::string right = " " + std::to_string(pct) + "% " + human_size(done) + " of " + human_size(total) + " ETA " +
                        describe_eta(total - std::min(total, done), rate) + ", " + std::to_string(finished) + " of " +
                        std::to_string(components) + " done";
    if (active.size() > shown) right += ", " + std::to_string(active.size() - shown) + " more";
    right += ", " + human_size(rate) + "/s";
    lines.push_back(bar_line("total", label_width, pct, right, width));
    return lines;
}

progress_display::progress_display(bool enabled, bool tty, std::size_t max_bars, std::chrono::milliseconds heartbeat)
    : enabled_(enabled),
      tty_(tty),
      max_bars_(max_bars),
      heartbeat_(std::max(heartbeat, std::chrono::milliseconds(100))),
      started_(clock_type::now()) {
    if (enabled_) timer_ = std::thread([this] { run_timer(); });
}

progress_display::~progress_display() { finish(); }

void progress_display::operator()(const redist::progress_event& e) {
    std::lock_guard lock(mutex_);
    auto& s = states_[e.component];
    const auto now = clock_type::now();
    if (s.order == 0) {
        s.order = ++count_;
        s.started = s.beat_at = s.grew_at = now;
    }
    const bool stage_changed = s.stage != e.stage;
    s.stage = e.stage;
    if (e.stage == redist::fetch_stage::downloading && e.bytes_done != s.done) s.grew_at = now;
    // Back to byte 0 after the kept bytes went through (they were wrong, or
    // another source starts over): they no longer count as kept.
    if (e.stage == redist::fetch_stage::downloading && e.bytes_done < s.done && s.done >= s.resumed) s.resumed = 0;
    // failed and stopped carry 0: what came before stays (a bar leaves, it does not fall back).
    if (e.stage != redist::fetch_stage::failed && e.stage != redist::fetch_stage::stopped) s.done = e.bytes_done;
    s.total = e.bytes_total;
    if (!enabled_) return;
    if (tty_) return redraw(now, stage_changed);
    if (!stage_changed) return;
    const std::string name = printable(e.component);
    switch (e.stage) {
        case redist::fetch_stage::staged:
        case redist::fetch_stage::done:  // said when staged (a commit's done is no news)
            if (std::exchange(s.said_done, true)) return;
            std::printf("%s: done, %s\n", name.c_str(), human_size(s.total).c_str());
            break;
        case redist::fetch_stage::failed: std::printf("%s: failed\n", name.c_str()); break;
        case redist::fetch_stage::stopped: std::printf("%s: stopped\n", name.c_str()); break;
        default: return;
    }
    std::fflush(stdout);
}

void progress_display::resumed(const std::string& component, std::uint64_t bytes) {
    std::lock_guard lock(mutex_);
    auto& s = states_[component];
    if (s.order == 0) {
        s.order = ++count_;
        s.started = s.beat_at = s.grew_at = clock_type::now();
        s.stage = redist::fetch_stage::downloading;
    }
    s.resumed = bytes;
    // The stream delivers the kept bytes again from byte 0 (they are hashed
    // again): those are not this run's, and not its rate.
    s.beat_fresh = s.fresh();
}

void progress_display::message(const std::string& text) {
    std::lock_guard lock(mutex_);
    const bool live = enabled_ && tty_ && drawn_lines_ > 0;
    if (live) clear();
    std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
    if (live) redraw(clock_type::now(), true);
}

void progress_display::redraw(clock_type::time_point now, bool force) {
    if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const auto lines = render_progress(states_, started_, now, terminal_width(STDOUT_FILENO), max_bars_);
    std::string out;
    if (drawn_lines_) out += "\r\033[" + std::to_string(drawn_lines_) + "A";
    for (const auto& l : lines) out += "\033[2K" + l + "\n";
    out += "\033[J";  // what the last draw had below
    std::fputs(out.c_str(), stdout);
    std::fflush(stdout);
    drawn_lines_ = static_cast<int>(lines.size());
}

void progress_display::clear() {
    if (drawn_lines_) std::printf("\r\033[%dA\033[J", drawn_lines_);
    drawn_lines_ = 0;
    std::fflush(stdout);
}

// "cudnn: 120 MiB of 313 MiB, 3.4 MiB/s" for each download in flight, the
// rate over the bytes since the last beat; one without a byte for 5 s or
// more says for how long ("..., 0 B/s, nothing received for 20 s").
void progress_display::heartbeat(clock_type::time_point now) {
    std::vector<std::pair<int, const std::string*>> active;
    for (const auto& [name, s] : states_)
        if (s.stage == redist::fetch_stage::downloading) active.emplace_back(s.order, &name);
    std::sort(active.begin(), active.end());
    for (const auto& [order, name] : active) {
        progress_state& s = states_.at(*name);
        std::string text = printable(*name) + ": " + human_size(s.shown()) + " of " + human_size(s.total);
        const std::uint64_t rate = per_second(s.fresh() - std::min(s.fresh(), s.beat_fresh), s.beat_at, now);
        if (s.total > 0 && s.done >= s.total) {
            text += ", unpacking";  // every byte is in; the unpacker finishes
        } else {
            text += ", " + human_size(rate) + "/s";
            // A stall is said even when the bytes before it make a rate.
            const auto quiet = std::chrono::duration_cast<std::chrono::seconds>(now - s.grew_at).count();
            if (quiet >= 5 || rate == 0) text += ", nothing received for " + std::to_string(quiet) + " s";
        }
        std::printf("%s\n", text.c_str());
        s.beat_fresh = s.fresh();
        s.beat_at = now;
    }
    if (!active.empty()) std::fflush(stdout);
}

// On a terminal: a redraw at least once a second. Elsewhere: the heartbeat.
void progress_display::run_timer() {
    std::unique_lock lock(mutex_);
    const auto step = tty_ ? std::chrono::milliseconds(1000) : heartbeat_;
    for (auto next = clock_type::now() + step;; next += step) {
        if (wake_.wait_until(lock, next, [this] { return stopping_; })) return;
        const auto now = clock_type::now();
        if (next < now - step) next = now;  // the machine slept: no burst of beats
        if (!tty_) heartbeat(now);
        else if (!states_.empty() && now - last_draw_ >= step) redraw(now, true);
    }
}

void progress_display::finish() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (timer_.joinable()) timer_.join();
    if (!enabled_ || !tty_) return;
    std::lock_guard lock(mutex_);
    clear();
}

// ---- the summary -----------------------------------------------------------------------

namespace {

// One release's part: a line, then a short table of what was installed.
void print_release_summary(const redist::release_report& release, const std::string& prefix, double seconds,
                           std::string& unchanged) {
    std::vector<const redist::component_report*> installed;
    std::size_t name_width = 0, version_width = 0, from_cache = 0;
    std::set<std::string> variants;
    std::uint64_t size = 0;
    for (const auto& c : release.components) {
        if (c.unchanged) {
            unchanged += (unchanged.empty() ? "" : ", ") + printable(release.product) + " " + printable(c.component) +
                         (c.variant ? " " + printable(*c.variant) : "");
            continue;
        }
        installed.push_back(&c);
        name_width = std::max(name_width, printable(c.component).size());
        version_width = std::max(version_width,
                                 version_change(c.previous_version, c.previous_variant, c.version, c.variant).size());
        if (c.variant) variants.insert(printable(*c.variant));
        size += c.size;
        if (c.from_cache) ++from_cache;
    }
    if (installed.empty()) return;
    std::printf("installed %s %s into %s: %zu component%s, %s in %.1f s", printable(release.product).c_str(),
                printable(release.release_label).c_str(), prefix.c_str(), installed.size(),
                installed.size() == 1 ? "" : "s", human_size(size).c_str(), seconds);
    if (from_cache) std::printf(" (%zu from the cache)", from_cache);
    // The CUDA variants as keyed (cuda12, cuda13.2), where there are any.
    std::string variant_text;
    for (const auto& v : variants) variant_text += (variant_text.empty() ? "" : ", ") + v;
    if (!variant_text.empty()) std::printf(", variant %s", variant_text.c_str());
    std::printf("\n");
    for (const auto* c : installed)
        std::printf("  %-*s  %-*s  %9s  %zu files%s\n", static_cast<int>(name_width), printable(c->component).c_str(),
                    static_cast<int>(version_width),
                    version_change(c->previous_version, c->previous_variant, c->version, c->variant).c_str(),
                    human_size(c->size).c_str(), c->files,
                    c->from_tree    ? "  (cache tree)"
                    : c->from_cache ? "  (cache)"
                                    : "");
}

}  // namespace

void print_install_summary(const redist::install_report& report, double seconds, const std::string& platform) {
    const std::string prefix = printable(report.prefix.string());
    std::string unchanged;
    std::size_t installed = 0, kept = 0;
    for (const auto& r : report.releases) {
        print_release_summary(r, prefix, seconds, unchanged);
        for (const auto& c : r.components) ++(c.unchanged ? kept : installed);
    }
    if (!unchanged.empty())
        std::printf("already installed in %s (receipts match; use --reinstall to install again): %s\n", prefix.c_str(),
                    unchanged.c_str());
    for (const auto& r : report.removed)
        std::printf("removed %s %s %s: %zu files (no longer in the project)\n", printable(r.product).c_str(),
                    printable(r.component).c_str(), printable(r.version).c_str(), r.files);
    const auto count = [](std::size_t n, const char* noun) {
        return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
    };
    std::printf("%s: %s for %s: %s installed, %zu unchanged, %zu removed\n", prefix.c_str(),
                count(report.releases.size(), "product").c_str(), printable(platform).c_str(),
                count(installed, "component").c_str(), kept, report.removed.size());
}

}  // namespace redist_tools
