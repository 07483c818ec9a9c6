// src/backends/nv/ptx_module.cpp - see ptx_module.hpp.
#include "backends/nv/ptx_module.hpp"

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "backends/nv/cuda_api.hpp"

namespace conccl::nv {

namespace {

// cuda.h (CUDA 11/12/13 driver API): the values used here.
using cuda_driver::CUcontext, cuda_driver::CUdevice, cuda_driver::CUfunction, cuda_driver::CUmodule,
    cuda_driver::CUresult;  // cuda_api.hpp
constexpr CUresult kSuccess = cuda_driver::kCudaSuccess;
constexpr CUresult kErrOutOfMemory = 2;         // CUDA_ERROR_OUT_OF_MEMORY
constexpr CUresult kErrJitNotFound = 221;       // CUDA_ERROR_JIT_COMPILER_NOT_FOUND
constexpr CUresult kErrJitDisabled = 223;       // CUDA_ERROR_JIT_COMPILATION_DISABLED
constexpr int kJitErrorLogBuffer = 5;           // CU_JIT_ERROR_LOG_BUFFER
constexpr int kJitErrorLogBufferSizeBytes = 6;  // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
constexpr int kAttrMultiprocessorCount = 16;    // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrMpsEnabled = 133;            // CU_DEVICE_ATTRIBUTE_MPS_ENABLED (CUDA 12.x and later)

// What the kernels need of libcuda (the one table, cuda_api.cpp), checked
// and cuInit made once per process; "" when all is there.
const Status& driver_state() {
  static Status st;
  static std::once_flag once;
  std::call_once(once, [] {
    const cuda_driver::CudaApi& d = cuda_driver::api();
    if (!d.status.ok() && !d.lib) {
      st = Status(d.status).prefix("ConCCL's kernels run through the NVIDIA driver's CUDA library (install the "
                                   "driver or put its directory on LD_LIBRARY_PATH)");
      return;
    }
    std::string missing;
    auto need = [&](const void* f, const char* n) {
      if (!f) missing += std::string(missing.empty() ? "" : ", ") + n;
    };
    need(reinterpret_cast<const void*>(d.cuInit), "cuInit");
    need(reinterpret_cast<const void*>(d.cuGetErrorName), "cuGetErrorName");
    need(reinterpret_cast<const void*>(d.cuStreamGetCtx), "cuStreamGetCtx");
    need(reinterpret_cast<const void*>(d.cuCtxGetCurrent), "cuCtxGetCurrent");
    need(reinterpret_cast<const void*>(d.cuCtxPushCurrent), "cuCtxPushCurrent_v2");
    need(reinterpret_cast<const void*>(d.cuCtxPopCurrent), "cuCtxPopCurrent_v2");
    need(reinterpret_cast<const void*>(d.cuCtxGetDevice), "cuCtxGetDevice");
    need(reinterpret_cast<const void*>(d.cuDeviceGetAttribute), "cuDeviceGetAttribute");
    need(reinterpret_cast<const void*>(d.cuModuleLoadDataEx), "cuModuleLoadDataEx");
    need(reinterpret_cast<const void*>(d.cuModuleGetFunction), "cuModuleGetFunction");
    need(reinterpret_cast<const void*>(d.cuLaunchKernel), "cuLaunchKernel");
    if (!missing.empty()) {
      st = error(Code::unavailable,
                 "libcuda.so.1 lacks " + missing + ": ConCCL's kernels need a CUDA 11.0 or newer driver");
      return;
    }
    if (CUresult r = d.cuInit(0); r != kSuccess)
      st = error(Code::unavailable, "cuInit failed (" + cuda_driver::cu_name(r) +
                                        "): no usable CUDA device for ConCCL's kernels; check nvidia-smi and "
                                        "CUDA_VISIBLE_DEVICES");
  });
  return st;
}

// (context id, entry) -> kernel. Modules are never unloaded: they live as
// long as their context, and there are a few dozen per context at most.
std::mutex g_cache_mu;
std::map<std::pair<uint64_t, std::string>, LoadedKernel> g_cache;

// JITs one module into the current context, trying src's texts in order.
Result<LoadedKernel> load(const PtxSource& src) {
  const cuda_driver::RelaxedCaptureMode relaxed;  // a module load while a stream captures (cuda_api.hpp)
  const cuda_driver::CudaApi& d = cuda_driver::api();
  const std::string instead = src.instead.empty() ? "" : ", or " + src.instead;
  std::string failures;
  for (const std::string& ptx : src.texts()) {
    char log[8192] = {};
    int opts[2] = {kJitErrorLogBuffer, kJitErrorLogBufferSizeBytes};
    void* vals[2] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(log)))};
    CUmodule mod = nullptr;
    const CUresult r = d.cuModuleLoadDataEx(&mod, ptx.c_str(), 2, opts, vals);
    if (r == kSuccess) {
      LoadedKernel k;
      CONCCL_RETURN_IF_ERROR(cu_result(d.cuModuleGetFunction(&k.fn, mod, src.entry.c_str()),
                                       "cuModuleGetFunction(" + src.entry + ")",
                                       "a ConCCL bug (the PTX names this entry): please report it"));
      CUdevice dev = 0;
      CONCCL_RETURN_IF_ERROR(cu_result(d.cuCtxGetDevice(&dev), "cuCtxGetDevice", "check the CUDA context"));
      CONCCL_RETURN_IF_ERROR(cu_result(d.cuDeviceGetAttribute(&k.sms, kAttrMultiprocessorCount, dev),
                                       "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)", "check the CUDA device"));
      // An older driver does not know the attribute (CUDA_ERROR_INVALID_VALUE): no MPS said.
      int mps = 0;
      k.mps = d.cuDeviceGetAttribute(&mps, kAttrMpsEnabled, dev) == kSuccess && mps != 0;
      return k;
    }
    if (r == kErrJitNotFound || r == kErrJitDisabled)
      return error(Code::unavailable, "the CUDA driver cannot compile PTX (" + cuda_driver::cu_name(r) + "): " +
                                          src.entry + " is carried as PTX; install the driver's JIT "
                                          "(libnvidia-ptxjitcompiler) and unset CUDA_DISABLE_PTX_JIT" + instead);
    if (r == kErrOutOfMemory)
      return error(Code::resource_exhausted, "cuModuleLoadDataEx(" + src.entry + ") failed: " +
                                                 cuda_driver::cu_name(r) + "; free GPU memory and retry");
    const size_t at = ptx.find(".target");
    failures += std::string(failures.empty() ? "" : "; ") + ptx.substr(at, ptx.find('\n', at) - at) + ": " +
                cuda_driver::cu_name(r);
    log[sizeof(log) - 1] = 0;
    if (log[0]) failures += " (JIT log: " + std::string(log) + ")";
  }
  return error(Code::internal, "the CUDA driver rejected " + src.entry + " [" + failures +
                                   "]: a ConCCL bug (its generated PTX); please report this message" + instead);
}

Result<LoadedKernel> kernel_for(CUcontext ctx, const PtxSource& src) {
  const cuda_driver::CudaApi& d = cuda_driver::api();
  // cuCtxGetId is unique over the process's life, where a context's handle
  // can be reused after cuCtxDestroy (and then name a stale module).
  unsigned long long id = reinterpret_cast<uintptr_t>(ctx);
  if (d.cuCtxGetId && d.cuCtxGetId(ctx, &id) != kSuccess) id = reinterpret_cast<uintptr_t>(ctx);
  const auto key = std::make_pair(static_cast<uint64_t>(id), src.entry);
  std::lock_guard<std::mutex> lock(g_cache_mu);
  if (auto it = g_cache.find(key); it != g_cache.end()) return it->second;
  Result<LoadedKernel> k = load(src);
  if (k.ok()) g_cache[key] = *k;
  return k;
}

}  // namespace

Status cu_result(int result, const std::string& what, const std::string& fix) {
  if (result == kSuccess) return Status();
  return error(result == kErrOutOfMemory ? Code::resource_exhausted : Code::internal,
               what + " failed: " + cuda_driver::cu_name(result) + "; " + fix);
}

Status ptx_driver_status(const std::string& instead) {
  const Status& st = driver_state();
  if (st.ok() || instead.empty()) return st;
  return error(st.code(), st.message() + "; or " + instead);
}

Status with_ptx_kernel(void* cu_stream, const PtxSource& src, const std::function<Status(const LoadedKernel&)>& launch) {
  CONCCL_RETURN_IF_ERROR(ptx_driver_status(src.instead));
  const cuda_driver::CudaApi& d = cuda_driver::api();
  CUcontext ctx = nullptr, cur = nullptr;
  CONCCL_RETURN_IF_ERROR(cu_result(d.cuStreamGetCtx(cu_stream, &ctx), "cuStreamGetCtx",
                                   "pass a live CUstream (for the default stream, make its context current first: "
                                   "cudaSetDevice or cuCtxSetCurrent)"));
  CONCCL_RETURN_IF_ERROR(cu_result(d.cuCtxGetCurrent(&cur), "cuCtxGetCurrent", "check the CUDA context"));
  // The module loads into, and the launch runs in, the stream's context.
  const bool pushed = cur != ctx;
  if (pushed)
    CONCCL_RETURN_IF_ERROR(cu_result(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent", "check the stream's context"));
  Status st;
  Result<LoadedKernel> k = kernel_for(ctx, src);
  st = k.ok() ? launch(*k) : k.status();
  if (pushed) {
    CUcontext popped = nullptr;
    Status pop = cu_result(d.cuCtxPopCurrent(&popped), "cuCtxPopCurrent", "check the calling thread's context");
    if (st.ok()) st = pop;
  }
  return st;
}

}  // namespace conccl::nv
