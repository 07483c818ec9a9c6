// src/c_api/c_objects.hpp - what the C API's handles name, and the helpers
// every entry point uses: errors to conccl_status, the caller's buffers
// checked against the device's allocations.
//
// Ownership: a device owns the C++ Device, its buffers' records and (through
// the handle tables) its queues, signals and communicators; closing it
// destroys them and their handles stop working. Each child keeps its
// device's object (not the C++ Device) alive through a shared_ptr, so that
// a child's handle can always tell what happened to its device. A plan
// belongs to its communicator's C++ object: destroying the communicator
// detaches it (Plan::detach), and its calls then say so.
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "c_api/handles.hpp"
#include "conccl/collectives.hpp"
#include "conccl/conccl.h"
#include "conccl/device.hpp"
#include "conccl/nv.hpp"
#include "conccl/queue.hpp"
#include "conccl/signal.hpp"
#include "conccl/staging.hpp"

// What the caller's conccl_buffer stands for. The C id is a serial that is
// never reused, so a stale struct (its buffer freed, another allocated at
// the same address) is refused instead of naming the newer buffer.
struct conccl_buffer_record {
  enum class Origin : uint8_t { alloc, cuda_alloc, cuda_registered };
  conccl::Buffer cpp;  // as the backend returned it (its own id)
  conccl_buffer c;     // as the caller got it
  Origin origin = Origin::alloc;
  conccl::nv::CudaAlloc cuda{};  // Origin::cuda_alloc: what to free
};

struct conccl_device {
  std::unique_ptr<conccl::Device> dev;  // null once closed
  uint64_t handle = 0;
  std::map<int, std::unique_ptr<conccl::Stager>> stagers;  // by GPU (-1: host buffers), made on first use
  std::mutex buffers_mutex;  // buffers may be allocated and freed from several threads
  std::map<uint64_t, conccl_buffer_record> buffers;  // live buffers by their C id
};

struct conccl_signal {
  std::shared_ptr<conccl_device> device;
  conccl::Signal sig;
};

struct conccl_queue {
  std::shared_ptr<conccl_device> device;
  std::unique_ptr<conccl::Queue> q;
  conccl::CommandBuffer pending;
};

struct conccl_comm {
  std::shared_ptr<conccl_device> device;
  std::unique_ptr<conccl::Communicator> comm;
  uint32_t timeout_ms = 60000;
  // Window handles it made (destroyed with it).
  std::vector<uint64_t> windows;
  // Calls through windows on a CUDA stream: one StreamOps per stream.
  std::map<void*, std::unique_ptr<conccl::StreamOps>> stream_ops;
  // What lives on the communicator and must go before it (the hierarchical
  // communicators built on it: hierarchy.cpp), run first by destroy().
  std::vector<std::function<void()>> before_destroy;
  // The communicator (its cached plans first, each waiting for its own
  // launch), then the stream adapters and windows.
  void destroy();
};

struct conccl_plan {
  std::shared_ptr<conccl_device> device;
  std::unique_ptr<conccl::Plan> plan;
  // The buffers it names, by C id, checked at every launch: a buffer freed
  // since would have the plan write into whatever took its place.
  std::vector<std::pair<uint64_t, std::string>> buffers;  // (id, "recv of rank 1")
};

// A registered window: its communicator (the window dies with it) and the
// C++ window.
struct conccl_window {
  std::weak_ptr<conccl_comm> comm;
  conccl::Window window;
};

namespace conccl::capi {

using WindowTable = HandleTable<conccl_window, HandleKind::window>;
using DeviceTable = HandleTable<conccl_device, HandleKind::device>;
using QueueTable = HandleTable<conccl_queue, HandleKind::queue>;
using SignalTable = HandleTable<conccl_signal, HandleKind::signal>;
using CommTable = HandleTable<conccl_comm, HandleKind::comm>;
using PlanTable = HandleTable<conccl_plan, HandleKind::plan>;

template <typename H>
uint64_t handle_bits(H h) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h));
}
template <typename H>
H handle_of(uint64_t bits) {
  return reinterpret_cast<H>(static_cast<uintptr_t>(bits));
}

// ---- errors ----
// The thread's last error message and the C API call it came from.
std::string& last_error();
const char*& current_call();
conccl_status code_to_c(Code c);
conccl_status report(const Status& st);
conccl_status fail(conccl_status s, const std::string& msg);
Deadline after(uint32_t ms);
// Text into the caller's buffer (NUL-terminated; *needed: the bytes it takes),
// out_of_range naming the size when it does not fit.
conccl_status copy_text(const std::string& s, char* buf, size_t capacity, size_t* needed);

// Runs f (returning conccl_status) as C API call `call`; no exception escapes.
template <typename F>
conccl_status guard(const char* call, F&& f) noexcept {
  const char* outer = current_call();
  current_call() = call;
  conccl_status s;
  try {
    s = f();
  } catch (const std::bad_alloc&) {
    s = fail(CONCCL_ERR_RESOURCE_EXHAUSTED, std::string(call) + ": out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    s = fail(CONCCL_ERR_INTERNAL,
             std::string(call) + ": unexpected C++ exception: " + e.what() + " (a bug in ConCCL: please report)");
  } catch (...) {
    s = fail(CONCCL_ERR_INTERNAL, std::string(call) + ": unexpected C++ exception (a bug in ConCCL: please report)");
  }
  current_call() = outer;
  return s;
}

// A malformed call: the message starts with the C function's name.
#define CONCCL_C_REQUIRE(cond, what) \
  if (!(cond)) return ::conccl::capi::fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(::conccl::capi::current_call()) + ": " + (what))

#define CONCCL_RETURN_IF_ERROR_C(expr)                         \
  do {                                                         \
    const ::conccl::Status st_ = (expr);                       \
    if (!st_.ok()) return ::conccl::capi::report(st_);         \
  } while (0)

// The object of a handle, kept alive in `var_ref`, or the handle's error
// (prefixed by the call and the argument's name) returned.
#define CONCCL_C_FIND(Table, var, handle, argname)                                                            \
  auto var##_ref = ::conccl::capi::Table::get().find(::conccl::capi::handle_bits(handle));                   \
  if (!var##_ref.ok())                                                                                        \
    return ::conccl::capi::report(                                                                            \
        var##_ref.status().prefix(std::string(::conccl::capi::current_call()) + ": " + (argname)));           \
  auto& var = **var##_ref

// The two shapes most entry points on one handle take. The error of a bad
// handle is the one CONCCL_C_FIND reports; `call` is the C function's name
// (__func__), `argname` the argument's.
//
// A getter: read(object) for a live handle, else `fallback` (the error is
// left for conccl_last_error, as a getter has no status to return).
template <typename Table, typename T, typename H, typename F>
T read_handle(const char* call, H h, const char* argname, T fallback, F&& read) noexcept {
  T v = fallback;
  (void)guard(call, [&] {
    auto obj = Table::get().find(handle_bits(h));
    if (!obj.ok()) return report(obj.status().prefix(std::string(current_call()) + ": " + argname));
    v = read(**obj);
    return report(Status());
  });
  return v;
}

// A destroy: the handle removed from its table, then release(object) (a
// Status) tears down what it holds. A NULL handle is no error (as free(NULL)).
template <typename Table, typename H, typename F>
conccl_status destroy_handle(const char* call, H h, const char* argname, F&& release) noexcept {
  return guard(call, [&] {
    if (!h) return report(Status());
    auto obj = Table::get().take(handle_bits(h));
    if (!obj.ok()) return report(obj.status().prefix(std::string(current_call()) + ": " + argname));
    return report(release(**obj));
  });
}

// A struct from the caller: its struct_size must cover the fields this
// version reads (older, shorter structs are refused, longer ones accepted).
template <typename T>
bool size_ok(const T* p, size_t needed) {
  return p && p->struct_size >= needed;
}

// A C caller may put any int in an enum parameter or field: read its bits,
// since loading an out-of-range value as the enum type is undefined in C++.
template <typename E>
int enum_bits(const E& e) {
  static_assert(sizeof(E) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// The error of a call on a communicator handle whose C++ communicator is gone.
inline conccl_status comm_destroyed() {
  return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": the communicator was destroyed");
}

// ---- buffers ----
// The caller's struct as the C++ Buffer it stands for: a live buffer of
// `d` (by id), or a sub-range of one with the allocation's gpu, kind and
// host mapping. A struct of zeros is the empty Buffer where `allow_empty`.
// `what` names the argument in errors.
Result<Buffer> resolve_buffer(conccl_device& d, const conccl_buffer& b, const std::string& what,
                              bool allow_empty = false);
// Records a buffer the backend made; returns the caller's struct.
conccl_buffer record_buffer(conccl_device& d, const Buffer& cpp, conccl_buffer_record::Origin origin,
                            nv::CudaAlloc cuda = {});
// Whether the buffer with C id `id` is still allocated on `d`.
bool buffer_live(conccl_device& d, uint64_t id);

// ---- shared by the entry points (conccl_c.cpp) ----
// The device's stager for `gpu` (-1: host buffers), made on first use.
Result<Stager*> stager_for(conccl_device& d, int gpu);
// Frees what a buffer record holds (CUDA memory unregistered, and freed when
// conccl_buffer_alloc_cuda made it; else through the device).
Status free_record(conccl_device& d, const conccl_buffer_record& rec);
// Closes a device's object: its communicators, queues, signals, buffers.
Status close_device(conccl_device& d);
// A queue or signal must come from the device it is used with.
conccl_status same_device(const conccl_device* a, const conccl_device* b, const char* what);

// A queue's command on a signal: both handles looked up, the signal checked to
// be of the queue's device (same_device), then add(the queue's pending
// commands, the signal), a Status.
template <typename F>
conccl_status signal_command(const char* call, conccl_queue_t qh, conccl_signal_t sh, F&& add) noexcept {
  return guard(call, [&] {
    CONCCL_C_FIND(QueueTable, q, qh, "queue");
    CONCCL_C_FIND(SignalTable, s, sh, "signal");
    if (conccl_status st = same_device(q.device.get(), s.device.get(), "the signal"); st != CONCCL_OK) return st;
    return report(add(q.pending, s.sig));
  });
}

// ---- the NCCL-shaped calls (nccl_shaped.cpp, reductions.cpp) ----
// What a call given `stream` orders itself on: null for no stream, else the
// communicator's StreamOps of that CUDA stream (made on first use, kept).
// A stream on a backend other than nv is Code::unavailable, naming the fix;
// messages start with `call`.
Result<StreamOps*> call_stream(conccl_comm& c, void* stream, const std::string& call);
conccl_status nccl_shaped(CollOp op, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, int root,
                          conccl_comm_t comm, void* stream);

}  // namespace conccl::capi
