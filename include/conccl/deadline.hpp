// conccl/deadline.hpp - every wait in ConCCL takes a Deadline.
#pragma once

#include <chrono>
#include <cstdint>

namespace conccl {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline after(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline after_ms(int64_t ms) { return after(std::chrono::milliseconds(ms)); }
  // A deadline that has already passed: "try once".
  static Deadline now() { return Deadline(Clock::now()); }

  bool expired() const { return Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }
  std::chrono::nanoseconds remaining() const {
    const auto r = at_ - Clock::now();
    return r.count() > 0 ? std::chrono::duration_cast<std::chrono::nanoseconds>(r)
                         : std::chrono::nanoseconds(0);
  }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace conccl
