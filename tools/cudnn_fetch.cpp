// cudnn-fetch — the cuDNN front end of `redist fetch`.
#include "common/cli.hpp"

using namespace redist_tools;

int main(int argc, char** argv) {
    tool_name = "cudnn-fetch";
    CLI::App app{
        "cudnn-fetch: download, verify and install NVIDIA cuDNN into a prefix.\n"
        "Same as `redist fetch cudnn VERSION --component cudnn ...`.",
        "cudnn-fetch"};
    app.set_version_flag("--version", std::string("cudnn-fetch (redist) ") + REDIST_VERSION);
    fetch_options fetch;
    fetch.product = "cudnn";
    app.add_option("VERSION", fetch.version, "9.27.0, 9.27, 9 or latest (default: latest)");
    add_fetch_flags(app, fetch);
    app.get_option("--component")
        ->description("Components to use, comma-separated (default: cudnn alone; --all for every one)");
    app.footer(
        "\nThe CUDA variant: --cuda N[.M] wins; else the CUDA toolkit found ($CUDA_HOME, $CUDA_PATH,\n"
        "/usr/local/cuda, the directory of nvcc on PATH), read from its version.json or include/cuda.h\n"
        "(nothing is run); else the newest variant the system driver (its libcuda.so.1, never the\n"
        "prefix's) can run; else the newest variant every component offers. The tool says which one it\n"
        "chose and why.\n"
        "Layout: --prefix /opt/cudnn gives /opt/cudnn/include/cudnn.h and /opt/cudnn/lib/libcudnn.so.9;\n"
        "LICENSE goes to /opt/cudnn/share/licenses/cudnn/. Receipts: /opt/cudnn/.redist/receipts/.\n\n"
        "Dependencies: cuDNN needs CUDA's runtime (cuda_cudart), cuBLAS (libcublas) and NVRTC (cuda_nvrtc),\n"
        "and cuda_crt for CUDA 13; --with-deps installs those the prefix lacks from the `cuda` release of the\n"
        "same CUDA major (the one in the prefix, else the newest), in the same transaction.\n\n"
        "Examples:\n  cudnn-fetch 9 --prefix /opt/cudnn\n  cudnn-fetch 9 --cuda 12 --with-deps --prefix /opt/cudnn\n"
        "  cudnn-fetch 9.27.0 --cuda 12 --component cudnn,cudnn_jit --prefix /opt/cudnn\n\n"
        "Environment: REDIST_BASE_URL (default for --base-url), SSL_CERT_FILE, CURL_CA_BUNDLE, *_proxy\n\n" +
        std::string(exit_code_help));
    return run_tool(app, argc, argv, [&]() -> int {
        // The default is cudnn alone; --all (which excludes --component) asks for every component.
        if (fetch.selection.components.empty() && !fetch.all) fetch.selection.components = {"cudnn"};
        return run_fetch(fetch);
    });
}
