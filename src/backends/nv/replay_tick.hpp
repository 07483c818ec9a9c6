// src/backends/nv/replay_tick.hpp - StreamOps::replay_tick on a CUDA stream:
// a one-thread kernel the library carries as PTX (ptx_module.hpp). A graph's
// memory-operation nodes store fixed values, and a captured call's armed
// lists wait for a counter that grows by one per replay (docs/graphs.md), so
// the step that bumps it must read the word it writes: a kernel.
#pragma once

#include <string>

#include "conccl/collectives.hpp"

namespace conccl::nv {

// Queues the tick on `cu_stream` (a kernel node when the stream captures).
// Its three addresses must be memory CUDA can access (the signal words of
// an nv device shared with CUDA are).
Status launch_replay_tick(void* cu_stream, const StreamOps::ReplayTick& tick);

// The kernel's PTX for one .target (tests read it).
std::string replay_tick_ptx(const char* version, const char* target);

}  // namespace conccl::nv
