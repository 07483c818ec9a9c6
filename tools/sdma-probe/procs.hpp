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

// This process's place in a --procs group, when it is one of its ranks.
struct ProcRank {
  int rank = 0;
  int nranks = 0;
  conccl::UniqueId id;
};
// From --procs N --rank R --unique-id ID; std::nullopt in the launcher (or
// without --procs). Errors are usage errors.
conccl::Result<std::optional<ProcRank>> proc_rank_of(const Args& args);

// The launcher: starts ranks 0..n-1 (rank 0's stdout is ours; the others'
// results are only their exit codes and stderr) and returns the first
// non-zero exit code, rank 0's first.
int run_procs(const Args& args, Context& ctx, int nranks);

}  // namespace probe
