// src/backends/emu/device.cpp - the emulated node as a conccl::Device.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <cstdio>
#include <map>

#include "conccl/sdma_packets.hpp"
#include "backends/emu/node.hpp"
#include "backends/registry.hpp"
#include "backends/emu/presets.hpp"
#include "conccl/emu.hpp"
#include "conccl/queue.hpp"
#include "queue/gpfifo_queue.hpp"
#include "queue/sdma_queue.hpp"

namespace conccl::emu {

namespace {

class EmuQueueBackend final : public SdmaRingBackend {
 public:
  EmuQueueBackend(std::shared_ptr<Node> node, Engine* engine, Buffer ring, Buffer ptrs)
      : node_(std::move(node)), engine_(engine), ring_(ring), ptrs_(ptrs) {}
  ~EmuQueueBackend() override {
    engine_->remove_queue(&q_);
    (void)node_->host_arena()->release(ring_.va);
    (void)node_->host_arena()->release(ptrs_.va);
  }
  EmuQueue& q() { return q_; }

  void ring_doorbell(uint64_t) override { engine_->doorbell(); }
  Event* wake_event() override { return &q_.event; }
  // The emulator's TRAP raises the executing queue's own event (no mailbox).
  Status record_wake(CommandBuffer& cb) const override { return SdmaPackets(cb).trap(static_cast<uint32_t>(q_.id)); }
  EngineStatus engine_status() const override {
    EngineStatus s = engine_->status();
    // Poll details belong to whichever queue is blocked; say if it is not us.
    if (s.state == EngineStatus::State::polling && s.wait.queue != q_.id &&
        q_.poll_evals.load(std::memory_order_relaxed) == 0)
      s.state = EngineStatus::State::running;
    return s;
  }
  int id() const override { return q_.id; }
  void wait_progress(uint64_t seen_rptr, Deadline deadline) override {
    std::atomic_ref<uint64_t> r(*q_.rptr);
    for (int i = 0; i < 64; ++i) {
      if (r.load(std::memory_order_acquire) != seen_rptr) return;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    const uint32_t seq = q_.progress.seq();
    if (r.load(std::memory_order_acquire) != seen_rptr || engine_->status().state == EngineStatus::State::halted)
      return;
    q_.progress.wait(seq, std::min<std::chrono::nanoseconds>(deadline.remaining(), std::chrono::milliseconds(5)));
  }

 private:
  std::shared_ptr<Node> node_;
  Engine* engine_;
  Buffer ring_, ptrs_;
  EmuQueue q_;
};

// A GPFIFO channel of the emulated H200: the doorbell wakes the engine
// thread; faults are the channel's RC errors; sleeping waits park on the
// channel's progress (bumped on every GP entry, semaphore write and
// interrupt), so no interrupt needs arming.
class EmuGpfifoBackend final : public GpfifoBackend {
 public:
  EmuGpfifoBackend(std::shared_ptr<Node> node, Engine* engine, std::vector<uint64_t> owned, uint64_t timeline_va)
      : node_(std::move(node)), engine_(engine), owned_(std::move(owned)), timeline_va_(timeline_va) {}
  ~EmuGpfifoBackend() override {
    engine_->remove_channel(&ch_);
    for (uint64_t va : owned_) (void)node_->channel_arena()->release(va);
    (void)node_->host_arena()->release(timeline_va_);
  }
  EmuChannel& ch() { return ch_; }

  int id() const override { return ch_.id; }
  void ring_doorbell() override { engine_->doorbell(); }
  Status fault_status() const override {
    if (!ch_.faulted.load(std::memory_order_acquire)) return Status();
    return error(Code::device_fault, "channel faulted (RC error): " + fault_text() +
                                         "; the channel is dead - check the addresses of the commands submitted, "
                                         "then create a new queue");
  }
  EngineStatus engine_status() const override {
    EngineStatus s = engine_->status();
    if (ch_.faulted.load(std::memory_order_acquire)) {
      s.state = EngineStatus::State::halted;
      s.fault = fault_text();
    } else if (s.state == EngineStatus::State::polling && s.wait.queue != ch_.id &&
               ch_.poll_evals.load(std::memory_order_relaxed) == 0) {
      s.state = EngineStatus::State::running;
    } else if (s.state == EngineStatus::State::halted) {
      s.state = EngineStatus::State::running;  // another SDMA queue's halt cannot happen on a copy engine
    }
    return s;
  }
  std::string describe() const override {
    return "emulated LCE" + std::to_string(ch_.engine) + " channel " + std::to_string(ch_.id);
  }
  WaitPolicy wait_policy() const override {
    WaitPolicy p;
    p.spin_us = 20;
    p.max_nap_us = 200;
    p.interrupt = true;  // NON_STALL_INTERRUPT raises the channel's event; sleep() wakes on progress too
    p.safety_us = 5000;
    return p;
  }
  bool sleep(std::chrono::nanoseconds timeout) override {
    const uint32_t seq = ch_.progress.seq();
    const uint64_t ev = ch_.event.count();
    ch_.progress.wait(seq, timeout);
    return ch_.progress.seq() != seq || ch_.event.count() != ev;
  }
  Event* wake_event() override { return &ch_.event; }

 private:
  std::string fault_text() const {
    // ch_.fault is written once, before faulted is set (release).
    return ch_.fault;
  }
  std::shared_ptr<Node> node_;
  Engine* engine_;
  std::vector<uint64_t> owned_;  // channel-arena allocations (ring+USERD, pushbuffer)
  uint64_t timeline_va_;  // host arena
  EmuChannel ch_;
};

class EmuDeviceImpl final : public EmuDevice {
 public:
  EmuDeviceImpl(std::shared_ptr<Node> node, int slot) : node_(std::move(node)), slot_(slot) {}
  ~EmuDeviceImpl() override { node_->stop_engines(); }

  const Topology& topology() const override { return node_->topology(); }

  Result<Buffer> alloc(int gpu, size_t bytes, MemKind kind) override {
    if (kind == MemKind::cuda) return no_cuda_memory("emu");
    Arena* arena = nullptr;
    if (kind == MemKind::host) {
      arena = node_->host_arena();
      gpu = -1;
    } else {
      if (gpu < 0 || gpu >= gpu_count())
        return error(Code::invalid_argument, "alloc on gpu " + std::to_string(gpu) + ": the node has GPUs 0.." +
                                                 std::to_string(gpu_count() - 1));
      arena = node_->gpu_arena(gpu);
    }
    Result<uint64_t> va = arena->allocate(bytes, bytes >= 4096 ? 4096 : 256);
    if (!va.ok()) return va.status();
    Buffer b;
    b.va = *va;
    b.host = arena->translate(*va, bytes);
    b.size = bytes;
    b.gpu = gpu;
    b.kind = kind;
    b.id = *va;
    return b;
  }

  Status free(const Buffer& b) override {
    Arena* arena = b.kind == MemKind::host ? node_->host_arena()
                   : (b.gpu >= 0 && b.gpu < gpu_count()) ? node_->gpu_arena(b.gpu)
                                                         : nullptr;
    if (!arena) return error(Code::invalid_argument, "free: buffer " + hex(b.va) + " names no GPU of this node");
    return arena->release(b.va);
  }

  Result<std::unique_ptr<Queue>> create_queue(int gpu, int engine, const QueueOptions& opt) override {
    if (gpu < 0 || gpu >= gpu_count())
      return error(Code::invalid_argument, "queue on gpu " + std::to_string(gpu) + ": the node has GPUs 0.." +
                                               std::to_string(gpu_count() - 1));
    const GpuInfo& g = topology().gpus[static_cast<size_t>(gpu)];
    Engine* e = node_->engine(gpu, engine);
    if (!e) {
      std::string ids;
      bool dense = true;
      for (size_t i = 0; i < g.engines.size(); ++i) {
        ids += (ids.empty() ? "" : ", ") + std::to_string(g.engines[i].id);
        dense &= g.engines[i].id == static_cast<int>(i);
      }
      if (dense && !g.engines.empty()) ids = "0.." + std::to_string(g.engines.size() - 1);
      if (is_grce(topology(), engine))
        return error(Code::invalid_argument, "LCE" + std::to_string(engine) + " on gpu " + std::to_string(gpu) +
                                                 " is a graphics copy engine (GRCE): refused, as on the H200; use an "
                                                 "asynchronous LCE (" + ids + ")");
      return error(Code::invalid_argument, "queue on gpu " + std::to_string(gpu) + " engine " +
                                               std::to_string(engine) + ": that GPU has engines " + ids);
    }
    const size_t size = opt.ring_bytes;
    if (size < 4096 || (size & (size - 1)) || size > SdmaQueue::kMaxRingBytes)
      return error(Code::invalid_argument, "ring size " + std::to_string(size) +
                                               " must be a power of two from 4096 bytes to 1 GiB");
    if (g.isa.kind() == IsaKind::hopper_ce) return create_channel(gpu, engine, e, size);
    Result<Buffer> ring = alloc(-1, size, MemKind::host);
    if (!ring.ok()) return ring.status();
    Result<Buffer> ptrs = alloc(-1, 256, MemKind::host);
    if (!ptrs.ok()) {
      (void)free(*ring);
      return ptrs.status();
    }
    auto backend = std::make_unique<EmuQueueBackend>(node_, e, *ring, *ptrs);
    EmuQueue& q = backend->q();
    q.id = node_->next_queue_id();
    q.gpu = gpu;
    q.engine = engine;
    q.ring = ring->as<uint32_t>();
    q.size = size;
    q.rptr = ptrs->as<uint64_t>();
    q.wptr = ptrs->as<uint64_t>() + 8;  // separate cache lines
    q.done = reinterpret_cast<uint32_t*>(ptrs->as<uint64_t>() + 16);
    RingMemory rm{q.ring, size, q.rptr, q.wptr, q.done, ptrs->va + 128};
    // The emulated GPUs reach the host over PCIe: frames carry the HDP flush
    // where the generation has it (counted by EngineStats).
    Result<SubmitFrame> frame = make_frame(g.isa.gen(), frame_policy(g.isa.gen(), false), rm.done_va);
    if (!frame.ok()) return frame.status();
    e->add_queue(&q);
    return std::unique_ptr<Queue>(
        new SdmaQueue(gpu, engine, g.isa, g.caps(), rm, std::move(frame).value(), std::move(backend)));
  }

  // A GPFIFO channel: GP entries + USERD and the pushbuffer in the channel
  // arena (below 2^40), the timeline slot in host memory; the first
  // submission binds HOPPER_DMA_COPY_A, as on hardware.
  Result<std::unique_ptr<Queue>> create_channel(int gpu, int engine, Engine* e, size_t pushbuffer_bytes) {
    constexpr uint32_t kEntries = 1024;
    Arena* arena = node_->channel_arena();
    Result<uint64_t> ring = arena->allocate(kEntries * 8 + kUserdBytes, 4096);
    if (!ring.ok()) return ring.status().prefix("GPFIFO ring");
    Result<uint64_t> pb = arena->allocate(pushbuffer_bytes, 4096);
    if (!pb.ok()) {
      (void)arena->release(*ring);
      return pb.status().prefix("pushbuffer (the emulator's channel arena holds " +
                                std::to_string(kChannelArenaBytes >> 20) + " MiB of pushbuffers)");
    }
    Result<Buffer> tl = alloc(-1, 16, MemKind::host);
    if (!tl.ok()) {
      (void)arena->release(*ring);
      (void)arena->release(*pb);
      return tl.status();
    }
    auto backend = std::make_unique<EmuGpfifoBackend>(node_, e, std::vector<uint64_t>{*ring, *pb}, tl->va);
    EmuChannel& ch = backend->ch();
    ch.id = node_->next_queue_id();
    ch.gpu = gpu;
    ch.engine = engine;
    ch.gp = static_cast<uint64_t*>(arena->translate(*ring, kEntries * 8));
    ch.entries = kEntries;
    ch.userd = static_cast<uint32_t*>(arena->translate(*ring + kEntries * 8, kUserdBytes));
    GpfifoMemory m;
    m.gp = ch.gp;
    m.entries = kEntries;
    m.userd = ch.userd;
    m.pushbuffer = static_cast<uint8_t*>(arena->translate(*pb, pushbuffer_bytes));
    m.pushbuffer_va = *pb;
    m.pushbuffer_bytes = pushbuffer_bytes;
    m.timeline_va = tl->va;
    m.timeline = tl->as<uint64_t>();
    e->add_channel(&ch);
    const GpuInfo& g = topology().gpus[static_cast<size_t>(gpu)];
    auto q = std::make_unique<GpfifoQueue>(gpu, engine, g.caps(), m, std::move(backend));
    CONCCL_RETURN_IF_ERROR(q->bind_copy_object(Deadline::after_ms(10000)));
    return std::unique_ptr<Queue>(std::move(q));
  }

  void* host_pointer(uint64_t va, size_t bytes) override { return node_->host_translate(va, bytes); }
  void* compute_pointer(uint64_t va, size_t bytes) override { return node_->translate(va, bytes); }
  bool is_mapped(uint64_t va, size_t bytes) override { return node_->translate(va, bytes) != nullptr; }

  // The emulated GPU's compute: the host, on the arena (docs/reductions.md).
  Status reduce_now(const DeviceReduceStep& step, Deadline) override {
    return reduce_through_host_mapping(*this, step);
  }

  // Another process maps the whole arena holding the buffer (its memfd) at
  // the same GPU VA: slots keep the processes' windows apart.
  int process_slot() const override { return slot_; }
  Result<SharedRegion> share(const Buffer& b, int* fd) override {
    Arena* a = node_->own_arena(b.va, b.size ? b.size : 1);
    if (!a)
      return error(Code::invalid_argument, "share: buffer " + hex(b.va) +
                                               " is not memory this process's emulated node allocated");
    const int d = ::fcntl(a->fd(), F_DUPFD_CLOEXEC, 0);
    if (d < 0) return error(Code::resource_exhausted, std::string("share: dup of the arena's memfd: ") + strerror(errno));
    *fd = d;
    SharedRegion r;
    r.va = a->va_base();
    r.size = a->size();
    r.kind = a == node_->host_arena() ? MemKind::host : MemKind::device;
    r.gpu = r.kind == MemKind::host ? -1 : static_cast<int>((a->va_base() - kGpuVaBase - node_->slot_base()) / kGpuVaStride);
    r.node_gpu_id = topology().gpus[static_cast<size_t>(std::max(r.gpu, 0))].node_gpu_id;
    return r;
  }
  Status import_shared(const SharedRegion& r, int fd) override {
    const std::string name = r.kind == MemKind::host ? "host memory of another process"
                                                     : "gpu" + std::to_string(r.gpu) + " memory of another process";
    return node_->import_arena(name, r.va, r.size, fd, r.kind != MemKind::host);
  }
  void wake_pollers() override { node_->memory_changed(); }

  Status inject(int gpu, int engine, const Injection& inj) override {
    Engine* e = node_->engine(gpu, engine);
    if (!e) return no_engine(gpu, engine);
    e->set_injection(inj);
    return Status();
  }
  Result<EngineStatus> engine_status(int gpu, int engine) const override {
    Engine* e = node_->engine(gpu, engine);
    if (!e) return no_engine(gpu, engine);
    return e->status();
  }
  Result<EngineStats> engine_stats(int gpu, int engine) const override {
    Engine* e = node_->engine(gpu, engine);
    if (!e) return no_engine(gpu, engine);
    return e->stats();
  }
  Status reset_engine(int gpu, int engine) override {
    Engine* e = node_->engine(gpu, engine);
    if (!e) return no_engine(gpu, engine);
    e->reset();
    return Status();
  }

 private:
  void host_wrote() override { node_->memory_changed(); }
  static Status no_engine(int gpu, int engine) {
    return error(Code::invalid_argument, "no engine " + std::to_string(engine) + " on gpu " + std::to_string(gpu));
  }
  std::shared_ptr<Node> node_;
  int slot_;  // as asked (-1: one process; the node then uses slot 0's windows)
};

}  // namespace

Result<std::unique_ptr<EmuDevice>> create_node(const NodeOptions& options) {
  Result<Topology> topo = build_topology(options);
  if (!topo.ok()) return topo.status();
  const size_t gpu_bytes = topo->gpus.empty() ? 0 : topo->gpus[0].memory_bytes;
  if (gpu_bytes % 4096)
    return error(Code::invalid_argument, "memory per GPU must be a multiple of 4 KiB");
  if (options.process_slot < -1 || options.process_slot >= kMaxProcessSlots)
    return error(Code::invalid_argument, "process_slot " + std::to_string(options.process_slot) + " must be 0.." +
                                             std::to_string(kMaxProcessSlots - 1) + " (or -1: one process)");
  // Slot s's GPU windows end below slot s+1's host window.
  if (options.process_slot > 0 && kGpuVaBase + topo->gpus.size() * kGpuVaStride > kSlotStride + kHostVaBase)
    return error(Code::invalid_argument, "an emulated node of " + std::to_string(topo->gpus.size()) +
                                             " GPUs has no room for process slots: use at most 24 GPUs with process_slot > 0");
  auto node = std::make_shared<Node>(std::move(topo).value(), size_t(1) << 30, gpu_bytes,
                                     std::max(0, options.process_slot));
  CONCCL_RETURN_IF_ERROR(node->init());
  node->set_host_maps_gpu_memory(options.host_maps_gpu_memory);
  return std::unique_ptr<EmuDevice>(new EmuDeviceImpl(std::move(node), options.process_slot));
}

}  // namespace conccl::emu
