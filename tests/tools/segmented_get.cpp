// segmented_get — test and benchmark driver for lib/segmented_download
// (fetch's integration is the lead's): downloads URL into a spool, hashing
// the in-order stream, and prints one JSON line of what happened.
//
//   segmented_get URL SIZE (--part FILE | --temp DIR) [--connections N]
//                 [--retries N] [--abort-after BYTES] [--min-total BYTES]
//                 [--min-segment BYTES] [--max-segment BYTES] [--stdout 1]
//
// --stdout 1: also write the in-order stream to stdout (for `| xz -dc`); the
// JSON line then goes to stderr.
// --abort-after: SIGKILL itself once that many bytes were delivered (a kill in the
// middle, for the resume tests). Exit codes: 0 ok, 1 download failed, 2 usage.
#include <curl/curl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "archive/sha256.hpp"
#include "transport/segmented_download.hpp"

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: segmented_get URL SIZE (--part FILE | --temp DIR) [options]\n");
        return 2;
    }
    const std::string url = argv[1];
    const std::uint64_t size = std::strtoull(argv[2], nullptr, 10);
    redist::spool_location spool;
    redist::segment_options segments;
    int retries = 3;
    std::uint64_t abort_after = 0;
    bool to_stdout = false;
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string opt = argv[i];
        const char* value = argv[i + 1];
        if (opt == "--part") spool.part_file = value;
        else if (opt == "--temp") spool.temp_dir = value;
        else if (opt == "--connections") segments.connections = std::atoi(value);
        else if (opt == "--retries") retries = std::atoi(value);
        else if (opt == "--stdout") to_stdout = std::string(value) == "1";
        else if (opt == "--abort-after") abort_after = std::strtoull(value, nullptr, 10);
        else if (opt == "--min-total") segments.min_total_bytes = std::strtoull(value, nullptr, 10);
        else if (opt == "--min-segment") segments.min_segment_bytes = std::strtoull(value, nullptr, 10);
        else if (opt == "--max-segment") segments.max_segment_bytes = std::strtoull(value, nullptr, 10);
        else {
            std::fprintf(stderr, "segmented_get: unknown option %s\n", opt.c_str());
            return 2;
        }
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    redist::transfer_options transfer;
    transfer.connect_timeout_seconds = 10;
    transfer.stall_timeout_seconds = 20;
    redist::sha256_hasher hasher;
    std::uint64_t delivered = 0;
    redist::download_callbacks callbacks;
    // A second response after bytes came: the file changed, and the download starts over from byte 0.
    callbacks.on_response = [&](const redist::response_info&) -> redist::result<void> {
        if (delivered == 0) return {};
        if (to_stdout)
            return redist::make_error(redist::error_code::network, "the file changed; stdout cannot start over");
        hasher = redist::sha256_hasher();
        delivered = 0;
        return {};
    };
    callbacks.on_data = [&](const std::byte* data, std::size_t n) -> redist::result<void> {
        hasher.update(data, n);
        if (to_stdout && std::fwrite(data, 1, n, stdout) != n)
            return redist::make_error(redist::error_code::filesystem, "cannot write to stdout");
        delivered += n;
        if (abort_after > 0 && delivered >= abort_after)
            ::kill(::getpid(), SIGKILL);  // no exit hooks run, sanitizers' neither
        return {};
    };
    const auto retry = [&](int attempt, const redist::error&,
                           const redist::transfer_failure_info& info) -> std::optional<std::chrono::milliseconds> {
        if (!info.transient || attempt > retries) return std::nullopt;
        return std::chrono::milliseconds(50 * attempt);
    };
    const auto start = std::chrono::steady_clock::now();
    auto r = redist::segmented_download(url, size, transfer, segments, spool, callbacks, retry);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!r.ok()) {
        std::fprintf(stderr, "segmented_get: %s\n", r.error_value().describe().c_str());
        return 1;
    }
    std::fflush(stdout);
    std::fprintf(to_stdout ? stderr : stdout,
                 "{\"sha256\":\"%s\",\"bytes\":%llu,\"segmented\":%s,\"reused\":%llu,\"received\":%llu,"
                 "\"requests\":%d,\"retries\":%d,\"seconds\":%.3f}\n",
                 hasher.finish_hex().c_str(), static_cast<unsigned long long>(delivered),
                 r->segmented ? "true" : "false", static_cast<unsigned long long>(r->reused_bytes),
                 static_cast<unsigned long long>(r->received_bytes), r->requests, r->retries, seconds);
    curl_global_cleanup();
    return 0;
}
