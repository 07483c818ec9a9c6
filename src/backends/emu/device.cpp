// src/backends/emu/device.cpp - the emulated node as a conccl::Device.
#include <cinttypes>
#include <cstdio>

#include "backends/emu/node.hpp"
#include "backends/emu/presets.hpp"
#include "conccl/emu.hpp"
#include "conccl/queue.hpp"

namespace conccl::emu {

namespace {

class EmuQueueBackend final : public QueueBackend {
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
  Event& trap_event() override { return q_.event; }
  EngineStatus engine_status() const override {
    EngineStatus s = engine_->status();
    // Poll details belong to whichever queue is blocked; say if it is not us.
    if (s.state == EngineStatus::State::polling && s.poll_queue != q_.id &&
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

class EmuDeviceImpl final : public EmuDevice {
 public:
  explicit EmuDeviceImpl(std::shared_ptr<Node> node) : node_(std::move(node)) {}
  ~EmuDeviceImpl() override { node_->stop_engines(); }

  const Topology& topology() const override { return node_->topology(); }

  Result<Buffer> alloc(int gpu, size_t bytes, MemKind kind) override {
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
    Engine* e = node_->engine(gpu, engine);
    if (!e)
      return error(Code::invalid_argument,
                   "queue on gpu " + std::to_string(gpu) + " engine " + std::to_string(engine) + ": that GPU has engines 0.." +
                       std::to_string(topology().gpus[static_cast<size_t>(gpu)].engines.size() - 1));
    const size_t size = opt.ring_bytes;
    if (size < 4096 || (size & (size - 1)))
      return error(Code::invalid_argument, "ring size " + std::to_string(size) +
                                               " must be a power of two of at least 4096 bytes");
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
    RingMemory rm{*ring, q.rptr, q.wptr, ptrs->va, ptrs->va + 64};
    e->add_queue(&q);
    const sdma::Gen gen = topology().gpus[static_cast<size_t>(gpu)].gen;
    return std::make_unique<Queue>(gpu, engine, gen, rm, std::move(backend));
  }

  void* host_pointer(uint64_t va, size_t bytes) override { return node_->translate(va, bytes); }
  void host_wrote() override { node_->memory_changed(); }

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
  static Status no_engine(int gpu, int engine) {
    return error(Code::invalid_argument, "no engine " + std::to_string(engine) + " on gpu " + std::to_string(gpu));
  }
  std::shared_ptr<Node> node_;
};

}  // namespace

Result<std::unique_ptr<EmuDevice>> create(const DeviceOptions& options) {
  Result<Topology> topo = build_topology(options);
  if (!topo.ok()) return topo.status();
  const size_t gpu_bytes = topo->gpus.empty() ? 0 : topo->gpus[0].memory_bytes;
  if (gpu_bytes % 4096)
    return error(Code::invalid_argument, "memory per GPU must be a multiple of 4 KiB");
  auto node = std::make_shared<Node>(std::move(topo).value(), size_t(1) << 30, gpu_bytes);
  CONCCL_RETURN_IF_ERROR(node->init());
  return std::unique_ptr<EmuDevice>(new EmuDeviceImpl(std::move(node)));
}

}  // namespace conccl::emu
