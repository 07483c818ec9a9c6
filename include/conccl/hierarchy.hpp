// conccl/hierarchy.hpp - collectives across nodes: ConCCL's engines inside
// each node, the user's own engine between nodes (docs/multinode.md).
//
// ConCCL moves data inside one node. Across nodes the data goes through an
// engine built for that (NCCL, RCCL or UCX over InfiniBand/RoCE, gloo), which
// the caller owns and hands in as an InterNode. A HierCommunicator composes
// the two; ranks are numbered node-major, as torchrun numbers them:
//   global rank = node * L + local rank   (L ranks on every node)
// with one process per rank: `local` is this rank's communicator over its
// node's L ranks (Communicator::create with a rank), and the InterNode
// connects this rank with the ranks of the same local rank on every node
// (N of them, node order).
//
// What runs where (count, bytes per rank; n = N * L):
//   all_gather      local all-gather into this node's block of recv, then
//                   the inter-node all-gather of that block, in place
//   reduce_scatter  N local reduce-scatters (one per node's block of send)
//                   into scratch, an inter-node all-to-all of those node
//                   partials, and one reduce step over the N partials
//   all_reduce      local reduce-scatter, inter-node all-to-all and reduce
//                   step (this rank's share), inter-node all-gather, local
//                   all-gather; counts that do not divide by n: a local
//                   all-reduce, an inter-node all-gather of the node
//                   results and one reduce step
//   broadcast       the root's local rank broadcasts across nodes, then
//                   every node broadcasts from that local rank
//   all_to_all      N local all-to-alls (one per destination node) into
//                   scratch, then the inter-node all-to-all
// The inter-node engine only moves bytes; the reductions across nodes are
// ConCCL's reduce step over the node partials in node order, so every type
// and operator of conccl/reduce.hpp works whatever the engine, with one
// arithmetic: each node's partial reduced in local rank order (rounded to
// the element type), then the partials in node order; integers are exact as
// in one node, floats are rounded once per node. AVG sums and divides by n
// once, at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "conccl/collectives.hpp"
#include "conccl/reduce.hpp"

namespace conccl {

// The user's engine between nodes: collectives over this rank's inter-node
// group (the ranks of its local rank, one per node, in node order). Each
// call is collective over that group. Buffers are this rank's (device
// memory of `local`'s device: Buffer::va for engines, Buffer::host where the
// CPU sees it). `stream` is the stream the HierCommunicator call was given
// (null: return when the data is in place); an engine that cannot order on
// it returns an error.
class InterNode {
 public:
  virtual ~InterNode() = default;
  // recv gets every node's `bytes` of send, node j's at j * bytes. send may
  // be recv + node * bytes (in place, as NCCL allows).
  virtual Status all_gather(const Buffer& send, const Buffer& recv, uint64_t bytes, StreamOps* stream) = 0;
  // send and recv hold N slots of `bytes`: send's slot j goes to node j,
  // recv's slot j comes from node j. Never in place.
  virtual Status all_to_all(const Buffer& send, const Buffer& recv, uint64_t bytes, StreamOps* stream) = 0;
  // recv on every node gets `bytes` of the root node's send (send is read
  // on the root alone; the root may give send == recv).
  virtual Status broadcast(const Buffer& send, const Buffer& recv, uint64_t bytes, int root_node,
                           StreamOps* stream) = 0;
};

class HierCommunicator {
 public:
  struct Options {
    // Scratch memory per rank for reduce_scatter, all_reduce and all_to_all,
    // taken on first use and registered as a window of `local` (so the local
    // steps need no message between the ranks). A call whose scratch does
    // not fit grows it (to the next power of two), keeping the old scratch
    // until the communicator goes, since a stream may still be using it.
    uint64_t initial_scratch_bytes = 0;
  };
  // `node` of `nodes`; every rank of the job calls it with its own local
  // communicator and engine. Both must outlive the HierCommunicator, whose
  // destruction is collective over the node (every rank of it, as it
  // deregisters its scratch windows from `local`).
  static Result<std::unique_ptr<HierCommunicator>> create(Communicator& local, int node, int nodes,
                                                          InterNode& inter, const Options& options);
  static Result<std::unique_ptr<HierCommunicator>> create(Communicator& local, int node, int nodes,
                                                          InterNode& inter) {
    return create(local, node, nodes, inter, Options{});
  }
  ~HierCommunicator();

  int rank() const { return node_ * local_size_ + local_rank_; }
  int size() const { return nodes_ * local_size_; }
  int node() const { return node_; }
  int nodes() const { return nodes_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // NCCL's shapes, this rank's buffers (bytes and counts per rank, as
  // Communicator::call and call_reduction take them). Every rank makes the
  // same calls in the same order. `stream`: ordered on it, returning at once
  // (the InterNode gets the same stream); null: returns when done.
  Status all_gather(const Buffer& send, const Buffer& recv, uint64_t bytes, StreamOps* stream = nullptr);
  Status all_to_all(const Buffer& send, const Buffer& recv, uint64_t bytes, StreamOps* stream = nullptr);
  // root: a global rank; send is read on the root alone.
  Status broadcast(const Buffer& send, const Buffer& recv, uint64_t bytes, int root, StreamOps* stream = nullptr);
  Status reduce_scatter(const Buffer& send, const Buffer& recv, uint64_t count, DataType dtype, ReduceOp op,
                        StreamOps* stream = nullptr);
  Status all_reduce(const Buffer& send, const Buffer& recv, uint64_t count, DataType dtype, ReduceOp op,
                    StreamOps* stream = nullptr);

 private:
  HierCommunicator(Communicator& local, int node, int nodes, InterNode& inter, const Options& options);
  // This rank's scratch of at least `bytes`, zeros past `zero_from` not
  // promised (callers zero what they need).
  Result<Buffer> scratch(uint64_t bytes);
  // `count` elements of `dtype` of `in` (node order) reduced into `out`; AVG
  // over all n ranks (zero inputs pad the N node partials to n).
  Status fold(const Buffer& in, const Buffer& out, uint64_t count, DataType dtype, ReduceOp op, StreamOps* stream);
  Status local_call(CollOp op, const Buffer& send, const Buffer& recv, uint64_t bytes, int root, StreamOps* stream);
  Status local_reduction(ReduceColl coll, const Buffer& send, const Buffer& recv, uint64_t count, DataType dtype,
                         ReduceOp op, StreamOps* stream);
  Status check_buffer(const char* what, const Buffer& b, uint64_t bytes) const;

  Communicator& local_;
  InterNode& inter_;
  const int node_, nodes_, local_rank_, local_size_;
  Options options_;
  struct Scratch {
    Buffer mem;
    Window window;  // of `local`
  };
  std::vector<Scratch> scratch_;  // every scratch taken (the last is current), freed at the end
  Buffer zeros_{};                // AVG's padding inputs
  std::vector<Buffer> old_zeros_; // outgrown (a stream may still read them), freed at the end
};

}  // namespace conccl
