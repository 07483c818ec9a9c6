// conccl/deadline.hpp - every wait in ConCCL takes a Deadline.
#pragma once

#include <chrono>
#include <cstdint>

namespace conccl {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  // Saturating: a span too long for the clock (INT64_MAX ms, say) is "never",
  // the clock's last instant, not an overflow into the past; a negative span
  // is "now".
  static Deadline after(std::chrono::nanoseconds d) {
    const Clock::time_point now = Clock::now();
    if (d.count() <= 0) return Deadline(now);
    const auto room = Clock::time_point::max() - now;
    return Deadline(d >= room ? Clock::time_point::max() : now + std::chrono::duration_cast<Clock::duration>(d));
  }
  static Deadline after_ms(int64_t ms) {
    constexpr int64_t kMaxMs = std::chrono::nanoseconds::max().count() / 1000000;
    return after(std::chrono::milliseconds(ms < kMaxMs ? ms : kMaxMs));
  }
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
