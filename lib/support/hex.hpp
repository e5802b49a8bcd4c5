// Internal: lower-case hex of a byte string (digests in receipts, lock files,
// SBOMs). One copy for every hasher (sha256.cpp defines it).
#pragma once

#include <cstddef>
#include <string>

namespace redist {

std::string to_hex(const unsigned char* bytes, std::size_t size);

}  // namespace redist
