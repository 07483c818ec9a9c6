// tools/sdma-probe/sweep_flags.cpp - see sweep_flags.hpp.
#include "sweep/sweep_flags.hpp"

#include <algorithm>

namespace probe {
conccl::Status usage_status(std::string message) {
  return conccl::error(conccl::Code::invalid_argument, std::move(message));
}

conccl::Result<SweepFlags> read_sweep_flags(const Args& args, const FlagReader& after_max,
                                            const FlagReader& after_root) {
  // `--json FILE` (the shared --json is a switch, so FILE arrives as the one
  // positional): rows go to FILE and the table still goes to stdout.
  conccl::Result<JsonTarget> target = json_target(args);
  if (!target.ok()) return usage_status(target.status().message());
  SweepFlags f;
  f.json = *target;
  conccl::Result<uint64_t> min = args.get_size("min", 1024);
  conccl::Result<uint64_t> max = args.get_size("max", 16ull << 20);
  for (auto* r : {&min, &max})
    if (!r->ok()) return r->status();
  if (after_max) CONCCL_RETURN_IF_ERROR(after_max());
  conccl::Result<int64_t> iters = args.get_int_in_range("iters", 1, kMaxSweepIters, 0);  // 0: by size
  conccl::Result<int64_t> warmup = args.get_int_in_range("warmup", 0, kMaxSweepIters, 2);
  conccl::Result<int64_t> root = args.get_int_in_range("root", 0, kMaxSweepRanks - 1, 0);
  for (auto* r : {&iters, &warmup, &root})
    if (!r->ok()) return r->status();
  if (after_root) CONCCL_RETURN_IF_ERROR(after_root());
  // nccl-tests' -c N checks N iterations; every row here is verified once,
  // after timing (so the check costs no time in the table).
  conccl::Result<int64_t> check = args.get_int_in_range("check", 0, kMaxSweepIters, 1);
  if (!check.ok()) return check.status();
  if (*check == 0)
    return usage_status("--check 0 (-c 0): sdma-probe always verifies every destination byte, once after the timed "
                        "calls, so the check does not change the times; drop -c 0");
  conccl::Result<int64_t> ranks = args.get_int_in_range("ranks", 1, kMaxSweepRanks, 0);  // 0: one per GPU
  conccl::Result<int64_t> step = args.get_int_in_range("step-factor", 2, kMaxStepFactor, 2);
  for (auto* r : {&ranks, &step})
    if (!r->ok()) return r->status();
  f.min = *min;
  f.max = *max;
  f.iters = *iters;
  f.warmup = *warmup;
  f.root = *root;
  f.ranks = *ranks;
  f.step = *step;
  return f;
}

FlagSpec check_flag_spec() {
  return {.name = "check", .value = "N",
          .help = "nccl-tests' -c: any N >= 1 (the default 1) verifies every destination byte once, after the timed "
                  "calls; 0 is refused (the check is always on and takes no timed time)",
          .short_name = 'c'};
}

conccl::Status check_sizes(const SweepFlags& f) {
  if (f.min == 0 || f.max < f.min) return usage_status("need 0 < --min <= --max");
  return conccl::Status();
}

uint64_t iters_for(const SweepFlags& f, uint64_t size) {
  if (f.iters) return static_cast<uint64_t>(f.iters);
  return std::clamp<uint64_t>((64ull << 20) / std::max<uint64_t>(size, 1), 3, 20);
}

conccl::Result<SweepProcs> read_sweep_procs(const Args& args, std::string_view no_windows_why) {
  SweepProcs p;
  conccl::Result<int> procs = procs_of(args);
  if (!procs.ok()) return procs.status();
  conccl::Result<std::optional<ProcRank>> rank = proc_rank_of(args);
  if (!rank.ok()) return usage_status(rank.status().message());
  p.procs = *procs;
  p.rank = *rank;
  if (p.procs && args.has("ranks"))
    return usage_status("--procs N runs N ranks, one process each: give --procs or --ranks, not both");
  if (args.has("no-windows") && !p.procs)
    return usage_status("--no-windows applies to --procs N (" + std::string(no_windows_why) + "): drop it");
  return p;
}

int launch_sweep_ranks(const Args& args, Context& ctx, const JsonTarget& json, int procs) {
  if (json.file) {
    conccl::Result<JsonFile> jf = JsonFile::open(*json.file);
    if (!jf.ok()) return fail(args, ctx, jf.status());
  }
  return run_procs(args, ctx, procs);
}

conccl::Status open_json_out(const JsonTarget& json, bool printer, std::optional<JsonFile>* out) {
  if (!json.file || !printer) return conccl::Status();
  conccl::Result<JsonFile> jf = JsonFile::open(*json.file);
  if (!jf.ok()) return jf.status();
  *out = std::move(jf).value();
  return conccl::Status();
}

conccl::Result<conccl::Communicator::Options::QueueSharing> read_queues(const Args& args, std::string* name) {
  using QS = conccl::Communicator::Options::QueueSharing;
  *name = args.value("queues").value_or("auto");
  if (*name == "per-rank") return QS::per_rank;
  if (*name == "per-engine") return QS::per_engine;
  if (*name != "auto") return usage_status("--queues is auto, per-rank or per-engine, not '" + *name + "'");
  return QS::automatic;
}

}  // namespace probe
