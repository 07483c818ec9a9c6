// src/backends/nv/reduce_kernel.hpp - the reduce step (conccl/reduce.hpp) on
// an NVIDIA GPU: a small kernel that the library carries as PTX text and
// hands to the CUDA driver's JIT at run time (cuModuleLoadDataEx), so that
// building ConCCL needs no CUDA toolkit and the one text runs on every GPU
// the driver supports.
//
// One kernel per (element type, operator), generated from tables of PTX
// instruction strings (reduce_kernel.cpp), loaded once per CUDA context on
// first use (the driver's JIT takes 0.15-0.35 s per module on an H200 the
// first time; with its compute cache on disk, later loads took under 2 ms)
// and launched on the caller's stream, in order with its other work. The
// grid is deliberately small (at most 32 blocks, a quarter of the SMs at
// most): the step runs beside the caller's compute kernels, and a memory-
// bound elementwise pass gets most of the bandwidth from few SMs (the
// numbers are at kMaxBlocks in reduce_kernel.cpp).
#pragma once

#include <string>

#include "conccl/reduce.hpp"
#include "conccl/status.hpp"

namespace conccl::nv {

// The most inputs one step takes: their pointers travel by value in the
// kernel's parameter space (one .param array of this many 64-bit addresses).
constexpr size_t kMaxReduceInputs = 64;

struct ReduceLaunchInfo {
  int blocks = 0;   // grid size of the launch (0: nothing was launched, count 0)
  int threads = 0;  // threads per block
};

// Runs `step` (device virtual addresses CUDA can access) on the CUDA stream
// `cu_stream` (a CUstream; null is the context's legacy default stream). The
// stream's context is used (made current for the call if another is). Returns
// once the kernel is queued, not when it is done. Inputs and out may have any
// alignment; out may be one of the inputs (in place) but must not overlap one
// partly. CONCCL_REDUCE_BLOCKS=<1..1024> overrides the grid size (tuning).
// Errors: invalid_argument (no inputs, more than kMaxReduceInputs, a null
// address, an unknown type or operator), unavailable (no libcuda), the JIT's
// log when the driver rejects the PTX, CUDA's error name when a call fails.
Status launch_reduce(void* cu_stream, const DeviceReduceStep& step, ReduceLaunchInfo* info = nullptr);

// The PTX module for one (dtype, op): one entry, conccl_reduce_<type>_<op>
// (say conccl_reduce_bf16_sum), parameters in[64] (.u64 each), n (.u32),
// out, count, head and nvec (.u64). Empty for an unknown type or operator.
// Exposed for tests and for reading.
std::string reduce_ptx(DataType dtype, ReduceOp op);
// The entry's name ("" for an unknown type or operator).
std::string reduce_entry_name(DataType dtype, ReduceOp op);

}  // namespace conccl::nv
