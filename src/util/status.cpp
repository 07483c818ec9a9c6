// src/util/status.cpp - Status and Code: names, messages, hex().
#include "conccl/status.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>

namespace conccl {

const char* code_name(Code c) {
  switch (c) {
    case Code::ok: return "ok";
    case Code::invalid_argument: return "invalid argument";
    case Code::out_of_range: return "out of range";
    case Code::not_found: return "not found";
    case Code::timeout: return "timeout";
    case Code::device_fault: return "device fault";
    case Code::unavailable: return "unavailable";
    case Code::resource_exhausted: return "resource exhausted";
    case Code::busy: return "busy";
    case Code::verify_failed: return "verification failed";
    case Code::internal: return "internal error";
  }
  return "unknown";
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(code_name(code_)) + ": " + message_;
}

void result_value_of_error(const Status& status) {
  std::fprintf(stderr, "conccl: Result::value() called on an error: %s\n", status.to_string().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace conccl
