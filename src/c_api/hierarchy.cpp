// src/c_api/hierarchy.cpp - conccl_hier_*: the C face of HierCommunicator
// (conccl/hierarchy.hpp). The caller's engine between nodes comes in as a
// table of callbacks (conccl_internode), wrapped here as an InterNode; the
// calls resolve the caller's buffers and stream as the NCCL-shaped calls do.
#include <string>

#include "c_api/c_objects.hpp"
#include "conccl/hierarchy.hpp"

using namespace conccl;
using namespace conccl::capi;

namespace {

// The caller's callbacks as an InterNode. Buffers become conccl_buffer
// structs with the address the caller's engine uses (compute_address: the
// CUDA pointer on nv) and, where one covers them, the caller's buffer id.
class CallbackInterNode final : public InterNode {
 public:
  CallbackInterNode(const conccl_internode& table, std::shared_ptr<conccl_device> device)
      : table_(table), device_(std::move(device)) {}
  void* user_stream = nullptr;  // the stream of the conccl_hier_* call under way

  Status all_gather(const Buffer& send, const Buffer& recv, uint64_t bytes, StreamOps*) override {
    const conccl_buffer s = to_c(send), r = to_c(recv);
    return result("all_gather", table_.all_gather(table_.user, &s, &r, bytes, user_stream));
  }
  Status all_to_all(const Buffer& send, const Buffer& recv, uint64_t bytes, StreamOps*) override {
    const conccl_buffer s = to_c(send), r = to_c(recv);
    return result("all_to_all", table_.all_to_all(table_.user, &s, &r, bytes, user_stream));
  }
  Status broadcast(const Buffer& send, const Buffer& recv, uint64_t bytes, int root_node, StreamOps*) override {
    const conccl_buffer s = to_c(send), r = to_c(recv);
    return result("broadcast", table_.broadcast(table_.user, &s, &r, bytes, root_node, user_stream));
  }

 private:
  conccl_buffer to_c(const Buffer& b) const {
    conccl_buffer c{};
    c.va = device_->dev ? device_->dev->compute_address(b.va) : b.va;
    c.host = b.host;
    c.size = b.size;
    c.gpu = b.gpu;
    c.kind = static_cast<int>(b.kind);
    std::lock_guard<std::mutex> lock(device_->buffers_mutex);
    for (const auto& [id, rec] : device_->buffers)
      if (b.va >= rec.cpp.va && b.va + b.size <= rec.cpp.va + rec.cpp.size) {
        c.id = id;
        c.kind = rec.c.kind;
        break;
      }
    return c;
  }
  // The engine's status passes through (a timeout stays a timeout); one that
  // is not a conccl_status, or says INTERNAL (ConCCL's own bugs), becomes
  // UNAVAILABLE: the engine failed, not ConCCL.
  static Status result(const char* what, conccl_status s) {
    if (s == CONCCL_OK) return Status();
    const int v = static_cast<int>(s);
    const char* name = conccl_status_name(s);
    const Code code = v > 0 && v < CONCCL_ERR_INTERNAL ? static_cast<Code>(v) : Code::unavailable;
    return error(code, std::string("the inter-node engine's ") + what + " callback returned " + std::to_string(v) +
                           " (" + (name ? name : "not a conccl_status") + "): its own error, see the engine's log");
  }
  conccl_internode table_;
  std::shared_ptr<conccl_device> device_;
};

}  // namespace

struct conccl_hier {
  std::weak_ptr<conccl_comm> comm;
  std::unique_ptr<CallbackInterNode> inter;
  std::unique_ptr<HierCommunicator> hier;  // reset when the communicator goes first
  std::mutex mu;                            // one call at a time (the callbacks' stream slot)
};

namespace conccl::capi {
using HierTable = HandleTable<conccl_hier, HandleKind::hier>;
}  // namespace conccl::capi

conccl_status conccl_hier_create(conccl_comm_t local, int node, int nnodes, const conccl_internode* inter,
                                 conccl_hier_t* hier) {
  return guard(__func__, [&] {
    CONCCL_C_REQUIRE(hier, "hier is NULL");
    *hier = nullptr;
    CONCCL_C_FIND(CommTable, c, local, "local");
    if (!c.comm) return comm_destroyed();
    CONCCL_C_REQUIRE(size_ok(inter, offsetof(conccl_internode, broadcast) + sizeof inter->broadcast),
                     "inter must point at a conccl_internode with struct_size = sizeof(conccl_internode)");
    CONCCL_C_REQUIRE(inter->all_gather && inter->all_to_all && inter->broadcast,
                     "inter must give all_gather, all_to_all and broadcast (every collective uses one of them)");
    auto h = std::make_shared<conccl_hier>();
    h->inter = std::make_unique<CallbackInterNode>(*inter, c.device);
    Result<std::unique_ptr<HierCommunicator>> made = HierCommunicator::create(*c.comm, node, nnodes, *h->inter);
    if (!made.ok()) return report(made.status().prefix(current_call()));
    h->hier = std::move(made).value();
    h->comm = *c_ref;
    std::weak_ptr<conccl_hier> weak = h;
    c.before_destroy.push_back([weak] {
      if (std::shared_ptr<conccl_hier> x = weak.lock()) {
        std::lock_guard<std::mutex> lock(x->mu);
        x->hier.reset();  // its scratch goes while the communicator and device still live
      }
    });
    *hier = handle_of<conccl_hier_t>(HierTable::get().add(h));
    return report(Status());
  });
}

conccl_status conccl_hier_destroy(conccl_hier_t hh) {
  return destroy_handle<HierTable>(__func__, hh, "hier", [](conccl_hier& h) {
    std::lock_guard<std::mutex> lock(h.mu);
    h.hier.reset();
    return Status();
  });
}

namespace {

int hier_int(conccl_hier_t hh, int fallback, int (HierCommunicator::*get)() const) {
  int v = fallback;
  (void)guard("conccl_hier_rank/size", [&] {
    CONCCL_C_FIND(HierTable, h, hh, "hier");
    std::lock_guard<std::mutex> lock(h.mu);
    if (!h.hier) return fail(CONCCL_ERR_INVALID_ARGUMENT, "hier: its local communicator was destroyed");
    v = ((*h.hier).*get)();
    return report(Status());
  });
  return v;
}

// The common part of every call: the handle, its communicator alive, the
// caller's buffers resolved, the stream looked up; then `run`.
template <typename F>
conccl_status hier_call(conccl_hier_t hh, const conccl_buffer* send, const conccl_buffer* recv, bool send_optional,
                        void* stream, F&& run) {
  CONCCL_C_FIND(HierTable, h, hh, "hier");
  const std::string call = current_call();
  std::lock_guard<std::mutex> lock(h.mu);
  std::shared_ptr<conccl_comm> c = h.comm.lock();
  if (!h.hier || !c || !c->comm)
    return fail(CONCCL_ERR_INVALID_ARGUMENT, call + ": its local communicator was destroyed (or its device closed): "
                                                    "make a new one and a new conccl_hier");
  Result<StreamOps*> ops = call_stream(*c, stream, call);
  if (!ops.ok()) return report(ops.status());
  CONCCL_C_REQUIRE(recv, "recv must point at this rank's receive buffer");
  CONCCL_C_REQUIRE(send || send_optional, "send must point at this rank's send buffer");
  Result<Buffer> r = resolve_buffer(*c->device, *recv, call + ": recv");
  if (!r.ok()) return report(r.status());
  Buffer s{};
  if (send) {
    Result<Buffer> got = resolve_buffer(*c->device, *send, call + ": send");
    if (!got.ok()) return report(got.status());
    s = *got;
  }
  h.inter->user_stream = stream;
  Status st = run(*h.hier, s, *r, *ops);
  h.inter->user_stream = nullptr;
  return report(st.ok() ? st : st.prefix(call));
}

Status reduction_enums(int dt, int op) {
  if (!valid_dtype(dt))
    return error(Code::invalid_argument, "dt " + std::to_string(dt) +
                                             " is not a conccl_datatype: use CONCCL_UINT8, CONCCL_INT32, "
                                             "CONCCL_INT64, CONCCL_FLOAT16, CONCCL_FLOAT32 or CONCCL_BFLOAT16");
  if (!valid_reduce_op(op))
    return error(Code::invalid_argument, "op " + std::to_string(op) +
                                             " is not a conccl_redop: use CONCCL_SUM, CONCCL_PROD, CONCCL_MAX, "
                                             "CONCCL_MIN or CONCCL_AVG");
  return Status();
}

}  // namespace

int conccl_hier_rank(conccl_hier_t hh) { return hier_int(hh, -1, &HierCommunicator::rank); }
int conccl_hier_size(conccl_hier_t hh) { return hier_int(hh, 0, &HierCommunicator::size); }

conccl_status conccl_hier_all_gather(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                     conccl_hier_t hh, void* stream) {
  return guard(__func__, [&] {
    return hier_call(hh, send, recv, false, stream, [&](HierCommunicator& h, const Buffer& s, const Buffer& r,
                                                        StreamOps* ops) { return h.all_gather(s, r, bytes, ops); });
  });
}

conccl_status conccl_hier_all_to_all(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                     conccl_hier_t hh, void* stream) {
  return guard(__func__, [&] {
    return hier_call(hh, send, recv, false, stream, [&](HierCommunicator& h, const Buffer& s, const Buffer& r,
                                                        StreamOps* ops) { return h.all_to_all(s, r, bytes, ops); });
  });
}

conccl_status conccl_hier_broadcast(const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, int root,
                                    conccl_hier_t hh, void* stream) {
  return guard(__func__, [&] {
    return hier_call(hh, send, recv, true, stream,
                     [&](HierCommunicator& h, const Buffer& s, const Buffer& r, StreamOps* ops) {
                       if (h.rank() == root && !s.size)
                         return error(Code::invalid_argument, "send must point at the root's send buffer");
                       return h.broadcast(s, r, bytes, root, ops);
                     });
  });
}

namespace {

// reduce_scatter and all_reduce: the enums checked, then the call.
template <typename Call>
conccl_status hier_reduction(const char* fn, const conccl_buffer* send, const conccl_buffer* recv, int dt, int op,
                             conccl_hier_t hh, void* stream, Call call) {
  return guard(fn, [&] {
    return hier_call(hh, send, recv, false, stream,
                     [&](HierCommunicator& h, const Buffer& s, const Buffer& r, StreamOps* ops) {
                       Status e = reduction_enums(dt, op);
                       return e.ok() ? call(h, s, r, DataType(dt), ReduceOp(op), ops) : e;
                     });
  });
}

}  // namespace

conccl_status conccl_hier_reduce_scatter(const conccl_buffer* send, const conccl_buffer* recv, size_t recvcount,
                                         conccl_datatype dt, conccl_redop op, conccl_hier_t hh, void* stream) {
  return hier_reduction(__func__, send, recv, enum_bits(dt), enum_bits(op), hh, stream,
                        [&](HierCommunicator& h, const Buffer& s, const Buffer& r, DataType t, ReduceOp o,
                            StreamOps* ops) { return h.reduce_scatter(s, r, recvcount, t, o, ops); });
}

conccl_status conccl_hier_all_reduce(const conccl_buffer* send, const conccl_buffer* recv, size_t count,
                                     conccl_datatype dt, conccl_redop op, conccl_hier_t hh, void* stream) {
  return hier_reduction(__func__, send, recv, enum_bits(dt), enum_bits(op), hh, stream,
                        [&](HierCommunicator& h, const Buffer& s, const Buffer& r, DataType t, ReduceOp o,
                            StreamOps* ops) { return h.all_reduce(s, r, count, t, o, ops); });
}
