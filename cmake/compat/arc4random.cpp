// arc4random() and arc4random_buf() for the release bundle (REDIST_BUNDLE).
//
// Debian 12's libarchive is built against glibc 2.36 and calls these two
// functions, which glibc has only since 2.36; the bundle must run on glibc
// 2.34 (Ubuntu 22.04, RHEL 9). The bundle links libarchive.a statically and
// this file into every program and shared library that does, so that
// libarchive's calls bind here at link time and no GLIBC_2.36 reference is
// left. Hidden: a program that loads libredist.so keeps its own (glibc's).
//
// getrandom(2) (glibc 2.25, Linux 3.17) is what glibc's own arc4random reads;
// it blocks only until the kernel's pool is first seeded, and a signal
// (EINTR) is retried.
#include <sys/random.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

extern "C" {

__attribute__((visibility("hidden"))) void arc4random_buf(void* buffer, size_t size) {
    auto* out = static_cast<unsigned char*>(buffer);
    while (size > 0) {
        const ssize_t got = getrandom(out, size, 0);
        if (got > 0) {
            out += got;
            size -= static_cast<size_t>(got);
        } else if (got < 0 && errno != EINTR) {
            std::abort();  // as glibc's: no fallback to weaker randomness
        }
    }
}

__attribute__((visibility("hidden"))) uint32_t arc4random() {
    uint32_t value = 0;
    arc4random_buf(&value, sizeof value);
    return value;
}

}  // extern "C"
