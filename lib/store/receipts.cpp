// Receipts: their JSON form, and reading every receipt of a prefix.
#include <sys/stat.h>

#include <algorithm>
#include <tuple>

#include "archive/sha256.hpp"
#include "model/manifest.hpp"
#include "redist/json_writer.hpp"
#include "store/prefix_state.hpp"
#include "store/receipts.hpp"
#include "support/json_reader.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"

namespace fs = std::filesystem;

namespace redist {

std::string receipt_rel_path(std::string_view product, std::string_view component) {
    return std::string(receipts_rel) + "/" + std::string(product) + "/" + std::string(component) + ".json";
}

std::string legacy_receipt_rel_path(std::string_view component) {
    return std::string(receipts_rel) + "/" + std::string(component) + ".json";
}

namespace {

// A receipt is read back from disk: a bound far above any real one (a CUDA
// component lists a few thousand files, ~200 bytes each), far below what would hurt.
constexpr std::uint64_t max_receipt_bytes = 64ull << 20;

const char* kind_name(entry_kind kind) {
    switch (kind) {
        case entry_kind::regular: return "file";
        case entry_kind::directory: return "directory";
        case entry_kind::symlink: return "symlink";
        case entry_kind::hardlink: return "hardlink";
    }
    return "file";
}

}  // namespace

std::string receipt_to_json(const receipt& r) {
    json_writer w(2);
    w.begin_object();
    // Schema 2: some file is recorded by a piece list ("sha256_pieces"), which
    // a reader of schema 1 would take for a file without a digest.
    // Only regular files count: a symlink writes no digest, so a piece size
    // on one would make the schema differ on the next write.
    const bool pieces = std::any_of(r.files.begin(), r.files.end(),
                                    [](const auto& f) { return f.kind == entry_kind::regular && f.piece_size != 0; });
    w.field("schema", pieces ? 2 : 1);
    w.field("product", r.product);
    w.field("release_label", r.release_label);
    w.field("component", r.component);
    w.field("component_version", r.component_version);
    w.field("platform", r.platform);
    w.field("variant", r.variant);
    w.field("url", sanitize_url(r.url));  // a record never holds credentials
    w.field("archive_sha256", r.archive_sha256);
    w.field("archive_size", r.archive_size);
    if (!r.copy_sha256.empty()) {  // absent unless a mirror's recompressed copy was installed
        w.field("copy_sha256", r.copy_sha256);
        w.field("tar_sha256", r.tar_sha256);
    }
    w.field("installed_at", r.installed_at);
    w.key("files").begin_array();
    for (const auto& f : r.files) {
        w.begin_object();
        w.field("path", f.path);
        w.field("type", kind_name(f.kind));
        if (f.kind == entry_kind::symlink) {
            w.field("target", f.link_target);
        } else {
            w.field("size", f.size);
            if (f.piece_size == 0) {
                w.field("sha256", f.sha256);
            } else {
                w.field("sha256_pieces", f.sha256);
                w.field("piece_size", f.piece_size);
            }
        }
        w.field("mode", f.mode);
        w.end_object();
    }
    w.end_array();
    if (!r.exclude.empty() || !r.excluded.empty()) {  // absent in every receipt without --exclude
        w.key("exclude").begin_array();
        for (const auto& g : r.exclude) w.value(g);
        w.end_array();
        w.key("excluded").begin_array();
        for (const auto& path : r.excluded) w.value(path);
        w.end_array();
    }
    w.end_object();
    return w.str() + "\n";
}

namespace {

json::value_fn read_into(std::string& out) {
    return [&out](json::value& v) -> result<void> { return v.get(out); };
}

// A name that may be empty (labels of old manifests are).
json::value_fn read_optional_name(std::string& out, std::string_view what) {
    return [&out, what](json::value& v) -> result<void> { return v.get_name_or_empty(out, what); };
}

// A recompressed copy's digests: 64 hex digits.
json::value_fn read_digest(std::string& out) {
    return [&out](json::value& v) -> result<void> {
        REDIST_TRY_VOID(v.get(out));
        if (!is_sha256_hex(out)) return result<void>(v.bad("not a SHA-256 (64 hex digits)"));
        return result<void>();
    };
}

// An array of strings; with `paths`, each a plain relative path.
json::value_fn read_strings(std::vector<std::string>& out, bool paths) {
    return [&out, paths](json::value& v) -> result<void> {
        return v.for_each([&out, paths](json::value& item) -> result<void> {
            std::string s;
            REDIST_TRY_VOID(paths ? item.get_relative_path(s) : item.get(s));
            out.push_back(std::move(s));
            return result<void>();
        });
    };
}

result<void> read_installed_file(json::value& item, installed_file& f) {
    std::string type = "file";
    std::uint64_t mode = 0;
    std::string pieces;
    bool has_piece_size = false;
    auto read = item.read_object({
        {"path",
         [&](json::value& v) -> result<void> {
             // A receipt path must stay inside the prefix and out of .redist/,
             // or remove/verify could be aimed elsewhere.
             REDIST_TRY_VOID(v.get_relative_path(f.path));
             if (first_segment(f.path) == state_dir_name)
                 return result<void>(v.bad("unsafe path in receipt: inside .redist/"));
             return result<void>();
         },
         true},
        {"type", read_into(type)},
        {"target", read_into(f.link_target)},
        {"sha256", read_into(f.sha256)},
        {"sha256_pieces", read_into(pieces)},
        {"piece_size",
         [&](json::value& v) -> result<void> {
             REDIST_TRY_VOID(v.get(f.piece_size));
             has_piece_size = true;
             if (f.piece_size == 0 || !valid_piece_size(f.piece_size))
                 return result<void>(v.bad("not a piece size (a power of two from 64 KiB to 1 GiB)"));
             return result<void>();
         }},
        {"size", [&](json::value& v) -> result<void> { return v.get(f.size); }},
        {"mode", [&](json::value& v) -> result<void> { return v.get(mode); }},
    });
    if (!read.ok()) return read;
    if (!pieces.empty() || has_piece_size) {
        if (!f.sha256.empty()) return item.bad("both sha256 and sha256_pieces");
        if (!has_piece_size) return item.bad("sha256_pieces without piece_size");
        if (pieces.empty()) return item.bad("piece_size without sha256_pieces");
        if (!is_sha256_hex(pieces)) return item.bad("sha256_pieces is not 64 hex digits");
        f.sha256 = std::move(pieces);
    }
    if (type == "file") f.kind = entry_kind::regular;
    else if (type == "symlink") f.kind = entry_kind::symlink;
    else return item.bad("unknown file type '" + printable(type, 32) + "'");
    if (mode > 07777) return item.bad("mode out of range");
    f.mode = static_cast<unsigned>(mode);
    return {};
}

}  // namespace

result<receipt> receipt_from_json(std::string_view text, std::string_view source) {
    receipt r;
    std::uint64_t schema = 1;
    auto read = json::read_document(
        text, source, "receipt",
        {{"schema", [&](json::value& v) -> result<void> { return v.get(schema); }},
         {"product", [&](json::value& v) -> result<void> { return v.get_name(r.product, "product"); }, true},
         {"release_label", read_optional_name(r.release_label, "release label")},
         {"component", [&](json::value& v) -> result<void> { return v.get_name(r.component, "component"); }, true},
         {"component_version", read_into(r.component_version)},
         {"platform", read_optional_name(r.platform, "platform")},
         {"variant",
          [&](json::value& v) -> result<void> { return v.get_optional_name(r.variant, "variant", /*empty_ok=*/true); }},
         {"url", read_into(r.url)},
         {"archive_sha256", read_into(r.archive_sha256)},
         {"archive_size", [&](json::value& v) -> result<void> { return v.get(r.archive_size); }},
         {"copy_sha256", read_digest(r.copy_sha256)},
         {"tar_sha256", read_digest(r.tar_sha256)},
         {"installed_at", read_into(r.installed_at)},
         {"files",
          [&](json::value& v) -> result<void> {
              return v.for_each([&](json::value& item) -> result<void> {
                  installed_file f;
                  REDIST_TRY_VOID(read_installed_file(item, f));
                  r.files.push_back(std::move(f));
                  return result<void>();
              });
          }},
         {"exclude", read_strings(r.exclude, false)},
         {"excluded", read_strings(r.excluded, true)}});
    if (!read.ok()) return std::move(read).error_value();
    if (schema != 1 && schema != 2)
        return make_error(error_code::bad_manifest, "unsupported receipt schema " + std::to_string(schema))
            .with_source(std::string(source))
            .with_json_path("schema");
    if (r.copy_sha256.empty() != r.tar_sha256.empty())
        return make_error(error_code::bad_manifest, "copy_sha256 and tar_sha256 go together")
            .with_source(std::string(source))
            .with_json_path(r.copy_sha256.empty() ? "tar_sha256" : "copy_sha256");
    return r;
}

namespace {

error corrupt_receipt(const fs::path& path, std::string message) {
    return make_error(error_code::bad_manifest, "corrupt receipt: " + std::move(message)).with_source(path.string());
}

// Reads one receipt file, which must be a regular file whose name matches
// its content (`product` empty for the legacy layout).
result<located_receipt> read_receipt_file(const fs::path& path, const std::string& product, const std::string& stem) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return errno_error("cannot read receipt", path, errno);
    if (!S_ISREG(st.st_mode)) return corrupt_receipt(path, "not a regular file");
    REDIST_TRY(const std::string text, read_file(path, max_receipt_bytes));
    REDIST_TRY(receipt r, receipt_from_json(text, path.string()));
    if (r.component != stem || (!product.empty() && r.product != product))
        return corrupt_receipt(path, "its product and component (" + r.product + ", " + r.component +
                                         ") do not match its file name");
    located_receipt out;
    out.rel_path = product.empty() ? legacy_receipt_rel_path(stem) : receipt_rel_path(product, stem);
    out.r = std::move(r);
    return out;
}

// The message of a receipt that cannot be read: which component it blocks,
// and how to repair it. Other components are not affected.
error blocked_component(error e, const std::string& product, const std::string& component) {
    const std::string who = product.empty() ? "component " + component
                                            : "component " + component + " of product " + product;
    e.message += " (" + who +
                 " is blocked until this is repaired: fetch it again, with --reinstall if its files were changed, "
                 "or delete the receipt to forget it)";
    return e;
}

}  // namespace

result<void> scan_located_receipts(const fs::path& prefix, std::vector<located_receipt>& out,
                                   std::vector<unreadable_receipt>& unreadable) {
    const fs::path dir = receipts_dir(prefix);
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(dir, ec))) return {};
    if (!is_directory_no_follow(dir)) return corrupt_receipt(dir, "the receipts directory is not a directory");
    // One receipt file (`product` empty for the legacy layout); a file that
    // is not <component>.json is skipped.
    const auto read_one = [&](const fs::path& p, const std::string& product) -> result<void> {
        const std::string name = p.filename().string();
        if (is_atomic_write_temp(name) || name.size() <= 5 || !name.ends_with(".json")) return {};
        const std::string stem = name.substr(0, name.size() - 5);
        if (name_problem(stem)) return corrupt_receipt(p, "not a component name");
        auto r = read_receipt_file(p, product, stem);
        if (r.ok()) {
            out.push_back(std::move(r).value());
            return {};
        }
        error e = blocked_component(std::move(r).error_value(), product, stem);
        if (e.source.empty() && e.path.empty()) e.source = p.string();
        unreadable.push_back({product, stem,
                              product.empty() ? legacy_receipt_rel_path(stem) : receipt_rel_path(product, stem),
                              std::move(e)});
        return {};
    };
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const fs::path& p = entry.path();
        std::error_code sec;
        if (!fs::is_directory(entry.symlink_status(sec))) {
            REDIST_TRY_VOID(read_one(p, ""));
            continue;
        }
        const std::string product = p.filename().string();
        if (name_problem(product)) return corrupt_receipt(p, "not a product directory");
        for (const auto& inner : fs::directory_iterator(p, ec)) REDIST_TRY_VOID(read_one(inner.path(), product));
        if (ec) return fs_error("cannot list receipts", p, ec);
    }
    if (ec) return fs_error("cannot list receipts", dir, ec);
    std::sort(out.begin(), out.end(), [](const located_receipt& a, const located_receipt& b) {
        return std::tie(a.r.product, a.r.component, a.rel_path) < std::tie(b.r.product, b.r.component, b.rel_path);
    });
    std::sort(unreadable.begin(), unreadable.end(),
              [](const unreadable_receipt& a, const unreadable_receipt& b) { return a.rel_path < b.rel_path; });
    return {};
}

result<receipt_scan> scan_receipts(const fs::path& prefix) {
    std::vector<located_receipt> located;
    receipt_scan scan;
    REDIST_TRY_VOID(scan_located_receipts(prefix, located, scan.unreadable));
    // Legacy receipts beside new ones of the same key are leftovers: the new
    // layout wins (`located` is sorted, so equal keys are adjacent).
    for (auto& l : located) {
        if (!scan.receipts.empty() && key_of(scan.receipts.back()) == key_of(l.r)) {
            if (segment_count(l.rel_path) == 4) scan.receipts.back() = std::move(l.r);
            continue;
        }
        scan.receipts.push_back(std::move(l.r));
    }
    return scan;
}

result<std::vector<receipt>> read_receipts(const fs::path& prefix) {
    REDIST_TRY(receipt_scan scan, scan_receipts(prefix));
    if (!scan.unreadable.empty()) return std::move(scan.unreadable.front().why);
    return std::move(scan.receipts);
}

result<std::vector<receipt>> read_installed_receipts(const fs::path& prefix, std::string_view hint) {
    REDIST_TRY(auto receipts, read_receipts(prefix));
    if (!receipts.empty()) return receipts;
    std::string message = "no redist receipts in this prefix";
    if (!hint.empty()) message += " (" + std::string(hint) + ")";
    return make_error(error_code::not_found, std::move(message)).with_path(prefix.string());
}

}  // namespace redist
