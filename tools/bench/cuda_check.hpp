// tools/bench/cuda_check.hpp - fail-fast checks for CUDA calls in the
// benchmark programs (exit code 4 with file, line, call and CUDA's message).
// Benchmarks only: library code returns Status and never exits.
// Include after <cuda.h> (CU_CHECK), <cuda_runtime.h> (CUDA_CHECK) and
// <cublas_v2.h> (CUBLAS_CHECK).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace conccl::bench {

// What every check does on a failure: says where, which call and the
// library's verdict, then exits 4.
[[noreturn]] inline void cuda_call_failed(const char* file, int line, const char* call, const std::string& verdict) {
  std::fprintf(stderr, "%s:%d %s -> %s\n", file, line, call, verdict.c_str());
  std::exit(4);
}

}  // namespace conccl::bench

#define CU_CHECK(x)                                                                                               \
  do {                                                                                                            \
    CUresult r_ = (x);                                                                                            \
    if (r_ != CUDA_SUCCESS) {                                                                                     \
      const char* s_ = nullptr;                                                                                   \
      cuGetErrorString(r_, &s_);                                                                                  \
      ::conccl::bench::cuda_call_failed(__FILE__, __LINE__, #x, std::to_string(int(r_)) + " " + (s_ ? s_ : "?")); \
    }                                                                                                             \
  } while (0)

#ifdef __CUDA_RUNTIME_H__
#define CUDA_CHECK(x)                                                                                         \
  do {                                                                                                        \
    cudaError_t e_ = (x);                                                                                     \
    if (e_ != cudaSuccess) ::conccl::bench::cuda_call_failed(__FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
  } while (0)
#endif

#ifdef CUBLAS_V2_H_
#define CUBLAS_CHECK(x)                                                                               \
  do {                                                                                                \
    cublasStatus_t s_ = (x);                                                                          \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                                  \
      ::conccl::bench::cuda_call_failed(__FILE__, __LINE__, #x, "cublas " + std::to_string(int(s_))); \
  } while (0)
#endif
