// tools/sdma-probe/coll_memory.cpp
#include "coll_memory.hpp"

#include <algorithm>

namespace probe {

using conccl::CollOp;

RankBuffers buffer_bytes(CollOp op, int root, int peer, int r, int n, uint64_t chunk) {
  const uint64_t all = mul_sat(chunk, static_cast<uint64_t>(n));
  switch (op) {
    case CollOp::p2p: return {r == root ? chunk : 0, r == peer ? chunk : 0};
    case CollOp::broadcast: return {r == root ? chunk : 0, chunk};
    case CollOp::gather: return {chunk, r == root ? all : 0};
    case CollOp::scatter: return {r == root ? all : 0, chunk};
    case CollOp::all_gather: return {chunk, all};
    case CollOp::all_to_all: return {all, all};
  }
  return {};
}

uint64_t alloc_bytes(uint64_t bytes) { return round_up_sat(bytes, 4); }

WindowLayout window_layout(CollOp op, int root, int peer, int r, int n, uint64_t chunk) {
  constexpr uint64_t kAlign = 4096;
  const bool recv_first = op == CollOp::scatter;
  uint64_t first_max = 0;
  for (int q = 0; q < n; ++q) {
    const RankBuffers b = buffer_bytes(op, root, peer, q, n, chunk);
    first_max = std::max(first_max, alloc_bytes(recv_first ? b.recv : b.send));
  }
  WindowLayout w;
  const uint64_t second_off = round_up_sat(std::max<uint64_t>(first_max, 1), kAlign);
  (recv_first ? w.send_off : w.recv_off) = second_off;
  const RankBuffers mine = buffer_bytes(op, root, peer, r, n, chunk);
  uint64_t second = std::max<uint64_t>(alloc_bytes(recv_first ? mine.send : mine.recv), 4);
  if (op == CollOp::gather || op == CollOp::scatter)  // in place: every rank's chunk at root x chunk
    second = std::max(second, alloc_bytes(mul_sat(chunk, static_cast<uint64_t>(root) + 1)));
  w.size = round_up_sat(add_sat(second_off, second), kAlign);
  return w;
}

size_t staging_bytes(int gpus) {
  const size_t share = (size_t(512) << 20) / static_cast<size_t>(std::max(gpus, 1));
  return std::clamp<size_t>(share, size_t(1) << 20, size_t(32) << 20);
}

MemBudget sweep_budget(CollOp op, int root, int peer, const std::vector<int>& gpu_of, int gpus,
                       uint64_t max_chunk, bool windows) {
  MemBudget b;
  b.gpu.assign(static_cast<size_t>(std::max(gpus, 0)), 0);
  const int n = static_cast<int>(gpu_of.size());
  for (int r = 0; r < n; ++r) {
    const RankBuffers rb = buffer_bytes(op, root, peer, r, n, max_chunk);
    uint64_t& g = b.gpu[static_cast<size_t>(gpu_of[static_cast<size_t>(r)])];
    if (windows) {
      g = add_sat(g, window_layout(op, root, peer, r, n, max_chunk).size);
      continue;
    }
    for (uint64_t bytes : {rb.send, rb.recv})
      if (bytes) g = add_sat(g, alloc_bytes(bytes));
  }
  b.host = add_sat(mul_sat(staging_bytes(gpus), static_cast<uint64_t>(gpus)), kVerifyBytes);
  return b;
}

}  // namespace probe
