// support/unique_fd.hpp — the one owner of a file descriptor.
//
// Public because public types hold one (prefix_lock, blob_lock: their flock
// lasts as long as the descriptor is open). Every descriptor the library
// opens is held by a unique_fd from the moment the open returns.
#pragma once

#include <filesystem>

#include "redist/error.hpp"

namespace redist {

// Owns a file descriptor; closes it on destruction. Move-only.
class unique_fd {
public:
    unique_fd() noexcept = default;
    explicit unique_fd(int fd) noexcept : fd_(fd) {}
    unique_fd(unique_fd&& other) noexcept : fd_(other.release()) {}
    unique_fd& operator=(unique_fd&& other) noexcept {
        if (this != &other) reset(other.release());
        return *this;
    }
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;
    ~unique_fd() { reset(); }

    int get() const noexcept { return fd_; }
    bool valid() const noexcept { return fd_ >= 0; }
    explicit operator bool() const noexcept { return valid(); }
    int release() noexcept {
        const int fd = fd_;
        fd_ = -1;
        return fd;
    }
    // Closes the current descriptor (errors ignored: use close() to see them).
    void reset(int fd = -1) noexcept;
    // Closes and reports the error close(2) returned (data may be lost on NFS).
    // Outcomes: ok | filesystem.
    result<void> close(const std::filesystem::path& path_for_errors);

private:
    int fd_ = -1;
};

}  // namespace redist
