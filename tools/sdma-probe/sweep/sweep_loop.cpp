// tools/sdma-probe/sweep_loop.cpp - see sweep_loop.hpp.
#include "sweep/sweep_loop.hpp"

#include <cstdio>

#include "sweep/sweep_end.hpp"
#include "sweep/sweep_progress.hpp"

namespace probe {
namespace {

// After the last size: the ranks' last agreement (a signal after the last
// exchange of the loop marks every rank's run interrupted, or none), then
// the summary, JSON and plot.
int end_sweep(const Args& args, Context& ctx, RankSync& sync, const SweepLoop& loop,
              const std::vector<SweepRow>& rows, bool all_ok, std::optional<JsonFile>& json_out) {
  if (sync.me() >= 0) {
    conccl::Result<std::vector<std::string>> end = sync.exchange("end", "");
    if (!end.ok()) {
      if (end.status().code() != conccl::Code::timeout) loop.release();
      return fail(args, ctx, end.status().prefix("ending the sweep"));
    }
  }
  SweepEnd finish;
  finish.op = loop.setup->op.c_str();
  finish.plot_title = loop.plot_title;
  finish.printer = loop.printer;
  finish.json_stdout = loop.json_stdout;
  finish.planned_sizes = loop.sizes.size();
  finish.signal = sync.stop_signal();
  finish.all_ok = all_ok;
  return finish_sweep(args, ctx, *loop.setup, rows, json_out, loop.release, finish);
}

}  // namespace

int run_sweep(const Args& args, Context& ctx, RankSync& sync, const SweepLoop& loop,
              std::optional<JsonFile>& json_out) {
  const bool table = !loop.json_stdout && loop.printer;
  if (table) {
    print_banner(ctx.out, *loop.setup);
    print_header(ctx.out, loop.setup->reduction);
    std::fflush(ctx.out);
  }
  Progress progress(loop.printer ? ctx.err : nullptr);
  std::vector<SweepRow> rows;
  bool all_ok = true;
  const std::vector<uint64_t>& sizes = loop.sizes;
  for (size_t si = 0; si < sizes.size() && !sync.stop_signal(); ++si) {
    if (si > 0 && loop.unit_of(sizes[si]) == loop.unit_of(sizes[si - 1])) continue;
    progress.show(si, sizes.size(), sizes[si]);
    SweepRow row;
    if (conccl::Status st = loop.measure(si, sizes[si], &row); !st.ok()) {
      progress.clear();
      if (st.code() != conccl::Code::timeout) loop.release();
      return fail(args, ctx, st);
    }
    if (sync.stop_signal()) break;  // this size is abandoned
    all_ok &= row.wrong == 0 && row.ip_wrong == 0;
    progress.clear();
    if (table) print_row(ctx.out, row);
    std::fflush(ctx.out);
    rows.push_back(row);
  }
  progress.clear();
  return end_sweep(args, ctx, sync, loop, rows, all_ok, json_out);
}

}  // namespace probe
