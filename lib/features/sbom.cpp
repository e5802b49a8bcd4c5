// sbom.cpp — SPDX 2.3 and CycloneDX 1.5 JSON from the receipts of a prefix.
#include "redist/sbom.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <vector>

#include "archive/sha256.hpp"
#include "redist/json_writer.hpp"
#include "support/hex.hpp"
#include "support/posix_file.hpp"
#include "support/safe_path.hpp"
#include "support/timestamp.hpp"

namespace redist {

result<sbom_format> parse_sbom_format(std::string_view text) {
    if (text == "spdx-json") return sbom_format::spdx_json;
    if (text == "cyclonedx-json") return sbom_format::cyclonedx_json;
    return make_error(error_code::usage,
                      "unknown SBOM format '" + std::string(text) + "' (choose spdx-json or cyclonedx-json)");
}

namespace {

// ---- identifiers ------------------------------------------------------------------

// SPDX identifiers allow [A-Za-z0-9.-] only.
std::string spdx_idstring(std::string_view text) {
    std::string out;
    for (unsigned char c : text) out += std::isalnum(c) || c == '.' || c == '-' ? static_cast<char>(c) : '-';
    return out.empty() ? "unnamed" : out;
}

// Names that are SPDX license identifiers and appear in NVIDIA manifests or
// plausibly could. Anything else is not an SPDX identifier and must not be
// passed off as one.
bool is_spdx_license_id(std::string_view name) {
    static const std::set<std::string_view> ids = {"MIT",           "Apache-2.0",  "BSD-2-Clause", "BSD-3-Clause",
                                                   "BSL-1.0",       "Zlib",        "ISC",          "MPL-2.0",
                                                   "LGPL-2.1-only", "GPL-2.0-only"};
    return ids.count(name) != 0;
}

// 8-4-4-4-12 lower-case hex from a SHA-256, with the version nibble set to 5
// (name-based) and the RFC 4122 variant bits, so it passes as a UUID.
std::string uuid_from_hash(const std::string& hex) {
    std::string h = hex.substr(0, 32);
    h[12] = '5';
    static constexpr char variant[] = "89ab";
    h[16] = variant[static_cast<unsigned>(std::stoi(h.substr(16, 1), nullptr, 16)) & 3u];
    return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" +
           h.substr(20, 12);
}

// A digest of everything the document states, for its identifiers.
std::string content_digest(const sbom_document& doc) {
    sha256_hasher h;
    auto put = [&](std::string_view s) {
        h.update(s);
        h.update(std::string_view("\0", 1));
    };
    put(doc.name);
    put(doc.created);
    for (const auto& c : doc.components) {
        put(c.installed.product);
        put(c.installed.component);
        put(c.installed.archive_sha256);
        for (const auto& f : c.files) {
            put(f.path);
            put(f.sha256);
        }
    }
    return h.finish_hex();
}

std::string percent_encode(std::string_view text) {
    static constexpr char digits[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : text) {
        if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += digits[c >> 4];
            out += digits[c & 15];
        }
    }
    return out;
}

// pkg:generic (the purl type for plain downloads) with the download URL and
// the archive's checksum as qualifiers.
std::string purl(const receipt& r) {
    return "pkg:generic/nvidia/" + percent_encode(r.component) + "@" + percent_encode(r.component_version) +
           "?checksum=sha256:" + r.archive_sha256 + "&download_url=" + percent_encode(r.url);
}

std::string describe_origin(const receipt& r) {
    std::string out = r.product + " " + r.release_label + ", " + r.platform;
    if (r.variant) out += ", " + *r.variant;
    return out;
}

std::string file_name_of(const std::string& url) {
    const auto slash = url.find_last_of('/');
    return slash == std::string::npos ? url : url.substr(slash + 1);
}

// ---- SPDX 2.3 ---------------------------------------------------------------------

// license name -> LicenseRef-..., unique even when two names sanitize alike.
std::map<std::string, std::string> license_refs(const sbom_document& doc) {
    std::map<std::string, std::string> refs;
    std::set<std::string> used;
    for (const auto& c : doc.components) {
        if (c.license.empty() || is_spdx_license_id(c.license) || refs.count(c.license)) continue;
        std::string id = "LicenseRef-" + spdx_idstring(c.license);
        for (int n = 2; used.count(id); ++n) id = "LicenseRef-" + spdx_idstring(c.license) + "-" + std::to_string(n);
        used.insert(id);
        refs[c.license] = id;
    }
    return refs;
}

// SHA-1, which SPDX 2.3 requires beside SHA-256 (sha256_hasher).
class sha1_hasher {
public:
    sha1_hasher() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
        if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha1(), nullptr) != 1) throw std::bad_alloc();
    }
    void update(std::string_view bytes) {
        if (EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size()) != 1) throw std::bad_alloc();
    }
    std::string finish_hex() {
        std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
        unsigned len = 0;
        if (EVP_DigestFinal_ex(ctx_.get(), md.data(), &len) != 1) throw std::bad_alloc();
        return to_hex(md.data(), len);
    }

private:
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

// SPDX 2.3 §7.9: SHA-1 over the sorted, concatenated SHA-1s of the package's files.
std::string verification_code(const std::vector<sbom_file>& files) {
    std::vector<std::string> sums;
    sums.reserve(files.size());
    for (const auto& f : files) sums.push_back(f.sha1);
    std::sort(sums.begin(), sums.end());
    sha1_hasher h;
    for (const auto& s : sums) h.update(s);
    return h.finish_hex();
}

void spdx_checksum(json_writer& w, const char* algorithm, const std::string& value) {
    w.begin_object().field("algorithm", algorithm).field("checksumValue", value).end_object();
}

void spdx_relationship(json_writer& w, const std::string& from, const char* type, const std::string& to) {
    w.begin_object().field("spdxElementId", from).field("relationshipType", type).field("relatedSpdxElement", to);
    w.end_object();
}

std::string render_spdx(const sbom_document& doc, const std::string& digest) {
    const auto refs = license_refs(doc);
    auto license_expr = [&](const std::string& name) {
        if (name.empty()) return std::string("NOASSERTION");
        return is_spdx_license_id(name) ? name : refs.at(name);
    };
    std::vector<std::string> package_ids;
    for (std::size_t i = 0; i < doc.components.size(); ++i)
        package_ids.push_back("SPDXRef-Package-" + std::to_string(i + 1) + "-" +
                              spdx_idstring(doc.components[i].installed.component));

    json_writer w(2);
    w.begin_object();
    w.field("spdxVersion", "SPDX-2.3");
    w.field("dataLicense", "CC0-1.0");
    w.field("SPDXID", "SPDXRef-DOCUMENT");
    w.field("name", doc.name);
    w.field("documentNamespace",
            "https://spdx.org/spdxdocs/redist-" + spdx_idstring(doc.name) + "-" + uuid_from_hash(digest));
    w.key("creationInfo").begin_object();
    w.field("created", doc.created);
    w.key("creators").begin_array().value("Tool: redist-" + doc.tool_version).end_array();
    w.end_object();

    w.key("packages").begin_array();
    for (std::size_t i = 0; i < doc.components.size(); ++i) {
        const auto& c = doc.components[i];
        const receipt& r = c.installed;
        w.begin_object();
        w.field("SPDXID", package_ids[i]);
        w.field("name", r.component);
        w.field("versionInfo", r.component_version);
        w.field("packageFileName", file_name_of(r.url));
        w.field("supplier", "Organization: NVIDIA Corporation");
        w.field("downloadLocation", r.url.empty() ? std::string("NOASSERTION") : r.url);
        w.field("filesAnalyzed", !c.files.empty());
        if (!c.files.empty()) {
            w.key("packageVerificationCode").begin_object();
            w.field("packageVerificationCodeValue", verification_code(c.files)).end_object();
        }
        w.key("checksums").begin_array();
        spdx_checksum(w, "SHA256", r.archive_sha256);
        w.end_array();
        w.field("licenseConcluded", "NOASSERTION");
        w.field("licenseDeclared", license_expr(c.license));
        w.field("copyrightText", "NOASSERTION");
        w.field("comment", "from " + describe_origin(r) + "; installed " + r.installed_at);
        w.field("primaryPackagePurpose", "LIBRARY");
        w.key("externalRefs").begin_array().begin_object();
        w.field("referenceCategory", "PACKAGE-MANAGER").field("referenceType", "purl");
        w.field("referenceLocator", purl(r)).end_object().end_array();
        w.key("annotations").begin_array();
        const std::pair<const char*, std::string> facts[] = {{"product", r.product},
                                                             {"release", r.release_label},
                                                             {"platform", r.platform},
                                                             {"variant", r.variant.value_or("")}};
        for (const auto& [key, value] : facts) {
            if (value.empty()) continue;
            w.begin_object().field("annotationDate", doc.created);
            w.field("annotationType", "OTHER").field("annotator", "Tool: redist-" + doc.tool_version);
            w.field("comment", std::string("redist:") + key + "=" + value).end_object();
        }
        w.end_array();
        w.end_object();
    }
    w.end_array();

    w.key("files").begin_array();
    for (std::size_t i = 0; i < doc.components.size(); ++i) {
        const auto& c = doc.components[i];
        for (std::size_t j = 0; j < c.files.size(); ++j) {
            const auto& f = c.files[j];
            w.begin_object();
            w.field("SPDXID", "SPDXRef-File-" + std::to_string(i + 1) + "-" + std::to_string(j + 1));
            w.field("fileName", "./" + f.path);
            w.key("checksums").begin_array();
            spdx_checksum(w, "SHA1", f.sha1);
            spdx_checksum(w, "SHA256", f.sha256);
            w.end_array();
            w.field("licenseConcluded", "NOASSERTION");
            w.field("copyrightText", "NOASSERTION");
            w.end_object();
        }
    }
    w.end_array();

    if (!refs.empty()) {
        w.key("hasExtractedLicensingInfos").begin_array();
        for (const auto& [name, id] : refs) {
            std::set<std::string> where;
            for (const auto& c : doc.components)
                if (c.license == name) where.insert("share/licenses/" + c.installed.component + "/");
            std::string text = "The license NVIDIA's redistrib manifest names \"" + name +
                               "\". Its text is installed in the prefix under:";
            for (const auto& p : where) text += " " + p;
            w.begin_object().field("licenseId", id).field("name", name).field("extractedText", text).end_object();
        }
        w.end_array();
    }

    w.key("relationships").begin_array();
    for (std::size_t i = 0; i < doc.components.size(); ++i) {
        spdx_relationship(w, "SPDXRef-DOCUMENT", "DESCRIBES", package_ids[i]);
        for (std::size_t j = 0; j < doc.components[i].files.size(); ++j)
            spdx_relationship(w, package_ids[i], "CONTAINS",
                              "SPDXRef-File-" + std::to_string(i + 1) + "-" + std::to_string(j + 1));
    }
    w.end_array();
    w.end_object();
    return w.str() + "\n";
}

// ---- CycloneDX 1.5 ----------------------------------------------------------------

void cdx_hash(json_writer& w, const char* alg, const std::string& content) {
    w.begin_object().field("alg", alg).field("content", content).end_object();
}

void cdx_property(json_writer& w, const char* name, const std::string& value) {
    w.begin_object().field("name", name).field("value", value).end_object();
}

std::string render_cyclonedx(const sbom_document& doc, const std::string& digest) {
    json_writer w(2);
    w.begin_object();
    w.field("$schema", "http://cyclonedx.org/schema/bom-1.5.schema.json");
    w.field("bomFormat", "CycloneDX");
    w.field("specVersion", "1.5");
    w.field("serialNumber", "urn:uuid:" + uuid_from_hash(digest));
    w.field("version", 1);
    w.key("metadata").begin_object();
    w.field("timestamp", doc.created);
    w.key("tools").begin_object().key("components").begin_array();
    w.begin_object().field("type", "application").field("name", "redist").field("version", doc.tool_version);
    w.end_object().end_array().end_object();
    w.key("component").begin_object().field("type", "application").field("bom-ref", "prefix");
    w.field("name", doc.name).end_object();
    w.end_object();

    w.key("components").begin_array();
    for (std::size_t i = 0; i < doc.components.size(); ++i) {
        const auto& c = doc.components[i];
        const receipt& r = c.installed;
        const std::string ref = "component-" + std::to_string(i + 1) + "-" + r.product + "/" + r.component;
        w.begin_object();
        w.field("type", "library");
        w.field("bom-ref", ref);
        w.key("supplier").begin_object().field("name", "NVIDIA Corporation").end_object();
        w.field("group", r.product);
        w.field("name", r.component);
        w.field("version", r.component_version);
        w.field("description", "from " + describe_origin(r));
        w.key("hashes").begin_array();
        cdx_hash(w, "SHA-256", r.archive_sha256);
        w.end_array();
        if (!c.license.empty()) {
            w.key("licenses").begin_array().begin_object().key("license").begin_object();
            w.field(is_spdx_license_id(c.license) ? "id" : "name", c.license);
            w.end_object().end_object().end_array();
        }
        w.field("purl", purl(r));
        if (!r.url.empty()) {
            w.key("externalReferences").begin_array().begin_object();
            w.field("type", "distribution").field("url", sanitize_url(r.url));
            w.key("hashes").begin_array();
            cdx_hash(w, "SHA-256", r.archive_sha256);
            w.end_array().end_object().end_array();
        }
        w.key("properties").begin_array();
        cdx_property(w, "redist:product", r.product);
        cdx_property(w, "redist:release", r.release_label);
        cdx_property(w, "redist:platform", r.platform);
        if (r.variant) cdx_property(w, "redist:variant", *r.variant);
        cdx_property(w, "redist:archive_size", std::to_string(r.archive_size));
        if (!r.installed_at.empty()) cdx_property(w, "redist:installed_at", r.installed_at);
        w.end_array();
        w.key("components").begin_array();
        for (const auto& f : c.files) {
            w.begin_object().field("type", "file").field("bom-ref", ref + ":" + f.path).field("name", f.path);
            w.key("hashes").begin_array();
            cdx_hash(w, "SHA-1", f.sha1);
            cdx_hash(w, "SHA-256", f.sha256);
            w.end_array().end_object();
        }
        w.end_array();
        w.end_object();
    }
    w.end_array();

    w.key("dependencies").begin_array().begin_object().field("ref", "prefix").key("dependsOn").begin_array();
    for (std::size_t i = 0; i < doc.components.size(); ++i)
        w.value("component-" + std::to_string(i + 1) + "-" + doc.components[i].installed.product + "/" +
                doc.components[i].installed.component);
    w.end_array().end_object().end_array();
    w.end_object();
    return w.str() + "\n";
}

// ---- reading the prefix -------------------------------------------------------------

// Opens `rel` beneath the directory `root_fd`: no "..", no absolute symlink
// and no symlink leaving the tree on the way (RESOLVE_BENEATH), and the file
// itself is not followed if it is a symlink (O_NOFOLLOW).
int open_beneath(int root_fd, const std::string& rel) {
    open_how how{};
    how.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    return static_cast<int>(::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how));
}

result<sbom_file> hash_installed(int root_fd, const std::filesystem::path& prefix, const installed_file& f) {
    const std::string shown = (prefix / f.path).string();
    // Receipt paths are plain relative paths (read_receipts checks them too); anything else is corrupt.
    if (relative_path_problem(f.path) != nullptr)
        return make_error(error_code::bad_manifest, "receipt lists an invalid path '" + f.path + "'").with_path(shown);
    unique_fd fd(open_beneath(root_fd, f.path));
    if (fd.get() < 0) {
        const int err = errno;
        if (err == ENOENT)
            return make_error(error_code::integrity, "installed file is missing (run `redist verify`)").with_path(shown);
        return errno_error("cannot open", shown, err);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
        return make_error(error_code::integrity, "installed file is no longer a regular file").with_path(shown);
    // The SBOM states the plain SHA-256 (and SHA-1); a receipt may record a
    // large file by its piece list (see file_digester), checked in the same pass.
    sha1_hasher sha1;
    sha256_hasher sha256;
    std::optional<file_digester> recorded;
    if (f.piece_size != 0) recorded.emplace(f.piece_size);
    std::vector<std::byte> buf(1u << 20);
    REDIST_TRY(const std::uint64_t total,
               read_each_block(fd.get(), buf, shown, [&](const std::byte* data, std::size_t n) -> result<void> {
                   sha1.update({reinterpret_cast<const char*>(data), n});
                   sha256.update(data, n);
                   if (recorded) recorded->update(data, n);
                   return {};
               }));
    std::string digest = sha256.finish_hex();
    const std::string as_recorded = recorded ? recorded->finish_hex() : digest;
    if (auto same = check_integrity(f.size, f.sha256, total, as_recorded, shown); !same.ok()) {
        error e = std::move(same).error_value();
        e.url.clear();  // check_integrity names a URL; here it is a file
        e.message = "installed file differs from its receipt: " + e.message + " (run `redist verify`)";
        return std::move(e).with_path(shown);
    }
    return sbom_file{f.path, total, std::move(digest), sha1.finish_hex()};
}

}  // namespace

std::string render_sbom(const sbom_document& doc, sbom_format format) {
    const std::string digest = content_digest(doc);
    return format == sbom_format::spdx_json ? render_spdx(doc, digest) : render_cyclonedx(doc, digest);
}

result<sbom_document> collect_sbom(const sbom_request& request) {
    REDIST_TRY(auto receipts, read_installed_receipts(request.prefix));
    unique_fd root(::open(request.prefix.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (root.get() < 0) return errno_error("cannot open", request.prefix, errno);

    sbom_document doc;
    const auto prefix = std::filesystem::absolute(request.prefix).lexically_normal();
    doc.name = prefix.filename().string();
    if (doc.name.empty()) doc.name = prefix.parent_path().filename().string();
    if (doc.name.empty()) doc.name = "prefix";
    doc.created = request.created.empty() ? utc_now_iso8601() : request.created;
    doc.tool_version = request.tool_version;
    for (auto& r : receipts) {
        sbom_component c;
        if (auto it = request.licenses.find({r.product, r.component}); it != request.licenses.end())
            c.license = it->second;
        for (const auto& f : r.files) {
            if (f.kind != entry_kind::regular) continue;
            REDIST_TRY(auto hashed, hash_installed(root.get(), request.prefix, f));
            c.files.push_back(std::move(hashed));
        }
        std::sort(c.files.begin(), c.files.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
        r.files.clear();
        c.installed = std::move(r);
        doc.components.push_back(std::move(c));
    }
    return doc;
}

}  // namespace redist
