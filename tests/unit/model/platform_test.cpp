// Tests for redist/platform.hpp: host platform and CUDA toolkit detection,
// through a fake host_probe describing machines other than this one.
#include <catch2/catch.hpp>

#include <sys/utsname.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "redist/platform.hpp"

using namespace std::string_literals;

namespace {

// A machine described by maps: files and environment. There is no way to
// run a command: detection reads files only.
struct fake_machine {
    std::string machine = "x86_64";
    std::map<std::string, std::string> files;
    std::map<std::string, std::string> env;

    redist::host_probe probe() {
        redist::host_probe p;
        p.machine = [this] { return machine; };
        p.read_file = [this](const std::string& path) -> std::optional<std::string> {
            const auto it = files.find(path);
            if (it == files.end()) return std::nullopt;
            return it->second;
        };
        p.is_file = [this](const std::string& path) { return files.count(path) != 0; };
        p.getenv = [this](const std::string& name) -> std::optional<std::string> {
            const auto it = env.find(name);
            if (it == env.end()) return std::nullopt;
            return it->second;
        };
        return p;
    }
};

std::string version_json(const std::string& version) {
    return R"json({
   "cuda" : {
      "name" : "CUDA SDK",
      "version" : ")json" +
           version + R"json("
   },
   "cuda_cudart" : {
      "name" : "CUDA Runtime (cudart)",
      "version" : "12.8.90"
   }
})json";
}

// include/cuda.h as a toolkit ships it, around its version line.
std::string cuda_h(const std::string& number) {
    return "#ifndef __cuda_cuda_h__\n#define __cuda_cuda_h__\n/**\n * CUDA API version number\n */\n"
           "#define CUDA_VERSION " +
           number + "\n#define CUDA_VERSION_MINOR 0\n#endif\n";
}

}  // namespace

TEST_CASE("detect_host_platform maps machines to platforms", "[platform]") {
    fake_machine m;

    m.machine = "x86_64";
    auto r = redist::detect_host_platform(m.probe());
    REQUIRE(r.ok());
    CHECK(r.value() == "linux-x86_64");

    m.machine = "aarch64";
    r = redist::detect_host_platform(m.probe());
    REQUIRE(r.ok());
    CHECK(r.value() == "linux-sbsa");

    m.machine = "ppc64le";
    r = redist::detect_host_platform(m.probe());
    REQUIRE(r.ok());
    CHECK(r.value() == "linux-ppc64le");
}

TEST_CASE("detect_host_platform recognizes Jetson/Tegra", "[platform]") {
    SECTION("via /etc/nv_tegra_release") {
        fake_machine m;
        m.machine = "aarch64";
        m.files["/etc/nv_tegra_release"] = "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic\n";
        const auto r = redist::detect_host_platform(m.probe());
        REQUIRE(r.ok());
        CHECK(r.value() == "linux-aarch64");
    }
    SECTION("via the device tree (NUL-separated strings)") {
        fake_machine m;
        m.machine = "aarch64";
        m.files["/proc/device-tree/compatible"] = "nvidia,p3737-0000+p3701-0005\0nvidia,p3701-0005\0nvidia,tegra234\0"s;
        const auto r = redist::detect_host_platform(m.probe());
        REQUIRE(r.ok());
        CHECK(r.value() == "linux-aarch64");
    }
    SECTION("a non-Tegra device tree stays sbsa") {
        fake_machine m;
        m.machine = "aarch64";
        m.files["/proc/device-tree/compatible"] = "ampere,mtjade\0arm,armv8\0"s;
        const auto r = redist::detect_host_platform(m.probe());
        REQUIRE(r.ok());
        CHECK(r.value() == "linux-sbsa");
    }
    SECTION("Tegra files do not matter on x86_64") {
        fake_machine m;
        m.machine = "x86_64";
        m.files["/etc/nv_tegra_release"] = "";
        const auto r = redist::detect_host_platform(m.probe());
        REQUIRE(r.ok());
        CHECK(r.value() == "linux-x86_64");
    }
}

TEST_CASE("detect_host_platform rejects unknown machines", "[platform]") {
    fake_machine m;
    m.machine = "riscv64";
    const auto r = redist::detect_host_platform(m.probe());
    REQUIRE_FALSE(r.ok());
    CHECK(r.error_value().code == redist::error_code::not_found);
    CHECK(r.error_value().message.find("riscv64") != std::string::npos);
    CHECK(r.error_value().message.find("--platform") != std::string::npos);
}

TEST_CASE("detect_cuda: CUDA_HOME version.json", "[platform][cuda]") {
    fake_machine m;
    m.env["CUDA_HOME"] = "/fake/cuda-12.8";
    m.files["/fake/cuda-12.8/version.json"] = version_json("12.8.1");
    // Lower-priority sources disagree, to prove the order.
    m.files["/usr/local/cuda/version.json"] = version_json("13.0.1");

    const auto d = redist::detect_cuda(m.probe());
    REQUIRE(d.has_value());
    CHECK(d->major == 12);
    CHECK(d->minor == std::optional<int>(8));
    CHECK(d->version == "12.8.1");
    CHECK(d->reason.find("CUDA_HOME=/fake/cuda-12.8") != std::string::npos);
    CHECK(d->reason.find("version.json") != std::string::npos);
}

TEST_CASE("detect_cuda: CUDA_HOME without version.json reads include/cuda.h", "[platform][cuda]") {
    fake_machine m;
    m.env["CUDA_HOME"] = "/opt/cuda 13/";
    m.files["/opt/cuda 13/include/cuda.h"] = cuda_h("13020");
    m.files["/opt/cuda 13/bin/nvcc"] = "#!/bin/sh\n";  // found, never run
    m.files["/usr/local/cuda/version.json"] = version_json("11.8.0");

    const auto d = redist::detect_cuda(m.probe());
    REQUIRE(d.has_value());
    CHECK(d->major == 13);
    CHECK(d->minor == std::optional<int>(2));
    CHECK(d->version == "13.2");
    CHECK(d->reason.find("CUDA_HOME=/opt/cuda 13") != std::string::npos);
    CHECK(d->reason.find("include/cuda.h") != std::string::npos);
}

TEST_CASE("detect_cuda: order of sources", "[platform][cuda]") {
    SECTION("CUDA_PATH after an unusable CUDA_HOME") {
        fake_machine m;
        m.env["CUDA_HOME"] = "/nothing/here";
        m.env["CUDA_PATH"] = "/fake/cuda-11/";
        m.files["/fake/cuda-11/version.json"] = version_json("11.8.0");
        m.files["/usr/local/cuda/version.json"] = version_json("13.0.1");
        const auto d = redist::detect_cuda(m.probe());
        REQUIRE(d.has_value());
        CHECK(d->major == 11);
        CHECK(d->reason.find("CUDA_PATH") != std::string::npos);
    }
    SECTION("an empty CUDA_HOME is ignored") {
        fake_machine m;
        m.env["CUDA_HOME"] = "";
        m.files["/usr/local/cuda/version.json"] = version_json("13.0.1");
        const auto d = redist::detect_cuda(m.probe());
        REQUIRE(d.has_value());
        CHECK(d->major == 13);
        CHECK(d->version == "13.0.1");
        CHECK(d->reason.find("/usr/local/cuda, version.json") != std::string::npos);
    }
    SECTION("a malformed version.json falls through to cuda.h") {
        fake_machine m;
        m.files["/usr/local/cuda/version.json"] = R"({"cuda": {"name": "CUDA SDK"}})";
        m.files["/usr/local/cuda/include/cuda.h"] = cuda_h("12040");
        const auto d = redist::detect_cuda(m.probe());
        REQUIRE(d.has_value());
        CHECK(d->major == 12);
        CHECK(d->version == "12.4");
    }
    SECTION("the toolkit of the first nvcc on PATH, found and never run") {
        fake_machine m;
        m.env["PATH"] = "relative/bin:/usr/bin:/opt/cuda-12.2/bin/:/opt/cuda-13/bin";
        m.files["relative/nvcc"] = "";
        m.files["/opt/cuda-12.2/bin/nvcc"] = "";
        m.files["/opt/cuda-12.2/include/cuda.h"] = cuda_h("12020");
        m.files["/opt/cuda-13/bin/nvcc"] = "";
        m.files["/opt/cuda-13/version.json"] = version_json("13.0.1");
        const auto d = redist::detect_cuda(m.probe());
        REQUIRE(d.has_value());
        CHECK(d->major == 12);
        CHECK(d->minor == std::optional<int>(2));
        CHECK(d->reason.find("nvcc on PATH in /opt/cuda-12.2/bin") != std::string::npos);
    }
}

TEST_CASE("cuda_from_driver: cuDriverGetVersion's encoding", "[platform][cuda]") {
    const auto d = redist::cuda_from_driver(12080, "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
    REQUIRE(d.has_value());
    CHECK(d->major == 12);
    CHECK(d->minor == std::optional<int>(8));
    CHECK(d->version == "12.8");
    CHECK(d->reason == "/usr/lib/x86_64-linux-gnu/libcuda.so.1");
    CHECK(d->origin == redist::cuda_origin::driver);
    CHECK(redist::cuda_from_driver(13000, "x")->version == "13.0");
    CHECK(redist::cuda_from_driver(13020, "x")->minor == std::optional<int>(2));
    CHECK_FALSE(redist::cuda_from_driver(0, "x").has_value());
    CHECK_FALSE(redist::cuda_from_driver(-1, "x").has_value());
    CHECK_FALSE(redist::cuda_from_driver(999, "x").has_value());
    // What a toolkit's files give is of the toolkit.
    fake_machine m;
    m.env["CUDA_HOME"] = "/fake/cuda";
    m.files["/fake/cuda/version.json"] = version_json("12.8.1");
    CHECK(redist::detect_cuda(m.probe())->origin == redist::cuda_origin::toolkit);
}

TEST_CASE("detect_cuda: the default toolkit place is the probe's", "[platform][cuda]") {
    fake_machine m;
    m.files["/usr/local/cuda/version.json"] = version_json("13.0.1");
    auto probe = m.probe();
    REQUIRE(redist::detect_cuda(probe).has_value());
    probe.default_toolkit = "/elsewhere";
    CHECK_FALSE(redist::detect_cuda(probe).has_value());
    m.files["/elsewhere/include/cuda.h"] = "#define CUDA_VERSION 12040\n";
    probe = m.probe();
    probe.default_toolkit = "/elsewhere";
    const auto d = redist::detect_cuda(probe);
    REQUIRE(d.has_value());
    CHECK(d->version == "12.4");
    CHECK(d->reason == "/elsewhere, include/cuda.h");
}

TEST_CASE("detect_cuda: nothing found", "[platform][cuda]") {
    fake_machine m;
    CHECK_FALSE(redist::detect_cuda(m.probe()).has_value());

    // Garbage everywhere is still nothing.
    m.env["CUDA_HOME"] = "/x";
    m.env["PATH"] = "/x/bin";
    m.files["/x/bin/nvcc"] = "";
    m.files["/x/version.json"] = "not json";
    m.files["/x/include/cuda.h"] = "#define CUDA_VERSION_X 12040\n#define CUDA_VERSION abc\n";
    m.files["/usr/local/cuda/version.json"] = R"({"cuda": {"version": "banana"}})";
    CHECK_FALSE(redist::detect_cuda(m.probe()).has_value());
}

TEST_CASE("host_probe::system reads the real machine", "[platform][system]") {
    const auto probe = redist::host_probe::system();

    struct utsname info {};
    REQUIRE(uname(&info) == 0);
    CHECK(probe.machine() == info.machine);

    namespace fs = std::filesystem;
    const fs::path scratch = REDIST_TEST_SCRATCH;
    fs::remove_all(scratch);
    fs::create_directories(scratch);
    const std::string file = (scratch / "probe.txt").string();
    const std::string content = "a\0b\nc"s;
    std::ofstream(file, std::ios::binary) << content;
    CHECK(probe.read_file(file) == content);
    CHECK_FALSE(probe.read_file((scratch / "missing").string()).has_value());
    CHECK_FALSE(probe.read_file(scratch.string()).has_value());  // a directory

    CHECK(probe.getenv("PATH").has_value());
    CHECK_FALSE(probe.getenv("REDIST_SURELY_UNSET_VARIABLE_42").has_value());

    CHECK(probe.is_file(file));
    CHECK_FALSE(probe.is_file(scratch.string()));
    CHECK_FALSE(probe.is_file((scratch / "missing").string()));

    // Whatever this machine is, detection must not crash.
    (void)redist::detect_cuda(probe);
    fs::remove_all(scratch);
}

TEST_CASE("platform_problem: only the platforms the manifests use", "[platform]") {
    for (const auto& p : redist::known_platforms()) CHECK_FALSE(redist::platform_problem(p).has_value());
    const auto typo = redist::platform_problem("linux-x86-64");
    REQUIRE(typo.has_value());
    CHECK(*typo == "unknown platform 'linux-x86-64' (did you mean 'linux-x86_64'?)");
    CHECK(redist::platform_problem("aarch64")->find("did you mean 'linux-sbsa'?") != std::string::npos);
    const auto far = redist::platform_problem("plan9\x1b");
    REQUIRE(far.has_value());
    CHECK(far->find("known: linux-x86_64, linux-sbsa") != std::string::npos);
    CHECK(far->find('\x1b') == std::string::npos);
}
