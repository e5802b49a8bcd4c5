// Renders the library's events. See observer.hpp.
#include "common/observer.hpp"

#include <cstdio>

#include "common/cli.hpp"
#include "common/printable.hpp"

namespace redist_tools {

std::string describe_retry(const redist::retry_event& e) {
    char delay[32];
    std::snprintf(delay, sizeof delay, "%.1f s", e.delay_seconds);
    return std::string("retrying in ") + delay + (e.retry_after ? " (the server's Retry-After)" : "") + " after " +
           e.reason.describe() + " (attempt " + std::to_string(e.next_attempt) + " of " + std::to_string(e.attempts) +
           ")";
}

std::string describe_source_change(const redist::source_change_event& e) {
    return "trying the next source (" + e.to_url + ") after " + e.reason.describe();
}

void console_observer::line(const std::string& text) {
    if (quiet_) return;
    std::lock_guard lock(mutex_);
    std::fprintf(stderr, "%s: %s\n", tool_name.c_str(), printable(text).c_str());
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

void console_observer::on_retry(const redist::retry_event& e) {
    line((e.component.empty() ? e.url : e.component) + ": " + describe_retry(e));
}

void console_observer::on_source_change(const redist::source_change_event& e) {
    line((e.component.empty() ? e.from_url : e.component) + ": " + describe_source_change(e));
}

void console_observer::on_source_skip(const redist::source_skip_event& e) {
    line("skipping " + e.source + " for the rest of this run: it failed " + std::to_string(e.failures) +
         " times in a row without answering (" + e.reason.describe() + ")");
}

void console_observer::on_cache_bypass(const redist::cache_bypass_event& e) {
    line(e.component + ": warning: downloading without the cache, which cannot hold the archive (" +
         e.reason.describe() + "); it is not cached");
}

void console_observer::on_mirror(const redist::mirror_event& e) {
    if (mirror) mirror(e);
}

}  // namespace redist_tools
