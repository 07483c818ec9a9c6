// conccl/status.hpp - error values returned by every fallible ConCCL call.
//
// Library code never exits or aborts on bad input: it returns a Status that
// names what was wrong and what to do about it. The CLI maps Code to its exit
// codes (see tools/sdma-probe/README or docs/sdma-probe.md).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace conccl {

enum class Code {
  ok = 0,
  invalid_argument,   // caller passed something malformed: fix the call
  out_of_range,       // a value does not fit its field or limit
  not_found,          // a named thing (buffer, engine, GPU) does not exist
  timeout,            // a deadline passed; message carries the hang diagnosis
  device_fault,       // an engine or device reported a fault
  unavailable,        // backend not present here (no driver, permission, version)
  resource_exhausted, // out of queues, ring space, memory
  busy,               // object in use (e.g. a plan still running)
  verify_failed,      // data did not match what was expected
  internal,           // a bug in ConCCL: please report
};

const char* code_name(Code c);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == Code::ok; }
  explicit operator bool() const { return ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "code_name: message", for logs and CLI output.
  std::string to_string() const;

  // Adds context in front of the message, keeping the code: "while X: <message>".
  Status& prefix(const std::string& context) {
    if (!ok()) message_ = context + ": " + message_;
    return *this;
  }

 private:
  Code code_ = Code::ok;
  std::string message_;
};

inline Status error(Code c, std::string message) { return Status(c, std::move(message)); }

// "0x1f": the one format for addresses and values in messages.
std::string hex(uint64_t v);

// What Result::value() does when there is no value: a bug in the caller
// (like std::optional::value), so it prints the Status - the message that
// says what went wrong - to stderr and aborts. Check ok() first.
[[noreturn]] void result_value_of_error(const Status& status);

// Result<T>: a value or an error Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  T& value() & {
    if (!ok()) result_value_of_error(std::get<Status>(v_));
    return std::get<T>(v_);
  }
  const T& value() const& {
    if (!ok()) result_value_of_error(std::get<Status>(v_));
    return std::get<T>(v_);
  }
  T&& value() && {
    if (!ok()) result_value_of_error(std::get<Status>(v_));
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace conccl

// Propagate a failed Status from the current function.
#define CONCCL_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::conccl::Status conccl_st_ = (expr);       \
    if (!conccl_st_.ok()) return conccl_st_;    \
  } while (0)
