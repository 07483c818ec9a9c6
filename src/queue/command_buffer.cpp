// src/queue/command_buffer.cpp - recording the vocabulary for one instruction set.
//
// What every instruction set shares is checked here (zero sizes, overlapping
// copies, capabilities, all-or-nothing appends); the encoding is the lowering's
// (src/queue/lower_sdma.cpp, lower_hopper.cpp).
#include <cstdlib>
#include <cstring>
#include <new>

#include "conccl/commands.hpp"
#include "packets/hopper_ce.hpp"
#include "packets/sdma_codec.hpp"
#include "queue/lowering.hpp"

namespace conccl {

namespace {

const lower::Ops& ops_for(const Isa& isa) {
  return isa.kind == IsaKind::hopper_ce ? lower::hopper_ops() : lower::sdma_ops();
}

// Runs one command; on error drops whatever it appended.
template <typename Fn>
Status all_or_nothing(CommandBuffer& cb, Fn&& fn) {
  const size_t dw = cb.size_dwords(), n = cb.packet_count();
  Status st = fn();
  if (!st.ok()) cb.truncate(dw, n);
  return st;
}

}  // namespace

std::string Isa::name() const {
  if (kind == IsaKind::hopper_ce) return "Hopper CE";
  return "SDMA " + std::string(sdma::gen_name(gen));
}

Result<Isa> parse_isa(const std::string& name) {
  if (name == "hopper-ce" || name == "hopper" || name == "Hopper CE") return Isa::hopper();
  std::string g = name.rfind("sdma ", 0) == 0 || name.rfind("SDMA ", 0) == 0 ? name.substr(5) : name;
  if (std::optional<sdma::Gen> gen = sdma::parse_gen(g)) return Isa::sdma_gen(*gen);
  return error(Code::invalid_argument, "unknown instruction set '" + name + "' (hopper-ce, or an SDMA generation: " +
                                           sdma::gen_list() + ")");
}

const Caps& caps(const Isa& isa) {
  return isa.kind == IsaKind::hopper_ce ? lower::hopper_caps() : lower::sdma_caps(isa.gen);
}

CommandBuffer::CommandBuffer(Isa isa) : isa_(isa), caps_(&conccl::caps(isa)) {}

CommandBuffer::CommandBuffer(Isa isa, std::span<uint32_t> storage)
    : isa_(isa), caps_(&conccl::caps(isa)), data_(storage.data()), cap_(storage.size()), owned_(false) {}

CommandBuffer::~CommandBuffer() {
  if (owned_) std::free(data_);
}

CommandBuffer::CommandBuffer(const CommandBuffer& o) : isa_(o.isa_), caps_(o.caps_), starts_(o.starts_) {
  if (o.size_) {
    data_ = static_cast<uint32_t*>(std::malloc(o.size_ * 4));
    if (!data_) throw std::bad_alloc();
    std::memcpy(data_, o.data_, o.size_ * 4);
  }
  size_ = cap_ = o.size_;
}

CommandBuffer& CommandBuffer::operator=(const CommandBuffer& o) {
  if (this != &o) {
    CommandBuffer tmp(o);
    *this = std::move(tmp);
  }
  return *this;
}

CommandBuffer::CommandBuffer(CommandBuffer&& o) noexcept
    : isa_(o.isa_), caps_(o.caps_), data_(o.data_), size_(o.size_), cap_(o.cap_), owned_(o.owned_),
      starts_(std::move(o.starts_)) {
  o.data_ = nullptr;
  o.size_ = o.cap_ = 0;
  o.owned_ = true;
}

CommandBuffer& CommandBuffer::operator=(CommandBuffer&& o) noexcept {
  if (this != &o) {
    if (owned_) std::free(data_);
    isa_ = o.isa_;
    caps_ = o.caps_;
    data_ = o.data_;
    size_ = o.size_;
    cap_ = o.cap_;
    owned_ = o.owned_;
    starts_ = std::move(o.starts_);
    o.data_ = nullptr;
    o.size_ = o.cap_ = 0;
    o.owned_ = true;
  }
  return *this;
}

uint32_t* CommandBuffer::grow(size_t n) {
  if (size_ + n > cap_) {
    if (!owned_) return nullptr;
    size_t cap = cap_ ? cap_ * 2 : 64;
    while (cap < size_ + n) cap *= 2;
    auto* p = static_cast<uint32_t*>(std::realloc(data_, cap * 4));
    if (!p) return nullptr;
    data_ = p;
    cap_ = cap;
  }
  uint32_t* at = data_ + size_;
  size_ += n;
  return at;
}

Status CommandBuffer::need_sdma(const char* what) const {
  if (isa_.is_sdma()) return Status();
  return error(Code::invalid_argument, std::string(what) + " is an SDMA packet, but this command buffer is for " +
                                           isa_.name() + "; use the vocabulary (copy, fill, signal_add, signal_set, "
                                           "wait_ge, timestamp) that every engine speaks");
}

Status CommandBuffer::need_cap(bool have, const char* what) const {
  if (have) return Status();
  return error(Code::invalid_argument, std::string(what) + " is not available on " + isa_.name() +
                                           " engines (Caps says so); use copy() per destination instead");
}

// ---- the vocabulary -------------------------------------------------------

Status CommandBuffer::copy(uint64_t dst, uint64_t src, uint64_t bytes) {
  if (bytes == 0) return error(Code::invalid_argument, "copy of 0 bytes: give a size of at least 1");
  if (src < dst + bytes && dst < src + bytes)
    return error(Code::invalid_argument, "copy source [" + hex(src) + ", +" + std::to_string(bytes) +
                                             ") overlaps its destination " + hex(dst) +
                                             "; DMA copies are not memmove: use disjoint buffers");
  return all_or_nothing(*this, [&] { return ops_for(isa_).copy(*this, dst, src, bytes); });
}

Status CommandBuffer::copy_bcst(uint64_t dst0, uint64_t dst1, uint64_t src, uint64_t bytes) {
  CONCCL_RETURN_IF_ERROR(need_cap(caps_->broadcast_copy, "a broadcast copy (copy_bcst)"));
  if (bytes == 0) return error(Code::invalid_argument, "broadcast copy of 0 bytes");
  return all_or_nothing(*this, [&] { return ops_for(isa_).copy_bcst(*this, dst0, dst1, src, bytes); });
}

Status CommandBuffer::swap(uint64_t a, uint64_t b, uint64_t bytes) {
  CONCCL_RETURN_IF_ERROR(need_cap(caps_->swap, "an in-place swap (swap)"));
  if (bytes == 0) return error(Code::invalid_argument, "swap of 0 bytes");
  if (a < b + bytes && b < a + bytes)
    return error(Code::invalid_argument, "swap ranges [" + hex(a) + ", +" + std::to_string(bytes) + ") and " +
                                             hex(b) + " overlap");
  return all_or_nothing(*this, [&] { return ops_for(isa_).swap(*this, a, b, bytes); });
}

Status CommandBuffer::fill(uint64_t dst, uint32_t value, uint64_t bytes) {
  if (bytes == 0) return error(Code::invalid_argument, "fill of 0 bytes");
  if ((dst | bytes) & 3)
    return error(Code::invalid_argument, "fill of " + std::to_string(bytes) + " bytes at " + hex(dst) +
                                             ": a 32-bit fill needs a 4-byte aligned address and size");
  return all_or_nothing(*this, [&] { return ops_for(isa_).fill(*this, dst, value, bytes); });
}

Status CommandBuffer::signal_add(uint64_t va, uint64_t delta) {
  if (va & (caps_->signal_align - 1))
    return error(Code::invalid_argument, "signal at " + hex(va) + " is not " + std::to_string(caps_->signal_align) +
                                             "-byte aligned");
  return all_or_nothing(*this, [&] { return ops_for(isa_).signal_add(*this, va, delta); });
}

Status CommandBuffer::signal_set(uint64_t va, uint64_t value) {
  if (va & (caps_->signal_align - 1))
    return error(Code::invalid_argument, "signal at " + hex(va) + " is not " + std::to_string(caps_->signal_align) +
                                             "-byte aligned");
  return all_or_nothing(*this, [&] { return ops_for(isa_).signal_set(*this, va, value); });
}

Status CommandBuffer::wait_ge(uint64_t va, uint64_t value) {
  if (va & (caps_->signal_align - 1))
    return error(Code::invalid_argument, "signal at " + hex(va) + " is not " + std::to_string(caps_->signal_align) +
                                             "-byte aligned");
  return all_or_nothing(*this, [&] { return ops_for(isa_).wait_ge(*this, va, value); });
}

Status CommandBuffer::timestamp(uint64_t slot) {
  if (slot & (caps_->timestamp_align - 1))
    return error(Code::invalid_argument, "timestamp slot " + hex(slot) + " is not " +
                                             std::to_string(caps_->timestamp_align) + "-byte aligned");
  return all_or_nothing(*this, [&] { return ops_for(isa_).timestamp(*this, slot); });
}

Status CommandBuffer::raw(std::span<const uint32_t> dwords) {
  return all_or_nothing(*this, [&] { return ops_for(isa_).raw(*this, dwords); });
}

std::string CommandBuffer::disassemble() const { return ops_for(isa_).disassemble(*this); }

// ---- SDMA packets ------------------------------------------------------------

Status CommandBuffer::packet(sdma::Pkt pkt, std::span<const sdma::FieldValue> fields,
                             std::span<const uint32_t> data) {
  CONCCL_RETURN_IF_ERROR(need_sdma(std::string(sdma::packet_def(pkt).name).c_str()));
  // Fast path (copies, fences, atomics): a packet without a payload fits a
  // small stack buffer, so its length need not be computed first.
  if (data.empty() && pkt != sdma::Pkt::nop) {
    uint32_t tmp[32];
    Result<size_t> wrote = sdma::encode(isa_.gen, pkt, fields, std::span<uint32_t>(tmp));
    if (wrote.ok()) return lower::append(*this, tmp, *wrote);
    if (wrote.status().code() != Code::resource_exhausted) return wrote.status();
  }
  const size_t n = sdma::packet_dwords(isa_.gen, pkt, fields, data.size());
  const size_t at = size_, packets = starts_.size();
  uint32_t* p = grow(n ? n : 1);
  if (!p) return error(Code::resource_exhausted, "the reserved ring space is full");
  Result<size_t> wrote = sdma::encode(isa_.gen, pkt, fields, std::span<uint32_t>(p, n ? n : 1), data);
  if (!wrote.ok()) {
    truncate(at, packets);
    return wrote.status();
  }
  size_ = at + *wrote;
  mark(at);
  return Status();
}

Status CommandBuffer::write(uint64_t dst, std::span<const uint32_t> data) {
  const sdma::FieldValue f[] = {{sdma::Key::dst, dst}};
  return packet(sdma::Pkt::write, f, data);
}

Status CommandBuffer::fence(uint64_t addr, uint32_t value) {
  CONCCL_RETURN_IF_ERROR(need_sdma("fence"));
  // 5.x/6.x: MTYPE=3 (uncached) so the write reaches memory the host polls
  // (Linux sdma_v5_0.c / sdma_v6_0.c, ROCr, Mesa all set it).
  const sdma::FieldValue f[] = {{sdma::Key::addr, addr}, {sdma::Key::value, value}, {sdma::Key::mtype, 3}};
  return packet(sdma::Pkt::fence, std::span(f, sdma::limits(isa_.gen).fence_mtype_uc ? 3 : 2));
}

Status CommandBuffer::fence64(uint64_t addr, uint64_t value) {
  CONCCL_RETURN_IF_ERROR(need_sdma("fence64"));
  if (addr & 7) return error(Code::invalid_argument, "fence64 address " + hex(addr) + " is not 8-byte aligned");
  // Low dword first: a reader of a counter that only grows never sees a value
  // above the new one mid-update (old_hi:new_lo <= new).
  return all_or_nothing(*this, [&] {
    CONCCL_RETURN_IF_ERROR(fence(addr, static_cast<uint32_t>(value)));
    return fence(addr + 4, static_cast<uint32_t>(value >> 32));
  });
}

Status CommandBuffer::atomic_add64(uint64_t addr, int64_t value) {
  const sdma::FieldValue f[] = {{sdma::Key::addr, addr}, {sdma::Key::value, static_cast<uint64_t>(value)}};
  return packet(sdma::Pkt::atomic_add64, f);
}

Status CommandBuffer::poll(uint64_t addr, uint32_t ref, uint32_t mask, PollFunc func, uint16_t interval,
                           uint16_t retry) {
  const sdma::FieldValue f[] = {{sdma::Key::addr, addr},   {sdma::Key::ref, ref},
                                {sdma::Key::mask, mask},   {sdma::Key::func, static_cast<uint64_t>(func)},
                                {sdma::Key::interval, interval}, {sdma::Key::retry, retry}};
  return packet(sdma::Pkt::poll, f);
}

Status CommandBuffer::trap(uint32_t ctx) {
  const sdma::FieldValue f[] = {{sdma::Key::ctx, ctx}};
  return packet(sdma::Pkt::trap, f);
}

Status CommandBuffer::nop(uint32_t body_dwords) {
  const sdma::FieldValue f[] = {{sdma::Key::count, body_dwords}};
  return packet(sdma::Pkt::nop, f);
}

// ---- Hopper methods ------------------------------------------------------------

Status CommandBuffer::nonstall_interrupt() {
  if (isa_.kind != IsaKind::hopper_ce)
    return error(Code::invalid_argument, "nonstall_interrupt is a Hopper host method, but this command buffer is for " +
                                             isa_.name() + " (SDMA wakes the host with trap())");
  uint32_t tmp[hopper::kInterruptDwords];
  hopper::put_interrupt(tmp);
  return lower::append(*this, tmp, hopper::kInterruptDwords);
}

}  // namespace conccl
