// tools/bench/cuda_stamp.hpp - a 1-thread CUDA kernel that records when it
// ran, for the hand-off latency benchmarks: out[0] = %globaltimer (the GPU's
// ns timer, the clock copy-engine release timestamps use), out[1] = *sem,
// out[2] = *(sem+8). PTX written for these benches (PTX ISA: mov from
// %globaltimer, ld.volatile), loaded with the driver API, so nothing is
// compiled for the GPU at build time. Include after <cuda.h> and cuda_check.hpp.
#pragma once

namespace conccl::bench {

inline const char* kStampPtx = R"(
.version 7.8
.target sm_90
.address_size 64
.visible .entry stamp(.param .u64 out, .param .u64 sem)
{
  .reg .b64 %rd<8>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [sem];
  cvta.to.global.u64 %rd3, %rd1;
  cvta.to.global.u64 %rd4, %rd2;
  mov.u64 %rd5, %globaltimer;
  ld.volatile.global.u64 %rd6, [%rd4];
  ld.volatile.global.u64 %rd7, [%rd4+8];
  st.global.u64 [%rd3], %rd5;
  st.global.u64 [%rd3+8], %rd6;
  st.global.u64 [%rd3+16], %rd7;
  ret;
}
)";

// The stamp kernel of the current context's device.
inline CUfunction load_stamp_kernel() {
  CUmodule mod;
  CU_CHECK(cuModuleLoadData(&mod, kStampPtx));
  CUfunction f;
  CU_CHECK(cuModuleGetFunction(&f, mod, "stamp"));
  return f;
}

}  // namespace conccl::bench
