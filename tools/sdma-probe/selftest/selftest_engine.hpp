// tools/sdma-probe/selftest_engine.hpp - the checks `sdma-probe selftest`
// runs on one engine, through one queue: verified copies and fills at several
// sizes and alignments, signal set, wake-up, poll, atomic, timestamp, peer
// copies, and the bandwidth copy. Every wait has a deadline; a hang becomes
// an Outcome with the diagnosis, never a stop.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "conccl/device.hpp"
#include "conccl/signal.hpp"
#include "selftest/selftest_memory.hpp"
#include "selftest/selftest_types.hpp"

namespace probe::selftest {

struct Settings {
  uint64_t bandwidth_bytes = 64ull << 20;  // --bytes
  int reps = 3;                            // bandwidth copies; the best counts
  uint64_t timeout_ms = 10000;             // every wait
  bool all_peers = false;                  // --all-peers
};

// Sizes crossing a per-command limit are tested when the limit is at most
// this (SDMA 4.x/5.0: 4 MiB; not the 1 GiB of later SDMA or Hopper's 2 GiB).
inline constexpr uint64_t kCheapLimit = 16ull << 20;

// The bytes each of a GPU's two buffers needs for these settings on an
// engine with these caps.
size_t buffer_bytes_needed(const Settings& s, const conccl::Caps& caps);

// The peers an engine copies to: every linked GPU with all_peers, else a
// sample (the peer it is recommended for, if any, and one by rotation) so
// that the engines of a GPU together reach every peer.
std::vector<int> peers_to_test(const conccl::GpuInfo& g, size_t engine_index, bool all_peers);

class EngineRun {
 public:
  static conccl::Result<std::unique_ptr<EngineRun>> create(conccl::Device& dev, const Memory& mem, int gpu,
                                                          int engine, const Settings& s, uint64_t seed);

  // Every check in matrix order, then the peers and the bandwidth, into r;
  // stops at the first hang or fault.
  void run_all(const conccl::GpuInfo& g, size_t engine_index, EngineReport& r);
  // The bandwidth copy: `reps` copies of bandwidth_bytes, GPU-local, spot
  // checked; *gbps gets the best.
  Outcome bandwidth(double* gbps);
  // Bytes this run's copies and fills moved (for the placement check).
  uint64_t bytes_moved() const { return bytes_moved_; }
  conccl::Queue& queue() { return *q_; }

 private:
  EngineRun(conccl::Device& dev, const Memory& mem, int gpu, const Settings& s, uint64_t seed)
      : dev_(dev), mem_(mem), gpu_(gpu), s_(s), rng_(seed) {}

  // Appends the completion (the done signal's next value, into *value) and
  // submits.
  Outcome submit(conccl::CommandBuffer& cb, conccl::Deadline deadline, uint64_t* value, conccl::QueueSpan* span);
  // Waits for the done signal to reach value (a hang carries the diagnosis).
  Outcome await(uint64_t value, conccl::Deadline deadline, const conccl::QueueSpan& span);
  // submit + await.
  Outcome finish(conccl::CommandBuffer& cb);
  Outcome copy_case(const conccl::Buffer& src, const conccl::Buffer& dst, size_t bytes, size_t src_off,
                    size_t dst_off);
  Outcome fill_case(const conccl::Buffer& dst, size_t bytes, size_t dst_off);
  Outcome check_copy();
  Outcome check_fill();
  Outcome check_signal();
  Outcome check_wake();
  Outcome check_poll();
  Outcome check_atomic();
  Outcome check_timestamp();
  // 64-bit word at va (CPU-visible memory).
  uint64_t read64(uint64_t va) const;

  conccl::Device& dev_;
  const Memory& mem_;
  int gpu_;
  Settings s_;
  std::mt19937_64 rng_;
  std::unique_ptr<conccl::Queue> q_;  // declared first: destroyed after what its commands write
  conccl::Signal done_;               // completion of every submission
  conccl::Signal sig_;                // signal set / wake checks
  conccl::Signal gate_;               // the poll check's host-released signal
  conccl::Signal atom_;               // the atomic check's counter
  conccl::UniqueBuffer ts_;           // timestamp slots
  uint64_t next_ = 0;  // the done signal's last value
  uint64_t bytes_moved_ = 0;
};

}  // namespace probe::selftest
