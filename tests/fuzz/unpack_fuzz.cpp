// libFuzzer target for redist::stream_unpacker: hostile archive bytes go
// through the real unpack (decoder and extractor threads, libarchive, the
// entry-name checks) into a stage on disk.
//
// Input layout: byte 0 selects how the rest is read,
//   bits 0-1  format: 0 tar.xz, 1 plain tar (fed as tar.gz: that reader
//             auto-detects gzip/zstd/xz/bzip2/none), 2 zip, 3 tar.zst
//   bit  2    strip_top_level off
//   bits 3-7  write() chunk size: 1 << (bits % 17) bytes, to vary where the
//             bytes are cut
// and bytes 1.. are the archive (scripts/make_fuzz_seeds.py writes seeds so).
//
// The stage lives at <sandbox>/a/b/c/stage, with <sandbox> a fresh directory
// of this process, so that an entry escaping by a few "../" lands somewhere
// the walk below sees. After every input the target checks, and aborts
// (a crash for libFuzzer) otherwise:
//   - nothing exists in the sandbox outside the stage (the zip spool
//     "<stage>.zip.part" included: it must be gone after finish());
//   - inside the stage: only regular files, directories and symlinks; no
//     setuid/setgid bit; every symlink resolves inside the stage; no regular
//     file has a hard link outside the stage (st_nlink equals the number of
//     its names in the stage);
//   - a success lists only relative, ".."-free paths, each present with its kind;
//   - a failure is bad_archive, unsafe_archive or filesystem, renders as one
//     line, and a failed write() is reported again by finish().
// Then the stage is emptied for the next input.
//
// Disk use is bounded: RLIMIT_FSIZE caps every file the process writes (a
// small input can expand to gigabytes), and the smoke test sets -max_len.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "archive/unpack.hpp"
#include "fuzz_support.hpp"
#include "redist/budget.hpp"

namespace fs = std::filesystem;
using fuzz::require;

namespace {

constexpr rlim_t kMaxFileBytes = 64u << 20;

struct sandbox {
    std::string root;   // <tmp>/redist-unpack-fuzz.XXXXXX
    std::string stage;  // <root>/a/b/c/stage
};

sandbox* g_box = nullptr;
// One run budget for every input, of four threads whatever the machine: xz
// blocks and zstd frames then decode on its pool (zstd frames need three
// threads or more), as in a run on a larger machine.
std::shared_ptr<redist::run_budget>* g_budget = nullptr;

// Lists a directory's entries (not "." and ".."). The directory is made
// readable and searchable first: an archive may create it 0000.
std::vector<std::string> list_dir(const std::string& dir) {
    ::chmod(dir.c_str(), 0700);
    std::vector<std::string> names;
    DIR* d = ::opendir(dir.c_str());
    require(d != nullptr);
    while (const dirent* e = ::readdir(d)) {
        const std::string_view n = e->d_name;
        if (n != "." && n != "..") names.emplace_back(n);
    }
    ::closedir(d);
    return names;
}

// Removes a tree without following symlinks, whatever its modes.
void remove_tree(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        for (const auto& n : list_dir(path)) remove_tree(path + "/" + n);
        require(::rmdir(path.c_str()) == 0);
    } else {
        require(::unlink(path.c_str()) == 0);
    }
}

// Lexically resolves a symlink target against the link's directory (both
// stage-relative, '/'-separated); false if it leaves the stage.
bool target_inside(const std::string& link_rel, const std::string& target) {
    if (target.empty() || target.front() == '/') return false;
    std::vector<std::string> parts;
    const auto slash = link_rel.rfind('/');
    std::string joined = (slash == std::string::npos ? std::string() : link_rel.substr(0, slash + 1)) + target;
    std::size_t start = 0;
    while (start <= joined.size()) {
        auto end = joined.find('/', start);
        if (end == std::string::npos) end = joined.size();
        const std::string seg = joined.substr(start, end - start);
        if (seg == "..") {
            if (parts.empty()) return false;
            parts.pop_back();
        } else if (!seg.empty() && seg != ".") {
            parts.push_back(seg);
        }
        start = end + 1;
    }
    return true;
}

struct stage_walk {
    std::map<std::pair<dev_t, ino_t>, std::pair<nlink_t, nlink_t>> links;  // inode -> (st_nlink, names seen)
};

void check_stage_tree(const std::string& root, const std::string& rel, stage_walk& walk) {
    const std::string path = rel.empty() ? root : root + "/" + rel;
    struct stat st {};
    require(::lstat(path.c_str(), &st) == 0);
    require((st.st_mode & (S_ISUID | S_ISGID)) == 0);
    if (S_ISDIR(st.st_mode)) {
        for (const auto& n : list_dir(path)) check_stage_tree(root, rel.empty() ? n : rel + "/" + n, walk);
    } else if (S_ISLNK(st.st_mode)) {
        std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
        const auto n = ::readlink(path.c_str(), target.data(), target.size());
        require(n >= 0 && static_cast<std::size_t>(n) < target.size());
        target.resize(static_cast<std::size_t>(n));
        require(target_inside(rel, target));
    } else {
        require(S_ISREG(st.st_mode));  // no device nodes, FIFOs or sockets
        auto& seen = walk.links[{st.st_dev, st.st_ino}];
        seen.first = st.st_nlink;
        ++seen.second;
    }
}

// Everything in the sandbox must be the chain a/b/c/stage and what is below
// the stage; then the stage's own contents are checked.
void check_sandbox(const sandbox& box) {
    std::string dir = box.root;
    for (const char* step : {"a", "b", "c"}) {
        const auto names = list_dir(dir);
        require(names.size() == 1 && names.front() == step);
        dir += std::string("/") + step;
    }
    const auto names = list_dir(dir);
    require(names.size() == 1 && names.front() == "stage");
    stage_walk walk;
    check_stage_tree(box.stage, "", walk);
    for (const auto& [inode, counts] : walk.links) require(counts.first == counts.second);
}

bool relative_clean(std::string_view p) {
    if (p.empty() || p.front() == '/') return false;
    std::size_t start = 0;
    while (true) {
        const auto end = p.find('/', start);
        const auto seg = p.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
        if (seg.empty() || seg == "." || seg == "..") return false;
        if (end == std::string_view::npos) return true;
        start = end + 1;
    }
}

void check_entries(const sandbox& box, const std::vector<redist::unpacked_entry>& entries) {
    for (const auto& e : entries) {
        require(relative_clean(e.path));
        struct stat st {};
        require(::lstat((box.stage + "/" + e.path).c_str(), &st) == 0);
        switch (e.kind) {
            case redist::entry_kind::directory: require(S_ISDIR(st.st_mode)); break;
            case redist::entry_kind::symlink: require(S_ISLNK(st.st_mode)); break;
            case redist::entry_kind::regular:
            case redist::entry_kind::hardlink: require(S_ISREG(st.st_mode)); break;
        }
    }
}

void check_failure(const redist::error& err) {
    require(err.code == redist::error_code::bad_archive || err.code == redist::error_code::unsafe_archive ||
            err.code == redist::error_code::filesystem);
    require(!err.message.empty());
    const std::string line = err.describe();
    require(line.find('\n') == std::string::npos && line.find('\r') == std::string::npos);
}

void remove_sandbox() {
    if (g_box != nullptr) remove_tree(g_box->root);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // A write past the cap fails with EFBIG instead of killing the process.
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{kMaxFileBytes, kMaxFileBytes};
    require(::setrlimit(RLIMIT_FSIZE, &limit) == 0);

    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/redist-unpack-fuzz.XXXXXX";
    require(::mkdtemp(templ.data()) != nullptr);
    g_box = new sandbox{templ, templ + "/a/b/c/stage"};
    auto budget = redist::make_run_budget(redist::run_limits{4, std::uint64_t{256} << 20});
    require(budget.ok());
    g_budget = new std::shared_ptr<redist::run_budget>(std::move(budget).value());
    fs::create_directories(g_box->stage);
    std::atexit(remove_sandbox);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const sandbox& box = *g_box;
    const std::uint8_t control = data[0];
    static constexpr redist::archive_format kFormats[] = {redist::archive_format::tar_xz,
                                                          redist::archive_format::tar_gz, redist::archive_format::zip,
                                                          redist::archive_format::tar_zst};

    redist::unpack_options options;
    options.format = kFormats[control & 3u];
    options.strip_top_level = (control & 4u) == 0;
    options.decoder_threads = 2;
    options.decoder_memlimit = 64u << 20;
    options.budget = *g_budget;
    options.source = "fuzz://archive";
    const std::size_t chunk = std::size_t{1} << ((control >> 3) % 17);

    const auto* bytes = reinterpret_cast<const std::byte*>(data + 1);
    const std::size_t length = size - 1;
    {
        auto started = redist::stream_unpacker::start(box.stage, options);
        if (!started.ok()) {
            // Only the filesystem can refuse a valid format here.
            require(started.error_value().code == redist::error_code::filesystem);
        } else {
            auto& unpacker = *started.value();
            std::optional<redist::error> write_failure;
            for (std::size_t pos = 0; pos < length && !write_failure; pos += chunk) {
                auto w = unpacker.write(bytes + pos, std::min(chunk, length - pos));
                if (!w.ok()) write_failure = w.error_value();
            }
            const auto finished = unpacker.finish();
            if (write_failure) {
                check_failure(*write_failure);
                require(!finished.ok() && finished.error_value().code == write_failure->code);
            } else if (finished.ok()) {
                check_entries(box, finished.value());
            } else {
                check_failure(finished.error_value());
            }
        }
    }  // the unpacker's threads are joined here

    check_sandbox(box);
    for (const auto& n : list_dir(box.stage)) remove_tree(box.stage + "/" + n);
    return 0;
}
