// src/c_api/reductions.cpp - conccl_reduce_scatter, conccl_all_reduce and
// conccl_reduce: NCCL-shaped wrappers of Communicator::call_reduction
// (src/collectives/reduce_calls.cpp), which moves the data through
// Communicator::call (windows, the plan cache, the stream protocol) and runs
// the reduce steps. Here the C arguments only become a ReductionArgs: the
// enums checked, the buffers resolved, the stream looked up as the other
// NCCL-shaped calls do (nccl_shaped.cpp).
#include <limits>
#include <string>

#include "c_api/c_objects.hpp"
#include "conccl/reduce.hpp"

using namespace conccl;
using namespace conccl::capi;

namespace {

conccl_status reduction(ReduceColl coll, const conccl_buffer* send, const conccl_buffer* recv, size_t count, int dt,
                        int op, int root, conccl_comm_t comm, void* stream) {
  CONCCL_C_FIND(CommTable, c, comm, "comm");
  const std::string call = current_call();
  if (!c.comm) return fail(CONCCL_ERR_INVALID_ARGUMENT, call + ": the communicator was destroyed");
  // The enums arrive as whatever int the caller put there: refused here with
  // the C names, before the C++ layer would name its own.
  CONCCL_C_REQUIRE(valid_dtype(dt), "dt " + std::to_string(dt) +
                                        " is not a conccl_datatype: use CONCCL_UINT8 (1), CONCCL_INT32 (2), "
                                        "CONCCL_INT64 (4), CONCCL_FLOAT16 (6), CONCCL_FLOAT32 (7) or CONCCL_BFLOAT16 "
                                        "(9); NCCL's int8, uint32, uint64 and float64 have no reduction here");
  CONCCL_C_REQUIRE(valid_reduce_op(op), "op " + std::to_string(op) +
                                            " is not a conccl_redop: use CONCCL_SUM (0), CONCCL_PROD (1), CONCCL_MAX "
                                            "(2), CONCCL_MIN (3) or CONCCL_AVG (4)");
  const char* count_name = coll == ReduceColl::reduce_scatter ? "recvcount" : "count";
  CONCCL_C_REQUIRE(count > 0, std::string(count_name) + " must be > 0 elements (NCCL takes 0 as a call that does "
                                                        "nothing: skip the call instead)");
  const int n = c.comm->size();
  const DataType type = static_cast<DataType>(dt);
  // The C++ layer multiplies count by the rank count and the element size:
  // a count whose bytes do not fit 64 bits would wrap past its size checks.
  const uint64_t per_rank = coll == ReduceColl::reduce_scatter ? static_cast<uint64_t>(n) : 1;
  if (count > std::numeric_limits<uint64_t>::max() / (per_rank * dtype_size(type)))
    return fail(CONCCL_ERR_OUT_OF_RANGE, call + ": " + count_name + " " + std::to_string(count) + " elements of " +
                                             dtype_name(type) + " do not fit 64-bit byte counts: pass the element "
                                             "count, not bytes or a bit pattern");
  // A stream the backend cannot order on is refused before any buffer is
  // looked at, on every rank alike, so that the ranks' next call still pairs.
  Result<StreamOps*> ops = call_stream(c, stream, call);
  if (!ops.ok()) return report(ops.status());

  ReductionArgs a;
  a.coll = coll;
  a.dtype = type;
  a.op = static_cast<ReduceOp>(op);
  a.count = count;
  a.root = root;
  conccl_device& d = *c.device;
  auto add = [&](std::vector<Buffer>* to, const conccl_buffer& b, const std::string& what, bool allow_empty) {
    Result<Buffer> r = resolve_buffer(d, b, call + ": " + what, allow_empty);
    if (!r.ok()) return r.status();
    to->push_back(*r);
    return Status();
  };
  const bool is_reduce = coll == ReduceColl::reduce;
  if (c.comm->rank() >= 0) {
    // This rank's buffers alone, as ncclAllReduce takes them; a rank other
    // than the root of a reduce receives nothing and may pass no recv.
    const bool recv_optional = is_reduce && c.comm->rank() != root;
    CONCCL_C_REQUIRE(send, "send must point at this rank's send buffer");
    CONCCL_C_REQUIRE(recv || recv_optional,
                     std::string("recv must point at this rank's receive buffer") +
                         (is_reduce ? " (on the root; other ranks may pass NULL)" : ""));
    CONCCL_RETURN_IF_ERROR_C(add(&a.send, send[0], "send", false));
    if (recv) CONCCL_RETURN_IF_ERROR_C(add(&a.recv, recv[0], "recv", false));
  } else {
    CONCCL_C_REQUIRE(send && recv, "send and recv must point at arrays of one buffer per rank (" + std::to_string(n) +
                                       ")" + (is_reduce ? "; recv[r] of a rank other than root may be a struct of zeros"
                                                        : ""));
    for (int r = 0; r < n; ++r) {
      const std::string at = "[" + std::to_string(r) + "]";
      CONCCL_RETURN_IF_ERROR_C(add(&a.send, send[r], "send" + at, false));
      CONCCL_RETURN_IF_ERROR_C(add(&a.recv, recv[r], "recv" + at, is_reduce && r != root));
    }
  }
  return report(c.comm->call_reduction(a, *ops).prefix(call));
}

}  // namespace

extern "C" {

conccl_status conccl_reduce_scatter(const conccl_buffer* send, const conccl_buffer* recv, size_t recvcount,
                                    conccl_datatype dt, conccl_redop op, conccl_comm_t comm, void* stream) {
  return guard(__func__, [&] {
    return reduction(ReduceColl::reduce_scatter, send, recv, recvcount, enum_bits(dt), enum_bits(op), 0, comm,
                     stream);
  });
}

conccl_status conccl_all_reduce(const conccl_buffer* send, const conccl_buffer* recv, size_t count, conccl_datatype dt,
                                conccl_redop op, conccl_comm_t comm, void* stream) {
  return guard(__func__, [&] {
    return reduction(ReduceColl::all_reduce, send, recv, count, enum_bits(dt), enum_bits(op), 0, comm, stream);
  });
}

conccl_status conccl_reduce(const conccl_buffer* send, const conccl_buffer* recv, size_t count, conccl_datatype dt,
                            conccl_redop op, int root, conccl_comm_t comm, void* stream) {
  return guard(__func__, [&] {
    return reduction(ReduceColl::reduce, send, recv, count, enum_bits(dt), enum_bits(op), root, comm, stream);
  });
}

}  // extern "C"
