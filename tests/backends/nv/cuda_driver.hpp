// tests/backends/nv/cuda_driver.hpp - the CUDA driver calls the nv tests make
// themselves, loaded from libcuda.so.1 with dlopen (cuda.h names and types;
// the tests build without the CUDA toolkit), and whether a GPU is here.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace conccl::test {

struct CudaDriver {
  void* lib = nullptr;
  int (*cuInit)(unsigned) = nullptr;
  int (*cuDeviceGet)(int*, int) = nullptr;
  int (*cuDevicePrimaryCtxRetain)(void**, int) = nullptr;
  int (*cuCtxSetCurrent)(void*) = nullptr;
  int (*cuStreamCreate)(void**, unsigned) = nullptr;
  int (*cuStreamSynchronize)(void*) = nullptr;
  int (*cuStreamDestroy)(void*) = nullptr;
  int (*cuStreamBeginCapture)(void*, int) = nullptr;
  int (*cuStreamEndCapture)(void*, void**) = nullptr;
  int (*cuGraphInstantiateWithFlags)(void**, void*, unsigned long long) = nullptr;
  int (*cuGraphLaunch)(void*, void*) = nullptr;
  int (*cuGraphExecDestroy)(void*) = nullptr;
  int (*cuGraphDestroy)(void*) = nullptr;
  int (*cuMemHostAlloc)(void**, size_t, unsigned) = nullptr;
  int (*cuMemFreeHost)(void*) = nullptr;
  int (*cuMemcpyHtoDAsync)(uint64_t, const void*, size_t, void*) = nullptr;
  int (*cuMemcpyDtoHAsync)(void*, uint64_t, size_t, void*) = nullptr;

  template <typename F>
  bool get(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    return f != nullptr;
  }
  // Every entry point above, or false.
  bool load() {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    return lib && get(cuInit, "cuInit") && get(cuDeviceGet, "cuDeviceGet") &&
           get(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") && get(cuCtxSetCurrent, "cuCtxSetCurrent") &&
           get(cuStreamCreate, "cuStreamCreate") && get(cuStreamSynchronize, "cuStreamSynchronize") &&
           get(cuStreamDestroy, "cuStreamDestroy_v2") && get(cuStreamBeginCapture, "cuStreamBeginCapture_v2") &&
           get(cuStreamEndCapture, "cuStreamEndCapture") &&
           get(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags") && get(cuGraphLaunch, "cuGraphLaunch") &&
           get(cuGraphExecDestroy, "cuGraphExecDestroy") && get(cuGraphDestroy, "cuGraphDestroy") &&
           get(cuMemHostAlloc, "cuMemHostAlloc") && get(cuMemFreeHost, "cuMemFreeHost") &&
           get(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2") && get(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  }
};

// An NVIDIA driver and libcuda are here.
inline bool have_nv_gpu() {
  if (access("/dev/nvidiactl", F_OK) != 0) return false;
  void* l = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (l) dlclose(l);
  return l != nullptr;
}

}  // namespace conccl::test
