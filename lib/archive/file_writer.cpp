// archive/file_writer.cpp — file_job: see file_writer.hpp.
#include "archive/file_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <new>

#include "archive/entry_names.hpp"  // printable_entry
#include "support/posix_file.hpp"

namespace redist::unpacking {
namespace {

// Feeds `count` zero bytes to the hasher: sparse-file holes read back as zeros.
template <class Hasher>
void hash_zeros(Hasher& hasher, std::uint64_t count) {
    static const std::byte zeros[64 * 1024] = {};
    while (count > 0) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(count, sizeof zeros));
        hasher.update(zeros, n);
        count -= n;
    }
}

}  // namespace

file_job::file_job(std::shared_ptr<write_state> state, unique_fd fd, file_meta meta)
    : state_(std::move(state)), fd_(std::move(fd)), meta_(std::move(meta)) {
    // Split files have a declared size (see write_regular).
    if (meta_.split)
        pieces_ = std::vector<piece_lane>((*meta_.declared_size + receipt_piece_bytes - 1) / receipt_piece_bytes);
}

result<void> file_job::write_now(const std::byte* data, std::size_t size, std::uint64_t offset) {
    constexpr std::size_t kSlice = 256u << 10;
    while (size > 0) {
        const std::size_t n = std::min(size, kSlice);
        hash_at(data, n, offset);
        REDIST_TRY_VOID(write_at(data, n, offset));
        data += n;
        size -= n;
        offset += n;
    }
    return {};
}

void file_job::add(block_ptr block) {
    // Inline mode: the data went through write_now; only the end marker comes here.
    if (state_->inline_writes) return end_of_data();
    if (meta_.split) return add_split(std::move(block));
    if (enqueue(strand_, std::move(block))) state_->pool->post([self = shared_from_this()] { self->drain(); });
}

error file_job::os_error(const char* what, int err) const {
    return errno_error(what, printable_entry(meta_.path), err).with_source(state_->source);
}

bool file_job::enqueue(strand& s, block_ptr block) {
    std::lock_guard lock(mutex_);
    s.queue.push_back(std::move(block));
    return !std::exchange(s.scheduled, true);
}

bool file_job::dequeue(strand& s, block_ptr& block) {
    std::lock_guard lock(mutex_);
    if (s.queue.empty()) {
        s.scheduled = false;
        return false;
    }
    block = std::move(s.queue.front());
    s.queue.pop_front();
    return true;
}

void file_job::drain() noexcept {
    for (;;) {
        block_ptr block;
        if (!dequeue(strand_, block)) return;
        if (!block) return end_of_data();  // nothing follows the end marker
        guarded([&]() -> result<void> {
            hash_at(block->data(), block->size, block->offset);
            return write_block(*block);
        });
    }
}

void file_job::add_split(block_ptr block) {
    if (!block) return release_one();  // the extractor's count; the last task finishes the file
    if (block->size == 0) return;
    const std::uint64_t end = block->offset + block->size;
    // The pieces were laid out from the declared size (see the constructor).
    if (end > pieces_.size() * receipt_piece_bytes) {
        state_->on_error(make_error(error_code::bad_archive, "file data beyond the size in its header")
                             .with_path(printable_entry(meta_.path))
                             .with_source(state_->source));
        return;
    }
    data_end_ = std::max(data_end_, end);
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    state_->pool->post([self = shared_from_this(), block]() mutable {
        self->guarded([&] { return self->write_block(*block); });
        block.reset();  // before the file can finish: a slice holds decoder memory
        self->release_one();
    });
    for (std::uint64_t k = block->offset / receipt_piece_bytes; k * receipt_piece_bytes < end; ++k) {
        if (!enqueue(pieces_[k].blocks, block)) continue;
        outstanding_.fetch_add(1, std::memory_order_relaxed);
        state_->pool->post([self = shared_from_this(), k] {
            self->drain_piece(k);
            self->release_one();
        });
    }
}

void file_job::drain_piece(std::uint64_t k) noexcept {
    piece_lane& lane = pieces_[k];
    const std::uint64_t piece_begin = k * receipt_piece_bytes;
    const std::uint64_t piece_end = piece_begin + receipt_piece_bytes;
    for (;;) {
        block_ptr block;
        if (!dequeue(lane.blocks, block)) return;
        guarded([&]() -> result<void> {
            const std::uint64_t from = std::max(block->offset, piece_begin);
            const std::uint64_t to = std::min(block->offset + block->size, piece_end);
            if (!lane.hasher) lane.hasher.emplace();
            hash_zeros(*lane.hasher, from - (piece_begin + lane.hashed));
            lane.hasher->update(block->data() + (from - block->offset), static_cast<std::size_t>(to - from));
            lane.hashed = to - piece_begin;
            return {};
        });
    }
}

result<void> file_job::finish_pieces() {
    size_ = std::max(data_end_, meta_.declared_size.value_or(0));
    const std::uint64_t count = std::max<std::uint64_t>(1, (size_ + receipt_piece_bytes - 1) / receipt_piece_bytes);
    std::vector<std::array<unsigned char, 32>> digests;
    digests.reserve(count);
    for (std::uint64_t k = 0; k < count; ++k) {
        piece_lane& lane = pieces_[k];
        if (!lane.hasher) lane.hasher.emplace();
        const std::uint64_t length = std::min(receipt_piece_bytes, size_ - k * receipt_piece_bytes);
        hash_zeros(*lane.hasher, length - lane.hashed);
        digests.push_back(lane.hasher->finish_bytes());
        lane.hasher.reset();
    }
    sha256_ = piece_list_hex(digests);
    return {};
}

void file_job::hash_at(const std::byte* data, std::size_t size, std::uint64_t offset) {
    hash_zeros(hasher_, offset - hashed_);
    hasher_.update(data, size);
    hashed_ = offset + size;
}

void file_job::end_of_data() noexcept {
    guarded([&] { return finish_hash(); });
    release_one();
}

result<void> file_job::write_at(const std::byte* data, std::size_t size, std::uint64_t offset) const {
    std::size_t done = 0;
    while (done < size) {
        const ssize_t n = ::pwrite(fd_.get(), data + done, size - done, static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return os_error("cannot write", errno);
        }
        done += static_cast<std::size_t>(n);
    }
    return {};
}

result<void> file_job::finish_hash() {
    data_end_ = hashed_;
    if (meta_.declared_size && *meta_.declared_size > hashed_) {
        hash_zeros(hasher_, *meta_.declared_size - hashed_);
        hashed_ = *meta_.declared_size;
    }
    size_ = hashed_;
    sha256_ = hasher_.finish_hex();
    return {};
}

void file_job::release_one() noexcept {
    if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (meta_.split) guarded([&] { return finish_pieces(); });
    guarded([&] { return finalize(); });
    fd_.reset();
    state_->file_finished();
}

result<void> file_job::finalize() {
    if (size_ > data_end_ && ::ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0)
        return os_error("cannot extend", errno);
    if (::fchmod(fd_.get(), static_cast<mode_t>(meta_.mode)) != 0) return os_error("cannot set mode", errno);
    if (::futimens(fd_.get(), meta_.times) != 0) return os_error("cannot set times", errno);
    // close() may be where NFS reports a failed write.
    if (::close(fd_.release()) != 0 && errno != EINTR) return os_error("cannot write", errno);
    return {};
}

}  // namespace redist::unpacking
