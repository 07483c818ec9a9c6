// tools/sdma-probe/sweep_command.hpp - what the sweep commands (the copy
// collectives and the reductions) share around their own set-up and
// measuring: the sweep object's common part (device, ranks, communicator,
// stagers, the loop over the sizes), the steps of the command's run function
// once its flags are read, the --procs flags and the registration.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "conccl/collectives.hpp"
#include "conccl/staging.hpp"
#include "mem_budget.hpp"
#include "sweep/sweep_device.hpp"
#include "sweep/sweep_flags.hpp"
#include "sweep/sweep_json.hpp"
#include "sweep/sweep_measure.hpp"
#include "sweep/sweep_table.hpp"

namespace probe {

// A sweep from the device on: the command's class (CollectiveSweep,
// ReductionSweep) adds its buffers and measuring. The members here are made
// before the command's own, in the order they are declared, and go in
// reverse after them (the device last).
class SizeSweep {
 public:
  virtual ~SizeSweep() = default;
  // The loop over the sizes (run_sweep) and its end; the exit code.
  int run(Context& ctx, std::optional<JsonFile>& json_out);

 protected:
  SizeSweep(const Args& args, const SweepFlags& sweep, const SweepProcs& procs);

  // What the command's sweep says and does per size.
  virtual SweepSetup sweep_setup() const = 0;
  // The per-rank chunk (or count) a size runs as.
  virtual uint64_t unit_of(uint64_t size) const = 0;
  virtual conccl::Status measure_size(size_t si, uint64_t asked, SweepRow* row) = 0;
  virtual void release() = 0;
  // The plot's title after "sdma-probe ": the command and what it adds.
  virtual std::string plot_name(const SweepSetup& setup) const = 0;

  // `need` (the buffers for --max) refused up front when it does not fit:
  // "OP up to --max M on N ranks: ... lower --max (now M)`also_lower` or
  // --ranks (now N)".
  conccl::Status check_fits(const MemBudget& need, std::string_view op, const std::string& also_lower) const;

  conccl::Deadline deadline() const { return conccl::Deadline::after_ms(deadline_ms_); }
  bool local(int r) const { return me_ < 0 || r == me_; }  // its buffers are this process's

  const Args& args_;
  const SweepFlags& sweep_flags_;
  const int me_;  // this process's rank; -1: all ranks here
  const bool windows_;
  const bool emulated_;
  const int64_t deadline_ms_;
  SweepDevice d_;
  std::unique_ptr<conccl::Communicator> comm_;
  std::vector<std::unique_ptr<conccl::Stager>> stagers_;
  std::optional<RankSync> sync_;
};

// A sweep command's run once its flags `f` are read (f.procs, f.sweep):
// --procs N's launcher refuses a rank count `check_ranks` refuses, then
// starts the ranks; a rank it started follows it; `before_json` (if any)
// reads what only the process that sweeps reads; the JSON file is opened by
// the process that writes it; then Sweep(args, f) is set up and run.
template <class Sweep, class Flags>
int run_sweep_command(const Args& args, Context& ctx, Flags& f, const std::function<conccl::Status(int n)>& check_ranks,
                      const std::function<conccl::Status()>& before_json = {}) {
  if (f.procs.launcher()) {
    if (conccl::Status st = check_ranks(f.procs.procs); !st.ok()) return fail(args, ctx, st);
    return launch_sweep_ranks(args, ctx, f.sweep.json, f.procs.procs);
  }
  if (f.procs.rank)
    if (conccl::Status st = follow_launcher(); !st.ok()) return fail(args, ctx, st);
  if (before_json)
    if (conccl::Status st = before_json(); !st.ok()) return fail(args, ctx, st);
  std::optional<JsonFile> json_out;
  if (conccl::Status st = open_json_out(f.sweep.json, f.procs.me() <= 0, &json_out); !st.ok())
    return fail(args, ctx, st);
  Sweep sweep(args, f);
  if (conccl::Status st = sweep.set_up(); !st.ok()) return fail(args, ctx, st);
  return sweep.run(ctx, json_out);
}

// --procs, --rank, --unique-id and --ranks, the last of every sweep's flags.
void add_rank_flags(std::vector<FlagSpec>& f);

// Registers the sweep command NAME: usage "sdma-probe NAME" and the device
// and rank flags every sweep takes, then USAGE_REST (its own, from the second
// line).
#define CONCCL_SWEEP_COMMAND(NAME, ORDER, SUMMARY, USAGE_REST, DETAILS, FLAGS, RUN)                  \
  const Registration reg_##ORDER({                                                                   \
      .name = NAME,                                                                                  \
      .summary = SUMMARY,                                                                            \
      .usage = "sdma-probe " NAME " [--backend B] [--preset P] [--gpus N] [--ranks N | --procs N]\n" \
               USAGE_REST,                                                                           \
      .details = DETAILS,                                                                            \
      .flags = FLAGS,                                                                                \
      .run = RUN,                                                                                    \
      .order = ORDER,                                                                                \
  });

}  // namespace probe
