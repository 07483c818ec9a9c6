// src/collectives/rank_placement.cpp - placing the ranks' GPUs
// (rank_placement.hpp).
#include "collectives/rank_placement.hpp"

#include <algorithm>

namespace conccl {

std::string gpu_digest(const GpuInfo& g) {
  std::string s = g.isa.name() + "[";
  for (const EngineInfo& e : g.engines) s += std::to_string(e.id) + ",";
  return s + "]";
}

std::string node_digest(const Topology& t) {
  std::string s = std::to_string(t.gpus.size()) + " GPUs:";
  for (const GpuInfo& g : t.gpus) s += " " + gpu_digest(g);
  return s;
}

void put_hello(wire::Writer& w, const Topology& t, int gpu, int slot, const std::string& options) {
  const GpuInfo& g = t.gpus[static_cast<size_t>(gpu)];
  w.put<int32_t>(gpu);
  w.put<int32_t>(slot);
  w.put<uint64_t>(g.node_gpu_id);
  w.put_string(gpu_digest(g));
  w.put<uint32_t>(static_cast<uint32_t>(t.gpus.size()));
  for (const GpuInfo& x : t.gpus) w.put<uint64_t>(x.node_gpu_id);
  w.put_string(node_digest(t));
  w.put_string(options);
}

RankHello get_hello(wire::Reader& r) {
  RankHello h;
  h.gpu = r.get<int32_t>();
  h.slot = r.get<int32_t>();
  h.node_gpu_id = r.get<uint64_t>();
  h.kind = r.get_string();
  h.sees.resize(std::min<uint32_t>(r.get<uint32_t>(), 4096));
  for (uint64_t& x : h.sees) x = r.get<uint64_t>();
  h.node = r.get_string();
  h.options = r.get_string();
  return h;
}

Result<RankGpus> place_ranks(const Topology& t, int me, const std::vector<RankHello>& hellos) {
  const int n = static_cast<int>(hellos.size());
  RankGpus out;
  out.node_ids = std::all_of(hellos.begin(), hellos.end(), [](const RankHello& h) { return h.node_gpu_id != 0; });
  if (!out.node_ids) {
    for (int r = 0; r < n; ++r) {
      if (hellos[static_cast<size_t>(r)].node != node_digest(t))
        return error(Code::invalid_argument,
                     "rank " + std::to_string(r) + " sees a different node (" + hellos[static_cast<size_t>(r)].node +
                         ") than rank " + std::to_string(me) + " (" + node_digest(t) +
                         "): open the same backend and preset in every process");
      out.gpus.push_back(hellos[static_cast<size_t>(r)].gpu);
      out.keys.push_back(static_cast<uint64_t>(hellos[static_cast<size_t>(r)].gpu));
    }
    return out;
  }
  int blind = -1, unseen = -1;  // a rank that does not see another's GPU
  for (int p = 0; p < n && blind < 0; ++p)
    for (int q = 0; q < n && blind < 0; ++q) {
      const std::vector<uint64_t>& sees = hellos[static_cast<size_t>(p)].sees;
      if (std::find(sees.begin(), sees.end(), hellos[static_cast<size_t>(q)].node_gpu_id) == sees.end()) {
        blind = p;
        unseen = q;
      }
    }
  const GpuInfo& own = t.gpus[static_cast<size_t>(hellos[static_cast<size_t>(me)].gpu)];
  for (int r = 0; r < n; ++r) {
    const RankHello& h = hellos[static_cast<size_t>(r)];
    const GpuInfo* seen = t.gpu_with_node_id(h.node_gpu_id);
    const int here = blind >= 0 ? own.index : seen ? seen->index : -1;
    if (here < 0 || gpu_digest(t.gpus[static_cast<size_t>(here)]) != h.kind) {
      const std::string theirs = "rank " + std::to_string(r) + "'s GPU (node-wide id " + std::to_string(h.node_gpu_id) +
                                 ") has " + h.kind;
      if (blind >= 0)
        return error(Code::invalid_argument,
                     theirs + " but rank " + std::to_string(me) + "'s has " + gpu_digest(own) + ", and rank " +
                         std::to_string(blind) + " does not see rank " + std::to_string(unseen) +
                         "'s GPU: ranks isolated from each other's GPUs (cgroups, Slurm, Kubernetes, --device) "
                         "need GPUs of one kind; open the same backend and preset in every process");
      return error(Code::invalid_argument, theirs + ", which rank " + std::to_string(me) + " sees as " +
                                               (here < 0 ? std::string("nothing") : gpu_digest(t.gpus[static_cast<size_t>(here)])) +
                                               ": open the same backend and preset in every process");
    }
    out.gpus.push_back(here);
    out.keys.push_back(h.node_gpu_id);
  }
  return out;
}

}  // namespace conccl
