// src/backends/kfd/kfd_queue_create.cpp - one SDMA queue through libhsakmt:
// its ring and completion page (thunk memory mapped to its GPU), the submit
// frame of its generation, its host wake-up (a KFD event, a ROCr signal, or
// none: waits nap) and the thunk's queue (kfd_queue_create.hpp).
#if defined(CONCCL_HSAKMT_NESTED_HEADER)
#include <hsakmt/hsakmt.h>
#else
#include <hsakmt.h>
#endif

#include <cerrno>
#include <cstring>

#include "backends/kfd/kfd_queue_backend.hpp"
#include "backends/kfd/kfd_queue_create.hpp"
#include "backends/kfd/rocr_wake.hpp"
#include "queue/sdma_queue.hpp"

namespace conccl::kfd::detail {

Result<std::unique_ptr<Queue>> create_sdma_queue(const std::shared_ptr<Context>& ctx, int gpu, int engine,
                                                 const QueueOptions& opt) {
  const GpuNode& g = ctx->topo.gpus[static_cast<size_t>(gpu)];
  Result<QueuePlan> plan = plan_queue(ctx->mode.mode, g, engine, ctx->pin);
  if (!plan.ok()) return plan.status();

  // The ring: its own allocation of exactly its size, mapped to this GPU.
  Mapping ring;
  ring.size = opt.ring_bytes;
  errno = 0;
  HSAKMT_STATUS s = hsaKmtAllocMemory(static_cast<HSAuint32>(g.thunk_node), ring.size,
                                      to_hsa(mem_flags_for(MemUse::ring)), &ring.ptr);
  int e = errno;
  if (s != HSAKMT_STATUS_SUCCESS)
    return thunk_error("hsaKmtAllocMemory", s, e, "ring of " + std::to_string(ring.size) + " bytes");
  if (Status st = map_nodes(ring.ptr, ring.size, {static_cast<uint32_t>(g.thunk_node)}, nullptr, "a ring");
      !st.ok()) {
    (void)ring.release();
    return st;
  }
  ring.mapped = true;
  std::memset(ring.ptr, 0, ring.size);

  // The completion word the engine FENCEs after every submission (host
  // memory: the CPU reads it; its own page, mapped to this GPU).
  Mapping done;
  done.size = kPage;
  errno = 0;
  s = hsaKmtAllocMemory(0, done.size, to_hsa(mem_flags_for(MemUse::host)), &done.ptr);
  e = errno;
  if (s != HSAKMT_STATUS_SUCCESS) {
    (void)ring.release();
    return thunk_error("hsaKmtAllocMemory", s, e, "the queue's 4 KiB completion page");
  }
  if (Status st = map_nodes(done.ptr, done.size, {static_cast<uint32_t>(g.thunk_node)}, nullptr, "a completion page");
      !st.ok()) {
    (void)done.release();
    (void)ring.release();
    return st;
  }
  done.mapped = true;
  std::memset(done.ptr, 0, done.size);
  auto release_memory = [&] {
    (void)done.release();
    (void)ring.release();
  };
  Result<SubmitFrame> frame = make_frame(g.gen, frame_policy(g.gen, g.cpu_link_xgmi(), g.min_submit_bytes),
                                         reinterpret_cast<uint64_t>(done.ptr));
  if (!frame.ok()) {
    release_memory();
    return frame.status();
  }

  std::unique_ptr<WakeEvent> event;
  if (ctx->trap.trap_wakeups) {
    Result<HsaEvent*> ev = create_signal_event(g.thunk_node);
    if (!ev.ok()) {
      release_memory();
      return ev.status();
    }
    event = std::make_unique<KfdEvent>(ctx, *ev);
  } else if (ctx->rocr && g.host_atomics64()) {
    // A ROCr signal needs the engine's ATOMIC on host memory (the open's
    // note names GPUs without 64-bit atomics on their CPU link: they poll).
    // A signal ROCr cannot make leaves this queue polling with naps, as
    // without hsa-runtime: the wake-up is a saving, not a need.
    Result<std::unique_ptr<RocrEvent>> ev = RocrEvent::create(ctx->rocr);
    if (ev.ok()) event = std::move(ev).value();
  }

  Out<HsaQueueResource> qr;
  errno = 0;
#if defined(CONCCL_HSAKMT_HAS_CREATE_QUEUE_EXT)
  if (plan->type == ThunkQueueType::sdma_by_eng_id)
    s = hsaKmtCreateQueueExt(static_cast<HSAuint32>(g.thunk_node), HSA_QUEUE_SDMA_BY_ENG_ID, 100,
                             HSA_QUEUE_PRIORITY_NORMAL, plan->sdma_engine_id, ring.ptr, ring.size, nullptr,
                             qr.get());
  else
#endif
    s = hsaKmtCreateQueue(static_cast<HSAuint32>(g.thunk_node), static_cast<HSA_QUEUE_TYPE>(static_cast<uint32_t>(plan->type)), 100,
                          HSA_QUEUE_PRIORITY_NORMAL, ring.ptr, ring.size, nullptr, qr.get());
  e = errno;
  if (s != HSAKMT_STATUS_SUCCESS) {
    event.reset();
    release_memory();
    return queue_create_error(s, e, g, engine, *plan);
  }
  // SDMA queues: the thunk supplies rptr/wptr (in its own page-sized,
  // uncached, GPU-mapped struct queue) and the doorbell; on gfx9+ all
  // three are 64-bit byte offsets (libhsakmt src/queues.c).
  uint64_t* rptr = qr->Queue_read_ptr_aql;
  uint64_t* wptr = qr->Queue_write_ptr_aql;
  uint64_t* doorbell = qr->Queue_DoorBell_aql;
  if (!rptr || !wptr || !doorbell) {
    hsaKmtDestroyQueue(qr->QueueId);
    event.reset();
    release_memory();
    return error(Code::internal, "libhsakmt created a queue on gpu " + std::to_string(gpu) +
                                     " without read/write pointers or a doorbell; please report with `sdma-probe "
                                     "list --backend kfd` output");
  }
  RingMemory rm{static_cast<uint32_t*>(ring.ptr), ring.size, rptr, wptr, static_cast<uint32_t*>(done.ptr),
                reinterpret_cast<uint64_t>(done.ptr)};
  auto backend = std::make_unique<KfdQueueBackend>(ctx, gpu, ring, done, std::move(event), qr->QueueId,
                                                   reinterpret_cast<volatile uint64_t*>(doorbell), rptr, wptr,
                                                   plan->placement);
  const Isa isa = Isa::sdma_gen(g.gen);
  Caps qcaps = caps(isa);
  qcaps.atomic64 = g.host_atomics64();  // SdmaQueue refuses ATOMICs where the CPU link lacks them
  return std::unique_ptr<Queue>(
      new SdmaQueue(gpu, engine, isa, qcaps, rm, std::move(frame).value(), std::move(backend)));
}

}  // namespace conccl::kfd::detail
