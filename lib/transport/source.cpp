// A source, chosen once per URL, and how it is read. See source.hpp.
#include "transport/source.hpp"

#include <array>
#include <atomic>
#include <cstddef>

#include "transport/oci.hpp"

namespace redist {

source make_source(std::string url) {
    const source_kind kind = source_kind_of(url);
    return {kind, std::move(url)};
}

std::vector<source> make_sources(const std::vector<std::string>& urls) {
    std::vector<source> out;
    out.reserve(urls.size());
    for (const auto& url : urls) out.push_back(make_source(url));
    return out;
}

bool offline_skips(const source& s, bool offline) noexcept { return offline && !s.local(); }

result<std::optional<std::string>> source::credentials() const {
    if (kind_ != source_kind::registry) return std::optional<std::string>();
    return registry_credentials(url_);
}

#if REDIST_TEST_HOOKS
namespace {
constexpr std::size_t kKinds = static_cast<std::size_t>(source_kind::layout) + 1;  // layout is the last kind
std::array<std::atomic<const source_reader*>, kKinds>& test_readers() {
    static std::array<std::atomic<const source_reader*>, kKinds> readers{};
    return readers;
}
std::size_t kind_index(source_kind kind) { return static_cast<std::size_t>(kind); }
}  // namespace

scoped_source_reader::scoped_source_reader(source_kind kind, const source_reader& reader)
    : kind_(kind), previous_(test_readers()[kind_index(kind)].exchange(&reader)) {}

scoped_source_reader::~scoped_source_reader() { test_readers()[kind_index(kind_)].store(previous_); }

result<void> source::read(const read_request& request) const {
    if (const source_reader* scripted = test_readers()[kind_index(kind_)].load()) return scripted->read(*this, request);
    return builtin_reader(kind_).read(*this, request);
}
#else
result<void> source::read(const read_request& request) const { return builtin_reader(kind_).read(*this, request); }
#endif

}  // namespace redist
