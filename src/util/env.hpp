// src/util/env.hpp - what an environment knob's value means. Each knob is
// read once by the code it tunes (a function-local static), so a process
// keeps one setting; docs/collectives.md and docs/graphs.md list them.
#pragma once

#include <cstdint>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace conccl::util {

// Whether environment variable `name` is set to exactly `value`.
inline bool env_is(const char* name, std::string_view value) {
  const char* e = std::getenv(name);
  return e && value == e;
}

// Environment variable `name`'s value, or "" when unset.
inline std::string env_str(const char* name) {
  const char* e = std::getenv(name);
  return e ? std::string(e) : std::string();
}

// The trace file environment variable `name` asks for: "<its value>.<this
// process's pid>.csv" (the processes of a run each write their own), or ""
// when unset or empty (CONCCL_KEEPER_TRACE, CONCCL_CALL_TRACE).
inline std::string env_trace_path(const char* name) {
  const std::string prefix = env_str(name);
  return prefix.empty() ? prefix : prefix + "." + std::to_string(::getpid()) + ".csv";
}

// Environment variable `name` as a byte count: digits with an optional K, M
// or G suffix (powers of 1024). Unset, empty or malformed: nullopt.
inline std::optional<uint64_t> env_bytes(const char* name) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e < '0' || *e > '9') return std::nullopt;
  char* end = nullptr;
  uint64_t v = std::strtoull(e, &end, 10);
  switch (*end) {
    case 'K': v <<= 10; ++end; break;
    case 'M': v <<= 20; ++end; break;
    case 'G': v <<= 30; ++end; break;
    default: break;
  }
  if (*end != '\0') return std::nullopt;
  return v;
}

}  // namespace conccl::util
