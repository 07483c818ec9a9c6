// src/backends/nv/cuda_api.cpp - loading the CUDA driver API (cuda_api.hpp).
#include "backends/nv/cuda_api.hpp"

#include <dlfcn.h>

#include <mutex>

namespace conccl::nv::cuda_driver {

namespace {

template <typename F>
bool load(void* lib, F*& f, const char* name, const char* alt = nullptr) {
  void* p = dlsym(lib, name);
  if (!p && alt) p = dlsym(lib, alt);
  f = reinterpret_cast<F*>(p);
  return p != nullptr;
}

}  // namespace

const CudaApi& api() {
  static CudaApi a;
  static std::once_flag once;
  std::call_once(once, [] {
    a.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!a.lib) {
      const char* e = dlerror();
      a.status = error(Code::unavailable,
                       std::string("libcuda.so.1 cannot be loaded (") + (e ? e : "?") +
                           "): CUDA interop needs the NVIDIA driver's CUDA library in the library path");
      return;
    }
    std::string missing;
    auto need = [&](bool ok, const char* n) {
      if (!ok) missing += std::string(missing.empty() ? "" : ", ") + n;
    };
    // cuda.h maps cuMemGetAddressRange and cuDeviceGetUuid to their _v2 ABI names.
    need(load(a.lib, a.cuInit, "cuInit"), "cuInit");
    need(load(a.lib, a.cuGetErrorName, "cuGetErrorName"), "cuGetErrorName");
    need(load(a.lib, a.cuDeviceGetCount, "cuDeviceGetCount"), "cuDeviceGetCount");
    need(load(a.lib, a.cuDeviceGet, "cuDeviceGet"), "cuDeviceGet");
    need(load(a.lib, a.cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid"), "cuDeviceGetUuid");
    need(load(a.lib, a.cuCtxGetCurrent, "cuCtxGetCurrent"), "cuCtxGetCurrent");
    need(load(a.lib, a.cuCtxSetCurrent, "cuCtxSetCurrent"), "cuCtxSetCurrent");
    need(load(a.lib, a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"), "cuDevicePrimaryCtxRetain");
    need(load(a.lib, a.cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
         "cuMemGetAllocationGranularity");
    need(load(a.lib, a.cuMemCreate, "cuMemCreate"), "cuMemCreate");
    need(load(a.lib, a.cuMemAddressReserve, "cuMemAddressReserve"), "cuMemAddressReserve");
    need(load(a.lib, a.cuMemMap, "cuMemMap"), "cuMemMap");
    need(load(a.lib, a.cuMemSetAccess, "cuMemSetAccess"), "cuMemSetAccess");
    need(load(a.lib, a.cuMemUnmap, "cuMemUnmap"), "cuMemUnmap");
    need(load(a.lib, a.cuMemAddressFree, "cuMemAddressFree"), "cuMemAddressFree");
    need(load(a.lib, a.cuMemRelease, "cuMemRelease"), "cuMemRelease");
    need(load(a.lib, a.cuMemExportToShareableHandle, "cuMemExportToShareableHandle"),
         "cuMemExportToShareableHandle");
    need(load(a.lib, a.cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle"), "cuMemRetainAllocationHandle");
    need(load(a.lib, a.cuMemGetAddressRange, "cuMemGetAddressRange_v2"), "cuMemGetAddressRange_v2");
    // cuda.h maps these to their _v2 ABI names too.
    (void)load(a.lib, a.cuMemHostRegister, "cuMemHostRegister_v2", "cuMemHostRegister");
    (void)load(a.lib, a.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", "cuMemHostGetDevicePointer");
    (void)load(a.lib, a.cuMemHostUnregister, "cuMemHostUnregister");
    (void)load(a.lib, a.cuStreamWriteValue64, "cuStreamWriteValue64_v2", "cuStreamWriteValue64");
    (void)load(a.lib, a.cuStreamWaitValue64, "cuStreamWaitValue64_v2", "cuStreamWaitValue64");
    (void)load(a.lib, a.cuStreamWriteValue32, "cuStreamWriteValue32_v2", "cuStreamWriteValue32");
    (void)load(a.lib, a.cuStreamQuery, "cuStreamQuery");
    (void)load(a.lib, a.cuStreamBatchMemOp, "cuStreamBatchMemOp_v2", "cuStreamBatchMemOp");
    (void)load(a.lib, a.cuStreamIsCapturing, "cuStreamIsCapturing");
    // cuda.h (12.x): cuStreamGetCaptureInfo is the _v2 ABI (status, id, graph, dependencies, count).
    (void)load(a.lib, a.cuStreamGetCaptureInfo, "cuStreamGetCaptureInfo_v2");
    (void)load(a.lib, a.cuUserObjectCreate, "cuUserObjectCreate");
    (void)load(a.lib, a.cuGraphRetainUserObject, "cuGraphRetainUserObject");
    (void)load(a.lib, a.cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
    // The reduce kernel's; cuda.h maps cuCtxPushCurrent/cuCtxPopCurrent to _v2.
    (void)load(a.lib, a.cuStreamGetCtx, "cuStreamGetCtx");
    (void)load(a.lib, a.cuCtxPushCurrent, "cuCtxPushCurrent_v2");
    (void)load(a.lib, a.cuCtxPopCurrent, "cuCtxPopCurrent_v2");
    (void)load(a.lib, a.cuCtxGetDevice, "cuCtxGetDevice");
    (void)load(a.lib, a.cuCtxGetId, "cuCtxGetId");
    (void)load(a.lib, a.cuDeviceGetAttribute, "cuDeviceGetAttribute");
    (void)load(a.lib, a.cuModuleLoadDataEx, "cuModuleLoadDataEx");
    (void)load(a.lib, a.cuModuleGetFunction, "cuModuleGetFunction");
    (void)load(a.lib, a.cuLaunchKernel, "cuLaunchKernel");
    if (!missing.empty())
      a.status = error(Code::unavailable, "libcuda.so.1 lacks " + missing +
                                              " (the VMM API needs a CUDA 11.x or newer driver)");
  });
  return a;
}

std::string cu_name(CUresult r) {
  const char* n = nullptr;
  if (api().cuGetErrorName && api().cuGetErrorName(r, &n) == kCudaSuccess && n) return n;
  return "CUresult " + std::to_string(r);
}

Status cu_check(CUresult r, const std::string& what) {
  if (r == kCudaSuccess) return Status();
  return error(r == 2 /* CUDA_ERROR_OUT_OF_MEMORY */ ? Code::resource_exhausted : Code::internal,
               what + " failed: " + cu_name(r));
}

}  // namespace conccl::nv::cuda_driver
