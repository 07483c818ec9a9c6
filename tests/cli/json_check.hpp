// tests/cli/json_check.hpp - a strict JSON syntax check (RFC 8259) for the
// files sdma-probe writes: objects, arrays, strings with escapes, numbers,
// true/false/null; nothing else (no NaN, no trailing commas).
#pragma once

#include <string_view>

namespace probe_test {

// True when `text` is one JSON value, optionally surrounded by whitespace.
bool is_valid_json(std::string_view text);

}  // namespace probe_test
