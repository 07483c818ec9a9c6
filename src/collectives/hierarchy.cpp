// src/collectives/hierarchy.cpp - collectives across nodes: each node's
// Communicator for the steps inside it, the caller's InterNode between
// nodes (conccl/hierarchy.hpp has the algorithms; docs/multinode.md).
#include "conccl/hierarchy.hpp"

#include <string>

#include "conccl/staging.hpp"

namespace conccl {

namespace {

uint64_t next_pow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

std::string node_text(int node) { return "node " + std::to_string(node); }

// A reduction's element type and operator, checked before anything else
// (`call` names the reduction in the error).
Status check_reduction(const char* call, DataType dtype, ReduceOp op) {
  if (valid_dtype(int(dtype)) && valid_reduce_op(int(op))) return Status();
  return error(Code::invalid_argument,
               std::string("HierCommunicator: ") + call + ": unknown element type or operator");
}

}  // namespace

Result<std::unique_ptr<HierCommunicator>> HierCommunicator::create(Communicator& local, int node, int nodes,
                                                                   InterNode& inter, const Options& options) {
  if (local.rank() < 0)
    return error(Code::invalid_argument,
                 "HierCommunicator: the local communicator holds every rank of its node in this process; across "
                 "nodes each rank is its own process: make the local one with Communicator::create(device, rank, "
                 "nranks, id) (conccl_comm_create_rank)");
  if (nodes < 1 || node < 0 || node >= nodes)
    return error(Code::invalid_argument, "HierCommunicator: node " + std::to_string(node) + " of " +
                                             std::to_string(nodes) + ": give 0 <= node < nodes");
  return std::unique_ptr<HierCommunicator>(new HierCommunicator(local, node, nodes, inter, options));
}

HierCommunicator::HierCommunicator(Communicator& local, int node, int nodes, InterNode& inter,
                                   const Options& options)
    : local_(local),
      inter_(inter),
      node_(node),
      nodes_(nodes),
      local_rank_(local.rank()),
      local_size_(local.size()),
      options_(options) {}

HierCommunicator::~HierCommunicator() {
  // A call still running on a stream is the caller's to finish first (as
  // NCCL's ncclCommDestroy asks of its users). Each scratch leaves the local
  // communicator's windows before its memory is freed: a window left behind
  // would name freed memory, which a later allocation at the same address
  // would be taken for. One whose deregistration fails (a rank of the node
  // that does not destroy its own) is kept, not freed.
  Device& dev = local_.device();
  for (const Scratch& s : scratch_)
    if (local_.deregister_window(s.window).ok()) (void)dev.free_for_compute(s.mem);
  for (const Buffer& z : old_zeros_) (void)dev.free_for_compute(z);
  if (zeros_.size) (void)dev.free_for_compute(zeros_);
}

Result<Buffer> HierCommunicator::scratch(uint64_t bytes) {
  if (!scratch_.empty() && scratch_.back().mem.size >= bytes) return scratch_.back().mem;
  const uint64_t want = next_pow2(std::max<uint64_t>({bytes, options_.initial_scratch_bytes, 4096}));
  Result<Buffer> b = local_.device().alloc_for_compute(local_.gpu(local_rank_), want);
  if (!b.ok()) return b.status().prefix("HierCommunicator: scratch of " + std::to_string(want) + " bytes");
  Result<Window> w = local_.register_window(*b);
  if (!w.ok()) {
    (void)local_.device().free_for_compute(*b);
    return w.status().prefix("HierCommunicator: registering its scratch as a window");
  }
  scratch_.push_back(Scratch{*b, *w});
  return *b;
}

Status HierCommunicator::check_buffer(const char* what, const Buffer& b, uint64_t bytes) const {
  if (b.size < bytes)
    return error(Code::invalid_argument, std::string("HierCommunicator: ") + what + " holds " +
                                             std::to_string(b.size) + " bytes; the call needs " +
                                             std::to_string(bytes) + " on rank " + std::to_string(rank()));
  return Status();
}

Status HierCommunicator::local_call(CollOp op, const Buffer& send, const Buffer& recv, uint64_t bytes, int root,
                                    StreamOps* stream) {
  CollectiveArgs a;
  a.op = op;
  a.bytes = bytes;
  a.root = root;
  // A broadcast's non-root ranks may give no send; with windows, one they
  // give says where the root's sits (the same offset on every rank).
  if (op != CollOp::broadcast || send.size || root == local_rank_) a.send = {send};
  a.recv = {recv};
  Status st = local_.call(a, stream);
  if (!st.ok()) return st.prefix("the " + std::string(coll_op_name(op)) + " inside " + node_text(node_));
  return st;
}

Status HierCommunicator::local_reduction(ReduceColl coll, const Buffer& send, const Buffer& recv, uint64_t count,
                                         DataType dtype, ReduceOp op, StreamOps* stream) {
  ReductionArgs a;
  a.coll = coll;
  a.dtype = dtype;
  a.op = op;
  a.count = count;
  a.send = {send};
  a.recv = {recv};
  Status st = local_.call_reduction(a, stream);
  if (!st.ok()) return st.prefix("the " + std::string(reduce_coll_name(coll)) + " inside " + node_text(node_));
  return st;
}

Status HierCommunicator::fold(const Buffer& in, const Buffer& out, uint64_t count, DataType dtype, ReduceOp op,
                              StreamOps* stream) {
  Device& dev = local_.device();
  const uint64_t es = dtype_size(dtype);
  DeviceReduceStep step;
  step.gpu = local_.gpu(local_rank_);
  step.dtype = dtype;
  step.op = op;
  step.count = count;
  for (int j = 0; j < nodes_; ++j) step.inputs.push_back(dev.compute_address(in.va + uint64_t(j) * count * es));
  if (op == ReduceOp::avg && size() > nodes_) {
    // The reduce step divides the sum of its inputs by their number: pad the
    // N node sums with zeros to n inputs, so that it divides by n once.
    if (zeros_.size < count * es) {
      if (zeros_.size) {
        old_zeros_.push_back(zeros_);  // a stream may still read it: freed at the end
        zeros_ = Buffer{};
      }
      Result<Buffer> z = dev.alloc_for_compute(step.gpu, next_pow2(std::max<uint64_t>(count * es, 4096)));
      if (!z.ok()) return z.status().prefix("HierCommunicator: AVG's zero inputs");
      Result<std::unique_ptr<Stager>> stager = Stager::create(dev, step.gpu, 4096);
      Status st = stager.ok() ? (*stager)->fill(*z, 0, Deadline::after_ms(60000)) : stager.status();
      if (!st.ok()) {
        (void)dev.free_for_compute(*z);
        return st.prefix("HierCommunicator: zeroing AVG's zero inputs");
      }
      zeros_ = *z;
    }
    for (int j = nodes_; j < size(); ++j) step.inputs.push_back(dev.compute_address(zeros_.va));
  }
  step.out = dev.compute_address(out.va);
  Status st = stream ? stream->reduce(step) : dev.reduce_now(step, Deadline::after_ms(60000));
  if (!st.ok()) return st.prefix("the reduction of the " + std::to_string(nodes_) + " nodes' partials");
  return st;
}

Status HierCommunicator::all_gather(const Buffer& send, const Buffer& recv, uint64_t bytes, StreamOps* stream) {
  if (bytes == 0) return Status();
  const uint64_t L = uint64_t(local_size_), block = L * bytes;
  Status st = check_buffer("send", send, bytes);
  if (st.ok()) st = check_buffer("recv", recv, uint64_t(size()) * bytes);
  if (!st.ok()) return st;
  // This node's ranks fill this node's block of recv (node-major numbering),
  // then the blocks go between the nodes in place.
  const Buffer mine = recv.slice(uint64_t(node_) * block, block);
  st = local_call(CollOp::all_gather, send, mine, bytes, 0, stream);
  if (!st.ok() || nodes_ == 1) return st;
  st = inter_.all_gather(mine, recv, block, stream);
  return st.ok() ? st : st.prefix("the inter-node all-gather");
}

Status HierCommunicator::all_to_all(const Buffer& send, const Buffer& recv, uint64_t bytes, StreamOps* stream) {
  if (bytes == 0) return Status();
  const uint64_t L = uint64_t(local_size_), n = uint64_t(size()), block = L * bytes;
  Status st = check_buffer("send", send, n * bytes);
  if (st.ok()) st = check_buffer("recv", recv, n * bytes);
  if (!st.ok()) return st;
  if (nodes_ == 1) return local_call(CollOp::all_to_all, send, recv, bytes, 0, stream);
  Result<Buffer> tmp = scratch(n * bytes);
  if (!tmp.ok()) return tmp.status();
  // Per destination node j: send's block j ([local rank][bytes]) to the
  // node's ranks, so that tmp's block j holds, from every rank of this node,
  // what it sends to (j, this local rank). Then block j goes to node j.
  for (int j = 0; j < nodes_; ++j) {
    st = local_call(CollOp::all_to_all, send.slice(uint64_t(j) * block, block), tmp->slice(uint64_t(j) * block, block),
                    bytes, 0, stream);
    if (!st.ok()) return st;
  }
  st = inter_.all_to_all(tmp->slice(0, n * bytes), recv, block, stream);
  return st.ok() ? st : st.prefix("the inter-node all-to-all");
}

Status HierCommunicator::broadcast(const Buffer& send, const Buffer& recv, uint64_t bytes, int root,
                                   StreamOps* stream) {
  if (root < 0 || root >= size())
    return error(Code::invalid_argument, "HierCommunicator: broadcast root " + std::to_string(root) + " of " +
                                             std::to_string(size()) + " ranks");
  if (bytes == 0) return Status();
  const int root_node = root / local_size_, root_local = root % local_size_;
  Status st = check_buffer("recv", recv, bytes);
  if (st.ok() && root == rank()) st = check_buffer("send", send, bytes);
  if (!st.ok()) return st;
  if (nodes_ > 1 && local_rank_ == root_local) {
    st = inter_.broadcast(send, recv, bytes, root_node, stream);
    if (!st.ok()) return st.prefix("the inter-node broadcast");
  }
  // Every node's rank `root_local` now holds the data in its recv.
  return local_call(CollOp::broadcast, nodes_ == 1 ? send : recv, recv, bytes, root_local, stream);
}

Status HierCommunicator::reduce_scatter(const Buffer& send, const Buffer& recv, uint64_t count, DataType dtype,
                                        ReduceOp op, StreamOps* stream) {
  CONCCL_RETURN_IF_ERROR(check_reduction("reduce_scatter", dtype, op));
  if (count == 0) return Status();
  const uint64_t es = dtype_size(dtype), L = uint64_t(local_size_), N = uint64_t(nodes_), k = count * es;
  Status st = check_buffer("send", send, N * L * k);
  if (st.ok()) st = check_buffer("recv", recv, k);
  if (!st.ok()) return st;
  if (nodes_ == 1) return local_reduction(ReduceColl::reduce_scatter, send, recv, count, dtype, op, stream);
  const ReduceOp inside = op == ReduceOp::avg ? ReduceOp::sum : op;
  Result<Buffer> tmp = scratch(2 * N * k);
  if (!tmp.ok()) return tmp.status();
  const Buffer part = tmp->slice(0, N * k), got = tmp->slice(N * k, N * k);
  // part[j]: this node's partial for rank (j, this local rank).
  for (uint64_t j = 0; j < N; ++j) {
    st = local_reduction(ReduceColl::reduce_scatter, send.slice(j * L * k, L * k), part.slice(j * k, k), count, dtype,
                         inside, stream);
    if (!st.ok()) return st;
  }
  st = inter_.all_to_all(part, got, k, stream);  // got[j]: node j's partial for this rank
  if (!st.ok()) return st.prefix("the inter-node all-to-all");
  return fold(got, recv, count, dtype, op, stream);
}

Status HierCommunicator::all_reduce(const Buffer& send, const Buffer& recv, uint64_t count, DataType dtype,
                                    ReduceOp op, StreamOps* stream) {
  CONCCL_RETURN_IF_ERROR(check_reduction("all_reduce", dtype, op));
  if (count == 0) return Status();
  const uint64_t es = dtype_size(dtype), L = uint64_t(local_size_), N = uint64_t(nodes_), n = N * L;
  Status st = check_buffer("send", send, count * es);
  if (st.ok()) st = check_buffer("recv", recv, count * es);
  if (!st.ok()) return st;
  if (nodes_ == 1) return local_reduction(ReduceColl::all_reduce, send, recv, count, dtype, op, stream);
  const ReduceOp inside = op == ReduceOp::avg ? ReduceOp::sum : op;
  if (count % n != 0) {
    // Each node's result, every node's gathered, reduced in node order.
    Result<Buffer> tmp = scratch((1 + N) * count * es);
    if (!tmp.ok()) return tmp.status();
    const Buffer part = tmp->slice(0, count * es), all = tmp->slice(count * es, N * count * es);
    st = local_reduction(ReduceColl::all_reduce, send, part, count, dtype, inside, stream);
    if (st.ok()) {
      st = inter_.all_gather(part, all, count * es, stream);
      if (!st.ok()) return st.prefix("the inter-node all-gather");
    }
    return st.ok() ? fold(all, recv, count, dtype, op, stream) : st;
  }
  // Local rank i's share (count / L elements, s) reduced over the node; of
  // it, this node's piece (s / N, t) reduced over the nodes; the pieces
  // gathered back across the nodes, then the shares inside the node.
  const uint64_t s = count / L, t = s / N;
  Result<Buffer> tmp = scratch((2 * s + t) * es);
  if (!tmp.ok()) return tmp.status();
  const Buffer share = tmp->slice(0, s * es), got = tmp->slice(s * es, s * es), mine = tmp->slice(2 * s * es, t * es);
  st = local_reduction(ReduceColl::reduce_scatter, send, share, s, dtype, inside, stream);
  if (!st.ok()) return st;
  st = inter_.all_to_all(share, got, t * es, stream);
  if (!st.ok()) return st.prefix("the inter-node all-to-all");
  st = fold(got, mine, t, dtype, op, stream);
  if (!st.ok()) return st;
  st = inter_.all_gather(mine, share, t * es, stream);
  if (!st.ok()) return st.prefix("the inter-node all-gather");
  return local_call(CollOp::all_gather, share, recv, s * es, 0, stream);
}

}  // namespace conccl
