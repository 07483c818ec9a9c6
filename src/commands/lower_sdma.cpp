// src/commands/lower_sdma.cpp - the vocabulary as AMD SDMA packets.
//
// Signals (16 bytes): the value at +0 and value + 2^31 at +8 (the "twin"),
// advanced by the same packets, so that a 64-bit ">= v" wait can be made of
// 32-bit POLL_REGMEM packets without ever skipping over a low-dword wrap
// (docs/signals.md). Adds are ATOMIC add64 (twin first, value last: a host
// that sees the value may free the signal, so no packet of the update may
// come after it); stores are FENCEs, low dword first.
//
// Cache maintenance inside a list, in ROCr's order (ROCR-Runtime
// src/core/runtime/amd_blit_sdma.cpp SubmitBlockingCommand / the BlitSdmaV5
// wait and signal commands: dependency polls -> HDP flush -> GCR invalidate ->
// work -> GCR write-back -> signal). The submission frame (sdma_frame.hpp) does
// the same once around a whole submission; a list that waits, copies and
// signals in the middle of one submission (broadcast `chain`, the collectives'
// arrivals) needs it at each step:
//   - after every wait: the firmware HDP flush where the generation has it, so
//     that what the CPU wrote through the BAR before the value the wait saw is
//     out of the HDP write cache; on GCR generations (5.x+, GL2 clients) a GL2
//     invalidate, so that reads after the wait do not hit lines older than it;
//   - before every signal update (add or store): a GL2 write-back on GCR
//     generations, so that a consumer who sees the signal (an ATOMIC or an
//     uncached FENCE, which bypass GL2) also sees the data written before it.
#include <algorithm>
#include <array>

#include "packets/copy_split.hpp"
#include "packets/sdma_asm.hpp"
#include "packets/sdma_codec.hpp"
#include "commands/lowering.hpp"
#include "conccl/sdma_packets.hpp"
#include "queue/sdma_frame.hpp"

namespace conccl::lower {

namespace {

using sdma::FieldValue;
using sdma::Key;
using sdma::Pkt;

constexpr uint64_t kTwin = 1ull << 31;

// The hot packets' encoders, resolved once per generation from the layout
// rows (packets/ PreparedPacket): COPY_LINEAR by (src, dst, bytes) and ATOMIC
// add64 by (addr, value). Where put() refuses a value, the generic encoder
// runs and reports why.
struct Hot {
  sdma::PreparedPacket copy, add64;
};
const Hot& hot(sdma::Gen g) {
  static const std::array<Hot, sdma::kGenCount> table = [] {
    std::array<Hot, sdma::kGenCount> t{};
    const Key ck[] = {Key::src, Key::dst, Key::bytes};
    const Key ak[] = {Key::addr, Key::value};
    for (int i = 0; i < sdma::kGenCount; ++i) {
      if (auto c = sdma::PreparedPacket::make(sdma::kAllGens[i], Pkt::copy, ck); c.ok()) t[i].copy = *c;
      if (auto a = sdma::PreparedPacket::make(sdma::kAllGens[i], Pkt::atomic_add64, ak); a.ok()) t[i].add64 = *a;
    }
    return t;
  }();
  return table[static_cast<size_t>(g)];
}

// One packet by its prepared encoder, or the generic one (for the error).
Status put(CommandBuffer& cb, const sdma::PreparedPacket& pp, Pkt pkt, std::span<const FieldValue> fields,
           std::initializer_list<uint64_t> values) {
  const size_t at = cb.size_dwords();
  if (pp.dwords()) {
    uint32_t* p = Writer::grow(cb, pp.dwords());
    if (!p) return Writer::full(cb, pp.dwords());
    if (pp.put(p, std::span<const uint64_t>(values.begin(), values.size()))) {
      Writer::mark(cb, at);
      return Status();
    }
    Writer::truncate(cb, at, cb.packet_count());
  }
  return SdmaPackets(cb).packet(pkt, fields);
}

// `alongside` changes nothing: an SDMA engine runs its packets in order.
Status copy(CommandBuffer& cb, uint64_t dst, uint64_t src, uint64_t bytes, bool /*alongside*/) {
  Status st;
  const sdma::PreparedPacket& pp = hot(cb.gen()).copy;
  sdma::for_each_copy_chunk(cb.gen(), src, dst, bytes, [&](const sdma::CopyChunk& c) {
    if (!st.ok()) return;
    const FieldValue f[] = {{Key::src, c.src}, {Key::dst, c.dst}, {Key::bytes, c.bytes}};
    st = put(cb, pp, Pkt::copy, f, {c.src, c.dst, c.bytes});
  });
  return st;
}

Status add64(CommandBuffer& cb, uint64_t addr, uint64_t delta) {
  const FieldValue f[] = {{Key::addr, addr}, {Key::value, delta}};
  return put(cb, hot(cb.gen()).add64, Pkt::atomic_add64, f, {addr, delta});
}

Status copy_bcst(CommandBuffer& cb, uint64_t dst0, uint64_t dst1, uint64_t src, uint64_t bytes) {
  return for_each_piece(bytes, sdma::limits(cb.gen()).max_copy_bytes, [&](uint64_t off, uint64_t len) {
    const FieldValue f[] = {{Key::src, src + off}, {Key::dst0, dst0 + off}, {Key::dst1, dst1 + off}, {Key::bytes, len}};
    return SdmaPackets(cb).packet(Pkt::copy_bcst, f);
  });
}

Status swap(CommandBuffer& cb, uint64_t a, uint64_t b, uint64_t bytes) {
  return for_each_piece(bytes, sdma::limits(cb.gen()).max_copy_bytes, [&](uint64_t off, uint64_t len) {
    const FieldValue f[] = {{Key::a, a + off}, {Key::b, b + off}, {Key::bytes, len}};
    return SdmaPackets(cb).packet(Pkt::swap, f);
  });
}

Status fill(CommandBuffer& cb, uint64_t dst, uint32_t value, uint64_t bytes) {
  return for_each_piece(bytes, sdma::limits(cb.gen()).fill_split_bytes, [&](uint64_t off, uint64_t len) {
    const FieldValue f[] = {{Key::dst, dst + off}, {Key::value, value}, {Key::bytes, len}};
    return SdmaPackets(cb).packet(Pkt::fill, f);
  });
}

// See the top of the file for why and whose order.
Status write_back_before_signal(CommandBuffer& cb) {
  if (!sdma::limits(cb.gen()).has_gcr) return Status();
  const FieldValue f[] = {{Key::control, kGcrWriteBack}};
  return SdmaPackets(cb).packet(Pkt::gcr_user, f);
}

Status flush_and_invalidate_after_wait(CommandBuffer& cb) {
  const sdma::Limits& l = sdma::limits(cb.gen());
  if (l.user_hdp_flush) {
    const FieldValue f[] = {{Key::req, kHdpFlushReq}};
    CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).packet(Pkt::poll_reg, f));
  }
  if (!l.has_gcr) return Status();
  const FieldValue f[] = {{Key::control, kGcrInvalidate}};
  return SdmaPackets(cb).packet(Pkt::gcr_user, f);
}

Status signal_add(CommandBuffer& cb, uint64_t va, uint64_t delta) {
  CONCCL_RETURN_IF_ERROR(write_back_before_signal(cb));
  CONCCL_RETURN_IF_ERROR(add64(cb, va + 8, delta));
  return add64(cb, va, delta);
}

Status signal_set(CommandBuffer& cb, uint64_t va, uint64_t v) {
  CONCCL_RETURN_IF_ERROR(write_back_before_signal(cb));
  CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).fence64(va + 8, v + kTwin));  // twin first, value last
  return SdmaPackets(cb).fence64(va, v);
}

// POLL on the high dword, then (only if it equals the target's) COND_EXE +
// POLL on the low dword - on whichever word keeps the low-dword target below
// 2^31, so the low dword would have to cross more than 2^31 values between
// two polls to wrap past the target unseen. Generations with double_poll
// (gfx9.0.x below gfx90a; packets/generation.cpp says whose workaround) emit
// each POLL twice, and the COND_EXE skips both low-dword ones.
Status wait_ge(CommandBuffer& cb, uint64_t va, uint64_t v, bool /*hold: SDMA polls alike*/) {
  uint64_t base = va, t = v;
  if (static_cast<uint32_t>(v) >= kTwin) {
    base = va + 8;
    t = v + kTwin;
  }
  const uint32_t hi = static_cast<uint32_t>(t >> 32), lo = static_cast<uint32_t>(t);
  const int polls = sdma::limits(cb.gen()).double_poll ? 2 : 1;
  for (int i = 0; i < polls; ++i)
    CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).poll(base + 4, hi, 0xFFFFFFFF, PollFunc::ge));
  // If the high dword already passed the target's, the value is above it:
  // skip the low-dword polls.
  constexpr uint64_t kPollDwords = 6;
  const FieldValue f[] = {{Key::addr, base + 4}, {Key::ref, hi}, {Key::count, kPollDwords * polls}};
  CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).packet(Pkt::cond_exe, f));
  for (int i = 0; i < polls; ++i)
    CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).poll(base, lo, 0xFFFFFFFF, PollFunc::ge));
  return flush_and_invalidate_after_wait(cb);
}

Status timestamp(CommandBuffer& cb, uint64_t slot) {
  const FieldValue f[] = {{Key::addr, slot}};
  return SdmaPackets(cb).packet(Pkt::timestamp, f);
}

Status raw(CommandBuffer& cb, std::span<const uint32_t> dw) {
  sdma::StreamDecode d = sdma::decode_stream(cb.gen(), dw);
  if (!d.error.ok())
    return error(Code::invalid_argument,
                 "raw packets: at dword " + std::to_string(d.error_offset) + ": " + d.error.message());
  for (size_t i = 0; i < d.offsets.size(); ++i) {
    const size_t end = i + 1 < d.offsets.size() ? d.offsets[i + 1] : dw.size();
    CONCCL_RETURN_IF_ERROR(append(cb, dw.data() + d.offsets[i], end - d.offsets[i]));
  }
  return Status();
}

std::string disassemble(const CommandBuffer& cb) {
  sdma::StreamDecode d = sdma::decode_stream(cb.gen(), cb.dwords());
  std::string out;
  for (const sdma::Packet& p : d.packets) out += sdma::format_packet(p) + "\n";
  if (!d.error.ok()) out += "<" + d.error.message() + ">\n";
  return out;
}

Caps make_caps(sdma::Gen g) {
  const sdma::Limits& l = sdma::limits(g);
  Caps c;
  c.max_copy_bytes = l.max_copy_bytes;
  c.max_fill_bytes = l.fill_split_bytes;  // what fill() emits per packet
  c.broadcast_copy = true;      // COPY_LINEAR broadcast exists on every generation we encode
  c.swap = l.has_swap_linear;   // SWAP_LINEAR: 4.4.2 only
  c.atomic64 = true;            // ATOMIC add64 (a queue over a link without 64-bit atomics clears it)
  c.interrupt_wakeup = true;    // TRAP
  c.signal_twin = true;
  c.timestamp_offset = 0;
  c.signal_align = 8;
  c.timestamp_align = l.timestamp_align;
  return c;
}

}  // namespace

const Ops& sdma_ops() {
  static const Ops ops{copy, copy_bcst, swap, fill, signal_add, nullptr, signal_set, wait_ge, timestamp, raw, disassemble};
  return ops;
}

const Caps& sdma_caps(sdma::Gen g) {
  static const std::array<Caps, sdma::kGenCount> table = [] {
    std::array<Caps, sdma::kGenCount> t{};
    for (int i = 0; i < sdma::kGenCount; ++i) t[static_cast<size_t>(i)] = make_caps(sdma::kAllGens[i]);
    return t;
  }();
  return table[static_cast<size_t>(g)];
}

}  // namespace conccl::lower
