// src/commands/lowering.hpp - how the vocabulary becomes packets or methods.
//
// One table of entry points per instruction set (lower_sdma.cpp,
// lower_hopper.cpp). CommandBuffer checks what is common (zero sizes,
// overlaps, capabilities) and calls the table; each entry appends whole
// commands through lower::Writer or returns an error (the caller truncates
// what a failed entry appended). The per-ISA encoders (sdma_packets.cpp,
// hopper_methods.cpp) append through the same door.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "conccl/commands.hpp"

namespace conccl::lower {

// The only way to append dwords to a CommandBuffer: CommandBuffer keeps
// grow/mark/truncate private and befriends this, so that users record
// through the vocabulary or an encoder, never by hand.
struct Writer {
  // Space for n more dwords at the end, or null when the buffer is full.
  static uint32_t* grow(CommandBuffer& cb, size_t n) { return cb.grow(n); }
  // Records that a command starts at dword offset `at`.
  static void mark(CommandBuffer& cb, size_t at) { cb.mark(at); }
  // Drops everything after a mark taken with size_dwords()/packet_count().
  static void truncate(CommandBuffer& cb, size_t dwords, size_t packets) { cb.truncate(dwords, packets); }
  // Why `dwords` more do not fit (ring space full, or max_bytes()).
  static Status full(const CommandBuffer& cb, size_t dwords);
};

// Runs one command; on error drops whatever it appended.
template <typename Fn>
Status all_or_nothing(CommandBuffer& cb, Fn&& fn) {
  const size_t dw = cb.size_dwords(), n = cb.packet_count();
  Status st = fn();
  if (!st.ok()) Writer::truncate(cb, dw, n);
  return st;
}

struct Ops {
  // alongside: the copy need not wait for earlier copies (CommandBuffer::CopyOrder).
  Status (*copy)(CommandBuffer& cb, uint64_t dst, uint64_t src, uint64_t bytes, bool alongside);
  Status (*copy_bcst)(CommandBuffer& cb, uint64_t dst0, uint64_t dst1, uint64_t src, uint64_t bytes);
  Status (*swap)(CommandBuffer& cb, uint64_t a, uint64_t b, uint64_t bytes);
  Status (*fill)(CommandBuffer& cb, uint64_t dst, uint32_t value, uint64_t bytes);
  Status (*signal_add)(CommandBuffer& cb, uint64_t va, uint64_t delta);
  // Caps::copy_add: a copy whose last command adds `delta` at `va` as it ends
  // (null where the instruction set has no such command).
  Status (*copy_add)(CommandBuffer& cb, uint64_t dst, uint64_t src, uint64_t bytes, bool alongside, uint64_t va,
                     uint64_t delta);
  Status (*signal_set)(CommandBuffer& cb, uint64_t va, uint64_t value);
  // hold: CommandBuffer::WaitStyle::hold.
  Status (*wait_ge)(CommandBuffer& cb, uint64_t va, uint64_t value, bool hold);
  Status (*timestamp)(CommandBuffer& cb, uint64_t slot);
  // Finds command boundaries in pre-encoded dwords (offsets relative to dw[0]).
  Status (*raw)(CommandBuffer& cb, std::span<const uint32_t> dw);
  std::string (*disassemble)(const CommandBuffer& cb);
};

const Ops& sdma_ops();
const Ops& hopper_ops();
const Caps& sdma_caps(sdma::Gen g);
const Caps& hopper_caps();

// Calls fn(offset, length) for consecutive pieces of at most `max` bytes
// covering [0, bytes), stopping at the first error: how every lowering splits
// a copy or fill that is larger than one command takes.
template <typename Fn>
Status for_each_piece(uint64_t bytes, uint64_t max, Fn&& fn) {
  for (uint64_t off = 0; off < bytes; off += max)
    CONCCL_RETURN_IF_ERROR(fn(off, bytes - off < max ? bytes - off : max));
  return Status();
}

// Appends `n` dwords from `src` as one command starting at the current end.
inline Status append(CommandBuffer& cb, const uint32_t* src, size_t n) {
  const size_t at = cb.size_dwords();
  uint32_t* p = Writer::grow(cb, n);
  if (!p) return Writer::full(cb, n);
  for (size_t i = 0; i < n; ++i) p[i] = src[i];
  Writer::mark(cb, at);
  return Status();
}

}  // namespace conccl::lower
