// tools/sdma-probe/sweep_end.hpp - what every sweep (the copy collectives and
// the reductions) does once its sizes are done: the summary or the
// interruption under the table, the JSON (stdout and/or --json FILE), the
// plot, and the exit code.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "sweep/sweep_json.hpp"
#include "sweep/sweep_table.hpp"

namespace probe {

struct SweepEnd {
  const char* op = "";         // the subcommand, for messages
  std::string plot_title;      // --plot's title
  bool printer = true;         // this process prints (--procs: rank 0)
  bool json_stdout = false;    // JSON on stdout instead of the table
  size_t planned_sizes = 0;    // sizes the sweep meant to run
  int signal = 0;              // the signal that stopped it (0: none)
  bool all_ok = true;          // every row verified
};

// `release` frees the sweep's device resources: after the JSON is written,
// before the plot is drawn. Returns the exit code: 128 + signal when
// interrupted, fault when the JSON file could not be written, verify_failed
// when a row had wrong bytes, else ok.
int finish_sweep(const Args& args, Context& ctx, const SweepSetup& setup, const std::vector<SweepRow>& rows,
                 std::optional<JsonFile>& json_out, const std::function<void()>& release, const SweepEnd& end);

}  // namespace probe
