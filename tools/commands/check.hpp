// `redist check` and the pieces `redist fetch`/`cudnn-fetch` reuse to run the
// checks after an install and before a download.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "common/cli.hpp"
#include "redist/check.hpp"
#include "redist/json_writer.hpp"
#include "redist/platform.hpp"

namespace redist_tools {

// `redist __check-probe OPS...`: the child side of the checks (hidden; the
// library starts it with a clean environment). Call from main() before parsing.
int check_probe_main(int argc, char** argv);

// Options for the checks the tools run: the helper, $LD_LIBRARY_PATH.
redist::check_options default_check_options(const std::filesystem::path& prefix);

// What the system's driver supports, for the CUDA variant rule where no
// toolkit is found (redist::cuda_from_driver): the answer of `query` when
// the caller started one (fetch), else of a quick child of its own
// (cuDriverGetVersion, libcuda RTLD_LAZY, never cuInit). Always the system's
// libcuda.so.1, never one inside `prefix`; no process at all without one.
// nullopt: no driver, or it did not answer.
std::optional<redist::cuda_detection> system_driver_cuda(const std::filesystem::path& prefix,
                                                         redist::driver_query* query = nullptr);

// One line per finding ("FAIL resolve: ..."), names escaped.
std::string format_finding(const redist::check_finding& f);

// The findings as a JSON array member named "findings" plus counts.
void write_check_json(redist::json_writer& w, const redist::check_report& r, bool strict);

}  // namespace redist_tools
