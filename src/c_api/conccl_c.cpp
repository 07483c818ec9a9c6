// src/c_api/conccl_c.cpp - the C API (include/conccl/conccl.h) over the C++
// library: errors, the buffer records, devices. Buffers are in buffers.cpp,
// signals and queues in signals_queues.cpp, communicators and plans in
// communicators.cpp, the NCCL-shaped calls in nccl_shaped.cpp and
// reductions.cpp, heaps in heap.cpp, collectives across nodes in
// hierarchy.cpp. Each entry point: find its handles (src/c_api/handles.hpp: a
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

#include "backends/settings.hpp"
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

namespace conccl::capi {

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

}  // namespace conccl::capi

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

namespace {

// The C struct's emulator fields (deprecated, #30; they keep their place in
// the struct for the ABI) become the settings words of the same names, which
// is all the library reads. A field beside its setting is one request where
// the two agree (the field is dropped) and refused where they differ.
Status add_emu_fields(const conccl_device_options& o, std::string* settings) {
  Result<Settings> given = Settings::parse(*settings, "emu");
  if (!given.ok()) return Status();  // the emulator refuses it, with its own message
  std::string words;
  // The field `key`, `text` as a setting and `v` as Settings reads one
  // (std::string or uint64_t): added where the settings lack the key, else
  // compared with theirs.
  auto field = [&](const char* key, const std::string& text, auto v) -> Status {
    if (!given->has(key)) {
      words += std::string(" ") + key + "=" + text;
      return Status();
    }
    decltype(v) theirs{};
    CONCCL_RETURN_IF_ERROR(given->take(key, &theirs));
    if (theirs == v) return Status();
    return error(Code::invalid_argument, std::string("backend emu: ") + key +
                                             " is given twice, as a conccl_device_options field and in settings, "
                                             "with different values: give it once");
  };
  auto number = [&](const char* key, auto v) { return field(key, std::to_string(v), static_cast<uint64_t>(v)); };
  if (o.preset && *o.preset) CONCCL_RETURN_IF_ERROR(field("preset", o.preset, std::string(o.preset)));
  if (o.gpus) CONCCL_RETURN_IF_ERROR(number("gpus", o.gpus));
  if (o.engines) CONCCL_RETURN_IF_ERROR(number("engines", o.engines));
  if (o.gen && *o.gen) CONCCL_RETURN_IF_ERROR(field("gen", o.gen, std::string(o.gen)));
  if (o.memory_per_gpu) CONCCL_RETURN_IF_ERROR(number("memory_per_gpu", o.memory_per_gpu));
  *settings += words;
  return Status();
}

}  // namespace

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
      // Added after the first version: callers built against it lack the field.
      if (o->struct_size >= offsetof(conccl_device_options, process_slot) + sizeof(int))
        opt.process_slot = o->process_slot;
      if (o->struct_size >= offsetof(conccl_device_options, settings) + sizeof(const char*) && o->settings)
        opt.settings = o->settings;
      if (opt.backend == "emu") {
        Status st = add_emu_fields(*o, &opt.settings);
        if (!st.ok()) return report(st);
      }
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
  return destroy_handle<DeviceTable>(__func__, device, "device", [](conccl_device& d) { return close_device(d); });
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

}  // extern "C"
