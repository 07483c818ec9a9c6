// src/backends/nv/ptx_module.hpp - kernels the library carries as PTX text,
// compiled by the CUDA driver's JIT at run time (cuModuleLoadDataEx), so
// that building ConCCL needs no CUDA toolkit: loaded once per CUDA context
// and launched on a caller's stream. The reduce step (reduce_kernel.cpp) and
// a captured call's replay tick (replay_tick.cpp) are such kernels.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "conccl/status.hpp"

namespace conccl::nv {

// One kernel: its entry's name (also its key in each context's cache), the
// PTX texts to try in order (older .target/.version first), and what a user
// can do instead when the driver cannot run it (appended to errors).
struct PtxSource {
  std::string entry;
  std::function<std::vector<std::string>()> texts;
  std::string instead;
};

struct LoadedKernel {
  void* fn = nullptr;  // CUfunction
  int sms = 0;         // the context's device's multiprocessor count
  bool mps = false;    // the context is shared through CUDA MPS (CU_DEVICE_ATTRIBUTE_MPS_ENABLED)
};

// With the stream's context current (pushed for the call when another is),
// and `src` loaded into that context (the first time only), runs
// launch(kernel). Errors: unavailable (no libcuda, no JIT), the JIT's log
// when the driver rejects every text, CUDA's error name when a call fails.
Status with_ptx_kernel(void* cu_stream, const PtxSource& src, const std::function<Status(const LoadedKernel&)>& launch);

// libcuda's status for kernels (cuInit made once): `instead` names what the
// user can do without it.
Status ptx_driver_status(const std::string& instead);

// A CUDA driver result as a Status: `what` failed, CUDA's error name, `fix`.
Status cu_result(int result, const std::string& what, const std::string& fix);

}  // namespace conccl::nv
