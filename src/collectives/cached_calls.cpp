// src/collectives/cached_calls.cpp - Communicator::call for buffers outside
// windows (cached_calls.hpp): plan once per distinct call, launch in turn.
#include "collectives/cached_calls.hpp"

#include <algorithm>
#include <cstdlib>

namespace conccl {

CachedCalls::~CachedCalls() {
  in_flight_.clear();
  cache_.clear();
}

size_t CachedCalls::cached_plans() const {
  size_t n = 0;
  for (const auto& [k, slot] : cache_) n += slot.plans.size();
  return n;
}

bool CachedCalls::is_in_flight(const Plan* p) const {
  return std::find(in_flight_.begin(), in_flight_.end(), p) != in_flight_.end();
}

CachedCalls::Key CachedCalls::key_of(const CollectiveArgs& a, bool on_stream) const {
  std::vector<uint64_t> buffers;
  auto add = [&](const std::vector<Buffer>& v) {
    buffers.push_back(v.size());
    for (const Buffer& b : v) {
      buffers.push_back(b.va);
      buffers.push_back(b.size);
      buffers.push_back(b.id);
      buffers.push_back(b.va ? comm.device().allocation_serial(b.va) : 0);
    }
  };
  add(a.send);
  add(a.recv);
  buffers.push_back(a.send_stride);
  return Key{static_cast<int>(a.op), static_cast<int>(a.variant), a.bytes, a.root, a.peer, on_stream,
             std::move(buffers)};
}

void CachedCalls::touch(const Key& key) {
  cache_[key].last_use = ++uses_;
  while (cache_.size() > kMaxCachedCalls) {
    auto oldest = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->first == key) continue;
      bool busy = false;
      for (const auto& p : it->second.plans) busy = busy || p->running() || is_in_flight(p.get());
      if (!busy && (oldest == cache_.end() || it->second.last_use < oldest->second.last_use)) oldest = it;
    }
    if (oldest == cache_.end()) return;  // every other set is running: trim later
    cache_.erase(oldest);
  }
}

Status CachedCalls::run(const CollectiveArgs& given, StreamOps* stream, Deadline deadline,
                        std::vector<StreamOps::Op>* deferred) {
  calls++;
  if (deferred) deferred->clear();
  CollectiveArgs a = given;
  a.prelaunch = stream != nullptr;  // a stream releases the lists (Plan::enqueue)
  // A non-root rank's send of a root-only op names, for windows, where the
  // root's buffer sits; planning across processes takes none from it.
  const bool root_only = a.op == CollOp::broadcast || a.op == CollOp::scatter || a.op == CollOp::p2p;
  if (comm.rank() >= 0 && root_only && comm.rank() != a.root) a.send.clear();
  // Likewise a non-root rank's recv of a gather.
  if (comm.rank() >= 0 && a.op == CollOp::gather && comm.rank() != a.root) a.recv.clear();
  return comm.rank() >= 0 ? run_per_process(a, stream, deadline) : run_one_process(a, stream, deadline, deferred);
}

// Every rank in this process: a free plan, else a new one (up to kInFlight
// on a stream), else the next in turn once its launch is done.
Status CachedCalls::run_one_process(const CollectiveArgs& a, StreamOps* stream, Deadline dl,
                                    std::vector<StreamOps::Op>* deferred) {
  const Key key = key_of(a, stream != nullptr);
  touch(key);
  Slot& slot = cache_[key];
  Plan* plan = nullptr;
  for (auto& p : slot.plans)
    if (!p->running()) {
      plan = p.get();
      break;
    }
  if (!plan && (slot.plans.empty() || (stream && slot.plans.size() < kInFlight))) {
    Result<std::unique_ptr<Plan>> p = comm.plan(a);
    if (!p.ok()) {
      if (slot.plans.empty()) cache_.erase(key);
      return p.status();
    }
    slot.plans.push_back(std::move(p).value());
    plan = slot.plans.back().get();
  }
  if (!plan) {
    plan = slot.plans[slot.next++ % slot.plans.size()].get();
    CONCCL_RETURN_IF_ERROR(plan->wait(dl));
  }
  if (stream) return plan->enqueue_split(*stream, dl, deferred);
  CONCCL_RETURN_IF_ERROR(plan->launch(dl));
  return plan->wait(dl);
}

Status CachedCalls::wait_oldest(Deadline dl, const std::string& name) {
  CONCCL_RETURN_IF_ERROR(in_flight_.front()->wait(dl).prefix(name + ": waiting for an earlier call"));
  in_flight_.pop_front();
  return Status();
}

// One process per rank: this rank's buffers alone. Every rank makes the
// same calls in the same order (as NCCL requires), and whatever involves the
// other ranks is decided from one exchange per call (the vote), so that
// every rank takes the same steps:
//   - each rank says how many of the oldest launches not yet ended for all
//     (in_flight_, the same sequence on every rank) have ended here, and the
//     generations (joint plannings) of its cached plans for this call;
//   - the launches that ended on every rank are over: each rank ends them
//     without wait()'s barrier (Plan::end_launch_known_done);
//   - if the cached plans differ between ranks (a rank's buffers changed: a
//     caching allocator handing out another address, say), every rank waits
//     for all launches in flight and plans again, rather than one rank
//     planning (a collective call) while the others launch;
//   - else every rank picks the same plan: one not in flight, else a new one
//     while the call has fewer than kInFlight, else the oldest in flight
//     once waited for.
// Without a stream the call returns when this rank's data is in place (the
// other ranks' end is learnt at the next call). On a stream it returns at
// once: the lists are queued gated on every rank's trigger, which each
// rank's stream stores once its earlier work is done, and each stream waits
// for its rank's arrivals and its rank's lists' end (Plan::enqueue).
Status CachedCalls::run_per_process(const CollectiveArgs& a, StreamOps* stream, Deadline dl) {
  const std::string name = coll_op_name(a.op);
  const Key key = key_of(a, stream != nullptr);
  Slot& slot = cache_[key];
  size_t ended = 0;
  while (ended < in_flight_.size() && !in_flight_[ended]->running()) ++ended;
  std::string gens;
  for (const auto& p : slot.plans) gens += " " + std::to_string(slot.generation[p.get()]);
  Result<std::vector<Bootstrap::Message>> votes =
      comm.bootstrap()->exchange("call " + name + " (buffers outside windows)", std::to_string(ended) + gens, {}, dl);
  if (!votes.ok()) return votes.status().prefix(name);
  size_t all_ended = ended;
  bool same = true;
  for (const Bootstrap::Message& m : *votes) {
    const size_t sp = std::min(m.data.find(' '), m.data.size());
    all_ended = std::min<size_t>(all_ended, std::strtoull(m.data.c_str(), nullptr, 10));
    same = same && m.data.substr(sp) == gens;
  }
  for (size_t i = 0; i < all_ended; ++i) {
    CONCCL_RETURN_IF_ERROR(in_flight_.front()->end_launch_known_done().prefix(name));
    in_flight_.pop_front();
  }
  Plan* plan = nullptr;
  if (same) {
    for (const auto& p : slot.plans)
      if (!plan && !is_in_flight(p.get())) plan = p.get();
    if (!plan && slot.plans.size() >= kInFlight) {
      // All in flight: the oldest of them, once it and the launches before
      // it have been waited for.
      Plan* oldest = nullptr;
      for (Plan* f : in_flight_)
        for (const auto& p : slot.plans)
          if (!oldest && f == p.get()) oldest = f;
      while (in_flight_.front() != oldest) CONCCL_RETURN_IF_ERROR(wait_oldest(dl, name));
      CONCCL_RETURN_IF_ERROR(wait_oldest(dl, name));
      plan = oldest;
    }
  }
  if (!plan) {
    // Planning is collective, so every rank plans now. Where the ranks'
    // cached plans differ, they are given up, after every launch in flight.
    if (!same) {
      while (!in_flight_.empty()) CONCCL_RETURN_IF_ERROR(wait_oldest(dl, name));
      slot.plans.clear();
      slot.generation.clear();
    }
    Result<std::unique_ptr<Plan>> p = comm.plan(a);
    if (!p.ok()) {
      if (slot.plans.empty()) cache_.erase(key);
      return p.status();
    }
    plan = p->get();
    slot.generation[plan] = ++generations_;
    slot.plans.push_back(std::move(p).value());
  }
  touch(key);
  while (in_flight_.size() >= kInFlight) CONCCL_RETURN_IF_ERROR(wait_oldest(dl, name));
  Status st;
  if (stream) {
    st = plan->enqueue(*stream, dl);
  } else {
    st = plan->launch(dl);
    if (st.ok()) st = plan->wait_here(dl);  // this rank's data in place; the others' end is voted next call
  }
  if (plan->unwaited()) in_flight_.push_back(plan);  // its lists were submitted: every rank ends it alike
  return st;
}

}  // namespace conccl
