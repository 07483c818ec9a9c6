// conccl/sdma_packets.hpp - the SDMA encoder: packets that only SDMA engines
// have, appended into a CommandBuffer of an SDMA Isa.
//
// The vocabulary (conccl/commands.hpp) is what every engine speaks; this is
// the door for the rest of an SDMA generation's packets, for tools and tests
// that need them (sdma-probe's packet tests, the emulator's semantics tests,
// the KFD backend's wake-up). Like the vocabulary, each call appends whole
// packets or nothing, and a buffer of another Isa refuses every call with
// Code::invalid_argument. Layouts: conccl/packets/sdma_layout.hpp, from the
// Linux headers drivers/gpu/drm/amd/amdgpu/sdma_v*_pkt_open.h and
// vega10_sdma_pkt_open.h.
//
//   conccl::SdmaPackets pk(cb);
//   pk.poll(flag_va, 1, 0xFFFFFFFF, conccl::PollFunc::eq);
//   pk.fence(done_va, 7);
#pragma once

#include <cstdint>
#include <span>

#include "conccl/commands.hpp"
#include "conccl/packets/generation.hpp"
#include "conccl/packets/sdma_codec.hpp"

namespace conccl {

// POLL_REGMEM compare functions: (value & mask) FUNC ref.
enum class PollFunc : uint8_t { always = 0, lt = 1, le = 2, eq = 3, ne = 4, ge = 5, gt = 6 };

class SdmaPackets {
 public:
  explicit SdmaPackets(CommandBuffer& cb) : cb_(cb) {}

  // WRITE_UNTILED: `data` stored at dst.
  Status write(uint64_t dst, std::span<const uint32_t> data);
  // FENCE: a 32-bit store after all earlier work (uncached where the
  // generation has MTYPE, so the host sees it).
  Status fence(uint64_t addr, uint32_t value);
  // Two FENCEs, low dword first: a reader of a counter that only grows never
  // sees a value above the new one mid-update.
  Status fence64(uint64_t addr, uint64_t value);
  // ATOMIC ADD64 in the memory system.
  Status atomic_add64(uint64_t addr, int64_t value);
  // POLL_REGMEM on memory: waits until (value & mask) FUNC ref, checking every
  // `interval` clocks, `retry` times (0xFFF = forever).
  Status poll(uint64_t addr, uint32_t ref, uint32_t mask, PollFunc func, uint16_t interval = 4,
              uint16_t retry = 0xFFF);
  // TRAP: an interrupt with this context id (KFD turns it into an event).
  Status trap(uint32_t ctx);
  // NOP with `body_dwords` dwords of padding.
  Status nop(uint32_t body_dwords = 0);
  // Any packet of the generation's table, by fields.
  Status packet(sdma::Pkt pkt, std::span<const sdma::FieldValue> fields, std::span<const uint32_t> data = {});

 private:
  Status need_sdma(const char* what) const;
  CommandBuffer& cb_;
};

}  // namespace conccl
