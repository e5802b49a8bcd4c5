// A source, chosen once per URL. See source.hpp.
#include "transport/source.hpp"

namespace redist {

source make_source(std::string url) {
    const source_kind kind = source_kind_of(url);
    return {kind, std::move(url)};
}

bool offline_skips(const source& s, bool offline) noexcept { return offline && !s.local(); }

}  // namespace redist
