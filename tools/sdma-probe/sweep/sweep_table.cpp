// tools/sdma-probe/sweep_table.cpp - see sweep_table.hpp.
#include "sweep/sweep_table.hpp"

#include <algorithm>
#include <cinttypes>

namespace probe {

void print_banner(FILE* f, const SweepSetup& s) {
  std::fprintf(f, "# sdma-probe %s: %d rank%s on %d GPU%s%s\n", s.op.c_str(), s.ranks, s.ranks == 1 ? "" : "s",
               s.gpus, s.gpus == 1 ? "" : "s", s.loopback ? " (loopback: several ranks per GPU)" : "");
  std::fprintf(f, "#  backend: %s%s, preset: %s\n", s.backend.c_str(),
               s.emulated ? " (emulated: times are the emulator's, not hardware times)" : "",
               s.preset.empty() ? "none" : s.preset.c_str());
  std::fprintf(f, "#  engines: %d per GPU available (the engines column: those a size uses), queues: %s\n",
               s.engines_per_gpu, s.queues.c_str());
  if (s.reduction) {
    std::fprintf(f, "#  reduction: op %s, type %s%s; algorithm chosen per size (the variant column); staging %" PRIu64
                    " bytes per rank\n",
                 s.redop.c_str(), s.dtype.c_str(), s.has_root ? (", root " + std::to_string(s.root)).c_str() : "",
                 s.staging);
    std::fprintf(f, "#  ordering: %s\n", s.ordering_note.c_str());
  } else {
    std::fprintf(f, "#  variant: %s%s%s", s.variant.c_str(),
                 s.variant == "auto" ? " (chosen per size: the variant column)" : "",
                 s.prelaunch ? ", prelaunch (timed from the trigger's release)" : "");
    if (s.has_root) std::fprintf(f, ", root: %d", s.root);
    if (s.has_peer) std::fprintf(f, ", peer: %d", s.peer);
    std::fprintf(f, "\n");
  }
  if (s.iters)
    std::fprintf(f, "#  iterations: %" PRId64 " timed, %" PRId64 " warm-up%s per size\n", s.iters, s.warmup,
                 s.emulated ? "" : " (and at least 100 ms)");
  else
    std::fprintf(f, "#  iterations: by size (3..20) timed, %" PRId64 " warm-up%s per size\n", s.warmup,
                 s.emulated ? "" : " (and at least 100 ms)");
  if (s.procs && s.reduction)
    std::fprintf(f, "#  processes: %d, one per rank; buffers: %s\n", s.procs,
                 s.windows ? "send and recv in one window per rank (no message per call)"
                           : "outside windows (--no-windows: the plan cache's vote, messages every call)");
  else if (s.procs)
    std::fprintf(f, "#  processes: %d, one per rank; timed: %s\n", s.procs,
                 s.windows ? "calls through one window per rank (Communicator::call, host-ordered, back to back)"
                           : "plans (--no-windows: plan, launch, wait)");
  std::fprintf(f, "#  sizes: %" PRIu64 " to %" PRIu64 " bytes, step factor %" PRIu64 "\n#\n", s.min, s.max,
               s.step_factor);
}

void print_header(FILE* f, bool reduction) {
  // The reductions' redop and root columns: 12 characters more before the
  // out-of-place columns.
  std::fprintf(f, "#%*s%47s\n", reduction ? 107 : 95, "out-of-place", "in-place");
  std::fprintf(f, "#%11s %12s %6s ", "size", "count", "type");
  if (reduction) std::fprintf(f, "%6s %4s ", "redop", "root");
  std::fprintf(f, "%8s %3s %6s %10s %10s %10s %9s %8s %8s %8s %8s %7s %7s %7s\n", "variant", "eng", "iters", "time",
               "min", "max", "stddev", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::fprintf(f, "#%11s %12s %6s ", "(B)", "(elements)", "");
  if (reduction) std::fprintf(f, "%6s %4s ", "", "");
  std::fprintf(f, "%8s %3s %6s %10s %10s %10s %9s %8s %8s %8s %8s %7s %7s\n", "", "", "", "(us)", "(us)", "(us)",
               "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)");
}

void print_row(FILE* f, const SweepRow& r) {
  std::fprintf(f, "%12" PRIu64 " %12" PRIu64 " %6s ", r.size, r.count, r.type.c_str());
  if (!r.redop.empty()) std::fprintf(f, "%6s %4d ", r.redop.c_str(), r.root);
  std::fprintf(f, "%8s %3d %6" PRIu64 " %10.2f %10.2f %10.2f %9.2f %8.3f %8.3f %8" PRIu64, r.variant.c_str(),
               r.engines, r.iters, r.time.mean, r.time.min, r.time.max, r.time.stddev, r.algbw, r.busbw, r.wrong);
  if (r.in_place)
    std::fprintf(f, " %8.2f %7.3f %7.3f %7" PRIu64 "\n", r.ip_time.mean, r.ip_algbw, r.ip_busbw, r.ip_wrong);
  else
    std::fprintf(f, " %8s %7s %7s %7s\n", "n/a", "n/a", "n/a", "n/a");
}

double messages_per_call(const std::vector<SweepRow>& rows) {
  double messages = -1;
  for (const SweepRow& r : rows) {
    messages = std::max(messages, r.messages_per_call);
    if (r.in_place) messages = std::max(messages, r.ip_messages_per_call);
  }
  return messages;
}

void print_summary(FILE* f, const std::vector<SweepRow>& rows) {
  uint64_t wrong = 0;
  double bus = 0;
  size_t measured = 0;
  for (const SweepRow& r : rows) {
    wrong += r.wrong + r.ip_wrong;
    bus += r.busbw;
    ++measured;
    if (r.in_place) {
      bus += r.ip_busbw;
      ++measured;
    }
  }
  const double messages = messages_per_call(rows);
  std::fprintf(f, "# Out of bounds values : %" PRIu64 " %s\n", wrong, wrong ? "FAILED" : "OK");
  if (messages >= 0)
    std::fprintf(f,
                 "# Bootstrap msgs/call  : %.2f (bootstrap_messages_per_call: sent + received by a rank per timed "
                 "call, the most of any rank, size and form)\n",
                 messages);
  std::fprintf(f, "# Avg bus bandwidth    : %.3f\n#\n", measured ? bus / static_cast<double>(measured) : 0.0);
}

std::vector<uint64_t> sweep_sizes(uint64_t min, uint64_t max, uint64_t factor) {
  std::vector<uint64_t> sizes;
  for (uint64_t s = min; s <= max; s *= factor) {
    sizes.push_back(s);
    if (factor < 2 || s > max / factor) break;  // the next would pass max (or wrap)
  }
  return sizes;
}

}  // namespace probe
