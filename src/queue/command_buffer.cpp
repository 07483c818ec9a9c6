// src/queue/command_buffer.cpp - recording packets for one generation.
#include <string>

#include "conccl/queue.hpp"
#include "packets/copy_split.hpp"

namespace conccl {

using sdma::FieldValue;
using sdma::Key;
using sdma::Pkt;

namespace {

}  // namespace

Status CommandBuffer::append(Pkt pkt, std::initializer_list<FieldValue> fields,
                             std::span<const uint32_t> data) {
  return packet(pkt, std::span<const FieldValue>(fields.begin(), fields.size()), data);
}

Status CommandBuffer::packet(Pkt pkt, std::span<const FieldValue> fields,
                             std::span<const uint32_t> data) {
  // Fast path (the hot one: copies, fences, atomics): a packet without a
  // payload fits a small stack buffer, so its length need not be computed
  // first and the vector is not zero-filled and shrunk again.
  if (data.empty() && pkt != Pkt::nop) {
    uint32_t tmp[32];
    Result<size_t> wrote = sdma::encode(gen_, pkt, fields, std::span<uint32_t>(tmp));
    if (wrote.ok()) {
      starts_.push_back(static_cast<uint32_t>(dw_.size()));
      dw_.insert(dw_.end(), tmp, tmp + *wrote);
      return Status();
    }
    if (wrote.status().code() != Code::resource_exhausted) return wrote.status();
    // Longer than the stack buffer: take the general path.
  }
  const size_t n = sdma::packet_dwords(gen_, pkt, fields, data.size());
  const size_t old = dw_.size();
  dw_.resize(old + (n ? n : 1));
  Result<size_t> wrote = sdma::encode(gen_, pkt, fields, std::span<uint32_t>(dw_).subspan(old), data);
  if (!wrote.ok()) {
    dw_.resize(old);
    return wrote.status();
  }
  dw_.resize(old + *wrote);
  starts_.push_back(static_cast<uint32_t>(old));
  return Status();
}

Status CommandBuffer::copy(uint64_t dst, uint64_t src, uint64_t bytes) {
  if (bytes == 0) return error(Code::invalid_argument, "copy of 0 bytes: give a size of at least 1");
  if (src < dst + bytes && dst < src + bytes)
    return error(Code::invalid_argument, "copy source [" + hex(src) + ", +" + std::to_string(bytes) +
                                             ") overlaps its destination " + hex(dst) +
                                             "; SDMA copies are not memmove: use disjoint buffers");
  const size_t dw0 = dw_.size(), p0 = starts_.size();
  Status st;
  sdma::for_each_copy_chunk(gen_, src, dst, bytes, [&](const sdma::CopyChunk& c) {
    if (st.ok()) st = append(Pkt::copy, {{Key::src, c.src}, {Key::dst, c.dst}, {Key::bytes, c.bytes}});
  });
  if (!st.ok()) {  // all or nothing
    dw_.resize(dw0);
    starts_.resize(p0);
  }
  return st;
}

Status CommandBuffer::copy_bcst(uint64_t dst0, uint64_t dst1, uint64_t src, uint64_t bytes) {
  if (bytes == 0) return error(Code::invalid_argument, "broadcast copy of 0 bytes");
  const size_t dw0 = dw_.size(), p0 = starts_.size();
  const uint64_t max = sdma::limits(gen_).max_copy_bytes;
  Status st;
  for (uint64_t off = 0; off < bytes && st.ok(); off += max) {
    const uint64_t len = bytes - off < max ? bytes - off : max;
    st = append(Pkt::copy_bcst, {{Key::src, src + off},
                                 {Key::dst0, dst0 + off},
                                 {Key::dst1, dst1 + off},
                                 {Key::bytes, len}});
  }
  if (!st.ok()) {
    dw_.resize(dw0);
    starts_.resize(p0);
  }
  return st;
}

Status CommandBuffer::fill(uint64_t dst, uint32_t value, uint64_t bytes) {
  if (bytes == 0) return error(Code::invalid_argument, "fill of 0 bytes");
  if ((dst | bytes) & 3)
    return error(Code::invalid_argument, "fill of " + std::to_string(bytes) + " bytes at " + hex(dst) +
                                             ": a 32-bit fill needs a 4-byte aligned address and size");
  const size_t dw0 = dw_.size(), p0 = starts_.size();
  const uint64_t max = sdma::limits(gen_).max_fill_bytes;
  Status st;
  for (uint64_t off = 0; off < bytes && st.ok(); off += max) {
    const uint64_t len = bytes - off < max ? bytes - off : max;
    st = append(Pkt::fill, {{Key::dst, dst + off}, {Key::value, value}, {Key::bytes, len}});
  }
  if (!st.ok()) {
    dw_.resize(dw0);
    starts_.resize(p0);
  }
  return st;
}

Status CommandBuffer::write(uint64_t dst, std::span<const uint32_t> data) {
  return append(Pkt::write, {{Key::dst, dst}}, data);
}

Status CommandBuffer::fence(uint64_t addr, uint32_t value) {
  // 5.x/6.x: MTYPE=3 (uncached) so the write reaches memory the host polls
  // (Linux sdma_v5_0.c / sdma_v6_0.c, ROCr, Mesa all set it).
  if (sdma::limits(gen_).fence_mtype_uc)
    return append(Pkt::fence, {{Key::addr, addr}, {Key::value, value}, {Key::mtype, 3}});
  return append(Pkt::fence, {{Key::addr, addr}, {Key::value, value}});
}

Status CommandBuffer::fence64(uint64_t addr, uint64_t value) {
  if (addr & 7) return error(Code::invalid_argument, "fence64 address " + hex(addr) + " is not 8-byte aligned");
  // Low dword first: a reader of a counter that only grows never sees a value
  // above the new one mid-update (old_hi:new_lo <= new).
  const size_t dw0 = dw_.size(), p0 = starts_.size();
  Status st = fence(addr, static_cast<uint32_t>(value));
  if (st.ok()) st = fence(addr + 4, static_cast<uint32_t>(value >> 32));
  if (!st.ok()) {
    dw_.resize(dw0);
    starts_.resize(p0);
  }
  return st;
}

Status CommandBuffer::atomic_add64(uint64_t addr, int64_t value) {
  return append(Pkt::atomic_add64, {{Key::addr, addr}, {Key::value, static_cast<uint64_t>(value)}});
}

Status CommandBuffer::poll(uint64_t addr, uint32_t ref, uint32_t mask, PollFunc func,
                           uint16_t interval, uint16_t retry) {
  return append(Pkt::poll, {{Key::addr, addr},
                            {Key::ref, ref},
                            {Key::mask, mask},
                            {Key::func, static_cast<uint64_t>(func)},
                            {Key::interval, interval},
                            {Key::retry, retry}});
}

Status CommandBuffer::timestamp(uint64_t addr) { return append(Pkt::timestamp, {{Key::addr, addr}}); }

Status CommandBuffer::trap(uint32_t ctx) { return append(Pkt::trap, {{Key::ctx, ctx}}); }

Status CommandBuffer::nop(uint32_t body_dwords) {
  return append(Pkt::nop, {{Key::count, body_dwords}});
}

Status CommandBuffer::raw(std::span<const uint32_t> dwords) {
  sdma::StreamDecode d = sdma::decode_stream(gen_, dwords);
  if (!d.error.ok())
    return error(Code::invalid_argument, "raw packets: at dword " + std::to_string(d.error_offset) +
                                             ": " + d.error.message());
  const size_t base = dw_.size();
  for (size_t off : d.offsets) starts_.push_back(static_cast<uint32_t>(base + off));
  dw_.insert(dw_.end(), dwords.begin(), dwords.end());
  return Status();
}

}  // namespace conccl
