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

// A machine described by maps: files, environment and command outputs.
// Commands are recorded so tests can check what detection ran.
struct fake_machine {
    std::string machine = "x86_64";
    std::map<std::string, std::string> files;
    std::map<std::string, std::string> env;
    std::map<std::string, std::string> commands;  // command -> stdout
    std::vector<std::string> ran;

    redist::host_probe probe() {
        redist::host_probe p;
        p.machine = [this] { return machine; };
        p.read_file = [this](const std::string& path) -> std::optional<std::string> {
            const auto it = files.find(path);
            if (it == files.end()) return std::nullopt;
            return it->second;
        };
        p.getenv = [this](const std::string& name) -> std::optional<std::string> {
            const auto it = env.find(name);
            if (it == env.end()) return std::nullopt;
            return it->second;
        };
        p.run = [this](const std::string& command) -> std::optional<std::string> {
            ran.push_back(command);
            const auto it = commands.find(command);
            if (it == commands.end()) return std::nullopt;
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

std::string nvcc_output(const std::string& release, const std::string& build) {
    return "nvcc: NVIDIA (R) Cuda compiler driver\n"
           "Copyright (c) 2005-2025 NVIDIA Corporation\n"
           "Built on Wed_Jul_16_07:30:01_PM_PDT_2025\n"
           "Cuda compilation tools, release " +
           release + ", V" + build + "\nBuild cuda_13.0.r13.0/compiler.36260728_0\n";
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
    m.commands["nvcc --version"] = nvcc_output("11.8", "11.8.89");

    const auto d = redist::detect_cuda(m.probe());
    REQUIRE(d.has_value());
    CHECK(d->major == 12);
    CHECK(d->version == "12.8.1");
    CHECK(d->reason.find("CUDA_HOME=/fake/cuda-12.8") != std::string::npos);
    CHECK(d->reason.find("version.json") != std::string::npos);
    CHECK(m.ran.empty());
}

TEST_CASE("detect_cuda: CUDA_HOME without version.json asks its nvcc", "[platform][cuda]") {
    fake_machine m;
    m.env["CUDA_HOME"] = "/opt/cuda 13";  // a space, to exercise quoting
    m.commands["'/opt/cuda 13/bin/nvcc' --version"] = nvcc_output("13.0", "13.0.88");
    m.commands["nvcc --version"] = nvcc_output("11.8", "11.8.89");

    const auto d = redist::detect_cuda(m.probe());
    REQUIRE(d.has_value());
    CHECK(d->major == 13);
    CHECK(d->version == "13.0.88");
    CHECK(d->reason.find("CUDA_HOME=/opt/cuda 13") != std::string::npos);
    CHECK(d->reason.find("nvcc") != std::string::npos);
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
        CHECK(d->reason.find("/usr/local/cuda/version.json") != std::string::npos);
    }
    SECTION("a malformed version.json falls through") {
        fake_machine m;
        m.files["/usr/local/cuda/version.json"] = R"({"cuda": {"name": "CUDA SDK"}})";
        m.commands["nvcc --version"] = nvcc_output("12.4", "12.4.131");
        const auto d = redist::detect_cuda(m.probe());
        REQUIRE(d.has_value());
        CHECK(d->major == 12);
        CHECK(d->version == "12.4.131");
        CHECK(d->reason.find("PATH") != std::string::npos);
    }
    SECTION("nvcc without a V build number uses the release") {
        fake_machine m;
        m.commands["nvcc --version"] = "Cuda compilation tools, release 12.2\n";
        const auto d = redist::detect_cuda(m.probe());
        REQUIRE(d.has_value());
        CHECK(d->major == 12);
        CHECK(d->version == "12.2");
    }
}

TEST_CASE("detect_cuda: nothing found", "[platform][cuda]") {
    fake_machine m;
    CHECK_FALSE(redist::detect_cuda(m.probe()).has_value());

    // Garbage everywhere is still nothing.
    m.env["CUDA_HOME"] = "/x";
    m.files["/x/version.json"] = "not json";
    m.files["/usr/local/cuda/version.json"] = R"({"cuda": {"version": "banana"}})";
    m.commands["nvcc --version"] = "command not found";
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

    CHECK(probe.run("printf 'hello\\nworld'") == std::string("hello\nworld"));
    CHECK_FALSE(probe.run("exit 3").has_value());
    CHECK_FALSE(probe.run("redist-no-such-command-xyz --version").has_value());

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
