// tools/sdma-probe/sweep_inplace.hpp - the in-place form of a collective
// (nccl-tests' in-place columns): each rank's source is part of its own
// destination buffer, so the library skips that transfer. allgather: rank
// r's send is recv[r] at r*chunk; broadcast: the root's send is its recv;
// gather: the root's send is recv[root] at root*chunk; scatter: the root's
// recv is send[root] at root*chunk. alltoall and p2p have none here
// (in-place all-to-all permutes its data on every launch).
#pragma once

#include <optional>
#include <vector>

#include "conccl/collectives.hpp"

namespace probe {

// A source region to fill with rank src_rank's data before launching in place.
struct InPlaceSource {
  int owner;          // rank whose buffer (and GPU's stager) holds it
  conccl::Buffer at;  // the region (a view into a destination buffer)
  int src_rank;       // whose data
  uint64_t src_off;   // at which offset of that rank's data
};

struct InPlace {
  conccl::CollectiveArgs args;        // with the send (or recv) views
  std::vector<InPlaceSource> sources;
  std::vector<bool> poison;           // per rank: fill recv[r] before (false: it is a source)
};

// `a` (out of place, a.bytes set) in place; nullopt for ops without one.
std::optional<InPlace> in_place_of(const conccl::CollectiveArgs& a, int n);

// Bytes [off, off + len) of b as a buffer of its own.
conccl::Buffer view_of(const conccl::Buffer& b, uint64_t off, uint64_t len);

}  // namespace probe
