// `redist fetch PRODUCT [VERSION] --prefix DIR` — download, verify and
// install. The work and its rendering are in common/fetch_command.cpp
// (run_fetch), shared with cudnn-fetch.
#include <memory>

#include "commands/commands.hpp"

namespace redist_tools {

namespace {

int run_fetch_command(const fetch_options& fetch) {
    if (fetch.source.manifest.empty() && fetch.product.empty() && fetch.locked.empty())
        return usage_error("fetch needs PRODUCT [VERSION], or --manifest PATH|URL");
    return run_fetch(fetch);
}

}  // namespace

void add_fetch_command(CLI::App& app, command_runner& selected) {
    auto fetch = std::make_shared<fetch_options>();
    auto* cmd = app.add_subcommand("fetch", "Download, verify and install components into a prefix");
    cmd->add_option("PRODUCT", fetch->product, "cudnn, cuda, ...");
    cmd->add_option("VERSION", fetch->version, "9.27.0, 9.27, 9 or latest (default)");
    add_fetch_flags(*cmd, *fetch);
    cmd->footer(
        "\nThe archive's top-level directory is stripped: --prefix /opt/cudnn gives /opt/cudnn/include, "
        "/opt/cudnn/lib.\nEach archive's top-level files (LICENSE, ...) go to <prefix>/share/licenses/<component>/.\n"
        "Receipts: <prefix>/.redist/receipts/<product>/<component>.json. Re-running is a no-op when they match.\n"
        "Without --component, a library family (cudnn) installs every component; any other release (the CUDA\n"
        "toolkit) needs --component or --all (every component but the driver's and cuda_compat). With the\n"
        "cuda product, --cuda 12 and no VERSION install the newest 12.x release.\n"
        "The CUDA variant, as for lock and sync: --cuda N[.M]; else the toolkit found ($CUDA_HOME,\n"
        "$CUDA_PATH, /usr/local/cuda, nvcc's directory on PATH), read from its version.json or\n"
        "include/cuda.h, never run; else the newest variant the system driver can run (its libcuda.so.1,\n"
        "never the prefix's); else the newest variant every component offers.\n\n"
        "Examples:\n  redist fetch cuda 12.9.1 --component cuda_nvcc,cuda_cudart --prefix /opt/cuda\n"
        "  redist fetch cudnn 9 --component cudnn,cudnn_jit --cuda 12 --prefix /opt/cudnn\n"
        "  redist fetch cudnn 9 --cuda 12 --with-deps --prefix /opt/cudnn   # with cudart, cuBLAS, NVRTC\n"
        "  redist fetch --locked redist.lock --prefix /opt/cudnn\n\n" +
        exit_code_help);
    cmd->final_callback([fetch, &selected] { selected = [fetch] { return run_fetch_command(*fetch); }; });
}

}  // namespace redist_tools
