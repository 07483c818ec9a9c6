// src/c_api/nccl_shaped.cpp - conccl_all_gather, conccl_all_to_all and
// conccl_broadcast: plan, launch and wait in one call, with the plans
// cached per communicator by their arguments, in one process or with one
// process per rank (docs/multiprocess.md).
#include <algorithm>
#include <cstdlib>

#include "c_api/c_objects.hpp"

using namespace conccl;
using namespace conccl::capi;

void conccl_comm::touch(const Key& key) {
  cache[key].last_use = ++uses;
  while (cache.size() > kMaxCachedCalls) {
    auto oldest = cache.end();
    for (auto it = cache.begin(); it != cache.end(); ++it) {
      if (it->first == key) continue;
      bool busy = false;
      for (const auto& p : it->second.plans) busy = busy || p->running() || is_in_flight(p.get());
      if (!busy && (oldest == cache.end() || it->second.last_use < oldest->second.last_use)) oldest = it;
    }
    if (oldest == cache.end()) return;  // every other slot is running: trim later
    cache.erase(oldest);
  }
}

size_t conccl_comm::cached_plans() const {
  size_t n = 0;
  for (const auto& [k, slot] : cache) n += slot.plans.size();
  return n;
}

bool conccl_comm::is_in_flight(const Plan* p) const {
  return std::find(in_flight.begin(), in_flight.end(), p) != in_flight.end();
}

void conccl_comm::destroy() {
  in_flight.clear();
  cache.clear();  // plans before their communicator (each waits for its own launch)
  comm.reset();
  stream_ops.clear();
  for (uint64_t w : windows) (void)WindowTable::get().take(w);
  windows.clear();
}

namespace conccl::capi {
namespace {

// A buffer as part of a cache key: its C id (a new allocation at the same
// address has another), address and size (a sub-range is another call).
void key_of(const conccl_buffer& b, std::vector<uint64_t>* key) {
  key->push_back(b.id);
  key->push_back(b.va);
  key->push_back(b.size);
}

// The NCCL-shaped call on a communicator of one process per rank: this
// rank's buffers alone, as ncclAllGather takes them. Every rank makes the
// same calls in the same order (as NCCL requires), and whatever involves the
// other ranks is decided from one exchange per call (the vote), so that
// every rank takes the same steps:
//   - each rank says how many of the oldest launches not yet ended for all
//     (the communicator's in_flight, the same sequence on every rank) have
//     ended here, and the generations (joint plannings) of its cached plans
//     for this call;
//   - the launches that ended on every rank are over: each rank ends them
//     without wait()'s barrier (Plan::end_launch_known_done);
//   - if the cached plans differ between ranks (a rank's buffers changed: a
//     caching allocator handing out another address, say), every rank waits
//     for all launches in flight and plans again, rather than one rank
//     planning (a collective call) while the others launch;
//   - else every rank picks the same plan: one not in flight, else a new one
//     while the call has fewer than kInFlight, else the oldest in flight
//     once waited for.
// A call in steady state costs two exchanges: the vote, and the launch's
// barrier after the signals' reset. Without a stream it returns
// when this rank's data is in place (the other ranks' end is learnt at the
// next call). On a stream it returns at once: the lists are queued gated on
// every rank's trigger, which each rank's stream stores once its earlier work
// is done, and each stream waits for its rank's arrivals and its rank's
// lists' end (nv::enqueue_on_stream); at most kInFlight calls are in flight.
conccl_status nccl_shaped_per_process(CollOp op, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes,
                                      int root, conccl_comm* c, void* stream) {
  const std::string name = coll_op_name(op);
  const std::string call = current_call();
  CONCCL_C_REQUIRE(recv, "recv must point at this rank's receive buffer");
  const bool root_only = op == CollOp::broadcast;
  const bool is_root = c->comm->rank() == root;
  if (!send && !(root_only && !is_root))
    return fail(CONCCL_ERR_INVALID_ARGUMENT, call + ": send must point at this rank's send buffer" +
                                                 (root_only ? " (on the root; other ranks may pass NULL)" : ""));
  const Deadline dl = after(c->timeout_ms);
  CollectiveArgs a;
  a.op = op;
  a.bytes = bytes;
  a.root = root;
  a.prelaunch = stream != nullptr;
  std::vector<uint64_t> sk, rk;
  conccl_device& d = *c->device;
  if (send && (!root_only || is_root)) {
    Result<Buffer> b = resolve_buffer(d, send[0], call + ": send");
    if (!b.ok()) return report(b.status());
    a.send.push_back(*b);
    key_of(send[0], &sk);
  }
  Result<Buffer> rb = resolve_buffer(d, recv[0], call + ": recv");
  if (!rb.ok()) return report(rb.status());
  a.recv.push_back(*rb);
  key_of(recv[0], &rk);
  // Buffers inside windows: no message between the ranks (Communicator::call).
  // A non-root rank's send of a broadcast is kept there: it tells where the
  // root's sits (the same offset on every rank). The StreamOps of a CUDA
  // stream is made once per communicator and stream, then looked up.
  {
    bool in_windows = true;
    for (const Buffer& b : a.send) in_windows = in_windows && c->comm->window_of(b, b.size).valid();
    for (const Buffer& b : a.recv) in_windows = in_windows && c->comm->window_of(b, b.size).valid();
    Buffer root_place;
    if (in_windows && send && root_only && !is_root) {
      Result<Buffer> b = resolve_buffer(d, send[0], call + ": send");
      if (b.ok() && c->comm->window_of(*b, b->size).valid()) root_place = *b;
    }
    if (in_windows) {
      StreamOps* ops = nullptr;
      if (stream) {
        auto it = c->stream_ops.find(stream);
        if (it == c->stream_ops.end()) {
          Result<std::unique_ptr<StreamOps>> made = nv::stream_ops(*d.dev, stream);
          if (!made.ok()) return report(made.status().prefix(call));
          it = c->stream_ops.emplace(stream, std::move(made).value()).first;
        }
        ops = it->second.get();
      }
      if (root_place.size) a.send.push_back(root_place);
      return report(c->comm->call(a, ops).prefix(call));
    }
  }
  const conccl_comm::Key key{static_cast<int>(op), bytes, root, sk, rk, stream != nullptr};
  conccl_comm::Slot& slot = c->cache[key];
  size_t ended = 0;
  while (ended < c->in_flight.size() && !c->in_flight[ended]->running()) ++ended;
  std::string gens;
  for (const auto& p : slot.plans) gens += " " + std::to_string(slot.generation[p.get()]);
  Result<std::vector<Bootstrap::Message>> votes =
      c->comm->bootstrap()->exchange("NCCL-shaped " + name, std::to_string(ended) + gens, {}, dl);
  if (!votes.ok()) return report(votes.status().prefix(name));
  size_t all_ended = ended;
  bool same = true;
  for (const Bootstrap::Message& m : *votes) {
    const size_t sp = std::min(m.data.find(' '), m.data.size());
    all_ended = std::min<size_t>(all_ended, std::strtoull(m.data.c_str(), nullptr, 10));
    same = same && m.data.substr(sp) == gens;
  }
  for (size_t i = 0; i < all_ended; ++i) {
    CONCCL_RETURN_IF_ERROR_C(c->in_flight.front()->end_launch_known_done().prefix(name));
    c->in_flight.pop_front();
  }
  // Waits (with wait()'s barrier) for the oldest launch in flight, as every
  // rank does at this point.
  auto wait_oldest = [&]() -> Status {
    CONCCL_RETURN_IF_ERROR(c->in_flight.front()->wait(dl).prefix(name + ": waiting for an earlier call"));
    c->in_flight.pop_front();
    return Status();
  };
  Plan* plan = nullptr;
  if (same) {
    for (const auto& p : slot.plans)
      if (!plan && !c->is_in_flight(p.get())) plan = p.get();
    if (!plan && slot.plans.size() >= conccl_comm::kInFlight) {
      // All in flight: the oldest of them, once it and the launches before
      // it have been waited for.
      Plan* oldest = nullptr;
      for (Plan* f : c->in_flight)
        for (const auto& p : slot.plans)
          if (!oldest && f == p.get()) oldest = f;
      while (c->in_flight.front() != oldest) CONCCL_RETURN_IF_ERROR_C(wait_oldest());
      CONCCL_RETURN_IF_ERROR_C(wait_oldest());
      plan = oldest;
    }
  }
  if (!plan) {
    // Planning is collective, so every rank plans now. Where the ranks'
    // cached plans differ, they are given up, after every launch in flight.
    if (!same) {
      while (!c->in_flight.empty()) CONCCL_RETURN_IF_ERROR_C(wait_oldest());
      slot.plans.clear();
      slot.generation.clear();
    }
    Result<std::unique_ptr<Plan>> p = c->comm->plan(a);
    if (!p.ok()) {
      if (slot.plans.empty()) c->cache.erase(key);
      return report(p.status());
    }
    plan = p->get();
    slot.generation[plan] = ++c->generations;
    slot.plans.push_back(std::move(p).value());
  }
  c->touch(key);
  while (c->in_flight.size() >= conccl_comm::kInFlight) CONCCL_RETURN_IF_ERROR_C(wait_oldest());
  Status st;
  if (stream) {
    st = nv::enqueue_on_stream(*d.dev, *plan, stream, dl);
  } else {
    st = plan->launch(dl);
    if (st.ok()) st = plan->wait_here(dl);  // this rank's data in place; the others' end is voted next call
  }
  if (plan->unwaited()) c->in_flight.push_back(plan);  // its lists were submitted: every rank ends it alike
  return report(st);
}

}  // namespace

conccl_status nccl_shaped(CollOp op, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, int root,
                          conccl_comm_t comm, void* stream) {
  CONCCL_C_FIND(CommTable, cref, comm, "comm");
  conccl_comm* c = &cref;
  conccl_device& d = *c->device;
  if (!c->comm) return fail(CONCCL_ERR_INVALID_ARGUMENT, std::string(current_call()) + ": the communicator was destroyed");
  if (stream && !nv::native(*d.dev))
    return fail(CONCCL_ERR_UNAVAILABLE,
                std::string(current_call()) + ": ordering on a stream needs the nv backend (a CUDA stream); on " +
                    "this backend pass stream NULL (the call returns when the data is in place), or order the work " +
                    "yourself with conccl_plan_release_by_stores and conccl_plan_completion");
  if (c->comm->rank() >= 0) return nccl_shaped_per_process(op, send, recv, bytes, root, c, stream);
  CONCCL_C_REQUIRE(send && recv, "send and recv must point at one buffer per rank");
  const int n = c->comm->size();
  const bool root_only = op == CollOp::broadcast;
  CollectiveArgs a;
  a.op = op;
  a.bytes = bytes;
  a.root = root;
  a.prelaunch = stream != nullptr;
  std::vector<uint64_t> sk, rk;
  if (root_only) {  // the root's buffer alone: Communicator::plan places it (and checks the root)
    Result<Buffer> b = resolve_buffer(d, send[0], std::string(current_call()) + ": root_send");
    if (!b.ok()) return report(b.status());
    a.send.push_back(*b);
    key_of(send[0], &sk);
  } else {
    for (int r = 0; r < n; ++r) {
      Result<Buffer> b = resolve_buffer(d, send[r], std::string(current_call()) + ": send[" + std::to_string(r) + "]");
      if (!b.ok()) return report(b.status());
      a.send.push_back(*b);
      key_of(send[r], &sk);
    }
  }
  for (int r = 0; r < n; ++r) {
    Result<Buffer> b = resolve_buffer(d, recv[r], std::string(current_call()) + ": recv[" + std::to_string(r) + "]");
    if (!b.ok()) return report(b.status());
    a.recv.push_back(*b);
    key_of(recv[r], &rk);
  }
  const conccl_comm::Key key{static_cast<int>(op), bytes, root, sk, rk, stream != nullptr};
  c->touch(key);
  conccl_comm::Slot& slot = c->cache[key];
  const Deadline dl = after(c->timeout_ms);
  // The plan to use: a free one, else a new one (up to kInFlight on a
  // stream), else the next in turn once its launch is done.
  Plan* plan = nullptr;
  for (auto& p : slot.plans)
    if (!p->running()) {
      plan = p.get();
      break;
    }
  if (!plan && (slot.plans.empty() || (stream && slot.plans.size() < conccl_comm::kInFlight))) {
    Result<std::unique_ptr<Plan>> p = c->comm->plan(a);
    if (!p.ok()) {
      if (slot.plans.empty()) c->cache.erase(key);
      return report(p.status());
    }
    slot.plans.push_back(std::move(p).value());
    plan = slot.plans.back().get();
  }
  if (!plan) {
    plan = slot.plans[slot.next++ % slot.plans.size()].get();
    CONCCL_RETURN_IF_ERROR_C(plan->wait(dl));
  }
  if (stream) return report(nv::enqueue_on_stream(*d.dev, *plan, stream, dl));
  Status st = plan->launch(dl);
  if (st.ok()) st = plan->wait(dl);
  return report(st);
}

}  // namespace conccl::capi
