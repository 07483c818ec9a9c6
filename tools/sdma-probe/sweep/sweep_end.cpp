// tools/sdma-probe/sweep_end.cpp - the end of a sweep (sweep_end.hpp).
#include "sweep/sweep_end.hpp"

#include <cstdio>

#include "sweep/sweep_plot.hpp"
#include "sweep/sweep_signal.hpp"

namespace probe {

int finish_sweep(const Args& args, Context& ctx, const SweepSetup& setup, const std::vector<SweepRow>& rows,
                 std::optional<JsonFile>& json_out, const std::function<void()>& release, const SweepEnd& end) {
  if (!end.json_stdout && end.printer) {
    if (end.signal)
      std::fprintf(ctx.out, "# interrupted by %s after %zu of %zu sizes\n", sweep_signal_name(end.signal),
                   rows.size(), end.planned_sizes);
    print_summary(ctx.out, rows);
  }
  // stdout's write errors are checked as the program ends (main_entry).
  if (end.json_stdout && end.printer) (void)write_sweep_json(ctx.out, setup, rows, end.signal);
  bool json_written = true;
  if (json_out) {
    const int werr = write_sweep_json(json_out->get(), setup, rows, end.signal);
    if (const std::string why = json_out->close(werr); !why.empty()) {
      std::fprintf(ctx.err, "sdma-probe %s: --json: writing '%s' failed: %s\n", end.op, json_out->path().c_str(),
                   why.c_str());
      json_written = false;
    }
  }
  release();
  if (std::optional<std::string> png = args.value("plot"); png && end.printer) {
    const conccl::Status st = plot_sweep(*png, end.plot_title, rows);
    if (!st.ok()) return fail(args, ctx, st);
    if (!end.json_stdout) std::fprintf(ctx.out, "# plot: %s\n", png->c_str());
  }
  if (end.signal) {
    if (end.printer)  // --procs: rank 0 speaks for the group
      std::fprintf(ctx.err, "sdma-probe %s: interrupted by %s; %zu finished size%s written\n", end.op,
                   sweep_signal_name(end.signal), rows.size(), rows.size() == 1 ? "" : "s");
    return 128 + end.signal;
  }
  if (!json_written) return to_int(ExitCode::fault);
  if (!end.all_ok) {
    std::fprintf(ctx.err, "sdma-probe %s: verification FAILED for at least one size\n", end.op);
    return to_int(ExitCode::verify_failed);
  }
  return to_int(ExitCode::ok);
}

}  // namespace probe
