// src/util/env.hpp - what an environment knob's value means. Each knob is
// read once by the code it tunes (a function-local static), so a process
// keeps one setting; docs/collectives.md and docs/graphs.md list them.
#pragma once

#include <cstdlib>
#include <string_view>

namespace conccl::util {

// Whether environment variable `name` is set to exactly `value`.
inline bool env_is(const char* name, std::string_view value) {
  const char* e = std::getenv(name);
  return e && value == e;
}

}  // namespace conccl::util
