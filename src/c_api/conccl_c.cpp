// src/c_api/conccl_c.cpp - the C API (include/conccl/conccl.h) over the C++
// library. Each entry point: find its handles (src/c_api/handles.hpp: a
// stale or wrong handle is an error, never a use of freed memory), check
// the caller's buffers against the device's allocations, translate, call,
// turn the Status into a conccl_status and the thread's last-error message.
// A C++ exception never crosses: guard() catches it and reports
// CONCCL_ERR_INTERNAL (std::bad_alloc: CONCCL_ERR_RESOURCE_EXHAUSTED).
#include "conccl/conccl.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "c_api/c_objects.hpp"
#include "conccl/bootstrap.hpp"

using namespace conccl;
using namespace conccl::capi;

namespace conccl::capi {

std::string& last_error() {
  thread_local std::string s;
  return s;
}

const char*& current_call() {
  thread_local const char* call = "conccl";
  return call;
}

conccl_status code_to_c(Code c) {
  switch (c) {
    case Code::ok: return CONCCL_OK;
    case Code::invalid_argument: return CONCCL_ERR_INVALID_ARGUMENT;
    case Code::out_of_range: return CONCCL_ERR_OUT_OF_RANGE;
    case Code::not_found: return CONCCL_ERR_NOT_FOUND;
    case Code::timeout: return CONCCL_ERR_TIMEOUT;
    case Code::device_fault: return CONCCL_ERR_DEVICE_FAULT;
    case Code::unavailable: return CONCCL_ERR_UNAVAILABLE;
    case Code::resource_exhausted: return CONCCL_ERR_RESOURCE_EXHAUSTED;
    case Code::busy: return CONCCL_ERR_BUSY;
    case Code::verify_failed: return CONCCL_ERR_VERIFY_FAILED;
    case Code::internal: return CONCCL_ERR_INTERNAL;
  }
  return CONCCL_ERR_INTERNAL;
}

conccl_status report(const Status& st) {
  last_error() = st.ok() ? std::string() : st.message();
  return code_to_c(st.code());
}

conccl_status fail(conccl_status s, const std::string& msg) {
  last_error() = msg;
  return s;
}

Deadline after(uint32_t ms) { return Deadline::after_ms(ms); }

namespace {
std::atomic<uint64_t> g_next_buffer_id{1};

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}
}  // namespace

conccl_buffer record_buffer(conccl_device& d, const Buffer& cpp, conccl_buffer_record::Origin origin,
                            nv::CudaAlloc cuda) {
  conccl_buffer_record rec;
  rec.cpp = cpp;
  rec.origin = origin;
  rec.cuda = cuda;
  rec.c.va = cpp.va;
  rec.c.host = cpp.host;
  rec.c.size = cpp.size;
  rec.c.gpu = cpp.gpu;
  rec.c.kind = origin == conccl_buffer_record::Origin::alloc
                   ? (cpp.kind == MemKind::host ? CONCCL_MEM_HOST : CONCCL_MEM_DEVICE)
                   : CONCCL_MEM_CUDA;
  rec.c.id = g_next_buffer_id.fetch_add(1);
  std::lock_guard<std::mutex> lock(d.buffers_mutex);
  d.buffers[rec.c.id] = rec;
  return rec.c;
}

bool buffer_live(conccl_device& d, uint64_t id) {
  std::lock_guard<std::mutex> lock(d.buffers_mutex);
  return d.buffers.count(id) != 0;
}

Result<Buffer> resolve_buffer(conccl_device& d, const conccl_buffer& b, const std::string& what, bool allow_empty) {
  if (allow_empty && b.id == 0 && b.va == 0 && b.size == 0 && b.host == nullptr) return Buffer{};
  conccl_buffer_record rec;
  {
    std::lock_guard<std::mutex> lock(d.buffers_mutex);
    auto it = d.buffers.find(b.id);
    if (it == d.buffers.end())
      return error(Code::not_found,
                   what + ": no live buffer with id " + std::to_string(b.id) + " on this device (it was freed, it " +
                       "belongs to another device, or the struct did not come from conccl_buffer_alloc, " +
                       "conccl_buffer_alloc_cuda or conccl_buffer_register_cuda)");
    rec = it->second;
  }
  const conccl_buffer& a = rec.c;
  auto mismatch = [&](const std::string& field) {
    return error(Code::invalid_argument,
                 what + ": its " + field + " does not match buffer " + std::to_string(a.id) + " (va " + hex(a.va) +
                     ", " + std::to_string(a.size) + " bytes, gpu " + std::to_string(a.gpu) + ", kind " +
                     std::to_string(a.kind) + "): pass the conccl_buffer the allocation returned, or a sub-range " +
                     "of it with va and host moved together and size within it");
  };
  if (b.gpu != a.gpu) return mismatch("gpu (" + std::to_string(b.gpu) + ")");
  if (b.kind != a.kind) return mismatch("kind (" + std::to_string(b.kind) + ")");
  if (b.va < a.va || b.va - a.va > a.size) return mismatch("va (" + hex(b.va) + ")");
  const uint64_t off = b.va - a.va;
  if (b.size > a.size - off)
    return mismatch("size (" + std::to_string(b.size) + " bytes at offset " + std::to_string(off) + ")");
  void* host = a.host ? static_cast<uint8_t*>(a.host) + off : nullptr;
  if (b.host != host) return mismatch("host pointer");
  Buffer out = rec.cpp;
  out.va = b.va;
  out.host = host;
  out.size = b.size;
  return out;
}

}  // namespace conccl::capi

conccl_status conccl::capi::copy_text(const std::string& s, char* buf, size_t capacity, size_t* needed) {
  if (needed) *needed = s.size() + 1;
  if (buf && capacity) {
    const size_t n = std::min(capacity - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = 0;
    if (n < s.size())
      return fail(CONCCL_ERR_OUT_OF_RANGE, std::string(current_call()) + ": buffer of " + std::to_string(capacity) +
                                               " bytes is too small: " + std::to_string(s.size() + 1) + " needed");
  }
  last_error().clear();
  return CONCCL_OK;
}

namespace {

Result<Stager*> stager_for(conccl_device& d, int gpu) {
  auto it = d.stagers.find(gpu);
  if (it != d.stagers.end()) return it->second.get();
  Result<std::unique_ptr<Stager>> s = Stager::create(*d.dev, gpu < 0 ? 0 : gpu, 4u << 20);
  if (!s.ok()) return s.status();
  Stager* p = s->get();
  d.stagers[gpu] = std::move(s).value();
  return p;
}

// Frees what a buffer record holds: unregisters CUDA memory (and frees
// conccl_buffer_alloc_cuda's), or frees through the device.
Status free_record(conccl_device& d, const conccl_buffer_record& rec) {
  switch (rec.origin) {
    case conccl_buffer_record::Origin::cuda_alloc: {
      CONCCL_RETURN_IF_ERROR(nv::unregister_cuda(*d.dev, rec.cpp));
      nv::CudaAlloc a = rec.cuda;
      return nv::cuda_free(a);
    }
    case conccl_buffer_record::Origin::cuda_registered: return nv::unregister_cuda(*d.dev, rec.cpp);
    case conccl_buffer_record::Origin::alloc: return d.dev->free(rec.cpp);
  }
  return Status();
}

// Closes a device's object: its communicators (detaching their plans),
// queues, signals and buffers, then the C++ Device. Their handles stop
// working; plans stay valid handles that say their communicator is gone.
Status close_device(conccl_device& d) {
  for (auto& c : CommTable::get().take_if([&](const conccl_comm& c) { return c.device.get() == &d; })) c->destroy();
  for (auto& q : QueueTable::get().take_if([&](const conccl_queue& q) { return q.device.get() == &d; })) {
    q->pending.clear();
    q->q.reset();
  }
  for (auto& s : SignalTable::get().take_if([&](const conccl_signal& s) { return s.device.get() == &d; }))
    s->sig = Signal();
  d.stagers.clear();
  Status first;
  std::map<uint64_t, conccl_buffer_record> buffers;
  {
    std::lock_guard<std::mutex> lock(d.buffers_mutex);
    buffers.swap(d.buffers);
  }
  for (const auto& [id, rec] : buffers) {
    Status st = free_record(d, rec);
    if (first.ok() && !st.ok()) first = st.prefix("freeing buffer " + std::to_string(id));
  }
  d.dev.reset();
  return first;
}

// A queue or signal must come from the device it is used with.
conccl_status same_device(const conccl_device* a, const conccl_device* b, const char* what) {
  if (a == b) return CONCCL_OK;
  return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": " + what +
                                               " belongs to another device: use objects of one device together");
}

}  // namespace

extern "C" {

const char* conccl_last_error(void) { return last_error().c_str(); }

const char* conccl_status_name(conccl_status status) {
  switch (enum_bits(status)) {
    case CONCCL_OK: return "ok";
    case CONCCL_ERR_INVALID_ARGUMENT: return "invalid_argument";
    case CONCCL_ERR_OUT_OF_RANGE: return "out_of_range";
    case CONCCL_ERR_NOT_FOUND: return "not_found";
    case CONCCL_ERR_TIMEOUT: return "timeout";
    case CONCCL_ERR_DEVICE_FAULT: return "device_fault";
    case CONCCL_ERR_UNAVAILABLE: return "unavailable";
    case CONCCL_ERR_RESOURCE_EXHAUSTED: return "resource_exhausted";
    case CONCCL_ERR_BUSY: return "busy";
    case CONCCL_ERR_VERIFY_FAILED: return "verify_failed";
    case CONCCL_ERR_INTERNAL: return "internal";
  }
  return "unknown";
}

const char* conccl_version(void) { return CONCCL_VERSION_STRING; }

// ---- devices -------------------------------------------------------------------

void conccl_device_options_init(conccl_device_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->process_slot = -1;
}

conccl_status conccl_device_open(const conccl_device_options* o, conccl_device_t* device) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(device, "device is NULL");
    *device = nullptr;
    DeviceOptions opt;
    if (o) {
      CONCCL_C_REQUIRE(size_ok(o, offsetof(conccl_device_options, memory_per_gpu) + sizeof(size_t)),
                       "options->struct_size is " + std::to_string(o->struct_size) +
                           ": call conccl_device_options_init first");
      if (o->backend) opt.backend = o->backend;
      if (o->preset) opt.preset = o->preset;
      opt.gpus = o->gpus;
      opt.engines = o->engines;
      if (o->gen) opt.gen = o->gen;
      opt.memory_per_gpu = o->memory_per_gpu;
      // Added after the first version: callers built against it lack the field.
      if (o->struct_size >= offsetof(conccl_device_options, process_slot) + sizeof(int))
        opt.process_slot = o->process_slot;
    }
    Result<std::unique_ptr<Device>> d = open_device(opt);
    if (!d.ok()) return report(d.status());
    auto h = std::make_shared<conccl_device>();
    h->dev = std::move(d).value();
    h->handle = DeviceTable::get().add(h);
    *device = handle_of<conccl_device_t>(h->handle);
    return report(Status());
  });
}

conccl_status conccl_device_close(conccl_device_t device) {
  return guard(__func__, [&] {
    if (!device) return report(Status());
    Result<std::shared_ptr<conccl_device>> d = DeviceTable::get().take(handle_bits(device));
    if (!d.ok()) return report(d.status().prefix(std::string(current_call()) + ": device"));
    return report(close_device(**d));
  });
}

conccl_status conccl_device_gpu_count(conccl_device_t dh, int* count) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(count, "count is NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    *count = d.dev->gpu_count();
    return report(Status());
  });
}

conccl_status conccl_device_engines(conccl_device_t dh, int gpu, int* ids, int capacity, int* count) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(count, "count is NULL");
    CONCCL_C_REQUIRE(capacity >= 0 && (ids || capacity == 0), "ids is NULL with a capacity above 0");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    if (gpu < 0 || gpu >= d.dev->gpu_count())
      return fail(CONCCL_ERR_NOT_FOUND, std::string(current_call()) + ": GPU " + std::to_string(gpu) +
                                            " requested; the device has " + std::to_string(d.dev->gpu_count()));
    const auto& engines = d.dev->topology().gpus[static_cast<size_t>(gpu)].engines;
    *count = static_cast<int>(engines.size());
    for (int i = 0; i < capacity && i < *count; ++i) ids[i] = engines[static_cast<size_t>(i)].id;
    return report(Status());
  });
}

conccl_status conccl_device_topology_json(conccl_device_t dh, char* buf, size_t capacity, size_t* needed) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    return copy_text(topology_json(d.dev->topology()), buf, capacity, needed);
  });
}

// ---- buffers -------------------------------------------------------------------

conccl_status conccl_buffer_alloc(conccl_device_t dh, int gpu, size_t bytes, conccl_mem_kind kind, conccl_buffer* b) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(b, "buffer is NULL");
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    const int k = enum_bits(kind);
    CONCCL_C_REQUIRE(k == CONCCL_MEM_DEVICE || k == CONCCL_MEM_HOST,
                     "kind must be CONCCL_MEM_DEVICE or CONCCL_MEM_HOST (CUDA memory: conccl_buffer_alloc_cuda)");
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
    conccl_buffer_record rec;
    {
      std::lock_guard<std::mutex> lock(d.buffers_mutex);
      rec = d.buffers.at(b->id);
    }
    CONCCL_C_REQUIRE(b->va == rec.c.va && b->size == rec.c.size,
                     "pass the buffer as it was allocated, not a sub-range of it");
    CONCCL_C_REQUIRE(rec.origin != conccl_buffer_record::Origin::cuda_registered,
                     "the buffer was registered with conccl_buffer_register_cuda: unregister it with "
                     "conccl_buffer_unregister_cuda");
    {
      std::lock_guard<std::mutex> lock(d.buffers_mutex);
      d.buffers.erase(b->id);  // gone for every later call, even if the backend's free fails
    }
    return report(free_record(d, rec));
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
    conccl_buffer_record rec;
    {
      std::lock_guard<std::mutex> lock(d.buffers_mutex);
      rec = d.buffers.at(b->id);
    }
    CONCCL_C_REQUIRE(rec.origin == conccl_buffer_record::Origin::cuda_registered,
                     rec.origin == conccl_buffer_record::Origin::cuda_alloc
                         ? "buffer came from conccl_buffer_alloc_cuda: free it with conccl_buffer_free"
                         : "buffer came from conccl_buffer_alloc: free it with conccl_buffer_free");
    CONCCL_C_REQUIRE(b->va == rec.c.va && b->size == rec.c.size,
                     "pass the buffer as it was registered, not a sub-range of it");
    {
      std::lock_guard<std::mutex> lock(d.buffers_mutex);
      d.buffers.erase(b->id);
    }
    return report(free_record(d, rec));
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

// ---- signals -------------------------------------------------------------------

conccl_status conccl_signal_create(conccl_device_t dh, uint64_t initial, conccl_signal_t* s) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(s, "signal is NULL");
    *s = nullptr;
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    Result<Signal> r = Signal::create(*d.dev, -1, initial);
    if (!r.ok()) return report(r.status());
    auto h = std::make_shared<conccl_signal>();
    h->device = *d_ref;
    h->sig = std::move(r).value();
    *s = handle_of<conccl_signal_t>(SignalTable::get().add(h));
    return report(Status());
  });
}

conccl_status conccl_signal_destroy(conccl_signal_t s) {
  return guard(__func__, [&] {
    if (!s) return report(Status());
    Result<std::shared_ptr<conccl_signal>> r = SignalTable::get().take(handle_bits(s));
    if (!r.ok()) return report(r.status().prefix(std::string(current_call()) + ": signal"));
    (*r)->sig = Signal();
    return report(Status());
  });
}

uint64_t conccl_signal_value(conccl_signal_t s) {
  uint64_t v = 0;
  (void)guard(__func__, [&] {
    CONCCL_C_FIND(SignalTable, sig, s, "signal");
    v = sig.sig.value();
    return report(Status());
  });
  return v;
}

conccl_status conccl_signal_add(conccl_signal_t s, uint64_t delta) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(SignalTable, sig, s, "signal");
    (void)sig.sig.add(delta);
    return report(Status());
  });
}

uint64_t conccl_signal_address(conccl_signal_t s) {
  uint64_t v = 0;
  (void)guard(__func__, [&] {
    CONCCL_C_FIND(SignalTable, sig, s, "signal");
    v = sig.sig.va();
    return report(Status());
  });
  return v;
}

conccl_status conccl_signal_wait(conccl_signal_t s, uint64_t v, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(SignalTable, sig, s, "signal");
    return report(sig.sig.wait(v, after(timeout_ms)));
  });
}

// ---- queues --------------------------------------------------------------------

void conccl_queue_options_init(conccl_queue_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

conccl_status conccl_queue_create(conccl_device_t dh, int gpu, int engine, const conccl_queue_options* o,
                                  conccl_queue_t* q) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(q, "queue is NULL");
    *q = nullptr;
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    QueueOptions opt;
    if (o) {
      CONCCL_C_REQUIRE(size_ok(o, sizeof(conccl_queue_options)),
                       "options->struct_size is " + std::to_string(o->struct_size) +
                           ": call conccl_queue_options_init first");
      if (o->ring_bytes) opt.ring_bytes = o->ring_bytes;
    }
    Result<std::unique_ptr<Queue>> r = d.dev->create_queue(gpu, engine, opt);
    if (!r.ok()) return report(r.status());
    auto h = std::make_shared<conccl_queue>(conccl_queue{*d_ref, std::move(r).value(), CommandBuffer(Isa{})});
    h->pending = h->q->command_buffer();
    *q = handle_of<conccl_queue_t>(QueueTable::get().add(h));
    return report(Status());
  });
}

conccl_status conccl_queue_destroy(conccl_queue_t q) {
  return guard(__func__, [&] {
    if (!q) return report(Status());
    Result<std::shared_ptr<conccl_queue>> r = QueueTable::get().take(handle_bits(q));
    if (!r.ok()) return report(r.status().prefix(std::string(current_call()) + ": queue"));
    (*r)->pending.clear();
    (*r)->q.reset();
    return report(Status());
  });
}

conccl_status conccl_queue_copy(conccl_queue_t qh, uint64_t dst, uint64_t src, uint64_t bytes) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    return report(q.pending.copy(dst, src, bytes));
  });
}

conccl_status conccl_queue_fill(conccl_queue_t qh, uint64_t dst, uint32_t value, uint64_t bytes) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    return report(q.pending.fill(dst, value, bytes));
  });
}

conccl_status conccl_queue_signal_add(conccl_queue_t qh, conccl_signal_t sh, uint64_t delta) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    CONCCL_C_FIND(SignalTable, s, sh, "signal");
    if (conccl_status st = same_device(q.device.get(), s.device.get(), "the signal"); st != CONCCL_OK) return st;
    return report(s.sig.enqueue_add(q.pending, delta));
  });
}

conccl_status conccl_queue_wait_signal(conccl_queue_t qh, conccl_signal_t sh, uint64_t v) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    CONCCL_C_FIND(SignalTable, s, sh, "signal");
    if (conccl_status st = same_device(q.device.get(), s.device.get(), "the signal"); st != CONCCL_OK) return st;
    return report(s.sig.enqueue_wait(q.pending, v));
  });
}

conccl_status conccl_queue_submit(conccl_queue_t qh, uint32_t timeout_ms, uint64_t* ticket) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    QueueSpan span;
    Status st = q.q->submit(q.pending, after(timeout_ms), &span);
    if (st.ok()) {
      q.pending.clear();
      if (ticket) *ticket = span.end;
    }
    return report(st);
  });
}

conccl_status conccl_queue_wait(conccl_queue_t qh, uint64_t ticket, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    return report(q.q->wait_done(after(timeout_ms), ticket));
  });
}

uint64_t conccl_queue_completed(conccl_queue_t qh) {
  uint64_t v = 0;
  (void)guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    v = q.q->completed();
    return report(Status());
  });
  return v;
}

size_t conccl_queue_pending_bytes(conccl_queue_t qh) {
  size_t v = 0;
  (void)guard(__func__, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    v = q.pending.size_bytes();
    return report(Status());
  });
  return v;
}

// ---- communicators and plans -----------------------------------------------------

const char* conccl_variant_name(conccl_variant variant) {
  const int v = enum_bits(variant);
  if (v < CONCCL_VARIANT_AUTO || v > CONCCL_VARIANT_SINGLE) return "?";
  return variant_name(static_cast<Variant>(v));
}

void conccl_comm_options_init(conccl_comm_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

}  // extern "C"

namespace {

// A created communicator as the caller's handle (or the error it carries).
conccl_status adopt_comm(const std::shared_ptr<conccl_device>& d, Result<std::unique_ptr<Communicator>> c,
                         uint32_t timeout, conccl_comm_t* comm) {
  if (!c.ok()) return report(c.status());
  auto h = std::make_shared<conccl_comm>();
  h->device = d;
  h->comm = std::move(c).value();
  h->timeout_ms = timeout;
  *comm = handle_of<conccl_comm_t>(CommTable::get().add(h));
  return report(Status());
}

// conccl_comm_options (NULL: the defaults) as Communicator::Options and the
// calls' timeout.
conccl_status comm_options_from(const conccl_comm_options* o, Communicator::Options* opt, uint32_t* timeout) {
  if (!o) return CONCCL_OK;
  CONCCL_C_REQUIRE(size_ok(o, sizeof(conccl_comm_options)),
                   "options->struct_size is " + std::to_string(o->struct_size) + ": call conccl_comm_options_init first");
  CONCCL_C_REQUIRE(o->num_engines >= 0 && (o->engines || o->num_engines == 0), "engines is NULL with num_engines > 0");
  if (o->ring_bytes) opt->ring_bytes = o->ring_bytes;
  opt->loopback = o->loopback != 0;
  CONCCL_C_REQUIRE(o->queues >= CONCCL_QUEUES_AUTO && o->queues <= CONCCL_QUEUES_PER_ENGINE,
                   "queues " + std::to_string(o->queues) + " is not a conccl_queue_sharing");
  opt->queues = o->queues == CONCCL_QUEUES_PER_RANK     ? Communicator::Options::QueueSharing::per_rank
                : o->queues == CONCCL_QUEUES_PER_ENGINE ? Communicator::Options::QueueSharing::per_engine
                                                        : Communicator::Options::QueueSharing::automatic;
  opt->engines.assign(o->engines, o->engines + o->num_engines);
  if (o->timeout_ms) {
    *timeout = o->timeout_ms;
    opt->call_timeout_ms = o->timeout_ms;
  }
  return CONCCL_OK;
}

// The plan's buffers, still allocated (a freed one would have the launch
// write into whatever took its place).
conccl_status check_plan_buffers(conccl_plan& p) {
  if (!p.plan->attached()) return CONCCL_OK;  // the plan's own call says why
  for (const auto& [id, what] : p.buffers)
    if (!buffer_live(*p.device, id))
      return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": the plan's " + what + " (buffer " +
                                                   std::to_string(id) +
                                                   ") was freed after the plan was made: destroy the plan and make "
                                                   "a new one on live buffers");
  return CONCCL_OK;
}

}  // namespace

extern "C" {

conccl_status conccl_comm_create(conccl_device_t dh, const int* gpus, int nranks, const conccl_comm_options* o,
                                 conccl_comm_t* comm) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(gpus && comm, "gpus and comm must not be NULL");
    *comm = nullptr;
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    CONCCL_C_REQUIRE(nranks > 0, "nranks must be positive");
    Communicator::Options opt;
    uint32_t timeout = 60000;
    if (conccl_status st = comm_options_from(o, &opt, &timeout); st != CONCCL_OK) return st;
    Result<std::unique_ptr<Communicator>> c = Communicator::create(*d.dev, std::vector<int>(gpus, gpus + nranks), opt);
    return adopt_comm(*d_ref, std::move(c), timeout, comm);
  });
}

conccl_status conccl_get_unique_id(conccl_unique_id* id) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(id, "id is NULL");
    Result<UniqueId> u = make_unique_id();
    if (!u.ok()) return report(u.status());
    std::memcpy(id->bytes, u->bytes.data(), sizeof id->bytes);
    return report(Status());
  });
}

conccl_status conccl_unique_id_to_string(const conccl_unique_id* id, char* buf, size_t capacity) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(id && buf, "id and buf must not be NULL");
    UniqueId u;
    std::memcpy(u.bytes.data(), id->bytes, sizeof id->bytes);
    const std::string s = u.to_string();
    CONCCL_C_REQUIRE(capacity > s.size(), "buf holds " + std::to_string(capacity) + " bytes; the id needs " +
                                              std::to_string(s.size() + 1));
    std::memcpy(buf, s.c_str(), s.size() + 1);
    return report(Status());
  });
}

conccl_status conccl_unique_id_from_string(const char* text, conccl_unique_id* id) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(text && id, "text and id must not be NULL");
    Result<UniqueId> u = UniqueId::parse(text);
    if (!u.ok()) return report(u.status());
    std::memcpy(id->bytes, u->bytes.data(), sizeof id->bytes);
    return report(Status());
  });
}

conccl_status conccl_comm_create_rank(conccl_device_t dh, int rank, int nranks, const conccl_unique_id* id, int gpu,
                                      const conccl_comm_options* o, conccl_comm_t* comm) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(id && comm, "id and comm must not be NULL");
    *comm = nullptr;
    CONCCL_C_FIND(DeviceTable, d, dh, "device");
    Communicator::Options opt;
    uint32_t timeout = 60000;
    if (conccl_status st = comm_options_from(o, &opt, &timeout); st != CONCCL_OK) return st;
    opt.gpu = gpu;
    opt.join_timeout_ms = timeout;
    UniqueId u;
    std::memcpy(u.bytes.data(), id->bytes, sizeof id->bytes);
    Result<std::unique_ptr<Communicator>> c = Communicator::create(*d.dev, rank, nranks, u, opt);
    return adopt_comm(*d_ref, std::move(c), timeout, comm);
  });
}

int conccl_comm_rank(conccl_comm_t ch) {
  int v = -1;
  (void)guard(__func__, [&] {
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    v = c.comm->rank();
    return report(Status());
  });
  return v;
}

conccl_status conccl_comm_destroy(conccl_comm_t ch) {
  return guard(__func__, [&] {
    if (!ch) return report(Status());
    Result<std::shared_ptr<conccl_comm>> r = CommTable::get().take(handle_bits(ch));
    if (!r.ok()) return report(r.status().prefix(std::string(current_call()) + ": comm"));
    (*r)->destroy();
    return report(Status());
  });
}

int conccl_comm_size(conccl_comm_t ch) {
  int v = 0;
  (void)guard(__func__, [&] {
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    v = c.comm->size();
    return report(Status());
  });
  return v;
}

size_t conccl_comm_cached_plans(conccl_comm_t ch) {
  size_t v = 0;
  (void)guard(__func__, [&] {
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    v = c.comm ? static_cast<size_t>(c.comm->stats().cached_plans) : 0;
    return report(Status());
  });
  return v;
}

conccl_status conccl_comm_window_register(conccl_comm_t ch, const conccl_buffer* buffer, conccl_window_t* window) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(buffer && window, "buffer and window must not be NULL");
    *window = nullptr;
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    if (!c.comm) return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": the communicator was destroyed");
    Result<Buffer> b = resolve_buffer(*c.device, *buffer, std::string(current_call()) + ": buffer");
    if (!b.ok()) return report(b.status());
    Result<conccl::Window> w = c.comm->register_window(*b);
    if (!w.ok()) return report(w.status().prefix(current_call()));
    auto h = std::make_shared<conccl_window>();
    h->comm = c_ref.value();
    h->window = *w;
    const uint64_t bits = WindowTable::get().add(h);
    c.windows.push_back(bits);
    *window = handle_of<conccl_window_t>(bits);
    return report(Status());
  });
}

conccl_status conccl_comm_window_deregister(conccl_comm_t ch, conccl_window_t wh) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    CONCCL_C_FIND(WindowTable, w, wh, "window");
    std::shared_ptr<conccl_comm> owner = w.comm.lock();
    if (owner.get() != &c)
      return fail(CONCCL_ERR_INVALID_ARGUMENT,
                  std::string(current_call()) + ": the window belongs to another communicator (or a destroyed one)");
    if (!c.comm) return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": the communicator was destroyed");
    Status st = c.comm->deregister_window(w.window);
    if (!st.ok()) return report(st.prefix(current_call()));
    (void)WindowTable::get().take(handle_bits(wh));
    std::erase(c.windows, handle_bits(wh));
    return report(Status());
  });
}

conccl_status conccl_comm_get_stats(conccl_comm_t ch, conccl_comm_stats* out) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(out, "stats must not be NULL");
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    if (!c.comm) return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": the communicator was destroyed");
    const CommStats s = c.comm->stats();
    out->bootstrap_messages_sent = s.bootstrap_messages_sent;
    out->bootstrap_messages_received = s.bootstrap_messages_received;
    out->calls = s.calls;
    out->window_calls = s.window_calls;
    out->window_plans = s.window_plans;
    return report(Status());
  });
}

conccl_status conccl_comm_get_async_error(conccl_comm_t ch, conccl_status* async_status) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(async_status, "async_status must not be NULL");
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    if (!c.comm) return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": the communicator was destroyed");
    const Status st = c.comm->async_error();
    *async_status = code_to_c(st.code());
    last_error() = st.ok() ? std::string() : st.message();
    return CONCCL_OK;
  });
}

void conccl_collective_args_init(conccl_collective_args* a) {
  if (!a) return;
  std::memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  a->peer = 1;
}

conccl_status conccl_plan_create(conccl_comm_t ch, const conccl_collective_args* a, conccl_plan_t* plan) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(a && plan, "args and plan must not be NULL");
    *plan = nullptr;
    CONCCL_C_FIND(CommTable, c, ch, "comm");
    CONCCL_C_REQUIRE(size_ok(a, sizeof(conccl_collective_args)),
                     "args->struct_size is " + std::to_string(a->struct_size) +
                         ": call conccl_collective_args_init first");
    const int op = enum_bits(a->op), variant = enum_bits(a->variant);
    CONCCL_C_REQUIRE(op >= CONCCL_P2P && op <= CONCCL_ALL_TO_ALL, "op " + std::to_string(op) + " is not a conccl_op");
    CONCCL_C_REQUIRE(variant >= CONCCL_VARIANT_AUTO && variant <= CONCCL_VARIANT_SINGLE,
                     "variant " + std::to_string(variant) + " is not a conccl_variant");
    CONCCL_C_REQUIRE(a->nsend >= 0 && a->nrecv >= 0 && (a->send || a->nsend == 0) && (a->recv || a->nrecv == 0),
                     "send/recv must hold nsend/nrecv buffers");
    auto h = std::make_shared<conccl_plan>();
    h->device = c.device;
    CollectiveArgs args;
    args.op = static_cast<CollOp>(op);
    args.variant = static_cast<Variant>(variant);
    args.bytes = a->bytes;
    args.root = a->root;
    args.peer = a->peer;
    // Every buffer checked against the device's allocations: a freed,
    // foreign or altered struct is refused here, not written through.
    auto take = [&](const conccl_buffer* in, int n, const char* side, std::vector<Buffer>* out) -> conccl_status {
      for (int i = 0; i < n; ++i) {
        const std::string what = std::string(side) + "[" + std::to_string(i) + "]";
        Result<Buffer> b = resolve_buffer(*c.device, in[i], std::string(current_call()) + ": args->" + what, true);
        if (!b.ok()) return report(b.status());
        out->push_back(*b);
        if (in[i].id) h->buffers.emplace_back(in[i].id, what);
      }
      return CONCCL_OK;
    };
    if (conccl_status st = take(a->send, a->nsend, "send", &args.send); st != CONCCL_OK) return st;
    if (conccl_status st = take(a->recv, a->nrecv, "recv", &args.recv); st != CONCCL_OK) return st;
    args.prelaunch = a->prelaunch != 0;
    args.timestamps = a->timestamps != 0;
    Result<std::unique_ptr<Plan>> p = c.comm->plan(args);
    if (!p.ok()) return report(p.status());
    h->plan = std::move(p).value();
    *plan = handle_of<conccl_plan_t>(PlanTable::get().add(h));
    return report(Status());
  });
}

conccl_status conccl_plan_destroy(conccl_plan_t ph) {
  return guard(__func__, [&] {
    if (!ph) return report(Status());
    Result<std::shared_ptr<conccl_plan>> r = PlanTable::get().take(handle_bits(ph));
    if (!r.ok()) return report(r.status().prefix(std::string(current_call()) + ": plan"));
    (*r)->plan.reset();
    return report(Status());
  });
}

conccl_status conccl_plan_launch(conccl_plan_t ph, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    if (conccl_status st = check_plan_buffers(p); st != CONCCL_OK) return st;
    return report(p.plan->launch(after(timeout_ms)));
  });
}

conccl_status conccl_plan_prelaunch(conccl_plan_t ph, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    if (conccl_status st = check_plan_buffers(p); st != CONCCL_OK) return st;
    return report(p.plan->prelaunch(after(timeout_ms)));
  });
}

conccl_status conccl_plan_release(conccl_plan_t ph) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    return report(p.plan->release());
  });
}

conccl_status conccl_plan_wait(conccl_plan_t ph, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    return report(p.plan->wait(after(timeout_ms)));
  });
}

conccl_variant conccl_plan_variant(conccl_plan_t ph) {
  conccl_variant v = CONCCL_VARIANT_AUTO;
  (void)guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    v = static_cast<conccl_variant>(p.plan->variant());
    return report(Status());
  });
  return v;
}

conccl_status conccl_plan_completion(conccl_plan_t ph, int rank, uint64_t* address, uint64_t* value) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(address && value, "address and value must not be NULL");
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    if (!p.plan->attached()) return report(p.plan->wait(Deadline::after_ms(0)));  // names the detachment
    const int n = static_cast<int>(p.plan->args().recv.size());
    if (rank < 0 || rank >= n)
      return fail(CONCCL_ERR_OUT_OF_RANGE, std::string(current_call()) + ": rank " + std::to_string(rank) +
                                               " of a plan over " + std::to_string(n) + " ranks");
    *address = p.plan->arrival(rank).compute_wait(0).address;
    *value = p.plan->arrivals_expected(rank);
    return report(Status());
  });
}

conccl_status conccl_plan_release_by_stores(conccl_plan_t ph, conccl_store* stores, int capacity, int* count) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(count && (stores || capacity == 0), "stores and count must not be NULL");
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    // Checked before the plan is counted as released: the stores must fit.
    CONCCL_C_REQUIRE(capacity >= 2, "capacity " + std::to_string(capacity) + " is too small: give room for 2 stores");
    Result<std::vector<SignalStore>> w = p.plan->release_by_stores();
    if (!w.ok()) return report(w.status());
    *count = static_cast<int>(w->size());
    for (size_t i = 0; i < w->size(); ++i) stores[i] = conccl_store{(*w)[i].va, (*w)[i].value};
    return report(Status());
  });
}

conccl_status conccl_plan_consumed_store(conccl_plan_t ph, conccl_store* store) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(store, "store is NULL");
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    const SignalStore s = p.plan->consumed_store();
    CONCCL_C_REQUIRE(s.va != 0, "conccl_plan_consumed_store before conccl_plan_release_by_stores");
    *store = conccl_store{s.va, s.value};
    return report(Status());
  });
}

conccl_status conccl_plan_enqueue_on_stream(conccl_plan_t ph, void* stream, uint32_t timeout_ms) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    if (!p.plan->attached()) return report(p.plan->prelaunch(after(timeout_ms)));  // names the detachment
    if (conccl_status st = check_plan_buffers(p); st != CONCCL_OK) return st;
    return report(nv::enqueue_on_stream(p.plan->communicator().device(), *p.plan, stream, after(timeout_ms)));
  });
}

conccl_status conccl_plan_describe(conccl_plan_t ph, char* buf, size_t capacity, size_t* needed) {
  return guard(__func__, [&] {
    CONCCL_C_FIND(PlanTable, p, ph, "plan");
    return copy_text(p.plan->describe(), buf, capacity, needed);
  });
}

conccl_status conccl_all_gather(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, conccl_comm_t comm,
                                void* stream) {
  return guard(__func__, [&] { return nccl_shaped(CollOp::all_gather, send, recv, bytes, 0, comm, stream); });
}

conccl_status conccl_all_to_all(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, conccl_comm_t comm,
                                void* stream) {
  return guard(__func__, [&] { return nccl_shaped(CollOp::all_to_all, send, recv, bytes, 0, comm, stream); });
}

conccl_status conccl_broadcast(const conccl_buffer* root_send, const conccl_buffer* recv, size_t bytes, int root,
                               conccl_comm_t comm, void* stream) {
  return guard(__func__, [&] { return nccl_shaped(CollOp::broadcast, root_send, recv, bytes, root, comm, stream); });
}

}  // extern "C"
