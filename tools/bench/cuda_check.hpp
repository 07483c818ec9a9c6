// tools/bench/cuda_check.hpp - fail-fast checks for CUDA calls in the
// benchmark programs (exit code 4 with file, line, call and CUDA's message).
// Benchmarks only: library code returns Status and never exits.
// Include after <cuda.h> (CU_CHECK), <cuda_runtime.h> (CUDA_CHECK) and
// <cublas_v2.h> (CUBLAS_CHECK).
#pragma once

#include <cstdio>
#include <cstdlib>

#define CU_CHECK(x)                                                                                \
  do {                                                                                             \
    CUresult r_ = (x);                                                                             \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      const char* s_ = nullptr;                                                                    \
      cuGetErrorString(r_, &s_);                                                                   \
      std::fprintf(stderr, "%s:%d %s -> %d %s\n", __FILE__, __LINE__, #x, int(r_), s_ ? s_ : "?"); \
      std::exit(4);                                                                                \
    }                                                                                              \
  } while (0)

#ifdef __CUDA_RUNTIME_H__
#define CUDA_CHECK(x)                                                                           \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(4);                                                                             \
    }                                                                                           \
  } while (0)
#endif

#ifdef CUBLAS_V2_H_
#define CUBLAS_CHECK(x)                                                                  \
  do {                                                                                   \
    cublasStatus_t s_ = (x);                                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                   \
      std::fprintf(stderr, "%s:%d %s -> cublas %d\n", __FILE__, __LINE__, #x, int(s_)); \
      std::exit(4);                                                                      \
    }                                                                                    \
  } while (0)
#endif
