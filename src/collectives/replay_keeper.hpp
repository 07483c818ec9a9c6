// src/collectives/replay_keeper.hpp - one thread per communicator that keeps
// its captured calls' replays armed (captured_calls.cpp, docs/graphs.md).
//
// A captured call's stream records only a replay tick (a counter that grows
// by one per replay) and a wait for its end signal. Its lists must already
// be on the engines when a replay ticks, so the keeper queues each capture's
// next replays ahead of its stream, up to `depth` beyond the last replay
// seen to end: each list waits on the engine for the counter to reach its
// replay, and every value it waits for or adds is computed from the counts
// of the replays before it. The host is then off every replay's path; it
// only re-arms behind the replays, at its own pace.
//
// The keeper also gives every replay that has ticked the call timeout to
// end, or fails it (async_error(), the stream released, the rank that holds
// it up named); a replay that cannot end (a rank left or failed the
// communicator) fails at once. One thread serves
// every capture of a communicator (programs capture hundreds of calls); it
// polls (Arm says how: spinning while replays come, or every 20 us while
// replays run and backing off to 200 us when none has ticked for a while),
// and sleeps when there are no captures. It never
// holds the last reference to a capture: a capture's destructor calls
// forget(), which waits for the thread's pass to end.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "conccl/deadline.hpp"
#include "conccl/status.hpp"

namespace conccl {

class ReplayKeeper {
 public:
  // One captured call's replays, numbered r = 1, 2, ... (or from `first`).
  // Called on the keeper's thread, one at a time, never concurrently with
  // forget() of the same capture.
  class Replays {
   public:
    virtual ~Replays() = default;
    // Replays its stream has begun: the counter its tick bumps.
    virtual uint64_t started() const = 0;
    // Counts a tick its stream recorded as a flag (ReplayEnd, calls.hpp):
    // the keeper asks before every look at started(). An error fails the
    // capture (a tick that cannot be right: its replay began while the one
    // before it ran).
    virtual Status take_ticks() { return Status(); }
    // Queues replay r's lists (they wait for its tick), and its closing list
    // where an engine ends replays.
    // false: not possible yet (another rank has not captured the call);
    // an error fails the replay.
    virtual Result<bool> arm(uint64_t r) = 0;
    // Whether replay r has ended (r was armed): its closing list has run,
    // or, where the keeper ends replays, its counters are reached, and
    // then this call adds its end.
    virtual bool ended(uint64_t r) = 0;
    // Replay r cannot run: record why (async_error()). Called once.
    virtual void fail(uint64_t r, const Status& why) = 0;
    // After a failure, every pass: later replays must not tick, and a stream
    // that waits for this capture goes on.
    virtual void release() = 0;
    // Replay r has ticked and not ended: an error when it cannot end (a rank
    // left or failed the communicator), or, once `expired`, why it has not
    // (who holds it up). Called every few milliseconds, not every pass.
    virtual Status check(uint64_t r, bool expired) = 0;
  };

  // When a replay's lists go onto the engines.
  //   on_tick (the default): once the keeper sees the replay's tick. The
  //     keeper spins (yielding its core) while replays come, backing off to
  //     timed naps after kSpinFor without one, so a tick is seen within
  //     microseconds; the lists then find their trigger set or nearly so.
  //   ahead: up to `depth` replays ahead, each list waiting at an acquire
  //     for its tick. The host is off the replay's path, but on an H100 a
  //     list that waits there from one replay to the next was switched out
  //     and a 1 KiB replay took 226-631 us against 21-58 us per uncaptured
  //     call (docs/perf/h200-graphs.md, run 45).
  // CONCCL_REPLAY_ARM=ahead|tick chooses for communicators (default_arm()).
  enum class Arm : uint8_t { on_tick, ahead };
  static Arm default_arm();
  explicit ReplayKeeper(Arm arm = default_arm());
  ReplayKeeper(const ReplayKeeper&) = delete;
  ReplayKeeper& operator=(const ReplayKeeper&) = delete;
  ~ReplayKeeper();  // stop()

  // Keeps `who` armed from replay `first` on, up to `depth` replays past the
  // last that ended; a replay that has ticked gets `timeout_ms` to end.
  void add(Replays* who, uint64_t first, uint64_t depth, int64_t timeout_ms);
  // Drops who and returns once the thread no longer uses it.
  void forget(const Replays* who);
  // Every capture fails (called from any thread, the keeper's included,
  // without waiting): `why` is what their fail() is told. Captures added
  // later are failed at once.
  void fail_all(const Status& why);
  // The communicator is going: the thread ends, and every capture is
  // released (not failed: nothing went wrong), so that its later ticks only
  // let its stream go on. The captures stay registered (forget() works).
  void stop();
  // Calls fn on every capture, under the keeper's lock (the thread is
  // between passes).
  void visit(const std::function<void(Replays&)>& fn);
  size_t kept() const;
  bool running() const;
  // Where a replay's time goes, as the keeper sees it (CommStats): replays
  // seen to end; from seeing a replay's tick to seeing its end (its lists'
  // time, the keeper's look and, where it ends replays, its end); from
  // seeing an end to seeing the next tick of that capture (the stream
  // passing its wait, the graph's launch, the next tick's stores).
  struct Timing {
    uint64_t replays = 0, busy_ns = 0, idle_ns = 0;
  };
  Timing timing() const;

 private:
  struct Entry {
    Replays* who = nullptr;
    uint64_t armed = 0, ended = 0;  // the last replay armed, the last seen to end
    uint64_t depth = 1;
    int64_t timeout_ms = 0;
    uint64_t watching = 0;  // the replay whose deadline runs
    uint64_t seen = 0;      // ticks seen (timing)
    std::chrono::steady_clock::time_point tick_at{}, end_at{};
    Deadline deadline = Deadline::now();
    Deadline next_check = Deadline::now();  // when check() is asked next
    bool failed = false;
  };
  // CONCCL_KEEPER_TRACE=<prefix>: each replay's moments as the keeper saw
  // them (steady_clock ns, which every process of the machine shares), kept
  // up to kTraceRows and written to <prefix>.<pid>.csv when the keeper stops:
  // for lining up the ranks' replays (docs/perf/h200-graphs.md).
  struct TraceRow {
    const Replays* who;
    uint64_t replay;
    int64_t tick_seen, armed, ended;
  };
  static constexpr size_t kTraceRows = 1u << 18;
  void trace(const Entry& e, uint64_t r, int64_t TraceRow::*at);
  void write_trace();
  void run();
  // One look at one capture at `now` (mu_ held); true when replays are in flight.
  bool tend(Entry& e, std::chrono::steady_clock::time_point now);
  void fail_entry(Entry& e, uint64_t r, const Status& why);

  const Arm arm_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;
  std::atomic<bool> fail_all_{false};
  std::atomic<uint64_t> replays_{0}, busy_ns_{0}, idle_ns_{0};
  Status all_why_;  // under why_mu_ (fail_all runs on any thread, the keeper's too)
  std::mutex why_mu_;
  bool stop_ = false;
  std::thread thread_;
  const std::string trace_to_;      // CONCCL_KEEPER_TRACE's file (util::env_trace_path), or empty
  std::vector<TraceRow> trace_;     // rows in order of first sight (keeper thread, then stop())
};

}  // namespace conccl
