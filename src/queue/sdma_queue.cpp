// src/queue/sdma_queue.cpp - the user-mode SDMA ring shared by the emulator and KFD.
//
// Protocol (ROCr BlitSdma, tinygrad, kfdtest; see docs/queues.md):
//   write packets -> release fence -> store 64-bit byte wptr -> doorbell.
// Each submission is framed (sdma_frame.hpp): prologue, the work, epilogue,
// a minimum-size NOP where the GPU needs one, and the sequence FENCE whose
// value is the low 32 bits of the submission's end ticket.
#include "queue/sdma_queue.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

#include "packets/sdma_asm.hpp"

namespace conccl {

namespace {

uint64_t load_acquire(const uint64_t* p) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(p)).load(std::memory_order_acquire);
}

// One packet (or a NOP pad when dw is null) of a framed submission.
struct Piece {
  const uint32_t* dw;
  uint64_t bytes;
};

}  // namespace

SdmaQueue::SdmaQueue(int gpu, int engine, Isa isa, Caps caps, RingMemory ring, SubmitFrame frame,
                     std::unique_ptr<SdmaRingBackend> backend)
    : Queue(gpu, engine, isa, caps), ring_(ring), frame_(std::move(frame)), backend_(std::move(backend)) {
  next_wptr_ = load_acquire(ring_.wptr);
  last_ticket_.store(next_wptr_);
  // Nothing is outstanding yet: the completion word starts at the ticket.
  std::atomic_ref<uint32_t>(*ring_.done).store(static_cast<uint32_t>(next_wptr_), std::memory_order_release);
}

SdmaQueue::~SdmaQueue() = default;

// The completion word holds the low 32 bits of the end ticket of the last
// submission the engine finished (its sequence FENCE). Tickets outstanding or
// finished-but-not-yet-recorded differ from submitted() by less than two
// rings (<= 2 GiB < 2^31), so the signed 32-bit difference recovers the full
// ticket - in either direction, as an engine may finish a submission before
// Queue::submit stores its ticket.
uint64_t SdmaQueue::completed() const {
  const uint32_t done = std::atomic_ref<uint32_t>(*ring_.done).load(std::memory_order_acquire);
  const uint64_t t = submitted();
  return t + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(done - static_cast<uint32_t>(t))));
}

uint64_t SdmaQueue::rptr() const { return load_acquire(ring_.rptr); }
uint64_t SdmaQueue::wptr() const { return load_acquire(ring_.wptr); }

void SdmaQueue::write_nops(uint64_t at, uint64_t bytes) {
  // NOP with count = body dwords (variable length since SDMA 4); the body is
  // ignored, so zero it like ROCr/tinygrad do.
  const uint64_t mask = ring_.ring_bytes - 1;
  uint64_t dwords = bytes / 4;
  uint64_t pos = (at & mask) / 4;
  const uint32_t max_body = sdma::limits(gen()).max_nop_count;
  while (dwords > 0) {
    const uint64_t body = dwords - 1 < max_body ? dwords - 1 : max_body;
    ring_.ring[pos] = static_cast<uint32_t>(body) << 16;  // NOP header, count[29:16]
    std::memset(&ring_.ring[pos + 1], 0, body * 4);
    pos += body + 1;
    dwords -= body + 1;
  }
}

Status SdmaQueue::wait_for_space(uint64_t end, Deadline deadline, uint64_t start) {
  const uint64_t size = ring_.ring_bytes;
  auto fits = [&] { return end - rptr() <= size - 4; };
  if (!fits() && holding()) ring_expose(next_wptr_);  // space comes only from work the engine can see
  while (!fits()) {
    if (engine_halted()) return error(Code::device_fault, "ring full and the engine has halted. " + diagnose(8));
    if (deadline.expired())
      return error(Code::timeout, "ring full: need " + std::to_string(end - start) +
                                      " bytes but the engine has consumed only up to rptr=" + hex(rptr()) +
                                      " (wptr=" + hex(start) + ", ring " + std::to_string(size) +
                                      " bytes); the engine is not draining the ring. " + diagnose(8));
    backend_->wait_progress(rptr(), deadline);
  }
  return Status();
}

void SdmaQueue::publish(uint64_t end) {
  next_wptr_ = end;
  if (hold_) hold(end, end);  // written, not yet the engine's: Queue::release publishes it
  else ring_expose(end);
}

void SdmaQueue::ring_expose(uint64_t end) {
  // Packets before wptr, wptr before the doorbell.
  std::atomic_thread_fence(std::memory_order_release);
  std::atomic_ref<uint64_t>(*ring_.wptr).store(end, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  backend_->ring_doorbell(end);
  forget_held(end);
}

uint32_t* SdmaQueue::ring_reserve(size_t bytes, Deadline deadline, Status* why) {
  const uint64_t size = ring_.ring_bytes;
  const uint64_t framed = bytes + frame_.overhead_bytes();
  if (framed > size - 4) {
    *why = error(Code::invalid_argument, "a " + std::to_string(bytes) + "-byte reservation (" +
                                             std::to_string(framed) + " with the submission frame) cannot fit a " +
                                             std::to_string(size) + "-byte ring; use a larger ring");
    return nullptr;
  }
  uint64_t start = next_wptr_;
  const uint64_t off = start & (size - 1);
  const uint64_t pad = off + framed > size ? size - off : 0;
  *why = wait_for_space(start + pad + framed, deadline, start);
  if (!why->ok()) return nullptr;
  if (pad) write_nops(start, pad);  // published with the commands at commit
  reserved_at_ = start + pad;
  uint8_t* at = reinterpret_cast<uint8_t*>(ring_.ring) + (reserved_at_ & (size - 1));
  for (const std::vector<uint32_t>& p : frame_.prologue) {
    std::memcpy(at, p.data(), p.size() * 4);
    at += p.size() * 4;
  }
  return reinterpret_cast<uint32_t*>(at);
}

// Epilogue, minimum-size pad and sequence FENCE right after `work_bytes` of
// prologue + commands at `at` (inside one reservation: no ring wrap).
void SdmaQueue::write_tail(uint64_t at, uint64_t work_bytes, uint64_t* end) {
  const uint64_t mask = ring_.ring_bytes - 1;
  uint64_t pos = at + work_bytes;
  for (const std::vector<uint32_t>& p : frame_.epilogue) {
    std::memcpy(reinterpret_cast<uint8_t*>(ring_.ring) + (pos & mask), p.data(), p.size() * 4);
    pos += p.size() * 4;
  }
  const uint64_t fence_bytes = frame_.fence.size() * 4;
  const uint64_t so_far = pos - at + fence_bytes;
  if (so_far < frame_.policy.min_submit_bytes) {
    write_nops(pos, frame_.policy.min_submit_bytes - so_far);
    pos += frame_.policy.min_submit_bytes - so_far;
  }
  uint32_t* f = ring_.ring + (pos & mask) / 4;
  std::memcpy(f, frame_.fence.data(), fence_bytes);
  pos += fence_bytes;
  f[SubmitFrame::kFenceValueDword] = static_cast<uint32_t>(pos);
  *end = pos;
}

uint64_t SdmaQueue::ring_commit(size_t bytes) {
  uint64_t end = 0;
  write_tail(reserved_at_, frame_.prologue_bytes() + bytes, &end);
  publish(end);
  return next_wptr_;
}

// A queue whose caps say no 64-bit atomics (KFD: the GPU's link to the CPU
// is marked NO_ATOMICS_64) refuses ATOMIC packets: over PCIe without
// AtomicOps they are not atomic on host memory, and ROCr completes with
// FENCEs there instead (amd_blit_sdma.cpp, platform_atomic_support_).
static Status check_atomics(const Caps& caps, const CommandBuffer& cb, int gpu) {
  if (caps.atomic64) return Status();
  constexpr uint32_t kOpAtomic = 10;
  for (uint32_t start : cb.packet_starts())
    if ((cb.dwords()[start] & 0xFF) == kOpAtomic)
      return error(Code::unavailable,
                   "gpu " + std::to_string(gpu) +
                       " reaches the CPU over a link without 64-bit PCIe AtomicOps (KFD io_link flag NO_ATOMICS_64), "
                       "so an SDMA ATOMIC (signal_add, atomic_add64) on host memory would not be atomic; use "
                       "single-writer signals (Signal::signal_set), one signal per writer, or enable AtomicOps on "
                       "the PCIe path (BIOS, switches)");
  return Status();
}

Result<uint64_t> SdmaQueue::ring_submit(const CommandBuffer& cb, Deadline deadline) {
  CONCCL_RETURN_IF_ERROR(check_atomics(caps(), cb, gpu()));
  const uint64_t size = ring_.ring_bytes;
  // The framed submission as packets: prologue, the buffer's packets,
  // epilogue, a minimum-size NOP, the sequence FENCE (patched below).
  const std::span<const uint32_t> dw = cb.dwords();
  const std::span<const uint32_t> starts = cb.packet_starts();
  std::vector<Piece> pieces;
  pieces.reserve(starts.size() + frame_.prologue.size() + frame_.epilogue.size() + 2);
  uint64_t bytes = 0;
  auto add = [&](const uint32_t* p, uint64_t n) {
    pieces.push_back({p, n});
    bytes += n;
  };
  for (const std::vector<uint32_t>& p : frame_.prologue) add(p.data(), p.size() * 4);
  for (size_t i = 0; i < starts.size(); ++i)
    add(&dw[starts[i]], ((i + 1 < starts.size() ? starts[i + 1] : dw.size()) - starts[i]) * 4ull);
  for (const std::vector<uint32_t>& p : frame_.epilogue) add(p.data(), p.size() * 4);
  std::array<uint32_t, 8> fence{};
  const uint64_t fence_bytes = frame_.fence.size() * 4;
  std::copy(frame_.fence.begin(), frame_.fence.end(), fence.begin());
  if (bytes + fence_bytes < frame_.policy.min_submit_bytes)
    add(nullptr, frame_.policy.min_submit_bytes - bytes - fence_bytes);
  add(fence.data(), fence_bytes);

  // Lay the packets out: a packet that would cross the ring end starts at 0.
  uint64_t pos = next_wptr_;
  for (const Piece& p : pieces) {
    if (p.bytes > size - 4)
      return error(Code::invalid_argument, "a " + std::to_string(p.bytes) + "-byte packet cannot fit a " +
                                               std::to_string(size) + "-byte ring; use a larger ring");
    if ((pos & (size - 1)) + p.bytes > size) pos += size - (pos & (size - 1));
    pos += p.bytes;
  }
  const uint64_t end = pos;
  if (end - next_wptr_ > size - 4)
    return error(Code::invalid_argument,
                 "command buffer of " + std::to_string(cb.size_bytes()) + " bytes (" +
                     std::to_string(end - next_wptr_) + " with the submission frame and ring-end padding) exceeds what a " +
                     std::to_string(size) + "-byte ring holds; submit it in parts or use a larger ring");
  CONCCL_RETURN_IF_ERROR(wait_for_space(end, deadline, next_wptr_));
  fence[SubmitFrame::kFenceValueDword] = static_cast<uint32_t>(end);

  pos = next_wptr_;
  for (const Piece& p : pieces) {
    const uint64_t off = pos & (size - 1);
    if (off + p.bytes > size) {
      write_nops(pos, size - off);
      pos += size - off;
    }
    if (p.dw)
      std::memcpy(reinterpret_cast<uint8_t*>(ring_.ring) + (pos & (size - 1)), p.dw, p.bytes);
    else
      write_nops(pos, p.bytes);
    pos += p.bytes;
  }
  publish(end);
  return end;
}

std::string SdmaQueue::diagnose(size_t max_packets) const {
  const uint64_t r = rptr(), w = wptr();
  const EngineStatus es = engine_status();
  std::string out = "queue " + std::to_string(id()) + " on gpu " + std::to_string(gpu()) + " engine " +
                    std::to_string(engine()) + " (" + isa().name() + "): rptr=" + hex(r) + " wptr=" + hex(w) +
                    " (" + std::to_string(w - r) + " bytes pending) completed=" + hex(completed()) +
                    " (sequence fence at " + hex(ring_.done_va) + "); engine " + es.detail();
  if (const uint64_t h = held(); h) out += "; written but held (submit_held) up to " + hex(h);
  if (w <= r || !ring_.ring) return out;
  out += "; pending packets:";
  const uint64_t size = ring_.ring_bytes;
  uint64_t pos = r;
  size_t shown = 0;
  while (pos < w && shown < max_packets) {
    const uint64_t off = pos & (size - 1);
    const uint64_t avail = std::min<uint64_t>(w - pos, size - off) / 4;
    Result<sdma::Packet> p = sdma::decode(gen(), std::span<const uint32_t>(ring_.ring + off / 4, avail));
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
