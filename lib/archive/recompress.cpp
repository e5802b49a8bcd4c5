// A zstd copy of an xz archive's tar stream. See recompress.hpp.
#include "archive/recompress.hpp"

#include <lzma.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

#include "archive/sha256.hpp"
#include "archive/unpack.hpp"
#include "model/recompressed_sidecar.hpp"
#include "support/posix_file.hpp"

namespace redist {

namespace {

constexpr std::size_t kReadBytes = std::size_t{1} << 20;

struct lzma_stream_closer {
    lzma_stream stream = LZMA_STREAM_INIT;
    ~lzma_stream_closer() { lzma_end(&stream); }
};

using zstd_cctx = std::unique_ptr<ZSTD_CCtx, std::size_t (*)(ZSTD_CCtx*)>;

// The zstd side: tar bytes in, one frame per options.frame_bytes out. A
// frame is compressed in one call, so its header records its content size
// (a reader can place each frame's output before decoding it). Hashes the
// tar and the copy on the way.
class frame_writer {
public:
    frame_writer(ZSTD_CCtx* cctx, const recompress_options& options,
                 const std::function<result<void>(const std::byte*, std::size_t)>& write)
        : cctx_(cctx),
          options_(options),
          write_(write),
          out_(ZSTD_compressBound(options.frame_bytes)),
          list_bytes_(valid_piece_size(options.frame_bytes) && options.frame_bytes <= kMaxTarPieceBytes
                          ? options.frame_bytes
                          : 0),
          tar_list_(list_bytes_) {
        pending_.reserve(options.frame_bytes);
    }

    result<void> add(const std::byte* data, std::size_t size) {
        tar_hash_.update(data, size);
        if (list_bytes_ != 0) tar_list_.update(data, size);
        tar_size_ += size;
        while (size > 0) {
            const std::size_t n = std::min(size, options_.frame_bytes - pending_.size());
            pending_.insert(pending_.end(), data, data + n);
            data += n;
            size -= n;
            if (pending_.size() == options_.frame_bytes) REDIST_TRY_VOID(flush_frame());
        }
        return {};
    }

    result<recompressed> finish() {
        // An empty tar stream still gets one (empty) frame: a copy is never 0 bytes.
        if (!pending_.empty() || copy_size_ == 0) REDIST_TRY_VOID(flush_frame());
        return recompressed{tar_hash_.finish_hex(),
                            tar_size_,
                            copy_hash_.finish_hex(),
                            copy_size_,
                            list_bytes_,
                            list_bytes_ != 0 ? tar_list_.finish_hex() : std::string()};
    }

private:
    result<void> flush_frame() {
        const std::size_t n = ZSTD_compress2(cctx_, out_.data(), out_.size(), pending_.data(), pending_.size());
        if (ZSTD_isError(n)) return make_error(error_code::internal, std::string("zstd: ") + ZSTD_getErrorName(n));
        pending_.clear();
        copy_hash_.update(out_.data(), n);
        copy_size_ += n;
        return write_(out_.data(), n);
    }

    ZSTD_CCtx* cctx_;
    const recompress_options& options_;
    const std::function<result<void>(const std::byte*, std::size_t)>& write_;
    std::vector<std::byte> pending_;
    std::vector<std::byte> out_;
    const std::uint64_t list_bytes_;  // the hash list's piece size: a frame's tar bytes, or 0
    sha256_hasher tar_hash_;
    file_digester tar_list_;
    sha256_hasher copy_hash_;
    std::uint64_t tar_size_ = 0;
    std::uint64_t copy_size_ = 0;
};

result<void> start_xz(lzma_stream& stream, unsigned threads) {
    lzma_mt mt{};
    mt.threads = threads == 0 ? 1 : threads;
    mt.memlimit_threading = std::uint64_t{1} << 30;  // more threads only while they fit in 1 GiB
    mt.memlimit_stop = UINT64_MAX;                   // the input was verified against its manifest
    if (lzma_stream_decoder_mt(&stream, &mt) != LZMA_OK)
        return make_error(error_code::internal, "cannot start the xz decoder");
    return {};
}

result<zstd_cctx> start_zstd(const recompress_options& options) {
    zstd_cctx cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
    if (!cctx) return make_error(error_code::internal, "cannot start the zstd compressor");
    const auto set = [&](ZSTD_cParameter p, int v) { return !ZSTD_isError(ZSTD_CCtx_setParameter(cctx.get(), p, v)); };
    if (!set(ZSTD_c_compressionLevel, options.level) || !set(ZSTD_c_checksumFlag, 1))
        return make_error(error_code::internal, "cannot configure the zstd compressor");
    // Worker threads are optional: a libzstd built without them refuses, and one thread is fine.
    if (options.threads > 1) set(ZSTD_c_nbWorkers, static_cast<int>(options.threads));
    return cctx;
}

}  // namespace

result<recompressed> recompress_xz_to_zstd(const std::filesystem::path& xz_path,
                                           const std::function<result<void>(const std::byte*, std::size_t)>& write,
                                           const recompress_options& options) {
    if (options.frame_bytes == 0) return make_error(error_code::usage, "frame size 0");
    REDIST_TRY(unique_fd fd, open_regular(xz_path, follow_links::no));
    lzma_stream_closer xz;
    REDIST_TRY_VOID(start_xz(xz.stream, options.threads));
    REDIST_TRY(zstd_cctx cctx, start_zstd(options));
    frame_writer frames(cctx.get(), options, write);

    std::vector<std::byte> in(kReadBytes);
    std::vector<std::byte> tar(kReadBytes);
    lzma_action action = LZMA_RUN;
    for (;;) {
        if (xz.stream.avail_in == 0 && action == LZMA_RUN) {
            REDIST_TRY(const std::size_t n, read_some(fd.get(), in.data(), in.size(), xz_path));
            xz.stream.next_in = reinterpret_cast<const std::uint8_t*>(in.data());
            xz.stream.avail_in = n;
            if (n == 0) action = LZMA_FINISH;
        }
        xz.stream.next_out = reinterpret_cast<std::uint8_t*>(tar.data());
        xz.stream.avail_out = tar.size();
        const lzma_ret ret = lzma_code(&xz.stream, action);
        const std::size_t produced = tar.size() - xz.stream.avail_out;
        if (produced > 0) REDIST_TRY_VOID(frames.add(tar.data(), produced));
        if (ret == LZMA_STREAM_END) break;
        if (ret != LZMA_OK)
            return make_error(error_code::bad_archive,
                              "not a valid xz stream (liblzma error " + std::to_string(static_cast<int>(ret)) + ")")
                .with_path(xz_path.string());
    }
    return frames.finish();
}

result<std::string> copy_tree_digest(const std::filesystem::path& copy_path, const std::filesystem::path& stage_dir,
                                     const recompressed& made) {
    REDIST_TRY(unique_fd fd, open_regular(copy_path, follow_links::no));
    unpack_options options;
    options.format = archive_format::tar_zst;
    options.tar_piece_bytes = made.tar_piece_bytes;
    options.source = copy_path.string();
    REDIST_TRY(auto unpacker, stream_unpacker::start(stage_dir, options));
    std::vector<std::byte> in(kReadBytes);
    REDIST_TRY_VOID(read_each_block(fd.get(), in, copy_path,
                                    [&](const std::byte* data, std::size_t n) { return unpacker->write(data, n); }));
    REDIST_TRY(const auto entries, unpacker->finish());
    const std::string& expected = made.tar_piece_bytes != 0 ? made.tar_list_sha256 : made.tar_sha256;
    if (unpacker->tar_digest() != expected)
        return make_error(error_code::integrity, "the copy does not decode to the original's tar")
            .with_path(copy_path.string())
            .with_expected_actual(expected, unpacker->tar_digest());
    return tree_digest(entries);
}

}  // namespace redist
