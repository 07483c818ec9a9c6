// src/c_api/buffers.cpp - conccl_buffer_*: device memory, CUDA memory registered or
// allocated for the engines, uploads and downloads (the records: conccl_c.cpp).
#include "conccl/conccl.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c_api/c_objects.hpp"

using namespace conccl;
using namespace conccl::capi;

namespace {

// A copy of the record of buffer `id` (one resolve_buffer accepted): the map
// may change as soon as the lock is let go.
conccl_buffer_record record_of(conccl_device& d, uint64_t id) {
  std::lock_guard<std::mutex> lock(d.buffers_mutex);
  return d.buffers.at(id);
}

// Forgets a whole buffer, then frees what its record holds: the buffer is gone
// for every later call even if the backend's free fails.
conccl_status forget_and_free(conccl_device& d, const conccl_buffer_record& rec) {
  {
    std::lock_guard<std::mutex> lock(d.buffers_mutex);
    d.buffers.erase(rec.c.id);
  }
  return report(free_record(d, rec));
}

}  // namespace

extern "C" {

// ---- buffers -------------------------------------------------------------------

conccl_status conccl_buffer_alloc(conccl_device_t dh, int gpu, size_t bytes, conccl_mem_kind kind, conccl_buffer* b) {
  if (enum_bits(kind) == CONCCL_MEM_CUDA) return conccl_buffer_alloc_cuda(dh, gpu, bytes, b);
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(b, "buffer is NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    const int k = enum_bits(kind);
    CONCCL_C_REQUIRE(k == CONCCL_MEM_DEVICE || k == CONCCL_MEM_HOST,
                     "kind must be CONCCL_MEM_DEVICE, CONCCL_MEM_HOST or CONCCL_MEM_CUDA");
    Result<Buffer> r = d.dev->alloc(gpu, bytes, k == CONCCL_MEM_HOST ? MemKind::host : MemKind::device);
    if (!r.ok()) return report(r.status());
    *b = record_buffer(d, *r, conccl_buffer_record::Origin::alloc);
    return report(Status());
  });
}

conccl_status conccl_buffer_free(conccl_device_t dh, const conccl_buffer* b) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(b, "buffer is NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    Result<Buffer> whole = resolve_buffer(d, *b, std::string(current_call()) + ": buffer");
    if (!whole.ok()) return report(whole.status());
    const conccl_buffer_record rec = record_of(d, b->id);
    CONCCL_C_REQUIRE(b->va == rec.c.va && b->size == rec.c.size,
                     "pass the buffer as it was allocated, not a sub-range of it");
    CONCCL_C_REQUIRE(rec.origin != conccl_buffer_record::Origin::cuda_registered,
                     "the buffer was registered with conccl_buffer_register_cuda: unregister it with "
                     "conccl_buffer_unregister_cuda");
    return forget_and_free(d, rec);
  });
}

conccl_status conccl_buffer_cuda_pointer(conccl_device_t dh, const conccl_buffer* b, uint64_t* ptr) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(b && ptr, "buffer and ptr must not be NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    Result<Buffer> r = resolve_buffer(d, *b, std::string(current_call()) + ": buffer");
    if (!r.ok()) return report(r.status());
    std::lock_guard<std::mutex> lock(d.buffers_mutex);
    const conccl_buffer_record& rec = d.buffers.at(b->id);
    if (rec.origin != conccl_buffer_record::Origin::cuda_alloc)
      return fail(CONCCL_ERR_NOT_FOUND, std::string(current_call()) + ": buffer " + std::to_string(b->id) +
                                            " was not made by conccl_buffer_alloc_cuda (for memory you registered, "
                                            "CUDA's pointer is the one you passed)");
    *ptr = rec.cuda.ptr + (b->va - rec.c.va);
    return report(Status());
  });
}

conccl_status conccl_device_cuda_ordinal(conccl_device_t dh, int gpu, int* ordinal) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(ordinal, "ordinal is NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    if (!nv::native(*d.dev))
      return fail(CONCCL_ERR_UNAVAILABLE, std::string(current_call()) + ": CUDA memory needs the nv backend");
    Result<int> o = nv::cuda_ordinal(*d.dev, gpu);
    if (!o.ok()) return report(o.status());
    *ordinal = *o;
    return report(Status());
  });
}

conccl_status conccl_buffer_register_cuda(conccl_device_t dh, int gpu, uint64_t ptr, size_t bytes, conccl_buffer* b) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(b, "buffer is NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    Result<Buffer> r = nv::register_cuda(*d.dev, ptr, bytes, gpu);
    if (!r.ok()) return report(r.status());
    *b = record_buffer(d, *r, conccl_buffer_record::Origin::cuda_registered);
    return report(Status());
  });
}

conccl_status conccl_buffer_unregister_cuda(conccl_device_t dh, const conccl_buffer* b) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(b, "buffer is NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    Result<Buffer> r = resolve_buffer(d, *b, std::string(current_call()) + ": buffer");
    if (!r.ok()) return report(r.status());
    const conccl_buffer_record rec = record_of(d, b->id);
    CONCCL_C_REQUIRE(rec.origin == conccl_buffer_record::Origin::cuda_registered,
                     rec.origin == conccl_buffer_record::Origin::cuda_alloc
                         ? "buffer came from conccl_buffer_alloc_cuda: free it with conccl_buffer_free"
                         : "buffer came from conccl_buffer_alloc: free it with conccl_buffer_free");
    CONCCL_C_REQUIRE(b->va == rec.c.va && b->size == rec.c.size,
                     "pass the buffer as it was registered, not a sub-range of it");
    return forget_and_free(d, rec);
  });
}

conccl_status conccl_buffer_alloc_cuda(conccl_device_t dh, int gpu, size_t bytes, conccl_buffer* b) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(b, "buffer is NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    CONCCL_C_REQUIRE(bytes > 0, "bytes must be > 0");
    if (!nv::native(*d.dev))
      return fail(CONCCL_ERR_UNAVAILABLE,
                  std::string(current_call()) + ": CUDA memory needs the nv backend; use conccl_buffer_alloc");
    Result<int> ordinal = nv::cuda_ordinal(*d.dev, gpu);
    if (!ordinal.ok()) return report(ordinal.status());
    Result<nv::CudaAlloc> a = nv::cuda_alloc(bytes, *ordinal);
    if (!a.ok()) return report(a.status());
    Result<Buffer> r = nv::register_cuda(*d.dev, a->ptr, bytes, gpu);
    if (!r.ok()) {
      nv::CudaAlloc undo = *a;
      (void)nv::cuda_free(undo);
      return report(r.status());
    }
    *b = record_buffer(d, *r, conccl_buffer_record::Origin::cuda_alloc, *a);
    return report(Status());
  });
}

conccl_status conccl_buffer_upload(conccl_device_t dh, const conccl_buffer* b, size_t offset, const void* src,
                                   size_t bytes, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(b && (src || bytes == 0), "buffer and src must not be NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    Result<Buffer> buf = resolve_buffer(d, *b, std::string(current_call()) + ": buffer");
    if (!buf.ok()) return report(buf.status());
    Result<Stager*> s = stager_for(d, buf->kind == MemKind::host ? -1 : buf->gpu);
    if (!s.ok()) return report(s.status());
    return report((*s)->upload(*buf, offset, src, bytes, after(timeout_ms)));
  });
}

conccl_status conccl_buffer_download(conccl_device_t dh, void* dst, const conccl_buffer* b, size_t offset, size_t bytes,
                                     uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(b && (dst || bytes == 0), "buffer and dst must not be NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    Result<Buffer> buf = resolve_buffer(d, *b, std::string(current_call()) + ": buffer");
    if (!buf.ok()) return report(buf.status());
    Result<Stager*> s = stager_for(d, buf->kind == MemKind::host ? -1 : buf->gpu);
    if (!s.ok()) return report(s.status());
    return report((*s)->download(dst, *buf, offset, bytes, after(timeout_ms)));
  });
}

}  // extern "C"
