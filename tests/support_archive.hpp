// tests/support_archive.hpp — a tar.xz laid out as NVIDIA's archives are (one
// top directory holding regular files), built in memory with libarchive, for
// the unit tests that install or forecast one. (unpack_test has its own
// builder: every entry kind and container.)
#pragma once

#include <catch2/catch.hpp>

#include <archive.h>
#include <archive_entry.h>

#include <string>
#include <vector>

namespace redist_test {

struct archive_file {
    std::string path;  // below the top directory
    std::string content;
};

namespace detail {
inline la_ssize_t append_to_string(archive*, void* client, const void* buf, size_t n) {
    static_cast<std::string*>(client)->append(static_cast<const char*>(buf), n);
    return static_cast<la_ssize_t>(n);
}
}  // namespace detail

// "<top>/<path>" for each file, mode 0644, a fixed mtime: the same bytes on every run.
inline std::string tar_xz(const std::string& top, const std::vector<archive_file>& files) {
    archive* a = archive_write_new();
    REQUIRE(a != nullptr);
    REQUIRE(archive_write_set_format_pax_restricted(a) == ARCHIVE_OK);
    REQUIRE(archive_write_add_filter_xz(a) == ARCHIVE_OK);
    REQUIRE(archive_write_set_bytes_in_last_block(a, 1) == ARCHIVE_OK);  // the xz stream alone, unpadded
    std::string out;
    REQUIRE(archive_write_open(a, &out, nullptr, detail::append_to_string, nullptr) == ARCHIVE_OK);
    for (const archive_file& f : files) {
        archive_entry* e = archive_entry_new();
        archive_entry_set_pathname(e, (top + "/" + f.path).c_str());
        archive_entry_set_mtime(e, 1700000000, 0);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_size(e, static_cast<la_int64_t>(f.content.size()));
        REQUIRE(archive_write_header(a, e) == ARCHIVE_OK);
        REQUIRE(archive_write_data(a, f.content.data(), f.content.size()) == static_cast<la_ssize_t>(f.content.size()));
        archive_entry_free(e);
    }
    REQUIRE(archive_write_close(a) == ARCHIVE_OK);
    archive_write_free(a);
    return out;
}

}  // namespace redist_test
