// src/backends/nv/cuda_api.hpp - the CUDA driver API as ConCCL loads it
// (dlopen of libcuda.so.1, no CUDA toolkit at build time): the project's own
// definitions of the public cuda.h types and values it uses, pinned by
// static_asserts, and the table of entry points (cuda_api.cpp). Shared by
// the interop (cuda_interop.cpp), graph capture (cuda_graphs.cpp) and the
// reduce kernel (reduce_kernel.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "conccl/status.hpp"

namespace conccl::nv::cuda_driver {

// ---- cuda.h (CUDA 12/13 driver API) -------------------------------------------
using CUresult = int;  // enum cudaError_enum; CUDA_SUCCESS 0
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;
using CUmemGenericAllocationHandle = unsigned long long;
constexpr CUresult kCudaSuccess = 0;
constexpr int kMemAllocationTypePinned = 1;         // CU_MEM_ALLOCATION_TYPE_PINNED
constexpr int kMemHandleTypePosixFd = 1;            // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
constexpr int kMemLocationTypeDevice = 1;           // CU_MEM_LOCATION_TYPE_DEVICE
constexpr int kMemAccessProtReadWrite = 3;          // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
constexpr int kMemAllocGranularityRecommended = 1;  // CU_MEM_ALLOC_GRANULARITY_RECOMMENDED

struct CUmemLocation {
  int type;
  int id;
};
struct CUmemAllocationProp {
  int type;
  int requestedHandleTypes;
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    uint8_t compressionType, gpuDirectRDMACapable;
    uint16_t usage;
    uint8_t reserved[4];
  } allocFlags;
};
static_assert(sizeof(CUmemAllocationProp) == 32 && offsetof(CUmemAllocationProp, location) == 8 &&
              offsetof(CUmemAllocationProp, win32HandleMetaData) == 16 &&
              offsetof(CUmemAllocationProp, allocFlags) == 24);
struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;
};
static_assert(sizeof(CUmemAccessDesc) == 12);
struct CUuuid {
  uint8_t bytes[16];
};

struct CudaApi {
  void* lib = nullptr;
  Status status;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetUuid)(CUuuid*, CUdevice) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuMemGetAllocationGranularity)(size_t*, const CUmemAllocationProp*, int) = nullptr;
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                          unsigned long long) = nullptr;
  CUresult (*cuMemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*cuMemUnmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemAddressFree)(CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*cuMemExportToShareableHandle)(void*, CUmemGenericAllocationHandle, int, unsigned long long) = nullptr;
  CUresult (*cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle*, void*) = nullptr;
  CUresult (*cuMemGetAddressRange)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  // Host registration (optional: only share_slots_with_cuda needs them).
  CUresult (*cuMemHostRegister)(void*, size_t, unsigned) = nullptr;
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned) = nullptr;
  CUresult (*cuMemHostUnregister)(void*) = nullptr;
  // Stream memory operations (optional: only stream ordering needs them).
  CUresult (*cuStreamWriteValue64)(void*, CUdeviceptr, uint64_t, unsigned) = nullptr;
  CUresult (*cuStreamWaitValue64)(void*, CUdeviceptr, uint64_t, unsigned) = nullptr;
  CUresult (*cuStreamWriteValue32)(void*, CUdeviceptr, uint32_t, unsigned) = nullptr;  // a captured call's tick
  CUresult (*cuStreamQuery)(void*) = nullptr;
  CUresult (*cuStreamBatchMemOp)(void*, unsigned, void*, unsigned) = nullptr;
  CUresult (*cuStreamIsCapturing)(void*, int*) = nullptr;  // CUstreamCaptureStatus*
  // Graph capture of collectives (optional: without them a capturing stream is refused).
  CUresult (*cuStreamGetCaptureInfo)(void*, int*, uint64_t*, void**, const void**, size_t*) = nullptr;
  CUresult (*cuUserObjectCreate)(void**, void*, void (*)(void*), unsigned, unsigned) = nullptr;
  CUresult (*cuGraphRetainUserObject)(void*, void*, unsigned, unsigned) = nullptr;
  // CUstreamCaptureMode* (cuda.h: GLOBAL 0, THREAD_LOCAL 1, RELAXED 2); optional.
  CUresult (*cuThreadExchangeStreamCaptureMode)(int*) = nullptr;
  // The reduce kernel's (reduce_kernel.cpp checks them before its first use).
  CUresult (*cuStreamGetCtx)(CUstream, CUcontext*) = nullptr;
  CUresult (*cuCtxPushCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxPopCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxGetDevice)(CUdevice*) = nullptr;
  CUresult (*cuCtxGetId)(CUcontext, unsigned long long*) = nullptr;  // CUDA 12.0+
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**) = nullptr;
};

// The entry points, loaded once; status says what is missing.
const CudaApi& api();

// While a stream captures a graph, CUDA refuses "potentially unsafe" calls -
// allocations, host registrations, module loads - from the capturing thread
// (thread-local mode, as torch.cuda.graph uses) or from every thread (global
// mode) with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the refusal
// invalidates the capture (cuda.h, cuThreadExchangeStreamCaptureMode). Our
// allocations are no stream work, so they run in relaxed mode for this
// thread: the guard switches to it and restores the caller's mode.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() {
    const CudaApi& a = api();
    if (a.cuThreadExchangeStreamCaptureMode && a.cuThreadExchangeStreamCaptureMode(&mode_) == 0) active_ = true;
  }
  ~RelaxedCaptureMode() {
    if (active_) (void)api().cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  int mode_ = 2;  // CU_STREAM_CAPTURE_MODE_RELAXED
  bool active_ = false;
};
// CUDA's name of a result ("CUDA_ERROR_..."), and a Status of it.
std::string cu_name(CUresult r);
Status cu_check(CUresult r, const std::string& what);

}  // namespace conccl::nv::cuda_driver
