// tools/sdma-probe/procs.hpp - collectives with one process per rank
// (--procs N): this process starts N copies of itself, each told its rank and
// the group's unique id (--rank R --unique-id ID), and waits for them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "conccl/bootstrap.hpp"

namespace probe {

// At most this many processes: each opens its device at process slot R
// (DeviceOptions::process_slot), and devices have slots 0..15.
inline constexpr int kMaxProcs = 16;

// This process's place in a --procs group, when it is one of its ranks.
struct ProcRank {
  int rank = 0;
  int nranks = 0;
  conccl::UniqueId id;
};
// From --procs N --rank R --unique-id ID; std::nullopt in the launcher (or
// without --procs). Errors are usage errors.
conccl::Result<std::optional<ProcRank>> proc_rank_of(const Args& args);

// --procs N, checked: 0 when absent, else 1..kMaxProcs; more is a usage
// error naming the limit.
conccl::Result<int> procs_of(const Args& args);

// In a rank: ends this process (SIGKILL) when its launcher ends, so that a
// launcher killed outright (SIGKILL, a second Ctrl-C) leaves no rank behind.
// An error when the launcher has gone already.
conccl::Status follow_launcher();

// The launcher: starts ranks 0..n-1 (rank 0's stdout is ours; the others'
// results are only their exit codes and stderr) and returns the first
// non-zero exit code, rank 0's first.
// SIGINT/SIGTERM: forwarded to every rank, which stop together at their next
// exchange and end as a single-process sweep does (rank 0 writes the finished
// rows: table, JSON); the launcher waits for them, SIGKILLs those still there
// 2 x --timeout-ms + 2 s later, and returns 128 + the signal. A second signal
// of the same kind ends the launcher at once, and its ranks with it.
// Once a rank has failed, the others get the same time to end.
int run_procs(const Args& args, Context& ctx, int nranks);

}  // namespace probe
