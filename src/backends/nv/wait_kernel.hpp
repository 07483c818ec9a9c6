// src/backends/nv/wait_kernel.hpp - a stream's waits for the engines'
// counters as a one-thread kernel the library carries as PTX
// (ptx_module.hpp), instead of CUDA's stream memory operations
// (cuStreamWaitValue64), for CONCCL_STREAM_WAITS=kernel.
//
// Why: a stream that waits with cuStreamWaitValue64 sees a counter reached
// either about 3 or about 9 us after the engine's store (docs/perf/h200.md,
// section 4), and a call across processes waits for the later of its
// ranks' streams (docs/perf/h200-collectives.md, runs 67-68). A thread that
// polls the word sees it within a read of host memory. The cost: the kernel
// holds one thread of one multiprocessor while it waits, and, where
// processes share a GPU without CUDA MPS, it waits for its context's turn
// on the GPU like every kernel (docs/perf/h200-graphs.md, run 46: a 1 KiB
// all-gather of 2 processes took 2241 us a call so, against 22 us). Under
// CUDA MPS it took 17.1-17.9 us against 21.9-22.2 (run 69); in one process
// it was no faster on the whole (12.5-13 us, where the stream operations
// took about 10 or 15, runs 69-71). So it is opt-in, for processes that
// share GPUs under MPS; the default stays the stream operations.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "backends/nv/nv_device.hpp"
#include "conccl/status.hpp"

namespace conccl::nv {

// Words one launch waits for; more are waited for by further launches.
inline constexpr size_t kWaitKernelWords = 4;

// Queues, on `cu_stream`, one kernel per kWaitKernelWords of `waits` (each
// a wait: va, value) that returns once (int64_t)(*va - value) >= 0 for
// each, as CU_STREAM_WAIT_VALUE_GEQ compares, or once `budget_ns` have
// passed since it began (a deadline for a wait the host has given up on:
// its watchdog fails the call and says why).
Status launch_wait_kernel(void* cu_stream, std::span<const StreamMemOp> waits, uint64_t budget_ns);

// The kernel's PTX for one .target (tests read it).
std::string wait_kernel_ptx(const char* version, const char* target);

// CONCCL_STREAM_WAITS (read once), which waits of a CUDA stream are wait
// kernels:
//   auto (or unset, the default): the waits marked StreamOps::Op::poll
//     (small calls) and shares_gpu (another process of the communicator
//     uses this GPU) when the stream's context runs under CUDA MPS
//     (stream_context_uses_mps), where they were measured faster; no other;
//   kernel: every wait marked poll, and single waits
//     (StreamOps::wait_value64: a captured call's end);
//   memop: none (cuStreamWaitValue64 for every wait).
enum class StreamWaits { memop, kernel, automatic };
StreamWaits stream_waits_mode();
// An error naming the values when CONCCL_STREAM_WAITS is set to another.
Status check_stream_waits_setting();
// Whether `cu_stream`'s context is shared through CUDA MPS (the driver's
// CU_DEVICE_ATTRIBUTE_MPS_ENABLED; false where the driver cannot say or
// cannot run the wait kernel). Asked once per process: a rank uses one GPU.
bool stream_context_uses_mps(void* cu_stream);

}  // namespace conccl::nv
