// tools/sdma-probe/sweep_device.cpp - see sweep_device.hpp.
#include "sweep/sweep_device.hpp"

#include <algorithm>

#include "coll_memory.hpp"
#include "device_flags.hpp"
#include "sweep/sweep_signal.hpp"

namespace probe {

conccl::Status open_sweep_device(const Args& args, const SweepFlags& f, const SweepProcs& p,
                                 const std::function<conccl::Status(int n)>& check_ranks, SweepDevice* out) {
  // SIGINT/SIGTERM from here on: checked between iterations; the size being
  // timed is abandoned, the finished rows are written, exit 128 + signal. A
  // signal during the set-up (allocating, uploading) ends it with no rows.
  // A --procs rank ignores a second one (the terminal's Ctrl-C and the
  // launcher's forwarded one may both arrive): its launcher ends it.
  install_sweep_signals(p.me() >= 0 ? SecondSignal::ignored : SecondSignal::kills);
  conccl::Result<std::unique_ptr<conccl::Device>> dev = open_device_from_args(args, p.me());
  if (!dev.ok()) return dev.status();
  out->dev = std::move(dev).value();
  int gpus = out->dev->gpu_count();
  // Checked by open_device_from_args: 0 (absent) or 1..kMaxGpus.
  if (conccl::Result<int64_t> g = args.get_int_in_range("gpus", 1, kMaxGpus, 0); g.ok() && *g > 0)
    gpus = std::min(gpus, static_cast<int>(*g));
  out->gpus = gpus;
  out->n = p.procs ? p.procs : f.ranks ? static_cast<int>(f.ranks) : std::min(gpus, kMaxSweepRanks);
  CONCCL_RETURN_IF_ERROR(check_ranks(out->n));
  for (int r = 0; r < out->n; ++r) out->gpu_of.push_back(r % gpus);
  return conccl::Status();
}

conccl::Status make_stagers(const SweepDevice& d, int me, std::vector<std::unique_ptr<conccl::Stager>>* out) {
  for (int g = 0; g < d.gpus; ++g) {
    if (me >= 0 && g != d.gpu_of[static_cast<size_t>(me)]) {  // another process's GPU
      out->push_back(nullptr);
      continue;
    }
    conccl::Result<std::unique_ptr<conccl::Stager>> st = conccl::Stager::create(*d.dev, g, staging_bytes(d.gpus));
    if (!st.ok()) return st.status();
    out->push_back(std::move(st).value());
  }
  return conccl::Status();
}

conccl::Result<std::unique_ptr<conccl::Communicator>> create_sweep_communicator(const Args& args,
                                                                               const SweepDevice& d,
                                                                               const SweepProcs& p,
                                                                               conccl::Communicator::Options co) {
  co.loopback = d.loopback();
  const int me = p.me();
  if (me < 0) return conccl::Communicator::create(*d.dev, d.gpu_of, co);
  co.gpu = d.gpu_of[static_cast<size_t>(me)];
  co.join_timeout_ms = static_cast<int64_t>(args.common().timeout_ms);
  return conccl::Communicator::create(*d.dev, me, d.n, p.rank->id, co);
}

SweepSetup common_setup(const Args& args, const char* op, const SweepDevice& d, const SweepFlags& f,
                        const SweepProcs& p, bool windows, const std::string& queues) {
  SweepSetup setup;
  setup.op = op;
  setup.backend = std::string(backend_name(args.common().backend));
  setup.emulated = args.common().backend == Backend::emu;
  setup.preset = args.common().preset;
  setup.ranks = d.n;
  setup.gpus = d.gpus;
  setup.loopback = d.loopback();
  setup.queues = queues;
  const conccl::Topology& topo = d.dev->topology();
  setup.engines_per_gpu = topo.gpus.empty() ? 0 : static_cast<int>(topo.gpus[0].engines.size());
  setup.procs = p.procs;
  setup.windows = windows;
  setup.iters = f.iters;
  setup.warmup = f.warmup;
  setup.min = f.min;
  setup.max = f.max;
  setup.step_factor = static_cast<uint64_t>(f.step);
  setup.root = static_cast<int>(f.root);
  return setup;
}

}  // namespace probe
