#include "redist/dependencies.hpp"

#include <algorithm>
#include <array>
#include <charconv>

namespace redist {

namespace {

// One row: `product` at major `major`, built for CUDA `cuda_from`..`cuda_to`
// (0: open-ended), needs these components of the `cuda` product.
struct dependency_row {
    std::string_view product;
    int major;
    int cuda_from;
    int cuda_to;
    std::array<std::string_view, 4> components;  // empty entries unused
};

// The table. cuda_crt exists from CUDA 13 on: the crt/ headers that
// cuda_runtime_api.h includes moved there from cuda_nvcc (a CUDA 12 cudart
// archive carries what its headers include). Checked against NVIDIA's
// manifests in tests/unit/model/dependencies_test.cpp.
constexpr std::array<dependency_row, 3> table{{
    {"cudnn", 8, 11, 12, {"cuda_cudart", "libcublas", "cuda_nvrtc", ""}},
    {"cudnn", 9, 11, 12, {"cuda_cudart", "libcublas", "cuda_nvrtc", ""}},
    {"cudnn", 9, 13, 0, {"cuda_cudart", "cuda_crt", "libcublas", "cuda_nvrtc"}},
}};

// The first dot-separated field of a label as a number ("9.27.0" -> 9).
std::optional<int> leading_number(std::string_view text) {
    const std::string_view field = text.substr(0, text.find('.'));
    int value = 0;
    const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (ec != std::errc{} || end != field.data() + field.size()) return std::nullopt;
    return value;
}

}  // namespace

std::optional<dependency_set> dependencies_of(std::string_view product, std::string_view release_label,
                                              int cuda_major) {
    const auto major = leading_number(release_label);
    if (!major) return std::nullopt;
    for (const auto& row : table) {
        if (row.product != product || row.major != *major) continue;
        if (cuda_major < row.cuda_from || (row.cuda_to != 0 && cuda_major > row.cuda_to)) continue;
        dependency_set out;
        out.cuda_major = cuda_major;
        for (const auto c : row.components)
            if (!c.empty()) out.components.emplace_back(c);
        return out;
    }
    return std::nullopt;
}

}  // namespace redist
