// tools/sdma-probe/sweep_flags.hpp - the flags every size sweep (the copy
// collectives and the reductions) reads the same way: the sizes, iterations
// and ranks, where the JSON goes, --queues, and --procs N (this process the
// launcher, one of its ranks, or every rank at once).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "cli.hpp"
#include "conccl/collectives.hpp"
#include "procs.hpp"
#include "sweep/sweep_json.hpp"

namespace probe {

// A usage error (exit 2) as a Status, for the phases of a sweep that return one.
conccl::Status usage_status(std::string message);

inline constexpr int kMaxSweepRanks = 64;          // --ranks, and --root/--peer below it
inline constexpr int64_t kMaxSweepIters = 1000000;  // --iters and --warmup
inline constexpr int64_t kMaxStepFactor = 1024;

struct SweepFlags {
  JsonTarget json;
  uint64_t min = 0, max = 0;
  int64_t iters = 0;  // 0: by size (iters_for)
  int64_t warmup = 0;
  int64_t root = 0;
  int64_t ranks = 0;  // 0: one per GPU
  int64_t step = 2;   // --step-factor
};

// A flag of the command's own, read between the shared ones: the first bad
// flag is the one reported, in the order the command has always checked them.
using FlagReader = std::function<conccl::Status()>;

// --json/--json-file (json_target), then --min, --max, `after_max`, --iters,
// --warmup, --root, `after_root`, --ranks, --step-factor: the first error.
// Only parsed and range-checked here: whether --root applies and
// check_sizes are the caller's, in its order.
conccl::Result<SweepFlags> read_sweep_flags(const Args& args, const FlagReader& after_max = {},
                                            const FlagReader& after_root = {});
// "need 0 < --min <= --max" unless they are.
conccl::Status check_sizes(const SweepFlags& f);

// nccl-tests' -c/--check N, which every sweep takes (read_sweep_flags checks it).
FlagSpec check_flag_spec();
// Timed iterations at `size`: --iters, or by size (3..20, about 64 MiB moved).
uint64_t iters_for(const SweepFlags& f, uint64_t size);

// --procs N: one process per rank. This process is either the launcher or
// one of the ranks it started (--rank, --unique-id); without --procs, every
// rank is in it.
struct SweepProcs {
  int procs = 0;                // 0: no --procs
  std::optional<ProcRank> rank;  // this process's, when it is a rank
  bool launcher() const { return procs && !rank; }
  int me() const { return rank ? rank->rank : -1; }  // -1: all ranks here
};
// --procs, --rank/--unique-id, not with --ranks, and --no-windows only with
// --procs (`no_windows_why`: the reason, in the command's words).
conccl::Result<SweepProcs> read_sweep_procs(const Args& args, std::string_view no_windows_why);
// The launcher: the JSON file is rank 0's to write, so one it cannot open is
// refused before any rank starts; then the ranks run (run_procs).
int launch_sweep_ranks(const Args& args, Context& ctx, const JsonTarget& json, int procs);
// --json FILE is opened before the sweep, by the process that writes it
// (`printer`): a path that cannot be written is refused now, not after
// minutes of sweeping.
conccl::Status open_json_out(const JsonTarget& json, bool printer, std::optional<JsonFile>* out);

// --queues auto|per-rank|per-engine (loopback: the queues a GPU's ranks use
// on an engine); `name` gets the word given.
conccl::Result<conccl::Communicator::Options::QueueSharing> read_queues(const Args& args, std::string* name);

}  // namespace probe
