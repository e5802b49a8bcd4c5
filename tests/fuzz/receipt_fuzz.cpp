// libFuzzer target for redist::receipt_from_json. Receipts live in
// <prefix>/.redist/receipts/ and decide what `remove` deletes, so a planted or
// corrupted one is hostile input.
//
// Contract checked on every input: a failure is one clean bad_manifest line
// naming the source; a success round-trips through receipt_to_json, and a
// file recorded by a piece list has a valid piece size and digest, and every
// files[].path is relative and free of '..' (the reader refuses the rest).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "archive/sha256.hpp"
#include "fuzz_support.hpp"
#include "model/manifest.hpp"
#include "redist/prefix.hpp"
#include "store/receipts.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view json(reinterpret_cast<const char*>(data), size);
    const auto parsed = redist::receipt_from_json(json, "fuzz-receipt.json");
    if (!parsed.ok()) {
        fuzz::require_clean_error(parsed.error_value(), redist::error_code::bad_manifest, "fuzz-receipt.json");
        return 0;
    }
    // A file recorded by a piece list says how: a valid piece size and a digest.
    for (const auto& f : parsed.value().files) {
        if (f.piece_size != 0) fuzz::require(redist::valid_piece_size(f.piece_size) && redist::is_sha256_hex(f.sha256));
        const std::filesystem::path path(f.path);
        fuzz::require(!f.path.empty() && path.is_relative());
        for (const auto& part : path) fuzz::require(part != "..");
    }
    const std::string written = redist::receipt_to_json(parsed.value());
    const auto reread = redist::receipt_from_json(written, "rewritten.json");
    fuzz::require(reread.ok());
    fuzz::require(redist::receipt_to_json(reread.value()) == written);
    return 0;
}
