// src/commands/sdma_packets.cpp - the SDMA encoder (conccl/sdma_packets.hpp):
// any packet of a generation's table by fields, and the named packets tools
// and the KFD wake-up use, appended through lower::Writer.
#include "conccl/sdma_packets.hpp"

#include <algorithm>
#include <string>

#include "commands/lowering.hpp"

namespace conccl {

using lower::Writer;

Status SdmaPackets::need_sdma(const char* what) const {
  if (cb_.isa().is_sdma()) return Status();
  return error(Code::invalid_argument, std::string(what) + " is an SDMA packet, but this command buffer is for " +
                                           cb_.isa().name() + "; use the vocabulary (copy, fill, signal_add, "
                                           "signal_set, wait_ge, timestamp) that every engine speaks");
}

Status SdmaPackets::packet(sdma::Pkt pkt, std::span<const sdma::FieldValue> fields, std::span<const uint32_t> data) {
  CONCCL_RETURN_IF_ERROR(need_sdma(std::string(sdma::packet_def(pkt).name).c_str()));
  const sdma::Gen gen = cb_.gen();
  // Fast path (copies, fences, atomics): a packet without a payload fits a
  // small stack buffer, so its length need not be computed first.
  if (data.empty() && pkt != sdma::Pkt::nop) {
    uint32_t tmp[32];
    Result<size_t> wrote = sdma::encode(gen, pkt, fields, std::span<uint32_t>(tmp));
    if (wrote.ok()) return lower::append(cb_, tmp, *wrote);
    if (wrote.status().code() != Code::resource_exhausted) return wrote.status();
  }
  const size_t n = std::max<size_t>(sdma::packet_dwords(gen, pkt, fields, data.size()), 1);
  const size_t at = cb_.size_dwords(), packets = cb_.packet_count();
  uint32_t* p = Writer::grow(cb_, n);
  if (!p) return Writer::full(cb_, n);
  Result<size_t> wrote = sdma::encode(gen, pkt, fields, std::span<uint32_t>(p, n), data);
  if (!wrote.ok()) {
    Writer::truncate(cb_, at, packets);
    return wrote.status();
  }
  Writer::truncate(cb_, at + *wrote, packets);  // the encoding may be shorter than the estimate
  Writer::mark(cb_, at);
  return Status();
}

Status SdmaPackets::write(uint64_t dst, std::span<const uint32_t> data) {
  const sdma::FieldValue f[] = {{sdma::Key::dst, dst}};
  return packet(sdma::Pkt::write, f, data);
}

Status SdmaPackets::fence(uint64_t addr, uint32_t value) {
  CONCCL_RETURN_IF_ERROR(need_sdma("fence"));
  // 5.x/6.x: MTYPE=3 (uncached) so the write reaches memory the host polls
  // (Linux sdma_v5_0.c / sdma_v6_0.c, ROCr, Mesa all set it).
  const sdma::FieldValue f[] = {{sdma::Key::addr, addr}, {sdma::Key::value, value}, {sdma::Key::mtype, 3}};
  return packet(sdma::Pkt::fence, std::span(f, sdma::limits(cb_.gen()).fence_mtype_uc ? 3 : 2));
}

Status SdmaPackets::fence64(uint64_t addr, uint64_t value) {
  CONCCL_RETURN_IF_ERROR(need_sdma("fence64"));
  if (addr & 7) return error(Code::invalid_argument, "fence64 address " + hex(addr) + " is not 8-byte aligned");
  return lower::all_or_nothing(cb_, [&] {
    CONCCL_RETURN_IF_ERROR(fence(addr, static_cast<uint32_t>(value)));
    return fence(addr + 4, static_cast<uint32_t>(value >> 32));
  });
}

Status SdmaPackets::atomic_add64(uint64_t addr, int64_t value) {
  const sdma::FieldValue f[] = {{sdma::Key::addr, addr}, {sdma::Key::value, static_cast<uint64_t>(value)}};
  return packet(sdma::Pkt::atomic_add64, f);
}

Status SdmaPackets::poll(uint64_t addr, uint32_t ref, uint32_t mask, PollFunc func, uint16_t interval,
                         uint16_t retry) {
  const sdma::FieldValue f[] = {{sdma::Key::addr, addr},         {sdma::Key::ref, ref},
                                {sdma::Key::mask, mask},         {sdma::Key::func, static_cast<uint64_t>(func)},
                                {sdma::Key::interval, interval}, {sdma::Key::retry, retry}};
  return packet(sdma::Pkt::poll, f);
}

Status SdmaPackets::trap(uint32_t ctx) {
  const sdma::FieldValue f[] = {{sdma::Key::ctx, ctx}};
  return packet(sdma::Pkt::trap, f);
}

Status SdmaPackets::nop(uint32_t body_dwords) {
  const sdma::FieldValue f[] = {{sdma::Key::count, body_dwords}};
  return packet(sdma::Pkt::nop, f);
}

}  // namespace conccl
