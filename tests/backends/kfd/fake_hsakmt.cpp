// tests/backends/kfd/fake_hsakmt.cpp - see fake_hsakmt.hpp. Behaviour follows
// the real thunk and KFD where the backend depends on it (ROCR-Runtime
// libhsakmt/src/{openclose,memory,queues,events}.c; kfd_events.c for the
// mailbox check on TRAP); nothing here is copied from them.
#if defined(CONCCL_HSAKMT_NESTED_HEADER)
#include <hsakmt/hsakmt.h>
#else
#include <hsakmt.h>
#endif

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "fake_hsakmt.hpp"
#include "packets/generation.hpp"
#include "packets/sdma_codec.hpp"

namespace fakekmt {

namespace {

constexpr uint64_t kUnsignaled = ~0ull;  // kfd_events.c UNSIGNALED_EVENT_SLOT
constexpr int kEventSlots = 4096;

struct Event {
  HsaEvent* ev = nullptr;
  bool manual_reset = false;
  bool signaled = false;
  int slot = -1;
};

struct Queue;

struct World {
  std::mutex mu;
  std::condition_variable cv;  // events
  Config cfg;
  Stats st;
  std::map<uint64_t, Allocation> allocs;  // by start
  std::map<HSAuint32, Event> events;      // by id
  std::map<uint64_t, std::unique_ptr<Queue>> queues;
  std::map<std::pair<int, int>, int> used_slots;  // (node, engine) -> queues
  uint64_t events_page[kEventSlots];
  HSAuint32 next_event = 1;
  HsaEvent* fault_event = nullptr;
  bool fault_pending = false;
  HsaMemoryAccessFault fault{};
  std::vector<std::pair<uint64_t, uint64_t>> foreign;  // map_foreign: (start, bytes)
};

World& world() {
  static World* w = new World();  // never destroyed: queue threads may outlive statics
  return *w;
}

bool mapped_locked(World& w, uint64_t addr, uint64_t bytes, HSAuint32 node) {
  const uint64_t page = reinterpret_cast<uint64_t>(w.events_page);
  if (addr >= page && addr + bytes <= page + sizeof w.events_page) return true;
  for (const auto& [start, size] : w.foreign)
    if (addr >= start && addr + bytes <= start + size) return true;
  auto it = w.allocs.upper_bound(addr);
  if (it == w.allocs.begin()) return false;
  --it;
  const Allocation& a = it->second;
  if (addr + bytes > a.ptr + a.size) return false;
  for (uint32_t n : a.mapped_nodes)
    if (n == node) return true;
  return false;
}

struct Queue {
  HsaQueueResource res{};
  int node = 0;
  uint32_t* ring = nullptr;
  uint64_t size = 0;
  // rptr, wptr and the doorbell live in the fake's own page, like the thunk's struct queue.
  alignas(64) uint64_t rptr = 0;
  alignas(64) uint64_t wptr = 0;
  alignas(64) uint64_t doorbell = 0;
  std::pair<int, int> slot{};
  std::atomic<bool> stop{false};
  std::thread engine;
  conccl::sdma::Gen gen = conccl::sdma::Gen::v4_4_2;

  void run() {
    std::atomic_ref<uint64_t> r(rptr), wp(wptr);
    while (!stop.load(std::memory_order_acquire)) {
      const uint64_t rp = r.load(std::memory_order_acquire);
      if (rp >= wp.load(std::memory_order_acquire)) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        continue;
      }
      const uint64_t off = rp & (size - 1);
      const std::span<const uint32_t> dw(ring + off / 4, (size - off) / 4);
      conccl::Result<conccl::sdma::Packet> p = conccl::sdma::decode(gen, dw);
      if (!p.ok()) return halt(reinterpret_cast<uint64_t>(ring) + off);
      const int step = execute(*p);
      if (step < 0) return;  // halted
      if (step == 0) {       // blocked on a poll
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        continue;
      }
      r.store(rp + p->dwords * 4, std::memory_order_release);
    }
  }

  void halt(uint64_t va) {
    World& w = world();
    std::lock_guard<std::mutex> lock(w.mu);
    w.fault = HsaMemoryAccessFault{};
    w.fault.NodeId = static_cast<HSAuint32>(node);
    w.fault.VirtualAddress = va;
    w.fault.Failure.NotPresent = 1;
    w.fault_pending = true;
    w.cv.notify_all();
  }

  bool ok(uint64_t addr, uint64_t bytes) {
    World& w = world();
    std::lock_guard<std::mutex> lock(w.mu);
    return mapped_locked(w, addr, bytes, static_cast<HSAuint32>(node));
  }

  // One more packet of a kind the stats count; 1 (done).
  static int count(int Stats::*counter) {
    World& w = world();
    std::lock_guard<std::mutex> lock(w.mu);
    ++(w.st.*counter);
    return 1;
  }

  // 1: done, 0: blocked, -1: halted.
  int execute(const conccl::sdma::Packet& p) {
    using conccl::sdma::Key;
    using conccl::sdma::Pkt;
    switch (p.pkt) {
      case Pkt::nop: return 1;
      case Pkt::poll_reg:
        if (p.get(Key::req) != 0x80000000u) return halt(0xDEAD0000), -1;  // only the firmware HDP flush
        return count(&Stats::hdp_flushes);
      case Pkt::gcr_user: return count(&Stats::gcr_ops);
      case Pkt::copy: {
        const uint64_t src = p.get(Key::src), dst = p.get(Key::dst), n = p.get(Key::bytes);
        if (!ok(src, n)) return halt(src), -1;
        if (!ok(dst, n)) return halt(dst), -1;
        std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
        return 1;
      }
      case Pkt::fill: {
        const uint64_t dst = p.get(Key::dst), n = p.get(Key::bytes);
        const uint32_t v = static_cast<uint32_t>(p.get(Key::value));
        if (!ok(dst, n)) return halt(dst), -1;
        World& w = world();
        bool write = true;
        {
          std::lock_guard<std::mutex> lock(w.mu);
          w.st.fills.push_back(Fill{node, dst, n, v});
          write = !w.cfg.fills_write_nothing;
        }
        if (write)
          for (uint64_t i = 0; i + 4 <= n; i += 4) std::memcpy(reinterpret_cast<void*>(dst + i), &v, 4);
        return 1;
      }
      case Pkt::fence: {
        const uint64_t a = p.get(Key::addr);
        if (!ok(a, 4)) return halt(a), -1;
        std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(a))
            .store(static_cast<uint32_t>(p.get(Key::value)), std::memory_order_release);
        return 1;
      }
      case Pkt::poll: {
        const uint64_t a = p.get(Key::addr);
        if (!ok(a, 4)) return halt(a), -1;
        const uint32_t v = std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(a)).load(std::memory_order_acquire);
        const uint32_t m = static_cast<uint32_t>(p.get(Key::mask)), ref = static_cast<uint32_t>(p.get(Key::ref));
        const uint32_t x = v & m;
        bool pass = false;
        switch (p.get(Key::func)) {
          case 0: pass = true; break;
          case 1: pass = x < ref; break;
          case 2: pass = x <= ref; break;
          case 3: pass = x == ref; break;
          case 4: pass = x != ref; break;
          case 5: pass = x >= ref; break;
          case 6: pass = x > ref; break;
        }
        return pass ? 1 : 0;
      }
      case Pkt::atomic_add64: {
        const uint64_t a = p.get(Key::addr);
        if (!ok(a, 8)) return halt(a), -1;
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(a))
            .fetch_add(p.get(Key::value), std::memory_order_acq_rel);  // two's complement: negative adds too
        return count(&Stats::atomics);
      }
      case Pkt::trap: {
        // KFD: the interrupt carries the context; the event of that id wakes
        // only if its mailbox slot was signaled (then the slot is reset).
        World& w = world();
        std::lock_guard<std::mutex> lock(w.mu);
        w.st.traps.push_back(static_cast<uint32_t>(p.get(Key::ctx)));
        auto it = w.events.find(static_cast<HSAuint32>(p.get(Key::ctx)));
        if (it != w.events.end() && it->second.slot >= 0 && w.events_page[it->second.slot] != kUnsignaled) {
          w.events_page[it->second.slot] = kUnsignaled;
          it->second.signaled = true;
          w.cv.notify_all();
        }
        return 1;
      }
      default:
        return halt(0xDEAD0000), -1;  // not something these tests submit
    }
  }
};

HSAKMT_STATUS fail(HSAKMT_STATUS s, int err) {
  errno = err;
  return s;
}

}  // namespace

Config mi300x() {
  Config c;
  c.nodes.push_back(Node{});
  for (int i = 0; i < 8; ++i) c.nodes.push_back(Node{true, 128 + 8 * i, 2, 14});
  return c;
}

void reset(const Config& c) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  w.cfg = c;
  w.st = Stats{};
  w.allocs.clear();
  w.used_slots.clear();
  w.fault_pending = false;
  w.foreign.clear();
  for (uint64_t& s : w.events_page) s = kUnsignaled;
}

void map_foreign(uint64_t ptr, uint64_t bytes) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  w.foreign.emplace_back(ptr, bytes);
}

Stats stats() {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  Stats s = w.st;
  s.live_allocations = static_cast<int>(w.allocs.size());
  s.live_queues = static_cast<int>(w.queues.size());
  s.live_events = static_cast<int>(w.events.size());
  for (const auto& [k, a] : w.allocs) s.allocations.push_back(a);
  return s;
}

Allocation allocation_of(uint64_t ptr) {
  World& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  auto it = w.allocs.upper_bound(ptr);
  if (it == w.allocs.begin()) return {};
  --it;
  return ptr < it->second.ptr + it->second.size ? it->second : Allocation{};
}

}  // namespace fakekmt

using fakekmt::world;

extern "C" {

HSAKMT_STATUS HSAKMTAPI hsaKmtOpenKFD(void) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.cfg.open_status != HSAKMT_STATUS_SUCCESS)
    return fakekmt::fail(static_cast<HSAKMT_STATUS>(w.cfg.open_status), w.cfg.open_errno);
  return w.st.open_count++ ? HSAKMT_STATUS_KERNEL_ALREADY_OPENED : HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtCloseKFD(void) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.st.open_count == 0) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
  --w.st.open_count;
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtGetVersion(HsaVersionInfo* v) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  v->KernelInterfaceMajorVersion = w.cfg.kfd_major;
  v->KernelInterfaceMinorVersion = w.cfg.kfd_minor;
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtAcquireSystemProperties(HsaSystemProperties* p) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  std::memset(p, 0, sizeof *p);
  p->NumNodes = static_cast<HSAuint32>(w.cfg.nodes.size());
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtReleaseSystemProperties(void) { return HSAKMT_STATUS_SUCCESS; }

HSAKMT_STATUS HSAKMTAPI hsaKmtGetNodeProperties(HSAuint32 id, HsaNodeProperties* p) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (id >= w.cfg.nodes.size()) return HSAKMT_STATUS_INVALID_NODE_UNIT;
  std::memset(p, 0, sizeof *p);
  const fakekmt::Node& n = w.cfg.nodes[id];
  p->NumFComputeCores = n.gpu ? 1216 : 0;
  p->NumCPUCores = n.gpu ? 0 : 96;
  p->DrmRenderMinor = n.drm_render_minor;
  p->NumSdmaEngines = static_cast<HSAuint32>(n.num_sdma);
  p->NumSdmaXgmiEngines = static_cast<HSAuint32>(n.num_xgmi);
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtAllocMemory(HSAuint32 node, HSAuint64 size, HsaMemFlags flags, void** out) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  ++w.st.alloc_calls;
  if (node >= w.cfg.nodes.size() || size == 0 || size % 4096) return HSAKMT_STATUS_INVALID_PARAMETER;
  if (flags.ui32.CoarseGrain && flags.ui32.Uncached) return HSAKMT_STATUS_INVALID_PARAMETER;  // memory.c
  const bool vram = w.cfg.nodes[node].gpu && flags.ui32.NonPaged;
  if (vram && flags.ui32.HostAccess && w.cfg.small_bar) {
    ++w.st.failed_allocs;
    return HSAKMT_STATUS_NO_MEMORY;
  }
  void* p = nullptr;
  if (posix_memalign(&p, 4096, size) != 0) return fakekmt::fail(HSAKMT_STATUS_NO_MEMORY, ENOMEM);
  std::memset(p, vram ? w.cfg.vram_garbage : 0, size);
  fakekmt::Allocation a;
  a.ptr = reinterpret_cast<uint64_t>(p);
  a.size = size;
  a.flags = flags.Value;
  a.node = static_cast<int>(node);
  w.allocs[a.ptr] = a;
  *out = p;
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtFreeMemory(void* ptr, HSAuint64 size) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  auto it = w.allocs.find(reinterpret_cast<uint64_t>(ptr));
  if (it == w.allocs.end() || it->second.registered || it->second.size != size) return HSAKMT_STATUS_INVALID_PARAMETER;
  w.allocs.erase(it);
  std::free(ptr);
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtMapMemoryToGPUNodes(void* ptr, HSAuint64 size, HSAuint64* alt, HsaMemMapFlags,
                                                  HSAuint64 n, HSAuint32* nodes) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  auto it = w.allocs.find(reinterpret_cast<uint64_t>(ptr));
  if (it == w.allocs.end() || size > it->second.size) return HSAKMT_STATUS_INVALID_PARAMETER;
  for (HSAuint64 i = 0; i < n; ++i)
    if (nodes[i] >= w.cfg.nodes.size() || !w.cfg.nodes[nodes[i]].gpu) return HSAKMT_STATUS_INVALID_NODE_UNIT;
  it->second.mapped_nodes.assign(nodes, nodes + n);  // the new set replaces the old one
  if (alt) *alt = 0;
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtUnmapMemoryToGPU(void* ptr) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  auto it = w.allocs.find(reinterpret_cast<uint64_t>(ptr));
  if (it == w.allocs.end()) return HSAKMT_STATUS_INVALID_PARAMETER;
  it->second.mapped_nodes.clear();
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtRegisterMemoryToNodes(void* ptr, HSAuint64 size, HSAuint64 n, HSAuint32* nodes) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  const uint64_t p = reinterpret_cast<uint64_t>(ptr);
  if (p % 4096 || size % 4096) return HSAKMT_STATUS_MEMORY_ALIGNMENT;  // stricter than the thunk, on purpose
  for (const auto& [k, a] : w.allocs)
    if (p < a.ptr + a.size && a.ptr < p + size) return HSAKMT_STATUS_MEMORY_ALREADY_REGISTERED;
  fakekmt::Allocation a;
  a.ptr = p;
  a.size = size;
  a.registered = true;
  (void)n;
  (void)nodes;
  w.allocs[p] = a;
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtDeregisterMemory(void* ptr) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  auto it = w.allocs.find(reinterpret_cast<uint64_t>(ptr));
  if (it == w.allocs.end() || !it->second.registered) return HSAKMT_STATUS_MEMORY_NOT_REGISTERED;
  w.allocs.erase(it);
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtQueryPointerInfo(const void* ptr, HsaPointerInfo* info) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  std::memset(info, 0, sizeof *info);
  const uint64_t p = reinterpret_cast<uint64_t>(ptr);
  auto it = w.allocs.upper_bound(p);
  if (it == w.allocs.begin() || p >= std::prev(it)->second.ptr + std::prev(it)->second.size) {
    info->Type = HSA_POINTER_UNKNOWN;
    return HSAKMT_STATUS_ERROR;
  }
  const fakekmt::Allocation& a = std::prev(it)->second;
  info->Type = a.registered ? HSA_POINTER_REGISTERED_USER : HSA_POINTER_ALLOCATED;
  info->Node = static_cast<HSAuint32>(a.node);
  info->MemFlags.Value = a.flags;
  info->CPUAddress = reinterpret_cast<void*>(a.ptr);
  info->GPUAddress = a.ptr;
  info->SizeInBytes = a.size;
  info->NMappedNodes = static_cast<HSAuint32>(a.mapped_nodes.size());
  info->MappedNodes = a.mapped_nodes.data();  // valid while the allocation lives, as in the thunk
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtCreateEvent(HsaEventDescriptor* d, bool manual_reset, bool signaled, HsaEvent** out) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (d->EventType == HSA_EVENTTYPE_SIGNAL && w.cfg.events_page_taken) return fakekmt::fail(HSAKMT_STATUS_ERROR, EINVAL);
  auto* ev = new HsaEvent();
  std::memset(ev, 0, sizeof *ev);
  ev->EventId = w.next_event++;
  ev->EventData.EventType = d->EventType;
  fakekmt::Event e;
  e.ev = ev;
  e.manual_reset = manual_reset;
  e.signaled = signaled;
  if (d->EventType == HSA_EVENTTYPE_SIGNAL) {
    e.slot = static_cast<int>(ev->EventId % fakekmt::kEventSlots);
    ev->EventData.HWData2 = reinterpret_cast<HSAuint64>(&w.events_page[e.slot]);
  }
  if (d->EventType == HSA_EVENTTYPE_MEMORY) w.fault_event = ev;
  w.st.events_created++;
  ev->EventData.HWData1 = ev->EventId;
  w.events[ev->EventId] = e;
  *out = ev;
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtDestroyEvent(HsaEvent* ev) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (!ev || !w.events.erase(ev->EventId)) return HSAKMT_STATUS_INVALID_HANDLE;
  if (w.fault_event == ev) w.fault_event = nullptr;
  delete ev;
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtWaitOnEvent(HsaEvent* ev, HSAuint32 ms) {
  auto& w = world();
  std::unique_lock<std::mutex> lock(w.mu);
  auto it = w.events.find(ev->EventId);
  if (it == w.events.end()) return HSAKMT_STATUS_INVALID_HANDLE;
  const bool memory = ev->EventData.EventType == HSA_EVENTTYPE_MEMORY;
  auto ready = [&] { return memory ? w.fault_pending : w.events[ev->EventId].signaled; };
  if (!w.cv.wait_for(lock, std::chrono::milliseconds(ms), ready)) return HSAKMT_STATUS_WAIT_TIMEOUT;
  if (memory) {
    ev->EventData.EventData.MemoryAccessFault = w.fault;
  } else if (!w.events[ev->EventId].manual_reset) {
    w.events[ev->EventId].signaled = false;
  }
  return HSAKMT_STATUS_SUCCESS;
}

static HSAKMT_STATUS create_queue(HSAuint32 node, HSA_QUEUE_TYPE type, int pinned_engine, void* ring,
                                  HSAuint64 size, HsaQueueResource* res) {
  auto& w = world();
  std::lock_guard<std::mutex> lock(w.mu);
  if (node >= w.cfg.nodes.size() || !w.cfg.nodes[node].gpu) return HSAKMT_STATUS_INVALID_NODE_UNIT;
  if (size < 4096 || (size & (size - 1))) return fakekmt::fail(HSAKMT_STATUS_ERROR, EINVAL);
  auto al = w.allocs.find(reinterpret_cast<uint64_t>(ring));
  // KFD >= 6.12: the ring must be the start of a mapping of exactly its size.
  if (al == w.allocs.end() || al->second.size != size) return fakekmt::fail(HSAKMT_STATUS_ERROR, EINVAL);
  const fakekmt::Node& n = w.cfg.nodes[node];
  int first = 0, count = n.num_sdma;
  if (pinned_engine >= 0) {
    first = pinned_engine;
    count = 1;
  } else if (static_cast<int>(type) == HSA_QUEUE_SDMA_XGMI) {
    first = n.num_sdma;
    count = n.num_xgmi;
  } else if (static_cast<int>(type) != HSA_QUEUE_SDMA) {
    return fakekmt::fail(HSAKMT_STATUS_ERROR, EINVAL);
  }
  // KFD: the first free slot of the pool; engines take turns.
  int engine = -1;
  for (int q = 0; q < w.cfg.queues_per_engine && engine < 0; ++q)
    for (int e = first; e < first + count && engine < 0; ++e)
      if (w.used_slots[{static_cast<int>(node), e}] <= q) engine = e;
  if (engine < 0) return fakekmt::fail(HSAKMT_STATUS_ERROR, ENOMEM);  // 5.2.3: every ioctl error is ERROR
  auto q = std::make_unique<fakekmt::Queue>();
  q->node = static_cast<int>(node);
  q->ring = static_cast<uint32_t*>(ring);
  q->size = size;
  q->slot = {static_cast<int>(node), engine};
  ++w.used_slots[q->slot];
  q->res.QueueId = reinterpret_cast<HSA_QUEUEID>(q.get());
  q->res.Queue_DoorBell_aql = &q->doorbell;
  q->res.Queue_write_ptr_aql = &q->wptr;
  q->res.Queue_read_ptr_aql = &q->rptr;
  *res = q->res;
  w.st.queues.push_back({static_cast<int>(node), static_cast<int>(type), static_cast<uint32_t>(engine),
                         reinterpret_cast<uint64_t>(ring), size});
  fakekmt::Queue* raw = q.get();
  w.queues[reinterpret_cast<uint64_t>(raw)] = std::move(q);
  raw->engine = std::thread([raw] { raw->run(); });
  return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtCreateQueue(HSAuint32 node, HSA_QUEUE_TYPE type, HSAuint32, HSA_QUEUE_PRIORITY,
                                          void* ring, HSAuint64 size, HsaEvent*, HsaQueueResource* res) {
  return create_queue(node, type, -1, ring, size, res);
}

#if defined(CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
HSAKMT_STATUS HSAKMTAPI hsaKmtCreateQueueExt(HSAuint32 node, HSA_QUEUE_TYPE type, HSAuint32, HSA_QUEUE_PRIORITY,
                                             HSAuint32 engine, void* ring, HSAuint64 size, HsaEvent*,
                                             HsaQueueResource* res) {
  return create_queue(node, type, static_cast<int>(engine), ring, size, res);
}
#endif

HSAKMT_STATUS HSAKMTAPI hsaKmtDestroyQueue(HSA_QUEUEID id) {
  auto& w = world();
  std::unique_ptr<fakekmt::Queue> q;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    auto it = w.queues.find(static_cast<uint64_t>(id));
    if (it == w.queues.end()) return HSAKMT_STATUS_INVALID_HANDLE;
    q = std::move(it->second);
    w.queues.erase(it);
    --w.used_slots[q->slot];
  }
  q->stop.store(true, std::memory_order_release);
  q->engine.join();
  return HSAKMT_STATUS_SUCCESS;
}

}  // extern "C"
