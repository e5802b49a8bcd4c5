// store/receipts.hpp (internal) — a receipt's JSON, as written to and read
// from <prefix>/.redist/receipts/ (receipts.cpp). Programs read receipts
// through read_receipts() and scan_receipts() (redist/prefix.hpp).
#pragma once

#include <string>
#include <string_view>

#include "redist/error.hpp"
#include "redist/prefix.hpp"

namespace redist {

std::string receipt_to_json(const receipt& r);
// Outcomes: ok | bad_manifest (json_path names the field; source = `source`):
// broken JSON, a duplicate key, a product/component/label that is not a
// valid name, a file path that is not plain and relative or lies in .redist/.
result<receipt> receipt_from_json(std::string_view json, std::string_view source);

}  // namespace redist
