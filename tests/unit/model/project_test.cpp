// redist.toml: a full example, defaults, and errors that name the line,
// the column and the key.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <tuple>

#include "model/project.hpp"
#include "redist/project.hpp"
#include "support.hpp"

using namespace redist;

namespace {

const char* const kExample = R"(# a project with every section
[project]
prefix = "nvidia"                       # relative to the file's directory
platforms = ["linux-x86_64", "linux-sbsa"]
cuda = "12"
base-url = "https://developer.download.nvidia.com/compute"
exclude = ["lib/*_static*.a"]

[products.cuda]
version = "12.9"
components = ["cuda_nvcc", "cuda_cudart", "libcublas"]

[products.cudnn]
version = "9"                           # components: optional, default every component
)";

error parse_error(const std::string& text) {
    auto p = parse_project(text, "/work/app/redist.toml");
    REQUIRE_FALSE(p.ok());
    CHECK(p.error_value().code == error_code::bad_manifest);
    CHECK(p.error_value().source.rfind("/work/app/redist.toml:", 0) == 0);
    return p.error_value();
}

}  // namespace

TEST_CASE("a full example parses") {
    auto p = parse_project(kExample, "/work/app/redist.toml");
    REQUIRE(p.ok());
    CHECK(p->prefix == "/work/app/nvidia");  // relative to the file's directory
    CHECK(p->platforms == std::vector<std::string>{"linux-x86_64", "linux-sbsa"});
    CHECK(p->cuda == 12);
    CHECK(p->base_url == "https://developer.download.nvidia.com/compute");
    CHECK(p->exclude == std::vector<std::string>{"lib/*_static*.a"});
    REQUIRE(p->products.size() == 2);
    CHECK(p->products[0].name == "cuda");
    CHECK(p->products[0].version == "12.9");
    CHECK(p->products[0].components == std::vector<std::string>{"cuda_nvcc", "cuda_cudart", "libcublas"});
    CHECK(p->products[0].line == 9);
    CHECK(p->products[1].name == "cudnn");
    CHECK(p->products[1].components.empty());  // every component
}

TEST_CASE("optional keys, an absolute prefix and an integer cuda") {
    auto p = parse_project(
        "[project]\nprefix = \"/opt/nv\"\nplatforms = [\"linux-sbsa\"]\ncuda = 13\n"
        "[products.cutensor]\nversion = \"latest\"\n",
        "redist.toml");
    REQUIRE(p.ok());
    CHECK(p->prefix == "/opt/nv");
    CHECK(p->cuda == 13);
    CHECK(p->base_url.empty());
    CHECK(p->mirrors.empty());
    auto no_cuda = parse_project(
        "[project]\nprefix = \"p\"\nplatforms = [\"linux-sbsa\"]\n"
        "[products.cutensor]\nversion = \"2\"\n",
        "sub/redist.toml");
    REQUIRE(no_cuda.ok());
    CHECK_FALSE(no_cuda->cuda);
    CHECK(no_cuda->prefix == "sub/p");
}

TEST_CASE("a product's own cuda, in its table or an inline one") {
    auto p = parse_project(
        "[project]\nprefix = \"p\"\nplatforms = [\"linux-sbsa\"]\ncuda = 13\n"
        "[products]\ncuda = { version = \"latest\", cuda = 12 }\n[products.cudnn]\nversion = \"9\"\n",
        "redist.toml");
    REQUIRE(p.ok());
    REQUIRE(p->products.size() == 2);
    CHECK(p->products[0].name == "cuda");
    CHECK(p->products[0].cuda == 12);
    CHECK_FALSE(p->products[1].cuda);
    auto bad = parse_project(
        "[project]\nprefix = \"p\"\nplatforms = [\"linux-sbsa\"]\n"
        "[products.cuda]\nversion = \"latest\"\ncuda = \"12.9\"\n",
        "redist.toml");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error_value().json_path == "products.cuda.cuda");
}

TEST_CASE("errors name the line, the column and the key") {
    SECTION("a wrong type") {
        const auto e = parse_error(
            "[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\n"
            "[products.cuda]\nversion = 12.9\n");
        CHECK(e.json_path == "products.cuda.version");
        CHECK(e.source.rfind("/work/app/redist.toml:5:", 0) == 0);
        CHECK(e.message == "expected a string");
        CHECK(e.describe() == "/work/app/redist.toml:5:11: products.cuda.version: expected a string");
    }
    SECTION("a typo in a key") {
        const auto e = parse_error("[project]\nprefix = \"p\"\nplatform = [\"linux-x86_64\"]\n");
        CHECK(e.json_path == "project.platform");
        CHECK(e.source == "/work/app/redist.toml:3:1");
        CHECK(e.message.find("unknown key") != std::string::npos);
    }
    SECTION("a missing version") {
        const auto e = parse_error(
            "[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\n\n"
            "[products.cudnn]\ncomponents = [\"cudnn\"]\n");
        CHECK(e.json_path == "products.cudnn.version");
        CHECK(e.source.rfind("/work/app/redist.toml:5:", 0) == 0);
    }
    SECTION("a duplicate component") {
        const auto e = parse_error(
            "[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\n"
            "[products.cuda]\nversion = \"12\"\ncomponents = [\"a\", \"a\"]\n");
        CHECK(e.json_path == "products.cuda.components[1]");
        CHECK(e.source.rfind("/work/app/redist.toml:6:", 0) == 0);
    }
    SECTION("a bad cuda value") {
        const auto e = parse_error(
            "[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\ncuda = \"12.9\"\n"
            "[products.cuda]\nversion = \"12\"\n");
        CHECK(e.json_path == "project.cuda");
        CHECK(e.source.rfind("/work/app/redist.toml:4:", 0) == 0);
    }
    SECTION("an escaping exclude pattern") {
        const auto e = parse_error(
            "[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\n"
            "exclude = [\"../etc/*\"]\n[products.cuda]\nversion = \"12\"\n");
        CHECK(e.json_path == "project.exclude[0]");
    }
    SECTION("an unknown platform names the likely one") {
        const auto e = parse_error(
            "[project]\nprefix = \"p\"\nplatforms = [\"linux-x86-64\"]\n[products.a]\nversion = \"1\"\n");
        CHECK(e.json_path == "project.platforms[0]");
        CHECK(e.message.find("did you mean 'linux-x86_64'?") != std::string::npos);
    }
    SECTION("missing pieces") {
        CHECK(parse_error("[products.cuda]\nversion = \"12\"\n").json_path == "project");
        CHECK(parse_error("[project]\nplatforms = [\"linux-x86_64\"]\n[products.a]\nversion = \"1\"\n").json_path ==
              "project.prefix");
        CHECK(parse_error("[project]\nprefix = \"p\"\n[products.a]\nversion = \"1\"\n").json_path ==
              "project.platforms");
        CHECK(parse_error("[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\n").json_path == "products");
        CHECK(parse_error("[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\n[extra]\n").json_path == "extra");
    }
    SECTION("a table header without a key (toml++ 3.3 asserts on it; found by project_fuzz)") {
        for (const char* text :
             {"[(roject]\nprefix = \"p\"\n", "[project]\nprefix = \"p\"\n[]\n", "[project]\n  [[ \t(x]]\n"}) {
            INFO(text);
            const auto e = parse_error(text);
            CHECK(e.message.find("must start with a key") != std::string::npos);
        }
        CHECK(parse_error("[(roject]\n").source == "/work/app/redist.toml:1");
    }
    SECTION("non-ASCII bytes (toml++ 3.3 reaches unreachable code on them; found by project_fuzz)") {
        const auto e = parse_error("[project]\nprefix = \"p\"\n\xC3\xA9 = 1\n");
        CHECK(e.source == "/work/app/redist.toml:3");
        CHECK(e.message.find("non-ASCII") != std::string::npos);
        // The fuzzer's input: a stray quote before the byte, in an invalid value.
        CHECK(parse_error("atform =55554p\x10\\\"\xd1\x87pt5\n").source.rfind("/work/app/redist.toml:1", 0) == 0);
        // Invalid UTF-8, even in a comment or a string.
        CHECK(parse_error("# K\xC3hler\n[project]\n").message.find("invalid UTF-8") != std::string::npos);
        CHECK(parse_error("[project]\nprefix = \"caf\xC3\"\n").source == "/work/app/redist.toml:2");
        CHECK(parse_error("[project]\nprefix = \"a\\\xC3\xA9\"\n").source == "/work/app/redist.toml:2");
        // Any character, written as an escape.
        auto ok = parse_project(
            "[project]\nprefix = \"caf\\u00e9\"\nplatforms = [\"linux-x86_64\"]\n"
            "[products.cuda]\nversion = '12'\n",
            "/x/redist.toml");
        REQUIRE(ok.ok());
        CHECK(ok->prefix == "/x/caf\xC3\xA9");
    }
    SECTION("UTF-8 in comments and \"basic strings\" is kept as written") {
        auto ok = parse_project(
            "# K\xC3\xBChler's build \xE2\x80\x94 \xF0\x9F\x9A\x80\n[project]\nprefix = \"caf\xC3\xA9 \\\" "
            "\xF0\x9F\x9A\x80\"  # \xC3\xA9\n"
            "platforms = [\"linux-x86_64\"]\nexclude = ['lib\\m\"\xC3\xA9', \'\'\'x\\\xC3\xA9\'\'\']\n"
            "[products.cuda]\nversion = '12' # \xC3\xA9 '\n"
            "components = [\"\"\"cuda_nvcc\"\"\"]\n",
            "/x/redist.toml");
        REQUIRE(ok.ok());
        CHECK(ok->prefix == "/x/caf\xC3\xA9 \" \xF0\x9F\x9A\x80");
        CHECK(ok->products.at(0).components == std::vector<std::string>{"cuda_nvcc"});
        CHECK(ok->exclude == std::vector<std::string>{"lib\\m\"\xC3\xA9", "x\\\xC3\xA9"});
    }
    SECTION("broken TOML carries toml++'s reason and position") {
        const auto e = parse_error("[project]\nprefix = \"p\n");
        CHECK(e.json_path.empty());
        CHECK(e.source.rfind("/work/app/redist.toml:2:", 0) == 0);
    }
}

TEST_CASE("the starter file parses and lists the platforms") {
    const std::string text = starter_project({"linux-x86_64"});
    CHECK(text.find("# ") != std::string::npos);  // commented
    auto p = parse_project(text, "/x/redist.toml");
    REQUIRE(p.ok());
    CHECK(p->platforms == std::vector<std::string>{"linux-x86_64"});
    CHECK(p->prefix == "/x/nvidia");
    CHECK(p->products.size() == 2);
}

TEST_CASE("base-url and mirrors: http(s), or a local directory inside the project's directory") {
    const auto parse = [](const std::string& key, const std::string& value) {
        return parse_project("[project]\nprefix = \"nvidia\"\nplatforms = [\"linux-x86_64\"]\n" + key + " = " + value +
                                 "\n[products.nccl]\nversion = \"2\"\n",
                             "/work/app/redist.toml");
    };
    auto local = parse("mirrors", "[\"https://mirror.example/compute\", \"vendor/mirror\", \"file:///work/app/m2\"]");
    REQUIRE(local.ok());
    CHECK(local->mirrors == std::vector<std::string>{"https://mirror.example/compute", "file:///work/app/vendor/mirror",
                                                     "file:///work/app/m2"});
    auto base = parse("base-url", "\"./vendor\"");
    REQUIRE(base.ok());
    CHECK(base->base_url == "file:///work/app/vendor");
    auto layout = parse("mirrors", "[\"oci-layout:vendor/layout\", \"oci-layout:/work/app/l2\"]");
    REQUIRE(layout.ok());
    CHECK(layout->mirrors == std::vector<std::string>{"oci-layout:/work/app/vendor/layout", "oci-layout:/work/app/l2"});
    for (const auto& [key, value, json_path] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {"base-url", "\"/etc\"", "project.base-url"},
             {"base-url", "\"file:///etc\"", "project.base-url"},
             {"base-url", "\"ftp://example.invalid\"", "project.base-url"},
             {"mirrors", "[\"https://ok.example\", \"../elsewhere\"]", "project.mirrors[1]"},
             {"mirrors", "[\"oci-layout:/etc\"]", "project.mirrors[0]"},
             {"base-url", "\"oci-layout:../elsewhere\"", "project.base-url"},
         }) {
        auto refused = parse(key, value);
        REQUIRE_FALSE(refused.ok());
        CHECK(refused.error_value().code == error_code::bad_manifest);
        CHECK(refused.error_value().json_path == json_path);
    }
}

TEST_CASE("a project's trusted keys are files inside its directory") {
    auto p = parse_project(
        "[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\n"
        "trusted-keys = [\"keys/mirror.pub\"]\n[products.cudnn]\nversion = \"9\"\n",
        "/work/app/redist.toml");
    REQUIRE(p.ok());
    REQUIRE(p->trusted_keys.size() == 1);
    CHECK(p->trusted_keys[0] == "/work/app/keys/mirror.pub");
    for (const char* key : {"../mirror.pub", "/etc/ssl/mirror.pub", "keys/../../x.pub"}) {
        INFO(key);
        const error e = parse_error(std::string("[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\n") +
                                    "trusted-keys = [\"" + key + "\"]\n[products.cudnn]\nversion = \"9\"\n");
        CHECK(e.json_path == "project.trusted-keys[0]");
        CHECK(e.message.find("inside the project's directory") != std::string::npos);
    }
}

TEST_CASE("the user's config.toml: every key, relative paths from its directory") {
    auto c = parse_user_config(
        "base-url = \"https://mirror.internal/compute\"\n"
        "mirrors = [\"oci://registry.internal/nvidia\", \"local\"]\n"
        "cache-dir = \"cache\"\nretries = 6\n"
        "trusted-keys = [\"mirror.pub\", \"/etc/redist/old.pub\"]\n",
        "/home/u/.config/redist/config.toml");
    REQUIRE(c.ok());
    CHECK(c->base_url == "https://mirror.internal/compute");
    CHECK(c->mirrors ==
          std::vector<std::string>{"oci://registry.internal/nvidia", "file:///home/u/.config/redist/local"});
    CHECK(c->cache_dir == "/home/u/.config/redist/cache");
    CHECK(c->retries == 6);
    CHECK(c->trusted_keys ==
          std::vector<std::filesystem::path>{"/home/u/.config/redist/mirror.pub", "/etc/redist/old.pub"});
    auto empty = parse_user_config("", "/c/config.toml");
    REQUIRE(empty.ok());
    CHECK(empty->base_url.empty());
    CHECK_FALSE(empty->retries);
}

TEST_CASE("the user's config.toml: unknown keys and bad values name the line and key") {
    const auto fails = [](const std::string& text, const std::string& key) {
        auto c = parse_user_config(text, "/c/config.toml");
        REQUIRE_FALSE(c.ok());
        CHECK(c.error_value().code == error_code::bad_manifest);
        CHECK(c.error_value().json_path == key);
        CHECK(c.error_value().source.rfind("/c/config.toml:", 0) == 0);
    };
    fails("mirror = [\"x\"]\n", "mirror");
    fails("retries = 0\n", "retries");
    fails("retries = \"6\"\n", "retries");
    fails("mirrors = \"https://x\"\n", "mirrors");
    fails("trusted-keys = [\"a\", \"a\"]\n", "trusted-keys[1]");
    fails("[project]\nprefix = \"x\"\n", "project");
}

TEST_CASE("the user's config file: absent is empty, a FIFO fails at once") {
    CHECK(read_user_config("").value().path.empty());
    CHECK(read_user_config("/nonexistent/redist/config.toml").value().path.empty());
    const auto dir = redist_test::scratch("config_fifo");
    const auto fifo = dir / "config.toml";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    auto r = read_user_config(fifo);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == error_code::filesystem);
}

TEST_CASE("deps = true in a product's table") {
    auto p = parse_project(
        "[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\n"
        "[products.cudnn]\nversion = \"9\"\ndeps = true\n[products.nccl]\nversion = \"2\"\ndeps = false\n",
        "redist.toml");
    REQUIRE(p.ok());
    REQUIRE(p->products.size() == 2);
    CHECK(p->products[0].deps);
    CHECK_FALSE(p->products[1].deps);
    const auto e = parse_error(
        "[project]\nprefix = \"p\"\nplatforms = [\"linux-x86_64\"]\n"
        "[products.cudnn]\nversion = \"9\"\ndeps = \"yes\"\n");
    CHECK(e.json_path == "products.cudnn.deps");
    CHECK(e.message == "expected true or false");
}
