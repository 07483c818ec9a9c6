// conccl/queue.hpp - one hardware queue (a ring) on one DMA engine.
//
// Every backend gives the same Queue: commands of the vocabulary
// (conccl/commands.hpp) go in, either recorded in a CommandBuffer and copied
// in by submit(), or encoded straight into ring space by reserve() + commit();
// one doorbell publishes them. Completion is a monotonic ticket: work is done
// once completed() >= the ticket its submission returned. Two ring protocols
// implement it (docs/queues.md): the SDMA ring (emulator, KFD) and the GPFIFO
// channel (emulated H200, NVIDIA). Several threads may submit to one Queue:
// producers are serialised by a short lock around reserve + copy + publish.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "conccl/commands.hpp"
#include "conccl/deadline.hpp"
#include "conccl/status.hpp"

namespace conccl {

// What an engine is doing, for hang diagnosis. The same for SDMA engines and
// NVIDIA channels.
struct EngineStatus {
  enum class State : uint8_t { idle, running, polling, stalled, halted, unknown };
  // How a wait compares the word it reads (masked) with its target: it holds
  // the engine while `seen & mask <compare> target` is false.
  enum class Compare : uint8_t { always, lt, le, eq, ne, ge, gt };
  // A wait on memory, whatever command the engine's instruction set has for
  // it (SDMA: POLL_REGMEM; NVIDIA: a semaphore acquire). The backend that
  // fills it translates its command's fields.
  struct Wait {
    uint64_t addr = 0;           // the word polled
    uint64_t target = 0;         // what it is compared with
    uint64_t seen = 0;           // what the engine read last (unmasked)
    uint64_t mask = ~0ull;       // the bits compared
    Compare compare = Compare::ge;
    uint8_t bits = 32;           // the word's width: 32 or 64
    int queue = -1;              // which queue (backend's queue id) waits
    const char* command = "";    // the command, as the backend names it ("POLL_REGMEM"; static text)
  };
  State state = State::unknown;
  Wait wait;                 // meaningful when state == polling
  std::string fault;         // when halted: what faulted
  uint64_t fault_pos = 0;    // ring position (SDMA: byte offset) of the faulting command
  std::string detail() const;
};
const char* engine_state_name(EngineStatus::State s);
// "<", ">=", ... ("always" for Compare::always).
const char* compare_name(EngineStatus::Compare c);

// A counter the backend bumps when an engine raises the host wake-up on a
// queue (SDMA TRAP, NVIDIA non-stall interrupt); the host sleeps on it.
class Event {
 public:
  virtual ~Event() = default;
  virtual uint64_t count() const = 0;
  virtual uint32_t last_context() const = 0;
  // Returns once count() >= target, or Code::timeout at the deadline.
  virtual Status wait(uint64_t target, Deadline deadline) = 0;
};

struct QueueOptions {
  size_t ring_bytes = 1u << 20;  // power of two, >= 4 KiB (ROCr uses 1 MiB); NVIDIA: the pushbuffer
};

class Queue;
// Where a piece of work sits in a queue (what Queue::submit gives back): the
// queue's ticket before the work and the ticket of its submission. For
// Signal::wait (to sleep on the queue's progress) and hang diagnosis.
struct QueueSpan {
  Queue* queue = nullptr;
  uint64_t begin = 0;  // submitted() just before the work, under the submit lock
  uint64_t end = 0;    // ticket of the submission (done when completed() >= end)
};

class Queue {
 public:
  virtual ~Queue();
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  int gpu() const { return gpu_; }
  int engine() const { return engine_; }
  virtual int id() const = 0;  // backend-wide queue id
  const Isa& isa() const { return isa_; }
  // What this queue's engine can do (the Isa's caps, narrowed by the backend).
  const Caps& caps() const { return caps_; }
  sdma::Gen gen() const { return isa_.gen(); }
  virtual size_t ring_bytes() const = 0;
  // The largest command buffer one submit() takes (SDMA: the ring less its
  // end padding; GPFIFO: half the pushbuffer, less the timeline release).
  virtual size_t max_submit_bytes() const = 0;
  // Bounded by what one submission can hold: a copy that could never be
  // submitted is refused when it is recorded (CommandBuffer::set_max_bytes).
  CommandBuffer command_buffer() const {
    CommandBuffer cb(isa_);
    (void)cb.set_max_bytes(max_submit_bytes());
    return cb;
  }

  // Copies cb's commands into the ring and rings the doorbell once. Waits for
  // ring space until `deadline`; fails (writing nothing) if space does not
  // come, if cb is larger than the ring, or if cb is for another Isa.
  // *span gets where the work sits: it is done once completed() >= span->end.
  Status submit(const CommandBuffer& cb, Deadline deadline, QueueSpan* span = nullptr);

  // Two-step publication, for work whose start someone else decides (a
  // collective's lists that would otherwise wait on the engine for other
  // ranks, docs/collectives.md "Gated submission"). submit_held() writes cb
  // into the ring as submit() does, but the engine does not see it until
  // release(span->end), or until a later submit() or reservation commit,
  // which publishes everything before it in ring order. Held work is never
  // lost: waiting for it (wait_done) or for ring space releases it first.
  // Queues whose protocol cannot hold work publish at once.
  Status submit_held(const CommandBuffer& cb, Deadline deadline, QueueSpan* span = nullptr);
  // Publishes held work up to ticket `end` (no-op for work already visible).
  void release(uint64_t end);
  // Tickets written but not yet visible to the engine (0: none).
  uint64_t held() const { return held_to_.load(std::memory_order_acquire); }

  // Direct recording: ring space for up to `bytes` of commands, encoded in
  // place through commands(); commit() publishes them with one doorbell. The
  // producer lock is held from reserve() until commit() or destruction (which
  // publishes nothing).
  class Reservation {
   public:
    Reservation(Reservation&&) noexcept;
    Reservation& operator=(Reservation&&) noexcept;
    ~Reservation();
    CommandBuffer& commands() { return cb_; }
    Status commit(QueueSpan* span = nullptr);  // fills *span as Queue::submit does

   private:
    friend class Queue;
    Reservation(Queue* q, std::unique_lock<std::mutex> lock, CommandBuffer cb);
    Queue* q_ = nullptr;
    std::unique_lock<std::mutex> lock_;
    CommandBuffer cb_;
  };
  Result<Reservation> reserve(size_t bytes, Deadline deadline);

  uint64_t submitted() const;           // ticket of everything published so far
  virtual uint64_t completed() const = 0;  // tickets the engine has completed (monotonic)

  // Waits until completed() >= `end` (default: everything submitted). Spins
  // briefly, then sleeps on the engine's progress (its interrupt or event),
  // re-checking on every wake. Code::device_fault when the engine halted,
  // Code::timeout at the deadline; both carry diagnose().
  virtual Status wait_done(Deadline deadline, uint64_t end = ~uint64_t(0));

  // Sleeps until the engine may have completed more than `seen` (or a short
  // while, or the deadline); spurious returns are fine. For waiters that
  // watch memory the queue's commands write.
  virtual void wait_for_progress(uint64_t seen, Deadline deadline) const = 0;

  // Appends the commands that wake a host sleeping on wake_event() once the
  // engine gets there (KFD: FENCE of the event's mailbox + TRAP; emulator:
  // TRAP; NVIDIA: WFI + NON_STALL_INTERRUPT). Events coalesce: a waiter must
  // re-check its memory condition after waking.
  virtual Status record_wake(CommandBuffer& cb) const = 0;
  // The event record_wake() raises, or null where the backend cannot count
  // its wake-ups (NVIDIA: waits sleep on the interrupt inside wait_done()).
  virtual Event* wake_event() = 0;

  virtual EngineStatus engine_status() const = 0;
  // Diagnosis text: queue, engine, pointers, engine state, and the pending
  // commands decoded (at most max_commands).
  virtual std::string diagnose(size_t max_commands = 16) const = 0;

 protected:
  Queue(int gpu, int engine, Isa isa, Caps caps) : gpu_(gpu), engine_(engine), isa_(isa), caps_(caps) {}

  // ---- what a ring protocol implements (called with submit_mu_ held) -------
  // Contiguous space for `bytes` of commands; null with *why set on failure.
  virtual uint32_t* ring_reserve(size_t bytes, Deadline deadline, Status* why) = 0;
  // Publishes `bytes` written at the last reservation; returns the ticket.
  virtual uint64_t ring_commit(size_t bytes) = 0;
  // Copies a command buffer in (may lay it out with padding); returns the ticket.
  virtual Result<uint64_t> ring_submit(const CommandBuffer& cb, Deadline deadline) = 0;
  virtual bool engine_halted() const = 0;
  // Publishes nothing, but NOPs out what a failed reservation left (optional).
  virtual void ring_abandon() {}
  // Held publication (submit_held), all under submit_mu_. While hold_ is
  // set, a protocol's publish step records the submission with
  // hold(ticket, position) instead of making it visible; ring_expose makes
  // everything up to a position the engine's (GPFIFO: GP_PUT; SDMA: wptr)
  // and then calls forget_held(position). Protocols that cannot hold ignore
  // hold_ (their work is visible at once) and keep the default.
  virtual void ring_expose(uint64_t /*position*/) {}
  void hold(uint64_t ticket, uint64_t position);
  void forget_held(uint64_t position);  // everything up to `position` is published
  bool holding() const { return !held_.empty(); }
  bool hold_ = false;

  std::mutex submit_mu_;                // serialises producers: reserve + copy + publish
  std::atomic<uint64_t> last_ticket_{0};  // written under submit_mu_

 private:
  Status submit_impl(const CommandBuffer& cb, Deadline deadline, QueueSpan* span, bool hold);
  struct HeldWork {
    uint64_t ticket, position;  // a held submission's ticket, and where publishing it moves the ring
  };
  std::deque<HeldWork> held_;         // oldest first; under submit_mu_
  std::atomic<uint64_t> held_to_{0};  // the last held ticket (0: none); written under submit_mu_
  const int gpu_, engine_;
  const Isa isa_;
  const Caps caps_;
};

}  // namespace conccl
