// src/collectives/rank_placement.hpp - where each rank's GPU is in this
// process when a multi-process communicator forms: every rank says which GPU
// it is on (by its node-wide id, GpuInfo::node_gpu_id) and which GPUs its
// process sees, and each process places the ranks in its own view
// (docs/multiprocess.md, "Ranks that cannot see each other's GPUs").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/wire.hpp"
#include "conccl/status.hpp"
#include "conccl/topology.hpp"

namespace conccl {

// A GPU's kind as the planner uses it: its instruction set and engines.
std::string gpu_digest(const GpuInfo& g);
// The node as a rank sees it: what must be the same in every process where
// the GPUs have no node-wide ids.
std::string node_digest(const Topology& t);

// What a rank says of itself when the communicator forms.
struct RankHello {
  int gpu = 0, slot = -1;
  uint64_t node_gpu_id = 0;   // its GPU, node-wide (0: not known)
  std::string kind;           // gpu_digest of its GPU
  std::vector<uint64_t> sees;  // node_gpu_id of every GPU its process sees
  std::string node, options;  // node_digest, options_digest
};

void put_hello(wire::Writer& w, const Topology& t, int gpu, int slot, const std::string& options);
RankHello get_hello(wire::Reader& r);

// Where each rank's GPU is in this process (Communicator::gpu) and the keys
// that tell physical GPUs apart (Communicator::same_gpu).
struct RankGpus {
  std::vector<int> gpus;
  std::vector<uint64_t> keys;
  bool node_ids = false;  // keys are node-wide GPU ids
};

// Every rank's GPU placed in this process's view. With node-wide ids, each
// rank's GPU is found here by its id; where some rank cannot see another's
// GPU (per-rank isolation), every rank plans on its own GPU as the others'
// stand-in - the same plan in every process, as no process knows the links
// between GPUs it cannot see - which needs GPUs of one kind. Without ids,
// the ranks must see the same node and number it alike.
Result<RankGpus> place_ranks(const Topology& t, int me, const std::vector<RankHello>& hellos);

}  // namespace conccl
