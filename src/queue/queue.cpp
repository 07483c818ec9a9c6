// src/queue/queue.cpp - the user-mode ring shared by every backend.
//
// Protocol (ROCr BlitSdma, tinygrad, kfdtest; shared/reference/sdma_packets.md §4):
//   write packets -> release fence -> store 64-bit byte wptr -> doorbell.
// rptr/wptr are monotonic 64-bit byte counts; only the ring offset wraps.
// A packet never straddles the ring end: the tail is filled with NOPs.
// At most ring_bytes - 4 bytes are outstanding, so a full ring never looks
// empty to an engine that compares masked pointers.
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "conccl/queue.hpp"
#include "packets/sdma_asm.hpp"

namespace conccl {

namespace {

uint64_t load_acquire(const uint64_t* p) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(p)).load(std::memory_order_acquire);
}

}  // namespace

Queue::Queue(int gpu, int engine, sdma::Gen gen, RingMemory ring, std::unique_ptr<QueueBackend> backend)
    : gpu_(gpu), engine_(engine), gen_(gen), ring_(ring), backend_(std::move(backend)) {
  next_wptr_ = load_acquire(ring_.wptr);
}

Queue::~Queue() = default;

uint64_t Queue::rptr() const { return load_acquire(ring_.rptr); }
uint64_t Queue::wptr() const { return load_acquire(ring_.wptr); }

void Queue::write_nops(uint64_t at, uint64_t bytes) {
  // NOP with count = body dwords (variable length since SDMA 4); the body is
  // ignored, so zero it like ROCr/tinygrad do.
  auto* ring = static_cast<uint32_t*>(ring_.ring.host);
  const uint64_t mask = ring_.ring.size - 1;
  uint64_t dwords = bytes / 4;
  uint64_t pos = (at & mask) / 4;
  const uint32_t max_body = sdma::limits(gen_).max_nop_count;
  while (dwords > 0) {
    const uint64_t body = dwords - 1 < max_body ? dwords - 1 : max_body;
    ring[pos] = static_cast<uint32_t>(body) << 16;  // NOP header, count[29:16]
    std::memset(&ring[pos + 1], 0, body * 4);
    pos += body + 1;
    dwords -= body + 1;
  }
}

Status Queue::wait_for_space(uint64_t end, Deadline deadline, uint64_t start) {
  const uint64_t size = ring_.ring.size;
  auto fits = [&] { return end - rptr() <= size - 4; };
  if (fits()) return Status();
  while (!fits()) {
    if (backend_->engine_status().state == EngineStatus::State::halted)
      return error(Code::device_fault, "ring full and the engine has halted. " + diagnose(8));
    if (deadline.expired())
      return error(Code::timeout,
                   "ring full: need " + std::to_string(end - start) + " bytes but the engine has consumed only up to rptr=" +
                       hex(rptr()) + " (wptr=" + hex(start) + ", ring " + std::to_string(size) +
                       " bytes); the engine is not draining the ring. " + diagnose(8));
    backend_->wait_progress(rptr(), deadline);
  }
  return Status();
}

Status Queue::submit(const CommandBuffer& cb, Deadline deadline, uint64_t* end_wptr) {
  if (cb.gen() != gen_)
    return error(Code::invalid_argument,
                 "command buffer was recorded for SDMA " + std::string(sdma::gen_name(cb.gen())) +
                     " but the queue's engine is SDMA " + std::string(sdma::gen_name(gen_)) +
                     "; record it with queue.command_buffer()");
  const uint64_t size = ring_.ring.size;
  std::lock_guard<std::mutex> lock(submit_mu_);
  if (cb.empty()) {
    if (end_wptr) *end_wptr = next_wptr_;
    return Status();
  }

  // Lay the packets out: a packet that would cross the ring end starts at 0.
  const std::span<const uint32_t> dw = cb.dwords();
  const std::span<const uint32_t> starts = cb.packet_starts();
  uint64_t pos = next_wptr_;
  for (size_t i = 0; i < starts.size(); ++i) {
    const uint64_t len = ((i + 1 < starts.size() ? starts[i + 1] : dw.size()) - starts[i]) * 4ull;
    if (len > size - 4)
      return error(Code::invalid_argument, "a " + std::to_string(len) + "-byte packet cannot fit a " +
                                               std::to_string(size) + "-byte ring; use a larger ring");
    if ((pos & (size - 1)) + len > size) pos += size - (pos & (size - 1));
    pos += len;
  }
  const uint64_t end = pos;
  if (end - next_wptr_ > size - 4)
    return error(Code::invalid_argument,
                 "command buffer of " + std::to_string(cb.size_bytes()) + " bytes (" +
                     std::to_string(end - next_wptr_) + " with ring-end padding) exceeds what a " +
                     std::to_string(size) + "-byte ring holds; submit it in parts or use a larger ring");
  CONCCL_RETURN_IF_ERROR(wait_for_space(end, deadline, next_wptr_));

  auto* ring = static_cast<uint32_t*>(ring_.ring.host);
  pos = next_wptr_;
  for (size_t i = 0; i < starts.size(); ++i) {
    const uint64_t len = ((i + 1 < starts.size() ? starts[i + 1] : dw.size()) - starts[i]) * 4ull;
    const uint64_t off = pos & (size - 1);
    if (off + len > size) {
      write_nops(pos, size - off);
      pos += size - off;
    }
    std::memcpy(reinterpret_cast<uint8_t*>(ring) + (pos & (size - 1)), &dw[starts[i]], len);
    pos += len;
  }

  // Publish: packets before wptr, wptr before the doorbell.
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic_ref<uint64_t>(*ring_.wptr).store(end, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  backend_->ring_doorbell(end);
  next_wptr_ = end;
  if (end_wptr) *end_wptr = end;
  return Status();
}

Status Queue::wait_consumed(Deadline deadline, uint64_t target) {
  const uint64_t published = wptr();
  if (target > published) target = published;
  bool done = false;
  while (!(done = rptr() >= target) && !deadline.expired()) {
    if (backend_->engine_status().state == EngineStatus::State::halted)
      return error(Code::device_fault, "the engine halted before consuming up to wptr=" + hex(target) + ". " + diagnose());
    backend_->wait_progress(rptr(), deadline);
  }
  if (done) return Status();
  return error(Code::timeout, "deadline passed waiting for the engine to consume up to wptr=" +
                                  hex(target) + ". " + diagnose());
}

std::string Queue::diagnose(size_t max_packets) const {
  const uint64_t r = rptr(), w = wptr();
  const EngineStatus es = engine_status();
  std::string out = "queue " + std::to_string(id()) + " on gpu " + std::to_string(gpu_) + " engine " +
                    std::to_string(engine_) + " (SDMA " + std::string(sdma::gen_name(gen_)) +
                    "): rptr=" + hex(r) + " wptr=" + hex(w) + " (" + std::to_string(w - r) +
                    " bytes pending); engine " + es.detail();
  if (w <= r || !ring_.ring.host) return out;
  out += "; pending packets:";
  const uint64_t size = ring_.ring.size;
  const auto* ring = static_cast<const uint32_t*>(ring_.ring.host);
  uint64_t pos = r;
  size_t shown = 0;
  while (pos < w && shown < max_packets) {
    const uint64_t off = pos & (size - 1);
    const uint64_t avail = std::min<uint64_t>(w - pos, size - off) / 4;
    Result<sdma::Packet> p = sdma::decode(gen_, std::span<const uint32_t>(ring + off / 4, avail));
    out += "\n  @" + hex(pos) + ": ";
    if (!p.ok()) {
      out += "<" + p.status().message() + ">";
      break;
    }
    out += sdma::format_packet(*p);
    pos += p->dwords * 4;
    ++shown;
  }
  if (pos < w) out += "\n  ... (" + std::to_string(w - pos) + " more bytes)";
  return out;
}

}  // namespace conccl
