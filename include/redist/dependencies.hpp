// redist/dependencies.hpp — what a product needs from the CUDA toolkit.
//
// NVIDIA's manifests do not say that cuDNN needs the CUDA runtime, cuBLAS(Lt)
// and NVRTC, but it does: cudnn.h includes cuda_runtime_api.h, and the
// libraries load libcublasLt and libnvrtc (conda's `cudnn` and pip's
// `nvidia-cudnn-cu12` pull them in). redist keeps that knowledge as a small
// table of data: per product and major version, the components of the `cuda`
// product at the same CUDA major (the dependent's variant). Pure, no I/O.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redist/export.hpp"

namespace redist {
REDIST_API_BEGIN

struct receipt;  // prefix.hpp

// The product every row of the table draws its components from.
inline constexpr std::string_view dependency_product = "cuda";

struct dependency_set {
    std::string product{dependency_product};  // where the components come from: "cuda"
    int cuda_major = 0;                       // the release of `product` must be CUDA <cuda_major>.x
    std::vector<std::string> components;      // component keys of that product's manifests, in table order
};

// The dependencies of `product` at release `release_label` (its major is the
// label's first field: "9.27.0" is 9) built for CUDA `cuda_major` (the
// variant installed: cuda12 is 12). nullopt when the table has no row for
// them: a product it does not know, a major it does not know, a CUDA major
// outside the row's range. Known today: cudnn 8 and 9 (cuda_cudart, libcublas,
// cuda_nvrtc; for CUDA 13 and later also cuda_crt, the headers cudart's
// include).
std::optional<dependency_set> dependencies_of(std::string_view product, std::string_view release_label, int cuda_major);

// What a prefix holds of them, from its receipts (lib/store/, beside the
// receipts). Of `deps`, the components that `receipts` (a prefix's) lack: those with
// no receipt of deps.product from a release of CUDA major deps.cuda_major
// (its label's first field: a runtime of another major does not count). In
// table order.
std::vector<std::string> missing_dependencies(const dependency_set& deps, const std::vector<receipt>& receipts);

// The release of deps.product already in the prefix at CUDA major
// deps.cuda_major (the newest label among its receipts), so that adding
// the missing components keeps one CUDA release there; nullopt when none.
std::optional<std::string> installed_dependency_release(const dependency_set& deps,
                                                        const std::vector<receipt>& receipts);

REDIST_API_END
}  // namespace redist
