// conccl/device.hpp - the small interface every backend (emu, kfd, nv) implements.
//
// A Device enumerates GPUs, engines and links; allocates memory that engines
// can reach; and creates queues on chosen engines. Nothing above backends/
// includes a driver header: everything goes through this interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "conccl/deadline.hpp"
#include "conccl/status.hpp"
#include "conccl/topology.hpp"

namespace conccl {

class Queue;

enum class MemKind : uint8_t {
  device,  // the GPU's own memory (HBM)
  host,    // system memory every GPU's engines can reach (GTT)
};

// A piece of memory engines can address. `va` is what goes into packets;
// `host` is the CPU's mapping of the same bytes (null if not CPU-visible).
struct Buffer {
  uint64_t va = 0;
  void* host = nullptr;
  size_t size = 0;
  int gpu = -1;  // owning GPU; -1 for host memory
  MemKind kind = MemKind::host;
  uint64_t id = 0;  // backend's handle

  template <typename T>
  T* as() const { return static_cast<T*>(host); }
  uint64_t va_at(size_t offset) const { return va + offset; }
};

// A counter the backend bumps when an engine raises TRAP on a queue;
// the host sleeps on it (emu: futex; KFD: hsaKmtWaitOnEvent).
class Event {
 public:
  virtual ~Event() = default;
  virtual uint64_t count() const = 0;
  virtual uint32_t last_context() const = 0;
  // Returns once count() >= target, or Code::timeout at the deadline.
  virtual Status wait(uint64_t target, Deadline deadline) = 0;
  // What a TRAP must carry to raise this event: its int_ctx, and on KFD the
  // address of the event's mailbox slot that a FENCE must set to the same
  // value first (0: no mailbox). enqueue_wakeup() emits both.
  virtual uint32_t trap_context() const { return 0; }
  virtual uint64_t mailbox_va() const { return 0; }
};

class CommandBuffer;
// Appends the packets that wake a host sleeping on `ev` once the engine gets
// there: FENCE(mailbox, ctx) when the event has a mailbox (KFD only wakes an
// event whose slot was signaled: kfd_events.c), then TRAP(ctx). Events
// coalesce: a waiter must re-check its memory condition after waking.
Status enqueue_wakeup(CommandBuffer& cb, const Event& ev);

// What an engine is doing, for hang diagnosis.
struct EngineStatus {
  enum class State : uint8_t { idle, running, polling, stalled, halted, unknown };
  State state = State::unknown;
  // When polling: the poll packet the engine is stuck on.
  uint64_t poll_addr = 0;
  uint32_t poll_ref = 0, poll_mask = 0, poll_func = 0, poll_value = 0;
  int poll_queue = -1;       // which queue (backend's queue id) is polling
  std::string fault;         // when halted: what faulted
  uint64_t fault_rptr = 0;   // ring byte offset of the faulting packet
  std::string detail() const;
};
const char* engine_state_name(EngineStatus::State s);

// The per-queue part a backend provides to a Queue.
class QueueBackend {
 public:
  virtual ~QueueBackend() = default;
  virtual void ring_doorbell(uint64_t wptr_bytes) = 0;
  virtual Event& trap_event() = 0;
  virtual EngineStatus engine_status() const = 0;
  virtual int id() const = 0;  // backend-wide queue id
  // Blocks briefly until the engine may have made progress (rptr moved) or
  // the deadline; spurious returns are fine.
  virtual void wait_progress(uint64_t seen_rptr, Deadline deadline) = 0;
};

struct QueueOptions {
  size_t ring_bytes = 1u << 20;  // power of two, >= 4 KiB (ROCr uses 1 MiB)
};

class Device {
 public:
  virtual ~Device() = default;

  virtual const Topology& topology() const = 0;
  int gpu_count() const { return static_cast<int>(topology().gpus.size()); }

  // Allocates memory engines can reach. MemKind::device memory belongs to
  // `gpu`; MemKind::host ignores `gpu`. Contents are zero.
  virtual Result<Buffer> alloc(int gpu, size_t bytes, MemKind kind) = 0;
  virtual Status free(const Buffer& buffer) = 0;

  // Creates a queue (one ring) on engine `engine` of `gpu`.
  virtual Result<std::unique_ptr<Queue>> create_queue(int gpu, int engine,
                                                      const QueueOptions& options = {}) = 0;

  // CPU pointer for [va, va+bytes) when the range is CPU-visible, else null.
  virtual void* host_pointer(uint64_t va, size_t bytes) = 0;

  // Whether engines can reach [va, va+bytes) (false: a packet touching it
  // would fault). Backends that cannot tell answer true.
  virtual bool is_mapped(uint64_t va, size_t bytes) { return host_pointer(va, bytes) != nullptr; }

  // Tells engines that the host wrote memory they may be polling
  // (emulator: wakes polling engines at once instead of at their next poll).
  virtual void host_wrote() {}
};

// Options for open_device().
struct DeviceOptions {
  std::string backend = "emu";  // "emu", "kfd", "nv"
  std::string preset;           // emu: "mi300x", "small" (see docs/emulator.md)
  int gpus = 0;                 // emu custom topology: GPUs (0 = preset's)
  int engines = 0;              // emu custom topology: engines per GPU (0 = preset's)
  std::string gen;              // emu: SDMA generation of the emulated GPUs ("" = preset's)
  size_t memory_per_gpu = 0;    // emu: HBM arena per GPU in bytes (0 = default)
};

// Opens a backend. Errors: Code::unavailable when the backend is not built or
// its driver is missing here (the message names the cause and the fix).
Result<std::unique_ptr<Device>> open_device(const DeviceOptions& options);

}  // namespace conccl
