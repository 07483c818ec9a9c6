// src/commands/command_buffer.cpp - recording the vocabulary for one instruction set.
//
// What every instruction set shares is checked here (zero sizes, overlapping
// copies, capabilities, all-or-nothing appends); the encoding is the lowering's
// (src/commands/lower_sdma.cpp, lower_hopper.cpp).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "conccl/commands.hpp"
#include "packets/hopper_ce.hpp"
#include "packets/sdma_codec.hpp"
#include "commands/lowering.hpp"
#include "queue/sdma_queue.hpp"

namespace conccl {

namespace {

using lower::all_or_nothing;

const lower::Ops& ops_for(const Isa& isa) {
  return isa.kind() == IsaKind::hopper_ce ? lower::hopper_ops() : lower::sdma_ops();
}

// The default limit of a buffer not bound to storage is the largest ring a
// queue can have: nothing bigger can ever be submitted.
static_assert(CommandBuffer::kMaxBytes == SdmaQueue::kMaxRingBytes);

// ---- encoded sizes, computed without encoding ------------------------------
// What the lowerings (lower_sdma.cpp, lower_hopper.cpp) append, by arithmetic:
// a copy or fill is cut into pieces of at most the instruction set's largest
// command, and every piece is one packet (SDMA) or one fixed-length method
// group (Hopper) of a known size. Sizes saturate at UINT64_MAX: far past any
// limit, so they are refused.

constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

uint64_t pieces(uint64_t bytes, uint64_t max) { return bytes / max + (bytes % max != 0); }

uint64_t mul_sat(uint64_t a, uint64_t b) { return b != 0 && a > kSaturated / b ? kSaturated : a * b; }

uint64_t add_sat(uint64_t a, uint64_t b) { return a > kSaturated - b ? kSaturated : a + b; }

uint64_t sdma_packet_bytes(sdma::Gen g, sdma::Pkt p) { return uint64_t(sdma::packet_dwords(g, p, {})) * 4; }

// Pieces of an SDMA copy, as packets/copy_split.hpp cuts it (for_each_copy_chunk):
// aligned copies with a 1-3 byte tail put the tail in a packet of its own.
uint64_t sdma_copy_pieces(sdma::Gen g, uint64_t dst, uint64_t src, uint64_t bytes) {
  uint64_t body = bytes;
  if (((src | dst) & 3) == 0 && bytes > 4 && (bytes & 3)) body = bytes & ~uint64_t(3);
  return pieces(body, sdma::limits(g).max_copy_bytes) + (body != bytes);
}

}  // namespace

static_assert(Isa().gen() == sdma::Gen::v4_4_2, "the default Isa is SDMA 4.4.2 (conccl/commands.hpp)");

std::string Isa::name() const {
  if (kind_ == IsaKind::hopper_ce) return "Hopper CE";
  return "SDMA " + std::string(sdma::gen_name(gen_));
}

Result<Isa> parse_isa(const std::string& name) {
  if (name == "hopper-ce" || name == "hopper" || name == "Hopper CE") return Isa::hopper();
  std::string g = name.rfind("sdma ", 0) == 0 || name.rfind("SDMA ", 0) == 0 ? name.substr(5) : name;
  if (std::optional<sdma::Gen> gen = sdma::parse_gen(g)) return Isa::sdma_gen(*gen);
  return error(Code::invalid_argument, "unknown instruction set '" + name + "' (hopper-ce, or an SDMA generation: " +
                                           sdma::gen_list() + ")");
}

const Caps& caps(const Isa& isa) {
  return isa.kind() == IsaKind::hopper_ce ? lower::hopper_caps() : lower::sdma_caps(isa.gen());
}

CommandBuffer::CommandBuffer(Isa isa) : isa_(isa), caps_(&conccl::caps(isa)) {}

CommandBuffer::CommandBuffer(Isa isa, std::span<uint32_t> storage)
    : isa_(isa), caps_(&conccl::caps(isa)), data_(storage.data()), cap_(storage.size()),
      max_bytes_(storage.size() * 4), limit_(Limit::storage), owned_(false) {}

CommandBuffer::~CommandBuffer() {
  if (owned_) std::free(data_);
}

// A copy owns its dwords: the copy of a buffer over caller storage is not
// bound to that storage's size, but to the default limit.
CommandBuffer::CommandBuffer(const CommandBuffer& o)
    : isa_(o.isa_), caps_(o.caps_), max_bytes_(o.owned_ ? o.max_bytes_ : std::max(kMaxBytes, o.size_ * 4)),
      limit_(o.owned_ ? o.limit_ : Limit::largest_ring), starts_(o.starts_) {
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
    : isa_(o.isa_), caps_(o.caps_), data_(o.data_), size_(o.size_), cap_(o.cap_), max_bytes_(o.max_bytes_),
      limit_(o.limit_), owned_(o.owned_), starts_(std::move(o.starts_)) {
  o.data_ = nullptr;
  o.size_ = o.cap_ = 0;
  o.max_bytes_ = kMaxBytes;
  o.limit_ = Limit::largest_ring;
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
    max_bytes_ = o.max_bytes_;
    limit_ = o.limit_;
    owned_ = o.owned_;
    starts_ = std::move(o.starts_);
    o.data_ = nullptr;
    o.size_ = o.cap_ = 0;
    o.max_bytes_ = kMaxBytes;
    o.limit_ = Limit::largest_ring;
    o.owned_ = true;
  }
  return *this;
}

uint32_t* CommandBuffer::grow(size_t n) {
  if (n > max_bytes_ / 4 - size_) return nullptr;  // past max_bytes() (size_ * 4 <= max_bytes_ always)
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

Status CommandBuffer::need_cap(bool have, const char* what) const {
  if (have) return Status();
  return error(Code::invalid_argument, std::string(what) + " is not available on " + isa_.name() +
                                           " engines (Caps says so); use copy() per destination instead");
}

// ---- size limit --------------------------------------------------------------

Status CommandBuffer::set_max_bytes(size_t bytes) {
  if (bytes < size_bytes())
    return error(Code::invalid_argument, "set_max_bytes(" + std::to_string(bytes) + "): the buffer already holds " +
                                             std::to_string(size_bytes()) +
                                             " bytes of commands; clear() it or give a limit of at least that");
  if (!owned_ && bytes > cap_ * 4)
    return error(Code::invalid_argument, "set_max_bytes(" + std::to_string(bytes) + "): this buffer records into " +
                                             std::to_string(cap_ * 4) +
                                             " bytes of caller storage (reserved ring space) and cannot hold more; "
                                             "reserve more space instead");
  max_bytes_ = bytes;
  limit_ = owned_ ? Limit::set : Limit::storage;
  return Status();
}

uint64_t CommandBuffer::copy_encoded_bytes(uint64_t dst, uint64_t src, uint64_t bytes) const {
  if (bytes == 0) return 0;
  if (isa_.kind() == IsaKind::hopper_ce) return mul_sat(pieces(bytes, hopper::kMaxCopyBytes), hopper::kCopyPieceDwords * 4);
  return mul_sat(sdma_copy_pieces(isa_.gen(), dst, src, bytes), sdma_packet_bytes(isa_.gen(), sdma::Pkt::copy));
}

uint64_t CommandBuffer::fill_encoded_bytes(uint64_t bytes) const {
  if (bytes == 0 || (bytes & 3)) return 0;
  if (isa_.kind() == IsaKind::hopper_ce)
    return add_sat(hopper::kFillSetupDwords * 4, mul_sat(pieces(bytes, hopper::kMaxFillBytes), hopper::kFillPieceDwords * 4));
  return mul_sat(pieces(bytes, sdma::limits(isa_.gen()).fill_split_bytes), sdma_packet_bytes(isa_.gen(), sdma::Pkt::fill));
}

Status CommandBuffer::check_room(const char* what, uint64_t bytes, uint64_t encoded, uint64_t fixed, uint64_t piece,
                                 uint64_t piece_encoded) const {
  const uint64_t room = max_bytes_ - size_bytes();
  if (encoded <= room) return Status();
  // The largest command of this kind that would fit now: whole pieces after
  // the fixed part (a multiple of the piece size, so aligned and without a
  // separate tail packet).
  const uint64_t fit = room >= fixed + piece_encoded ? (room - fixed) / piece_encoded * piece : 0;
  std::string limit;
  switch (limit_) {
    case Limit::storage:
      limit = "this command buffer records into " + std::to_string(max_bytes_) + " bytes of reserved ring space";
      break;
    case Limit::set:
      limit = "this command buffer holds at most " + std::to_string(max_bytes_) +
              " bytes of commands (its set_max_bytes(); for a queue, what one submission takes: "
              "Queue::max_submit_bytes())";
      break;
    case Limit::largest_ring:
      limit = "a command buffer holds at most " + std::to_string(max_bytes_) +
              " bytes of commands (CommandBuffer::kMaxBytes, the largest ring a queue can have; one submission "
              "takes at most the queue's Queue::max_submit_bytes())";
      break;
  }
  std::string fix = fit ? "split it into parts of at most " + std::to_string(fit) + " bytes"
                        : "submit what is recorded first, then record it in parts";
  fix += limit_ == Limit::storage ? ", or reserve more ring space (Queue::reserve)"
                                  : " and submit them separately, or use a larger ring (QueueOptions::ring_bytes)";
  return error(Code::resource_exhausted,
               std::string(what) + " of " + std::to_string(bytes) + " bytes needs " +
                   (encoded == kSaturated ? std::string("more than 2^64") : std::to_string(encoded)) +
                   " bytes of commands (one " + isa_.name() + " command takes at most " + std::to_string(piece) +
                   " bytes), but " + limit + " and " + std::to_string(room) + " of them are free: " + fix);
}

// ---- the vocabulary -------------------------------------------------------

Status CommandBuffer::check_copy(uint64_t dst, uint64_t src, uint64_t bytes, uint64_t encoded) const {
  if (bytes == 0) return error(Code::invalid_argument, "copy of 0 bytes: give a size of at least 1");
  if (src < dst + bytes && dst < src + bytes)
    return error(Code::invalid_argument, "copy source [" + hex(src) + ", +" + std::to_string(bytes) +
                                             ") overlaps its destination " + hex(dst) +
                                             "; DMA copies are not memmove: use disjoint buffers");
  const bool hopper = isa_.kind() == IsaKind::hopper_ce;
  const uint64_t piece = hopper ? hopper::kMaxCopyBytes : sdma::limits(isa_.gen()).max_copy_bytes;
  const uint64_t piece_encoded = hopper ? hopper::kCopyPieceDwords * 4 : sdma_packet_bytes(isa_.gen(), sdma::Pkt::copy);
  return check_room("copy", bytes, encoded, 0, piece, piece_encoded);
}

Status CommandBuffer::copy(uint64_t dst, uint64_t src, uint64_t bytes, CopyOrder order) {
  CONCCL_RETURN_IF_ERROR(check_copy(dst, src, bytes, copy_encoded_bytes(dst, src, bytes)));
  return all_or_nothing(*this, [&] { return ops_for(isa_).copy(*this, dst, src, bytes, order == CopyOrder::alongside_earlier);
  });
}

Status CommandBuffer::copy_add(uint64_t dst, uint64_t src, uint64_t bytes, CopyOrder order, uint64_t va,
                               uint64_t delta) {
  CONCCL_RETURN_IF_ERROR(check_signal(va));
  if (!caps_->copy_add || !ops_for(isa_).copy_add)
    return all_or_nothing(*this, [&] {
      CONCCL_RETURN_IF_ERROR(copy(dst, src, bytes, order));
      return signal_add(va, delta);
    });
  const uint64_t extra = (hopper::kCopyAddDwords - hopper::kCopyPieceDwords) * 4;  // the semaphore's methods
  CONCCL_RETURN_IF_ERROR(check_copy(dst, src, bytes, add_sat(copy_encoded_bytes(dst, src, bytes), extra)));
  return all_or_nothing(*this, [&] {
    return ops_for(isa_).copy_add(*this, dst, src, bytes, order == CopyOrder::alongside_earlier, va, delta);
  });
}

Status CommandBuffer::copy_bcst(uint64_t dst0, uint64_t dst1, uint64_t src, uint64_t bytes) {
  CONCCL_RETURN_IF_ERROR(need_cap(caps_->broadcast_copy, "a broadcast copy (copy_bcst)"));
  if (bytes == 0) return error(Code::invalid_argument, "broadcast copy of 0 bytes");
  const uint64_t piece = sdma::limits(isa_.gen()).max_copy_bytes;
  const uint64_t piece_encoded = sdma_packet_bytes(isa_.gen(), sdma::Pkt::copy_bcst);
  CONCCL_RETURN_IF_ERROR(check_room("broadcast copy", bytes, mul_sat(pieces(bytes, piece), piece_encoded), 0, piece,
                                    piece_encoded));
  return all_or_nothing(*this, [&] { return ops_for(isa_).copy_bcst(*this, dst0, dst1, src, bytes); });
}

Status CommandBuffer::swap(uint64_t a, uint64_t b, uint64_t bytes) {
  CONCCL_RETURN_IF_ERROR(need_cap(caps_->swap, "an in-place swap (swap)"));
  if (bytes == 0) return error(Code::invalid_argument, "swap of 0 bytes");
  if (a < b + bytes && b < a + bytes)
    return error(Code::invalid_argument, "swap ranges [" + hex(a) + ", +" + std::to_string(bytes) + ") and " +
                                             hex(b) + " overlap");
  const uint64_t piece = sdma::limits(isa_.gen()).max_copy_bytes;
  const uint64_t piece_encoded = sdma_packet_bytes(isa_.gen(), sdma::Pkt::swap);
  CONCCL_RETURN_IF_ERROR(check_room("swap", bytes, mul_sat(pieces(bytes, piece), piece_encoded), 0, piece,
                                    piece_encoded));
  return all_or_nothing(*this, [&] { return ops_for(isa_).swap(*this, a, b, bytes); });
}

Status CommandBuffer::fill(uint64_t dst, uint32_t value, uint64_t bytes) {
  if (bytes == 0) return error(Code::invalid_argument, "fill of 0 bytes");
  if ((dst | bytes) & 3)
    return error(Code::invalid_argument, "fill of " + std::to_string(bytes) + " bytes at " + hex(dst) +
                                             ": a 32-bit fill needs a 4-byte aligned address and size");
  const bool hopper = isa_.kind() == IsaKind::hopper_ce;
  const uint64_t piece = hopper ? hopper::kMaxFillBytes : sdma::limits(isa_.gen()).fill_split_bytes;
  const uint64_t piece_encoded = hopper ? hopper::kFillPieceDwords * 4 : sdma_packet_bytes(isa_.gen(), sdma::Pkt::fill);
  const uint64_t fixed = hopper ? hopper::kFillSetupDwords * 4 : 0;
  CONCCL_RETURN_IF_ERROR(check_room("fill", bytes, fill_encoded_bytes(bytes), fixed, piece, piece_encoded));
  return all_or_nothing(*this, [&] { return ops_for(isa_).fill(*this, dst, value, bytes); });
}

Status CommandBuffer::check_signal(uint64_t va) const {
  if (va & (caps_->signal_align - 1))
    return error(Code::invalid_argument, "signal at " + hex(va) + " is not " + std::to_string(caps_->signal_align) +
                                             "-byte aligned");
  return Status();
}

Status CommandBuffer::signal_add(uint64_t va, uint64_t delta) {
  CONCCL_RETURN_IF_ERROR(check_signal(va));
  return all_or_nothing(*this, [&] { return ops_for(isa_).signal_add(*this, va, delta); });
}

Status CommandBuffer::signal_set(uint64_t va, uint64_t value) {
  CONCCL_RETURN_IF_ERROR(check_signal(va));
  return all_or_nothing(*this, [&] { return ops_for(isa_).signal_set(*this, va, value); });
}

Status CommandBuffer::wait_ge(uint64_t va, uint64_t value, WaitStyle style) {
  CONCCL_RETURN_IF_ERROR(check_signal(va));
  return all_or_nothing(*this, [&] { return ops_for(isa_).wait_ge(*this, va, value, style == WaitStyle::hold); });
}

Status CommandBuffer::rewrite_wait_ge(size_t at, size_t dwords, uint64_t va, uint64_t value, WaitStyle style) {
  if (at + dwords > size_ || dwords == 0)
    return error(Code::invalid_argument, "rewrite_wait_ge: dwords [" + std::to_string(at) + ", " +
                                             std::to_string(at + dwords) + ") are not inside the " +
                                             std::to_string(size_) + " recorded");
  // Encoded afresh into scratch storage, then copied over the old wait: the
  // lowerings encode a wait in a size that does not depend on the value
  // (Hopper: one SEM_EXECUTE; SDMA: POLL_REGMEM, COND_EXE, POLL_REGMEM, each
  // POLL twice on generation 4, then the cache maintenance after a wait: 35
  // dwords at most today).
  constexpr size_t kMaxWaitDwords = 64;
  uint32_t scratch[kMaxWaitDwords];
  if (dwords > kMaxWaitDwords)
    return error(Code::invalid_argument,
                 "rewrite_wait_ge: a wait is at most " + std::to_string(kMaxWaitDwords) + " dwords");
  CommandBuffer tmp(isa_, std::span<uint32_t>(scratch, kMaxWaitDwords));
  CONCCL_RETURN_IF_ERROR(tmp.wait_ge(va, value, style));
  if (tmp.size_dwords() != dwords)
    return error(Code::internal, "rewrite_wait_ge: the wait encodes in " + std::to_string(tmp.size_dwords()) +
                                     " dwords, not the " + std::to_string(dwords) + " recorded");
  for (size_t i = 0; i < dwords; ++i) data_[at + i] = scratch[i];
  return Status();
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

Status CommandBuffer::append(const CommandBuffer& other) {
  if (!(other.isa_ == isa_))
    return error(Code::invalid_argument, "append: the other buffer was recorded for " + other.isa_.name() +
                                             ", this one for " + isa_.name());
  if (other.empty()) return Status();
  const size_t at = size_;
  uint32_t* p = grow(other.size_);
  if (!p) return lower::Writer::full(*this, other.size_);
  std::memcpy(p, other.data_, other.size_ * 4);
  starts_.reserve(starts_.size() + other.starts_.size());
  for (uint32_t s : other.starts_) starts_.push_back(static_cast<uint32_t>(at + s));
  return Status();
}

std::string CommandBuffer::disassemble() const { return ops_for(isa_).disassemble(*this); }

Status lower::Writer::full(const CommandBuffer& cb, size_t dwords) {
  if (cb.limit_ == CommandBuffer::Limit::storage)
    return error(Code::resource_exhausted, "the reserved ring space is full");
  return error(Code::resource_exhausted, "a " + std::to_string(dwords * 4) + "-byte command does not fit: " +
                                             std::to_string(cb.size_bytes()) + " of the buffer's max_bytes() " +
                                             std::to_string(cb.max_bytes_) + " are recorded; submit them first");
}

}  // namespace conccl
