// check_child.cpp — the child process of `redist check` (see
// check_child.hpp): fork and exec (or the probe in the forked child when
// there is no helper), the reader with its deadline, and the kill of the
// child's whole process group.
#include "features/check_child.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "support/posix_file.hpp"

namespace redist::checking {

child_process::child_process(const check_options& o, const std::vector<std::string>& ops, const std::string& ld_path)
    : timeout_(o.timeout) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        spawn_error_ = std::string("pipe: ") + std::strerror(errno);
        return;
    }
    // Everything the child needs is built before fork: after it, only
    // async-signal-safe calls in the exec path.
    std::vector<std::string> argv_s = {o.helper.empty() ? "redist" : o.helper.string(), "__check-probe"};
    argv_s.insert(argv_s.end(), ops.begin(), ops.end());
    std::vector<std::string> env_s = {"LD_LIBRARY_PATH=" + ld_path, "LC_ALL=C"};
    for (const char* keep : {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PATH"})
        if (const char* v = std::getenv(keep)) env_s.push_back(std::string(keep) + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : env_s) envp.push_back(s.data());
    envp.push_back(nullptr);
    const unique_fd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
    unique_fd write_end(fds[1]);
    unique_fd read_end(fds[0]);
    pid_ = ::fork();
    // The child leads a process group of its own (set on both sides, so
    // that neither order of the two calls leaves a window): whatever a
    // library's constructor forks stays in it, and is killed with it.
    if (pid_ > 0) ::setpgid(pid_, pid_);
    if (pid_ == 0) {
        ::dup2(write_end.get(), 1);
        if (devnull) {
            ::dup2(devnull.get(), 0);
            ::dup2(devnull.get(), 2);
        }
        ::setpgid(0, 0);
        if (!o.helper.empty()) {
            ::execve(argv[0], argv.data(), envp.data());
            ::_exit(127);
        }
        const int rc = run_check_probe(ops, [](std::string_view line) {
            if (!write_all(1, std::string(line) + '\n', "stdout").ok()) ::_exit(3);
        });
        ::_exit(rc);
    }
    if (pid_ < 0) {
        spawn_error_ = std::string("fork: ") + std::strerror(errno);
        return;
    }
    write_end.reset();  // the child's copy alone: its exit ends the reader's stream
    fd_ = std::move(read_end);
    started_ = std::chrono::steady_clock::now();
}

child_process::~child_process() {
    if (pid_ > 0 && !reaped_) {
        kill_group();
        while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {}
    }
}

child_outcome child_process::wait(std::size_t n_ops, int cancel_fd) {
    child_outcome out;
    out.ops.resize(n_ops);
    out.spawn_error = spawn_error_;
    if (pid_ <= 0) return out;
    std::string buffer;
    const auto deadline = started_ + timeout_;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                                std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            out.timed_out = true;
            break;
        }
        pollfd p[2] = {{fd_.get(), POLLIN, 0}, {cancel_fd, POLLIN, 0}};
        const int r = ::poll(p, cancel_fd >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
        if (r < 0 && errno == EINTR) continue;
        // The child exited but the pipe stays open: something it forked
        // holds it. The group is killed below; nothing more is coming.
        if (r == 0 && leader_exited()) break;
        if (r <= 0) continue;
        if (p[1].revents != 0 && cancel_fd >= 0) {
            out.cancelled = true;
            break;
        }
        char buf[4096];
        const ssize_t n = ::read(fd_.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (buffer.size() < (1u << 20)) buffer.append(buf, static_cast<std::size_t>(n));
    }
    // Whatever the child left in its group goes with it, also after a
    // normal exit: a check leaves no process behind. The child is killed
    // before it is reaped, so its pid (the group's id) cannot have been
    // reused by then.
    kill_group();
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {}
    reaped_ = true;
    if (WIFSIGNALED(status)) out.signal = WTERMSIG(status);
    else if (WIFEXITED(status)) out.exit_status = WEXITSTATUS(status);
    std::istringstream lines(buffer);
    for (std::string line; std::getline(lines, line);) {
        std::vector<std::string> parts;  // kind (begin, ok, fail, driver, gpu), operation, fields
        for (std::size_t start = 0;;) {
            const auto tab = line.find('\t', start);
            parts.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
            if (tab == std::string::npos) break;
            start = tab + 1;
        }
        if (parts.size() < 2) continue;
        const auto op = static_cast<std::size_t>(std::strtoul(parts[1].c_str(), nullptr, 10));
        if (op < n_ops) take_line(out.ops[op], parts[0], {parts.begin() + 2, parts.end()});
    }
    return out;
}

void child_process::take_line(op_result& o, const std::string& kind, std::vector<std::string> fields) {
    if (kind == "begin") o.begun = true;
    else if (kind == "ok" || kind == "fail") {
        o.done = true;
        o.ok = kind == "ok";
        o.fields = std::move(fields);
    } else if (kind == "driver" && !fields.empty()) {
        o.driver_version = std::atoi(fields[0].c_str());
    } else if (kind == "gpu" && fields.size() >= 4) {
        o.gpus.push_back(
            {std::atoi(fields[0].c_str()), std::atoi(fields[1].c_str()), std::atoi(fields[2].c_str()), fields[3]});
    }
}

void child_process::kill_group() const {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
}

bool child_process::leader_exited() const {
    siginfo_t info{};
    return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
}

std::string child_death(const child_outcome& out) {
    if (!out.spawn_error.empty()) return "could not start the check process: " + out.spawn_error;
    if (out.timed_out) return "the check process timed out and was killed";
    if (out.cancelled) return "the check process was stopped";
    if (out.signal)
        return std::string("the check process was killed by signal ") + std::to_string(out.signal) + " (" +
               strsignal(out.signal) + ")";
    if (out.exit_status == 127) return "the check helper could not be executed";
    return "the check process exited with status " + std::to_string(out.exit_status);
}

std::string op_failure(const child_outcome& out, const op_result& r) {
    if (!r.done) return child_death(out);
    return r.fields.empty() ? "" : r.fields[0];
}

}  // namespace redist::checking
