// libFuzzer target for redist::parse_manifest (built by tests/fuzz/CMakeLists.txt
// with clang++ -fsanitize=fuzzer,address,undefined).
//
// Besides "never crash, never leak, no UB", it checks the parser's contract on
// every input: a successful parse only ever yields validated artifacts (whose
// relative_path resolves on the base's origin and names a plain file in a
// mirror), and a failure is always a one-line bad_manifest error that names its source.
// A violated contract aborts, which libFuzzer reports as a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "model/manifest.hpp"
#include "model/urls.hpp"
#include "redist/manifest.hpp"
#include "support/safe_path.hpp"

namespace {

void require(bool condition) {
    if (!condition) std::abort();
}

bool is_lower_hex(std::string_view s, std::size_t digits) {
    if (s.size() != digits) return false;
    for (const char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

// Segments of a relative path; false for an empty one.
bool segments_of(std::string_view p, std::vector<std::string_view>& out) {
    std::size_t start = 0;
    while (true) {
        const auto end = p.find('/', start);
        const auto segment = p.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
        if (segment.empty()) return false;
        out.push_back(segment);
        if (end == std::string_view::npos) return true;
        start = end + 1;
    }
}

// Relative, no '?', '#', backslash or control character, ".." only as a
// leading run of at most three, no ".".
bool safe_relative_path(std::string_view p) {
    if (p.empty() || p.front() == '/') return false;
    for (const char ch : p) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f || c == '\\' || c == '?' || c == '#') return false;
    }
    std::vector<std::string_view> segments;
    if (!segments_of(p, segments)) return false;
    std::size_t climb = 0;
    while (climb < segments.size() && segments[climb] == "..") ++climb;
    if (climb > 3 || climb == segments.size()) return false;
    for (std::size_t i = climb; i < segments.size(); ++i)
        if (segments[i] == ".." || segments[i] == ".") return false;
    return true;
}

// Where the path lands: on the base's origin (or refused), under a file://
// mirror's base, and a mirror's name for it is plain and under its base.
void check_resolution(std::string_view p) {
    constexpr std::string_view origin = "https://h.example:8443";
    const auto deep = redist::resolve_reference("https://h.example:8443/a/release/cudnn/redist/", p);
    require(deep.ok() && deep.value().starts_with(std::string(origin) + "/a/"));
    const auto shallow = redist::resolve_reference("https://h.example:8443/cudnn/redist/", p);
    require(shallow.ok() ? shallow.value().starts_with(std::string(origin) + "/")
                         : shallow.error_value().code == redist::error_code::bad_manifest);
    const auto local = redist::resolve_reference("file:///srv/m/cudnn/redist/", p);
    require(local.ok() && local.value().starts_with("file:///srv/m/"));
    const std::string in_mirror = redist::mirror_artifact_path("cudnn", p);
    require(local.value() == "file:///srv/m/" + in_mirror);
    std::vector<std::string_view> segments;
    require(segments_of(in_mirror, segments));
    for (const auto s : segments) require(s != ".." && s != ".");
    require(redist::confined_join("/srv/m", in_mirror).ok());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view json(reinterpret_cast<const char*>(data), size);
    const auto parsed = redist::parse_manifest(json, "fuzz-input.json");
    if (!parsed.ok()) {
        const auto& err = parsed.error_value();
        require(err.code == redist::error_code::bad_manifest);
        require(err.source == "fuzz-input.json");
        require(!err.message.empty());
        const std::string line = err.describe();
        require(line.find('\n') == std::string::npos && line.find('\r') == std::string::npos);
        return 0;
    }
    const auto& m = parsed.value();
    std::size_t count = 0;
    for (const auto& c : m.components) {
        require(!c.key.empty());
        require(m.find_component(c.key) == &c);  // keys are unique
        for (const auto& a : c.artifacts) {
            ++count;
            require(a.component == c.key);
            require(!a.platform.empty());
            require(is_lower_hex(a.sha256, 64));
            require(a.md5.empty() || is_lower_hex(a.md5, 32));
            require(safe_relative_path(a.relative_path));
            check_resolution(a.relative_path);
            require(a.format == redist::archive_format_from_path(a.relative_path));
            if (a.variant) require(!a.variant->empty());
            (void)a.cuda_major();
        }
    }
    require(count == m.artifact_count());
    return 0;
}
