// tests/support.hpp — helpers shared by the unit tests (one copy, not one per
// file): a fresh scratch directory per test case, and whole-file read/write.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "archive/sha256.hpp"

// Fails the test case with the error's one line when `r` (a result<T>) holds
// an error. A macro so that Catch names the caller's file and line.
#define REQUIRE_OK(r)                                      \
    do {                                                   \
        if (!(r).ok()) FAIL((r).error_value().describe()); \
    } while (0)

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

// What a receipt records of `content` (see file_digester), computed from
// sha256_hex alone: the plain digest up to one piece, else the digest of the
// concatenated raw digests of the pieces.
inline std::string receipt_digest_oracle(const std::string& content,
                                         std::uint64_t piece = redist::receipt_piece_bytes) {
    if (content.size() <= piece) return redist::sha256_hex(content);
    std::string raw;
    for (std::size_t at = 0; at < content.size(); at += piece) {
        const std::string hex = redist::sha256_hex(std::string_view(content).substr(at, piece));
        for (std::size_t i = 0; i < hex.size(); i += 2)
            raw += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    return redist::sha256_hex(raw);
}

// Sets an environment variable (nullopt: unsets it) while it lives, and
// puts back what was there before.
class scoped_env {
public:
    scoped_env(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
        if (const char* old = std::getenv(name_.c_str())) before_ = old;
        set(value);
    }
    ~scoped_env() { set(before_); }
    scoped_env(const scoped_env&) = delete;
    scoped_env& operator=(const scoped_env&) = delete;

private:
    void set(const std::optional<std::string>& value) {
        if (value) ::setenv(name_.c_str(), value->c_str(), 1);
        else ::unsetenv(name_.c_str());
    }
    std::string name_;
    std::optional<std::string> before_;
};

}  // namespace redist_test
