// check_driver.cpp — the driver side of `redist check`: what the machine's
// driver supports against what a release needs (preflight_findings, also
// asked before an install), and asking the driver in a child process
// (detect_driver, driver_query, which asks while an install runs). Apart
// from the checks of installed files (check.cpp): none of it reads the prefix.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "features/check_child.hpp"
#include "features/check_data.hpp"
#include "features/check_loader.hpp"
#include "features/check_versions.hpp"
#include "features/elf.hpp"
#include "redist/check.hpp"
#include "support/unique_fd.hpp"

namespace redist {

using namespace checking;

std::string minimum_driver_for_cuda(int cuda_major) {
    for (const auto& m : check_data::driver_minimums)
        if (m.cuda_major == cuda_major) return std::string(m.version);
    return "";
}

namespace {

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

}  // namespace redist
