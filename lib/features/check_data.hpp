// check_data.hpp (internal) — the product knowledge `redist check` uses, in
// one place: version probes, dlopen-only dependencies, driver minimums,
// supported GPU architectures and package hints. Unknown products get only
// the generic checks.
#pragma once

#include <string>
#include <string_view>

namespace redist::check_data {

// How a product's library reports its own version (run in the child via dlsym).
enum class probe_kind {
    cudnn_get_version,         // size_t cudnnGetVersion(void): 9.19.0 -> 91900 (cuDNN 9), 8.9.7 -> 8907 (cuDNN 8)
    cuda_runtime_get_version,  // cudaError_t cudaRuntimeGetVersion(int*): 12.4 -> 12040 (major.minor only)
    cublas_get_property,       // cublasStatus_t cublasGetProperty(libraryPropertyType, int*): MAJOR=0, MINOR=1, PATCH=2
    nccl_get_version,          // ncclResult_t ncclGetVersion(int*): 2.21.5 -> 22105 (2.9+: x*10000+y*100+z)
};

struct version_probe {
    std::string_view library;  // file-name stem the probe applies to: "libcudnn.so" matches libcudnn.so.9.19.0
    std::string_view symbol;
    probe_kind kind;
};

inline constexpr version_probe version_probes[] = {
    {"libcudnn.so", "cudnnGetVersion", probe_kind::cudnn_get_version},
    {"libcudart.so", "cudaRuntimeGetVersion", probe_kind::cuda_runtime_get_version},
    {"libcublas.so", "cublasGetProperty", probe_kind::cublas_get_property},
    {"libnccl.so", "ncclGetVersion", probe_kind::nccl_get_version},
};

// Where a product's headers say its version: what the post-install check
// compares with the receipt, since it runs none of the installed code. The
// header is looked for among the same component's files.
struct version_header {
    std::string_view library;  // file-name stem, as in version_probes
    std::string_view header;   // file name: "cudnn_version.h"
    std::string_view major;    // macro names; minor and patch empty: `major` is
    std::string_view minor;    // a CUDA-encoded version (CUDART_VERSION 12040 -> 12.4)
    std::string_view patch;
};
inline constexpr version_header version_headers[] = {
    {"libcudnn.so", "cudnn_version.h", "CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"},
    {"libcudart.so", "cuda_runtime_api.h", "CUDART_VERSION", "", ""},
    {"libcublas.so", "cublas_api.h", "CUBLAS_VER_MAJOR", "CUBLAS_VER_MINOR", "CUBLAS_VER_PATCH"},
    {"libnccl.so", "nccl.h", "NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"},
};

// Libraries a product's code loads with dlopen, so DT_NEEDED never shows them.
// "{cuda}" is replaced by the CUDA major of the installed variant, "{prefix}"
// by the checked prefix (quoted for sh): the remedy's command runs as printed
// (`--cuda N` with the cuda product picks the newest N.x release).
struct runtime_dependency {
    std::string_view library;  // the library of the product that loads it (file-name stem)
    std::string_view soname;
    std::string_view why;
    std::string_view remedy;
};
inline constexpr runtime_dependency runtime_dependencies[] = {
    {"libcudnn.so", "libcublasLt.so.{cuda}", "loaded by cuDNN for some engines (matmul fusions)",
     "redist fetch cuda --component libcublas --cuda {cuda} --prefix {prefix}, or the libcublas of the CUDA toolkit"},
    {"libcudnn.so", "libnvrtc.so.{cuda}", "loaded by cuDNN's runtime-compiled engines",
     "redist fetch cuda --component cuda_nvrtc --cuda {cuda} --prefix {prefix}, or the nvrtc of the CUDA toolkit"},
};

// Minimum Linux driver per CUDA major (CUDA release notes, table 3 "CUDA
// Toolkit and Minimum Required Driver Version for CUDA Minor Version
// Compatibility"; the cuDNN support matrix repeats them per variant).
struct driver_minimum {
    int cuda_major;
    std::string_view version;
};
inline constexpr driver_minimum driver_minimums[] = {
    {11, "450.80.02"},
    {12, "525.60.13"},
    {13, "580.65.06"},
};

// Oldest GPU architecture a cuDNN release supports, per CUDA variant.
// Sources: the cuDNN support matrices (docs.nvidia.com/deeplearning/cudnn/
// backend/v9.x.y/reference/support-matrix.html): 9.0-9.10 list compute
// capability 5.0 (Maxwell) and newer for CUDA 11 and 12; cuDNN 9.11 and later
// dropped Maxwell, Pascal and Volta (the last release with them is 9.10.2,
// which distributions keep as "cudnn9.10 (Maxwell/Pascal/Volta support)");
// CUDA 13 itself supports 7.5 (Turing) and newer (CUDA 13.0 release notes),
// so every cuda13 variant needs 7.5. Rows are tried in order; the first match wins.
struct arch_support {
    std::string_view product;
    int cuda_major;            // 0: any variant
    std::string_view from;     // first release the row applies to ("9.11.0")
    int min_major, min_minor;  // oldest supported compute capability
    std::string_view source;
};
inline constexpr arch_support arch_supports[] = {
    {"cudnn", 13, "9.0.0", 7, 5, "CUDA 13.0 release notes: Turing (7.5) and newer"},
    {"cudnn", 0, "9.11.0", 7, 5, "cuDNN 9.11+ support matrix: Turing (7.5) and newer"},
    {"cudnn", 0, "9.0.0", 5, 0, "cuDNN 9.0-9.10 support matrix: Maxwell (5.0) and newer"},
    {"cudnn", 0, "8.0.0", 3, 5, "cuDNN 8.x support matrix: Kepler (3.5) and newer"},
};

// Debian/Ubuntu packages shipping common SONAMEs that slim images lack.
struct package_hint {
    std::string_view soname;
    std::string_view package;
};
inline constexpr package_hint package_hints[] = {
    {"libz.so.1", "zlib1g"},
    {"libstdc++.so.6", "libstdc++6"},
    {"libgcc_s.so.1", "libgcc-s1"},
    {"libgomp.so.1", "libgomp1"},
    {"libnuma.so.1", "libnuma1"},
    {"libelf.so.1", "libelf1"},
    {"libxml2.so.2", "libxml2"},
    {"libssl.so.3", "libssl3"},
    {"libcrypto.so.3", "libssl3"},
    {"libbz2.so.1.0", "libbz2-1.0"},
    {"liblzma.so.5", "liblzma5"},
    {"libzstd.so.1", "libzstd1"},
    {"libffi.so.8", "libffi8"},
    {"libtinfo.so.6", "libtinfo6"},
    {"libncursesw.so.6", "libncursesw6"},
    {"libexpat.so.1", "libexpat1"},
    {"libOpenCL.so.1", "ocl-icd-libopencl1"},
    {"libX11.so.6", "libx11-6"},
    {"libGL.so.1", "libgl1"},
    {"libEGL.so.1", "libegl1"},
    {"libnvidia-ml.so.1", "the NVIDIA driver (libnvidia-compute-<version>)"},
    {"libcuda.so.1", "the NVIDIA driver (libnvidia-compute-<version>)"},
    {"libatomic.so.1", "libatomic1"},
    {"libquadmath.so.0", "libquadmath0"},
    {"libgfortran.so.5", "libgfortran5"},
    {"libibverbs.so.1", "libibverbs1"},
};

}  // namespace redist::check_data

namespace redist {

// The minimum Linux driver for a CUDA major (CUDA 12: 525.60.13, 13: 580.65.06)
// from driver_minimums; empty for unknown majors.
std::string minimum_driver_for_cuda(int cuda_major);

// The Debian/Ubuntu package that ships a SONAME (package_hints), or empty.
std::string debian_package_hint(std::string_view soname);

}  // namespace redist
