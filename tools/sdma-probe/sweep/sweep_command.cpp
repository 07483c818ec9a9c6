// tools/sdma-probe/sweep_command.cpp - see sweep_command.hpp.
#include "sweep/sweep_command.hpp"

#include "sweep/sweep_loop.hpp"

namespace probe {

SizeSweep::SizeSweep(const Args& args, const SweepFlags& sweep, const SweepProcs& procs)
    : args_(args),
      sweep_flags_(sweep),
      me_(procs.me()),
      // --procs: calls through windows (no message between the ranks per
      // call) unless --no-windows.
      windows_(me_ >= 0 && !args.has("no-windows")),
      emulated_(args.common().backend == Backend::emu),
      deadline_ms_(static_cast<int64_t>(args.common().timeout_ms)) {}

int SizeSweep::run(Context& ctx, std::optional<JsonFile>& json_out) {
  // Ranks in separate processes stop together: each tells the others the
  // signal it received at every exchange - each warm-up call, every 32nd
  // timed call, after each form - and all stop at the first where any rank
  // has one.
  sync_.emplace(me_, comm_.get(), deadline_ms_);
  const SweepSetup setup = sweep_setup();
  SweepLoop loop;
  loop.setup = &setup;
  loop.sizes = sweep_sizes(sweep_flags_.min, sweep_flags_.max, static_cast<uint64_t>(sweep_flags_.step));
  // Sizes that round to the same whole elements per rank (or count) run once.
  loop.unit_of = [this](uint64_t size) { return unit_of(size); };
  loop.measure = [this](size_t si, uint64_t asked, SweepRow* row) { return measure_size(si, asked, row); };
  loop.release = [this] { release(); };
  loop.plot_title = "sdma-probe " + plot_name(setup) + ": " + std::to_string(d_.n) + " ranks, " +
                    std::string(backend_name(args_.common().backend));
  loop.printer = me_ <= 0;
  loop.json_stdout = sweep_flags_.json.to_stdout;
  return run_sweep(args_, ctx, *sync_, loop, json_out);
}

conccl::Status SizeSweep::check_fits(const MemBudget& need, std::string_view op, const std::string& also_lower) const {
  const uint64_t max = sweep_flags_.max;
  if (conccl::Status st = check_budget(need, d_.dev->topology(), emulated_,
                                       "lower --max (now " + format_size(max) + ")" + also_lower + " or --ranks (now " +
                                           std::to_string(d_.n) + ")",
                                       mem_available());
      !st.ok())
    return st.prefix(std::string(op) + " up to --max " + format_size(max) + " on " + std::to_string(d_.n) +
                     " ranks");
  return conccl::Status();
}

void add_rank_flags(std::vector<FlagSpec>& f) {
  f.push_back({.name = "procs", .value = "N",
               .help = "N ranks, one process each, 1..16 (started by this one; ranks on GPUs as --ranks places "
                       "them; SIGINT/SIGTERM reach every rank)"});
  f.push_back({.name = "rank", .value = "R", .help = "set by --procs for the ranks it starts"});
  f.push_back({.name = "unique-id", .value = "ID", .help = "set by --procs for the ranks it starts"});
  // -g as nccl-tests spells its GPU count: there every GPU is a rank, as here.
  f.push_back({.name = "ranks", .value = "N",
               .help = "ranks, 1..64 (default: one per GPU); more ranks than GPUs places several on each (loopback)",
               .short_name = 'g'});
}

}  // namespace probe
