// libFuzzer target for the cache's tree list (<cache>/trees/<hex>/.redist-tree.json,
// lib/store/tree_list.hpp): parse_tree_list and valid_tree_list. With --shared-cache
// another user can write that file, and materialize_tree places files by it,
// so it is hostile input.
//
// Contract checked on every input: no crash, no UB; what parses is written
// back and parses to the same text; what is valid names only plain relative
// paths confined to the tree, files with a 64-hex-digit digest and a valid
// piece size, and symlinks with relative targets.
#include <cstddef>
#include <cstdint>
#include <string>

#include "archive/sha256.hpp"
#include "fuzz_support.hpp"
#include "model/manifest.hpp"
#include "store/tree_list.hpp"
#include "support/safe_path.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const auto list = redist::parse_tree_list(text);
    if (!list) return 0;
    const std::string written = redist::tree_list_json(*list);
    const auto reread = redist::parse_tree_list(written);
    fuzz::require(reread.has_value());
    fuzz::require(redist::tree_list_json(*reread) == written);
    if (!redist::valid_tree_list(*list, list->archive)) return 0;
    for (const auto& record : list->files) {
        const auto& f = record.file;
        fuzz::require(redist::relative_path_problem(f.path) == nullptr);
        fuzz::require(redist::confined_join("/cache/trees/x", f.path).ok());
        if (f.kind == redist::entry_kind::symlink) {
            fuzz::require(!f.link_target.empty() && f.link_target.front() != '/');
        } else {
            fuzz::require(redist::is_sha256_hex(f.sha256));
            fuzz::require(redist::valid_piece_size(f.piece_size));
        }
    }
    return 0;
}
