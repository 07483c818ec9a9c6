// src/backends/nv/cuda_interop.cpp - CUDA as the nv backend's memory model.
//
// the CUDA driver API (cuda.h: cuMemCreate, cuMemExportToShareableHandle): a CUDA VMM allocation made
// with cuMemCreate and the POSIX-fd handle type is exported as an RM export
// fd on /dev/nvidiactl, imported into our RM client (import_fd) and mapped at
// CUDA's own virtual address, so one pointer serves CUDA kernels, CUDA stream
// memory operations and our copy-engine methods. Plain cudaMalloc memory has
// no allocation handle and cannot be imported (§3).
//
// libcuda is loaded with dlopen (cuda_api.hpp, with the project's own
// definitions of the cuda.h types used), so the library builds and runs
// without CUDA; every entry point then returns Code::unavailable.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "backends/nv/cuda_api.hpp"
#include "backends/nv/rm_abi.hpp"
#include "backends/nv/nv_device.hpp"

namespace conccl::nv {

using namespace cuda_driver;

namespace {

// cuInit, and a current context for the calling thread (device's primary one
// if the thread has none; the CUDA runtime binds the same context).
Status ensure_context(int cuda_device) {
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuInit(0), "cuInit"));
  CUcontext ctx = nullptr;
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent"));
  if (ctx) return Status();
  CUdevice dev = 0;
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuDeviceGet(&dev, cuda_device), "cuDeviceGet(" + std::to_string(cuda_device) + ")"));
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain"));
  return cu_check(a.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

constexpr const char* kUseVmm =
    "allocate with cuMemCreate(POSIX_FILE_DESCRIPTOR handle type) or conccl::nv::cuda_alloc instead "
    "(PyTorch: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)";

}  // namespace

Status run_in_device_context(int cuda_device, const std::function<Status()>& fn) {
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuInit(0), "cuInit"));
  CUdevice dev = 0;
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuDeviceGet(&dev, cuda_device), "cuDeviceGet(" + std::to_string(cuda_device) + ")"));
  CUcontext primary = nullptr, before = nullptr;
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuDevicePrimaryCtxRetain(&primary, dev), "cuDevicePrimaryCtxRetain"));
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuCtxGetCurrent(&before), "cuCtxGetCurrent"));
  if (before != primary) CONCCL_RETURN_IF_ERROR(cu_check(a.cuCtxSetCurrent(primary), "cuCtxSetCurrent"));
  Status st = fn();
  // The caller's thread gets its context back (the primary context stays
  // retained: the CUDA runtime keeps it alive for the process anyway).
  if (before != primary) {
    Status back = cu_check(a.cuCtxSetCurrent(before), "cuCtxSetCurrent (restoring the caller's context)");
    if (st.ok()) st = back;
  }
  return st;
}

Status cuda_available() { return api().status; }

Result<int> cuda_device_for_uuid(const uint8_t (&uuid)[16]) {
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuInit(0), "cuInit"));
  int n = 0;
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuDeviceGetCount(&n), "cuDeviceGetCount"));
  for (int i = 0; i < n; ++i) {
    CUdevice d = 0;
    CUuuid u{};
    if (a.cuDeviceGet(&d, i) != kCudaSuccess || a.cuDeviceGetUuid(&u, d) != kCudaSuccess) continue;
    if (std::memcmp(u.bytes, uuid, 16) == 0) return i;
  }
  return error(Code::not_found, "no CUDA device has this GPU's UUID (" + std::to_string(n) +
                                    " CUDA devices; is CUDA_VISIBLE_DEVICES hiding it?)");
}

Result<CudaAlloc> cuda_alloc(size_t bytes, int cuda_device) {
  const RelaxedCaptureMode relaxed;  // also while a stream captures (cuda_api.hpp)
  if (bytes == 0) return error(Code::invalid_argument, "cuda_alloc of 0 bytes");
  CONCCL_RETURN_IF_ERROR(ensure_context(cuda_device));
  const CudaApi& a = api();
  CUmemAllocationProp prop{};
  prop.type = kMemAllocationTypePinned;
  prop.requestedHandleTypes = kMemHandleTypePosixFd;
  prop.location = {kMemLocationTypeDevice, cuda_device};
  size_t gran = 0;
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuMemGetAllocationGranularity(&gran, &prop, kMemAllocGranularityRecommended),
                                  "cuMemGetAllocationGranularity"));
  if (gran == 0) gran = 2u << 20;
  CudaAlloc out;
  out.device = cuda_device;
  out.size = (bytes + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle h = 0;
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuMemCreate(&h, out.size, &prop, 0),
                                  "cuMemCreate(" + std::to_string(out.size) + " bytes, POSIX fd handle type)"));
  CUdeviceptr p = 0;
  Status st = cu_check(a.cuMemAddressReserve(&p, out.size, gran, 0, 0), "cuMemAddressReserve");
  if (st.ok()) {
    st = cu_check(a.cuMemMap(p, out.size, 0, h, 0), "cuMemMap");
    if (st.ok()) {
      CUmemAccessDesc acc{{kMemLocationTypeDevice, cuda_device}, kMemAccessProtReadWrite};
      st = cu_check(a.cuMemSetAccess(p, out.size, &acc, 1), "cuMemSetAccess");
      if (!st.ok()) (void)a.cuMemUnmap(p, out.size);
    }
    if (!st.ok()) (void)a.cuMemAddressFree(p, out.size);
  }
  if (!st.ok()) {
    (void)a.cuMemRelease(h);
    return st;
  }
  out.ptr = p;
  out.handle = h;
  return out;
}

Status cuda_free(CudaAlloc& c) {
  const RelaxedCaptureMode relaxed;  // also while a stream captures (cuda_api.hpp)
  if (!c.ptr) return Status();
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  Status s1 = cu_check(a.cuMemUnmap(c.ptr, c.size), "cuMemUnmap");
  Status s2 = cu_check(a.cuMemAddressFree(c.ptr, c.size), "cuMemAddressFree");
  Status s3 = cu_check(a.cuMemRelease(c.handle), "cuMemRelease");
  c = CudaAlloc{};
  return !s1.ok() ? s1 : !s2.ok() ? s2 : s3;
}

// ---- registration -----------------------------------------------------------------

const Gpu::Registration* Gpu::find_registration(uint64_t va) const {
  auto it = registered_.upper_bound(va);
  if (it == registered_.begin()) return nullptr;
  --it;
  const Allocation& b = it->second.buffer;
  return va >= b.va && va < b.va + b.size ? &it->second : nullptr;
}

bool Gpu::is_registered(uint64_t va, size_t bytes) const {
  uint64_t p = va;
  const uint64_t end = va + bytes;
  do {
    const Registration* r = find_registration(p);
    if (!r) return false;
    p = r->buffer.va + r->buffer.size;
  } while (p < end);
  return true;
}

Status Gpu::register_cuda(uint64_t ptr, size_t bytes) {
  const RelaxedCaptureMode relaxed;  // also while a stream captures (cuda_api.hpp)
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  if (ptr == 0 || bytes == 0)
    return error(Code::invalid_argument, "register_cuda(" + hex(ptr) + ", " + std::to_string(bytes) +
                                             "): pointer and size must be non-zero");
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  {
    // A thread without a current context: this GPU's primary context.
    CUcontext ctx = nullptr;
    if (a.cuInit(0) == kCudaSuccess && a.cuCtxGetCurrent(&ctx) == kCudaSuccess && !ctx) {
      Result<int> d = cuda_device_for_uuid(info_.uuid);
      CONCCL_RETURN_IF_ERROR(ensure_context(d.ok() ? *d : 0));
    }
  }
  std::vector<uint64_t> taken;  // allocation bases referenced by this call
  auto rollback = [&](Status s) {
    for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
      Registration& r = registered_[*it];
      if (--r.refs == 0) {
        (void)free(r.buffer);
        registered_.erase(*it);
      }
    }
    return s;
  };
  const uint64_t end = ptr + bytes;
  uint64_t p = ptr;
  while (p < end) {
    if (const Registration* r = find_registration(p)) {
      const uint64_t base = r->buffer.va;
      ++registered_[base].refs;
      taken.push_back(base);
      p = r->buffer.va + r->buffer.size;
      continue;
    }
    Result<CudaAllocation> ca = export_cuda(p);
    if (!ca.ok()) return rollback(ca.status());
    const uint64_t base = ca->base;
    const size_t size = ca->size;
    const int fd = ca->fd;
    Result<Allocation> b = import_fd(fd, base, size);
    ::close(fd);
    if (!b.ok()) return rollback(b.status().prefix("registering CUDA memory at " + hex(base)));
    // The import is the whole physical allocation; a mapping of only part of
    // it (cuMemMap with an offset) would put other bytes at these addresses.
    abi::InfoEntry e[2] = {{abi::kSurfaceInfoPhysSizeLo, 0}, {abi::kSurfaceInfoPhysSizeHi, 0}};
    abi::InfoListParams q{};
    q.listSize = 2;
    q.list = reinterpret_cast<uint64_t>(e);
    if (rm_control(b->handle, abi::kCtrlGetSurfaceInfo, &q, sizeof q, "GET_SURFACE_INFO (physical size)").ok()) {
      const uint64_t phys = (uint64_t(e[1].data) << 32) | e[0].data;
      if (phys && phys != size) {
        Allocation tmp = *b;
        (void)free(tmp);
        return rollback(error(Code::invalid_argument,
                              "the CUDA mapping at " + hex(base) + " covers " + std::to_string(size) +
                                  " bytes of a " + std::to_string(phys) +
                                  "-byte allocation: partial mappings (cuMemMap with an offset) are not supported; "
                                  "map whole allocations"));
      }
    }
    registered_[base] = Registration{*b, 1};
    taken.push_back(base);
    log("registered CUDA allocation " + hex(base) + "+" + hex(size) + " (handle " + hex(b->handle) + ")");
    p = base + size;
  }
  return Status();
}

Result<Gpu::CudaAllocation> Gpu::export_cuda(uint64_t p) {
  const RelaxedCaptureMode relaxed;  // also while a stream captures (cuda_api.hpp)
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  CUmemGenericAllocationHandle h = 0;
  CUresult rr = a.cuMemRetainAllocationHandle(&h, reinterpret_cast<void*>(p));
  if (rr != kCudaSuccess)
    return error(Code::invalid_argument,
                 "CUDA memory at " + hex(p) + " is not a CUDA VMM allocation (cuMemRetainAllocationHandle: " +
                     cu_name(rr) +
                     "): plain cudaMalloc/cuMemAlloc memory has no allocation handle and cannot be "
                     "imported by another RM client (docs/nv-backend.md); " + kUseVmm);
  CUdeviceptr base = 0;
  size_t size = 0;
  Status st = cu_check(a.cuMemGetAddressRange(&base, &size, p), "cuMemGetAddressRange(" + hex(p) + ")");
  int fd = -1;
  if (st.ok()) {
    rr = a.cuMemExportToShareableHandle(&fd, h, kMemHandleTypePosixFd, 0);
    if (rr != kCudaSuccess)
      st = error(Code::invalid_argument,
                 "the CUDA allocation at " + hex(base) + " cannot be exported as a POSIX fd (" + cu_name(rr) +
                     "): it was created without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes; " +
                     kUseVmm);
  }
  (void)a.cuMemRelease(h);  // drop the reference cuMemRetainAllocationHandle took
  if (!st.ok()) return st;
  return CudaAllocation{static_cast<uint64_t>(base), size, fd};
}

Result<Allocation> Gpu::import_in_window(int fd, size_t bytes) {
  Result<std::vector<Allocation>> b = import_span_in_window({CudaAllocation{0, bytes, fd}});
  if (!b.ok()) return b.status();
  return b->front();
}

Result<std::vector<Allocation>> Gpu::import_span_in_window(const std::vector<CudaAllocation>& pieces) {
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  if (pieces.empty()) return std::vector<Allocation>{};
  const uint64_t first = pieces.front().base;
  for (size_t k = 1; k < pieces.size(); ++k)
    if (pieces[k].base != pieces[k - 1].base + pieces[k - 1].size)
      return error(Code::invalid_argument, "CUDA allocations at " + hex(pieces[k - 1].base) + " and " +
                                               hex(pieces[k].base) + " are not adjacent");
  const uint64_t span = pieces.back().base + pieces.back().size - first;
  Result<uint64_t> va = reserve_va(span, 2u << 20);
  if (!va.ok()) return va.status().prefix("an address for imported memory");
  std::vector<Allocation> out;
  Status st;
  size_t k = 0;
  for (; k < pieces.size() && st.ok(); ++k) {
    Result<Allocation> b = import_fd(pieces[k].fd, *va + (pieces[k].base - first), pieces[k].size);
    if (!b.ok()) {
      st = b.status();
      break;
    }
    for (Allocation& x : buffers_)
      if (x.handle == b->handle && x.va == b->va) x.windowed = true;
    b->windowed = true;
    out.push_back(*b);
  }
  if (st.ok()) return out;
  // Undo: the pieces imported give their addresses back when freed; the
  // rest of the span is given back here.
  for (Allocation& b : out) (void)free(b);
  for (size_t j = out.size(); j < pieces.size(); ++j) release_va(*va + (pieces[j].base - first), pieces[j].size);
  return st;
}

Status Gpu::unregister_cuda(uint64_t ptr, size_t bytes) {
  const RelaxedCaptureMode relaxed;  // also while a stream captures (cuda_api.hpp)
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  if (bytes == 0) return error(Code::invalid_argument, "unregister_cuda of 0 bytes");
  std::vector<uint64_t> bases;
  for (uint64_t p = ptr; p < ptr + bytes;) {
    const Registration* r = find_registration(p);
    if (!r)
      return error(Code::not_found, "CUDA memory at " + hex(p) + " is not registered with this device "
                                                                 "(register_cuda and unregister_cuda must pair up)");
    bases.push_back(r->buffer.va);
    p = r->buffer.va + r->buffer.size;
  }
  Status out;
  for (uint64_t base : bases) {
    Registration& r = registered_[base];
    if (--r.refs > 0) continue;
    Status s = free(r.buffer);  // UVM_FREE + RM free of our dup; CUDA's memory is untouched
    if (!s.ok() && out.ok()) out = s;
    registered_.erase(base);
  }
  return out;
}

Result<uint64_t> Gpu::alloc_cuda_slot() {
  const RelaxedCaptureMode relaxed;  // also while a stream captures (cuda_api.hpp)
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  if (!cuda_slot_ptr_) {
    Result<int> dev = cuda_device_for_uuid(info_.uuid);
    if (!dev.ok()) return dev.status();
    Result<CudaAlloc> c = cuda_alloc(2u << 20, *dev);
    if (!c.ok()) return c.status().prefix("allocating the CUDA semaphore page");
    Status st = register_cuda(c->ptr, c->size);
    if (st.ok() && !channels_.empty()) st = zero(c->ptr, c->size, Deadline::after_ms(5000));
    if (!st.ok()) {
      if (is_registered(c->ptr, c->size)) (void)unregister_cuda(c->ptr, c->size);
      (void)cuda_free(*c);
      return st.prefix("preparing the CUDA semaphore page");
    }
    cuda_slot_ptr_ = c->ptr;
    cuda_slot_size_ = c->size;
    cuda_slot_handle_ = c->handle;
    cuda_slot_device_ = c->device;
    next_cuda_slot_ = 0;
  }
  if (next_cuda_slot_ + hopper::kSemaphoreSlotBytes > cuda_slot_size_)
    return error(Code::resource_exhausted,
                 "all " + std::to_string(cuda_slot_size_ / 16) + " CUDA semaphore slots are in use");
  const uint64_t va = cuda_slot_ptr_ + next_cuda_slot_;
  next_cuda_slot_ += hopper::kSemaphoreSlotBytes;
  return va;
}

// The host slot page (alloc_slot) is our OS-descriptor mapping of anonymous
// pages at one VA for CPU and GPU. cuMemHostRegister pins the same pages for
// CUDA; with unified addressing CUDA's device pointer for them is that VA, so
// one address serves the CPU, CUDA streams and our channels
// (measured on the H200 in both directions: docs/perf/h200.md, run 9).
Status Gpu::cuda_host_register(void* host, size_t bytes) {
  const RelaxedCaptureMode relaxed;  // also while a stream captures (cuda_api.hpp)
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  if (!a.cuMemHostRegister || !a.cuMemHostGetDevicePointer || !a.cuMemHostUnregister)
    return error(Code::unavailable, "this libcuda lacks cuMemHostRegister/cuMemHostGetDevicePointer/"
                                    "cuMemHostUnregister; use alloc_cuda_slot (device memory) instead");
  Result<int> dev = cuda_device_for_uuid(info_.uuid);
  if (!dev.ok()) return dev.status();
  CONCCL_RETURN_IF_ERROR(ensure_context(*dev));
  constexpr unsigned kPortable = 0x01, kDeviceMap = 0x02;  // CU_MEMHOSTREGISTER_PORTABLE | _DEVICEMAP
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuMemHostRegister(host, bytes, kPortable | kDeviceMap),
                                  "cuMemHostRegister of " + std::to_string(bytes) + " bytes at " +
                                      hex(reinterpret_cast<uint64_t>(host))));
  CUdeviceptr p = 0;
  Status st = cu_check(a.cuMemHostGetDevicePointer(&p, host, 0), "cuMemHostGetDevicePointer");
  if (st.ok() && p != reinterpret_cast<uint64_t>(host))
    st = error(Code::unavailable, "CUDA maps host memory at " + hex(p) + ", not at its host address " +
                                      hex(reinterpret_cast<uint64_t>(host)) +
                                      " (no unified addressing?); use alloc_cuda_slot instead");
  if (!st.ok()) (void)a.cuMemHostUnregister(host);
  return st;
}

Status Gpu::cuda_host_unregister(void* host) {
  const RelaxedCaptureMode relaxed;  // also while a stream captures (cuda_api.hpp)
  const CudaApi& a = api();
  if (!a.cuMemHostUnregister) return error(Code::unavailable, "libcuda lacks cuMemHostUnregister");
  return cu_check(a.cuMemHostUnregister(host), "cuMemHostUnregister");
}

Status Gpu::share_slots_with_cuda() {
  const RelaxedCaptureMode relaxed;  // also while a stream captures (cuda_api.hpp)
  if (fd_ctl_ < 0 || !slots_.host) return error(Code::unavailable, "the nv device is closed");
  if (slots_shared_) return Status();
  CONCCL_RETURN_IF_ERROR(cuda_host_register(slots_.host, slots_.size).prefix("the semaphore slot page"));
  slots_shared_ = true;
  return Status();
}

// cuda.h: CU_STREAM_WRITE_VALUE_DEFAULT (0) orders the store after the
// stream's prior work and fences its memory writes first;
// CU_STREAM_WAIT_VALUE_GEQ (0) compares as (int64_t)(*addr - value) >= 0.
Status stream_write_value64(void* stream, uint64_t va, uint64_t value) {
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  if (!a.cuStreamWriteValue64) return error(Code::unavailable, "libcuda lacks cuStreamWriteValue64_v2 (CUDA 11.7+)");
  return cu_check(a.cuStreamWriteValue64(stream, va, value, 0), "cuStreamWriteValue64 at " + hex(va));
}

// cuda.h: CU_STREAM_WRITE_VALUE_DEFAULT (0) fences the stream's earlier
// writes before this one, which a captured call's tick relies on (its reset
// of the end signal is seen before its flag).
Status stream_write_value32(void* stream, uint64_t va, uint32_t value) {
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  if (!a.cuStreamWriteValue32) return error(Code::unavailable, "libcuda lacks cuStreamWriteValue32_v2 (CUDA 11.7+)");
  return cu_check(a.cuStreamWriteValue32(stream, va, value, 0), "cuStreamWriteValue32 at " + hex(va));
}

Status stream_wait_value64(void* stream, uint64_t va, uint64_t value) {
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  if (!a.cuStreamWaitValue64) return error(Code::unavailable, "libcuda lacks cuStreamWaitValue64_v2 (CUDA 11.7+)");
  return cu_check(a.cuStreamWaitValue64(stream, va, value, 0), "cuStreamWaitValue64 at " + hex(va));
}

// cuda.h: CUstreamCaptureStatus NONE (0), ACTIVE (1), INVALIDATED (2). A
// call is refused on a stream that captures: its stream operations would
// be recorded for replay while its engine lists run now (issue #29).
Status stream_not_capturing(void* stream) {
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  if (!a.cuStreamIsCapturing) return Status();  // a driver before CUDA 10: no graphs to capture into
  int capture = 0;
  CONCCL_RETURN_IF_ERROR(cu_check(a.cuStreamIsCapturing(stream, &capture),
                                  "cuStreamIsCapturing (a stream another thread captures globally cannot be used "
                                  "now)"));
  if (capture == 0) return Status();
  return error(Code::invalid_argument,
               std::string("the CUDA stream is ") + (capture == 1 ? "capturing a CUDA graph" : "in an invalidated capture") +
                   ": a collective's copies run on ConCCL's own copy-engine channels, which a graph cannot record. "
                   "Make the call outside the capture, or unset CONCCL_CUDA_GRAPHS=0 so that window calls are "
                   "recorded into the graph (docs/graphs.md)");
}


// One element of cuStreamBatchMemOp's array: cuda.h's
// CUstreamBatchMemOpParams union (48 bytes: pad[6]), in its waitValue /
// writeValue form (operation, address, value64, flags, alias).
struct BatchMemOp {
  uint32_t operation = 0;  // CU_STREAM_MEM_OP_WAIT_VALUE_64 = 4, CU_STREAM_MEM_OP_WRITE_VALUE_64 = 5
  uint32_t pad0 = 0;
  uint64_t address = 0;
  uint64_t value64 = 0;
  uint32_t flags = 0;  // CU_STREAM_WAIT_VALUE_GEQ / CU_STREAM_WRITE_VALUE_DEFAULT: 0
  uint32_t pad1 = 0;
  uint64_t alias = 0;  // for the driver's use
  uint64_t pad2 = 0;
};
static_assert(sizeof(BatchMemOp) == 48, "CUstreamBatchMemOpParams is 48 bytes");

Status stream_batch64(void* stream, std::span<const StreamMemOp> ops) {
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  if (!a.cuStreamBatchMemOp || ops.size() > 16) {
    for (const StreamMemOp& op : ops)
      CONCCL_RETURN_IF_ERROR(op.wait ? stream_wait_value64(stream, op.va, op.value)
                                     : stream_write_value64(stream, op.va, op.value));
    return Status();
  }
  BatchMemOp p[16];
  for (size_t i = 0; i < ops.size(); ++i) {
    p[i] = BatchMemOp{};
    p[i].operation = ops[i].wait ? 4 : 5;
    p[i].address = ops[i].va;
    p[i].value64 = ops[i].value;
  }
  return cu_check(a.cuStreamBatchMemOp(stream, static_cast<unsigned>(ops.size()), p, 0),
                  "cuStreamBatchMemOp of " + std::to_string(ops.size()) + " operations");
}

// cuda.h: cuStreamQuery returns CUDA_SUCCESS once the stream's work is done
// and CUDA_ERROR_NOT_READY (600) while some is pending; anything else is an
// error of that work or of the stream.
Status stream_host_sync(void* stream, Deadline deadline) {
  const CudaApi& a = api();
  CONCCL_RETURN_IF_ERROR(a.status);
  if (!a.cuStreamQuery) return error(Code::unavailable, "libcuda lacks cuStreamQuery");
  constexpr CUresult kNotReady = static_cast<CUresult>(600);
  for (auto nap = std::chrono::microseconds(2);; nap = std::min(nap * 2, std::chrono::microseconds(200))) {
    const CUresult r = a.cuStreamQuery(stream);
    if (r != kNotReady) return cu_check(r, "cuStreamQuery");
    if (deadline.expired())
      return error(Code::timeout, "the CUDA stream's earlier work did not finish before the deadline");
    std::this_thread::sleep_for(nap);
  }
}

void Gpu::release_cuda() {
  const RelaxedCaptureMode relaxed;  // also while a stream captures (cuda_api.hpp)
  for (auto& [base, r] : registered_) {
    Status s = free(r.buffer);
    if (!s.ok()) log("teardown: releasing CUDA registration " + hex(base) + ": " + s.to_string());
  }
  registered_.clear();
  if (cuda_slot_ptr_) {
    CudaAlloc c{cuda_slot_ptr_, cuda_slot_size_, cuda_slot_handle_, cuda_slot_device_};
    Status s = cuda_free(c);
    if (!s.ok()) log("teardown: freeing the CUDA semaphore page: " + s.to_string());
    cuda_slot_ptr_ = cuda_slot_handle_ = cuda_slot_size_ = next_cuda_slot_ = 0;
  }
  if (slots_shared_) {
    const CudaApi& a = api();
    if (a.cuMemHostUnregister && a.cuMemHostUnregister(slots_.host) != kCudaSuccess)
      log("teardown: cuMemHostUnregister of the slot page failed");
    slots_shared_ = false;
  }
}

}  // namespace conccl::nv
