// check_child.hpp (internal) — the child process of `redist check`: started
// with a clean environment in a process group of its own, read line by line
// (what it says of each operation), killed with everything it forked at the
// deadline or when nobody wants its answer. Apart from the checks because
// it is the one place that forks, and the only way installed code runs (in
// the child, never in this process).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "redist/check.hpp"
#include "support/unique_fd.hpp"

namespace redist::checking {

// What the child said about one operation.
struct op_result {
    bool begun = false;
    bool done = false;
    bool ok = false;
    std::vector<std::string> fields;  // ok: the fields; fail: [message]
    std::optional<int> driver_version;
    std::vector<driver_info::gpu> gpus;
};

struct child_outcome {
    std::vector<op_result> ops;  // by operation index
    bool timed_out = false;
    bool cancelled = false;  // killed because nobody wants the answer any more
    int signal = 0;          // killed by this signal
    int exit_status = 0;
    std::string spawn_error;
};

class child_process {
public:
    // Starts `<helper> __check-probe OPS...` (or a fork running the probe
    // in-process when there is no helper) with a clean environment whose
    // LD_LIBRARY_PATH is `ld_path`.
    child_process(const check_options& o, const std::vector<std::string>& ops, const std::string& ld_path);

    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;
    ~child_process();

    // Reads the child's lines about its `n_ops` operations until it exits.
    // `cancel_fd`: once readable, the child is killed (out.cancelled); the
    // caller no longer wants it.
    child_outcome wait(std::size_t n_ops, int cancel_fd = -1);

private:
    static void take_line(op_result& o, const std::string& kind, std::vector<std::string> fields);
    // SIGKILL to the child's whole process group (and to the child itself,
    // in case it had not joined it yet). Only before the child is reaped.
    void kill_group() const;
    // Whether the child has exited (it stays a zombie: not reaped here).
    bool leader_exited() const;

    std::chrono::milliseconds timeout_;
    pid_t pid_ = -1;
    unique_fd fd_;  // the read end of the child's stdout
    bool reaped_ = false;
    std::string spawn_error_;
    std::chrono::steady_clock::time_point started_;
};

// Why an operation has no result: the child died or hung on it.
std::string child_death(const child_outcome& out);
// An operation's failure: the child's message, or why it died; for an
// operation that succeeded, its first field (the driver's: why no GPU is usable).
std::string op_failure(const child_outcome& out, const op_result& r);

}  // namespace redist::checking
