// packets/copy_split.hpp - split a copy of any size into legal COPY_LINEAR packets.
#pragma once

#include <cstdint>
#include <vector>

#include "conccl/packets/generation.hpp"

namespace conccl::sdma {

struct CopyChunk {
  uint64_t src;
  uint64_t dst;
  uint64_t bytes;
  bool operator==(const CopyChunk&) const = default;
};

// Calls fn(CopyChunk) for each packet-sized piece, in address order, and
// returns the number of pieces. Rules:
//  - no piece exceeds limits(g).max_copy_bytes;
//  - when src and dst are both 4-byte aligned and bytes is not a multiple of
//    4, the dword-multiple body and the 1-3 byte tail go in separate packets,
//    so the body takes the engine's dword path (Mesa ac_emit_sdma_copy_linear,
//    PAL DmaCmdBuffer: the microcode picks byte or dword copies per packet).
//  - bytes == 0 gives no pieces.
template <typename Fn>
size_t for_each_copy_chunk(Gen g, uint64_t src, uint64_t dst, uint64_t bytes, Fn&& fn) {
  const uint64_t max = limits(g).max_copy_bytes;
  uint64_t body = bytes;
  if (((src | dst) & 3) == 0 && bytes > 4 && (bytes & 3)) body = bytes & ~uint64_t(3);
  size_t n = 0;
  uint64_t off = 0;
  while (off < body) {
    const uint64_t len = body - off < max ? body - off : max;
    fn(CopyChunk{src + off, dst + off, len});
    off += len;
    ++n;
  }
  if (body != bytes) {
    fn(CopyChunk{src + body, dst + body, bytes - body});
    ++n;
  }
  return n;
}

std::vector<CopyChunk> split_copy(Gen g, uint64_t src, uint64_t dst, uint64_t bytes);

// Number of COPY_LINEAR packets split_copy gives.
size_t copy_packet_count(Gen g, uint64_t src, uint64_t dst, uint64_t bytes);

}  // namespace conccl::sdma
