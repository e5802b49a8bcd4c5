// The cache's trust rules at the library level: who may own its directories,
// how a cached tree is validated, and how files in it are opened.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "archive/sha256.hpp"
#include "redist/cache.hpp"
#include "store/cache_file.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace redist_test;
using namespace redist;

namespace {

constexpr uid_t k_nobody = 65534;

struct stat stat_of(const fs::path& path) {
    struct stat st {};
    REQUIRE(::lstat(path.c_str(), &st) == 0);
    return st;
}

// Overwrites a file in place with same-size content and puts its mtime back:
// the edit that size-and-mtime checks cannot see.
void edit_keeping_size_and_mtime(const fs::path& path, const std::string& content) {
    const struct stat before = stat_of(path);
    REQUIRE(content.size() == static_cast<std::size_t>(before.st_size));
    {
        std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
        f.write(content.data(), static_cast<std::streamsize>(content.size()));
    }
    const struct timespec times[2] = {before.st_atim, before.st_mtim};
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW) == 0);
    REQUIRE(stat_of(path).st_mtim.tv_nsec == before.st_mtim.tv_nsec);
}

installed_file regular(const std::string& path, const std::string& content, unsigned mode = 0644) {
    installed_file f;
    f.path = path;
    f.size = content.size();
    f.sha256 = receipt_digest_oracle(content);
    f.piece_size = piece_size_for(content.size());
    f.mode = mode;
    return f;
}

installed_file symlink_entry(const std::string& path, const std::string& target) {
    installed_file f;
    f.path = path;
    f.kind = entry_kind::symlink;
    f.link_target = target;
    f.mode = 0777;
    return f;
}

const std::string k_sha = std::string(64, 'a');

// A stage like the unpacker leaves it, and its file list.
struct fixture {
    fs::path root;
    fs::path stage;
    std::vector<installed_file> files;

    explicit fixture(const std::string& name) : root(scratch(name)), stage(root / "stage") {
        write(stage / "include/a.h", "#define A 1\n");
        write(stage / "lib/libx.so.1", std::string(5000, 'x'));
        fs::create_symlink("libx.so.1", stage / "lib/libx.so");
        files = {regular("include/a.h", "#define A 1\n"), regular("lib/libx.so.1", std::string(5000, 'x'), 0755),
                 symlink_entry("lib/libx.so", "libx.so.1")};
    }

    blob_cache cache(bool shared = false) const {
        auto c = blob_cache::open(root / "cache", shared);
        REQUIRE(c.ok());
        return std::move(c).value();
    }

    // Materializes into a fresh stage; returns the files, or nullopt.
    std::optional<std::vector<installed_file>> place(const blob_cache& c, link_mode mode = link_mode::copy,
                                                     const std::string& into = "out") const {
        const fs::path out = root / into;
        fs::remove_all(out);
        fs::create_directories(out);
        auto placed = c.materialize_tree(k_sha, out, mode);
        REQUIRE(placed.ok());
        return *placed;
    }

    fs::path tree() const { return root / "cache" / "trees" / k_sha; }

    // Rewrites the tree list through a text substitution (as root may do).
    void rewrite_list(const std::string& from, const std::string& to) const {
        const fs::path list = tree() / ".redist-tree.json";
        std::string text = slurp(list);
        const auto at = text.find(from);
        REQUIRE(at != std::string::npos);
        text.replace(at, from.size(), to);
        fs::remove(list);
        write(list, text);
    }
};

}  // namespace

TEST_CASE("a cache of our own is created 0755 and opened", "[cache]") {
    const fs::path root = scratch("own") / "cache";
    const mode_t old_umask = ::umask(002);  // a group-writable umask must not make our own cache untrusted
    auto cache = blob_cache::open(root);
    ::umask(old_umask);
    REQUIRE(cache.ok());
    for (const char* sub :
         {"", "blobs", "blobs/sha256", "trees", "documents", "locks", "history", "history/urls", "history/documents"}) {
        const struct stat st = stat_of(root / sub);
        CHECK(S_ISDIR(st.st_mode));
        CHECK((st.st_mode & 0777) == 0755);
        CHECK(st.st_uid == ::geteuid());
    }
    CHECK(blob_cache::open(root).ok());
}

TEST_CASE("a group- or other-writable cache directory is refused with a fix", "[cache]") {
    const fs::path root = scratch("writable") / "cache";
    REQUIRE(blob_cache::open(root).ok());
    for (const char* sub : {"", "blobs/sha256", "trees", "documents", "locks", "history", "history/urls"}) {
        const fs::path dir = root / sub;
        for (mode_t mode : {0775, 0757}) {
            REQUIRE(::chmod(dir.c_str(), mode) == 0);
            auto refused = blob_cache::open(root);
            REQUIRE_FALSE(refused.ok());
            const std::string msg = refused.error_value().describe();
            CHECK(refused.error_value().code == error_code::filesystem);
            CHECK(msg.find("writable by group or others") != std::string::npos);
            CHECK(msg.find("chmod go-w") != std::string::npos);
            CHECK(msg.find("--shared-cache") != std::string::npos);
            CHECK(msg.find('\n') == std::string::npos);
            CHECK(stat_of(dir).st_mode % 01000 == mode);  // never chmod'ed back behind the user's back
            // Opted in: accepted.
            CHECK(blob_cache::open(root, true).ok());
        }
        REQUIRE(::chmod(dir.c_str(), 0755) == 0);
    }
    CHECK(blob_cache::open(root).ok());
}

TEST_CASE("a cache directory owned by another user is refused", "[cache]") {
    if (::geteuid() != 0) {
        WARN("needs root to chown; skipped");
        return;
    }
    const fs::path root = scratch("foreign") / "cache";
    REQUIRE(blob_cache::open(root).ok());
    for (const char* sub : {"", "blobs", "locks"}) {
        const fs::path dir = root / sub;
        REQUIRE(::chown(dir.c_str(), k_nobody, static_cast<gid_t>(-1)) == 0);
        auto refused = blob_cache::open(root);
        REQUIRE_FALSE(refused.ok());
        const std::string msg = refused.error_value().describe();
        CHECK(msg.find("owned by uid 65534, not by you (uid 0)") != std::string::npos);
        CHECK(msg.find("chown") != std::string::npos);
        CHECK(blob_cache::open(root, true).ok());
        REQUIRE(::chown(dir.c_str(), 0, static_cast<gid_t>(-1)) == 0);
    }
}

TEST_CASE("a cache subdirectory that is a symlink is refused, even shared", "[cache]") {
    const fs::path base = scratch("symlinked");
    const fs::path root = base / "cache";
    fs::create_directories(root);
    fs::create_directories(base / "elsewhere");
    fs::create_directory_symlink(base / "elsewhere", root / "locks");
    for (bool shared : {false, true}) {
        auto refused = blob_cache::open(root, shared);
        REQUIRE_FALSE(refused.ok());
        CHECK(refused.error_value().describe().find("symlink or not a directory") != std::string::npos);
    }
    CHECK(fs::is_empty(base / "elsewhere"));
}

TEST_CASE("the default cache is never a fixed shared path", "[cache]") {
    struct saved_env {
        std::string name;
        std::optional<std::string> value;
        explicit saved_env(std::string n) : name(std::move(n)) {
            if (const char* v = std::getenv(name.c_str())) value = v;
            ::unsetenv(name.c_str());
        }
        ~saved_env() {
            if (value) ::setenv(name.c_str(), value->c_str(), 1);
        }
    };
    saved_env home("HOME"), xdg("XDG_CACHE_HOME"), redist_dir("REDIST_CACHE_DIR");
    const fs::path dir = default_cache_dir();
    CHECK(dir.string().rfind(fs::temp_directory_path().string(), 0) != 0);
    if (!dir.empty()) CHECK(dir.filename() == "redist");
    ::setenv("XDG_CACHE_HOME", "relative/path", 1);  // not absolute: ignored, as the XDG spec says
    CHECK(default_cache_dir() == dir);
    ::setenv("XDG_CACHE_HOME", "/xdg", 1);
    CHECK(default_cache_dir() == fs::path("/xdg/redist"));
    CHECK(default_cache_dir("/explicit") == fs::path("/explicit"));
    auto none = blob_cache::open(fs::path());
    REQUIRE_FALSE(none.ok());
    CHECK(none.error_value().describe().find("--cache-dir") != std::string::npos);
}

TEST_CASE("a tree is stored by hard links to the stage, and later prefixes get copies", "[cache][tree]") {
    fixture fx("tree-copy");
    const blob_cache c = fx.cache();
    c.store_tree(k_sha, fx.stage, fx.files);
    REQUIRE(fs::exists(fx.tree() / ".redist-tree.json"));
    const struct stat staged = stat_of(fx.stage / "lib/libx.so.1");
    const struct stat cached = stat_of(fx.tree() / "lib/libx.so.1");
    CHECK(staged.st_ino == cached.st_ino);  // no byte copied on the cold install
    CHECK((cached.st_mode & 022) == 0);

    for (link_mode mode : {link_mode::copy, link_mode::auto_select}) {
        auto placed = fx.place(c, mode);
        REQUIRE(placed);
        CHECK(placed->size() == 3);
        CHECK(slurp(fx.root / "out/include/a.h") == "#define A 1\n");
        CHECK(fs::read_symlink(fx.root / "out/lib/libx.so") == "libx.so.1");
        CHECK(stat_of(fx.root / "out/lib/libx.so.1").st_ino != cached.st_ino);
        CHECK((stat_of(fx.root / "out/lib/libx.so.1").st_mode & 0777) == 0755);
    }
    // Only hardlink, when asked for, shares.
    auto linked = fx.place(c, link_mode::hardlink);
    REQUIRE(linked);
    CHECK(stat_of(fx.root / "out/lib/libx.so.1").st_ino == cached.st_ino);
}

TEST_CASE("a stage file others may write, or a shared cache, is copied into the tree", "[cache][tree]") {
    for (bool shared : {false, true}) {
        fixture fx(shared ? "tree-copied-shared" : "tree-copied-mode");
        if (!shared) {
            fs::permissions(fx.stage / "lib/libx.so.1", fs::perms::others_write, fs::perm_options::add);
            fx.files[1].mode = 0757;
        }
        fx.cache(shared).store_tree(k_sha, fx.stage, fx.files);
        const struct stat cached = stat_of(fx.tree() / "lib/libx.so.1");
        CHECK(stat_of(fx.stage / "lib/libx.so.1").st_ino != cached.st_ino);
        CHECK((cached.st_mode & 022) == 0);
    }
}

TEST_CASE("an edit in the prefix the tree was stored from is caught by the tree's digests", "[cache][tree]") {
    fixture fx("tree-first-prefix-edit");
    const blob_cache c = fx.cache();
    c.store_tree(k_sha, fx.stage, fx.files);
    // The stage became the first prefix; its file is edited in place, size
    // and mtime put back: the shared inode's ctime moved.
    edit_keeping_size_and_mtime(fx.stage / "include/a.h", "#define A 2\n");
    CHECK_FALSE(fx.place(c));
    CHECK_FALSE(fs::exists(fx.tree()));  // dropped: the next install rebuilds it from the archive
}

TEST_CASE("a tree restored with new inodes and ctimes is verified once, then trusted", "[cache][tree]") {
    for (link_mode mode : {link_mode::copy, link_mode::hardlink}) {
        fixture fx(mode == link_mode::copy ? "tree-restored" : "tree-restored-hardlink");
        fx.cache().store_tree(k_sha, fx.stage, fx.files);
        // What a CI cache restore (tar, cp -a) leaves: the same bytes, lists
        // and mtimes, in new files.
        fs::rename(fx.root / "cache", fx.root / "saved");
        REQUIRE(std::system(
                    ("cp -a '" + (fx.root / "saved").string() + "' '" + (fx.root / "cache").string() + "'").c_str()) ==
                0);
        const blob_cache c = fx.cache();
        const std::string before = slurp(fx.tree() / ".redist-tree.json");
        auto placed = fx.place(c, mode);
        REQUIRE(placed);
        CHECK(slurp(fx.root / "out/lib/libx.so.1") == std::string(5000, 'x'));
        // The new identity is recorded: the next install takes the cheap check.
        const std::string after = slurp(fx.tree() / ".redist-tree.json");
        CHECK(after != before);
        CHECK(after.find("\"ino\":" + std::to_string(stat_of(fx.tree() / "include/a.h").st_ino)) != std::string::npos);
        REQUIRE(fx.place(c, mode, "again"));
    }
}

TEST_CASE("a restored tree with a file edited before the save is not used", "[cache][tree]") {
    fixture fx("tree-restored-edited");
    fx.cache().store_tree(k_sha, fx.stage, fx.files);
    fs::rename(fx.root / "cache", fx.root / "saved");
    edit_keeping_size_and_mtime(fx.root / "saved/trees" / k_sha / "include/a.h", "#define A 2\n");
    REQUIRE(std::system(
                ("cp -a '" + (fx.root / "saved").string() + "' '" + (fx.root / "cache").string() + "'").c_str()) == 0);
    CHECK_FALSE(fx.place(fx.cache()));
    CHECK_FALSE(fs::exists(fx.tree()));
}

TEST_CASE("a tree file edited with its size and mtime kept is not used", "[cache][tree]") {
    for (bool shared : {false, true}) {
        fixture fx(shared ? "tree-edit-shared" : "tree-edit");
        const blob_cache c = fx.cache(shared);
        c.store_tree(k_sha, fx.stage, fx.files);
        REQUIRE(fx.place(c));
        edit_keeping_size_and_mtime(fx.tree() / "include/a.h", "#define A 2\n");
        CHECK_FALSE(fx.place(c));
        CHECK(fs::is_empty(fx.root / "out"));
        // Ours: the tree is dropped, so the next install rebuilds it from the archive.
        CHECK(fs::exists(fx.tree()) == shared);
    }
}

TEST_CASE("shared: every file is re-hashed, even when inode, mtime and ctime look right", "[cache][tree]") {
    fixture fx("tree-rehash");
    // The stage file already differs from the list: the tree records the
    // wrong bytes with their true inode and times, which only a hash notices.
    write(fx.stage / "include/a.h", "#define B 1\n");
    fx.cache().store_tree(k_sha, fx.stage, fx.files);
    CHECK_FALSE(fx.place(fx.cache(true)));
}

TEST_CASE("shared: a file above one piece is re-hashed by its piece list", "[cache][tree]") {
    fixture fx("tree-pieces");
    std::string big((9u << 20) + 1, 'b');
    big[(8u << 20) + 1] = 'c';
    write(fx.stage / "lib/libbig.so", big);
    fx.files.push_back(regular("lib/libbig.so", big, 0755));
    REQUIRE(fx.files.back().piece_size == receipt_piece_bytes);
    fx.cache().store_tree(k_sha, fx.stage, fx.files);
    CHECK(slurp(fx.tree() / ".redist-tree.json").find("\"piece_size\":8388608") != std::string::npos);
    auto placed = fx.place(fx.cache(true));
    REQUIRE(placed);
    const auto it = std::find_if(placed->begin(), placed->end(),
                                 [](const auto& f) { return f.path == "lib/libbig.so"; });
    REQUIRE(it != placed->end());
    CHECK(it->piece_size == receipt_piece_bytes);
    CHECK(it->sha256 == receipt_digest_oracle(big));
    CHECK(slurp(fx.root / "out/lib/libbig.so") == big);
    // One byte of the second piece, size and mtime kept: the re-hash notices.
    big[(8u << 20) + 1] = 'd';
    edit_keeping_size_and_mtime(fx.tree() / "lib/libbig.so", big);
    CHECK_FALSE(fx.place(fx.cache(true)));
}

TEST_CASE("the tree list must be ours and say safe things", "[cache][tree]") {
    SECTION("a symlink target that leaves the tree") {
        fixture fx("list-escape");
        fx.cache().store_tree(k_sha, fx.stage, fx.files);
        fx.rewrite_list("\"target\":\"libx.so.1\"", "\"target\":\"../../../etc/passwd\"");
        CHECK_FALSE(fx.place(fx.cache()));
        CHECK_FALSE(fs::exists(fx.tree()));
    }
    SECTION("an absolute symlink target") {
        fixture fx("list-absolute");
        fx.cache().store_tree(k_sha, fx.stage, fx.files);
        fx.rewrite_list("\"target\":\"libx.so.1\"", "\"target\":\"/etc/passwd\"");
        CHECK_FALSE(fx.place(fx.cache(true)));
        CHECK(fs::exists(fx.tree()));  // shared: left alone
    }
    SECTION("a path with ..") {
        fixture fx("list-dotdot");
        fx.cache().store_tree(k_sha, fx.stage, fx.files);
        fx.rewrite_list("\"path\":\"include/a.h\"", "\"path\":\"../a.h\"");
        CHECK_FALSE(fx.place(fx.cache()));
    }
    // These two rename the file in the tree too, so that only the list's
    // validation stands between the name and the stage (shared: the copy is
    // re-hashed, and its content is right).
    const auto renamed = [](const fixture& fx, const std::string& to) {
        fx.cache().store_tree(k_sha, fx.stage, fx.files);
        fs::permissions(fx.tree(), fs::perms::owner_all, fs::perm_options::add);
        fs::create_directories((fx.tree() / to).parent_path());
        fs::rename(fx.tree() / "include/a.h", fx.tree() / to);
    };
    SECTION("a path into .redist/ (it would be placed among the prefix's receipts)") {
        fixture fx("list-state");
        renamed(fx, ".redist/receipts/demo/x.json");
        fx.rewrite_list("\"path\":\"include/a.h\"", "\"path\":\".redist/receipts/demo/x.json\"");
        CHECK_FALSE(fx.place(fx.cache(true)));
        CHECK_FALSE(fs::exists(fx.root / "out/.redist"));
    }
    SECTION("a path that no receipt could hold (a control character)") {
        fixture fx("list-control");
        renamed(fx, "include/a\x01.h");
        fx.rewrite_list("\"path\":\"include/a.h\"", "\"path\":\"include/a\\u0001.h\"");
        CHECK_FALSE(fx.place(fx.cache(true)));
    }
    SECTION("a piece size that is not one") {
        fixture fx("list-piece");
        fx.cache().store_tree(k_sha, fx.stage, fx.files);
        fx.rewrite_list("\"mode\":420", "\"mode\":420,\"piece_size\":1000");
        CHECK_FALSE(fx.place(fx.cache()));
    }
    SECTION("a tree moved under another blob's name") {
        fixture fx("list-moved");
        fx.cache().store_tree(k_sha, fx.stage, fx.files);
        fx.rewrite_list("\"archive\":\"" + k_sha + "\"", "\"archive\":\"" + std::string(64, 'b') + "\"");
        CHECK_FALSE(fx.place(fx.cache()));
    }
    SECTION("a list that is a hard link") {
        fixture fx("list-linked");
        fx.cache().store_tree(k_sha, fx.stage, fx.files);
        fs::create_hard_link(fx.tree() / ".redist-tree.json", fx.root / "second-name");
        CHECK_FALSE(fx.place(fx.cache()));
    }
    SECTION("a list writable by others") {
        fixture fx("list-mode");
        fx.cache().store_tree(k_sha, fx.stage, fx.files);
        ::chmod((fx.tree() / ".redist-tree.json").c_str(), 0666);
        CHECK_FALSE(fx.place(fx.cache(true)));
    }
    SECTION("a list owned by another user") {
        if (::geteuid() != 0) return;
        fixture fx("list-foreign");
        fx.cache().store_tree(k_sha, fx.stage, fx.files);
        REQUIRE(::chown((fx.tree() / ".redist-tree.json").c_str(), k_nobody, static_cast<gid_t>(-1)) == 0);
        CHECK_FALSE(fx.place(fx.cache(true)));
    }
}

TEST_CASE("symlinks that escape through other symlinks are refused", "[cache][tree]") {
    // For the kernel, d/s/.. is the tree's root when d/s -> ., so x leaves
    // the tree although d/s/../.. looks harmless written out.
    fixture fx("chain");
    fs::create_directories(fx.stage / "d");
    fs::create_symlink(".", fx.stage / "d/s");
    fs::create_symlink("d/s/../..", fx.stage / "x");
    auto files = fx.files;
    files.push_back(symlink_entry("d/s", "."));
    files.push_back(symlink_entry("x", "d/s/../.."));
    fx.cache().store_tree(k_sha, fx.stage, files);
    CHECK_FALSE(fs::exists(fx.tree()));  // not even recorded
    // A harmless relative link through a symlinked directory is fine.
    fixture ok("chain-ok");
    fs::create_symlink("lib", ok.stage / "lib64");
    auto ok_files = ok.files;
    ok_files.push_back(symlink_entry("lib64", "lib"));
    ok_files.push_back(symlink_entry("include/x.so", "../lib64/libx.so"));
    fs::create_symlink("../lib64/libx.so", ok.stage / "include/x.so");
    ok.cache().store_tree(k_sha, ok.stage, ok_files);
    CHECK(ok.place(ok.cache()));
}

TEST_CASE("holes survive the cache", "[cache][tree]") {
    fixture fx("sparse");
    const fs::path big = fx.stage / "lib/sparse.bin";
    const off_t size = 64 << 20;
    {
        const int fd = ::open(big.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        REQUIRE(fd >= 0);
        REQUIRE(::pwrite(fd, "head", 4, 0) == 4);
        REQUIRE(::pwrite(fd, "tail", 4, size - 4) == 4);
        ::close(fd);
    }
    std::string content(static_cast<std::size_t>(size), '\0');
    content.replace(0, 4, "head");
    content.replace(content.size() - 4, 4, "tail");
    auto files = fx.files;
    files.push_back(regular("lib/sparse.bin", content));
    const struct stat src = stat_of(big);
    if (static_cast<off_t>(src.st_blocks) * 512 >= size / 2) {
        WARN("this filesystem does not keep holes; skipped");
        return;
    }
    for (bool shared : {false, true}) {
        const blob_cache c = fx.cache(shared);
        if (!shared) c.store_tree(k_sha, fx.stage, files);
        CHECK(static_cast<off_t>(stat_of(fx.tree() / "lib/sparse.bin").st_blocks) * 512 < size / 2);
        auto placed = fx.place(c, link_mode::copy);
        REQUIRE(placed);
        const struct stat out = stat_of(fx.root / "out/lib/sparse.bin");
        CHECK(out.st_size == size);
        CHECK(static_cast<off_t>(out.st_blocks) * 512 < size / 2);
        CHECK(slurp(fx.root / "out/lib/sparse.bin") == content);
    }
}

TEST_CASE("cache files are opened without following planted symlinks", "[cache]") {
    const fs::path dir = scratch("open");
    write(dir / "victim", "precious");
    const fs::path part = dir / "x.part";
    fs::create_symlink(dir / "victim", part);

    // read and append refuse the symlink.
    CHECK_FALSE(open_cache_file(part, cache_file_access::read).ok());
    CHECK_FALSE(open_cache_file(part, cache_file_access::append).ok());
    CHECK_FALSE(resumable_cache_file(part, 1000));
    // create_fresh replaces the link, not its target.
    auto fresh = open_cache_file(part, cache_file_access::create_fresh);
    REQUIRE(fresh.ok());
    CHECK(::write(*fresh, "new", 3) == 3);
    ::close(*fresh);
    CHECK(slurp(dir / "victim") == "precious");
    CHECK_FALSE(fs::is_symlink(part));
    CHECK(slurp(part) == "new");
    CHECK(resumable_cache_file(part, 1000));
    CHECK_FALSE(resumable_cache_file(part, 2));  // longer than the artifact

    // A hard link to somebody's file is not appended to.
    fs::remove(part);
    fs::create_hard_link(dir / "victim", part);
    CHECK_FALSE(open_cache_file(part, cache_file_access::append).ok());
    CHECK_FALSE(resumable_cache_file(part, 1000));

    // A FIFO neither blocks nor is read.
    const fs::path fifo = dir / "fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
    auto opened = open_cache_file(fifo, cache_file_access::read);
    REQUIRE_FALSE(opened.ok());
    CHECK(opened.error_value().describe().find("not a regular file") != std::string::npos);
}

TEST_CASE("documents: bounded, no symlinks, and in a shared cache only our own", "[cache]") {
    const fs::path base = scratch("documents");
    auto opened = blob_cache::open(base / "cache");
    REQUIRE(opened.ok());
    const blob_cache& c = *opened;
    const std::string url = "https://example.com/x.json";
    c.store_document(url, "{\"a\":1}");
    CHECK(c.load_document(url) == std::optional<std::string>("{\"a\":1}"));
    CHECK_FALSE(c.load_document(url, 3));  // over the limit
    const fs::path doc = base / "cache" / "documents" / sha256_hex(url);
    fs::remove(doc);
    write(base / "elsewhere", "{\"planted\":1}");
    fs::create_symlink(base / "elsewhere", doc);
    CHECK_FALSE(c.load_document(url));
    fs::remove(doc);
    if (::geteuid() == 0) {
        write(doc, "{\"planted\":1}");
        REQUIRE(::chown(doc.c_str(), k_nobody, static_cast<gid_t>(-1)) == 0);
        CHECK(c.load_document(url));  // not shared: the directory is ours, so is what is in it
        auto shared = blob_cache::open(base / "cache", true);
        REQUIRE(shared.ok());
        CHECK_FALSE(shared->load_document(url));
    }
}

TEST_CASE("a digest that is not hex never becomes a path", "[cache]") {
    const fs::path base = scratch("hex");
    auto c = blob_cache::open(base / "cache");
    REQUIRE(c.ok());
    auto lock = c->lock_blob("../../../escape");
    REQUIRE_FALSE(lock.ok());
    CHECK(lock.error_value().code == error_code::bad_manifest);
    CHECK_FALSE(fs::exists(base / "escape.lock"));
}

TEST_CASE("shared: a cache directory swapped for a symlink after open does not redirect us", "[cache]") {
    const fs::path base = scratch("swapped");
    const fs::path root = base / "cache";
    auto opened = blob_cache::open(root, true);
    REQUIRE(opened.ok());
    const blob_cache& c = *opened;
    fs::create_directories(base / "elsewhere");
    // Another user of the shared cache moves blobs/sha256 away and plants a symlink.
    fs::rename(root / "blobs" / "sha256", base / "moved");
    fs::create_directory_symlink(base / "elsewhere", root / "blobs" / "sha256");
    auto fresh = open_cache_file(c.partial_path(k_sha), cache_file_access::create_fresh);
    REQUIRE(fresh.ok());
    ::close(*fresh);
    CHECK(fs::is_empty(base / "elsewhere"));
    CHECK(fs::exists(base / "moved" / (k_sha + ".part")));
    fs::rename(root / "locks", base / "moved-locks");
    fs::create_directory_symlink(base / "elsewhere", root / "locks");
    CHECK(c.lock_blob(k_sha).ok());
    CHECK(fs::is_empty(base / "elsewhere"));
}
