// tools/sdma-probe/coll_memory.hpp - what a collective sweep allocates: only
// the buffers an op touches (p2p: the root's send and the peer's recv, not
// ranks x message for every buffer), and its budget for mem_budget.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "conccl/collectives.hpp"
#include "mem_budget.hpp"

namespace probe {

struct RankBuffers {
  uint64_t send = 0, recv = 0;  // 0: none
};

// Bytes of rank r's send and recv buffers for a per-rank chunk of `chunk`
// bytes, n ranks. Saturates instead of wrapping.
RankBuffers buffer_bytes(conccl::CollOp op, int root, int peer, int r, int n, uint64_t chunk);

// A buffer's allocated size: a multiple of 4, so that an engine can poison it
// with a 32-bit fill (saturates near 2^64).
uint64_t alloc_bytes(uint64_t bytes);

// --procs through windows: each rank's send and receive buffers in one
// buffer, registered once as a window, at offsets that are the same on every
// rank (Communicator::call needs that): the region that only the root has
// whole (scatter: the root's send; else the receive buffers) second, after
// the largest first region of any rank. A rank that has no buffer of a kind
// still has the offset in its window, to name the root's (a few bytes there).
// In-place gather and scatter put every rank's send (gather) or recv
// (scatter) at root x chunk into the second region, where the root's chunk
// of its own buffer is: the window covers that too. Offsets and sizes are
// multiples of 4096.
struct WindowLayout {
  uint64_t send_off = 0, recv_off = 0;  // the same on every rank
  uint64_t size = 0;                    // this rank's window
};
WindowLayout window_layout(conccl::CollOp op, int root, int peer, int r, int n, uint64_t chunk);

// Staging buffer per GPU: 32 MiB, less when many GPUs share the emulator's
// 1 GiB of host memory (64 GPUs x 32 MiB did not fit).
size_t staging_bytes(int gpus);

// Host memory the sweep uses besides its buffers: staging per GPU, plus the
// verification and upload pieces (64 MiB read back, 64 MiB expected pattern,
// 32 MiB upload).
inline constexpr uint64_t kVerifyBytes = 160ull << 20;

// Everything a sweep of `op` up to a per-rank chunk of max_chunk allocates,
// ranks placed on GPUs by gpu_of; `windows`: one window buffer per rank
// (window_layout) instead of its send and receive buffers.
MemBudget sweep_budget(conccl::CollOp op, int root, int peer, const std::vector<int>& gpu_of, int gpus,
                       uint64_t max_chunk, bool windows = false);

}  // namespace probe
