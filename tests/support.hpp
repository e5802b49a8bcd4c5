// tests/support.hpp — helpers shared by the unit tests (one copy, not one per
// file): a fresh scratch directory per test case, and whole-file read/write.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace redist_test {

// A fresh, empty directory under this test program's scratch area
// (REDIST_TEST_SCRATCH, set by tests/CMakeLists.txt).
inline std::filesystem::path scratch(const std::string& name) {
    const std::filesystem::path dir = std::filesystem::path(REDIST_TEST_SCRATCH) / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

// Writes `content` to `path`, creating the parent directories.
inline void write(const std::filesystem::path& path, const std::string& content) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << content;
}

// The whole file ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace redist_test
