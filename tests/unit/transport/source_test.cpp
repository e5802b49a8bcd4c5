// A source, chosen once per URL (transport/source.hpp): the kind its scheme
// names (model/urls.hpp source_kind_of), what each kind may do, and the one
// offline rule, as try_sources applies it.
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/urls.hpp"
#include "redist/resolve.hpp"
#include "support.hpp"
#include "transport/source.hpp"
#include "transport/sources.hpp"

using namespace redist;

TEST_CASE("make_source: the kind is read from the scheme, in any case", "[source]") {
    const auto kind = [](std::string url) { return make_source(std::move(url)).kind(); };
    CHECK(kind("https://developer.download.nvidia.com/compute/cudnn/redist/") == source_kind::http);
    CHECK(kind("http://127.0.0.1:8080/compute") == source_kind::http);
    CHECK(kind("HTTPS://mirror.example.com/compute") == source_kind::http);
    CHECK(kind("file:///srv/mirror/cudnn/redist/") == source_kind::file);
    CHECK(kind("FILE:///srv/mirror") == source_kind::file);
    CHECK(kind("file://localhost/srv/mirror") == source_kind::file);
    CHECK(kind("oci://registry.example.com/nvidia") == source_kind::registry);
    CHECK(kind("OCI+HTTP://127.0.0.1:5000/nvidia") == source_kind::registry);
    CHECK(kind("oci-layout:/srv/oci") == source_kind::layout);
    CHECK(kind("OCI-Layout:/srv/oci/cudnn/redist/") == source_kind::layout);
    // Not a URL: make_source is given URLs (to_url() makes one of a path).
    CHECK(kind(to_url("/srv/mirror")) == source_kind::file);
    CHECK(kind(to_url("oci-layout:relative/dir")) == source_kind::layout);
    CHECK(make_source("oci://r/ns").url() == "oci://r/ns");
}

TEST_CASE("make_source: what each kind may do", "[source]") {
    const source http = make_source("https://mirror.example.com/compute");
    const source file = make_source("file:///srv/mirror");
    const source registry = make_source("oci://registry.example.com/nvidia");
    const source layout = make_source("oci-layout:/srv/oci");
    // Local: read from this machine's disk, never the network.
    CHECK_FALSE(http.local());
    CHECK(file.local());
    CHECK_FALSE(registry.local());
    CHECK(layout.local());
    // OCI sources name artifacts by digest.
    CHECK_FALSE(http.by_digest());
    CHECK_FALSE(file.by_digest());
    CHECK(registry.by_digest());
    CHECK(layout.by_digest());
    // Only a directory mirror is listed as a directory (no HTML index).
    CHECK_FALSE(http.lists_directory());
    CHECK(file.lists_directory());
    CHECK_FALSE(registry.lists_directory());
    CHECK_FALSE(layout.lists_directory());
}

TEST_CASE("offline_skips: offline, only local sources are read", "[source]") {
    for (const char* url : {"https://h/x", "http://h/x", "oci://r/ns", "oci+http://r/ns"}) {
        CAPTURE(url);
        CHECK(offline_skips(make_source(url), true));
        CHECK_FALSE(offline_skips(make_source(url), false));
    }
    for (const char* url : {"file:///m/x", "oci-layout:/srv/oci"}) {
        CAPTURE(url);
        CHECK_FALSE(offline_skips(make_source(url), true));
        CHECK_FALSE(offline_skips(make_source(url), false));
    }
}

TEST_CASE("try_sources: offline, a registry is skipped and an image layout is tried", "[source]") {
    source_run run(retry_policy(source_policy{}, [] { return 0.0; }));
    run.sleep = [](std::chrono::milliseconds) {};
    run.offline = true;
    std::vector<std::string> tried;
    const auto attempt = [&](source_attempt& at) -> result<void> {
        tried.push_back(at.from.url());
        return {};
    };
    auto done = try_sources(
        make_sources({"oci://r/ns/cudnn/blobs/sha256:00", "https://h/x", "oci-layout:/srv/oci/cudnn/redist/"}), run,
        attempt);
    REQUIRE(done.ok());
    CHECK(done->source == 2);
    CHECK(tried == std::vector<std::string>{"oci-layout:/srv/oci/cudnn/redist/"});
}

TEST_CASE("source_kind_of and the URL parser: a URL or a path, a layout's directory", "[source]") {
    CHECK(names_url("https://h/x"));
    CHECK(names_url("file:///srv/m"));
    CHECK(names_url("oci-layout:rel"));
    CHECK_FALSE(names_url("mirror/dir"));
    CHECK_FALSE(names_url("/srv/mirror"));
    CHECK(oci_layout_dir("oci-layout:rel/dir") == std::optional<std::string_view>("rel/dir"));
    CHECK(oci_layout_dir("OCI-LAYOUT:/abs") == std::optional<std::string_view>("/abs"));
    CHECK_FALSE(oci_layout_dir("oci://r/ns").has_value());
    CHECK_FALSE(oci_layout_dir("/srv/oci").has_value());
    CHECK(oci_layout_url("/srv/oci/../oci2") == "oci-layout:/srv/oci2");
    CHECK(source_kind_of(oci_layout_url("/srv/oci")) == source_kind::layout);
}

TEST_CASE("is_local_manifest: a path or a file URL is the user's own document", "[source]") {
    CHECK_FALSE(is_local_manifest(""));
    CHECK(is_local_manifest("redistrib_9.27.0.json"));
    CHECK(is_local_manifest("/srv/mirror/cudnn/redist/redistrib_9.27.0.json"));
    CHECK(is_local_manifest("file:///srv/mirror/cudnn/redist/redistrib_9.27.0.json"));
    CHECK_FALSE(is_local_manifest("https://h/compute/cudnn/redist/redistrib_9.27.0.json"));
    CHECK_FALSE(is_local_manifest("oci://r/ns/cudnn/redist/redistrib_9.27.0.json"));
    // An image layout is local, but its manifest is a registry's tag, not the user's file: watched as before.
    CHECK_FALSE(is_local_manifest("oci-layout:/srv/oci/cudnn/redist/redistrib_9.27.0.json"));
}

TEST_CASE("source credentials: a registry has them by scheme, host and port, and other kinds have none", "[source]") {
    const redist_test::scoped_env auth("REDIST_OCI_AUTH", std::string("reg.example:5000=user:secret"));
    const redist_test::scoped_env config("DOCKER_CONFIG", std::string("/nonexistent"));
    const auto creds = [](const std::string& url) {
        auto c = make_source(url).credentials();
        REQUIRE(c.ok());
        return *c;
    };
    CHECK(creds("oci://reg.example:5000/ns/cudnn/redist/") == std::optional<std::string>("dXNlcjpzZWNyZXQ="));
    CHECK(make_source("oci://reg.example:5000/ns").origin() == "https://reg.example:5000");
    // Another scheme, host or port is another origin: nothing goes to it.
    CHECK_FALSE(creds("oci+http://reg.example:5000/ns/cudnn/redist/"));
    CHECK_FALSE(creds("oci://reg.example:5001/ns/cudnn/redist/"));
    CHECK_FALSE(creds("oci://other.example:5000/ns/cudnn/redist/"));
    CHECK_FALSE(creds("https://reg.example:5000/ns/cudnn/redist/"));
    CHECK_FALSE(creds("file:///srv/mirror/cudnn/redist/"));
}
