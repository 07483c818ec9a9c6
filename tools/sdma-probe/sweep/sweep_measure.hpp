// tools/sdma-probe/sweep_measure.hpp - how every size sweep measures one form
// (out of place or in place) of one size, whatever it calls: the warm-up, the
// timed calls, and with --procs the signal the ranks agree on and the row
// they make together.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "conccl/collectives.hpp"
#include "sweep/sweep_stats.hpp"

namespace probe {

// The signal the sweep stops for. One process: the one it received. Ranks
// in separate processes stop together, at the same call: each tells the
// others the signal it received (0: none) at the exchanges every rank makes
// - one per warm-up call, one before timed calls, one at the end - and all
// stop at the first where any rank has one. A rank that stopped on its own
// would leave the others waiting for it in a call until their deadline
// (exit 3, no JSON).
class RankSync {
 public:
  // `me`: this process's rank (-1: every rank is here, nothing to agree on);
  // `comm`: the ranks' communicator; exchanges wait up to deadline_ms.
  RankSync(int me, conccl::Communicator* comm, int64_t deadline_ms)
      : me_(me), comm_(comm), deadline_ms_(deadline_ms) {}
  int me() const { return me_; }
  conccl::Communicator& comm() const { return *comm_; }
  int stop_signal() const;
  // Exchanges `mine` with every rank, this rank's signal in front; returns
  // everyone's in rank order, signal removed, and records the first signal.
  conccl::Result<std::vector<std::string>> exchange(const std::string& what, const std::string& mine);
  // Across processes: every rank has got here (one process: at once).
  conccl::Status barrier(const std::string& what);

 private:
  int me_;
  conccl::Communicator* comm_;
  int64_t deadline_ms_;
  int agreed_signal_ = 0;
};

// What a row shows of one form of one size.
struct Measured {
  TimeStats time;
  uint64_t wrong = 0;
  double messages_per_call = -1;  // --procs: bootstrap messages per timed call
};

// Warm-up: --warmup calls, and on real engines (not `emulated`) at least
// 100 ms of them: copy engines of a GPU that idled (as it does while the
// previous size was verified) run at about half rate for their first
// ~100 ms (docs/perf/h200.md, "Cold GPU"). The first warm-up of a process
// lasts at least 1.5 s: an idle H100 runs its copy engines' clock at 765
// MHz and needs about a second of work to reach 1545 MHz, and a 1 KiB
// all-gather takes 11 us at the first against 7.4 at the second
// (docs/perf/h200-collectives.md, run 58). Ranks in separate processes call
// together: one more while any rank wants one (each times its own 100 ms)
// and none has a signal. Errors are prefixed "warm-up at `at`".
conccl::Status warm_up(RankSync& sync, int64_t warmup, bool emulated, const std::string& at,
                       const std::function<conccl::Status()>& call);

// One timed call: sets *t0 where its time starts (what comes before it, a
// prelaunch, is not timed) and returns once its results are in place.
using TimedCall = std::function<conccl::Status(std::chrono::steady_clock::time_point* t0)>;
// n_iters timed calls into m->time and m->messages_per_call. Ranks in
// separate processes agree on signals (untimed) before every
// agree_every-th call (1: every one; errors "before a timed `noun` at
// `at`"). A signal ends them early and leaves m as it was.
conccl::Status time_calls(RankSync& sync, uint64_t n_iters, uint64_t agree_every, const char* noun,
                          const std::string& at, const TimedCall& call, Measured* m);

// --procs: every rank checked its own results; the row has the sum of wrong
// bytes (elements) and the times of the slowest rank. One process: m as it is.
conccl::Status combine_ranks(RankSync& sync, const std::string& at, Measured* m);

}  // namespace probe
