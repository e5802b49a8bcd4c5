// Receipts, the prefix lock, commit and remove, at the library level.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "archive/sha256.hpp"
#include "redist/json_writer.hpp"
#include "redist/prefix.hpp"
#include "redist/printable.hpp"
#include "store/commit_plan.hpp"
#include "store/prefix.hpp"
#include "store/receipts.hpp"
#include "store/stage.hpp"
#include "support.hpp"
#include "support/printable.hpp"
#include "support/safe_path.hpp"

namespace fs = std::filesystem;
using namespace redist_test;
using namespace redist;

namespace {

// A stage holding `files` (path -> content), as the unpacker would leave it.
staged_component make_staged(const prefix_lock& lock, const std::string& component,
                             const std::vector<std::pair<std::string, std::string>>& files) {
    auto stage = make_stage(lock.prefix(), component);
    REQUIRE(stage.ok());
    std::vector<unpacked_entry> entries;
    for (const auto& [path, content] : files) {
        write(*stage / path, content);
        entries.push_back({path, entry_kind::regular, content.size(), receipt_digest_oracle(content), "", 0644,
                           piece_size_for(content.size())});
    }
    staged_component staged;
    staged.stage_dir = *stage;
    staged.new_receipt.product = "demo";
    staged.new_receipt.component = component;
    staged.new_receipt.archive_sha256 = std::string(64, 'a');
    REQUIRE(prepare_stage(staged, entries).ok());
    return staged;
}

}  // namespace

TEST_CASE("receipts round-trip through JSON and reject unsafe paths") {
    receipt r;
    r.product = "cudnn";
    r.release_label = "9.27.0";
    r.component = "cudnn";
    r.platform = "linux-x86_64";
    r.variant = "cuda12";
    r.archive_sha256 = std::string(64, 'b');
    r.archive_size = 5'000'000'000ull;  // above 2^32
    r.files = {{"include/cudnn.h", entry_kind::regular, 3, sha256_hex("abc"), "", 0644},
               {"lib/libcudnn.so", entry_kind::symlink, 0, "", "libcudnn.so.9", 0777}};
    auto back = receipt_from_json(receipt_to_json(r), "r.json");
    REQUIRE(back.ok());
    CHECK(back->archive_size == r.archive_size);
    CHECK(back->variant == r.variant);
    REQUIRE(back->files.size() == 2);
    CHECK(back->files[1].kind == entry_kind::symlink);
    CHECK(back->files[1].link_target == "libcudnn.so.9");
    CHECK(back->files[0].sha256 == sha256_hex("abc"));

    auto evil = receipt_from_json(R"({"component": "x", "files": [{"path": "../../etc/passwd", "type": "file"}]})",
                                  "/p/.redist/receipts/x.json");
    REQUIRE_FALSE(evil.ok());
    CHECK(evil.error_value().code == error_code::bad_manifest);
    CHECK(evil.error_value().describe().find("/p/.redist/receipts/x.json") != std::string::npos);
    CHECK(evil.error_value().json_path == "files[0].path");

    auto broken = receipt_from_json("{\"component\": ", "x.json");
    REQUIRE_FALSE(broken.ok());
    CHECK(broken.error_value().code == error_code::bad_manifest);
}

TEST_CASE("a receipt of a recompressed copy keeps both digests, and both or neither") {
    receipt r;
    r.product = "cudnn";
    r.component = "cudnn";
    r.archive_sha256 = std::string(64, 'a');
    r.copy_sha256 = std::string(64, 'b');
    r.tar_sha256 = std::string(64, 'c');
    const std::string text = receipt_to_json(r);
    auto back = receipt_from_json(text, "r.json");
    REQUIRE(back.ok());
    CHECK(back->archive_sha256 == r.archive_sha256);
    CHECK(back->copy_sha256 == r.copy_sha256);
    CHECK(back->tar_sha256 == r.tar_sha256);
    r.copy_sha256.clear();
    r.tar_sha256.clear();
    const std::string plain = receipt_to_json(r);
    CHECK(plain.find("copy_sha256") == std::string::npos);  // older readers see the receipt they know
    CHECK(receipt_from_json(plain, "r.json").ok());
    std::string half = text;
    half.erase(half.find("  \"tar_sha256\""),
               half.find("\n", half.find("\"tar_sha256\"")) - half.find("  \"tar_sha256\"") + 1);
    auto refused = receipt_from_json(half, "r.json");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().json_path == "copy_sha256");
    std::string not_hex = text;
    not_hex.replace(not_hex.find(std::string(64, 'c')), 64, "zz");
    auto bad = receipt_from_json(not_hex, "r.json");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error_value().json_path == "tar_sha256");
}

TEST_CASE("a receipt records a file above one piece by its piece list, and old readers are told") {
    receipt r;
    r.product = "cudnn";
    r.component = "cudnn";
    r.archive_sha256 = std::string(64, 'b');
    r.files = {{"include/cudnn.h", entry_kind::regular, 3, sha256_hex("abc"), "", 0644}};
    // Only plain digests: schema 1, as every receipt before piece lists.
    CHECK(receipt_to_json(r).find("\"schema\": 1,") != std::string::npos);

    const std::string pieces = std::string(63, 'c') + "d";
    r.files.push_back({"lib/libbig.so", entry_kind::regular, 20u << 20, pieces, "", 0755, receipt_piece_bytes});
    const std::string json = receipt_to_json(r);
    CHECK(json.find("\"schema\": 2,") != std::string::npos);  // a schema-1 reader refuses it in so many words
    CHECK(json.find("\"sha256_pieces\": \"" + pieces + "\"") != std::string::npos);
    CHECK(json.find("\"piece_size\": 8388608") != std::string::npos);
    auto back = receipt_from_json(json, "r.json");
    REQUIRE(back.ok());
    REQUIRE(back->files.size() == 2);
    CHECK(back->files[0].piece_size == 0);
    CHECK(back->files[0].sha256 == sha256_hex("abc"));
    CHECK(back->files[1].piece_size == receipt_piece_bytes);
    CHECK(back->files[1].sha256 == pieces);

    const auto refused = [](const std::string& file, const std::string& why) {
        INFO(file);
        auto bad = receipt_from_json(R"({"schema": 2, "product": "p", "component": "c", "files": [)" + file + "]}",
                                     "/p/.redist/receipts/p/c.json");
        REQUIRE_FALSE(bad.ok());
        CHECK(bad.error_value().code == error_code::bad_manifest);
        CHECK(bad.error_value().describe().find(why) != std::string::npos);
        CHECK(bad.error_value().describe().find("/p/.redist/receipts/p/c.json") != std::string::npos);
    };
    const std::string hex = std::string(64, 'a');
    refused(R"({"path": "a", "sha256": ")" + hex + R"(", "sha256_pieces": ")" + hex + R"(", "piece_size": 8388608})",
            "both sha256 and sha256_pieces");
    refused(R"({"path": "a", "sha256_pieces": ")" + hex + R"("})", "without piece_size");
    refused(R"({"path": "a", "piece_size": 8388608})", "piece_size without sha256_pieces");
    refused(R"({"path": "a", "sha256_pieces": "xyz", "piece_size": 8388608})", "not 64 hex digits");
    refused(R"({"path": "a", "sha256_pieces": ")" + hex + R"(", "piece_size": 1000})", "not a piece size");
    refused(R"({"path": "a", "sha256_pieces": ")" + hex + R"(", "piece_size": 0})", "not a piece size");
    auto future = receipt_from_json(R"({"schema": 3, "product": "p", "component": "c", "files": []})", "c.json");
    REQUIRE_FALSE(future.ok());
    CHECK(future.error_value().message.find("unsupported receipt schema 3") != std::string::npos);
}

TEST_CASE("verify checks a large file piece by piece against its receipt") {
    const fs::path prefix = scratch("pieces") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    std::string big((17u << 20) + 3, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 7) % 253);
    std::vector<staged_component> list;
    list.push_back(make_staged(*lock, "p", {{"lib/libbig.so", big}, {"include/p.h", "small"}}));
    REQUIRE(commit_stages(*lock, std::move(list)).ok());
    const std::string on_disk = slurp(prefix / ".redist/receipts/demo/p.json");
    CHECK(on_disk.find("\"sha256_pieces\": \"" + receipt_digest_oracle(big) + "\"") != std::string::npos);
    auto clean = verify_prefix(*lock);
    REQUIRE(clean.ok());
    CHECK(clean->problems.empty());

    // One byte of the middle piece, same size: found, and named as a piece-list digest.
    std::string changed = big;
    changed[(9u << 20) + 5] ^= 1;
    write(prefix / "lib/libbig.so", changed);
    auto found = verify_prefix(*lock);
    REQUIRE(found.ok());
    REQUIRE(found->problems.size() == 1);
    CHECK(found->problems.front().path == "lib/libbig.so");
    CHECK(found->problems.front().what == "modified (sha256_pieces " + receipt_digest_oracle(changed) + ", expected " +
                                              receipt_digest_oracle(big) + ")");
    write(prefix / "lib/libbig.so", big);
    auto again = verify_prefix(*lock);
    REQUIRE(again.ok());
    CHECK(again->problems.empty());
}

TEST_CASE("verify reports the same problems, in receipt order, on one thread or many") {
    const fs::path prefix = scratch("verify_threads") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    std::string big((25u << 20) + 11, '\0');  // four pieces, the last one short
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 13) % 251);
    std::vector<staged_component> list;
    list.push_back(make_staged(*lock, "a", {{"lib/a1.so", big}, {"lib/a2.so", "two"}, {"lib/a3.so", "three"}}));
    list.push_back(make_staged(*lock, "b", {{"lib/b1.so", big + "b"}, {"lib/b2.so", "four"}}));
    REQUIRE(commit_stages(*lock, std::move(list)).ok());
    for (unsigned threads : {1u, 3u, 16u}) {
        auto clean = verify_prefix(*lock, threads);
        REQUIRE(clean.ok());
        CHECK(clean->problems.empty());
        CHECK(clean->components == 2);
        CHECK(clean->files == 5);
    }

    std::string changed = big;
    changed[(24u << 20) + 1] ^= 0x40;  // the last piece of a1
    write(prefix / "lib/a1.so", changed);
    write(prefix / "lib/a2.so", "TWO");  // same size, other bytes
    fs::remove(prefix / "lib/a3.so");
    std::string first_piece = big + "b";
    first_piece[0] ^= 1;  // the first piece of b1
    write(prefix / "lib/b1.so", first_piece);
    const std::vector<std::pair<std::string, std::string>> expected = {
        {"lib/a1.so", "modified (sha256_pieces " + receipt_digest_oracle(changed) + ", expected " +
                          receipt_digest_oracle(big) + ")"},
        {"lib/a2.so", "modified (sha256 " + sha256_hex("TWO") + ", expected " + sha256_hex("two") + ")"},
        {"lib/a3.so", "missing"},
        {"lib/b1.so", "modified (sha256_pieces " + receipt_digest_oracle(first_piece) + ", expected " +
                          receipt_digest_oracle(big + "b") + ")"},
    };
    for (unsigned threads : {1u, 2u, 3u, 16u}) {
        INFO(threads << " threads");
        auto found = verify_prefix(*lock, threads);
        REQUIRE(found.ok());
        std::vector<std::pair<std::string, std::string>> got;
        for (const auto& p : found->problems) got.emplace_back(p.path, p.what);
        CHECK(got == expected);
    }
}

TEST_CASE("verify with nothing left to hash: every file missing or of another size") {
    const fs::path prefix = scratch("verify_nothing_to_hash") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    std::vector<staged_component> list;
    list.push_back(make_staged(*lock, "a", {{"lib/a.so", "aaa"}, {"lib/b.so", "bbb"}}));
    REQUIRE(commit_stages(*lock, std::move(list)).ok());
    fs::remove(prefix / "lib/a.so");
    write(prefix / "lib/b.so", "longer");
    for (unsigned threads : {0u, 1u, 8u}) {
        auto found = verify_prefix(*lock, threads);
        REQUIRE(found.ok());
        REQUIRE(found->problems.size() == 2);
        CHECK(found->problems.at(0).what == "missing");
        CHECK(found->problems.at(1).what == "size changed (expected 3, found 6)");
    }
}

TEST_CASE("commit, upgrade without stale files, conflicts leave the prefix unchanged, remove") {
    const fs::path prefix = scratch("commit") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());

    std::vector<staged_component> first;
    first.push_back(make_staged(*lock, "a", {{"include/a.h", "a1"}, {"lib/old.so", "old"}, {"LICENSE", "L"}}));
    REQUIRE(commit_stages(*lock, std::move(first)).ok());
    CHECK(slurp(prefix / "include/a.h") == "a1");
    CHECK(slurp(prefix / "share/licenses/a/LICENSE") == "L");  // top-level files are relocated
    CHECK_FALSE(fs::exists(prefix / ".redist/transaction.json"));

    // Upgrade: lib/old.so is no longer shipped and goes away.
    std::vector<staged_component> upgrade;
    upgrade.push_back(make_staged(*lock, "a", {{"include/a.h", "a2"}, {"LICENSE", "L"}}));
    REQUIRE(commit_stages(*lock, std::move(upgrade)).ok());
    CHECK(slurp(prefix / "include/a.h") == "a2");
    CHECK_FALSE(fs::exists(prefix / "lib/old.so"));
    CHECK_FALSE(fs::exists(prefix / "lib"));  // emptied directories are pruned

    // Another component with a different file at the same path: conflict, nothing changes, no stage left.
    std::vector<staged_component> clash;
    clash.push_back(make_staged(*lock, "b", {{"include/a.h", "different"}, {"include/b.h", "b"}}));
    auto refused = commit_stages(*lock, std::move(clash));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().code == error_code::conflict);
    CHECK(refused.error_value().message.find("a and b") != std::string::npos);
    CHECK(slurp(prefix / "include/a.h") == "a2");
    CHECK_FALSE(fs::exists(prefix / "include/b.h"));
    CHECK(fs::is_empty(prefix / ".redist/staging"));

    // A user's own file is not overwritten silently; the same content is adopted.
    write(prefix / "include/mine.h", "user");
    std::vector<staged_component> overwrite;
    overwrite.push_back(make_staged(*lock, "c", {{"include/mine.h", "theirs"}}));
    auto clobber = commit_stages(*lock, std::move(overwrite));
    REQUIRE_FALSE(clobber.ok());
    CHECK(clobber.error_value().code == error_code::conflict);
    CHECK(slurp(prefix / "include/mine.h") == "user");

    // An identical file shipped by a second component is shared, and survives removing one owner.
    std::vector<staged_component> shared;
    shared.push_back(make_staged(*lock, "d", {{"include/a.h", "a2"}, {"include/d.h", "d"}}));
    REQUIRE(commit_stages(*lock, std::move(shared)).ok());
    REQUIRE(remove_component(*lock, "a").ok());
    CHECK(slurp(prefix / "include/a.h") == "a2");
    CHECK_FALSE(fs::exists(prefix / "share/licenses/a/LICENSE"));
    CHECK(slurp(prefix / "include/mine.h") == "user");
    auto problems = verify_prefix(*lock);
    REQUIRE(problems.ok());
    CHECK(problems->problems.empty());
    CHECK(remove_component(*lock, "a").error_value().code == error_code::not_found);
}

TEST_CASE("an interrupted commit is rolled forward by the next lock holder") {
    const fs::path prefix = scratch("rollforward") / "prefix";
    fs::path stage;
    {
        auto lock = prefix_lock::acquire(prefix);
        REQUIRE(lock.ok());
        stage = make_staged(*lock, "x", {{"bin/tool", "t"}}).stage_dir;
    }
    // What a process killed mid-commit leaves: a journal whose first rename is done.
    fs::create_directories(prefix / "bin");
    const std::string stage_rel = ".redist/staging/" + stage.filename().string();
    const std::string journal = R"({"journal_version":2,"mkdirs":[{"path":"bin","mode":493}],"moves":[{"from":")" +
                                stage_rel + R"(/bin/tool","to":"bin/tool"}],"deletes":[],"prune":[],"stages":[")" +
                                stage_rel + R"("]})";
    write(prefix / ".redist/transaction.json", journal);
    CHECK(commit_pending(prefix));
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    CHECK(slurp(prefix / "bin/tool") == "t");
    CHECK_FALSE(commit_pending(prefix));
    CHECK_FALSE(fs::exists(stage));
}

TEST_CASE("acquire_existing: a prefix without .redist/ is not_found and stays as it was") {
    const fs::path root = scratch("acquire_existing");
    const fs::path typo = root / "typo";
    auto missing = prefix_lock::acquire_existing(typo);
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error_value().code == error_code::not_found);
    CHECK(missing.error_value().path == typo.string());
    CHECK_FALSE(fs::exists(typo));
    const fs::path mine = root / "mine";
    fs::create_directories(mine);
    CHECK(prefix_lock::acquire_existing(mine).error_value().code == error_code::not_found);
    CHECK(fs::is_empty(mine));
    REQUIRE(prefix_lock::acquire(mine).ok());  // what redist installed into has .redist/
    CHECK(prefix_lock::acquire_existing(mine).ok());
}

// ---- plan_commit without a prefix ----------------------------------------------------

namespace {

// An in-memory prefix for the planner: paths -> node type; `same` lists the
// paths whose content equals what is staged.
class fake_prefix final : public prefix_view {
public:
    std::map<std::string, node> nodes;
    std::set<std::string> same;
    std::map<std::string, unsigned> stage_modes;  // "<stage>/<dir>" -> mode

    fake_prefix() { nodes[".redist/receipts/demo"] = node::directory; }  // product "demo" was installed before

    node type_of(const std::string& relative) const override {
        const auto it = nodes.find(relative);
        return it == nodes.end() ? node::missing : it->second;
    }
    bool holds(const std::string& relative, const installed_file&) const override { return same.count(relative) > 0; }
    std::optional<unsigned> stage_dir_mode(const std::string& stage, const std::string& relative) const override {
        const auto it = stage_modes.find(stage + "/" + relative);
        if (it == stage_modes.end()) return std::nullopt;
        return it->second;
    }
    // Every existing directory is on file system 1 unless `devices` says otherwise.
    std::map<std::string, std::uint64_t> devices;
    std::optional<std::uint64_t> device_of(const std::string& relative) const override {
        const auto it = devices.find(relative);
        if (it != devices.end()) return it->second;
        if (relative.empty() || relative == ".redist/staging" || type_of(relative) != node::missing) return 1;
        return std::nullopt;
    }
};

receipt make_receipt(const std::string& product, const std::string& component,
                     const std::vector<std::pair<std::string, std::string>>& files) {
    receipt r;
    r.product = product;
    r.component = component;
    for (const auto& [path, content] : files)
        r.files.push_back({path, entry_kind::regular, content.size(), sha256_hex(content), "", 0644});
    return r;
}

located_receipt at_home(receipt r) {
    located_receipt out;
    out.rel_path = receipt_rel_path(r.product, r.component);
    out.r = std::move(r);
    return out;
}

}  // namespace

TEST_CASE("plan_commit: moves, parents first, receipts last") {
    fake_prefix prefix;
    const receipt r = make_receipt("demo", "a", {{"lib/x/a.so", "a"}, {"include/a.h", "h"}});
    auto plan = plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false);
    REQUIRE(plan.ok());
    REQUIRE(plan->mkdirs.size() == 3);
    CHECK(plan->mkdirs[0].path != "lib/x");  // shallowest first
    CHECK(plan->mkdirs.back().path == "lib/x");
    CHECK(plan->moves.back().to == ".redist/receipts/demo/a.json");
    CHECK(plan->moves.back().from == ".redist/staging/a.1.receipt.json");
    CHECK(plan->stages == std::vector<std::string>{".redist/staging/a.1"});
    CHECK(check_journal(*plan).ok());
    // The first receipt of a product creates its receipt directory.
    const receipt other = make_receipt("newproduct", "b", {{"lib/x/b.so", "b"}});
    auto first = plan_commit(prefix, {}, {{".redist/staging/b.1", &other}}, {}, false);
    REQUIRE(first.ok());
    CHECK(first->mkdirs.back().path == ".redist/receipts/newproduct");
}

TEST_CASE("plan_commit: a move onto another file system is refused before any journal") {
    fake_prefix prefix;
    prefix.nodes["lib"] = prefix_view::node::directory;
    prefix.nodes["lib/mnt"] = prefix_view::node::directory;
    prefix.devices["lib/mnt"] = 2;  // a mount point inside the prefix
    const receipt r = make_receipt("demo", "a", {{"lib/a.so", "a"}, {"lib/mnt/sub/b.so", "b"}});
    auto plan = plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error_value().code == error_code::filesystem);
    CHECK(plan.error_value().path == "lib/mnt");  // the nearest existing directory of lib/mnt/sub/b.so
    CHECK(plan.error_value().message.find("file system") != std::string::npos);
    // On one file system the same plan goes through.
    prefix.devices.clear();
    CHECK(plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false).ok());
    // A receipt directory on another file system is refused the same way.
    prefix.devices[".redist/receipts/demo"] = 3;
    auto receipts = plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false);
    REQUIRE_FALSE(receipts.ok());
    CHECK(receipts.error_value().path == ".redist/receipts/demo");
}

TEST_CASE("plan_commit: an existing directory is never re-created or chmod'ed") {
    fake_prefix prefix;
    prefix.nodes["lib"] = prefix_view::node::directory;
    const receipt r = make_receipt("demo", "a", {{"lib/a.so", "a"}});
    auto plan = plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false);
    REQUIRE(plan.ok());
    CHECK(plan->mkdirs.empty());
}

TEST_CASE("plan_commit: a new directory takes the stage's mode, never special bits") {
    fake_prefix prefix;
    prefix.stage_modes[".redist/staging/a.1/lib"] = 03775;
    const receipt r = make_receipt("demo", "a", {{"lib/a.so", "a"}});
    auto plan = plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false);
    REQUIRE(plan.ok());
    REQUIRE(plan->mkdirs.size() == 1);
    CHECK(plan->mkdirs[0].mode == 0775);
}

TEST_CASE("plan_commit: a file in one component and a directory in another is a conflict") {
    fake_prefix prefix;
    const receipt file = make_receipt("demo", "a", {{"lib/foo", "file"}});
    const receipt dir = make_receipt("demo", "b", {{"lib/foo/bar", "inside"}});
    auto plan = plan_commit(prefix, {}, {{".redist/staging/a.1", &file}, {".redist/staging/b.1", &dir}}, {}, false);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error_value().code == error_code::conflict);
    CHECK(plan.error_value().path == "lib/foo");
    // The other order too.
    auto reversed = plan_commit(prefix, {}, {{".redist/staging/b.1", &dir}, {".redist/staging/a.1", &file}}, {}, false);
    REQUIRE_FALSE(reversed.ok());
    CHECK(reversed.error_value().code == error_code::conflict);
}

TEST_CASE("plan_commit: a file clashing with an installed component's file or directory") {
    fake_prefix prefix;
    prefix.nodes["lib"] = prefix_view::node::directory;
    prefix.nodes["lib/foo"] = prefix_view::node::directory;
    prefix.nodes["lib/foo/bar"] = prefix_view::node::regular;
    const std::vector<located_receipt> existing{at_home(make_receipt("demo", "b", {{"lib/foo/bar", "x"}}))};
    const receipt file = make_receipt("demo", "a", {{"lib/foo", "file"}});
    auto plan = plan_commit(prefix, existing, {{".redist/staging/a.1", &file}}, {}, true);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error_value().code == error_code::conflict);

    const std::vector<located_receipt> has_file{at_home(make_receipt("demo", "c", {{"lib/baz", "x"}}))};
    prefix.nodes["lib/baz"] = prefix_view::node::regular;
    const receipt below = make_receipt("demo", "a", {{"lib/baz/inner", "y"}});
    auto plan2 = plan_commit(prefix, has_file, {{".redist/staging/a.1", &below}}, {}, true);
    REQUIRE_FALSE(plan2.ok());
    CHECK(plan2.error_value().code == error_code::conflict);
}

TEST_CASE("plan_commit: user files and user directories") {
    fake_prefix prefix;
    prefix.nodes["include"] = prefix_view::node::directory;
    prefix.nodes["include/mine.h"] = prefix_view::node::regular;
    const receipt r = make_receipt("demo", "a", {{"include/mine.h", "theirs"}});
    auto refused = plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().code == error_code::conflict);
    CHECK(plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, true).ok());  // --force
    prefix.same.insert("include/mine.h");
    CHECK(plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false).ok());  // identical: adopted
    // A directory where a file goes is refused even with --force (rename would fail mid-commit).
    prefix.nodes["include/mine.h"] = prefix_view::node::directory;
    auto dir = plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, true);
    REQUIRE_FALSE(dir.ok());
    CHECK(dir.error_value().code == error_code::conflict);
    // A symlink where a directory is needed.
    fake_prefix linked;
    linked.nodes["include"] = prefix_view::node::symlink;
    auto link = plan_commit(linked, {}, {{".redist/staging/a.1", &r}}, {}, true);
    REQUIRE_FALSE(link.ok());
    CHECK(link.error_value().code == error_code::conflict);
}

TEST_CASE("plan_commit: every conflict is named, not only the first, and commit_conflicts lists them") {
    fake_prefix prefix;
    prefix.nodes["include"] = prefix_view::node::directory;
    prefix.nodes["lib"] = prefix_view::node::directory;
    std::vector<std::pair<std::string, std::string>> files;
    for (int i = 0; i < 9; ++i) {
        const std::string path = "include/mine" + std::to_string(i) + ".h";
        prefix.nodes[path] = prefix_view::node::regular;
        files.emplace_back(path, "theirs");
    }
    files.emplace_back("lib/ok.so", "new");
    files.emplace_back("lib/shared.so", "a's");
    const receipt a = make_receipt("demo", "a", files);
    const receipt b = make_receipt("demo", "b", {{"lib/shared.so", "b's"}});
    const std::vector<planned_stage> staged{{".redist/staging/a.1", &a}, {".redist/staging/b.1", &b}};
    auto listed = commit_conflicts(prefix, {}, staged, {}, false);
    REQUIRE(listed.ok());
    REQUIRE(listed->size() == 10);  // nine files of the user's and one clash between components
    CHECK(listed->front().path == "include/mine0.h");
    CHECK(listed->back().path == "lib/shared.so");
    CHECK(listed->back().message == "components a and b ship different files at the same path");
    auto refused = plan_commit(prefix, {}, staged, {}, false);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().code == error_code::conflict);
    const std::string& message = refused.error_value().message;
    CHECK(message.find("10 paths conflict") == 0);
    for (const auto& c : *listed) CHECK(message.find(c.path) != std::string::npos);
    CHECK(message.find("(move it away, or use --overwrite): include/mine0.h, include/mine1.h") != std::string::npos);
    CHECK(message.find('\n') == std::string::npos);
    // --overwrite leaves the clash between components alone.
    auto overwriting = commit_conflicts(prefix, {}, staged, {}, true);
    REQUIRE(overwriting.ok());
    CHECK(*overwriting == std::vector<commit_conflict>{listed->back()});
    // One conflict keeps its path where the error's path goes.
    auto one = plan_commit(prefix, {}, {{".redist/staging/b.1", &b}, {".redist/staging/a.1", &a}}, {}, true);
    REQUIRE_FALSE(one.ok());
    CHECK(one.error_value().path == "lib/shared.so");
    CHECK(one.error_value().message == "components b and a ship different files at the same path");
    // Beyond k_conflicts_named paths, the rest are counted.
    std::vector<commit_conflict> many;
    for (std::size_t i = 0; i < k_conflicts_named + 5; ++i) many.push_back({"f" + std::to_string(1000 + i), "why"});
    const error e = conflict_error(many);
    CHECK(e.message.find("f1099") != std::string::npos);
    CHECK(e.message.find("f1100") == std::string::npos);
    CHECK(e.message.ends_with("; and 5 more"));
}

TEST_CASE("plan_commit: hostile names and paths are refused before any journal") {
    fake_prefix prefix;
    for (const char* key : {"sub/comp", "../../../../x", "/tmp/victim", "", ".."}) {
        const receipt r = make_receipt("demo", key, {{"lib/a", "a"}});
        auto plan = plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false);
        REQUIRE_FALSE(plan.ok());
        CHECK(plan.error_value().code == error_code::bad_manifest);
    }
    const receipt product = make_receipt("a/b", "a", {{"lib/a", "a"}});
    CHECK_FALSE(plan_commit(prefix, {}, {{".redist/staging/a.1", &product}}, {}, false).ok());
    for (const char* path : {".redist/receipts/demo/x.json", ".redist/transaction.json", "../x", "/etc/passwd"}) {
        const receipt r = make_receipt("demo", "a", {{path, "a"}});
        auto plan = plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false);
        REQUIRE_FALSE(plan.ok());
        CHECK(plan.error_value().code == error_code::unsafe_archive);
    }
}

TEST_CASE("plan_commit: same component key in two products is two components") {
    fake_prefix prefix;
    prefix.nodes["lib"] = prefix_view::node::directory;
    prefix.nodes["lib/one.so"] = prefix_view::node::regular;
    const std::vector<located_receipt> existing{at_home(make_receipt("p1", "libx", {{"lib/one.so", "1"}}))};
    const receipt other = make_receipt("p2", "libx", {{"lib/two.so", "2"}});
    auto plan = plan_commit(prefix, existing, {{".redist/staging/libx.1", &other}}, {}, false);
    REQUIRE(plan.ok());
    CHECK(plan->deletes.empty());  // p1's libx is not replaced
    CHECK(plan->moves.back().to == ".redist/receipts/p2/libx.json");
}

TEST_CASE("plan_commit: an upgrade deletes stale files and the legacy receipt") {
    fake_prefix prefix;
    located_receipt legacy;
    legacy.r = make_receipt("demo", "a", {{"lib/old.so", "o"}, {"lib/a.so", "a"}});
    legacy.rel_path = legacy_receipt_rel_path("a");
    const receipt r = make_receipt("demo", "a", {{"lib/a.so", "a2"}});
    auto plan = plan_commit(prefix, {legacy}, {{".redist/staging/a.1", &r}}, {}, false);
    REQUIRE(plan.ok());
    CHECK(std::find(plan->deletes.begin(), plan->deletes.end(), "lib/old.so") != plan->deletes.end());
    CHECK(std::find(plan->deletes.begin(), plan->deletes.end(), ".redist/receipts/a.json") != plan->deletes.end());
    CHECK(std::find(plan->prune.begin(), plan->prune.end(), "lib") != plan->prune.end());

    // A legacy and a new receipt of the same key that both list a stale file: one delete.
    const std::vector<located_receipt> both{legacy, at_home(legacy.r)};
    auto once = plan_commit(prefix, both, {{".redist/staging/a.1", &r}}, {}, false);
    REQUIRE(once.ok());
    CHECK(std::count(once->deletes.begin(), once->deletes.end(), "lib/old.so") == 1);
}

TEST_CASE("plan_commit, removal only: linear, keeps shared files, removes receipts and empty product directories") {
    std::vector<located_receipt> existing;
    existing.push_back(at_home(make_receipt("p1", "a", {{"include/shared.h", "s"}, {"lib/a.so", "a"}})));
    existing.push_back(at_home(make_receipt("p2", "a", {{"include/shared.h", "s"}, {"lib/a2.so", "a"}})));
    fake_prefix prefix;
    auto plan = plan_commit(prefix, existing, {}, {{"p1", "a"}}, false);
    REQUIRE(plan.ok());
    const journal& j = *plan;
    CHECK(j.deletes == std::vector<std::string>{"lib/a.so", ".redist/receipts/p1/a.json"});
    CHECK(std::find(j.prune.begin(), j.prune.end(), ".redist/receipts/p1") != j.prune.end());
    CHECK(check_journal(j).ok());
}

// ---- plan_commit: installs and removals in one journal (redist sync) ------------------

namespace {

bool has(const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
}

bool moves_to(const journal& j, const std::string& to) {
    return std::any_of(j.moves.begin(), j.moves.end(), [&](const journal::move_step& m) { return m.to == to; });
}

}  // namespace

TEST_CASE("plan_commit, install and removal: installs and removes in one journal, shared files stay") {
    fake_prefix prefix;
    std::vector<located_receipt> existing;
    existing.push_back(at_home(
        make_receipt("p1", "a", {{"include/shared.h", "s"}, {"lib/a/a.so", "a"}, {"share/licenses/a/LICENSE", "l"}})));
    existing.push_back(at_home(make_receipt("p1", "b", {{"include/shared.h", "s"}, {"lib/b.so", "b"}})));
    existing.push_back(at_home(make_receipt("p2", "z", {{"lib/z.so", "z"}})));
    const receipt c = make_receipt("p1", "c", {{"lib/c.so", "c"}});
    auto plan = plan_commit(prefix, existing, {{".redist/staging/c.1", &c}}, {{"p1", "a"}, {"p2", "z"}}, false);
    REQUIRE(plan.ok());
    CHECK(moves_to(*plan, "lib/c.so"));
    CHECK(moves_to(*plan, ".redist/receipts/p1/c.json"));
    CHECK(has(plan->deletes, "lib/a/a.so"));
    CHECK(has(plan->deletes, "share/licenses/a/LICENSE"));
    CHECK(has(plan->deletes, "lib/z.so"));
    CHECK(has(plan->deletes, ".redist/receipts/p1/a.json"));
    CHECK(has(plan->deletes, ".redist/receipts/p2/z.json"));
    CHECK_FALSE(has(plan->deletes, "include/shared.h"));  // b keeps it
    CHECK_FALSE(has(plan->deletes, "lib/b.so"));
    CHECK_FALSE(has(plan->deletes, ".redist/receipts/p1/b.json"));
    // Children before parents, over both plans: lib/a before lib, share/licenses/a before share/licenses.
    const auto at = [&](const std::string& d) { return std::find(plan->prune.begin(), plan->prune.end(), d); };
    REQUIRE(at("lib/a") != plan->prune.end());
    REQUIRE(at("lib") != plan->prune.end());
    CHECK(at("lib/a") < at("lib"));
    CHECK(at("share/licenses/a") < at("share/licenses"));
    CHECK(has(plan->prune, ".redist/receipts/p2"));
    CHECK(check_journal(*plan).ok());

    // Nothing removed: exactly plan_commit.
    auto plain = plan_commit(prefix, existing, {{".redist/staging/c.1", &c}}, {}, false);
    auto same = plan_commit(prefix, existing, {{".redist/staging/c.1", &c}}, {}, false);
    REQUIRE(plain.ok());
    REQUIRE(same.ok());
    CHECK(*plain == *same);
    CHECK_FALSE(has(same->deletes, "lib/a/a.so"));
}

TEST_CASE("plan_commit, install and removal: a staged file may take a removed component's path, and is not deleted") {
    fake_prefix prefix;
    prefix.nodes["lib"] = prefix_view::node::directory;
    prefix.nodes["lib/x.so"] = prefix_view::node::regular;
    const std::vector<located_receipt> existing{at_home(make_receipt("p1", "a", {{"lib/x.so", "old"}}))};
    const receipt b = make_receipt("p1", "b", {{"lib/x.so", "new"}});
    // Without the removal, a's file is in the way.
    auto clash = plan_commit(prefix, existing, {{".redist/staging/b.1", &b}}, {}, false);
    REQUIRE_FALSE(clash.ok());
    CHECK(clash.error_value().code == error_code::conflict);
    auto plan = plan_commit(prefix, existing, {{".redist/staging/b.1", &b}}, {{"p1", "a"}}, false);
    REQUIRE(plan.ok());
    CHECK(moves_to(*plan, "lib/x.so"));
    CHECK_FALSE(has(plan->deletes, "lib/x.so"));
    CHECK(has(plan->deletes, ".redist/receipts/p1/a.json"));
    // A file the user put there (no receipt) is still protected.
    prefix.nodes["lib/y.so"] = prefix_view::node::regular;
    const receipt y = make_receipt("p1", "y", {{"lib/y.so", "mine?"}});
    auto user = plan_commit(prefix, existing, {{".redist/staging/y.1", &y}}, {{"p1", "a"}}, false);
    REQUIRE_FALSE(user.ok());
    CHECK(user.error_value().code == error_code::conflict);
}

TEST_CASE("plan_commit, install and removal: a replaced component's old file that only a removed one shared goes too") {
    fake_prefix prefix;
    std::vector<located_receipt> existing;
    existing.push_back(at_home(make_receipt("p1", "a", {{"lib/s.so", "s"}})));
    existing.push_back(at_home(make_receipt("p1", "b", {{"lib/s.so", "s"}, {"lib/b.so", "b1"}})));
    const receipt b2 = make_receipt("p1", "b", {{"lib/b.so", "b2"}});
    auto plan = plan_commit(prefix, existing, {{".redist/staging/b.1", &b2}}, {{"p1", "a"}}, false);
    REQUIRE(plan.ok());
    CHECK(has(plan->deletes, "lib/s.so"));
    CHECK(std::count(plan->deletes.begin(), plan->deletes.end(), "lib/s.so") == 1);
    CHECK_FALSE(has(plan->deletes, "lib/b.so"));
}

TEST_CASE("plan_commit, install and removal: refuses unknown and contradictory removals") {
    fake_prefix prefix;
    const std::vector<located_receipt> existing{at_home(make_receipt("p1", "a", {{"lib/a.so", "a"}}))};
    const receipt a = make_receipt("p1", "a", {{"lib/a.so", "a2"}});
    auto unknown = plan_commit(prefix, existing, {}, {{"p1", "nope"}}, false);
    REQUIRE_FALSE(unknown.ok());
    CHECK(unknown.error_value().code == error_code::not_found);
    auto other_product = plan_commit(prefix, existing, {}, {{"p2", "a"}}, false);
    REQUIRE_FALSE(other_product.ok());
    CHECK(other_product.error_value().code == error_code::not_found);
    auto both = plan_commit(prefix, existing, {{".redist/staging/a.1", &a}}, {{"p1", "a"}}, false);
    REQUIRE_FALSE(both.ok());
    CHECK(both.error_value().code == error_code::conflict);
    auto only_removal = plan_commit(prefix, existing, {}, {{"p1", "a"}}, false);
    REQUIRE(only_removal.ok());
    CHECK(only_removal->moves.empty());
    CHECK(only_removal->deletes == std::vector<std::string>{"lib/a.so", ".redist/receipts/p1/a.json"});
}

// ---- the journal as hostile input ----------------------------------------------------

TEST_CASE("journal_from_json refuses paths outside the prefix and in .redist/") {
    REQUIRE(
        journal_from_json(R"({"journal_version":2,"moves":[{"from":".redist/staging/a.1/x","to":"x"}]})", "j").ok());
    for (const std::string bad :
         {R"("x1":0,"moves":[{"from":"/tmp/a","to":"x"}])",
          R"("x1":0,"moves":[{"from":".redist/staging/a/x","to":"/etc/x"}])",
          R"("x1":0,"moves":[{"from":"lib/a","to":"x"}])",
          R"("x1":0,"moves":[{"from":".redist/staging/a/x","to":".redist/lock"}])",
          R"("x1":0,"deletes":["/etc/passwd"])", R"("x1":0,"deletes":["../../x"])",
          R"("x1":0,"deletes":[".redist/lock"])", R"("x1":0,"prune":["/tmp"])", R"("x1":0,"stages":["/home"])",
          R"("x1":0,"stages":[".redist/receipts"])", R"("x1":0,"stages":[".redist/staging/../../x"])",
          R"("x1":0,"mkdirs":[{"path":"/tmp/x","mode":511}])",
          R"("x1":0,"mkdirs":[{"path":".redist/x","mode":511}])"}) {
        auto text = std::string(R"({"journal_version":2,)") + bad + "}";
        auto j = journal_from_json(text, "/p/.redist/transaction.json");
        INFO(text);
        REQUIRE_FALSE(j.ok());
        CHECK(j.error_value().code == error_code::bad_manifest);
        CHECK(j.error_value().source == "/p/.redist/transaction.json");
    }
    // The pre-0.2 format (absolute paths in arrays) is refused, not applied.
    auto old = journal_from_json(R"({"mkdirs":[],"moves":[["/a","/b"]],"deletes":[],"prune":[],"stages":[]})", "j");
    REQUIRE_FALSE(old.ok());
    CHECK(old.error_value().code == error_code::bad_manifest);
}

TEST_CASE("a planted journal with absolute paths is refused, and nothing is touched") {
    const fs::path root = scratch("planted_journal");
    const fs::path prefix = root / "prefix";
    const fs::path victim = root / "victim";
    write(victim, "precious");
    { REQUIRE(prefix_lock::acquire(prefix).ok()); }
    const std::string journal = R"({"journal_version":2,"mkdirs":[],"moves":[],"deletes":[")" + victim.string() +
                                R"("],"prune":[],"stages":[]})";
    write(prefix / ".redist/transaction.json", journal);
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE_FALSE(lock.ok());
    CHECK(lock.error_value().code == error_code::bad_manifest);
    CHECK(slurp(victim) == "precious");
    CHECK(fs::exists(prefix / ".redist/transaction.json"));  // left for the user to inspect
}

// ---- the prefix: layout, modes, hardlinks, products ------------------------------------

TEST_CASE("receipts live at receipts/<product>/<component>.json, legacy receipts are read and replaced") {
    const fs::path prefix = scratch("layout") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    // A receipt of an older redist, for files that are in the prefix.
    receipt old = make_receipt("demo", "a", {{"lib/old.so", "old"}});
    write(prefix / "lib/old.so", "old");
    write(prefix / ".redist/receipts/a.json", receipt_to_json(old));
    auto before = read_receipts(prefix);
    REQUIRE(before.ok());
    REQUIRE(before->size() == 1);

    std::vector<staged_component> upgrade;
    upgrade.push_back(make_staged(*lock, "a", {{"lib/new.so", "new"}}));
    REQUIRE(commit_stages(*lock, std::move(upgrade)).ok());
    CHECK(fs::exists(prefix / ".redist/receipts/demo/a.json"));
    CHECK_FALSE(fs::exists(prefix / ".redist/receipts/a.json"));
    CHECK_FALSE(fs::exists(prefix / "lib/old.so"));
    CHECK(slurp(prefix / "lib/new.so") == "new");
}

TEST_CASE("a receipt whose name does not match its content is corrupt") {
    const fs::path prefix = scratch("mismatch") / "prefix";
    { REQUIRE(prefix_lock::acquire(prefix).ok()); }
    write(prefix / ".redist/receipts/demo/b.json", receipt_to_json(make_receipt("demo", "a", {})));
    auto r = read_receipts(prefix);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::bad_manifest);
}

TEST_CASE("a symlinked receipt is corrupt, never followed") {
    const fs::path root = scratch("receipt_link");
    const fs::path prefix = root / "prefix";
    { REQUIRE(prefix_lock::acquire(prefix).ok()); }
    write(root / "elsewhere.json", receipt_to_json(make_receipt("demo", "a", {})));
    fs::create_symlink(root / "elsewhere.json", prefix / ".redist/receipts/a.json");
    auto r = read_receipts(prefix);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::bad_manifest);
}

TEST_CASE("an existing directory keeps its mode (setgid and sticky included)") {
    const fs::path prefix = scratch("modes") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    fs::create_directories(prefix / "lib");
    REQUIRE(::chmod((prefix / "lib").c_str(), 03775) == 0);
    std::vector<staged_component> staged;
    staged.push_back(make_staged(*lock, "a", {{"lib/a.so", "a"}, {"lib/sub/b.so", "b"}}));
    REQUIRE(commit_stages(*lock, std::move(staged)).ok());
    struct stat st {};
    REQUIRE(::stat((prefix / "lib").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 03775);
    REQUIRE(::stat((prefix / "lib/sub").c_str(), &st) == 0);
    CHECK((st.st_mode & 07000) == 0);
}

TEST_CASE("a file/directory clash leaves no journal and no stage") {
    const fs::path prefix = scratch("clash") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    std::vector<staged_component> staged;
    staged.push_back(make_staged(*lock, "a", {{"lib/foo", "file"}}));
    staged.push_back(make_staged(*lock, "b", {{"lib/foo/bar", "inside"}}));
    auto refused = commit_stages(*lock, std::move(staged));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().code == error_code::conflict);
    CHECK_FALSE(fs::exists(prefix / ".redist/transaction.json"));
    CHECK(fs::is_empty(prefix / ".redist/staging"));
    CHECK_FALSE(fs::exists(prefix / "lib"));
}

TEST_CASE("two products with the same component key do not uninstall each other") {
    const fs::path prefix = scratch("products") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    auto one = make_staged(*lock, "libx", {{"lib/one.so", "1"}});
    one.new_receipt.product = "p1";
    auto two = make_staged(*lock, "libx", {{"lib/two.so", "2"}});
    two.new_receipt.product = "p2";
    std::vector<staged_component> first;
    first.push_back(std::move(one));
    REQUIRE(commit_stages(*lock, std::move(first)).ok());
    std::vector<staged_component> second;
    second.push_back(std::move(two));
    REQUIRE(commit_stages(*lock, std::move(second)).ok());
    CHECK(slurp(prefix / "lib/one.so") == "1");
    CHECK(slurp(prefix / "lib/two.so") == "2");
    auto ambiguous = remove_component(*lock, "libx");
    REQUIRE_FALSE(ambiguous.ok());
    CHECK(ambiguous.error_value().code == error_code::usage);
    REQUIRE(remove_components(*lock, {{"p1", "libx"}}).ok());
    CHECK_FALSE(fs::exists(prefix / "lib/one.so"));
    CHECK(slurp(prefix / "lib/two.so") == "2");
    CHECK_FALSE(fs::exists(prefix / ".redist/receipts/p1"));
    REQUIRE(remove_component(*lock, "libx").ok());
    CHECK_FALSE(fs::exists(prefix / "lib"));
}

TEST_CASE("hardlinked files are recorded as they are on disk") {
    const fs::path prefix = scratch("hardlinks") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    auto stage = make_stage(lock->prefix(), "h");
    REQUIRE(stage.ok());
    // What a pax hardlink entry with data leaves: both names share the inode,
    // which holds the link's data, while the first entry recorded the old data.
    write(*stage / "lib/a.so", "second");
    fs::create_hard_link(*stage / "lib/a.so", *stage / "lib/b.so");
    std::vector<unpacked_entry> entries{{"lib/a.so", entry_kind::regular, 5, sha256_hex("first"), "", 0644},
                                        {"lib/b.so", entry_kind::hardlink, 6, sha256_hex("second"), "lib/a.so", 0644}};
    staged_component staged;
    staged.stage_dir = *stage;
    staged.new_receipt.product = "demo";
    staged.new_receipt.component = "h";
    REQUIRE(prepare_stage(staged, entries).ok());
    for (const auto& f : staged.new_receipt.files) {
        CHECK(f.sha256 == sha256_hex("second"));
        CHECK(f.size == 6);
    }
    std::vector<staged_component> list;
    list.push_back(std::move(staged));
    REQUIRE(commit_stages(*lock, std::move(list)).ok());
    auto problems = verify_prefix(*lock);
    REQUIRE(problems.ok());
    CHECK(problems->problems.empty());
}

TEST_CASE("commit_stages_removing: one transaction installs one component and removes another") {
    const fs::path prefix = scratch("commit_removing") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    std::vector<staged_component> first;
    first.push_back(make_staged(*lock, "a", {{"LICENSE", "la"}, {"include/shared.h", "s"}, {"lib/a.so", "a"}}));
    first.push_back(make_staged(*lock, "b", {{"LICENSE", "lb"}, {"include/shared.h", "s"}, {"lib/b.so", "b"}}));
    REQUIRE(commit_stages(*lock, std::move(first)).ok());
    REQUIRE(fs::exists(prefix / "share/licenses/a/LICENSE"));

    // A refused commit (c clashes with b) removes nothing either.
    std::vector<staged_component> clash;
    clash.push_back(make_staged(*lock, "c", {{"lib/b.so", "not b"}}));
    auto refused = commit_stages_removing(*lock, std::move(clash), {{"demo", "a"}});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().code == error_code::conflict);
    CHECK(slurp(prefix / "lib/a.so") == "a");
    CHECK(fs::exists(prefix / ".redist/receipts/demo/a.json"));
    CHECK(fs::is_empty(prefix / ".redist/staging"));

    std::vector<staged_component> next;
    next.push_back(make_staged(*lock, "c", {{"lib/c.so", "c"}}));
    REQUIRE(commit_stages_removing(*lock, std::move(next), {{"demo", "a"}}).ok());
    CHECK_FALSE(fs::exists(prefix / "lib/a.so"));
    CHECK_FALSE(fs::exists(prefix / "share/licenses/a"));
    CHECK_FALSE(fs::exists(prefix / ".redist/receipts/demo/a.json"));
    CHECK(slurp(prefix / "include/shared.h") == "s");  // b still ships it
    CHECK(slurp(prefix / "lib/b.so") == "b");
    CHECK(slurp(prefix / "share/licenses/b/LICENSE") == "lb");
    CHECK(slurp(prefix / "lib/c.so") == "c");
    CHECK_FALSE(commit_pending(prefix));
    auto receipts = read_receipts(prefix);
    REQUIRE(receipts.ok());
    std::set<std::string> names;
    for (const auto& r : *receipts) names.insert(r.component);
    CHECK(names == std::set<std::string>{"b", "c"});
    auto problems = verify_prefix(*lock);
    REQUIRE(problems.ok());
    CHECK(problems->problems.empty());

    // Removal only; the last component of a product takes its receipt directory along.
    REQUIRE(commit_stages_removing(*lock, {}, {{"demo", "b"}, {"demo", "c"}}).ok());
    CHECK_FALSE(fs::exists(prefix / "include"));
    CHECK_FALSE(fs::exists(prefix / "lib"));
    CHECK_FALSE(fs::exists(prefix / "share"));
    CHECK_FALSE(fs::exists(prefix / ".redist/receipts/demo"));
    auto missing = commit_stages_removing(*lock, {}, {{"demo", "b"}});
    REQUIRE_FALSE(missing.ok());
    CHECK(missing.error_value().code == error_code::not_found);
}

TEST_CASE("a path that is not UTF-8 is never staged, and JSON output is always UTF-8") {
    CHECK(relative_path_problem("lib/caf\xe9.so") != nullptr);
    CHECK(relative_path_problem("lib/caf\xc3\xa9.so") == nullptr);  // UTF-8 is fine
    fake_prefix prefix;
    const receipt r = make_receipt("demo", "a", {{"lib/caf\xe9.so", "a"}});
    auto plan = plan_commit(prefix, {}, {{".redist/staging/a.1", &r}}, {}, false);
    REQUIRE_FALSE(plan.ok());
    CHECK(plan.error_value().code == error_code::unsafe_archive);

    // Whatever a string holds, the writer emits JSON that reads back.
    receipt odd = make_receipt("demo", "a", {{"lib/a.so", "a"}});
    odd.url = "file:///caf\xe9/\xff\xc3(\xed\xa0\x80.tar.xz";
    odd.exclude = {"lib/\x80*"};
    const std::string json = receipt_to_json(odd);
    CHECK(valid_utf8(json));
    auto back = receipt_from_json(json, "r.json");
    REQUIRE(back.ok());
    CHECK(back->url == "file:///caf\xef\xbf\xbd/\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd.tar.xz");
    CHECK(json_escape("a\xc3\xa9\"") == "a\xc3\xa9\\\"");
}

TEST_CASE("a receipt that cannot be read blocks only its own component") {
    const fs::path prefix = scratch("unreadable") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    {
        std::vector<staged_component> both;
        both.push_back(make_staged(*lock, "a", {{"include/a.h", "a"}}));
        both.push_back(make_staged(*lock, "b", {{"include/b.h", "b"}}));
        REQUIRE(commit_stages(*lock, std::move(both)).ok());
    }
    const fs::path bad = prefix / ".redist/receipts/demo/a.json";
    write(bad, "{\"schema\": 1, \"product\": \"demo\", \"component\": \"a\", \"url\": \"\xe9\"}");

    // Everything that reads them all refuses, naming the receipt and the repair.
    auto all = read_receipts(prefix);
    REQUIRE_FALSE(all.ok());
    CHECK(all.error_value().code == error_code::bad_manifest);
    CHECK(all.error_value().describe().find(bad.string()) != std::string::npos);
    CHECK(all.error_value().message.find("fetch it again") != std::string::npos);

    auto scan = scan_receipts(prefix);
    REQUIRE(scan.ok());
    REQUIRE(scan->receipts.size() == 1);
    CHECK(scan->receipts[0].component == "b");
    REQUIRE(scan->unreadable.size() == 1);
    CHECK(scan->unreadable[0].component == "a");
    CHECK(scan->unreadable[0].rel_path == ".redist/receipts/demo/a.json");

    // verify checks the others and reports the unreadable one.
    auto report = verify_prefix(*lock);
    REQUIRE(report.ok());
    CHECK(report->components == 1);
    CHECK(report->problems.empty());
    REQUIRE(report->unreadable.size() == 1);
    CHECK(report->unreadable[0].why.describe().find(bad.string()) != std::string::npos);

    // Another component installs, upgrades and goes; this one is refused.
    std::vector<staged_component> c;
    c.push_back(make_staged(*lock, "c", {{"include/c.h", "c"}}));
    REQUIRE(commit_stages(*lock, std::move(c)).ok());
    CHECK(slurp(prefix / "include/c.h") == "c");
    REQUIRE(remove_component(*lock, "b").ok());
    CHECK_FALSE(fs::exists(prefix / "include/b.h"));
    auto refused = remove_component(*lock, "a");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().code == error_code::bad_manifest);
    CHECK(refused.error_value().describe().find(bad.string()) != std::string::npos);
    CHECK(slurp(prefix / "include/a.h") == "a");

    // Staging it again repairs it: the new receipt takes the place of the bad one.
    std::vector<staged_component> again;
    again.push_back(make_staged(*lock, "a", {{"include/a.h", "a"}}));
    REQUIRE(commit_stages(*lock, std::move(again)).ok());
    auto repaired = read_receipts(prefix);
    REQUIRE(repaired.ok());
    CHECK(repaired->size() == 2);
    REQUIRE(remove_component(*lock, "a").ok());
    CHECK_FALSE(fs::exists(prefix / "include/a.h"));
}

TEST_CASE("an interrupted commit that cannot be completed before its first move is rolled back") {
    const fs::path prefix = scratch("rollback") / "prefix";
    fs::path stage;
    {
        auto lock = prefix_lock::acquire(prefix);
        REQUIRE(lock.ok());
        stage = make_staged(*lock, "x", {{"bin/tool", "t"}}).stage_dir;
    }
    // A journal whose mkdir fails (as it would on a full disk): here "bin"'s
    // parent is a file, so mkdir(2) fails with ENOTDIR every time.
    write(prefix / "blocker", "user");
    const std::string stage_rel = ".redist/staging/" + stage.filename().string();
    const std::string journal = R"({"journal_version":2,"mkdirs":[{"path":"new","mode":493},)"
                                R"({"path":"blocker/bin","mode":493}],"moves":[{"from":")" +
                                stage_rel +
                                R"(/bin/tool","to":"blocker/bin/tool"}],"deletes":[],"prune":[],)"
                                R"("stages":[")" +
                                stage_rel + R"("]})";
    write(prefix / ".redist/transaction.json", journal);
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());  // not wedged: nothing had moved, so the old state is back
    CHECK_FALSE(commit_pending(prefix));
    CHECK_FALSE(fs::exists(stage));
    CHECK_FALSE(fs::exists(prefix / "new"));  // the directory it made is gone again
    CHECK(slurp(prefix / "blocker") == "user");
}
