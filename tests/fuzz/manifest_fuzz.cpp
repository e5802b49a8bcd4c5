// libFuzzer target for redist::parse_manifest (built by tests/fuzz/CMakeLists.txt
// with clang++ -fsanitize=fuzzer,address,undefined).
//
// Besides "never crash, never leak, no UB", it checks the parser's contract on
// every input: a successful parse only ever yields validated artifacts, and a
// failure is always a one-line bad_manifest error that names its source.
// A violated contract aborts, which libFuzzer reports as a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "redist/manifest.hpp"

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

bool safe_relative_path(std::string_view p) {
    if (p.empty() || p.front() == '/') return false;
    for (const char ch : p) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7f || c == '\\') return false;
    }
    std::size_t start = 0;
    while (true) {
        const auto end = p.find('/', start);
        const auto segment = p.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
        if (segment.empty() || segment == "..") return false;
        if (end == std::string_view::npos) return true;
        start = end + 1;
    }
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
            require(a.format == redist::archive_format_from_path(a.relative_path));
            if (a.variant) require(!a.variant->empty());
            (void)a.cuda_major();
        }
    }
    require(count == m.artifact_count());
    return 0;
}
