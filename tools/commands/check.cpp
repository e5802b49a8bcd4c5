// `redist check --prefix DIR [--component X] [--gpu] [--json] [--strict]`:
// proves that what redist installed works on this machine (see
// include/redist/check.hpp for what is checked). One line per finding, then a
// summary; exit 0 when nothing failed, 11 when a check failed (or, with
// --strict, warned), 3 when the prefix has no receipts.
#include "commands/check.hpp"
#include "commands/commands.hpp"

#include <errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

namespace redist_tools {

namespace fs = std::filesystem;

int check_probe_main(int argc, char** argv) {
    std::vector<std::string> args(argv + 2, argv + argc);
    return redist::run_check_probe(args, [](std::string_view line) {
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);  // a crash in the next dlopen must not lose this line
    });
}

namespace {

// The executable that serves __check-probe: redist-check-probe beside this
// tool, else `redist` beside it or this one; empty when there is none (the
// library then forks without exec).
fs::path check_helper_path() {
    std::error_code ec;
    fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (ec) return {};
    // Started as `ld.so --library-path DIR redist ...`, /proc/self/exe is the
    // loader; the tool's path is then in argv[0] (program_invocation_name).
    if (self.filename().string().rfind("ld-", 0) == 0 && std::strchr(program_invocation_name, '/'))
        self = fs::absolute(program_invocation_name, ec);
    for (const char* name : {"redist-check-probe", "redist"}) {
        const fs::path sibling = self.parent_path() / name;
        if (::access(sibling.c_str(), X_OK) == 0) return sibling;
    }
    if (self.filename() == "redist") return self;
    return {};
}

}  // namespace

redist::check_options default_check_options(const fs::path& prefix) {
    redist::check_options o;
    o.prefix = prefix;
    o.helper = check_helper_path();
    if (const char* ld = std::getenv("LD_LIBRARY_PATH")) o.ld_library_path = ld;
    return o;
}

std::optional<redist::cuda_detection> system_driver_cuda(const fs::path& prefix, redist::driver_query* query) {
    const redist::driver_info own = query ? redist::driver_info{}
                                          : redist::detect_driver(default_check_options(prefix),
                                                                  redist::check_depth::quick);
    const redist::driver_info& d = query ? query->wait() : own;
    if (!d.cuda_version) return std::nullopt;
    return redist::cuda_from_driver(*d.cuda_version, d.libcuda);
}

std::string format_finding(const redist::check_finding& f) {
    const char* tag = f.severity == redist::check_severity::failure   ? "FAIL"
                      : f.severity == redist::check_severity::warning ? "WARN"
                                                                      : "ok  ";
    return std::string(tag) + " " + f.check + ": " + redist::escape_for_display(f.message);
}

void write_check_json(redist::json_writer& w, const redist::check_report& r, bool strict) {
    const auto failures = r.count(redist::check_severity::failure);
    const auto warnings = r.count(redist::check_severity::warning);
    w.field("ok", failures == 0 && (!strict || warnings == 0));
    w.field("failures", static_cast<std::uint64_t>(failures));
    w.field("warnings", static_cast<std::uint64_t>(warnings));
    w.field("components", static_cast<std::uint64_t>(r.components));
    w.field("elf_files", static_cast<std::uint64_t>(r.elf_files));
    w.field("libraries", static_cast<std::uint64_t>(r.libraries));
    w.field("loaded", static_cast<std::uint64_t>(r.loaded));
    w.field("depth", r.depth == redist::check_depth::quick ? "quick" : "full");
    w.field("seconds", r.seconds);
    w.key("findings").begin_array();
    for (const auto& f : r.findings) {
        w.begin_object();
        w.field("check", f.check);
        w.field("severity", redist::to_string(f.severity));
        w.field("component", f.component);
        w.field("path", f.path);
        w.field("message", f.message);
        w.end_object();
    }
    w.end_array();
}

namespace {

struct check_args {
    std::string prefix;
    std::vector<std::string> components;
    bool gpu = false;
    bool json = false;
    bool strict = false;
    bool quiet = false;
    bool quick = false;
    double timeout = 0;
    std::vector<std::string> compute_capabilities;
};

// "9.0", "90" or "sm_90" as {9, 0}; nullopt for anything else.
std::optional<redist::compute_capability> parse_compute_capability(std::string_view text) {
    if (text.starts_with("sm_")) text.remove_prefix(3);
    const auto dot = text.find('.');
    const std::string_view major = dot == std::string_view::npos ? text.substr(0, text.empty() ? 0 : text.size() - 1)
                                                                 : text.substr(0, dot);
    const std::string_view minor = dot == std::string_view::npos ? text.substr(major.size()) : text.substr(dot + 1);
    auto number = [](std::string_view s, int& out) {
        if (s.empty() || s.size() > 3 || s.find_first_not_of("0123456789") != std::string_view::npos) return false;
        out = std::atoi(std::string(s).c_str());
        return true;
    };
    redist::compute_capability c;
    if (!number(major, c.major) || minor.size() != 1 || !number(minor, c.minor) || c.major == 0) return std::nullopt;
    return c;
}

int cmd_check(const check_args& args) {
    auto o = default_check_options(args.prefix);
    o.components = args.components;
    o.gpu = args.gpu;
    if (args.quick) o.depth = redist::check_depth::quick;
    for (const auto& text : args.compute_capabilities) {
        const auto c = parse_compute_capability(text);
        if (!c) return usage_error("--compute-capability takes X.Y (9.0) or sm_XY (sm_90), not '" + text + "'");
        o.compute_capabilities.push_back(*c);
    }
    if (args.timeout > 0) o.timeout = std::chrono::milliseconds(static_cast<long long>(args.timeout * 1000));
    else if (args.gpu) o.timeout = std::chrono::milliseconds(300000);  // the first GPU call may JIT for minutes
    auto report = redist::run_checks(o);
    if (!report.ok()) return report_error(report.error_value());
    const auto failures = report->count(redist::check_severity::failure);
    const auto warnings = report->count(redist::check_severity::warning);
    const bool failed = failures != 0 || (args.strict && warnings != 0);
    if (args.json) {
        redist::json_writer w(2);
        w.begin_object();
        w.field("prefix", args.prefix);
        write_check_json(w, *report, args.strict);
        w.end_object();
        std::printf("%s\n", w.str().c_str());
    } else {
        for (const auto& f : report->findings) {
            if (args.quiet && f.severity == redist::check_severity::info) continue;
            std::printf("%s\n", format_finding(f).c_str());
        }
        const bool quick = report->depth == redist::check_depth::quick;
        std::printf(
            "%s: %zu components, %zu ELF files, %zu libraries (%s): %zu failed, %zu warnings in %.2f s: %s\n",
            redist::escape_for_display(args.prefix).c_str(), report->components, report->elf_files, report->libraries,
            quick ? "quick: nothing loaded" : (std::to_string(report->loaded) + " loaded").c_str(), failures, warnings,
            report->seconds,
            failed ? (failures ? "CHECK FAILED" : "CHECK FAILED (--strict: warnings fail)") : "all checks passed");
    }
    return failed ? redist::exit_code_for(redist::error_code::check_failed) : 0;
}

}  // namespace

void add_check_command(CLI::App& app, command_runner& selected) {
    auto args = std::make_shared<check_args>();
    auto* cmd = app.add_subcommand("check", "Check that what was installed works on this machine");
    cmd->add_option("--prefix", args->prefix, "The prefix to check")->required()->type_name("DIR");
    cmd->add_option("--component", args->components, "Only these components (default: all installed)")
        ->delimiter(',')
        ->type_name("a,b");
    cmd->add_flag(
        "--gpu", args->gpu,
        "Also run one real operation on the GPU (cuDNN convolution vs a CPU reference; cudart copy; cuBLAS GEMM)");
    cmd->add_flag("--json", args->json, "Print one JSON report with every finding");
    cmd->add_flag("--strict", args->strict, "Warnings fail too (exit 11)");
    cmd->add_flag("--quiet,-q", args->quiet, "Print only warnings, failures and the summary");
    cmd->add_flag("--quick", args->quick,
                  "The post-install check of fetch: reads files only (ELF, version headers, file names) and asks the "
                  "system's driver its version (no cuInit; GPUs from NVML where it answers); runs no installed code, "
                  "so misses undefined symbols and failing constructors");
    cmd->add_option("--timeout", args->timeout,
                    "Seconds the checking child processes may take (default 60; 300 with --gpu); then each one's "
                    "whole process group is killed")
        ->type_name("S");
    cmd->add_option("--compute-capability", args->compute_capabilities,
                    "Judge GPU code and architecture support for these GPUs instead of this machine's (9.0 or sm_90; "
                    "a build machine checking for the one it builds for)")
        ->delimiter(',')
        ->type_name("X.Y,...");
    cmd->footer(
        "\nChecks: every installed ELF file's DT_NEEDED resolves, with the symbol versions it needs (RPATH, the\n"
        "prefix, LD_LIBRARY_PATH, RUNPATH, /etc/ld.so.cache, default dirs); dlopen-only dependencies\n"
        "(libcublasLt, libnvrtc) are found; every library loads (dlopen RTLD_NOW in a child process); file\n"
        "names and the library's own version function (cudnnGetVersion, ...) match the receipt; no other version\n"
        "of an installed SONAME shadows it through LD_LIBRARY_PATH or ld.so.cache; the driver supports the\n"
        "installed CUDA variant and every GPU's compute capability is supported; every installed file with CUDA\n"
        "kernels carries SASS or PTX every GPU can run (read from its .nv_fatbin, never run). No driver is a\n"
        "warning. Exits 11 when a check fails.\n"
        "Without --quick this runs code from the installed libraries: their constructors and version functions\n"
        "run in child processes (a process group each, with a clean environment, killed whole at the timeout).\n"
        "The driver (libcuda.so.1, libnvidia-ml.so.1) is always the system's, never a copy in the prefix.\n"
        "--quick is what fetch runs after every install: it reads files only (ELF headers, version headers\n"
        "such as cudnn_version.h, file names) and asks the system's driver its version without cuInit; nothing\n"
        "installed is loaded (see docs/check.md).\n"
        "GPUs and their compute capabilities come from NVML (libnvidia-ml.so.1), which takes ~20 ms where\n"
        "cuInit takes ~250 ms; with CUDA_VISIBLE_DEVICES set, or without NVML, the full check asks CUDA.\n\n" +
        std::string(exit_code_help));
    cmd->final_callback([args, &selected] { selected = [args] { return cmd_check(*args); }; });
}

}  // namespace redist_tools
