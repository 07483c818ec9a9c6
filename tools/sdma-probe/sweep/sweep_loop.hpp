// tools/sdma-probe/sweep_loop.hpp - the loop over the sizes every sweep (the
// copy collectives and the reductions) runs: the banner and header, a row
// per size with the progress bar between them, the ranks' last agreement,
// and the end (finish_sweep: summary, JSON, plot, exit code).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "sweep/sweep_json.hpp"
#include "sweep/sweep_measure.hpp"
#include "sweep/sweep_table.hpp"

namespace probe {

// What the loop needs from its command.
struct SweepLoop {
  const SweepSetup* setup = nullptr;  // the banner's, the JSON's
  std::vector<uint64_t> sizes;
  // The per-rank chunk (or count) a size runs as: a size that runs as the
  // one before it is skipped.
  std::function<uint64_t(uint64_t size)> unit_of;
  // Measures sizes[si] (`asked`; out of place, and in place where there is
  // such a form) into the row; after a signal the row is dropped.
  std::function<conccl::Status(size_t si, uint64_t asked, SweepRow* row)> measure;
  // Frees the device resources: before the plot, and before the message of
  // an error that is not a timeout (after one a call may still run: the
  // buffers go with the device).
  std::function<void()> release;
  std::string plot_title;
  bool printer = true;       // this process prints (--procs: rank 0)
  bool json_stdout = false;  // JSON on stdout instead of the table
};

// Runs the sweep and ends it; returns the exit code.
int run_sweep(const Args& args, Context& ctx, RankSync& sync, const SweepLoop& loop,
              std::optional<JsonFile>& json_out);

}  // namespace probe
