// src/collectives/reduce_calls.hpp - what a communicator keeps for its
// reductions (Communicator::call_reduction, reduce_calls.cpp): the staging
// buffer of each of its ranks in this process, registered as a window
// across processes.
#pragma once

#include <vector>

#include "conccl/collectives.hpp"

namespace conccl {

struct ReduceState {
  explicit ReduceState(Communicator& c) : comm(c) {}
  ~ReduceState();  // frees the staging (its window goes with the communicator's calls)
  Communicator& comm;
  std::vector<Buffer> staging;  // per rank; this process's ranks only
  Window window;                // across processes: the staging, registered

  // Allocates (and across processes registers) the staging on first use.
  // Collective like every call: each rank makes its first reduction at the
  // same point of the call sequence.
  Status ensure();
  // A move of a reduction: Communicator::call, its stream waits handed back
  // in *deferred where it is a stream-ordered window call (call_impl).
  Status move(const CollectiveArgs& m, StreamOps* stream, std::vector<StreamOps::Op>* deferred) {
    return comm.call_impl(m, stream, deferred);
  }
};

}  // namespace conccl
