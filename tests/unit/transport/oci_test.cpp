// The registry client's pure parts (transport/oci.hpp) and the URL forms
// that map a base onto a registry (urls.hpp).
#include <catch2/catch.hpp>

#include "archive/sha256.hpp"
#include "model/urls.hpp"
#include "transport/oci.hpp"
#include "transport/oci_layout.hpp"

using namespace redist;

namespace {
const std::string kHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
}

TEST_CASE("oci URLs: the base layout maps onto a repository, its tags and its blobs") {
    auto doc = parse_oci_url("oci+http://127.0.0.1:5000/team/nvidia/cudnn/redist/redistrib_9.19.0.json");
    REQUIRE(doc.ok());
    CHECK_FALSE(doc->https);
    CHECK(doc->registry == "127.0.0.1:5000");
    CHECK(doc->repository == "team/nvidia/cudnn");
    CHECK(doc->what == oci_url::kind::document);
    CHECK(doc->reference == "9.19.0");
    CHECK(doc->api("manifests/9.19.0") == "http://127.0.0.1:5000/v2/team/nvidia/cudnn/manifests/9.19.0");

    auto blob = parse_oci_url("oci://registry.example/nvidia/cudnn/blobs/sha256:" + kHex);
    REQUIRE(blob.ok());
    CHECK(blob->https);
    CHECK(blob->what == oci_url::kind::blob);
    CHECK(blob->reference == "sha256:" + kHex);

    CHECK(doc->title == "redistrib_9.19.0.json");

    // A mirror's recompressed sidecar: the layer so titled in the same tag.
    auto sidecar = parse_oci_url("oci+http://127.0.0.1:5000/nvidia/cudnn/redist/recompressed_9.19.0.json");
    REQUIRE(sidecar.ok());
    CHECK(sidecar->what == oci_url::kind::document);
    CHECK(sidecar->reference == "9.19.0");
    CHECK(sidecar->title == "recompressed_9.19.0.json");
    CHECK(sidecar->repository == "nvidia/cudnn");
    // Its signature: the layer so titled.
    auto signature = parse_oci_url("oci+http://127.0.0.1:5000/nvidia/cudnn/redist/recompressed_9.19.0.json.sig");
    REQUIRE(signature.ok());
    CHECK(signature->what == oci_url::kind::document);
    CHECK(signature->reference == "9.19.0");
    CHECK(signature->title == "recompressed_9.19.0.json.sig");

    auto tags = parse_oci_url("oci://registry.example/nvidia/cudnn/redist/");
    REQUIRE(tags.ok());
    CHECK(tags->what == oci_url::kind::tags);
}

TEST_CASE("oci URLs: a namespace or layout directory may have a redist or blobs segment") {
    // Only the last two segments say what a URL names: ".../redist/<name>"
    // a tag's document, ".../blobs/<digest>" a blob.
    auto blob = parse_oci_url("oci+http://127.0.0.1:5000/team/redist/cudnn/blobs/sha256:" + kHex);
    REQUIRE(blob.ok());
    CHECK(blob->repository == "team/redist/cudnn");
    CHECK(blob->what == oci_url::kind::blob);
    CHECK(blob->reference == "sha256:" + kHex);

    auto doc = parse_oci_url("oci://registry.example/redist/blobs/cudnn/redist/redistrib_9.19.0.json");
    REQUIRE(doc.ok());
    CHECK(doc->repository == "redist/blobs/cudnn");
    CHECK(doc->what == oci_url::kind::document);
    CHECK(doc->reference == "9.19.0");

    auto tags = parse_oci_url("oci://registry.example/redist/cudnn/redist/");
    REQUIRE(tags.ok());
    CHECK(tags->repository == "redist/cudnn");
    CHECK(tags->what == oci_url::kind::tags);

    const std::string layout_path = "/srv/redist/layouts/cudnn/blobs/sha256:" + kHex;  // head views it
    auto layout_blob = split_oci_path(layout_path, "a layout");
    REQUIRE(layout_blob.ok());
    REQUIRE(*layout_blob);
    CHECK((*layout_blob)->head == "/srv/redist/layouts/cudnn");
    CHECK((*layout_blob)->what == oci_url::kind::blob);
}

TEST_CASE("oci URLs: credentials, queries, odd names and traversal are refused") {
    for (const char* bad :
         {"oci://user:pw@host/ns", "oci://host/ns?x=1", "oci://host/NS", "oci://host/ns/../x", "oci://host/ns//x",
          "oci://host/ns/%2e%2e", "oci:///ns", "http://host/ns", "oci://host/ns/cudnn/blobs/sha256:ABC",
          "oci://host/ns/cudnn/redist/redistrib_..json", "oci://host/ns/cudnn/redist/other.json",
          "oci://host/ns/cudnn/redist/recompressed_.json", "oci://host/ns/cudnn/redist/recompressed_-x.json",
          "oci://host/ns/cudnn/redist/recompressed_9.0.tar.zst", "oci://host/ns/cudnn/redist/recompressed_.json.sig",
          "oci://host/ns/cudnn/redist/redistrib_9.0.json.sig", "oci://host/ns/cudnn/redist/recompressed_9.0.sig"}) {
        INFO(bad);
        auto parsed = parse_oci_url(bad);
        REQUIRE_FALSE(parsed.ok());
        CHECK(parsed.error_value().code == error_code::usage);
        CHECK(parsed.error_value().message.find("pw") == std::string::npos);
    }
}

TEST_CASE("artifact URLs: a registry base names the blob by the manifest's SHA-256") {
    CHECK(artifact_url("oci+http://h:1/ns/cudnn/redist/", "cudnn/linux-x86_64/a.tar.xz", kHex) ==
          "oci+http://h:1/ns/cudnn/blobs/sha256:" + kHex);
    CHECK(artifact_url("https://h/cudnn/redist/", "cudnn/a.tar.xz", kHex) == "https://h/cudnn/redist/cudnn/a.tar.xz");
    CHECK(mirror_artifact_url("oci://h/ns", "cudnn", "x/a.tar.xz", kHex) == "oci://h/ns/cudnn/blobs/sha256:" + kHex);
    CHECK(mirror_artifact_url("http://m/base", "cudnn", "x/a.tar.xz", kHex) == "http://m/base/cudnn/redist/x/a.tar.xz");
    CHECK_FALSE(source_url_problem("oci://h/ns", {}));
    CHECK_FALSE(source_url_problem("oci+http://127.0.0.1:5000/ns", {}));
    CHECK(source_url_problem("oci-something://h/ns", {}));
}

TEST_CASE("WWW-Authenticate: Bearer and Basic challenges") {
    auto bearer = parse_www_authenticate(
        R"(Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull")");
    REQUIRE(bearer);
    CHECK(bearer->scheme == "bearer");
    CHECK(bearer->realm == "https://auth.example/token");
    CHECK(bearer->service == "registry.example");
    CHECK(bearer->scope == "repository:a/b:pull");
    auto basic = parse_www_authenticate(R"(Basic realm="x")");
    REQUIRE(basic);
    CHECK(basic->scheme == "basic");
    CHECK_FALSE(parse_www_authenticate(R"(Bearer service="no realm")"));
    CHECK_FALSE(parse_www_authenticate(R"(Bearer realm="unterminated)"));
    CHECK_FALSE(parse_www_authenticate("Negotiate abc"));
}

TEST_CASE("tags list pages stay on the registry") {
    CHECK(next_page_path(R"(</v2/a/b/tags/list?last=9&n=1000>; rel="next")") == "/v2/a/b/tags/list?last=9&n=1000");
    CHECK_FALSE(next_page_path(R"(<https://elsewhere/v2/a/tags/list>; rel="next")"));
    CHECK_FALSE(next_page_path(R"(<//elsewhere/v2/a>; rel="next")"));
    CHECK_FALSE(next_page_path(R"(</v2/a/b/tags/list?last=9>; rel="prev")"));
    auto tags = parse_tags_list(R"({"name":"a/b","tags":["9.19.0","9.8.0"]})", "t");
    REQUIRE(tags.ok());
    CHECK(*tags == std::vector<std::string>{"9.19.0", "9.8.0"});
    CHECK_FALSE(parse_tags_list(R"({"tags":["../x"]})", "t").ok());
}

TEST_CASE("token responses and docker config") {
    CHECK(*parse_token_response(R"({"token":"abc.def"})", "t") == "abc.def");
    CHECK(*parse_token_response(R"({"access_token":"xyz"})", "t") == "xyz");
    CHECK_FALSE(parse_token_response(R"({"token":"a b"})", "t").ok());
    CHECK_FALSE(parse_token_response(R"({"token":""})", "t").ok());
    auto auth = docker_config_auth(R"({"auths":{"h:5000":{"auth":"dTpwdw=="}}})", "h:5000", true, "c");
    REQUIRE(auth.ok());
    CHECK(*auth == std::optional<std::string>("dTpwdw=="));
    auto missing = docker_config_auth(R"({"auths":{"other":{"auth":"eA=="}}})", "h:5000", true, "c");
    REQUIRE(missing.ok());
    CHECK_FALSE(*missing);
    CHECK_FALSE(docker_config_auth(R"({"auths":{"h:5000":{"auth":"a\nb"}}})", "h:5000", true, "c").ok());
}

TEST_CASE("docker config: credentials are looked up by scheme, host and port") {
    const std::string config =
        R"({"auths":{"h:5000":{"auth":"aHR0cHM="},"https://h:6000":{"auth":"c2l4"},"http://h:7000":{"auth":"cGxhaW4="}}})";
    // What `docker login h:5000` stored is for https only: never sent over plain http.
    CHECK(*docker_config_auth(config, "h:5000", true, "c") == std::optional<std::string>("aHR0cHM="));
    CHECK_FALSE(*docker_config_auth(config, "h:5000", false, "c"));
    CHECK_FALSE(*docker_config_auth(config, "h:6000", false, "c"));
    CHECK(*docker_config_auth(config, "h:6000", true, "c") == std::optional<std::string>("c2l4"));
    // A plain-http registry's own entry, under its scheme; not for https.
    CHECK(*docker_config_auth(config, "h:7000", false, "c") == std::optional<std::string>("cGxhaW4="));
    CHECK_FALSE(*docker_config_auth(config, "h:7000", true, "c"));
    // Another port is another registry.
    CHECK_FALSE(*docker_config_auth(config, "h:5001", true, "c"));
}

TEST_CASE("a release's image manifest reads back: the JSON layer first, archives by digest") {
    const oci_release_layer json{kHex, "redistrib_9.19.0.json", 10};
    const std::vector<oci_release_layer> archives{{std::string(64, 'a'), "cudnn/a.tar.xz", 99}};
    for (const bool standard : {false, true}) {
        const std::string text = oci_release_manifest(json, archives, "9.19.0", standard);
        auto layers = parse_image_manifest(text, "m");
        REQUIRE(layers.ok());
        REQUIRE(layers->size() == 2);
        CHECK((*layers)[0].title == "redistrib_9.19.0.json");
        CHECK((*layers)[0].digest == "sha256:" + kHex);
        CHECK((*layers)[1].size == 99);
        CHECK(text.find(sha256_hex("{}")) != std::string::npos);
    }
    CHECK_FALSE(parse_image_manifest(R"({"schemaVersion":2,"layers":[{"digest":"sha256:AB","size":1}]})", "m").ok());
}

TEST_CASE("a release's image manifest with recompressed copies ends with the sidecar and signature layers") {
    const oci_release_layer json{kHex, "redistrib_9.19.0.json", 10};
    const std::vector<oci_release_layer> archives{{std::string(64, 'a'), "cudnn/a.tar.xz", 99},
                                                  {std::string(64, 'b'), "cudnn/a.tar.zst", 120}};
    const oci_release_layer sidecar{std::string(64, 'c'), "recompressed_9.19.0.json", 300};
    const oci_release_layer signature{std::string(64, 'e'), "recompressed_9.19.0.json.sig", 64};
    for (const bool standard : {false, true}) {
        const std::string text = oci_release_manifest(json, archives, "9.19.0", standard, sidecar, signature);
        auto layers = parse_image_manifest(text, "m");
        REQUIRE(layers.ok());
        REQUIRE(layers->size() == 5);
        CHECK((*layers)[4].title == "recompressed_9.19.0.json.sig");
        CHECK((*layers)[4].media_type == (standard ? "application/vnd.oci.image.layer.v1.tar"
                                                   : "application/vnd.redist.recompressed.signature.v1"));
        CHECK((*layers)[2].title == "cudnn/a.tar.zst");
        CHECK((*layers)[3].title == "recompressed_9.19.0.json");
        CHECK((*layers)[3].digest == "sha256:" + std::string(64, 'c'));
        CHECK((*layers)[3].media_type ==
              (standard ? "application/vnd.oci.image.layer.v1.tar" : "application/vnd.redist.recompressed.v1+json"));
    }
}

TEST_CASE("oci-layout URLs: a local base, made absolute, confined like file://") {
    CHECK(is_oci_url("oci-layout:/srv/layout"));
    CHECK(is_oci_layout_url("OCI-LAYOUT:/srv/layout"));
    CHECK_FALSE(is_oci_layout_url("oci://h/ns"));
    CHECK(to_url("oci-layout:/srv/./layout/") == "oci-layout:/srv/layout/");
    const std::string relative = to_url("oci-layout:rel/dir");
    CHECK(relative.starts_with("oci-layout:/"));
    CHECK(relative.ends_with("/rel/dir"));
    CHECK(mirror_artifact_url("oci-layout:/srv/l", "cudnn", "x/a.tar.xz", kHex) ==
          "oci-layout:/srv/l/cudnn/blobs/sha256:" + kHex);
    // From a lock file: only under a local root named on the command line.
    const auto roots = local_roots({"oci-layout:/srv/l"});
    REQUIRE(roots.size() == 1);
    CHECK(roots[0] == "/srv/l");
    CHECK_FALSE(source_url_problem("oci-layout:/srv/l", roots));
    CHECK_FALSE(source_url_problem("oci-layout:/srv/l/cudnn/blobs/sha256:" + kHex, roots));
    CHECK(source_url_problem("oci-layout:/etc", roots));
    CHECK(source_url_problem("oci-layout:/etc", {}));
    CHECK(source_url_problem("oci-layout:/srv/l/../../etc", roots));
    CHECK(source_url_problem("oci-layout:relative", roots));
}

TEST_CASE("an image layout's index.json reads back, bad ones are refused") {
    const std::vector<oci_index_entry> entries{
        {"application/vnd.oci.image.manifest.v1+json", "sha256:" + kHex, "9.19.0", 712},
        {"application/vnd.oci.image.manifest.v1+json", "sha256:" + std::string(64, 'b'), "", 5}};
    const std::string text = oci_index_document(entries);
    CHECK(text.find("application/vnd.oci.image.index.v1+json") != std::string::npos);
    auto back = parse_oci_index(text, "index.json");
    REQUIRE(back.ok());
    REQUIRE(back->size() == 2);
    CHECK((*back)[0].ref_name == "9.19.0");
    CHECK((*back)[0].size == 712);
    CHECK((*back)[1].ref_name.empty());
    for (const char* bad : {R"({"manifests":[]})", R"({"schemaVersion":1,"manifests":[]})",
                            R"({"schemaVersion":2,"manifests":[{"digest":"sha256:AB","size":1}]})",
                            R"({"schemaVersion":2,"manifests":[{"digest":"md5:00","size":1}]})",
                            R"({"schemaVersion":2,"manifests":{}})", "[]", "{"}) {
        auto parsed = parse_oci_index(bad, "/l/cudnn/index.json");
        REQUIRE_FALSE(parsed.ok());
        CHECK(parsed.error_value().code == error_code::bad_manifest);
    }
}

TEST_CASE("an image layout's index.json keeps what other tools recorded when rewritten") {
    const std::string other =
        R"({"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:)" + kHex +
        R"(","size":712,"platform":{"architecture":"amd64","os":"linux"},)"
        R"("artifactType":"application/x-other","annotations":{"org.opencontainers.image.ref.name":)"
        R"("9.19.0","com.example.note":"kept"}})";
    const std::string text = R"({"schemaVersion":2,"manifests":[)" + other +
                             R"(],"annotations":{"com.example.index":"mine"}})";
    std::string annotations;
    auto entries = parse_oci_index(text, "index.json", &annotations);
    REQUIRE(entries.ok());
    REQUIRE(entries->size() == 1);
    CHECK((*entries)[0].ref_name == "9.19.0");
    CHECK(annotations == R"({"com.example.index":"mine"})");
    entries->push_back({"application/vnd.oci.image.manifest.v1+json", "sha256:" + std::string(64, 'b'), "9.27.0", 5});
    const std::string rewritten = oci_index_document(*entries, annotations);
    CHECK(rewritten.find(other) != std::string::npos);  // the entry, byte for byte
    CHECK(rewritten.find(R"({"com.example.index":"mine"})") != std::string::npos);
    std::string again;
    auto back = parse_oci_index(rewritten, "index.json", &again);
    REQUIRE(back.ok());
    CHECK(back->size() == 2);
    CHECK(again == annotations);
    // A bad entry is named by its place in the index.
    auto bad = parse_oci_index(R"({"schemaVersion":2,"manifests":[{"digest":"sha256:x","size":"1"}]})", "i");
    REQUIRE_FALSE(bad.ok());
    CHECK(bad.error_value().json_path == "manifests[0].size");
}
