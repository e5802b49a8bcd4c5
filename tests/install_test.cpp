// Receipts, the prefix lock, commit and remove, at the library level.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "redist/install.hpp"
#include "redist/verify.hpp"

namespace fs = std::filesystem;
using namespace redist;

namespace {

fs::path scratch(const std::string& name) {
    const fs::path dir = fs::path(REDIST_TEST_SCRATCH) / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

void write(const fs::path& path, const std::string& content) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << content;
}

std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A stage holding `files` (path -> content), as the unpacker would leave it.
staged_component make_staged(const prefix_lock& lock, const std::string& component,
                             const std::vector<std::pair<std::string, std::string>>& files) {
    auto stage = make_stage(lock.prefix(), component);
    REQUIRE(stage.ok());
    std::vector<unpacked_entry> entries;
    for (const auto& [path, content] : files) {
        write(*stage / path, content);
        entries.push_back({path, entry_kind::regular, content.size(), sha256_hex(content), "", 0644});
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

TEST_CASE("commit, upgrade without stale files, conflicts leave the prefix unchanged, remove") {
    const fs::path prefix = scratch("commit") / "prefix";
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());

    std::vector<staged_component> first;
    first.push_back(make_staged(*lock, "a", {{"include/a.h", "a1"}, {"lib/old.so", "old"}, {"LICENSE", "L"}}));
    REQUIRE(commit_stages(*lock, std::move(first)).ok());
    CHECK(read(prefix / "include/a.h") == "a1");
    CHECK(read(prefix / "share/licenses/a/LICENSE") == "L");  // top-level files are relocated
    CHECK_FALSE(fs::exists(prefix / ".redist/transaction.json"));

    // Upgrade: lib/old.so is no longer shipped and goes away.
    std::vector<staged_component> upgrade;
    upgrade.push_back(make_staged(*lock, "a", {{"include/a.h", "a2"}, {"LICENSE", "L"}}));
    REQUIRE(commit_stages(*lock, std::move(upgrade)).ok());
    CHECK(read(prefix / "include/a.h") == "a2");
    CHECK_FALSE(fs::exists(prefix / "lib/old.so"));
    CHECK_FALSE(fs::exists(prefix / "lib"));  // emptied directories are pruned

    // Another component with a different file at the same path: conflict, nothing changes, no stage left.
    std::vector<staged_component> clash;
    clash.push_back(make_staged(*lock, "b", {{"include/a.h", "different"}, {"include/b.h", "b"}}));
    auto refused = commit_stages(*lock, std::move(clash));
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error_value().code == error_code::conflict);
    CHECK(refused.error_value().message.find("a and b") != std::string::npos);
    CHECK(read(prefix / "include/a.h") == "a2");
    CHECK_FALSE(fs::exists(prefix / "include/b.h"));
    CHECK(fs::is_empty(prefix / ".redist/staging"));

    // A user's own file is not overwritten silently; the same content is adopted.
    write(prefix / "include/mine.h", "user");
    std::vector<staged_component> overwrite;
    overwrite.push_back(make_staged(*lock, "c", {{"include/mine.h", "theirs"}}));
    auto clobber = commit_stages(*lock, std::move(overwrite));
    REQUIRE_FALSE(clobber.ok());
    CHECK(clobber.error_value().code == error_code::conflict);
    CHECK(read(prefix / "include/mine.h") == "user");

    // An identical file shipped by a second component is shared, and survives removing one owner.
    std::vector<staged_component> shared;
    shared.push_back(make_staged(*lock, "d", {{"include/a.h", "a2"}, {"include/d.h", "d"}}));
    REQUIRE(commit_stages(*lock, std::move(shared)).ok());
    REQUIRE(remove_component(*lock, "a").ok());
    CHECK(read(prefix / "include/a.h") == "a2");
    CHECK_FALSE(fs::exists(prefix / "share/licenses/a/LICENSE"));
    CHECK(read(prefix / "include/mine.h") == "user");
    auto problems = verify_prefix(prefix);
    REQUIRE(problems.ok());
    CHECK(problems->empty());
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
    const std::string journal = R"({"mkdirs":[[")" + (prefix / "bin").string() + R"(",493]],"moves":[[")" +
                                (stage / "bin/tool").string() + R"(",")" + (prefix / "bin/tool").string() +
                                R"("]],"deletes":[],"prune":[],"stages":[")" + stage.string() + R"("]})";
    write(prefix / ".redist/transaction.json", journal);
    CHECK(commit_pending(prefix));
    auto lock = prefix_lock::acquire(prefix);
    REQUIRE(lock.ok());
    CHECK(read(prefix / "bin/tool") == "t");
    CHECK_FALSE(commit_pending(prefix));
    CHECK_FALSE(fs::exists(stage));
}
