// packets/copy_split.cpp
#include "packets/copy_split.hpp"

namespace conccl::sdma {

std::vector<CopyChunk> split_copy(Gen g, uint64_t src, uint64_t dst, uint64_t bytes) {
  std::vector<CopyChunk> out;
  for_each_copy_chunk(g, src, dst, bytes, [&](const CopyChunk& c) { out.push_back(c); });
  return out;
}

size_t copy_packet_count(Gen g, uint64_t src, uint64_t dst, uint64_t bytes) {
  return for_each_copy_chunk(g, src, dst, bytes, [](const CopyChunk&) {});
}

}  // namespace conccl::sdma
