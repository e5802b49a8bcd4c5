// oci.cpp — the OCI registry client: URL forms, credentials and the token
// flow, pulling blobs and the redistrib JSON of a tag, pushing a release.
//
// Hazards that shape this file:
// - Every byte a registry sends is input: the manifest, the tags list, the
//   WWW-Authenticate header, the token response (each has a fuzz target).
// - A credential or token must never reach an error message, a log line or
//   another host: errors name URLs only (sanitized), the Authorization header
//   is a custom header that libcurl drops on a redirect to another host, and
//   credentials are looked up, cached and sent by scheme, host and port: a
//   token realm gets the user's password only when it is the registry's own
//   scheme, host and port.
// - One HTTP stack: everything goes through transfer.cpp (send_request,
//   download_with_headers), so TLS, redirects and timeouts follow its rules.
#include "transport/oci.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>

#include "archive/sha256.hpp"
#include "model/manifest.hpp"
#include "model/urls.hpp"
#include "redist/json_writer.hpp"
#include "redist/manifest.hpp"
#include "support/json_reader.hpp"
#include "support/posix_file.hpp"
#include "transport/http_request.hpp"
#include "transport/oci_layout.hpp"

namespace redist {

namespace {

constexpr std::string_view kAccept =
    "Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";
constexpr std::string_view kTitle = "org.opencontainers.image.title";
constexpr std::string_view kJsonLayerType = "application/vnd.nvidia.redistrib.manifest.v1+json";
constexpr std::string_view kArchiveLayerType = "application/vnd.nvidia.redistrib.archive.v1";
constexpr std::string_view kRecompressedLayerType = "application/vnd.redist.recompressed.v1+json";
constexpr std::string_view kSignatureLayerType = "application/vnd.redist.recompressed.signature.v1";
constexpr std::string_view kStandardLayerType = "application/vnd.oci.image.layer.v1.tar";
constexpr std::string_view kConfigType = "application/vnd.oci.image.config.v1+json";
constexpr std::size_t kMaxManifestBytes = oci_max_manifest_bytes;
constexpr std::size_t kMaxDocumentBytes = 64u << 20;
constexpr int kMaxTagPages = 100;

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_alnum(char c) { return is_lower_alnum(c) || (c >= 'A' && c <= 'Z'); }

// One path component of a repository name: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
bool valid_repository_component(std::string_view c) {
    std::size_t i = 0;
    for (;;) {
        if (i >= c.size() || !is_lower_alnum(c[i])) return false;
        while (i < c.size() && is_lower_alnum(c[i])) ++i;
        if (i == c.size()) return true;
        if (c[i] == '.') {
            ++i;
        } else if (c[i] == '_') {
            i += c.substr(i, 2) == "__" ? 2 : 1;
        } else if (c[i] == '-') {
            while (i < c.size() && c[i] == '-') ++i;
        } else {
            return false;
        }
    }
}

bool valid_repository(std::string_view repo) {
    if (repo.empty() || repo.size() > 255) return false;
    for (std::size_t start = 0; start <= repo.size();) {
        const auto end = std::min(repo.find('/', start), repo.size());
        if (!valid_repository_component(repo.substr(start, end - start))) return false;
        start = end + 1;
    }
    return true;
}

bool valid_registry(std::string_view host) {
    if (host.empty() || host.size() > 255) return false;
    return std::all_of(host.begin(), host.end(),
                       [](char c) { return is_alnum(c) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']'; });
}

std::string base64(std::string_view in) {
    static constexpr char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (std::size_t i = 0; i < in.size(); i += 3) {
        std::uint32_t n = static_cast<unsigned char>(in[i]) << 16;
        if (i + 1 < in.size()) n |= static_cast<unsigned char>(in[i + 1]) << 8;
        if (i + 2 < in.size()) n |= static_cast<unsigned char>(in[i + 2]);
        out += table[(n >> 18) & 63];
        out += table[(n >> 12) & 63];
        out += i + 1 < in.size() ? table[(n >> 6) & 63] : '=';
        out += i + 2 < in.size() ? table[n & 63] : '=';
    }
    return out;
}

std::string query_escape(std::string_view in) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (char c : in) {
        if (is_alnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
            out += c;
        } else {
            out += '%';
            out += hex[(static_cast<unsigned char>(c) >> 4) & 15];
            out += hex[static_cast<unsigned char>(c) & 15];
        }
    }
    return out;
}

// The origin (model/urls.hpp url_origin) of a token realm or an upload
// location, or empty when the URL carries user info of its own: such a URL
// is never taken for the registry's origin, so no credential goes to it.
std::string origin_of(std::string_view url) { return url_has_user_info(url) ? std::string() : url_origin(url); }

}  // namespace

bool valid_oci_digest(std::string_view digest) {
    return digest.size() == 71 && digest.starts_with("sha256:") && is_sha256_hex(digest.substr(7)) &&
           std::none_of(digest.begin() + 7, digest.end(), [](char c) { return c >= 'A' && c <= 'F'; });
}

bool valid_oci_tag(std::string_view tag) {
    if (tag.empty() || tag.size() > 128 || !(is_alnum(tag.front()) || tag.front() == '_')) return false;
    return std::all_of(tag.begin(), tag.end(), [](char c) { return is_alnum(c) || c == '_' || c == '.' || c == '-'; });
}

result<void> check_oci_blob(std::string_view bytes, const std::string& digest, std::uint64_t size,
                            const std::string& shown) {
    const std::string actual = "sha256:" + sha256_hex(bytes);
    if (actual != digest || bytes.size() != size)
        return make_error(error_code::integrity, "the blob does not match its digest")
            .with_url(shown)
            .with_expected_actual(digest, actual);
    return {};
}

result<std::string> oci_release_document(std::string_view manifest, const std::string& title, const std::string& source,
                                         const std::function<result<std::string>(const oci_layer&)>& blob) {
    REDIST_TRY(const auto layers, parse_image_manifest(manifest, source));
    const auto layer = std::find_if(layers.begin(), layers.end(), [&](const oci_layer& l) { return l.title == title; });
    if (layer == layers.end())
        return make_error(error_code::not_found, "the tag's manifest has no layer titled " + title).with_url(source);
    if (layer->size > kMaxDocumentBytes)
        return make_error(error_code::bad_manifest, "manifest larger than 64 MiB").with_url(source);
    return blob(*layer);
}

std::optional<std::string> oci_document_label(std::string_view name) {
    struct form {
        std::string_view prefix, suffix;
    };
    for (const form f :
         {form{"redistrib_", ".json"}, form{"recompressed_", ".json"}, form{"recompressed_", ".json.sig"}}) {
        if (!name.starts_with(f.prefix) || !name.ends_with(f.suffix) ||
            name.size() <= f.prefix.size() + f.suffix.size())
            continue;
        std::string label(name.substr(f.prefix.size(), name.size() - f.prefix.size() - f.suffix.size()));
        if (valid_oci_tag(label)) return label;
    }
    return std::nullopt;
}

result<std::optional<oci_path_tail>> split_oci_path(std::string_view path, std::string_view store) {
    // Only the last two segments say what the path names: ".../redist/" the
    // tags, ".../redist/<name>" a tag's document, ".../blobs/<digest>" a
    // blob. A "redist" or "blobs" segment before them is part of the
    // namespace or of the layout's directory ("/srv/redist/layouts"), not a
    // tail.
    const auto last_slash = path.rfind('/');
    if (last_slash == std::string_view::npos) return std::optional<oci_path_tail>();
    const std::string_view name = path.substr(last_slash + 1);
    const std::string_view dir = path.substr(0, last_slash);
    const auto dir_slash = dir.rfind('/');
    if (dir_slash == std::string_view::npos) return std::optional<oci_path_tail>();
    const std::string_view parent = dir.substr(dir_slash + 1);
    oci_path_tail out;
    out.head = dir.substr(0, dir_slash);
    if (parent == "redist") {
        if (name.empty()) return std::optional(std::move(out));  // the tags
        auto label = oci_document_label(name);
        if (!label)
            return make_error(error_code::usage, std::string(store) +
                                                     " holds only redistrib_<label>.json and recompressed_<label>.json"
                                                     "[.sig] documents and blobs by digest");
        out.what = oci_url::kind::document;
        out.reference = std::move(*label);
        out.title = std::string(name);
        return std::optional(std::move(out));
    }
    if (parent == "blobs") {
        out.what = oci_url::kind::blob;
        out.reference = std::string(name);
        if (!valid_oci_digest(out.reference))
            return make_error(error_code::usage, "a blob is named sha256:<64 lower-case hex digits>");
        return std::optional(std::move(out));
    }
    return std::optional<oci_path_tail>();
}

std::string oci_url::api(std::string_view tail) const {
    return std::string(https ? "https://" : "http://") + registry + "/v2/" + repository + "/" + std::string(tail);
}

result<oci_url> parse_oci_url(std::string_view url) {
    const auto bad = [&](const std::string& why) {
        return make_error(error_code::usage, "not a registry URL (" + why + ")").with_url(sanitize_url(url));
    };
    oci_url out;
    std::string_view rest = url;
    if (rest.size() >= 11 && std::equal(rest.begin(), rest.begin() + 11, "oci+http://",
                                        [](char a, char b) { return std::tolower(a) == b; })) {
        out.https = false;
        rest.remove_prefix(11);
    } else if (rest.size() >= 6 && std::equal(rest.begin(), rest.begin() + 6, "oci://",
                                              [](char a, char b) { return std::tolower(a) == b; })) {
        rest.remove_prefix(6);
    } else {
        return bad("expected oci:// or oci+http://");
    }
    if (rest.find_first_of("@?#%") != std::string_view::npos) return bad("no user, query, fragment or escapes");
    const auto slash = rest.find('/');
    out.registry = std::string(rest.substr(0, slash));
    if (!valid_registry(out.registry)) return bad("a host[:port] is required");
    std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    auto tail = split_oci_path(path, "a registry");
    if (!tail.ok()) return bad(tail.error_value().message);
    if (*tail) {
        out.repository = std::string((*tail)->head);
        out.what = (*tail)->what;
        out.reference = std::move((*tail)->reference);
        out.title = std::move((*tail)->title);
    } else {
        while (path.ends_with('/')) path.remove_suffix(1);
        out.repository = std::string(path);
    }
    if (!valid_repository(out.repository))
        return bad("a namespace of lower-case [a-z0-9] names separated by '/', '.', '_' or '-' is required");
    return out;
}

// ---- readers -------------------------------------------------------------------------------

std::optional<auth_challenge> parse_www_authenticate(std::string_view header) {
    auth_challenge out;
    const auto space = header.find(' ');
    if (space == std::string_view::npos || space == 0) return std::nullopt;
    for (char c : header.substr(0, space)) out.scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (out.scheme != "bearer" && out.scheme != "basic") return std::nullopt;
    std::string_view rest = header.substr(space + 1);
    while (!rest.empty()) {
        while (!rest.empty() && (rest.front() == ' ' || rest.front() == ',')) rest.remove_prefix(1);
        const auto eq = rest.find('=');
        if (eq == std::string_view::npos) break;
        const std::string_view key = rest.substr(0, eq);
        rest.remove_prefix(eq + 1);
        std::string value;
        if (!rest.empty() && rest.front() == '"') {
            rest.remove_prefix(1);
            std::size_t i = 0;
            for (; i < rest.size() && rest[i] != '"'; ++i) {
                if (rest[i] == '\\' && i + 1 < rest.size()) ++i;
                value += rest[i];
            }
            if (i >= rest.size()) return std::nullopt;  // unterminated
            rest.remove_prefix(i + 1);
        } else {
            const auto end = std::min(rest.find(','), rest.size());
            value = std::string(rest.substr(0, end));
            rest.remove_prefix(end);
        }
        if (key == "realm") out.realm = std::move(value);
        else if (key == "service") out.service = std::move(value);
        else if (key == "scope") out.scope = std::move(value);
    }
    if (out.scheme == "bearer" && out.realm.empty()) return std::nullopt;
    return out;
}

result<std::string> parse_token_response(std::string_view body, std::string_view source) {
    std::string token, access_token;
    REDIST_TRY_VOID(json::read_document(body, source, "token response",
                                        {{"token", [&](json::value& v) { return v.get(token); }},
                                         {"access_token", [&](json::value& v) { return v.get(access_token); }}}));
    std::string& out = token.empty() ? access_token : token;
    const bool clean = !out.empty() && out.size() <= 16384 &&
                       std::all_of(out.begin(), out.end(), [](char c) { return c > ' ' && c < 127; });
    if (!clean)
        return make_error(error_code::bad_manifest, "token response without a usable token")
            .with_source(std::string(source));
    return std::move(out);
}

result<std::vector<std::string>> parse_tags_list(std::string_view body, std::string_view source) {
    std::vector<std::string> tags;
    std::string name;
    const auto tag_reader = [&](json::value& item) -> result<void> {
        std::string tag;
        REDIST_TRY_VOID(item.get(tag));
        if (!valid_oci_tag(tag)) return item.bad("not a tag");
        tags.push_back(std::move(tag));
        return {};
    };
    auto read = json::read_document(body, source, "tags list",
                                    {{"name", [&](json::value& v) { return v.get(name); }},
                                     {"tags", [&](json::value& v) { return v.for_each(tag_reader); }}});
    if (!read.ok()) return std::move(read).error_value();
    return tags;
}

result<std::vector<oci_layer>> parse_image_manifest(std::string_view body, std::string_view source) {
    std::vector<oci_layer> layers;
    std::uint64_t schema = 0;
    const auto layer_reader = [&](json::value& item) -> result<void> {
        oci_layer l;
        REDIST_TRY_VOID(
            item.read_object({{"mediaType", [&](json::value& v) { return v.get(l.media_type); }},
                              {"digest", [&](json::value& v) { return v.get(l.digest); }, true},
                              {"size", [&](json::value& v) { return v.get(l.size); }, true},
                              {"annotations", [&](json::value& v) {
                                   return v.read_object({{kTitle, [&](json::value& t) { return t.get(l.title); }}});
                               }}}));
        if (!valid_oci_digest(l.digest)) return item.bad("digest is not sha256:<64 lower-case hex digits>");
        layers.push_back(std::move(l));
        return {};
    };
    REDIST_TRY_VOID(json::read_document(body, source, "image manifest",
                                        {{"schemaVersion", [&](json::value& v) { return v.get(schema); }, true},
                                         {"layers", [&](json::value& v) { return v.for_each(layer_reader); }, true}}));
    if (schema != 2)
        return make_error(error_code::bad_manifest, "not an image manifest (schemaVersion is not 2)")
            .with_source(std::string(source))
            .with_json_path("schemaVersion");
    return layers;
}

result<std::optional<std::string>> docker_config_auth(std::string_view json, std::string_view registry, bool https,
                                                      std::string_view source) {
    std::optional<std::string> found;
    // `docker login HOST` stores "HOST" (or "https://HOST[/v1/]"): https.
    // Credentials for a plain-http registry are only those stored under
    // "http://HOST": what was given for https never goes over plain http.
    const std::string bare = https ? std::string(registry) : "http://" + std::string(registry);
    const std::string with_scheme = (https ? "https://" : "http://") + std::string(registry);
    const std::string with_path = with_scheme + "/v1/";
    const auto entry = [&](json::value& v) -> result<void> {
        std::string auth, user, password;
        REDIST_TRY_VOID(v.read_object({{"auth", [&](json::value& a) { return a.get(auth); }},
                                       {"username", [&](json::value& a) { return a.get(user); }},
                                       {"password", [&](json::value& a) { return a.get(password); }}}));
        if (!found && !auth.empty()) found = auth;
        if (!found && !user.empty()) found = base64(user + ":" + password);
        return {};
    };
    REDIST_TRY_VOID(
        json::read_document(json, source, "docker config",
                            {{"auths", [&](json::value& v) {
                                  if (bare == with_scheme)
                                      return v.read_object({{with_scheme, entry}, {with_path, entry}});
                                  return v.read_object({{bare, entry}, {with_scheme, entry}, {with_path, entry}});
                              }}}));
    if (found && !std::all_of(found->begin(), found->end(),
                              [](char c) { return is_alnum(c) || c == '+' || c == '/' || c == '='; }))
        return make_error(error_code::bad_manifest, "an auths entry that is not base64")
            .with_source(std::string(source))
            .with_json_path("auths");
    return found;
}

std::optional<std::string> next_page_path(std::string_view link) {
    const auto open = link.find('<');
    const auto close = link.find('>');
    if (open == std::string_view::npos || close == std::string_view::npos || close < open) return std::nullopt;
    if (link.substr(close).find("rel=\"next\"") == std::string_view::npos) return std::nullopt;
    const std::string_view path = link.substr(open + 1, close - open - 1);
    // Same registry only: a path, never an absolute URL to somewhere else.
    if (!path.starts_with("/v2/") || path.starts_with("//")) return std::nullopt;
    if (!std::all_of(path.begin(), path.end(), [](char c) { return c > ' ' && c < 127 && c != '#'; }))
        return std::nullopt;
    return std::string(path);
}

// ---- credentials and tokens -------------------------------------------------------------------

namespace {

// Whether REDIST_OCI_AUTH's REGISTRY names `where`: its scheme, host and
// port. "HOST[:PORT]" and "oci://HOST[:PORT]" name the https registry only;
// a plain-http one is named "oci+http://HOST[:PORT]" (or "http://...").
bool names_registry(std::string_view key, const oci_url& where) {
    if (where.https) return key == where.registry || key == "oci://" + where.registry;
    return key == "oci+http://" + where.registry || key == "http://" + where.registry;
}

// The user's credentials for the registry of `where` (base64
// "user:password"), looked up by its scheme, host and port, or nullopt.
result<std::optional<std::string>> credentials_for(const oci_url& where) {
    // REDIST_OCI_AUTH="REGISTRY=USER:PASSWORD": scoped to one registry, so
    // that a registry named by a project or lock file never receives it.
    if (const char* env = std::getenv("REDIST_OCI_AUTH"); env != nullptr && *env != '\0') {
        const std::string_view value(env);
        const auto eq = value.find('=');
        if (eq != std::string_view::npos && names_registry(value.substr(0, eq), where))
            return std::optional<std::string>(base64(value.substr(eq + 1)));
    }
    std::filesystem::path config;
    if (const char* dir = std::getenv("DOCKER_CONFIG"); dir != nullptr && *dir != '\0')
        config = std::filesystem::path(dir) / "config.json";
    else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
        config = std::filesystem::path(home) / ".docker" / "config.json";
    std::error_code ec;
    if (config.empty() || !std::filesystem::exists(config, ec)) return std::optional<std::string>();
    REDIST_TRY(const std::string text, read_file(config, 1u << 20, follow_links::yes));
    return docker_config_auth(text, where.registry, where.https, config.string());
}

}  // namespace

result<std::optional<std::string>> registry_credentials(std::string_view url) {
    // The registry as the URL writes it (host[:port]: how REDIST_OCI_AUTH and
    // docker's config name one) and its scheme. A URL that is no registry's
    // has none: reading it fails on its own.
    auto where = parse_oci_url(url);
    if (!where.ok()) return std::optional<std::string>();
    return credentials_for(*where);
}

namespace {

// Authorization headers per "<origin> <repository> <actions>" (the origin
// being "scheme://host:port": an http and an https registry on one host
// share nothing), for the whole run: one token request per repository, not
// one per blob. A realm that failed is remembered too, and not asked again
// in this run: each archive would wait for it otherwise.
struct token_cache {
    std::mutex mutex;
    std::map<std::string, std::string> headers;
    std::map<std::string, error> failed_realms;
};
token_cache& tokens() {
    static token_cache cache;
    return cache;
}

// The source's origin: its credentials, tokens and realm checks are scoped by it.
std::string token_key(const source& from, const oci_url& where, const std::string& actions) {
    return from.origin() + " " + where.repository + " " + actions;
}

error auth_error(const oci_url& where, const std::string& why) {
    return make_error(error_code::network, "registry authentication failed: " + why)
        .with_url(sanitize_url(where.api("")));
}

// A token request is a small document: the document timeouts apply (a realm
// that does not answer must not hold up every archive for a minute).
transfer_options document_timeouts(const transfer_options& options) {
    transfer_options out = options;
    const auto cap = [](long& seconds, long most) { seconds = seconds <= 0 || seconds > most ? most : seconds; };
    cap(out.connect_timeout_seconds, options.document_connect_timeout_seconds);
    cap(out.stall_timeout_seconds, options.document_stall_timeout_seconds);
    return out;
}

// One GET of the realm. Any failure (no answer, an HTTP error, a 200 that
// is HTML or has no token) is the registry's failure as a source: network,
// so that the next source is tried.
result<std::string> ask_realm(const oci_url& where, const http_request& request, const transfer_options& options) {
    transfer_failure_info failure;
    auto answered = send_request(request, document_timeouts(options), &failure);
    if (!answered.ok()) return auth_error(where, "the token server did not answer: " + answered.error_value().message);
    if (answered->status != 200)
        return auth_error(where, "the token server answered HTTP " + std::to_string(answered->status));
    auto token = parse_token_response(answered->body, sanitize_url(request.url));
    if (!token.ok()) return auth_error(where, "the token server sent no usable token");
    return "Authorization: Bearer " + *token;
}

// The Bearer flow: GET <realm>?service=…&scope=repository:<repo>:<actions>,
// with the user's credentials (Basic) only when the realm is the registry's
// own scheme, host and port.
result<std::string> bearer_token(const source& from, const oci_url& where, const auth_challenge& challenge,
                                 const std::string& actions, const transfer_options& options) {
    const bool realm_https = challenge.realm.starts_with("https://");
    if (!realm_https && !challenge.realm.starts_with("http://"))
        return auth_error(where, "the token realm is not an http(s) URL");
    if (where.https && !realm_https) return auth_error(where, "an https registry named a plain-http token realm");
    const std::string realm_origin = origin_of(challenge.realm);
    if (realm_origin.empty()) return auth_error(where, "the token realm is not a plain http(s) URL");
    const std::string realm_key = sanitize_url(challenge.realm);
    {
        const std::lock_guard lock(tokens().mutex);
        if (auto it = tokens().failed_realms.find(realm_key); it != tokens().failed_realms.end()) return it->second;
    }
    http_request request;
    request.url = challenge.realm + (challenge.realm.find('?') == std::string::npos ? "?" : "&");
    if (!challenge.service.empty()) request.url += "service=" + query_escape(challenge.service) + "&";
    request.url += "scope=" + query_escape("repository:" + where.repository + ":" + actions);
    REDIST_TRY(const auto creds, from.credentials());
    if (creds && realm_origin == from.origin()) request.headers.push_back("Authorization: Basic " + *creds);
    request.max_response_bytes = 1u << 20;
    auto header = ask_realm(where, request, options);
    if (!header.ok()) {
        const std::lock_guard lock(tokens().mutex);
        tokens().failed_realms.emplace(realm_key, header.error_value());
    }
    return header;
}

// The Authorization header for `actions` ("pull" or "pull,push") on the
// repository, or "" when the registry lets anyone in. Probes /v2/ once.
// A token failure moves on to the next source (failure: not transient).
result<std::string> authorization(const source& from, const oci_url& where, const std::string& actions,
                                  const transfer_options& options, transfer_failure_info* failure) {
    const std::string key = token_key(from, where, actions);
    {
        const std::lock_guard lock(tokens().mutex);
        if (auto it = tokens().headers.find(key); it != tokens().headers.end()) return it->second;
    }
    const http_request probe{.url = std::string(where.https ? "https://" : "http://") + where.registry + "/v2/"};
    transfer_failure_info probe_failure;
    auto answered = send_request(probe, options, &probe_failure);
    if (failure != nullptr) *failure = probe_failure;
    REDIST_TRY(const http_response response, std::move(answered));
    std::string header;
    if (response.status == 401) {
        const auto challenge = parse_www_authenticate(response.www_authenticate);
        if (!challenge) return auth_error(where, "HTTP 401 without a usable WWW-Authenticate challenge");
        if (challenge->scheme == "bearer") {
            REDIST_TRY(header, bearer_token(from, where, *challenge, actions, options));
        } else {
            REDIST_TRY(const auto creds, from.credentials());
            if (!creds) return auth_error(where, "the registry wants credentials (REDIST_OCI_AUTH or docker login)");
            header = "Authorization: Basic " + *creds;
        }
    } else if (response.status != 200) {
        if (failure != nullptr) {
            failure->http_status = response.status;
            failure->transient = response.status == 408 || response.status == 429 || response.status >= 500;
        }
        return make_error(error_code::network, "not a registry: /v2/ answered HTTP " + std::to_string(response.status))
            .with_url(sanitize_url(probe.url));
    }
    const std::lock_guard lock(tokens().mutex);
    tokens().headers[key] = header;
    return header;
}

void forget_authorization(const source& from, const oci_url& where, const std::string& actions) {
    const std::lock_guard lock(tokens().mutex);
    tokens().headers.erase(token_key(from, where, actions));
}

std::vector<std::string> with(const std::string& header, std::string_view more = {}) {
    std::vector<std::string> out;
    if (!header.empty()) out.push_back(header);
    if (!more.empty()) out.emplace_back(more);
    return out;
}

// A GET of a small registry document (manifest, tags list) with the pull
// authorization, once more with a fresh token after a 401.
result<http_response> get_small(const source& from, const oci_url& where, const std::string& url,
                                std::string_view accept, std::size_t max_bytes, const transfer_options& options,
                                transfer_failure_info* failure) {
    for (int attempt = 0;; ++attempt) {
        REDIST_TRY(const std::string auth, authorization(from, where, "pull", options, failure));
        const http_request request{.url = url, .headers = with(auth, accept), .max_response_bytes = max_bytes};
        REDIST_TRY(http_response response, send_request(request, options, failure));
        if (response.status == 401 && attempt == 0) {
            forget_authorization(from, where, "pull");
            continue;
        }
        return response;
    }
}

error status_error(const http_response& response, const std::string& url, transfer_failure_info* failure) {
    const long s = response.status;
    if (failure != nullptr) {
        failure->http_status = s;
        failure->transient = s == 408 || s == 429 || s >= 500;
    }
    return make_error(s == 404 ? error_code::not_found : error_code::network, "HTTP " + std::to_string(s))
        .with_url(sanitize_url(url));
}

// A document of a tag: manifest -> the layer titled where.title
// (redistrib_<label>.json, recompressed_<label>.json) -> its blob, checked
// against the layer digest.
result<std::string> fetch_document(const source& from, const oci_url& where, const transfer_options& options,
                                   transfer_failure_info* failure) {
    const std::string manifest_url = where.api("manifests/" + where.reference);
    REDIST_TRY(const http_response manifest,
               get_small(from, where, manifest_url, kAccept, kMaxManifestBytes, options, failure));
    if (manifest.status != 200) return status_error(manifest, manifest_url, failure);
    return oci_release_document(
        manifest.body, where.title, sanitize_url(manifest_url), [&](const oci_layer& layer) -> result<std::string> {
            const std::string blob_url = where.api("blobs/" + layer.digest);
            REDIST_TRY(http_response blob, get_small(from, where, blob_url, {}, kMaxDocumentBytes, options, failure));
            if (blob.status != 200) return status_error(blob, blob_url, failure);
            REDIST_TRY_VOID(check_oci_blob(blob.body, layer.digest, layer.size, sanitize_url(blob_url)));
            return std::move(blob.body);
        });
}

}  // namespace

result<void> deliver_document(const std::string& body, download_callbacks& callbacks, std::uint64_t resume_from) {
    if (resume_from > body.size()) return make_error(error_code::network, "cannot resume past the document's end");
    response_info info;
    info.status = 200;
    info.content_length = static_cast<std::int64_t>(body.size() - resume_from);
    info.partial = resume_from > 0;
    if (callbacks.on_response) REDIST_TRY_VOID(callbacks.on_response(info));
    if (callbacks.on_data && body.size() > resume_from)
        REDIST_TRY_VOID(callbacks.on_data(reinterpret_cast<const std::byte*>(body.data()) + resume_from,
                                          body.size() - resume_from));
    return {};
}

result<void> oci_download(const source& from, const transfer_options& options, download_callbacks& callbacks,
                          std::uint64_t resume_from, std::optional<std::uint64_t> range_last,
                          transfer_failure_info* failure) {
    const std::string& url = from.url();
    if (from.kind() == source_kind::layout)
        return oci_layout_download(url, options, callbacks, resume_from, range_last, failure);
    auto parsed = parse_oci_url(url);
    if (!parsed.ok()) return make_error(error_code::network, parsed.error_value().message).with_url(sanitize_url(url));
    const oci_url& where = *parsed;
    if (where.what == oci_url::kind::document) {
        if (range_last) return make_error(error_code::internal, "a document is not fetched in ranges");
        REDIST_TRY(const std::string body, fetch_document(from, where, options, failure));
        return deliver_document(body, callbacks, resume_from);
    }
    if (where.what != oci_url::kind::blob)
        return make_error(error_code::network, "a registry URL names no blob or document here")
            .with_url(sanitize_url(url));
    const std::string blob_url = where.api("blobs/" + where.reference);
    for (int attempt = 0;; ++attempt) {
        REDIST_TRY(const std::string auth, authorization(from, where, "pull", options, failure));
        auto got = download_with_headers(blob_url, with(auth), options, callbacks, resume_from, range_last, failure);
        // An expired token: once more with a fresh one.
        if (!got.ok() && failure != nullptr && failure->http_status == 401 && attempt == 0) {
            forget_authorization(from, where, "pull");
            continue;
        }
        return got;
    }
}

result<std::vector<std::string>> oci_list_tags(const std::string& base, const std::string& product,
                                               const transfer_options& options) {
    if (is_oci_layout_url(base)) return oci_layout_list_tags(base, product);
    REDIST_TRY(oci_url where, parse_oci_url(join_url(join_url(base, product), "redist/")));
    const source from = make_source(base);
    const std::string origin = std::string(where.https ? "https://" : "http://") + where.registry;
    std::string url = where.api("tags/list?n=1000");
    std::vector<std::string> tags;
    for (int page = 0; page < kMaxTagPages; ++page) {
        transfer_failure_info failure;
        REDIST_TRY(const http_response response, get_small(from, where, url, {}, 4u << 20, options, &failure));
        if (response.status == 404)
            return make_error(error_code::not_found, "no such repository in the registry").with_url(sanitize_url(url));
        if (response.status != 200) return status_error(response, url, nullptr);
        REDIST_TRY(auto more, parse_tags_list(response.body, sanitize_url(url)));
        tags.insert(tags.end(), more.begin(), more.end());
        const auto next = next_page_path(response.link);
        if (!next) return tags;
        url = origin + *next;
    }
    return make_error(error_code::bad_manifest, "the tags list has more than 100 pages").with_url(sanitize_url(url));
}

// ---- pushing -------------------------------------------------------------------------------

namespace {

// An upload session's Location as an absolute URL (a path on the registry, or
// a URL, maybe on a storage host); empty when it is neither.
std::string session_url(const oci_url& registry, const std::string& location) {
    if (location.starts_with("/"))
        return std::string(registry.https ? "https://" : "http://") + registry.registry + location;
    if (location.starts_with(registry.https ? "https://" : "http")) return location;
    return {};
}

}  // namespace

result<oci_pusher> oci_pusher::open(const std::string& base, const std::string& product,
                                    const transfer_options& options, const source_policy& sources,
                                    run_observer* observer) {
    REDIST_TRY(oci_url where, parse_oci_url(join_url(join_url(base, product), "redist/")));
    where.what = oci_url::kind::base;
    // The target's own requests: the policy's retries, nothing skipped, and
    // --offline (no download) does not stop a push.
    source_run run{retry_policy(sources)};
    run.observer = observer;
    run.component = sanitize_url(base);
    oci_pusher pusher(make_source(base), std::move(where), options, std::move(run));
    const auto probe = [&](transfer_failure_info& failure) -> result<void> {
        REDIST_TRY_VOID(pusher.headers(&failure));
        return {};
    };
    REDIST_TRY_VOID(pusher.retried(pusher.url_.api(""), probe));
    return pusher;
}

result<void> oci_pusher::retried(const std::string& url,
                                 const std::function<result<void>(transfer_failure_info&)>& op) {
    auto done = try_sources({make_source(url)}, run_, [&](source_attempt& at) { return op(at.failure); });
    if (!done.ok()) return std::move(done).error_value();
    return {};
}

result<std::vector<std::string>> oci_pusher::headers(transfer_failure_info* failure) {
    REDIST_TRY(const std::string auth, authorization(target_, url_, "pull,push", options_, failure));
    return with(auth);
}

result<bool> oci_pusher::has_blob(const std::string& sha256, std::uint64_t size) {
    http_request request{.method = "HEAD", .url = url_.api("blobs/sha256:" + sha256)};
    bool has = false;
    REDIST_TRY_VOID(retried(request.url, [&](transfer_failure_info& failure) -> result<void> {
        REDIST_TRY(request.headers, headers(&failure));
        REDIST_TRY(const http_response response, send_request(request, options_, &failure));
        if (response.status == 404) {
            has = false;
            return {};
        }
        if (response.status != 200) return status_error(response, request.url, &failure);
        has = response.content_length < 0 || static_cast<std::uint64_t>(response.content_length) == size;
        return {};
    }));
    return has;
}

result<void> oci_pusher::upload(const std::string& sha256, const std::filesystem::path& file, std::string_view bytes) {
    // One attempt is the whole upload: a new session, then its PUT.
    return retried(url_.api("blobs/uploads/"), [&](transfer_failure_info& failure) -> result<void> {
        http_request start{.method = "POST", .url = url_.api("blobs/uploads/")};
        REDIST_TRY(start.headers, headers(&failure));
        REDIST_TRY(const http_response started, send_request(start, options_, &failure));
        if (started.status != 202 || started.location.empty())
            return make_error(error_code::network,
                              "the registry refused an upload: HTTP " + std::to_string(started.status))
                .with_url(sanitize_url(start.url));
        const std::string location = session_url(url_, started.location);
        if (location.empty())
            return make_error(error_code::network, "the registry gave an unusable upload location")
                .with_url(sanitize_url(start.url));
        http_request put{.method = "PUT",
                         .url = location + (location.find('?') == std::string::npos ? "?" : "&") +
                                "digest=sha256:" + sha256};
        // The upload location may lie on another host (storage): credentials only
        // for the registry's own scheme, host and port.
        if (origin_of(location) == origin_of(start.url)) put.headers = start.headers;
        put.headers.emplace_back("Content-Type: application/octet-stream");
        put.body_file = file;
        put.body = std::string(bytes);
        REDIST_TRY(const http_response done, send_request(put, options_, &failure));
        if (done.status != 201)
            return make_error(error_code::network, "the registry refused a blob: HTTP " + std::to_string(done.status))
                .with_url(sanitize_url(url_.api("blobs/sha256:" + sha256)));
        return {};
    });
}

result<void> oci_pusher::push_blob(const std::string& sha256, const std::filesystem::path& file) {
    return upload(sha256, file, {});
}

result<void> oci_pusher::push_blob(const std::string& sha256, std::string_view bytes) {
    return upload(sha256, {}, bytes);
}

result<bool> oci_pusher::mount_blob(const std::string& sha256, const std::string& from) {
    if (from == url_.repository || !valid_repository(from)) return false;
    http_request start{.method = "POST",
                       .url = url_.api("blobs/uploads/?mount=sha256:" + sha256 + "&from=" + query_escape(from))};
    bool mounted = false;
    // A mount only saves an upload: when its retries run out, the caller uploads (false).
    (void)retried(start.url, [&](transfer_failure_info& failure) -> result<void> {
        REDIST_TRY(start.headers, headers(&failure));
        REDIST_TRY(const http_response started, send_request(start, options_, &failure));
        mounted = started.status == 201;
        if (failure.transient) return status_error(started, start.url, &failure);
        if (mounted) return {};
        // 202: the registry opened an upload session instead; close it (best effort).
        const std::string session = started.status == 202 ? session_url(url_, started.location) : std::string();
        if (!session.empty()) {
            http_request cancel{.method = "DELETE", .url = session};
            if (origin_of(session) == origin_of(start.url)) cancel.headers = start.headers;
            (void)send_request(cancel, options_);
        }
        return {};
    });
    return mounted;
}

result<std::optional<std::string>> oci_pusher::tag_digest(const std::string& tag) {
    http_request request{.method = "HEAD", .url = url_.api("manifests/" + tag)};
    std::optional<std::string> digest;
    REDIST_TRY_VOID(retried(request.url, [&](transfer_failure_info& failure) -> result<void> {
        REDIST_TRY(request.headers, headers(&failure));
        request.headers.emplace_back(kAccept);
        REDIST_TRY(const http_response response, send_request(request, options_, &failure));
        if (response.status == 404) {
            digest.reset();
            return {};
        }
        if (response.status != 200) return status_error(response, request.url, &failure);
        digest = response.docker_content_digest;
        return {};
    }));
    return digest;
}

result<void> oci_pusher::put_manifest(const std::string& tag, const std::string& json, std::string_view media_type) {
    http_request request{.method = "PUT", .url = url_.api("manifests/" + tag)};
    return retried(request.url, [&](transfer_failure_info& failure) -> result<void> {
        REDIST_TRY(request.headers, headers(&failure));
        request.headers.push_back("Content-Type: " + std::string(media_type));
        request.body = json;
        REDIST_TRY(const http_response response, send_request(request, options_, &failure));
        if (response.status == 201) return {};
        std::string message = "the registry refused the manifest: HTTP " + std::to_string(response.status);
        return make_error(response.status == 400 ? error_code::bad_manifest : error_code::network, std::move(message))
            .with_url(sanitize_url(request.url));
    });
}

std::string oci_release_manifest(const oci_release_layer& json_layer, const std::vector<oci_release_layer>& archives,
                                 const std::string& label, bool standard_types,
                                 const std::optional<oci_release_layer>& recompressed,
                                 const std::optional<oci_release_layer>& signature) {
    json_writer w;
    const auto descriptor = [&](std::string_view type, const oci_release_layer& l) {
        w.begin_object();
        w.field("mediaType", type);
        w.field("digest", "sha256:" + l.sha256);
        w.field("size", l.size);
        w.key("annotations").begin_object().field(kTitle, l.title).end_object();
        w.end_object();
    };
    w.begin_object();
    w.field("schemaVersion", 2);
    w.field("mediaType", oci_manifest_media_type);
    w.key("config").begin_object();
    w.field("mediaType", kConfigType);
    w.field("digest", "sha256:" + sha256_hex(oci_empty_config));
    w.field("size", static_cast<std::uint64_t>(oci_empty_config.size()));
    w.end_object();
    w.key("layers").begin_array();
    descriptor(standard_types ? kStandardLayerType : kJsonLayerType, json_layer);
    for (const auto& a : archives) descriptor(standard_types ? kStandardLayerType : kArchiveLayerType, a);
    if (recompressed) descriptor(standard_types ? kStandardLayerType : kRecompressedLayerType, *recompressed);
    if (signature) descriptor(standard_types ? kStandardLayerType : kSignatureLayerType, *signature);
    w.end_array();
    w.key("annotations").begin_object().field("org.opencontainers.image.version", label).end_object();
    w.end_object();
    return w.str();
}

}  // namespace redist
