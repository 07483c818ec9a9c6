// src/collectives/calls.hpp - one-call collectives through symmetric windows
// (Communicator::call): the memory every rank shares for them, and the state
// a communicator keeps for them (calls.cpp).
//
// The protocol (docs/multiprocess.md, "Windows"). Every rank numbers its
// calls k = 1, 2, ...; every rank makes the same calls in the same order, so
// k names the same call everywhere and every rank can compute, with no
// message, what every counter below reaches after each call. Per rank, in
// the first kCallAreaBytes of its signal pool, which every rank has mapped:
//   posted   reaches k when the rank has reached call k (its stream's store,
//            after the work queued before the call; or its host)
//   arrive   + 1 per data arrival into the rank (lists of every rank)
//   phase    + 1 per local phase done (swap's ready)
//   sent     + 1 per list of the rank that ended
// Call k's lists (every rank's) wait for every rank's posted >= k before
// they read or write anything; a rank's stream (or host) waits for its
// arrive and sent to reach their value after call k. A rank posts k only
// after its waits for call k - 1, so no list of call k runs while one of
// call k - 1 does, and the counters, which only grow, need no reset.
// A rank also writes a descriptor of each call (op, size, root, windows,
// offsets) before it posts; a rank that finds another rank's descriptor of
// the same k different refuses the call and marks itself failed, with the
// reason, where every rank can read it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/call_trace.hpp"
#include "collectives/replay_keeper.hpp"
#include "collectives/builder.hpp"

namespace conccl {

// A word of the call area that other processes (or engines) read or write.
inline uint64_t word_load(const uint64_t* p) {
  return std::atomic_ref<uint64_t>(*const_cast<uint64_t*>(p)).load(std::memory_order_acquire);
}
inline void word_store(uint64_t* p, uint64_t v) { std::atomic_ref<uint64_t>(*p).store(v, std::memory_order_release); }

// Offsets in the call area at the start of each rank's signal pool.
inline constexpr uint64_t kCallPosted = 0;     // Signal (16 bytes)
inline constexpr uint64_t kCallArrive = 16;    // Signal
inline constexpr uint64_t kCallPhase = 32;     // Signal
inline constexpr uint64_t kCallSent = 48;      // Signal
inline constexpr uint64_t kCallFailed = 64;    // uint64: 0, or the call the rank failed at (+1 when before any)
inline constexpr uint64_t kCallPublished = 72; // uint64: calls whose descriptor the rank has written
inline constexpr uint64_t kCallReason = 128;   // why it failed: text, NUL-terminated
inline constexpr uint64_t kCallReasonBytes = 384;
inline constexpr uint64_t kCallDescs = 512;    // ring of call descriptors
inline constexpr uint64_t kCallDescCount = 64;
inline constexpr uint64_t kCallDescBytes = 64;  // 8 uint64 (CallDesc)
inline constexpr uint64_t kCallAreaBytes = 8192;
static_assert(kCallDescs + kCallDescCount * kCallDescBytes <= kCallAreaBytes);

// Captured calls (captured_calls.cpp, docs/graphs.md): after the call area,
// slots of counters of their own, one slot per live captured call, at the
// same place in every rank's pool. Capture i takes slot i % kCaptureSlots.
inline constexpr uint64_t kCaptureArea = kCallAreaBytes;
inline constexpr uint64_t kCaptureSlotBytes = 144;
inline constexpr uint64_t kCapturePosted = 0, kCaptureArrive = 16, kCapturePhase = 32, kCaptureSent = 48;
inline constexpr uint64_t kCaptureDesc = 64;  // 8 uint64: capture id + 1, CallDesc's fields (as a call's slot)
inline constexpr uint64_t kCaptureSlots = 56;
// What the pool keeps for calls and captures (reserved, zeroed at creation).
inline constexpr uint64_t kCallReservedBytes = 16384;
static_assert(kCaptureDesc + kCallDescBytes <= kCaptureSlotBytes);
static_assert(kCaptureArea + kCaptureSlots * kCaptureSlotBytes <= kCallReservedBytes);


// What every rank must agree on for call k.
struct CallDesc {
  uint64_t k = 0;
  uint64_t op = 0;  // op | variant << 8 | root << 16 | peer << 32
  uint64_t bytes = 0;
  uint64_t send_window = 0, send_offset = 0;  // ~0: none
  uint64_t recv_window = 0, recv_offset = 0;
  uint64_t send_stride = 0;  // all_to_all's (0: packed)
  bool operator==(const CallDesc&) const = default;
  std::string describe() const;
  // Words 1..7 of a descriptor slot (word 0 is the caller's: the call
  // number, or a capture's id + 1, stored last with release).
  void write_fields(uint64_t* w) const;
  static CallDesc read_fields(const uint64_t* w);
};

// A call checked and placed: its descriptor, every rank's buffers, the key
// of its plan (CallState::prepare).
struct PreparedCall {
  std::string name;
  CallDesc d;
  CollectiveArgs full;
  std::vector<uint64_t> key;
};

// What a one-process communicator's graph replays share (captured_calls.cpp),
// with the communicator and with each other; captures may outlive the
// communicator. `failed`: the first failure (a replay that could not be
// armed, or whose lists did not end by the call timeout), what
// Communicator::async_error() reports. `keeper`: the one thread that keeps
// every capture's replays armed and watched (replay_keeper.hpp).
struct LocalReplays {
  std::mutex mu;
  Status failed;
  ReplayKeeper keeper;
  void set(const Status& why) {
    std::lock_guard<std::mutex> lk(mu);
    if (failed.ok()) failed = why;
  }
  Status get() {
    std::lock_guard<std::mutex> lk(mu);
    return failed;
  }
};

// How a captured call reaches its communicator's state: cut (state null)
// when the communicator goes, so that a graph destroyed after that frees
// what it holds itself.
struct CaptureLink {
  std::mutex mu;  // held while the link is cut, and by a capture's destructor while it retires
  CallState* state = nullptr;
};
struct CapturedCall;

// A captured call's end and how its replays tick (docs/graphs.md). The
// stream waits for `done` >= 1, which the keeper or the replay's closing
// list adds once the replay is done (captured_calls.cpp). Each
// replay first resets it and counts itself, in one of two forms
// (CONCCL_REPLAY_TICK):
//   by writes (the default): the stream stores 0 in the low half of `done`
//     (write_value32), then 1 at `flag`; the keeper sees the flag, stores 0
//     there and adds 1 to the capture's "posted" counter (take_tick), which
//     the lists wait for. Stream memory operations only, no kernel: a
//     kernel waits for its context's time slice when processes share a GPU
//     without MPS (docs/perf/h200-graphs.md, run 46). A capture that must
//     not run again sets the upper half of `done` (release), which no reset
//     touches, so every later replay's wait passes at once, with or without
//     a keeper;
//   kernel: StreamOps::replay_tick (it reads `stop`, resets `done`, adds 1
//     to "posted" itself).
struct ReplayEnd {
  Signal done, stop, flag;
  uint32_t* done_upper = nullptr;  // by writes: the host mapping of done's upper half

  // The form CONCCL_REPLAY_TICK names (read once): "kernel", else by writes.
  static bool ticks_by_writes();
  static Result<ReplayEnd> create(Device& device, const std::string& what);
  // The steps every replay runs on `stream`: the graph keeps `keep` alive;
  // the tick; the wait for `done`.
  Status record(StreamOps& stream, std::shared_ptr<void> keep, const Signal& posted, const std::string& what) const;
  // By writes, on the keeper's thread: a replay's flag becomes one more
  // replay in `posted`. False when none was there.
  bool take_tick(Signal& posted);
  // The stream goes on now and at every later replay.
  void release();
};

struct CallState {
  explicit CallState(Communicator& c);
  ~CallState();  // waits for calls in flight (up to call_timeout_ms), stops the watchdog

  Communicator& comm;
  const int n, me;
  const bool shares_gpu;  // another process of the communicator uses this rank's GPU (StreamOps::Op::shares_gpu)
  // Each rank's counters, and this rank's own words.
  std::vector<Signal> posted, arrive, phase, sent;
  // Each rank's posted word in its GPU's memory (Communicator::post_words_va_),
  // made where CONCCL_POSTED_WORDS=device; empty unless every rank has one.
  // Then the lists wait on these: a copy engine sees a word in its GPU's
  // memory about 3 us sooner than one in host memory (docs/perf/h200.md,
  // §4). Both words of every call are written: a stream stores both; a
  // host-ordered call stores the host word and has `poster`, a queue of its
  // own that never waits, release the GPU one (the host has no mapping of
  // CUDA memory). The host reads only `posted`.
  //
  // Not Signals: a Signal is CPU-visible, and these are not (nv: CUDA
  // memory). Engines and streams store them; engines wait on them.
  struct GpuWord {
    uint64_t va = 0;
    bool twin = false;  // the SDMA layout, value + 2^31 at +8 (Signal::twin_layout)
  };
  std::vector<GpuWord> posted_dev;
  // CONCCL_POSTED_WORDS (read once per process): "host" or unset, the host
  // words; "device", the GPU words where every rank asks for them. Other
  // values are refused when a multi-process communicator is made.
  enum class PostedWords { device, host };
  static Result<PostedWords> posted_words_setting();
  std::unique_ptr<Queue> poster;
  bool poster_unseen = false;  // posts on `poster` that a stream-ordered call has not yet waited for
  Status post_by_engine(uint64_t call, Deadline dl);
  uint64_t* failed_word(int rank) const;
  uint64_t* published_word(int rank) const;
  char* reason_text(int rank) const;
  uint64_t* desc_slot(int rank, uint64_t k) const;

  // Windows: per window number, every rank's buffer (empty once deregistered).
  struct WindowEntry {
    std::vector<Buffer> ranks;
    uint64_t last_call = 0;  // the last call that used it
  };
  std::vector<WindowEntry> windows;

  // Calls: the last number, each counter's value after it (per rank), the
  // plans by descriptor.
  std::atomic<uint64_t> k{0};
  std::vector<uint64_t> base[kCounters];
  // The stream of the last stream-ordered call, and what it waits for: a
  // call on another stream first waits for those (posted only grows).
  StreamOps* last_stream = nullptr;
  uint64_t last_arrive = 0, last_sent = 0;
  std::map<std::vector<uint64_t>, std::unique_ptr<Plan>> plans;
  CommStats counts;
  // CONCCL_CALL_TRACE=<prefix> (one rank: CONCCL_CALL_TRACE_RANK, default 0): when every rank's counters
  // reached each call's values (call_trace.hpp); null when unset.
  std::unique_ptr<CallTrace> trace;

  // Stream-ordered calls not known complete, watched by the watchdog thread.
  struct Pending {
    uint64_t k = 0, arrive = 0, sent = 0;
    Deadline deadline;
    std::vector<uint64_t> sent_after;  // per rank: its sent counter once its part of call k is done
  };
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Pending> pending;
  Status failed;  // the communicator's async error
  bool stop = false;
  std::thread watchdog;

  Status run(const CollectiveArgs& args, StreamOps* stream, std::vector<StreamOps::Op>* deferred = nullptr);
  // run()'s steps (calls.cpp).
  Result<Plan*> plan_of(const PreparedCall& prepared);
  Status drain_stream_calls(const std::string& name);
  Status publish(const CallDesc& d, const std::string& name);
  struct Gate;
  Status end_on_host(uint64_t call, uint64_t arrive_target, uint64_t sent_target, Deadline dl,
                     const std::string& name, const Gate* gate = nullptr);
  // poll: the stream's two waits may poll (stream_waits_may_poll, builder.hpp).
  Status end_on_stream(StreamOps& stream, uint64_t call, uint64_t arrive_target, uint64_t sent_target, bool poll,
                       Deadline dl, const std::string& name, std::vector<StreamOps::Op>* deferred);
  // The checks and placement every window call makes, and its plan on the
  // counters at these offsets of every rank's pool.
  Result<PreparedCall> prepare(const CollectiveArgs& a);
  Communicator::RankSignals signals_at(uint64_t posted_at, uint64_t arrive_at, uint64_t phase_at,
                                       uint64_t sent_at) const;
  Result<std::unique_ptr<Plan>> compile_plan(const PreparedCall& pc, const Communicator::RankSignals& sig);

  // Submits a window plan's lists for one call or replay, each wait
  // rewritten for it: "posted" to posted_before + its value within one
  // call, the other counters to bases[counter][rank] + it. Errors name the
  // list that could not be submitted.
  static Status submit_lists(Plan& plan, uint64_t posted_before, const std::vector<uint64_t> (&bases)[kCounters],
                             Deadline dl, const std::string& name,
                             std::vector<std::pair<Queue*, uint64_t>>* held = nullptr);

  // ---- captured calls (captured_calls.cpp) ----
  // Records call `a` on a capturing stream: its plan on a slot's counters
  // and queues of its own, kept armed by `keeper`; on the stream a replay
  // tick and a wait for its end.
  Status capture(const CollectiveArgs& a, StreamOps& stream);
  struct CaptureSlot {
    bool busy = false;
    uint64_t replays = 0;                   // of every capture the slot has held, that ended
    std::vector<uint64_t> base[kCounters];  // per rank: each counter after them
  };
  std::vector<CaptureSlot> capture_slots;
  uint64_t captures = 0;  // captured calls made: the next one's id
  std::shared_ptr<CaptureLink> capture_link = std::make_shared<CaptureLink>();
  ReplayKeeper keeper;  // arms and watches the live captures' replays
  // Rank q's descriptor words of capture slot `slot`.
  uint64_t* capture_desc(int q, size_t slot) const;
  // Queues replay r of `c` (the keeper's thread): false until every rank
  // has captured the call.
  Result<bool> arm_capture(CapturedCall& c, uint64_t r);
  // Replay r of `c` has ticked here and not ended (the keeper's check):
  // another rank failed or left before its part of it was done; once
  // `expired`, who holds it up.
  Status check_capture(CapturedCall& c, uint64_t r, bool expired) const;
  // Ends the keeper (captures replayed from now on only release their
  // streams) and cuts the captures' link to this state (its destructor).
  void cut_captures();
  // Waits (until `dl`) for every peer's lists of every capture's last replay
  // to end, as the destructor does for the last window call.
  void wait_for_captures_of_peers(Deadline dl);
  // What a destroyed capture leaves: its plan, queues and signals, freed by
  // reap_captures() on a thread that makes calls (a graph may be destroyed
  // on any thread; the communicator's plan table and pool are the calling
  // thread's), and its slot with the replays that ended, free once reaped.
  // Replays armed and never ticked go with their queues.
  struct RetiredCapture {
    std::unique_ptr<Plan> plan;
    std::map<std::pair<int, int>, std::unique_ptr<Queue>> queues;
    std::unique_ptr<Queue> closer;
    ReplayEnd end;
    size_t slot = 0;
    uint64_t replays = 0;
    std::vector<uint64_t> base[kCounters];
  };
  std::mutex retired_mu;
  std::vector<RetiredCapture> retired;
  void reap_captures();
  // How many replays of `plan` can be armed at once: as many as every ring
  // of its queues holds, one spare, at most 16.
  static uint64_t armed_depth(const Plan& plan);
  // Marks the communicator failed (first reason wins), tells the other ranks
  // through this rank's failed word, and releases this rank's stream waits.
  void fail(const Status& why);
  // A failure seen from here: a rank gone, another rank failed, or (at
  // `deadline`) call `call` not done, naming who holds it up.
  // Whether call `call` can still complete here: another rank failed the
  // communicator, or left it before its part of the call was done (a rank
  // whose lists of the call have all ended, per `sent_after`, may leave), or
  // (once `expired`) what it waits for.
  Status check(uint64_t call, uint64_t arrive_target, uint64_t sent_target, bool expired,
               const std::vector<uint64_t>& sent_after) const;
  bool done(uint64_t arrive_target, uint64_t sent_target) const {
    return arrive[static_cast<size_t>(me)].value() >= arrive_target &&
           sent[static_cast<size_t>(me)].value() >= sent_target;
  }
  // Host wait for this rank's part of a call, with the checks between slices.
  Status wait_here(uint64_t call, uint64_t arrive_target, uint64_t sent_target, const std::vector<uint64_t>& sent_after,
                   Deadline deadline);
  void watch();
  void start_watchdog();

  // ---- gated submission (call_gate.cpp, docs/collectives.md) ----
  // A window call's lists are written held (Queue::submit_held) and
  // published once every rank has posted the call (stream-ordered: by the
  // gate thread; host-ordered: by the calling thread, which posts), so that
  // no engine meets a wait on "posted" that fails (on Hopper a failed
  // acquire switches the channel's TSG out until the scheduler comes back to
  // it). When a rank has not posted within gate_spin of the gate reaching
  // the front, the lists are published anyway and their own waits gate them
  // on the engine, as without gating.
  struct Gate {
    uint64_t call = 0;
    std::vector<std::pair<Queue*, uint64_t>> held;  // queue, ticket to release
  };
  static bool gated_submit();                     // CONCCL_GATED_SUBMIT (default: off)
  static std::chrono::microseconds gate_spin();   // CONCCL_GATE_SPIN_US (default 100)
  void hold_gate(Gate g);                         // hands it to the gate thread (stream-ordered calls)
  // Publishes g once every rank has posted (or after gate_spin); true if
  // they all had. Host-ordered calls run it on the calling thread.
  bool open_gate_here(const Gate& g);
  void gate_loop();
  void stop_gates();                              // publishes what is held, ends the thread
  bool all_posted(uint64_t call) const;
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  std::deque<Gate> gates;  // under gate_mu, oldest first; popped by the gate thread alone
  bool gates_stop = false;
  std::thread gate_thread;
};

}  // namespace conccl
