// libFuzzer target for the readers of registry bytes (transport/oci.hpp):
// the first byte picks the reader, the rest is its input.
//   0  parse_image_manifest   the tag's image manifest
//   1  parse_tags_list        GET /v2/<repo>/tags/list
//   2  parse_token_response   the token realm's answer
//   3  docker_config_auth     ~/.docker/config.json
//   4  parse_www_authenticate and next_page_path (response headers)
//   5  parse_oci_url          URLs from a lock file or redist.toml (and url_origin)
//   6  parse_oci_index        an image layout's index.json (oci-layout:DIR)
// Contract: a value or a bad_manifest (usage for URLs) error, never a crash;
// what comes out keeps the rules the callers rely on (digests are
// "sha256:<64 lower-case hex>", a next page is a path on the same registry,
// a token is printable ASCII without spaces, a URL's parts are clean).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "model/urls.hpp"
#include "transport/oci.hpp"
#include "transport/oci_layout.hpp"

namespace {

void require(bool ok) {
    if (!ok) std::abort();
}

template <class T>
void require_value_or(const redist::result<T>& r, redist::error_code allowed) {
    require(r.ok() || r.error_value().code == allowed);
}

bool printable_ascii(std::string_view s) {
    for (char c : s)
        if (c <= ' ' || c >= 127) return false;
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
    switch (data[0] % 7) {
        case 0: {
            auto layers = redist::parse_image_manifest(text, "fuzz");
            require_value_or(layers, redist::error_code::bad_manifest);
            if (layers.ok())
                for (const auto& l : *layers) require(l.digest.size() == 71 && l.digest.starts_with("sha256:"));
            break;
        }
        case 1: require_value_or(redist::parse_tags_list(text, "fuzz"), redist::error_code::bad_manifest); break;
        case 2: {
            auto token = redist::parse_token_response(text, "fuzz");
            require_value_or(token, redist::error_code::bad_manifest);
            if (token.ok()) require(!token->empty() && printable_ascii(*token));
            break;
        }
        case 3:
            require_value_or(redist::docker_config_auth(text, "127.0.0.1:5000", false, "fuzz"),
                             redist::error_code::bad_manifest);
            break;
        case 4: {
            (void)redist::parse_www_authenticate(text);
            if (auto next = redist::next_page_path(text)) require(next->starts_with("/v2/") && printable_ascii(*next));
            break;
        }
        case 6: {
            auto index = redist::parse_oci_index(text, "fuzz");
            require_value_or(index, redist::error_code::bad_manifest);
            if (index.ok()) {
                for (const auto& e : *index) require(e.digest.size() == 71 && e.digest.starts_with("sha256:"));
                // What the writer makes of it reads back the same.
                auto again = redist::parse_oci_index(redist::oci_index_document(*index), "fuzz");
                require(again.ok() && again->size() == index->size());
            }
            break;
        }
        default: {
            // The one origin rule (model/urls.hpp), which scopes credentials, tokens and health:
            // an http(s) origin with a port and without user info, or none.
            const std::string origin = redist::url_origin(text);
            if (!origin.empty()) {
                require(origin.starts_with("http://") || origin.starts_with("https://"));
                require(origin.find('@') == std::string::npos && origin.rfind(':') > origin.find("://"));
                require(redist::url_origin(origin) == origin);
            }
            auto url = redist::parse_oci_url(text);
            require_value_or(url, redist::error_code::usage);
            if (url.ok()) {
                require(!url->registry.empty() && !url->repository.empty());
                require(url->repository.find("..") == std::string_view::npos && url->repository.front() != '/');
                require(url->api("x").find_first_of("?#@%") == std::string::npos);
                if (url->what == redist::oci_url::kind::document)
                    require(url->title == "redistrib_" + url->reference + ".json" ||
                            url->title == "recompressed_" + url->reference + ".json" ||
                            url->title == "recompressed_" + url->reference + ".json.sig");
            }
        }
    }
    return 0;
}
