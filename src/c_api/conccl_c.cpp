// src/c_api/conccl_c.cpp - the C API (include/conccl/conccl.h) over the C++
// library. Each entry point: check its pointers, translate, call, turn the
// Status into a conccl_status and the thread's last-error message. A C++
// exception never crosses: guard() catches it and reports
// CONCCL_ERR_INTERNAL (std::bad_alloc: CONCCL_ERR_RESOURCE_EXHAUSTED).
#include "conccl/conccl.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "conccl/bootstrap.hpp"
#include "conccl/collectives.hpp"
#include "conccl/device.hpp"
#include "conccl/nv.hpp"
#include "conccl/queue.hpp"
#include "conccl/signal.hpp"
#include "conccl/staging.hpp"

using namespace conccl;

// The handles. Each owns its C++ object; children point at their device.
struct conccl_device {
  std::unique_ptr<Device> dev;
  std::map<int, std::unique_ptr<Stager>> stagers;  // by GPU (-1: host buffers), made on first use
  // conccl_buffer_alloc_cuda's, by the buffer's va: CUDA's pointer, except
  // on a device with a process slot, where the memory is imported into the
  // slot's window (nv::register_cuda) and the va is that address.
  std::map<uint64_t, nv::CudaAlloc> cuda_allocs;
};
struct conccl_signal {
  Signal sig;
};
struct conccl_queue {
  std::unique_ptr<Queue> q;
  CommandBuffer pending;
};
struct conccl_plan;
struct conccl_comm {
  conccl_device* device = nullptr;
  std::unique_ptr<Communicator> comm;
  uint32_t timeout_ms = 60000;
  // NCCL-shaped calls: plans by (op, bytes, root, buffers, on a stream).
  // Stream-ordered calls keep up to kInFlight plans per key, used in turn,
  // so that launches queue on the stream without a host wait between them.
  static constexpr size_t kInFlight = 4;
  using Key = std::tuple<int, uint64_t, int, std::vector<uint64_t>, std::vector<uint64_t>, bool>;
  struct Slot {
    std::vector<std::unique_ptr<Plan>> plans;
    size_t next = 0;
    std::map<const Plan*, uint64_t> generation;  // one process per rank: which joint planning made each plan
    uint64_t last_use = 0;
  };
  std::map<Key, Slot> cache;
  // At most kMaxCachedCalls argument sets keep their plans, the least
  // recently used given up first: a caching allocator that hands out ever
  // new buffers would otherwise grow the cache (and its signal memory)
  // without end. Slots with a launch still running are kept.
  static constexpr size_t kMaxCachedCalls = 64;
  uint64_t uses = 0;
  void touch(const Key& key) {
    cache[key].last_use = ++uses;
    while (cache.size() > kMaxCachedCalls) {
      auto oldest = cache.end();
      for (auto it = cache.begin(); it != cache.end(); ++it) {
        if (it->first == key) continue;
        bool busy = false;
        for (const auto& p : it->second.plans) busy = busy || p->running() || is_in_flight(p.get());
        if (!busy && (oldest == cache.end() || it->second.last_use < oldest->second.last_use)) oldest = it;
      }
      if (oldest == cache.end()) return;  // every other slot is running: trim later
      cache.erase(oldest);
    }
  }
  size_t cached_plans() const {
    size_t n = 0;
    for (const auto& [k, slot] : cache) n += slot.plans.size();
    return n;
  }
  // One process per rank: plans the NCCL-shaped calls made, counted alike on
  // every rank (planning is collective), so ranks can tell that their cached
  // plans are halves of the same one.
  uint64_t generations = 0;
  // One process per rank: the NCCL-shaped launches not yet ended for every
  // rank (on a stream, or waited for here only), in call order. Every rank
  // makes the same calls in the same order, so every rank holds the same
  // sequence and ends or waits for its launches in the same order. At most
  // kInFlight per communicator.
  std::deque<Plan*> in_flight;
  bool is_in_flight(const Plan* p) const { return std::find(in_flight.begin(), in_flight.end(), p) != in_flight.end(); }
};
struct conccl_plan {
  std::unique_ptr<Plan> plan;
};

namespace {

thread_local std::string t_last_error;

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
  t_last_error = st.ok() ? std::string() : st.message();
  return code_to_c(st.code());
}

conccl_status fail(conccl_status s, const std::string& msg) {
  t_last_error = msg;
  return s;
}

// Runs f (returning conccl_status); no exception escapes.
template <typename F>
conccl_status guard(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(CONCCL_ERR_RESOURCE_EXHAUSTED, "out of host memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return fail(CONCCL_ERR_INTERNAL, std::string("unexpected C++ exception: ") + e.what() + " (a bug in ConCCL: please report)");
  } catch (...) {
    return fail(CONCCL_ERR_INTERNAL, "unexpected C++ exception (a bug in ConCCL: please report)");
  }
}

#define CONCCL_C_REQUIRE(cond, what) \
  if (!(cond)) return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(__func__) + ": " + (what))

// A struct from the caller: its struct_size must cover the fields this
// version reads (older, shorter structs are refused, longer ones accepted).
template <typename T>
bool size_ok(const T* p, size_t needed) {
  return p && p->struct_size >= needed;
}

Deadline after(uint32_t ms) { return Deadline::after_ms(ms); }

// A C caller may put any int in an enum parameter or field: read its bits,
// since loading an out-of-range value as the enum type is undefined in C++.
template <typename E>
int enum_bits(const E& e) {
  static_assert(sizeof(E) == sizeof(int));
  int v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

#define CONCCL_RETURN_IF_ERROR_C(expr)   \
  do {                                   \
    const Status st_ = (expr);           \
    if (!st_.ok()) return report(st_);   \
  } while (0)

Buffer to_cpp(const conccl_buffer& b) {
  Buffer out;
  out.va = b.va;
  out.host = b.host;
  out.size = b.size;
  out.gpu = b.gpu;
  out.kind = b.kind == CONCCL_MEM_HOST ? MemKind::host : MemKind::device;
  out.id = b.id;
  return out;
}

conccl_buffer to_c(const Buffer& b) {
  conccl_buffer out;
  out.va = b.va;
  out.host = b.host;
  out.size = b.size;
  out.gpu = b.gpu;
  out.kind = b.kind == MemKind::host ? CONCCL_MEM_HOST : CONCCL_MEM_DEVICE;
  out.id = b.id;
  return out;
}

conccl_status copy_text(const std::string& s, char* buf, size_t capacity, size_t* needed) {
  if (needed) *needed = s.size() + 1;
  if (buf && capacity) {
    const size_t n = std::min(capacity - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = 0;
    if (n < s.size()) return fail(CONCCL_ERR_OUT_OF_RANGE, "buffer of " + std::to_string(capacity) +
                                                                " bytes is too small: " + std::to_string(s.size() + 1) + " needed");
  }
  t_last_error.clear();
  return CONCCL_OK;
}

Result<Stager*> stager_for(conccl_device* d, int gpu) {
  auto it = d->stagers.find(gpu);
  if (it != d->stagers.end()) return it->second.get();
  Result<std::unique_ptr<Stager>> s = Stager::create(*d->dev, gpu < 0 ? 0 : gpu, 4u << 20);
  if (!s.ok()) return s.status();
  Stager* p = s->get();
  d->stagers[gpu] = std::move(s).value();
  return p;
}

// The NCCL-shaped call on a communicator of one process per rank: this
// rank's buffers alone, as ncclAllGather takes them. Every rank makes the
// same calls in the same order (as NCCL requires), and whatever involves the
// other ranks is decided from one exchange per call (the vote), so that
// every rank takes the same steps:
//   - each rank says how many of the oldest launches not yet ended for all
//     (the communicator's in_flight, the same sequence on every rank) have
//     ended here, and the generations (joint plannings) of its cached plans
//     for this call;
//   - the launches that ended on every rank are over: each rank ends them
//     without wait()'s barrier (Plan::end_launch_known_done);
//   - if the cached plans differ between ranks (a rank's buffers changed: a
//     caching allocator handing out another address, say), every rank waits
//     for all launches in flight and plans again, rather than one rank
//     planning (a collective call) while the others launch;
//   - else every rank picks the same plan: one not in flight, else a new one
//     while the call has fewer than kInFlight, else the oldest in flight
//     once waited for.
// A call in steady state costs two exchanges: the vote, and the launch's
// barrier after the signals' reset. Without a stream it returns
// when this rank's data is in place (the other ranks' end is learnt at the
// next call). On a stream it returns at once: the lists are queued gated on
// every rank's trigger, which each rank's stream stores once its earlier work
// is done, and each stream waits for its rank's arrivals and its rank's
// lists' end (nv::enqueue_on_stream); at most kInFlight calls are in flight.
conccl_status nccl_shaped_per_process(CollOp op, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                      int root, conccl_comm* c, void* stream) {
  const std::string name = coll_op_name(op);
  CONCCL_C_REQUIRE(recv, "recv must point at this rank's receive buffer");
  const bool root_only = op == CollOp::broadcast;
  const bool is_root = c->comm->rank() == root;
  if (!send && !(root_only && !is_root))
    return fail(CONCCL_ERR_INVALID_ARGUMENT, name + ": send must point at this rank's send buffer" +
                                                 (root_only ? " (on the root; other ranks may pass NULL)" : ""));
  const Deadline dl = after(c->timeout_ms);
  CollectiveArgs a;
  a.op = op;
  a.bytes = bytes;
  a.root = root;
  a.prelaunch = stream != nullptr;
  std::vector<uint64_t> sk, rk{recv[0].va};
  if (send && (!root_only || is_root)) {
    a.send.push_back(to_cpp(send[0]));
    sk.push_back(send[0].va);
  }
  a.recv.push_back(to_cpp(recv[0]));
  const conccl_comm::Key key{static_cast<int>(op), bytes, root, sk, rk, stream != nullptr};
  conccl_comm::Slot& slot = c->cache[key];
  size_t ended = 0;
  while (ended < c->in_flight.size() && !c->in_flight[ended]->running()) ++ended;
  std::string gens;
  for (const auto& p : slot.plans) gens += " " + std::to_string(slot.generation[p.get()]);
  Result<std::vector<Bootstrap::Message>> votes =
      c->comm->bootstrap()->exchange("NCCL-shaped " + name, std::to_string(ended) + gens, {}, dl);
  if (!votes.ok()) return report(votes.status().prefix(name));
  size_t all_ended = ended;
  bool same = true;
  for (const Bootstrap::Message& m : *votes) {
    const size_t sp = std::min(m.data.find(' '), m.data.size());
    all_ended = std::min<size_t>(all_ended, std::strtoull(m.data.c_str(), nullptr, 10));
    same = same && m.data.substr(sp) == gens;
  }
  for (size_t i = 0; i < all_ended; ++i) {
    CONCCL_RETURN_IF_ERROR_C(c->in_flight.front()->end_launch_known_done().prefix(name));
    c->in_flight.pop_front();
  }
  // Waits (with wait()'s barrier) for the oldest launch in flight, as every
  // rank does at this point.
  auto wait_oldest = [&]() -> Status {
    CONCCL_RETURN_IF_ERROR(c->in_flight.front()->wait(dl).prefix(name + ": waiting for an earlier call"));
    c->in_flight.pop_front();
    return Status();
  };
  Plan* plan = nullptr;
  if (same) {
    for (const auto& p : slot.plans)
      if (!plan && !c->is_in_flight(p.get())) plan = p.get();
    if (!plan && slot.plans.size() >= conccl_comm::kInFlight) {
      // All in flight: the oldest of them, once it and the launches before
      // it have been waited for.
      Plan* oldest = nullptr;
      for (Plan* f : c->in_flight)
        for (const auto& p : slot.plans)
          if (!oldest && f == p.get()) oldest = f;
      while (c->in_flight.front() != oldest) CONCCL_RETURN_IF_ERROR_C(wait_oldest());
      CONCCL_RETURN_IF_ERROR_C(wait_oldest());
      plan = oldest;
    }
  }
  if (!plan) {
    // Planning is collective, so every rank plans now. Where the ranks'
    // cached plans differ, they are given up, after every launch in flight.
    if (!same) {
      while (!c->in_flight.empty()) CONCCL_RETURN_IF_ERROR_C(wait_oldest());
      slot.plans.clear();
      slot.generation.clear();
    }
    Result<std::unique_ptr<Plan>> p = c->comm->plan(a);
    if (!p.ok()) {
      if (slot.plans.empty()) c->cache.erase(key);
      return report(p.status());
    }
    plan = p->get();
    slot.generation[plan] = ++c->generations;
    slot.plans.push_back(std::move(p).value());
  }
  c->touch(key);
  while (c->in_flight.size() >= conccl_comm::kInFlight) CONCCL_RETURN_IF_ERROR_C(wait_oldest());
  Status st;
  if (stream) {
    st = nv::enqueue_on_stream(*c->device->dev, *plan, stream, dl);
  } else {
    st = plan->launch(dl);
    if (st.ok()) st = plan->wait_here(dl);  // this rank's data in place; the others' end is voted next call
  }
  if (plan->unwaited()) c->in_flight.push_back(plan);  // its lists were submitted: every rank ends it alike
  return report(st);
}

conccl_status nccl_shaped(CollOp op, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, int root,
                          conccl_comm* c, void* stream) {
  CONCCL_C_REQUIRE(c, "comm is NULL");
  if (stream && !nv::native(*c->device->dev))
    return fail(CONCCL_ERR_UNAVAILABLE,
                std::string(coll_op_name(op)) + ": ordering on a stream needs the nv backend (a CUDA stream); on " +
                    "this backend pass stream NULL (the call returns when the data is in place), or order the work " +
                    "yourself with conccl_plan_release_by_stores and conccl_plan_completion");
  if (c->comm->rank() >= 0) return nccl_shaped_per_process(op, send, recv, bytes, root, c, stream);
  CONCCL_C_REQUIRE(send && recv, "send and recv must point at one buffer per rank");
  const int n = c->comm->size();
  const bool root_only = op == CollOp::broadcast;
  CollectiveArgs a;
  a.op = op;
  a.bytes = bytes;
  a.root = root;
  a.prelaunch = stream != nullptr;
  std::vector<uint64_t> sk, rk;
  if (root_only) {  // the root's buffer alone: Communicator::plan places it (and checks the root)
    a.send.push_back(to_cpp(send[0]));
    sk.push_back(send[0].va);
  } else {
    for (int r = 0; r < n; ++r) {
      a.send.push_back(to_cpp(send[r]));
      sk.push_back(send[r].va);
    }
  }
  for (int r = 0; r < n; ++r) {
    a.recv.push_back(to_cpp(recv[r]));
    rk.push_back(recv[r].va);
  }
  const conccl_comm::Key key{static_cast<int>(op), bytes, root, sk, rk, stream != nullptr};
  c->touch(key);
  conccl_comm::Slot& slot = c->cache[key];
  const Deadline dl = after(c->timeout_ms);
  // The plan to use: a free one, else a new one (up to kInFlight on a
  // stream), else the next in turn once its launch is done.
  Plan* plan = nullptr;
  for (auto& p : slot.plans)
    if (!p->running()) {
      plan = p.get();
      break;
    }
  if (!plan && (slot.plans.empty() || (stream && slot.plans.size() < conccl_comm::kInFlight))) {
    Result<std::unique_ptr<Plan>> p = c->comm->plan(a);
    if (!p.ok()) {
      if (slot.plans.empty()) c->cache.erase(key);
      return report(p.status());
    }
    slot.plans.push_back(std::move(p).value());
    plan = slot.plans.back().get();
  }
  if (!plan) {
    plan = slot.plans[slot.next++ % slot.plans.size()].get();
    CONCCL_RETURN_IF_ERROR_C(plan->wait(dl));
  }
  if (stream) return report(nv::enqueue_on_stream(*c->device->dev, *plan, stream, dl));
  Status st = plan->launch(dl);
  if (st.ok()) st = plan->wait(dl);
  return report(st);
}

}  // namespace

extern "C" {

const char* conccl_last_error(void) { return t_last_error.c_str(); }

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
  return guard([&] {
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
    auto h = std::make_unique<conccl_device>();
    h->dev = std::move(d).value();
    *device = h.release();
    return report(Status());
  });
}

void conccl_device_close(conccl_device_t device) { delete device; }

conccl_status conccl_device_gpu_count(conccl_device_t d, int* count) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && count, "device and count must not be NULL");
    *count = d->dev->gpu_count();
    return report(Status());
  });
}

conccl_status conccl_device_engines(conccl_device_t d, int gpu, int* ids, int capacity, int* count) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && count, "device and count must not be NULL");
    CONCCL_C_REQUIRE(capacity >= 0 && (ids || capacity == 0), "ids is NULL with a capacity above 0");
    if (gpu < 0 || gpu >= d->dev->gpu_count())
      return fail(CONCCL_ERR_NOT_FOUND, "GPU " + std::to_string(gpu) + " requested; the device has " +
                                            std::to_string(d->dev->gpu_count()));
    const auto& engines = d->dev->topology().gpus[static_cast<size_t>(gpu)].engines;
    *count = static_cast<int>(engines.size());
    for (int i = 0; i < capacity && i < *count; ++i) ids[i] = engines[static_cast<size_t>(i)].id;
    return report(Status());
  });
}

conccl_status conccl_device_topology_json(conccl_device_t d, char* buf, size_t capacity, size_t* needed) {
  return guard([&] {
    CONCCL_C_REQUIRE(d, "device is NULL");
    return copy_text(topology_json(d->dev->topology()), buf, capacity, needed);
  });
}

// ---- buffers -------------------------------------------------------------------

conccl_status conccl_buffer_alloc(conccl_device_t d, int gpu, size_t bytes, conccl_mem_kind kind, conccl_buffer* b) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && b, "device and buffer must not be NULL");
    const int k = enum_bits(kind);
    CONCCL_C_REQUIRE(k == CONCCL_MEM_DEVICE || k == CONCCL_MEM_HOST,
                     "kind must be CONCCL_MEM_DEVICE or CONCCL_MEM_HOST (CUDA memory: conccl_buffer_alloc_cuda)");
    Result<Buffer> r = d->dev->alloc(gpu, bytes, k == CONCCL_MEM_HOST ? MemKind::host : MemKind::device);
    if (!r.ok()) return report(r.status());
    *b = to_c(*r);
    return report(Status());
  });
}

conccl_status conccl_buffer_free(conccl_device_t d, const conccl_buffer* b) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && b, "device and buffer must not be NULL");
    auto it = d->cuda_allocs.find(b->va);
    if (it != d->cuda_allocs.end()) {
      CONCCL_RETURN_IF_ERROR_C(nv::unregister_cuda(*d->dev, to_cpp(*b)));
      nv::CudaAlloc a = it->second;
      d->cuda_allocs.erase(it);
      return report(nv::cuda_free(a));
    }
    return report(d->dev->free(to_cpp(*b)));
  });
}

conccl_status conccl_buffer_cuda_pointer(conccl_device_t d, const conccl_buffer* b, uint64_t* ptr) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && b && ptr, "device, buffer and ptr must not be NULL");
    auto it = d->cuda_allocs.find(b->va);
    if (it == d->cuda_allocs.end())
      return fail(CONCCL_ERR_NOT_FOUND, "conccl_buffer_cuda_pointer: the buffer at " + std::to_string(b->va) +
                                            " was not made by conccl_buffer_alloc_cuda on this device (for memory "
                                            "you registered, CUDA's pointer is the one you passed)");
    *ptr = it->second.ptr;
    return report(Status());
  });
}

conccl_status conccl_device_cuda_ordinal(conccl_device_t d, int gpu, int* ordinal) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && ordinal, "device and ordinal must not be NULL");
    if (!nv::native(*d->dev))
      return fail(CONCCL_ERR_UNAVAILABLE, "conccl_device_cuda_ordinal: CUDA memory needs the nv backend");
    Result<int> o = nv::cuda_ordinal(*d->dev, gpu);
    if (!o.ok()) return report(o.status());
    *ordinal = *o;
    return report(Status());
  });
}

conccl_status conccl_buffer_register_cuda(conccl_device_t d, int gpu, uint64_t ptr, size_t bytes, conccl_buffer* b) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && b, "device and buffer must not be NULL");
    Result<Buffer> r = nv::register_cuda(*d->dev, ptr, bytes, gpu);
    if (!r.ok()) return report(r.status());
    *b = to_c(*r);
    b->kind = CONCCL_MEM_CUDA;
    return report(Status());
  });
}

conccl_status conccl_buffer_unregister_cuda(conccl_device_t d, const conccl_buffer* b) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && b, "device and buffer must not be NULL");
    CONCCL_C_REQUIRE(!d->cuda_allocs.count(b->va), "buffer came from conccl_buffer_alloc_cuda: free it with conccl_buffer_free");
    return report(nv::unregister_cuda(*d->dev, to_cpp(*b)));
  });
}

conccl_status conccl_buffer_alloc_cuda(conccl_device_t d, int gpu, size_t bytes, conccl_buffer* b) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && b, "device and buffer must not be NULL");
    CONCCL_C_REQUIRE(bytes > 0, "bytes must be > 0");
    if (!nv::native(*d->dev))
      return fail(CONCCL_ERR_UNAVAILABLE, "conccl_buffer_alloc_cuda: CUDA memory needs the nv backend; use conccl_buffer_alloc");
    Result<int> ordinal = nv::cuda_ordinal(*d->dev, gpu);
    if (!ordinal.ok()) return report(ordinal.status());
    Result<nv::CudaAlloc> a = nv::cuda_alloc(bytes, *ordinal);
    if (!a.ok()) return report(a.status());
    Result<Buffer> r = nv::register_cuda(*d->dev, a->ptr, bytes, gpu);
    if (!r.ok()) {
      nv::CudaAlloc undo = *a;
      (void)nv::cuda_free(undo);
      return report(r.status());
    }
    d->cuda_allocs[r->va] = *a;
    *b = to_c(*r);
    b->kind = CONCCL_MEM_CUDA;
    return report(Status());
  });
}

conccl_status conccl_buffer_upload(conccl_device_t d, const conccl_buffer* b, size_t offset, const void* src,
                                   size_t bytes, uint32_t timeout_ms) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && b && (src || bytes == 0), "device, buffer and src must not be NULL");
    Result<Stager*> s = stager_for(d, b->kind == CONCCL_MEM_HOST ? -1 : b->gpu);
    if (!s.ok()) return report(s.status());
    return report((*s)->upload(to_cpp(*b), offset, src, bytes, after(timeout_ms)));
  });
}

conccl_status conccl_buffer_download(conccl_device_t d, void* dst, const conccl_buffer* b, size_t offset, size_t bytes,
                                     uint32_t timeout_ms) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && b && (dst || bytes == 0), "device, buffer and dst must not be NULL");
    Result<Stager*> s = stager_for(d, b->kind == CONCCL_MEM_HOST ? -1 : b->gpu);
    if (!s.ok()) return report(s.status());
    return report((*s)->download(dst, to_cpp(*b), offset, bytes, after(timeout_ms)));
  });
}

// ---- signals -------------------------------------------------------------------

conccl_status conccl_signal_create(conccl_device_t d, uint64_t initial, conccl_signal_t* s) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && s, "device and signal must not be NULL");
    *s = nullptr;
    Result<Signal> r = Signal::create(*d->dev, -1, initial);
    if (!r.ok()) return report(r.status());
    auto h = std::make_unique<conccl_signal>();
    h->sig = std::move(r).value();
    *s = h.release();
    return report(Status());
  });
}

void conccl_signal_destroy(conccl_signal_t s) { delete s; }
uint64_t conccl_signal_value(conccl_signal_t s) { return s ? s->sig.value() : 0; }
void conccl_signal_add(conccl_signal_t s, uint64_t delta) {
  if (s) (void)s->sig.add(delta);
}
uint64_t conccl_signal_address(conccl_signal_t s) { return s ? s->sig.va() : 0; }

conccl_status conccl_signal_wait(conccl_signal_t s, uint64_t v, uint32_t timeout_ms) {
  return guard([&] {
    CONCCL_C_REQUIRE(s, "signal is NULL");
    return report(s->sig.wait(v, after(timeout_ms)));
  });
}

// ---- queues --------------------------------------------------------------------

void conccl_queue_options_init(conccl_queue_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

conccl_status conccl_queue_create(conccl_device_t d, int gpu, int engine, const conccl_queue_options* o,
                                  conccl_queue_t* q) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && q, "device and queue must not be NULL");
    *q = nullptr;
    QueueOptions opt;
    if (o) {
      CONCCL_C_REQUIRE(size_ok(o, sizeof(conccl_queue_options)),
                       "options->struct_size is " + std::to_string(o->struct_size) +
                           ": call conccl_queue_options_init first");
      if (o->ring_bytes) opt.ring_bytes = o->ring_bytes;
    }
    Result<std::unique_ptr<Queue>> r = d->dev->create_queue(gpu, engine, opt);
    if (!r.ok()) return report(r.status());
    auto h = std::make_unique<conccl_queue>(conccl_queue{std::move(r).value(), CommandBuffer(Isa{})});
    h->pending = h->q->command_buffer();
    *q = h.release();
    return report(Status());
  });
}

void conccl_queue_destroy(conccl_queue_t q) { delete q; }

conccl_status conccl_queue_copy(conccl_queue_t q, uint64_t dst, uint64_t src, uint64_t bytes) {
  return guard([&] {
    CONCCL_C_REQUIRE(q, "queue is NULL");
    return report(q->pending.copy(dst, src, bytes));
  });
}

conccl_status conccl_queue_fill(conccl_queue_t q, uint64_t dst, uint32_t value, uint64_t bytes) {
  return guard([&] {
    CONCCL_C_REQUIRE(q, "queue is NULL");
    return report(q->pending.fill(dst, value, bytes));
  });
}

conccl_status conccl_queue_signal_add(conccl_queue_t q, conccl_signal_t s, uint64_t delta) {
  return guard([&] {
    CONCCL_C_REQUIRE(q && s, "queue and signal must not be NULL");
    return report(s->sig.enqueue_add(q->pending, delta));
  });
}

conccl_status conccl_queue_wait_signal(conccl_queue_t q, conccl_signal_t s, uint64_t v) {
  return guard([&] {
    CONCCL_C_REQUIRE(q && s, "queue and signal must not be NULL");
    return report(s->sig.enqueue_wait(q->pending, v));
  });
}

conccl_status conccl_queue_submit(conccl_queue_t q, uint32_t timeout_ms, uint64_t* ticket) {
  return guard([&] {
    CONCCL_C_REQUIRE(q, "queue is NULL");
    QueueSpan span;
    Status st = q->q->submit(q->pending, after(timeout_ms), &span);
    if (st.ok()) {
      q->pending.clear();
      if (ticket) *ticket = span.end;
    }
    return report(st);
  });
}

conccl_status conccl_queue_wait(conccl_queue_t q, uint64_t ticket, uint32_t timeout_ms) {
  return guard([&] {
    CONCCL_C_REQUIRE(q, "queue is NULL");
    return report(q->q->wait_done(after(timeout_ms), ticket));
  });
}

uint64_t conccl_queue_completed(conccl_queue_t q) { return q ? q->q->completed() : 0; }
size_t conccl_queue_pending_bytes(conccl_queue_t q) { return q ? q->pending.size_bytes() : 0; }

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

// A created communicator as the caller's handle (or the error it carries).
static conccl_status adopt_comm(conccl_device_t d, Result<std::unique_ptr<Communicator>> c, uint32_t timeout,
                                conccl_comm_t* comm) {
  if (!c.ok()) return report(c.status());
  auto h = std::make_unique<conccl_comm>();
  h->device = d;
  h->comm = std::move(c).value();
  h->timeout_ms = timeout;
  *comm = h.release();
  return report(Status());
}

// conccl_comm_options (NULL: the defaults) as Communicator::Options and the
// calls' timeout.
static conccl_status comm_options_from(const conccl_comm_options* o, Communicator::Options* opt, uint32_t* timeout) {
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
  if (o->timeout_ms) *timeout = o->timeout_ms;
  return CONCCL_OK;
}

conccl_status conccl_comm_create(conccl_device_t d, const int* gpus, int nranks, const conccl_comm_options* o,
                                 conccl_comm_t* comm) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && gpus && comm, "device, gpus and comm must not be NULL");
    *comm = nullptr;
    CONCCL_C_REQUIRE(nranks > 0, "nranks must be positive");
    Communicator::Options opt;
    uint32_t timeout = 60000;
    if (conccl_status st = comm_options_from(o, &opt, &timeout); st != CONCCL_OK) return st;
    Result<std::unique_ptr<Communicator>> c = Communicator::create(*d->dev, std::vector<int>(gpus, gpus + nranks), opt);
    return adopt_comm(d, std::move(c), timeout, comm);
  });
}

conccl_status conccl_get_unique_id(conccl_unique_id* id) {
  return guard([&] {
    CONCCL_C_REQUIRE(id, "id is NULL");
    Result<UniqueId> u = make_unique_id();
    if (!u.ok()) return report(u.status());
    std::memcpy(id->bytes, u->bytes.data(), sizeof id->bytes);
    return report(Status());
  });
}

conccl_status conccl_unique_id_to_string(const conccl_unique_id* id, char* buf, size_t capacity) {
  return guard([&] {
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
  return guard([&] {
    CONCCL_C_REQUIRE(text && id, "text and id must not be NULL");
    Result<UniqueId> u = UniqueId::parse(text);
    if (!u.ok()) return report(u.status());
    std::memcpy(id->bytes, u->bytes.data(), sizeof id->bytes);
    return report(Status());
  });
}

conccl_status conccl_comm_create_rank(conccl_device_t d, int rank, int nranks, const conccl_unique_id* id, int gpu,
                                      const conccl_comm_options* o, conccl_comm_t* comm) {
  return guard([&] {
    CONCCL_C_REQUIRE(d && id && comm, "device, id and comm must not be NULL");
    *comm = nullptr;
    Communicator::Options opt;
    uint32_t timeout = 60000;
    if (conccl_status st = comm_options_from(o, &opt, &timeout); st != CONCCL_OK) return st;
    opt.gpu = gpu;
    opt.join_timeout_ms = timeout;
    UniqueId u;
    std::memcpy(u.bytes.data(), id->bytes, sizeof id->bytes);
    Result<std::unique_ptr<Communicator>> c = Communicator::create(*d->dev, rank, nranks, u, opt);
    return adopt_comm(d, std::move(c), timeout, comm);
  });
}

int conccl_comm_rank(conccl_comm_t c) { return c ? c->comm->rank() : -1; }

void conccl_comm_destroy(conccl_comm_t c) {
  if (!c) return;
  c->in_flight.clear();
  c->cache.clear();  // plans before their communicator (each waits for its own launch)
  delete c;
}

int conccl_comm_size(conccl_comm_t c) { return c ? c->comm->size() : 0; }
size_t conccl_comm_cached_plans(conccl_comm_t c) { return c ? c->cached_plans() : 0; }

void conccl_collective_args_init(conccl_collective_args* a) {
  if (!a) return;
  std::memset(a, 0, sizeof *a);
  a->struct_size = sizeof *a;
  a->peer = 1;
}

conccl_status conccl_plan_create(conccl_comm_t c, const conccl_collective_args* a, conccl_plan_t* plan) {
  return guard([&] {
    CONCCL_C_REQUIRE(c && a && plan, "comm, args and plan must not be NULL");
    *plan = nullptr;
    CONCCL_C_REQUIRE(size_ok(a, sizeof(conccl_collective_args)),
                     "args->struct_size is " + std::to_string(a->struct_size) +
                         ": call conccl_collective_args_init first");
    const int op = enum_bits(a->op), variant = enum_bits(a->variant);
    CONCCL_C_REQUIRE(op >= CONCCL_P2P && op <= CONCCL_ALL_TO_ALL, "op " + std::to_string(op) + " is not a conccl_op");
    CONCCL_C_REQUIRE(variant >= CONCCL_VARIANT_AUTO && variant <= CONCCL_VARIANT_SINGLE,
                     "variant " + std::to_string(variant) + " is not a conccl_variant");
    CONCCL_C_REQUIRE(a->nsend >= 0 && a->nrecv >= 0 && (a->send || a->nsend == 0) && (a->recv || a->nrecv == 0),
                     "send/recv must hold nsend/nrecv buffers");
    CollectiveArgs args;
    args.op = static_cast<CollOp>(op);
    args.variant = static_cast<Variant>(variant);
    args.bytes = a->bytes;
    args.root = a->root;
    args.peer = a->peer;
    for (int i = 0; i < a->nsend; ++i) args.send.push_back(to_cpp(a->send[i]));
    for (int i = 0; i < a->nrecv; ++i) args.recv.push_back(to_cpp(a->recv[i]));
    args.prelaunch = a->prelaunch != 0;
    args.timestamps = a->timestamps != 0;
    Result<std::unique_ptr<Plan>> p = c->comm->plan(args);
    if (!p.ok()) return report(p.status());
    auto h = std::make_unique<conccl_plan>();
    h->plan = std::move(p).value();
    *plan = h.release();
    return report(Status());
  });
}

void conccl_plan_destroy(conccl_plan_t p) { delete p; }

conccl_status conccl_plan_launch(conccl_plan_t p, uint32_t timeout_ms) {
  return guard([&] {
    CONCCL_C_REQUIRE(p, "plan is NULL");
    return report(p->plan->launch(after(timeout_ms)));
  });
}

conccl_status conccl_plan_prelaunch(conccl_plan_t p, uint32_t timeout_ms) {
  return guard([&] {
    CONCCL_C_REQUIRE(p, "plan is NULL");
    return report(p->plan->prelaunch(after(timeout_ms)));
  });
}

conccl_status conccl_plan_release(conccl_plan_t p) {
  return guard([&] {
    CONCCL_C_REQUIRE(p, "plan is NULL");
    return report(p->plan->release());
  });
}

conccl_status conccl_plan_wait(conccl_plan_t p, uint32_t timeout_ms) {
  return guard([&] {
    CONCCL_C_REQUIRE(p, "plan is NULL");
    return report(p->plan->wait(after(timeout_ms)));
  });
}

conccl_variant conccl_plan_variant(conccl_plan_t p) {
  return p ? static_cast<conccl_variant>(p->plan->variant()) : CONCCL_VARIANT_AUTO;
}

conccl_status conccl_plan_completion(conccl_plan_t p, int rank, uint64_t* address, uint64_t* value) {
  return guard([&] {
    CONCCL_C_REQUIRE(p && address && value, "plan, address and value must not be NULL");
    const int n = static_cast<int>(p->plan->args().recv.size());
    if (rank < 0 || rank >= n)
      return fail(CONCCL_ERR_OUT_OF_RANGE, "rank " + std::to_string(rank) + " of a plan over " + std::to_string(n) + " ranks");
    *address = p->plan->arrival(rank).compute_wait(0).address;
    *value = p->plan->arrivals_expected(rank);
    return report(Status());
  });
}

conccl_status conccl_plan_release_by_stores(conccl_plan_t p, conccl_store* stores, int capacity, int* count) {
  return guard([&] {
    CONCCL_C_REQUIRE(p && count && (stores || capacity == 0), "plan, stores and count must not be NULL");
    // Checked before the plan is counted as released: the stores must fit.
    CONCCL_C_REQUIRE(capacity >= 2, "capacity " + std::to_string(capacity) + " is too small: give room for 2 stores");
    Result<std::vector<SignalStore>> w = p->plan->release_by_stores();
    if (!w.ok()) return report(w.status());
    *count = static_cast<int>(w->size());
    for (size_t i = 0; i < w->size(); ++i) stores[i] = conccl_store{(*w)[i].va, (*w)[i].value};
    return report(Status());
  });
}

conccl_status conccl_plan_consumed_store(conccl_plan_t p, conccl_store* store) {
  return guard([&] {
    CONCCL_C_REQUIRE(p && store, "plan and store must not be NULL");
    const SignalStore s = p->plan->consumed_store();
    if (s.va == 0) return fail(CONCCL_ERR_INVALID_ARGUMENT, "conccl_plan_consumed_store before conccl_plan_release_by_stores");
    *store = conccl_store{s.va, s.value};
    return report(Status());
  });
}

conccl_status conccl_plan_enqueue_on_stream(conccl_plan_t p, void* stream, uint32_t timeout_ms) {
  return guard([&] {
    CONCCL_C_REQUIRE(p, "plan is NULL");
    return report(nv::enqueue_on_stream(p->plan->communicator().device(), *p->plan, stream, after(timeout_ms)));
  });
}

conccl_status conccl_plan_describe(conccl_plan_t p, char* buf, size_t capacity, size_t* needed) {
  return guard([&] {
    CONCCL_C_REQUIRE(p, "plan is NULL");
    return copy_text(p->plan->describe(), buf, capacity, needed);
  });
}

conccl_status conccl_all_gather(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, conccl_comm_t comm,
                                void* stream) {
  return guard([&] { return nccl_shaped(CollOp::all_gather, send, recv, bytes, 0, comm, stream); });
}

conccl_status conccl_all_to_all(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, conccl_comm_t comm,
                                void* stream) {
  return guard([&] { return nccl_shaped(CollOp::all_to_all, send, recv, bytes, 0, comm, stream); });
}

conccl_status conccl_broadcast(const conccl_buffer* root_send, const conccl_buffer* recv, size_t bytes, int root,
                               conccl_comm_t comm, void* stream) {
  return guard([&] { return nccl_shaped(CollOp::broadcast, root_send, recv, bytes, root, comm, stream); });
}

}  // extern "C"
