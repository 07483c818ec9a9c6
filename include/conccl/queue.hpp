// conccl/queue.hpp - command buffers and user-mode SDMA queues.
//
// A CommandBuffer records packets for one SDMA generation (no device needed).
// A Queue is one ring on one engine: submit() copies a command buffer's
// packets into the ring (padding the ring end with NOPs so no packet straddles
// it), stores the write pointer, issues a release fence and rings the doorbell
// once. Several threads may submit to one Queue (see docs/queues.md: producers
// are serialised by a short lock around reserve+copy+publish).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "conccl/deadline.hpp"
#include "conccl/device.hpp"
#include "conccl/status.hpp"
#include "packets/sdma_codec.hpp"

namespace conccl {

// POLL_REGMEM compare functions (value & mask) FUNC ref.
enum class PollFunc : uint8_t { always = 0, lt = 1, le = 2, eq = 3, ne = 4, ge = 5, gt = 6 };

class CommandBuffer {
 public:
  explicit CommandBuffer(sdma::Gen gen) : gen_(gen) {}

  sdma::Gen gen() const { return gen_; }

  // Each command appends one or more packets, or returns an error and
  // appends nothing.
  Status copy(uint64_t dst, uint64_t src, uint64_t bytes);  // split into legal packets
  Status copy_bcst(uint64_t dst0, uint64_t dst1, uint64_t src, uint64_t bytes);
  Status fill(uint64_t dst, uint32_t value, uint64_t bytes);  // dst, bytes 4-aligned
  Status write(uint64_t dst, std::span<const uint32_t> data);
  Status fence(uint64_t addr, uint32_t value);                 // 32-bit store, after prior work
  Status fence64(uint64_t addr, uint64_t value);               // two FENCEs: low dword, then high
  Status atomic_add64(uint64_t addr, int64_t value);
  Status poll(uint64_t addr, uint32_t ref, uint32_t mask, PollFunc func,
              uint16_t interval = 4, uint16_t retry = 0xFFF);  // retry 0xFFF = forever
  Status timestamp(uint64_t addr);                             // global timestamp, 8-B aligned
  Status trap(uint32_t ctx);
  Status nop(uint32_t body_dwords = 0);
  // Any packet of packets/, by fields.
  Status packet(sdma::Pkt pkt, std::span<const sdma::FieldValue> fields,
                std::span<const uint32_t> data = {});
  // Pre-encoded dwords; decoded to find packet boundaries, rejected if invalid.
  Status raw(std::span<const uint32_t> dwords);

  std::span<const uint32_t> dwords() const { return dw_; }
  size_t size_bytes() const { return dw_.size() * 4; }
  size_t packet_count() const { return starts_.size(); }
  // Dword offset of each packet.
  std::span<const uint32_t> packet_starts() const { return starts_; }
  bool empty() const { return dw_.empty(); }
  void clear() {
    dw_.clear();
    starts_.clear();
  }

 private:
  Status append(sdma::Pkt pkt, std::initializer_list<sdma::FieldValue> fields,
                std::span<const uint32_t> data = {});
  sdma::Gen gen_;
  std::vector<uint32_t> dw_;
  std::vector<uint32_t> starts_;
};

// Where a ring lives: its bytes (CPU and engine views) and the read/write
// pointer words (64-bit byte offsets that never wrap).
struct RingMemory {
  Buffer ring;               // size is a power of two
  uint64_t* rptr = nullptr;  // written by the engine
  uint64_t* wptr = nullptr;  // written by the queue, read by the engine
  uint64_t rptr_va = 0;
  uint64_t wptr_va = 0;
};

class Queue {
 public:
  Queue(int gpu, int engine, sdma::Gen gen, RingMemory ring, std::unique_ptr<QueueBackend> backend);
  ~Queue();
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  int gpu() const { return gpu_; }
  int engine() const { return engine_; }
  int id() const { return backend_->id(); }
  sdma::Gen gen() const { return gen_; }
  size_t ring_bytes() const { return ring_.ring.size; }
  CommandBuffer command_buffer() const { return CommandBuffer(gen_); }

  // Copies cb's packets into the ring and rings the doorbell once. Waits for
  // ring space until `deadline`; fails (writing nothing) if space does not
  // come, if cb is larger than the ring, or if cb is for another generation.
  // *end_wptr gets the write pointer after these packets: the work is done
  // when rptr() >= *end_wptr.
  Status submit(const CommandBuffer& cb, Deadline deadline, uint64_t* end_wptr = nullptr);

  uint64_t rptr() const;  // bytes consumed by the engine (monotonic)
  uint64_t wptr() const;  // bytes published (monotonic)

  // Waits until the engine consumed everything published up to `wptr`
  // (default: all). On timeout the error carries the hang diagnosis.
  Status wait_consumed(Deadline deadline, uint64_t wptr = ~uint64_t(0));

  // Sleeps until the engine may have moved rptr past `seen_rptr` (or a short
  // while, or the deadline); spurious returns are fine. For waiters that
  // watch memory the queue's packets write.
  void wait_for_progress(uint64_t seen_rptr, Deadline deadline) const {
    backend_->wait_progress(seen_rptr, deadline);
  }

  Event& trap_event() { return backend_->trap_event(); }
  EngineStatus engine_status() const { return backend_->engine_status(); }

  // Diagnosis text: queue, engine, pointers, engine state, and the packets
  // between rptr and wptr decoded (at most max_packets).
  std::string diagnose(size_t max_packets = 16) const;

 private:
  Status wait_for_space(uint64_t needed, Deadline deadline, uint64_t wptr);
  void write_nops(uint64_t at, uint64_t bytes);

  const int gpu_, engine_;
  const sdma::Gen gen_;
  RingMemory ring_;
  std::unique_ptr<QueueBackend> backend_;
  std::mutex submit_mu_;     // serialises producers: reserve + copy + publish
  uint64_t next_wptr_ = 0;   // guarded by submit_mu_
};

}  // namespace conccl
