// src/backends/nv/nv_adapter_cuda.cpp - GenericDevice's CUDA side: CUDA
// memory registered with the engines (in the slot's window across
// processes), the CUDA device of each GPU, and compute memory and the reduce
// kernel for reductions.
#include "backends/nv/nv_adapter.hpp"

namespace conccl::nv {

nv::Gpu* native(conccl::Device& device, int gpu) {
  GenericDevice* g = generic(device);
  if (!g || gpu < 0 || static_cast<size_t>(gpu) >= g->gpus()) return nullptr;
  return &g->native(static_cast<size_t>(gpu));
}

Result<conccl::Buffer> register_cuda(conccl::Device& device, uint64_t ptr, size_t bytes, int gpu) {
  GenericDevice* g = generic(device);
  if (!g) return not_nv("register_cuda");
  if (gpu < 0 || static_cast<size_t>(gpu) >= g->gpus())
    return error(Code::invalid_argument, "register_cuda for GPU " + std::to_string(gpu) + ": this nv device has " +
                                             std::to_string(g->gpus()) + " GPU(s)");
  conccl::Buffer b;
  if (g->process_slot() >= 0) {
    // One process per rank: mapped into the slot's window (va != ptr).
    Result<uint64_t> va = g->register_cuda_in_window(ptr, bytes, gpu);
    if (!va.ok()) return va.status();
    b.va = *va;
  } else {
    CONCCL_RETURN_IF_ERROR(g->register_cuda(ptr, bytes));
    b.va = ptr;
  }
  b.size = bytes;
  b.gpu = gpu;
  b.kind = conccl::MemKind::device;
  b.id = ptr;
  return b;
}

Status unregister_cuda(conccl::Device& device, const conccl::Buffer& buffer) {
  GenericDevice* g = generic(device);
  if (!g) return not_nv("unregister_cuda");
  if (g->process_slot() >= 0) return g->unregister_cuda_in_window(buffer.va, buffer.size);
  return g->unregister_cuda(buffer.va, buffer.size);
}

Status share_signals_with_cuda(conccl::Device& device) {
  GenericDevice* g = generic(device);
  if (!g) return not_nv("share_signals_with_cuda");
  return g->share_with_cuda();
}

Result<int> cuda_ordinal(conccl::Device& device, int gpu) {
  if (!generic(device)) return not_nv("cuda_ordinal");
  if (gpu < 0 || gpu >= device.gpu_count())
    return error(Code::invalid_argument, "GPU " + std::to_string(gpu) + " does not exist (the device has " +
                                             std::to_string(device.gpu_count()) + ")");
  return cuda_device_for_uuid(native(device, gpu)->info().uuid);
}

Result<conccl::Buffer> GenericDevice::alloc_for_compute(int gpu, size_t bytes) {
  Result<int> ordinal = cuda_ordinal(*this, gpu);
  if (!ordinal.ok()) return ordinal.status().prefix("CUDA memory for compute (alloc_for_compute)");
  Result<CudaAlloc> a = cuda_alloc(bytes, *ordinal);
  if (!a.ok()) return a.status().prefix("CUDA memory for compute (alloc_for_compute)");
  Result<conccl::Buffer> b = nv::register_cuda(*this, a->ptr, bytes, gpu);
  if (!b.ok()) {
    CudaAlloc undo = *a;
    (void)cuda_free(undo);
    return b.status().prefix("CUDA memory for compute (alloc_for_compute)");
  }
  compute_allocs_[b->va] = *a;
  return b;
}

Result<conccl::Buffer> GenericDevice::alloc_cuda_memory(int gpu, size_t bytes) {
  if (gpu < 0 || static_cast<size_t>(gpu) >= devs_.size())
    return error(Code::not_found, "CUDA memory on GPU " + std::to_string(gpu) + " requested; this nv device has " +
                                      std::to_string(devs_.size()));
  if (bytes == 0) return error(Code::invalid_argument, "cannot allocate 0 bytes");
  Result<conccl::Buffer> b = alloc_for_compute(gpu, bytes);
  if (!b.ok()) return b.status();
  // conccl::Device promises zeroed memory.
  Status st = devs_[static_cast<size_t>(gpu)]->zero(b->va, (bytes + 3) & ~size_t(3), Deadline::after_ms(10000));
  if (!st.ok()) {
    (void)free_for_compute(*b);
    return st.prefix("zeroing " + std::to_string(bytes) + " bytes of CUDA memory");
  }
  b->kind = conccl::MemKind::cuda;
  return b;
}

Status GenericDevice::free_for_compute(const conccl::Buffer& b) {
  auto it = compute_allocs_.find(b.va);
  if (it == compute_allocs_.end()) return free(b);
  Status st = nv::unregister_cuda(*this, b);
  CudaAlloc a = it->second;
  compute_allocs_.erase(it);
  Status f = cuda_free(a);
  return st.ok() ? f : st;
}

Status GenericDevice::reduce_now(const DeviceReduceStep& step, Deadline deadline) {
  Result<int> ordinal = cuda_ordinal(*this, step.gpu);
  if (!ordinal.ok()) return ordinal.status();
  // The legacy default stream of the GPU's primary context: the kernel,
  // then the host waits for it.
  return run_in_device_context(*ordinal, [&] {
    CONCCL_RETURN_IF_ERROR(launch_reduce(nullptr, step));
    return stream_host_sync(nullptr, deadline).prefix("waiting for the reduce kernel");
  });
}

}  // namespace conccl::nv
