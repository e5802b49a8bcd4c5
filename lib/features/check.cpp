// `redist check`, the parent side: reads the receipts and the ELF files they
// list, resolves dependencies like ld.so, looks for shadowing copies, and
// runs the child (check_probe.cpp) that loads, probes and asks the driver.
#include "redist/check.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "features/check_data.hpp"
#include "features/elf.hpp"
#include "features/gpu_arch.hpp"
#include "redist/dependencies.hpp"
#include "redist/prefix.hpp"
#include "redist/printable.hpp"
#include "support/budget.hpp"
#include "support/posix_file.hpp"

namespace redist {

namespace fs = std::filesystem;

const char* to_string(check_severity s) noexcept {
    switch (s) {
        case check_severity::info: return "info";
        case check_severity::warning: return "warning";
        case check_severity::failure: return "failure";
    }
    return "info";
}

std::size_t check_report::count(check_severity s) const {
    return static_cast<std::size_t>(
        std::count_if(findings.begin(), findings.end(), [s](const check_finding& f) { return f.severity == s; }));
}

std::string escape_for_display(std::string_view text) { return printable(text, no_length_limit, backslashes::escape); }

std::string minimum_driver_for_cuda(int cuda_major) {
    for (const auto& m : check_data::driver_minimums)
        if (m.cuda_major == cuda_major) return std::string(m.version);
    return "";
}

std::string debian_package_hint(std::string_view soname) {
    for (const auto& h : check_data::package_hints)
        if (h.soname == soname) return std::string(h.package);
    return "";
}

std::optional<long> header_define(std::string_view text, std::string_view name) {
    auto blank = [](char c) { return c == ' ' || c == '\t'; };
    for (std::size_t start = 0; start < text.size();) {
        const auto nl = text.find('\n', start);
        std::string_view line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
        start = nl == std::string_view::npos ? text.size() : nl + 1;
        std::size_t i = 0;
        auto skip = [&] {
            const std::size_t from = i;
            while (i < line.size() && blank(line[i])) ++i;
            return i > from;
        };
        auto word = [&](std::string_view w) {
            if (line.substr(i, w.size()) != w) return false;
            i += w.size();
            return true;
        };
        skip();
        if (!word("#")) continue;
        skip();
        if (!word("define") || !skip() || !word(name) || !skip()) continue;
        long value = 0;
        std::size_t digits = 0;
        for (; i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])) && digits < 9; ++i, ++digits)
            value = value * 10 + (line[i] - '0');
        if (digits == 0 || (i < line.size() && !blank(line[i]) && line[i] != '\r' && line[i] != '/')) continue;
        return value;
    }
    return std::nullopt;
}

namespace {

// ---- small helpers --------------------------------------------------------------

std::vector<int> version_parts(std::string_view v) {
    std::vector<int> out;
    std::size_t i = 0;
    while (i < v.size()) {
        if (!std::isdigit(static_cast<unsigned char>(v[i]))) return {};
        int n = 0;
        while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i])) && n < 100000000)
            n = n * 10 + (v[i++] - '0');
        out.push_back(n);
        if (i < v.size()) {
            if (v[i] != '.') return {};
            ++i;
        }
    }
    return out;
}

// Two versions agree when they are equal on the parts both have
// ("9.19.0" and "9.19.0.56" agree; "9.19" and "9.22.0" do not).
bool versions_agree(const std::vector<int>& a, const std::vector<int>& b) {
    const std::size_t n = std::min(a.size(), b.size());
    return std::equal(a.begin(), a.begin() + static_cast<long>(n), b.begin());
}

int compare_versions(const std::vector<int>& a, const std::vector<int>& b) {
    for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
        const int x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

// "libcudnn.so.9.19.0" -> {"libcudnn.so", "9.19.0"}; names without ".so." -> {name, ""}.
std::pair<std::string, std::string> split_so_name(const std::string& name) {
    const auto at = name.find(".so.");
    if (at == std::string::npos) return {name, ""};
    return {name.substr(0, at + 3), name.substr(at + 4)};
}

// Whether a file is one of the driver's libraries (libcuda.so*,
// libnvidia-ml.so*): the check never loads those from the prefix, and
// the system's copy is no shadow of them: it is the one the check uses.
bool is_driver_library(const std::string& filename) {
    const auto stem = split_so_name(filename).first;
    return stem == "libcuda.so" || stem == "libnvidia-ml.so";
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    for (std::size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size())
        s.replace(at, from.size(), to);
    return s;
}

// The CUDA major of a receipt: its variant's ("cuda12"), else the cuda product's release.
std::optional<int> cuda_major_of(const receipt& r) {
    std::vector<int> parts;
    if (r.variant && r.variant->starts_with("cuda")) parts = version_parts(r.variant->substr(4));
    if (parts.empty() && r.product == "cuda") parts = version_parts(r.release_label);
    return parts.empty() ? std::nullopt : std::optional<int>(parts[0]);
}

// A machine file of at most `limit` bytes (read_file reads past the size of
// 0 that files under /proc report), or "" when it cannot be read.
std::string read_small_file(const fs::path& p, std::size_t limit) {
    auto text = read_file(p, limit, follow_links::yes);
    return text.ok() ? std::move(*text) : std::string();
}

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ..." -> "580.65.06"
std::optional<std::string> kernel_module_version(const fs::path& file) {
    const std::string text = read_small_file(file, 4096);
    const auto at = text.find("Kernel Module");
    if (at == std::string::npos) return std::nullopt;
    std::istringstream words(text.substr(at + 13));
    std::string w;
    while (words >> w && w.size() < 32)
        if (!version_parts(w).empty() && w.find('.') != std::string::npos) return w;
    return std::nullopt;
}

// ---- the loader's search, as ld.so does it ----------------------------------

// Whether `p` (resolved through every symlink) lies inside `dir` (canonical).
bool inside(const fs::path& p, const fs::path& dir) {
    if (dir.empty()) return false;
    std::error_code ec;
    const auto real = fs::weakly_canonical(p, ec);
    if (ec) return true;  // cannot tell: treat it as inside
    auto [d, r] = std::mismatch(dir.begin(), dir.end(), real.begin(), real.end());
    return d == dir.end();
}

fs::path canonical_prefix(const fs::path& prefix) {
    if (prefix.empty()) return {};
    std::error_code ec;
    auto p = fs::weakly_canonical(fs::absolute(prefix, ec), ec);
    return ec ? fs::absolute(prefix, ec) : p;
}

class resolver {
public:
    // `shun`: when set, nothing inside it is ever found (the driver's
    // libraries are asked of the system, never of the prefix).
    resolver(const check_options& o, std::vector<fs::path> prefix_dirs, fs::path shun = {})
        : prefix_dirs_(std::move(prefix_dirs)),
          default_dirs_(o.default_dirs),
          ld_cache_path_(o.ld_so_cache),
          shun_(std::move(shun)) {
        for (auto& d : elf::split_path_list(o.ld_library_path, ":;")) ld_library_path_.emplace_back(d);
    }

    // Where `name`, needed by an object of `cls`/`machine` in `origin` with
    // these RPATH/RUNPATH entries, is found; empty when nowhere.
    std::string find(const std::string& name, int cls, unsigned machine, const fs::path& origin,
                     const std::vector<std::string>& rpath, const std::vector<std::string>& runpath,
                     std::string* via = nullptr) {
        auto fits = [&](const fs::path& p) { return matches(p, cls, machine) && !inside(p, shun_); };
        if (name.find('/') != std::string::npos) return fits(name) ? name : "";
        auto try_dirs = [&](const std::vector<fs::path>& dirs, const char* how) -> std::string {
            for (const auto& d : dirs) {
                fs::path p = d / name;
                if (fits(p)) {
                    if (via) *via = how;
                    return p.string();
                }
            }
            return "";
        };
        auto expand = [&](const std::vector<std::string>& list) {
            std::vector<fs::path> out;
            for (const auto& e : list) {
                if (e.find("$LIB") != std::string::npos || e.find("${LIB}") != std::string::npos ||
                    e.find("$PLATFORM") != std::string::npos)
                    continue;  // rare; ld.so substitutes host-specific names we do not model
                out.emplace_back(replace_all(replace_all(e, "${ORIGIN}", origin.string()), "$ORIGIN", origin.string()));
            }
            return out;
        };
        std::string hit;
        if (runpath.empty() && !(hit = try_dirs(expand(rpath), "DT_RPATH")).empty()) return hit;
        if (!(hit = try_dirs(prefix_dirs_, "the prefix")).empty()) return hit;
        if (!(hit = try_dirs(ld_library_path_, "LD_LIBRARY_PATH")).empty()) return hit;
        if (!(hit = try_dirs(expand(runpath), "DT_RUNPATH")).empty()) return hit;
        for (const auto& e : cache_entries(name))
            if (fits(e)) {
                if (via) *via = "ld.so.cache";
                return e;
            }
        return try_dirs(default_dirs_, "the default directories");
    }

    // Every copy of `name` in LD_LIBRARY_PATH and ld.so.cache, with where it was seen.
    std::vector<std::pair<std::string, std::string>> all_copies(const std::string& name, int cls, unsigned machine) {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& d : ld_library_path_)
            if (matches(d / name, cls, machine)) out.emplace_back((d / name).string(), "LD_LIBRARY_PATH");
        for (const auto& e : cache_entries(name))
            if (matches(e, cls, machine)) out.emplace_back(e, "ld.so.cache");
        return out;
    }

    const std::vector<fs::path>& ld_library_path() const { return ld_library_path_; }

private:
    // Whether `p` is an ELF file of this class and machine (read once per path).
    bool matches(const fs::path& p, int cls, unsigned machine) {
        auto it = idents_.find(p.string());
        if (it == idents_.end()) it = idents_.emplace(p.string(), elf::read_elf_ident(p)).first;
        return it->second.elf_class == cls && it->second.machine == machine;
    }

    std::vector<std::string> cache_entries(const std::string& name) {
        if (!cache_loaded_) {
            cache_loaded_ = true;
            const std::string bytes = read_small_file(ld_cache_path_, 64u << 20);
            auto parsed = elf::parse_ld_cache(bytes, elf::ld_cache_host_flags());
            if (parsed.ok())
                for (auto& e : *parsed) cache_.emplace(std::move(e.soname), std::move(e.path));
        }
        std::vector<std::string> out;
        auto [lo, hi] = cache_.equal_range(name);
        for (auto it = lo; it != hi; ++it) out.push_back(it->second);
        return out;
    }

    std::vector<fs::path> prefix_dirs_;
    std::vector<fs::path> ld_library_path_;
    std::vector<fs::path> default_dirs_;
    fs::path ld_cache_path_;
    fs::path shun_;
    bool cache_loaded_ = false;
    std::multimap<std::string, std::string> cache_;
    std::map<std::string, elf::elf_ident> idents_;
};

// The driver's libraries as the system has them. libcuda.so.1 and
// libnvidia-ml.so.1 are never taken from inside the prefix, by any path (a
// directory of LD_LIBRARY_PATH, ld.so.cache, a symlink): the install must
// not run what it installed, and the check asks the machine's driver.
struct system_driver {
    std::string libcuda;  // empty: none found
    std::string nvml;     // empty: none (the GPUs are then asked of CUDA)
    std::string ld_path;  // the loader path of the driver's child: $LD_LIBRARY_PATH without the prefix
};

system_driver find_system_driver(const check_options& o, int cls, unsigned machine) {
    system_driver d;
    const auto prefix = canonical_prefix(o.prefix);
    for (const auto& dir : elf::split_path_list(o.ld_library_path, ":;"))
        if (!inside(dir, prefix)) d.ld_path += (d.ld_path.empty() ? "" : ":") + dir;
    check_options system = o;
    system.ld_library_path = d.ld_path;
    resolver res(system, {}, prefix);
    d.libcuda = res.find("libcuda.so.1", cls, machine, "/", {}, {});
    if (d.libcuda.empty()) return d;
    // The NVML of the same driver installation as libcuda, else the system's.
    const auto beside = fs::path(d.libcuda).parent_path() / "libnvidia-ml.so.1";
    d.nvml = res.find(beside.string(), cls, machine, "/", {}, {});
    if (d.nvml.empty()) d.nvml = res.find("libnvidia-ml.so.1", cls, machine, "/", {}, {});
    return d;
}

// ---- the child process ------------------------------------------------------------

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
    child_process(const check_options& o, const std::vector<std::string>& ops, const std::string& ld_path)
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

    child_process(const child_process&) = delete;
    child_process& operator=(const child_process&) = delete;
    ~child_process() {
        if (pid_ > 0 && !reaped_) {
            kill_group();
            while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {}
        }
    }

    // Reads the child's lines about its `n_ops` operations until it exits.
    // `cancel_fd`: once readable, the child is killed (out.cancelled); the
    // caller no longer wants it.
    child_outcome wait(std::size_t n_ops, int cancel_fd = -1) {
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

private:
    static void take_line(op_result& o, const std::string& kind, std::vector<std::string> fields) {
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
    // SIGKILL to the child's whole process group (and to the child itself,
    // in case it had not joined it yet). Only before the child is reaped.
    void kill_group() const {
        ::kill(-pid_, SIGKILL);
        ::kill(pid_, SIGKILL);
    }
    // Whether the child has exited (it stays a zombie: not reaped here).
    bool leader_exited() const {
        siginfo_t info{};
        return ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_;
    }

    std::chrono::milliseconds timeout_;
    pid_t pid_ = -1;
    unique_fd fd_;  // the read end of the child's stdout
    bool reaped_ = false;
    std::string spawn_error_;
    std::chrono::steady_clock::time_point started_;
};

// Why an operation has no result: the child died or hung on it.
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

// An operation's failure: the child's message, or why it died; for an
// operation that succeeded, its first field (the driver's: why no GPU is usable).
std::string op_failure(const child_outcome& out, const op_result& r) {
    if (!r.done) return child_death(out);
    return r.fields.empty() ? "" : r.fields[0];
}

// ---- the checks ------------------------------------------------------------------

// One child process: its operations and what each one is about.
struct op_meta {
    std::string what;      // load, probe, shadow, driver, gpu
    std::size_t file = 0;  // files_ index; shadows_ index for "shadow"
};
struct child_job {
    std::vector<std::string> flags;      // before the operations: --quick, --preload PATH
    std::optional<std::string> ld_path;  // the child's LD_LIBRARY_PATH: the prefix's, then the user's, if unset
    std::vector<std::string> ops;
    std::vector<op_meta> meta;
    std::optional<child_process> child;
    void add(std::initializer_list<std::string> op, op_meta m) {
        ops.insert(ops.end(), op);
        meta.push_back(std::move(m));
    }
};

struct elf_file {
    std::size_t receipt = 0;  // index into receipts
    std::string rel;          // prefix-relative path
    fs::path abs;
    elf::elf_info info;
};

class checker {
public:
    checker(const check_options& o, std::vector<receipt> receipts) : o_(o), receipts_(std::move(receipts)) {}

    result<check_report> run();

private:
    void add(std::string check, check_severity s, std::string component, std::string path, std::string message) {
        report_.findings.push_back({std::move(check), s, std::move(component), std::move(path), std::move(message)});
    }
    void scan_files();
    std::vector<child_job> plan_children(bool full);
    bool can_reuse(const driver_info& asked, bool full) const;
    void plan_loaders(std::vector<child_job>& jobs, std::size_t loaders);
    void collect_children(std::vector<child_job>& jobs, driver_info& driver);
    void apply(const op_meta& m, const op_result& res, const std::string& failure, driver_info& driver);
    void apply_probe(const elf_file& f, const op_result& res, const std::string& failure);
    void compare_version(const receipt& r, const std::string& path, const std::string& version,
                         const std::string& claim, const std::string& failure_lead);
    void check_resolution();
    void check_symbol_versions(const elf_file& f, const std::string& dep, const std::string& found);
    const std::vector<std::string>* defined_versions(const std::string& path);
    std::map<std::string, std::size_t> libraries_by_name() const;
    std::vector<std::size_t> load_order() const;
    bool prefix_holds(const char* name) const;
    std::set<std::size_t> needing_prefix_driver(const std::vector<std::size_t>& order);
    void check_file_versions();
    void check_header_versions();
    void check_runtime_dependencies();
    void find_shadow_candidates();
    void check_shadows();
    void evaluate_driver(driver_info d);
    void check_gpu_code(const std::vector<driver_info::gpu>& gpus);

    const check_options& o_;
    std::vector<receipt> receipts_;
    check_report report_;
    std::vector<elf_file> files_;
    std::vector<fs::path> prefix_dirs_;
    std::optional<resolver> resolver_;
    struct shadow_candidate {
        std::size_t file = 0;  // the installed file it shadows
        std::string path;
        std::string where;  // "LD_LIBRARY_PATH" | "ld.so.cache"
        std::optional<std::string> version;
        const check_data::version_probe* probe = nullptr;  // ask the copy in the child
    };
    std::vector<shadow_candidate> shadows_;
    std::map<std::string, std::optional<std::vector<std::string>>> version_defs_;  // by resolved path
    system_driver driver_;
    std::set<std::size_t> not_loaded_;            // files the full check must not load (needing_prefix_driver)
    const driver_info* reused_driver_ = nullptr;  // o_.driver_asked, when can_reuse() said so
    int host_class_ = 0;
    unsigned host_machine_ = 0;
};

// The version probe of a library, by its file name; nullptr when it has none.
const check_data::version_probe* probe_for(const std::string& filename) {
    const auto stem = split_so_name(filename).first;
    for (const auto& p : check_data::version_probes)
        if (stem == p.library) return &p;
    return nullptr;
}

void checker::scan_files() {
    for (std::size_t r = 0; r < receipts_.size(); ++r) {
        for (const auto& f : receipts_[r].files) {
            if (f.kind != entry_kind::regular) continue;
            // Link-time stubs (lib/stubs/libcuda.so) must never be loaded.
            if (f.path.find("/stubs/") != std::string::npos || f.path.rfind("stubs/", 0) == 0) continue;
            fs::path abs = o_.prefix / f.path;
            if (elf::read_elf_ident(abs).elf_class == 0) continue;
            auto info = elf::read_elf_file(abs);
            if (!info.ok()) {
                add("resolve", check_severity::failure, receipts_[r].component, f.path,
                    f.path + ": " + info.error_value().message);
                continue;
            }
            if (!info->has_dynamic) continue;  // static executables, objects: nothing to resolve
            files_.push_back({r, f.path, std::move(abs), std::move(*info)});
        }
    }
    // The host's ELF class and machine, from our own executable.
    const auto self = elf::read_elf_ident("/proc/self/exe");
    host_class_ = self.elf_class;
    host_machine_ = self.machine;
    report_.elf_files = files_.size();
}

void checker::check_resolution() {
    std::size_t foreign = 0;
    for (const auto& f : files_) {
        if (f.info.elf_class != host_class_ || f.info.machine != host_machine_) {
            ++foreign;
            continue;
        }
        if (f.info.is_shared_library()) ++report_.libraries;
        const fs::path origin = f.abs.parent_path();
        for (const auto& dep : f.info.needed) {
            const auto found = resolver_->find(dep, f.info.elf_class, f.info.machine, origin, f.info.rpath,
                                               f.info.runpath);
            if (!found.empty()) {
                check_symbol_versions(f, dep, found);
                continue;
            }
            std::string msg = f.rel + " needs " + dep + ": not found";
            if (const auto hint = debian_package_hint(dep); !hint.empty()) msg += " (Debian/Ubuntu: " + hint + ")";
            add("resolve", check_severity::failure, receipts_[f.receipt].component, f.rel, std::move(msg));
        }
    }
    if (foreign)
        add("resolve", check_severity::info, "", "",
            std::to_string(foreign) +
                " ELF files are for another machine (cross install): not resolved or loaded here");
}

// The version names a resolved dependency defines, read once per file;
// nullptr when it cannot be read (then nothing is claimed about it).
const std::vector<std::string>* checker::defined_versions(const std::string& path) {
    auto it = version_defs_.find(path);
    if (it == version_defs_.end()) {
        std::optional<std::vector<std::string>> defs;
        std::error_code ec;
        // The loader follows the SONAME link (libstdc++.so.6 -> ...so.6.0.30);
        // the reader does not, so it gets the file itself.
        const auto real = fs::canonical(path, ec);
        if (!ec)
            if (auto info = elf::read_elf_file(real); info.ok()) defs = std::move(info->version_defs);
        it = version_defs_.emplace(path, std::move(defs)).first;
    }
    return it->second ? &*it->second : nullptr;
}

// ld.so refuses to load a file that needs a symbol version its dependency
// does not define ("version `GLIBCXX_3.4.30' not found"): the usual failure
// of a library built on a newer distribution than the one it runs on. The
// check is made before any symbol is bound, so it needs no load.
void checker::check_symbol_versions(const elf_file& f, const std::string& dep, const std::string& found) {
    for (const auto& need : f.info.version_needs) {
        if (need.file != dep || need.names.empty()) continue;
        const auto* defs = defined_versions(found);
        // A dependency without version definitions satisfies any need (ld.so only notes it).
        if (!defs || defs->empty()) return;
        std::string missing;
        for (const auto& name : need.names)
            if (std::find(defs->begin(), defs->end(), name) == defs->end())
                missing += (missing.empty() ? "" : ", ") + name;
        if (missing.empty()) return;
        std::string msg = f.rel;
        msg.append(" needs version ").append(missing).append(" of ").append(dep).append(", which ").append(found);
        msg += " does not define: it is older than the one the library was built against";
        if (const auto hint = debian_package_hint(dep); !hint.empty()) msg += " (Debian/Ubuntu: a newer " + hint + ")";
        add("resolve", check_severity::failure, receipts_[f.receipt].component, f.rel, std::move(msg));
    }
}

// The installed shared libraries of this machine, by file name and SONAME.
std::map<std::string, std::size_t> checker::libraries_by_name() const {
    std::map<std::string, std::size_t> by_name;
    for (std::size_t i = 0; i < files_.size(); ++i) {
        const auto& f = files_[i];
        if (!f.info.is_shared_library() || f.info.elf_class != host_class_ || f.info.machine != host_machine_) continue;
        by_name.emplace(f.abs.filename().string(), i);
        if (!f.info.soname.empty()) by_name.emplace(f.info.soname, i);
    }
    return by_name;
}

// Shared libraries in dependency order (dependencies first), by the prefix
// files their DT_NEEDED resolve to.
std::vector<std::size_t> checker::load_order() const {
    const auto by_name = libraries_by_name();
    std::vector<std::size_t> order;
    std::vector<int> state(files_.size(), 0);  // 0 new, 1 visiting, 2 done
    std::function<void(std::size_t)> visit = [&](std::size_t i) {
        if (state[i]) return;  // done, or a cycle: ld.so tolerates those too
        state[i] = 1;
        for (const auto& dep : files_[i].info.needed)
            if (auto it = by_name.find(dep); it != by_name.end()) visit(it->second);
        state[i] = 2;
        order.push_back(i);
    };
    std::set<std::size_t> libs;
    for (const auto& [name, i] : by_name) libs.insert(i);
    for (std::size_t i : libs) visit(i);
    return order;
}

void checker::check_file_versions() {
    for (const auto& f : files_) {
        const auto& r = receipts_[f.receipt];
        const auto [stem, version] = split_so_name(f.abs.filename().string());
        const auto file_v = version_parts(version);
        const auto comp_v = version_parts(r.component_version);
        // Only names that share the component's major are compared: some
        // components ship libraries numbered on their own scheme (CUPTI's
        // libcupti.so.2024.1.0 in cuda_cupti 12.4.127).
        if (file_v.size() < 2 || comp_v.empty() || file_v[0] != comp_v[0]) continue;
        if (!versions_agree(file_v, comp_v))
            add("version", check_severity::failure, r.component, f.rel,
                f.rel + " is version " + version + ", but " + r.component + " is " + r.component_version +
                    ": the component mixes versions");
    }
}

// The version a product's header states (cudnn_version.h, ...) against the
// receipt: read, never run, so the post-install check can tell a release
// whose files are labelled with another version than they hold.
void checker::check_header_versions() {
    std::set<std::pair<std::size_t, std::string_view>> seen;  // (receipt, header)
    for (const auto& f : files_) {
        const auto& r = receipts_[f.receipt];
        const auto stem = split_so_name(f.abs.filename().string()).first;
        for (const auto& h : check_data::version_headers) {
            if (stem != h.library || !seen.insert({f.receipt, h.header}).second) continue;
            const auto at = std::find_if(r.files.begin(), r.files.end(), [&](const installed_file& e) {
                return e.kind == entry_kind::regular && fs::path(e.path).filename() == h.header;
            });
            if (at == r.files.end()) continue;
            auto text = read_file(o_.prefix / at->path, 4u << 20, follow_links::no);
            if (!text.ok()) {
                add("version", check_severity::warning, r.component, at->path,
                    at->path + ": cannot be read: " + text.error_value().message);
                continue;
            }
            std::string version;
            if (h.minor.empty()) {
                if (const auto v = header_define(*text, h.major)) version = cuda_version_string(static_cast<int>(*v));
            } else if (const auto ma = header_define(*text, h.major), mi = header_define(*text, h.minor),
                       pa = header_define(*text, h.patch);
                       ma && mi && pa) {
                version = std::to_string(*ma) + "." + std::to_string(*mi) + "." + std::to_string(*pa);
            }
            if (version.empty()) continue;  // not the header we know: nothing to claim
            compare_version(r, at->path, version, at->path + " says " + version, "");
        }
    }
}

void checker::check_runtime_dependencies() {
    std::set<std::string> seen;
    for (const auto& f : files_) {
        const auto& r = receipts_[f.receipt];
        const auto [stem, version] = split_so_name(f.abs.filename().string());
        const auto major = cuda_major_of(r);
        for (const auto& d : check_data::runtime_dependencies) {
            if (stem != d.library || !major) continue;
            const std::string soname = replace_all(std::string(d.soname), "{cuda}", std::to_string(*major));
            if (!seen.insert(soname).second) continue;
            std::string via;
            const auto hit = resolver_->find(soname, f.info.elf_class, f.info.machine, f.abs.parent_path(),
                                             f.info.rpath, f.info.runpath, &via);
            if (hit.empty())
                add("runtime", check_severity::warning, r.component, f.rel,
                    soname + " (" + std::string(d.why) + "): not found; install it with: " +
                        replace_all(replace_all(std::string(d.remedy), "{cuda}", std::to_string(*major)), "{prefix}",
                                    shell_quote(o_.prefix.string())));
            else
                add("runtime", check_severity::info, r.component, f.rel,
                    soname + ": " + hit + " (through " + via + ")");
        }
    }
}

void checker::find_shadow_candidates() {
    std::set<std::string> seen;
    for (std::size_t i = 0; i < files_.size(); ++i) {
        const auto& f = files_[i];
        if (!f.info.is_shared_library() || f.info.soname.empty() || !seen.insert(f.info.soname).second) continue;
        if (f.info.elf_class != host_class_ || f.info.machine != host_machine_) continue;
        if (is_driver_library(f.abs.filename().string())) continue;
        std::error_code ec;
        const auto ours = fs::canonical(f.abs, ec);
        const auto prefix = fs::canonical(o_.prefix, ec).string() + "/";
        for (const auto& [path, where] : resolver_->all_copies(f.info.soname, f.info.elf_class, f.info.machine)) {
            std::error_code ec2;
            const auto theirs = fs::canonical(path, ec2);
            if (ec2 || theirs == ours || theirs.string().rfind(prefix, 0) == 0) continue;
            shadow_candidate c{i, path, where, std::nullopt, nullptr};
            // The version from the real file's name (libcudnn.so.9.10.2), else ask the copy itself.
            const auto [s2, v] = split_so_name(theirs.filename().string());
            if (version_parts(v).size() >= 2) c.version = v;
            else c.probe = probe_for(f.abs.filename().string());
            shadows_.push_back(std::move(c));
        }
    }
}

void checker::check_shadows() {
    for (const auto& c : shadows_) {
        const auto& f = files_[c.file];
        const auto& r = receipts_[f.receipt];
        const auto& v = c.version;
        if (v && versions_agree(version_parts(*v), version_parts(r.component_version))) continue;
        std::error_code ec, ec2;
        if (!v && fs::file_size(c.path, ec) == fs::file_size(f.abs, ec2)) continue;
        const bool env = c.where == "LD_LIBRARY_PATH";
        // Quick loads nothing, so a copy whose file name has no version may be the same one.
        const bool sure = v || report_.depth == check_depth::full;
        std::string msg = f.info.soname + ": another copy" + (v ? " (version " + *v + ")" : " (version unknown)") +
                          " at " + c.path + " through " + c.where + "; ";
        msg += env ? "LD_LIBRARY_PATH is searched before DT_RUNPATH, so programs load that copy instead of "
                   : "programs that do not put the prefix first (no RPATH/RUNPATH, no LD_LIBRARY_PATH) load it instead "
                     "of ";
        msg += r.component + " " + r.component_version;
        if (r.product == "cudnn")
            msg +=
                ", and mixing cuDNN sub-libraries of two versions fails with CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH";
        else msg += ", mixing two versions in one process";
        add("shadow", env && sure ? check_severity::failure : check_severity::warning, r.component, f.rel,
            std::move(msg));
    }
}

// `d`: the driver child's answer (or the one reused).
void checker::evaluate_driver(driver_info d) {
    d.kernel_module = kernel_module_version(o_.driver_version_file);
    d.libcuda = driver_.libcuda;
    if (d.libcuda.empty() && !d.kernel_module) {
        add("driver", check_severity::warning, "", "",
            "no NVIDIA driver found (libcuda.so.1 is not on the loader path, no /proc/driver/nvidia/version): "
            "nothing can run on a GPU here (fine on a build machine)");
        if (d.gpus.empty()) return;  // else the GPUs of check_options::compute_capabilities
    }
    if (d.cuda_version)
        add("driver", check_severity::info, "", "",
            "driver " + d.kernel_module.value_or("(kernel module version unknown)") + " supports CUDA " +
                cuda_version_string(*d.cuda_version) + " (" + d.libcuda + ")");
    if (!d.error.empty())
        add("driver", check_severity::warning, "", "",
            (d.cuda_version ? "the driver answered, but no GPU is usable: " : "cannot ask the driver: ") + d.error);
    std::set<std::string> said;
    for (const auto& r : receipts_) {
        const auto major = cuda_major_of(r);
        for (auto& f : preflight_findings(d, r.product, r.component_version, major)) {
            if (!said.insert(f.message).second) continue;
            f.component = r.component;
            report_.findings.push_back(std::move(f));
        }
    }
    // Quick: no cuInit, so no GPU list to judge (see check_depth).
    if (report_.depth == check_depth::full && d.gpus.empty() && d.cuda_version && d.error.empty())
        add("gpu", check_severity::warning, "", "", "the driver reports no GPU");
}

// The GPU code of every installed file of this machine against the GPUs
// judged (gpu_arch.hpp): read from the files, never run, so at both depths.
void checker::check_gpu_code(const std::vector<driver_info::gpu>& gpus) {
    if (gpus.empty()) return;
    std::vector<gpu_arch::installed_library> libs;
    for (const auto& f : files_) {
        if (f.info.elf_class != host_class_ || f.info.machine != host_machine_) continue;
        const auto& r = receipts_[f.receipt];
        libs.push_back({&r, cuda_major_of(r), f.rel, f.abs});
    }
    for (auto& f : gpu_arch::gpu_code_findings(libs, gpus, o_.prefix)) report_.findings.push_back(std::move(f));
}

// What the children do. Quick (the post-install check of fetch) runs no
// installed code: the driver's child alone, loading the system's libcuda.
// Full loads every library, probes versions, asks the driver, and with --gpu
// runs one operation per product. Several children run at once: RTLD_NOW
// relocation of cuDNN's 500 MB dominates the full check's time, and cuInit
// takes tens of milliseconds on a real GPU, so the libraries are spread over
// a few loaders (balanced by size, each in dependency order) and the driver
// gets its own child.
std::vector<child_job> checker::plan_children(bool full) {
    // The machine's budget (affinity and cgroup quota), as every other thread count.
    const std::size_t loaders = full ? std::clamp<std::size_t>(run_budget::machine_limits().threads / 2, 1, 4) : 0;
    std::vector<child_job> jobs(loaders + 2);  // loaders, then probes (+ GPU runs), then the driver
    child_job& probes = jobs[loaders];
    child_job& driver = jobs[loaders + 1];
    driver_ = find_system_driver(o_, host_class_, host_machine_);
    driver.ld_path = driver_.ld_path;
    if (!full) driver.flags = {"--quick"};
    if (!o_.load) return jobs;
    if (full) {
        plan_loaders(jobs, loaders);
        // Where the prefix holds a driver library, the loaders' path (the
        // prefix first) would find it for a library that needs it by name:
        // the system's is loaded first, and ld.so reuses it by SONAME.
        for (const auto& [soname, lib] :
             {std::pair{"libcuda.so.1", &driver_.libcuda}, std::pair{"libnvidia-ml.so.1", &driver_.nvml}})
            if (!lib->empty() && prefix_holds(soname))
                for (std::size_t j = 0; j <= loaders; ++j)
                    jobs[j].flags.insert(jobs[j].flags.end(), {"--preload", *lib});
    }
    for (std::size_t i = 0; full && i < files_.size(); ++i) {
        if (!files_[i].info.is_shared_library() || not_loaded_.count(i)) continue;
        if (const auto* p = probe_for(files_[i].abs.filename().string()))
            probes.add({"probe", std::to_string(static_cast<int>(p->kind)), files_[i].abs.string()}, {"probe", i});
    }
    for (std::size_t k = 0; full && k < shadows_.size(); ++k)
        if (shadows_[k].probe)
            probes.add({"probe-isolated", std::to_string(static_cast<int>(shadows_[k].probe->kind)), shadows_[k].path},
                       {"shadow", k});
    if (driver_.libcuda.empty()) return jobs;
    if (o_.driver_asked && can_reuse(*o_.driver_asked, full)) reused_driver_ = o_.driver_asked;
    else driver.add({"driver", driver_.libcuda, driver_.nvml}, {"driver", 0});
    if (!o_.gpu) return jobs;
    for (std::size_t i = 0; i < files_.size(); ++i) {
        const auto [stem, v] = split_so_name(files_[i].abs.filename().string());
        if (!files_[i].info.is_shared_library() || v.empty() || not_loaded_.count(i)) continue;
        const std::string& cuda = driver_.libcuda;
        if (stem == "libcudnn.so") probes.add({"gpu-cudnn", files_[i].abs.string(), cuda}, {"gpu", i});
        else if (stem == "libcudart.so") probes.add({"gpu-cudart", files_[i].abs.string()}, {"gpu", i});
        else if (stem == "libcublas.so") probes.add({"gpu-cublas", files_[i].abs.string(), cuda}, {"gpu", i});
    }
    return jobs;
}

// Whether the driver's answer asked before the install (driver_query) is
// what asking now would say: the same libcuda (both come from
// find_system_driver, never from the prefix, so the install cannot change
// which one). A full check needs an answer asked at full depth (cuInit when
// NVML cannot list the GPUs).
bool checker::can_reuse(const driver_info& asked, bool full) const {
    if (asked.libcuda.empty() || asked.libcuda != driver_.libcuda) return false;
    return !full || asked.depth == check_depth::full;
}

// Whether a lib directory of the prefix holds `name` (any kind of file).
bool checker::prefix_holds(const char* name) const {
    for (const auto& dir : prefix_dirs_)
        if (struct stat st{}; ::lstat((dir / name).c_str(), &st) == 0) return true;
    return false;
}

// The libraries that need (directly or through other installed libraries) a
// driver library the prefix holds and the system does not: loading them
// would load the prefix's driver. Each is reported, and not loaded.
std::set<std::size_t> checker::needing_prefix_driver(const std::vector<std::size_t>& order) {
    std::set<std::string> unavailable;  // driver SONAMEs only the prefix has
    for (const auto& [soname, lib] :
         {std::pair{"libcuda.so.1", &driver_.libcuda}, std::pair{"libnvidia-ml.so.1", &driver_.nvml}})
        if (lib->empty() && prefix_holds(soname)) unavailable.insert(soname);
    std::set<std::size_t> out;
    if (unavailable.empty()) return out;
    const auto by_name = libraries_by_name();
    for (std::size_t i : order) {  // dependencies first
        for (const auto& dep : files_[i].info.needed) {
            const auto it = by_name.find(dep);
            if (!unavailable.count(dep) && (it == by_name.end() || !out.count(it->second))) continue;
            out.insert(i);
            add("load", check_severity::warning, receipts_[files_[i].receipt].component, files_[i].rel,
                files_[i].rel + " is not loaded: it needs " + dep +
                    ", and the check never loads the driver's libraries from the prefix (the system has none)");
            break;
        }
    }
    return out;
}

// Every library into one of the first `loaders` jobs, balanced by size,
// each job in dependency order. The driver's libraries are not loaded.
void checker::plan_loaders(std::vector<child_job>& jobs, std::size_t loaders) {
    auto order = load_order();
    not_loaded_ = needing_prefix_driver(order);
    std::erase_if(order, [&](std::size_t i) {
        return not_loaded_.count(i) != 0 || is_driver_library(files_[i].abs.filename().string());
    });
    std::vector<std::size_t> by_size(order);
    std::error_code ec;
    std::map<std::size_t, std::uintmax_t> size;
    for (std::size_t i : order) size[i] = fs::file_size(files_[i].abs, ec);
    std::stable_sort(by_size.begin(), by_size.end(), [&](std::size_t a, std::size_t b) { return size[a] > size[b]; });
    std::map<std::size_t, std::size_t> group;  // file -> loader
    std::vector<std::uintmax_t> load(loaders, 0);
    for (std::size_t i : by_size) {
        const auto g = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        group[i] = g;
        load[g] += size[i];
    }
    for (std::size_t i : order) jobs[group[i]].add({"load", files_[i].abs.string()}, {"load", i});
}

void checker::apply_probe(const elf_file& f, const op_result& res, const std::string& failure) {
    const auto& r = receipts_[f.receipt];
    const auto* p = probe_for(f.abs.filename().string());
    if (!res.ok) {
        add("version", check_severity::failure, r.component, f.rel,
            std::string(p->symbol) + "() in " + f.rel + " could not be called: " + failure);
        return;
    }
    if (res.fields.size() < 2) return;
    const std::string call = std::string(p->symbol) + "() = " + res.fields[1] + " (" + res.fields[0] + ")";
    compare_version(r, f.rel, res.fields[0], call, f.rel + ": ");
}

// A version the installed files state (`claim`: what states it) against the
// receipt's; `failure_lead` opens the failure's message.
void checker::compare_version(const receipt& r, const std::string& path, const std::string& version,
                              const std::string& claim, const std::string& failure_lead) {
    if (versions_agree(version_parts(version), version_parts(r.component_version)))
        add("version", check_severity::info, r.component, path,
            claim + ": matches " + r.component + " " + r.component_version);
    else
        add("version", check_severity::failure, r.component, path,
            failure_lead + claim + ", but the receipt says " + r.component + " " + r.component_version);
}

// One operation's outcome (`failure`: the child's message, or why it died).
void checker::apply(const op_meta& m, const op_result& res, const std::string& failure, driver_info& driver) {
    if (m.what == "shadow") {
        if (res.ok && !res.fields.empty()) shadows_[m.file].version = res.fields[0];
        return;
    }
    if (m.what == "driver") {
        driver.cuda_version = res.driver_version;
        driver.gpus = res.gpus;
        driver.error = failure;
        return;
    }
    const elf_file& f = files_[m.file];
    const std::string& component = receipts_[f.receipt].component;
    if (m.what == "load") {
        if (res.ok) ++report_.loaded;
        else add("load", check_severity::failure, component, f.rel, "dlopen(" + f.rel + "): " + failure);
    } else if (m.what == "probe") {
        apply_probe(f, res, failure);
    } else if (res.ok) {
        add("gpu-run", check_severity::info, component, f.rel, res.fields.empty() ? "ok" : res.fields[0]);
    } else {
        add("gpu-run", check_severity::failure, component, f.rel, "on the GPU: " + failure);
    }
}

void checker::collect_children(std::vector<child_job>& jobs, driver_info& driver) {
    for (auto& j : jobs) {
        if (!j.child) continue;
        const auto out = j.child->wait(j.meta.size());
        for (std::size_t k = 0; k < j.meta.size(); ++k) {
            const auto& res = out.ops[k];
            // Never reached: the operation that killed the child is reported.
            if (!res.done && !res.begun && out.spawn_error.empty() && k != 0) continue;
            apply(j.meta[k], res, op_failure(out, res), driver);
        }
    }
}

result<check_report> checker::run() {
    const auto started = std::chrono::steady_clock::now();
    report_.prefix = o_.prefix;
    report_.components = receipts_.size();
    for (const char* d : {"lib", "lib64"})
        if (std::error_code ec; fs::is_directory(o_.prefix / d, ec)) prefix_dirs_.push_back(o_.prefix / d);
    resolver_.emplace(o_, prefix_dirs_);
    scan_files();
    find_shadow_candidates();
    const bool full = o_.depth == check_depth::full || o_.gpu;
    report_.depth = full ? check_depth::full : check_depth::quick;
    auto jobs = plan_children(full);

    std::string ld_path;
    for (const auto& d : prefix_dirs_) ld_path += (ld_path.empty() ? "" : ":") + d.string();
    for (const auto& d : resolver_->ld_library_path()) ld_path += (ld_path.empty() ? "" : ":") + d.string();
    // The children work while we resolve: the slowest of them sets the time.
    for (auto& j : jobs) {
        if (j.ops.empty()) continue;
        j.flags.insert(j.flags.end(), j.ops.begin(), j.ops.end());
        j.child.emplace(o_, j.flags, j.ld_path.value_or(ld_path));
    }

    check_resolution();
    check_runtime_dependencies();
    check_file_versions();
    check_header_versions();

    driver_info driver;
    collect_children(jobs, driver);
    if (reused_driver_) driver = *reused_driver_;
    check_shadows();
    if (!o_.compute_capabilities.empty()) {
        driver.gpus.clear();
        for (const auto& c : o_.compute_capabilities)
            driver.gpus.push_back({static_cast<int>(driver.gpus.size()), c.major, c.minor, "target"});
    }
    const auto gpus = driver.gpus;
    evaluate_driver(std::move(driver));
    check_gpu_code(gpus);
    if (o_.gpu && driver_.libcuda.empty())
        add("gpu-run", check_severity::failure, "", "", "--gpu: no NVIDIA driver (libcuda.so.1) to run on");
    report_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return std::move(report_);
}

const check_data::arch_support* arch_row(const std::string& product, const std::string& version, int cuda_major) {
    const auto v = version_parts(version);
    for (const auto& row : check_data::arch_supports) {
        if (row.product != product || (row.cuda_major && row.cuda_major != cuda_major)) continue;
        if (compare_versions(v, version_parts(row.from)) >= 0) return &row;
    }
    return nullptr;
}

}  // namespace

std::vector<check_finding> preflight_findings(const driver_info& d, const std::string& product,
                                              const std::string& version, std::optional<int> cuda_major) {
    std::vector<check_finding> out;
    if (!cuda_major) return out;
    const std::string minimum = minimum_driver_for_cuda(*cuda_major);
    const std::string what = product + " " + version + " for CUDA " + std::to_string(*cuda_major);
    std::optional<int> supported_major;
    std::string supported;
    if (d.cuda_version) {
        supported_major = *d.cuda_version / 1000;
        supported = "CUDA " + cuda_version_string(*d.cuda_version);
    }
    bool too_old = supported_major && *supported_major < *cuda_major;
    if (!d.cuda_version && d.kernel_module && !minimum.empty() &&
        compare_versions(version_parts(*d.kernel_module), version_parts(minimum)) < 0) {
        too_old = true;
        for (const auto& m : check_data::driver_minimums)
            if (compare_versions(version_parts(*d.kernel_module), version_parts(m.version)) >= 0)
                supported_major = m.cuda_major;
        supported = supported_major ? "CUDA " + std::to_string(*supported_major) + ".x" : "no CUDA variant we know";
    }
    if (too_old) {
        std::string msg = "the driver" + (d.kernel_module ? " " + *d.kernel_module : std::string()) + " supports " +
                          supported + ", but " + what + " needs driver >= " + minimum + ": ";
        if (supported_major && *supported_major >= 11)
            msg += "use --cuda " + std::to_string(*supported_major) + ", or upgrade the driver";
        else msg += "upgrade the driver";
        out.push_back({"driver", check_severity::failure, "", "", std::move(msg)});
    }
    if (const auto* row = arch_row(product, version, *cuda_major)) {
        for (const auto& g : d.gpus) {
            if (g.major > row->min_major || (g.major == row->min_major && g.minor >= row->min_minor)) continue;
            out.push_back({"gpu", check_severity::failure, "", "",
                           "GPU " + std::to_string(g.index) + " (" + g.name + ") has compute capability " +
                               std::to_string(g.major) + "." + std::to_string(g.minor) + "; " + what + " supports " +
                               std::to_string(row->min_major) + "." + std::to_string(row->min_minor) + " and newer (" +
                               std::string(row->source) + ")"});
        }
    }
    return out;
}

namespace {

// detect_driver, stoppable: a byte on `cancel_fd` kills the child.
driver_info ask_driver(const check_options& o, check_depth depth, int cancel_fd) {
    driver_info d;
    d.depth = depth;
    d.kernel_module = kernel_module_version(o.driver_version_file);
    const auto self = elf::read_elf_ident("/proc/self/exe");
    const auto system = find_system_driver(o, self.elf_class, self.machine);
    d.libcuda = system.libcuda;
    if (d.libcuda.empty()) {
        d.error = "libcuda.so.1 not found";
        return d;
    }
    std::vector<std::string> args;
    if (depth == check_depth::quick) args.emplace_back("--quick");
    args.insert(args.end(), {"driver", system.libcuda, system.nvml});
    child_process child(o, args, system.ld_path);
    const auto out = child.wait(1, cancel_fd);
    d.cuda_version = out.ops[0].driver_version;
    d.gpus = out.ops[0].gpus;
    d.error = op_failure(out, out.ops[0]);
    return d;
}

}  // namespace

driver_info detect_driver(const check_options& o, check_depth depth) { return ask_driver(o, depth, -1); }

struct driver_query::state {
    check_options options;
    check_depth depth;
    driver_info answer;
    std::thread thread;
    unique_fd cancel_read, cancel_write;  // a pipe: a byte in it stops the child
};

driver_query::driver_query(check_options options, check_depth depth) : state_(std::make_unique<state>()) {
    state_->options = std::move(options);
    state_->depth = depth;
    state_->options.driver_asked = nullptr;
    // Without a helper the child is a fork that runs the probe without exec,
    // which is only safe while this process has one thread: ask right here.
    int cancel[2];
    if (state_->options.helper.empty() || ::pipe2(cancel, O_CLOEXEC) != 0) {
        state_->answer = ask_driver(state_->options, depth, -1);
        return;
    }
    state_->cancel_read.reset(cancel[0]);
    state_->cancel_write.reset(cancel[1]);
    state_->thread = std::thread([s = state_.get()] {
        try {
            s->answer = ask_driver(s->options, s->depth, s->cancel_read.get());
        } catch (const std::exception& e) {  // bad_alloc, a thread the child's reader could not start
            s->answer = driver_info{};
            s->answer.depth = s->depth;
            s->answer.error = e.what();
        }
    });
}

driver_query::~driver_query() {
    if (!state_->thread.joinable()) return;
    const char stop = 1;
    while (::write(state_->cancel_write.get(), &stop, 1) < 0 && errno == EINTR) {}
    state_->thread.join();
}

const driver_info& driver_query::wait() {
    if (state_->thread.joinable()) state_->thread.join();
    return state_->answer;
}

namespace {

// deps: what the installed releases need of the CUDA toolkit
// (dependencies.hpp) that no receipt in `all` provides, once per release
// and CUDA major of the `checked` receipts. A warning: a system CUDA may
// provide them, but nothing in the prefix says so.
std::vector<check_finding> dependency_findings(const std::vector<receipt>& checked, const std::vector<receipt>& all,
                                               const fs::path& prefix) {
    std::vector<check_finding> out;
    std::set<std::string> said;
    for (const auto& r : checked) {
        const auto major = r.variant ? cuda_major_of(r) : std::nullopt;
        const auto deps = major ? dependencies_of(r.product, r.release_label, *major) : std::nullopt;
        if (!deps || !said.insert(r.product + " " + r.release_label + " " + std::to_string(*major)).second) continue;
        const auto missing = missing_dependencies(*deps, all);
        if (missing.empty()) continue;
        std::string names, csv;
        for (const auto& c : missing) {
            names += (names.empty() ? "" : ", ") + c;
            csv += (csv.empty() ? "" : ",") + c;
        }
        const auto release = installed_dependency_release(*deps, all).value_or(std::to_string(*major));
        out.push_back({"deps", check_severity::warning, r.component, "",
                       r.product + " " + r.release_label + " (CUDA " + std::to_string(*major) + ") needs " + names +
                           " of the " + deps->product +
                           " product, which this prefix lacks (a CUDA toolkit elsewhere "
                           "may provide them); add them with `redist fetch " +
                           deps->product + " " + release + " --component " + csv + " --prefix " + prefix.string() +
                           "`, or fetch " + r.product + " again with --with-deps"});
    }
    return out;
}

}  // namespace

result<check_report> run_checks(const check_options& options) {
    REDIST_TRY(auto receipts, read_receipts(options.prefix));
    const std::vector<receipt> all = receipts;
    if (receipts.empty())
        return make_error(error_code::not_found, "no redist receipts in this prefix (nothing to check)")
            .with_path(options.prefix.string());
    if (!options.components.empty()) {
        std::vector<receipt> chosen;
        for (const auto& name : options.components) {
            auto it = std::ranges::find(receipts, name, &receipt::component);
            if (it == receipts.end())
                return make_error(error_code::not_found, "component '" + name + "' is not installed in this prefix")
                    .with_path(options.prefix.string());
            chosen.push_back(*it);
        }
        receipts = std::move(chosen);
    }
    auto deps = dependency_findings(receipts, all, options.prefix);
    checker c(options, std::move(receipts));
    REDIST_TRY(auto report, c.run());
    report.findings.insert(report.findings.end(), deps.begin(), deps.end());
    return report;
}

}  // namespace redist
