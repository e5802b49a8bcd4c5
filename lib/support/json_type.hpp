// Internal: words for a simdjson On-Demand value type in error messages
// ("expected a string, got an array"). Shared by the manifest walker and
// json_reader (json_reader.cpp defines it); kept out of json_reader.hpp so
// that its users do not all include simdjson.
#pragma once

#include <simdjson.h>

namespace redist::json {

// "an array", "an object", "a number", "a string", "a boolean", "null".
const char* type_name(simdjson::ondemand::json_type t) noexcept;

}  // namespace redist::json
