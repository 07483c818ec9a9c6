// src/c_api/nccl_shaped.cpp - conccl_all_gather, conccl_all_to_all,
// conccl_broadcast, conccl_gather and conccl_scatter: NCCL-shaped wrappers of Communicator::call, which
// plans, caches, orders and (across processes) keeps the ranks in step
// (src/collectives/cached_calls.hpp, calls.hpp; docs/multiprocess.md).
#include "c_api/c_objects.hpp"

using namespace conccl;
using namespace conccl::capi;

void conccl_comm::destroy() {
  for (auto& f : before_destroy) f();
  before_destroy.clear();
  comm.reset();  // its cached plans first, each waiting for its own launch
  stream_ops.clear();
  for (uint64_t w : windows) (void)WindowTable::get().take(w);
  windows.clear();
}

namespace conccl::capi {

Result<StreamOps*> call_stream(conccl_comm& c, void* stream, const std::string& call) {
  if (!stream) return static_cast<StreamOps*>(nullptr);
  if (!nv::native(*c.device->dev))
    return error(Code::unavailable,
                 call + ": ordering on a stream needs the nv backend (a CUDA stream); on " +
                     "this backend pass stream NULL (the call returns when the data is in place), or order the work " +
                     "yourself with conccl_plan_release_by_stores and conccl_plan_completion");
  // Made once per communicator and stream: the adapter is reused by every
  // later call on the stream.
  auto it = c.stream_ops.find(stream);
  if (it == c.stream_ops.end()) {
    Result<std::unique_ptr<StreamOps>> made = nv::stream_ops(*c.device->dev, stream);
    if (!made.ok()) return made.status().prefix(call);
    it = c.stream_ops.emplace(stream, std::move(made).value()).first;
  }
  return it->second.get();
}

conccl_status nccl_shaped(CollOp op, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, int root,
                          conccl_comm_t comm, void* stream) {
  CONCCL_C_FIND(CommTable, cref, comm, "comm");
  conccl_comm* c = &cref;
  conccl_device& d = *c->device;
  const std::string call = current_call();
  if (!c->comm) return fail(CONCCL_ERR_INVALID_ARGUMENT, call + ": the communicator was destroyed");
  // A stream the backend cannot order on is refused before any buffer is
  // looked at, on every rank alike, so that the ranks' next call still pairs.
  Result<StreamOps*> ops = call_stream(*c, stream, call);
  if (!ops.ok()) return report(ops.status());
  const bool per_process = c->comm->rank() >= 0;
  // Ops where one side is the root's buffer alone: broadcast's and
  // scatter's send, gather's recv.
  const bool root_send = op == CollOp::broadcast || op == CollOp::scatter;
  const bool root_recv = op == CollOp::gather;
  CollectiveArgs a;
  a.op = op;
  a.bytes = bytes;
  a.root = root;
  auto add = [&](std::vector<Buffer>* to, const conccl_buffer& b, const std::string& what) -> Status {
    Result<Buffer> r = resolve_buffer(d, b, call + ": " + what);
    if (!r.ok()) return r.status();
    to->push_back(*r);
    return Status();
  };
  if (per_process) {
    // This rank's buffers alone, as ncclAllGather takes them. A non-root
    // rank's send of a broadcast is passed on when given: with windows it
    // tells where the root's sits (the same offset on every rank).
    const bool is_root = c->comm->rank() == root;
    if (!recv && !(root_recv && !is_root))
      return fail(CONCCL_ERR_INVALID_ARGUMENT, call + ": recv must point at this rank's receive buffer" +
                                                   (root_recv ? " (on the root; other ranks may pass NULL)" : ""));
    if (!send && !(root_send && !is_root))
      return fail(CONCCL_ERR_INVALID_ARGUMENT, call + ": send must point at this rank's send buffer" +
                                                   (root_send ? " (on the root; other ranks may pass NULL)" : ""));
    if (send) CONCCL_RETURN_IF_ERROR_C(add(&a.send, send[0], "send"));
    if (recv) CONCCL_RETURN_IF_ERROR_C(add(&a.recv, recv[0], "recv"));
  } else {
    CONCCL_C_REQUIRE(send && recv, "send and recv must point at one buffer per rank (the root's alone for " +
                                       std::string(root_recv ? "gather's recv" : "broadcast's and scatter's send") + ")");
    const int n = c->comm->size();
    if (root < 0 || root >= n)
      return fail(CONCCL_ERR_INVALID_ARGUMENT, call + ": root " + std::to_string(root) + " is not a rank of this " +
                                                   std::to_string(n) + "-rank communicator");
    if (root_send) {  // the root's buffer alone: Communicator::plan places it (and checks the root)
      CONCCL_RETURN_IF_ERROR_C(add(&a.send, send[0], "root_send"));
    } else {
      for (int r = 0; r < n; ++r) CONCCL_RETURN_IF_ERROR_C(add(&a.send, send[r], "send[" + std::to_string(r) + "]"));
    }
    if (root_recv) {  // the root's alone, in the root's place; no other rank's is written
      Result<Buffer> b = resolve_buffer(d, recv[0], call + ": root_recv");
      if (!b.ok()) return report(b.status());
      a.recv.assign(static_cast<size_t>(n), Buffer{});
      a.recv[static_cast<size_t>(root)] = *b;
    } else {
      for (int r = 0; r < n; ++r) CONCCL_RETURN_IF_ERROR_C(add(&a.recv, recv[r], "recv[" + std::to_string(r) + "]"));
    }
  }
  return report(c->comm->call(a, *ops).prefix(call));
}

}  // namespace conccl::capi
