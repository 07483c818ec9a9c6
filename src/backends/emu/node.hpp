// src/backends/emu/node.hpp - internals of the emulated node shared by its
// engines, queues and the device object.
#pragma once

#include <algorithm>
#include <chrono>
#include <atomic>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/emu/arena.hpp"
#include "conccl/emu.hpp"
#include "conccl/queue.hpp"
#include "packets/sdma_codec.hpp"
#include "util/futex.hpp"

namespace conccl::emu {

class Node;

// TRAP (SDMA) / non-stall interrupt (Hopper) counter a host can sleep on.
class EmuEvent final : public Event {
 public:
  uint64_t count() const override { return count_.load(std::memory_order_acquire); }
  uint32_t last_context() const override { return ctx_.load(std::memory_order_acquire); }
  Status wait(uint64_t target, Deadline deadline) override;
  void raise(uint32_t ctx) {
    ctx_.store(ctx, std::memory_order_release);
    count_.fetch_add(1, std::memory_order_acq_rel);
    wake_.bump();
  }

 private:
  std::atomic<uint64_t> count_{0};
  std::atomic<uint32_t> ctx_{0};
  util::WakeChannel wake_;
};

// Engine-side view of one ring.
struct EmuQueue {
  int id = 0;
  int gpu = 0, engine = 0;
  uint32_t* ring = nullptr;  // host view
  uint64_t size = 0;         // bytes, power of two
  uint64_t* rptr = nullptr;
  uint64_t* wptr = nullptr;
  uint32_t* done = nullptr;  // the SdmaQueue's completion word (a reset completes everything)
  EmuEvent event;
  util::WakeChannel progress;  // bumped when rptr moves
  // Engine-thread state of a poll the queue is blocked on. Atomic because
  // EmuQueueBackend::engine_status() reads it from other threads.
  std::atomic<uint32_t> poll_evals{0};
};

// Engine-side view of one GPFIFO channel (an emulated NVIDIA copy-engine
// channel): the GP ring and USERD the GpfifoQueue writes, and the method
// state the copy class and host keep between methods (execute_hopper.cpp).
struct EmuChannel {
  int id = 0;
  int gpu = 0, engine = 0;
  uint64_t* gp = nullptr;       // read after GP_PUT (acquire)
  uint32_t entries = 0;
  uint32_t* userd = nullptr;    // GP_PUT / GP_GET through std::atomic_ref
  EmuEvent event;              // raised by NON_STALL_INTERRUPT / LAUNCH_DMA INTERRUPT_TYPE
  util::WakeChannel progress;  // bumped when GP_GET or a semaphore moves
  std::atomic<uint32_t> poll_evals{0};
  std::atomic<bool> faulted{false};
  std::string fault;           // guarded by the engine's mu_ once faulted

  // Engine-thread state (only the engine thread touches it):
  uint32_t get = 0;            // GP entries consumed (mirrors USERD GP_GET, modulo entries)
  uint64_t seg_va = 0;         // current segment, when in_segment
  uint32_t seg_dwords = 0;
  uint32_t seg_pos = 0;        // dword offset of the header being executed
  uint32_t data_idx = 0;       // next data dword of that header
  bool in_segment = false;
  uint32_t subch_class[8] = {};
  struct CopyRegs {            // HOPPER_DMA_COPY_A methods (clc8b5.h)
    uint32_t sem_a = 0, sem_b = 0, payload = 0, payload_upper = 0;
    uint32_t in_upper = 0, in_lower = 0, out_upper = 0, out_lower = 0;
    uint32_t pitch_in = 0, pitch_out = 0, line_length_in = 0, line_count = 0;
    uint32_t remap_a = 0, remap_b = 0, remap_components = 0;
  } ce;
  struct HostRegs {            // host semaphore methods (clc86f.h)
    uint32_t addr_lo = 0, addr_hi = 0, payload_lo = 0, payload_hi = 0;
  } host;
};

class Engine {
 public:
  Engine(Node& node, int gpu, int id, Isa isa);
  ~Engine();

  void add_queue(EmuQueue* q);
  void remove_queue(EmuQueue* q);
  void add_channel(EmuChannel* c);
  void remove_channel(EmuChannel* c);
  void doorbell() { wake_.bump(); }
  void wake_if_polling() {
    if (polling_.load(std::memory_order_acquire)) wake_.bump();
  }
  bool started() const { return started_.load(std::memory_order_acquire); }
  EngineStatus status() const;
  EngineStats stats() const;
  void set_injection(const Injection& inj);
  void reset();
  void stop();

 private:
  enum class Step { idle, advanced, blocked, halted };
  // Starts the engine's thread on its first queue or channel (mu_ held, so
  // two adds never start two threads).
  void start_locked();
  void run();
  Step run_queue(EmuQueue& q);
  Step run_channel(EmuChannel& c);
  void halt(const EmuQueue& q, uint64_t rptr, const std::string& why);
  void fault_channel(EmuChannel& c, const std::string& why);
  // Runs one packet or method; with a slowdown injected, sleeps until it has
  // taken that many times its own time.
  template <class Exec>
  auto throttled(Exec exec) {
    const uint32_t slowdown = slowdown_.load(std::memory_order_acquire);
    if (slowdown <= 1) return exec();
    const auto t0 = std::chrono::steady_clock::now();
    auto outcome = exec();
    std::this_thread::sleep_for((std::chrono::steady_clock::now() - t0) * (slowdown - 1));
    return outcome;
  }

  Node& node_;
  const int gpu_, id_;
  const Isa isa_;
  util::WakeChannel wake_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> polling_{false};
  std::atomic<bool> halted_{false};
  std::atomic<uint8_t> state_{static_cast<uint8_t>(EngineStatus::State::idle)};

  mutable std::mutex mu_;            // guards queues_, status details, injection
  std::vector<EmuQueue*> queues_;
  std::vector<EmuChannel*> channels_;
  std::mutex run_mu_;                // held while the engine works on its queues
  EngineStatus detail_;              // poll / fault details
  int faulted_queue_ = -1;
  Injection injection_;
  std::atomic<bool> stall_{false};
  std::atomic<bool> early_rptr_{false};
  std::atomic<uint32_t> drop_{0};
  std::atomic<int64_t> delay_us_{0};
  std::atomic<uint32_t> slowdown_{1};
  std::atomic<uint64_t> packets_{0}, bytes_{0}, dropped_{0}, poll_timeouts_{0};
  std::atomic<uint64_t> hdp_flushes_{0}, cache_ops_{0};
  std::thread thread_;
  std::atomic<bool> started_{false};
  void set_polling(bool on);
};

class Node {
 public:
  Node(Topology topo, size_t host_bytes, size_t gpu_bytes, int slot = 0);
  ~Node();
  Status init();

  const Topology& topology() const { return topo_; }
  Arena* host_arena() { return host_.get(); }
  // Rings, USERD and pushbuffers of GPFIFO channels: below 2^40, because GP
  // entries carry 40-bit pushbuffer addresses.
  Arena* channel_arena() { return channels_.get(); }
  Arena* gpu_arena(int gpu) { return gpus_[static_cast<size_t>(gpu)].get(); }
  Engine* engine(int gpu, int id);

  int slot() const { return slot_; }
  uint64_t slot_base() const { return uint64_t(slot_) * kSlotStride; }
  std::string slot_suffix() const { return slot_ ? "@slot" + std::to_string(slot_) : ""; }
  // The arena (own host or GPU; not the private channel arena) holding va.
  Arena* own_arena(uint64_t va, uint64_t bytes);
  // Maps another process's arena (multi-process communicators); an arena
  // mapped before is reused. Imports stay mapped until the node is destroyed,
  // so no engine ever loses memory it may still be writing.
  Status import_arena(const std::string& name, uint64_t va, uint64_t size, int fd, bool gpu_memory);
  // Host pointer for an engine access, or null (-> page fault).
  void* translate(uint64_t va, uint64_t bytes) const { return lookup(va, bytes, true); }
  // The same for the host's own accesses (Device::host_pointer): null for
  // GPU memory when the host does not map it (NodeOptions::host_maps_gpu_memory).
  void* host_translate(uint64_t va, uint64_t bytes) const { return lookup(va, bytes, host_maps_gpu_); }
  void set_host_maps_gpu_memory(bool on) { host_maps_gpu_ = on; }
  // Memory changed: wake engines blocked on polls.
  void memory_changed();
  int next_queue_id() { return next_queue_id_.fetch_add(1); }
  std::atomic<int> polling_engines{0};
  void stop_engines();

 private:
  Topology topo_;
  size_t host_bytes_, gpu_bytes_;
  int slot_ = 0;
  std::unique_ptr<Arena> host_;
  // Arenas of other processes: append-only, read by engine threads without
  // a lock (count_ published with release after the slot is filled).
  static constexpr size_t kMaxImports = 1024;
  // translate's search; gpu_memory false skips this node's and imported GPU arenas.
  void* lookup(uint64_t va, uint64_t bytes, bool gpu_memory) const;
  std::unique_ptr<std::atomic<Arena*>[]> imports_{new std::atomic<Arena*>[kMaxImports]()};
  std::unique_ptr<bool[]> import_gpu_{new bool[kMaxImports]()};  // filled before the count publishes it
  bool host_maps_gpu_ = true;
  std::atomic<size_t> import_count_{0};
  std::vector<std::unique_ptr<Arena>> import_owner_;
  std::mutex import_mu_;
  std::unique_ptr<Arena> channels_;
  std::vector<std::unique_ptr<Arena>> gpus_;
  std::vector<std::vector<std::unique_ptr<Engine>>> engines_;
  std::atomic<int> next_queue_id_{0};
};

// Executes one decoded packet (see execute.cpp).
enum class ExecResult { done, blocked, fault };
struct ExecOutcome {
  ExecResult result = ExecResult::done;
  std::string fault;        // when fault
  uint64_t skip_dwords = 0; // COND_EXE: dwords after the packet to skip
  uint64_t bytes = 0;       // bytes moved (stats)
  bool wrote_memory = false;
  bool dropped = false;     // a completion write was dropped by injection
  EngineStatus::Wait wait;  // when blocked: what it waits for (the queue is the engine's to fill)
};
inline ExecOutcome exec_fault(std::string why) {
  ExecOutcome o;
  o.result = ExecResult::fault;
  o.fault = std::move(why);
  return o;
}
// The engines' clock (timestamps, semaphore releases with time): monotonic ns.
inline uint64_t engine_now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
struct ExecContext {
  Node* node;
  EmuQueue* queue;
  bool drop_completion = false;  // injection: skip this completion write
  int ib_depth = 0;
};
ExecOutcome execute_packet(ExecContext& ctx, sdma::Gen gen, const sdma::Packet& p);

// Executes one method write (method byte offset `mthd` on subchannel `subch`
// with `data`) on a GPFIFO channel (see execute_hopper.cpp). Blocked means a
// semaphore acquire is not yet satisfied: the same write is retried later.
struct MethodContext {
  Node* node;
  EmuChannel* ch;
  bool drop_completion = false;  // injection: skip this semaphore write
};
ExecOutcome execute_method(MethodContext& ctx, uint8_t subch, uint16_t mthd, uint32_t data);
// Whether a method write is a completion (a semaphore write) that injection may drop.
bool method_is_completion(const EmuChannel& ch, uint8_t subch, uint16_t mthd, uint32_t data);

}  // namespace conccl::emu
