// libFuzzer target for redist::stream_unpacker (built by tests/fuzz/CMakeLists.txt
// with clang++ -fsanitize=fuzzer,address,undefined).
//
// Input: byte 0 picks the format (tar.xz; tar, also through libarchive's
// gzip/zstd/bzip2 filters; zip), byte 1 the write chunk size, the rest is the
// archive. It goes through the real unpacker into a fresh stage inside a box
// directory. Besides "never crash, never hang, no UB", every input must leave
// the box holding nothing but the stage, and a successful unpack must hold
// only regular files, directories and symlinks whose targets stay inside the
// stage, nothing under .redist/, and entries that match the disk.
// A violated contract aborts, which libFuzzer reports as a crash.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "redist/unpack.hpp"
#include "redist/verify.hpp"

namespace fs = std::filesystem;

namespace {

void require(bool condition) {
    if (!condition) std::abort();
}

const fs::path& box() {
    static const fs::path dir = [] {
        const char* tmp = std::getenv("TMPDIR");
        fs::path d = fs::path(tmp && *tmp ? tmp : "/tmp") / ("redist_unpack_fuzz." + std::to_string(::getpid()));
        fs::remove_all(d);
        fs::create_directories(d / "box");
        return fs::canonical(d / "box");
    }();
    return dir;
}

bool inside(const fs::path& root, const fs::path& p) {
    const auto rel = p.lexically_normal().lexically_relative(root);
    return !rel.empty() && *rel.begin() != "..";
}

void check_stage(const fs::path& stage, const std::vector<redist::unpacked_entry>& entries) {
    require(!fs::exists(fs::symlink_status(stage / ".redist")));
    for (auto it = fs::recursive_directory_iterator(stage); it != fs::recursive_directory_iterator(); ++it) {
        const auto st = it->symlink_status();
        if (fs::is_symlink(st)) {
            const fs::path target = fs::read_symlink(it->path());
            require(target.is_relative());
            require(inside(stage, it->path().parent_path() / target));
        } else {
            require(fs::is_regular_file(st) || fs::is_directory(st));
        }
    }
    for (const auto& e : entries) {
        if (e.kind != redist::entry_kind::regular && e.kind != redist::entry_kind::hardlink) continue;
        std::ifstream in(stage / e.path, std::ios::binary);
        const std::string content((std::istreambuf_iterator<char>(in)), {});
        require(content.size() == e.size);
        require(redist::sha256_hex(content) == e.sha256);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    const fs::path stage = box() / "stage";
    std::error_code ec;
    fs::remove_all(stage, ec);
    fs::create_directory(stage);

    redist::unpack_options options;
    switch (data[0] % 3) {
        case 0: options.format = redist::archive_format::tar_xz; break;
        case 1: options.format = redist::archive_format::tar_gz; break;  // any filter, or none: plain tar
        default: options.format = redist::archive_format::zip; break;
    }
    options.decoder_threads = 1;
    options.max_output_bytes = 8u << 20;  // the cap is part of what is tested, and keeps runs fast
    options.source = "fuzz://input";
    const std::size_t chunk = 1 + data[1] * 97u;
    data += 2;
    size -= 2;

    auto started = redist::stream_unpacker::start(stage, options);
    require(started.ok());
    auto& unpacker = *started.value();
    bool failed = false;
    for (std::size_t pos = 0; pos < size && !failed; pos += chunk)
        failed = !unpacker.write(reinterpret_cast<const std::byte*>(data + pos), std::min(chunk, size - pos)).ok();
    auto result = unpacker.finish();
    require(!(failed && result.ok()));
    if (result.ok()) {
        check_stage(stage, *result);
    } else {
        const std::string line = result.error_value().describe();
        require(line.find('\n') == std::string::npos);
        for (const char c : result.error_value().path) require(static_cast<unsigned char>(c) >= 0x20);
    }
    // Nothing but the stage in the box (the zip spool is gone, nothing escaped).
    for (const auto& entry : fs::directory_iterator(box())) require(entry.path().filename() == "stage");
    return 0;
}
