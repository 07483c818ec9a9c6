// src/collectives/plan.cpp - launching and waiting for compiled collectives.
#include <algorithm>
#include <string>
#include <atomic>

#include "collectives/builder.hpp"
#include "util/env.hpp"

namespace conccl {

Plan::~Plan() { detach(); }

void Plan::open_gates() {
  if (!comm_ || !launched_ || !trigger_.valid()) return;
  // Lists gated on a trigger nobody will release (prelaunched, or handed
  // to a stream that never stored) would block their queues on freed
  // memory: release them, so that the launch can finish.
  if (args_.prelaunch && trigger_.value() == 0) {
    trigger_.set(1);
    // Nobody stored the release, so no writer waits on this launch either.
    if (consumed_.valid()) consumed_.set(consumed_target_);
  }
  waiting_release_ = false;
}

void Plan::detach() {
  if (!comm_) return;
  open_gates();
  if (launched_ && trigger_.valid()) {
    // With a rank's process gone, the launch cannot finish: do not wait for
    // it. Across processes the wait is this rank's alone (a destructor makes
    // no collective call): its signals are then kept, not given back.
    if (running() && comm_->check_peers("destroying a plan").ok()) {
      if (comm_->boot_) synced_ = true;  // makes wait() skip its barrier
      (void)wait(Deadline::after(std::chrono::seconds(10)));
      if (comm_->boot_) synced_ = false;
    }
  }
  if (stamps_.size) (void)comm_->device().free(stamps_);
  stamps_ = Buffer{};
  // Signal memory from the communicator's pool goes back only when no engine
  // can still write it; a launch stranded by a gone rank keeps its slots.
  // Across processes, only after a launch every rank waited for.
  if (!launched_ || (synced_ && !running()))
    for (const auto& [va, bytes] : pool_slots_) comm_->pool_give(va, bytes);
  pool_slots_.clear();
  {
    std::lock_guard<std::mutex> lk(comm_->plans_mu_);
    comm_->plans_.erase(this);
  }
  // Nothing of the device or the communicator is kept: a detached plan may
  // outlive both.
  arrive_.clear();
  ready_.clear();
  sent_.clear();
  trigger_va_.clear();
  trigger_ = Signal();
  consumed_ = Signal();
  lists_.clear();
  groups_.clear();  // their queues are the communicator's
  expected_.clear();
  sent_expected_.clear();
  stamp_va_.clear();
  launched_ = false;
  waiting_release_ = false;
  synced_ = true;
  comm_ = nullptr;
}

Status Plan::check_attached(const char* call) const {
  if (comm_) return Status();
  return error(Code::invalid_argument, std::string(coll_op_name(args_.op)) + " plan: " + call +
                                           " after its Communicator was destroyed (the plan was detached then); "
                                           "make a new plan on a live communicator");
}

const Signal& Plan::at_or_invalid(const std::vector<Signal>& v, int i) {
  static const Signal kNone;
  return i >= 0 && static_cast<size_t>(i) < v.size() ? v[static_cast<size_t>(i)] : kNone;
}

uint64_t Plan::at_or_zero(const std::vector<uint64_t>& v, int i) {
  return i >= 0 && static_cast<size_t>(i) < v.size() ? v[static_cast<size_t>(i)] : 0;
}

uint64_t Plan::finish_timestamp(size_t list) const {
  if (!comm_ || list >= lists_.size() || list >= stamp_va_.size() || !comm_->local(lists_[list].rank)) return 0;
  void* p = comm_->device().host_pointer(stamp_va_[list] + comm_->caps().timestamp_offset, 8);
  if (!p) return 0;
  return std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(p)).load(std::memory_order_acquire);
}

bool Plan::running() const {
  if (!launched_ || !comm_) return false;
  if (consumed_.valid() && consumed_.value() < consumed_target_) return true;
  for (size_t r = 0; r < arrive_.size(); ++r)
    if (comm_->local(static_cast<int>(r)) && arrive_[r].value() < expected_[r]) return true;
  // Every packet of the launch consumed, not only the arrivals seen: a list
  // may still have signal packets in flight after a rank's last arrival.
  for (const PlanList& l : lists_)
    if (l.queue && l.queue->completed() < l.span.end) return true;
  return false;
}

template <typename Fn>
Status Plan::wait_watching(Fn fn, Deadline deadline, const std::string& doing) {
  if (comm_->rank() < 0) return fn(deadline);
  // Ranks in separate processes: wait in slices, and between them check that
  // every other rank's process is still there (its lists feed ours).
  constexpr auto kSlice = std::chrono::milliseconds(100);
  while (true) {
    const Deadline slice = deadline.remaining() < kSlice ? deadline : Deadline::after(kSlice);
    Status st = fn(slice);
    if (st.ok() || st.code() != Code::timeout) return st;
    CONCCL_RETURN_IF_ERROR(comm_->check_peers(doing));
    if (deadline.expired()) return st;
  }
}

Status Plan::submit_all(Deadline deadline) {
  if (running())
    return error(Code::busy, std::string(coll_op_name(args_.op)) +
                                 " plan launched while its previous launch is still running; wait() for it first");
  // Ranks in separate processes: every rank's previous launch is over (wait()
  // ends with a barrier; end_launch_known_done() has the caller's word), so
  // no list still reads the signals reset here; and no rank's lists run
  // before every rank has reset and is ready to receive: a barrier after the
  // reset.
  const std::string step = std::string("launch ") + coll_op_name(args_.op);
  if (comm_->boot_ && launched_ && !synced_)
    return error(Code::invalid_argument, "relaunch of a plan whose last launch was not wait()ed for: across processes "
                                         "every rank waits for every launch");
  if (comm_->boot_) synced_ = false;
  // Every launch counts from zero: reset before anything is queued (each
  // process its own rank's signals), then, across processes, the barrier.
  reset_local_signals();
  if (comm_->boot_)
    CONCCL_RETURN_IF_ERROR(comm_->boot_->barrier(step + ": signals reset", deadline).prefix("launching " + std::string(coll_op_name(args_.op))));
  launched_ = true;
  return submit_lists(deadline, "launch");
}

namespace {
// CONCCL_JOIN_LISTS=0: one submission per list, as before (an A/B knob, read once).
bool join_lists() {
  static const bool on = !util::env_is("CONCCL_JOIN_LISTS", "0");
  return on;
}
}  // namespace

Status Plan::submit_lists(Deadline deadline, const std::string& what, std::vector<std::pair<Queue*, uint64_t>>* held) {
  if (groups_.empty()) {
    for (size_t i = 0; i < lists_.size(); ++i) {
      Queue* q = lists_[i].queue;
      if (!q) continue;  // another process's rank
      auto g = std::find_if(groups_.begin(), groups_.end(), [&](const QueueGroup& x) { return x.queue == q; });
      if (g == groups_.end()) g = groups_.insert(groups_.end(), QueueGroup{q, {}, q->command_buffer()});
      g->lists.push_back(i);
    }
  }
  size_t submitted = 0;
  auto stopped = [&](Status st, const PlanList& l) {
    return st.prefix(what + " stopped after " + std::to_string(submitted) + " of " + std::to_string(lists_.size()) +
                     " command lists were submitted (rank " + std::to_string(l.rank) + " engine " +
                     std::to_string(l.engine) + "); the plan is running partially: wait() or destroy it");
  };
  for (QueueGroup& g : groups_) {
    // Joined when there is more than one and they fit one submission;
    // otherwise one by one.
    bool joined = g.lists.size() > 1 && join_lists();
    if (joined) {
      g.joined.clear();
      for (size_t i : g.lists) joined = joined && g.joined.append(lists_[i].cb).ok();
    }
    auto put = [&](const CommandBuffer& cb, QueueSpan* span) {
      if (!held) return g.queue->submit(cb, deadline, span);
      Status st = g.queue->submit_held(cb, deadline, span);
      if (st.ok()) held->emplace_back(g.queue, span->end);
      return st;
    };
    if (joined) {
      QueueSpan span;
      if (Status st = put(g.joined, &span); !st.ok()) return stopped(st, lists_[g.lists[0]]);
      for (size_t i : g.lists) lists_[i].span = span;
      submitted += g.lists.size();
      continue;
    }
    for (size_t i : g.lists) {
      PlanList& l = lists_[i];
      if (Status st = put(l.cb, &l.span); !st.ok()) return stopped(st, l);
      ++submitted;
    }
  }
  return Status();
}

void Plan::reset_local_signals() {
  for (size_t r = 0; r < arrive_.size(); ++r)
    if (comm_->local(static_cast<int>(r))) {
      arrive_[r].set(0);
      ready_[r].set(0);
      if (sent_[r].valid()) sent_[r].set(0);
    }
  if (trigger_.valid()) trigger_.set(0);
}

Status Plan::end_launch_known_done() {
  CONCCL_RETURN_IF_ERROR(check_attached("end_launch_known_done()"));
  if (!comm_->boot_)
    return error(Code::invalid_argument, "end_launch_known_done() is for ranks in separate processes; use wait()");
  if (!launched_ || synced_) return error(Code::invalid_argument, "end_launch_known_done() without a launch to end");
  if (running())
    return error(Code::busy, std::string(coll_op_name(args_.op)) +
                                 ": end_launch_known_done() while the launch still runs here; wait_here() first");
  synced_ = true;
  return Status();
}

Status Plan::launch(Deadline deadline) {
  CONCCL_RETURN_IF_ERROR(check_attached("launch()"));
  if (waiting_release_)
    return error(Code::busy, "plan is prelaunched and waits for release()");
  CONCCL_RETURN_IF_ERROR(submit_all(deadline));
  if (args_.prelaunch && trigger_.valid()) trigger_.set(1);
  return Status();
}

Status Plan::prelaunch(Deadline deadline) {
  CONCCL_RETURN_IF_ERROR(check_attached("prelaunch()"));
  if (!args_.prelaunch)
    return error(Code::invalid_argument, "plan was compiled without prelaunch; set CollectiveArgs::prelaunch");
  if (waiting_release_) return error(Code::busy, "plan is already prelaunched; release() it first");
  CONCCL_RETURN_IF_ERROR(submit_all(deadline));
  waiting_release_ = true;
  return Status();
}

Status Plan::release() {
  CONCCL_RETURN_IF_ERROR(check_attached("release()"));
  if (!waiting_release_) return error(Code::invalid_argument, "release() without prelaunch()");
  trigger_.set(1);
  waiting_release_ = false;
  return Status();
}

Result<std::vector<SignalStore>> Plan::release_by_stores() {
  CONCCL_RETURN_IF_ERROR(check_attached("release_by_stores()"));
  if (!waiting_release_)
    return error(Code::invalid_argument, "release_by_stores() without prelaunch(): prelaunch the plan first");
  if (!consumed_.valid()) {
    Result<Signal> c = Signal::create(comm_->device());
    if (!c.ok()) return c.status().prefix("release_by_stores");
    consumed_ = std::move(c).value();
  }
  waiting_release_ = false;
  ++consumed_target_;
  return trigger_.stores_for(1);
}

SignalStore Plan::consumed_store() const {
  if (!consumed_.valid()) return SignalStore{};
  return consumed_.stores_for(consumed_target_).back();
}

Status Plan::enqueue(StreamOps& stream, Deadline deadline) { return enqueue_split(stream, deadline, nullptr); }

Status Plan::enqueue_split(StreamOps& stream, Deadline deadline, std::vector<StreamOps::Op>* deferred) {
  CONCCL_RETURN_IF_ERROR(check_attached("enqueue()"));
  if (stream.capturing())
    return error(Code::invalid_argument, "enqueue: a plan's launch cannot be captured into a graph (its signals "
                                         "reset at every launch); capture Communicator::call through windows instead");
  CONCCL_RETURN_IF_ERROR(stream.ready_to_order().prefix("enqueue"));
  if (!args_.prelaunch)
    return error(Code::invalid_argument, "enqueue() needs a plan compiled with CollectiveArgs::prelaunch");
  CONCCL_RETURN_IF_ERROR(prelaunch(deadline));
  // The release, then one wait per rank that receives, all on the stream.
  // If the stream refuses one of them, the host releases the plan instead,
  // so that it does not stay gated forever.
  Result<std::vector<SignalStore>> stores = release_by_stores();
  if (!stores.ok()) return stores.status();
  std::vector<StreamOps::Op> ops, later;
  for (const SignalStore& w : *stores) ops.push_back({false, w.va, w.value});
  // Handed back (deferred) or queued now, after the release.
  std::vector<StreamOps::Op>& waits = deferred ? later : ops;
  // Across processes, this process's ranks only (the others' streams wait
  // for theirs), and also for its rank's own lists to end, since they read
  // its send buffer while writing into the other ranks; in one process every
  // rank's arrivals already say that.
  const bool across = comm_->rank() >= 0;
  const bool poll = stream_waits_may_poll(*comm_, args_);
  for (size_t r = 0; r < arrive_.size(); ++r) {
    if (!comm_->local(static_cast<int>(r))) continue;
    if (expected_[r] > 0) waits.push_back({true, arrive_[r].va(), expected_[r], poll});
    if (across && sent_expected_[r] > 0) waits.push_back({true, sent_[r].va(), sent_expected_[r], poll});
  }
  // Past its waits, the stream says so: until then the plan counts as
  // running and is not relaunched (a relaunch resets the arrivals the stream
  // may still be about to wait on).
  const SignalStore done = consumed_store();
  waits.push_back({false, done.va, done.value});
  Status st = stream.batch(ops);
  if (!st.ok()) {
    // Whatever the stream did not take: stores from the host, so that the
    // plan completes and the queues do not stay blocked (engines acquire by
    // polling memory: no wake-up is needed).
    for (const std::vector<StreamOps::Op>* v : {&ops, &later})
      for (const StreamOps::Op& op : *v) {
        if (op.wait) continue;
        if (auto* p = static_cast<uint64_t*>(comm_->device().host_pointer(op.va, 8)))
          std::atomic_ref<uint64_t>(*p).store(op.value, std::memory_order_release);
      }
    return st.prefix("enqueue (the plan was released from the host instead)");
  }
  if (deferred) *deferred = std::move(later);
  return Status();
}

Status Plan::wait(Deadline deadline) {
  CONCCL_RETURN_IF_ERROR(check_attached("wait()"));
  CONCCL_RETURN_IF_ERROR(wait_here(deadline));
  // Across processes: done only when every rank's lists are done, since
  // they read this rank's signals (the trigger) until they end; after this
  // the signals may be reset (relaunch) or given back (destruction).
  if (comm_->boot_ && !synced_) {
    CONCCL_RETURN_IF_ERROR(comm_->boot_->barrier(std::string(coll_op_name(args_.op)) + ": launch over", deadline)
                               .prefix(std::string("waiting for ") + coll_op_name(args_.op)));
    synced_ = true;
  }
  return Status();
}

Status Plan::wait_here(Deadline deadline) {
  CONCCL_RETURN_IF_ERROR(check_attached("wait()"));
  if (!launched_) return error(Code::invalid_argument, "wait() before launch()");
  if (waiting_release_)
    return error(Code::invalid_argument, "the plan is prelaunched and never released: call release() before wait()");
  const std::string doing = std::string("waiting for ") + coll_op_name(args_.op);
  for (size_t r = 0; r < arrive_.size(); ++r) {
    if (expected_[r] == 0 || !comm_->local(static_cast<int>(r))) continue;
    // Sleep on the progress of a list that writes into r (one of ours),
    // unless a list of another process writes into r too: its arrivals
    // raise no interrupt here, so the wait polls with short naps instead.
    const QueueSpan* span = nullptr;
    bool remote_writer = false;
    for (const PlanList& l : lists_)
      for (int d : l.writes_to)
        if (static_cast<size_t>(d) == r) {
          if (l.queue) span = &l.span;
          else remote_writer = true;
        }
    if (remote_writer) span = nullptr;
    Status st = wait_watching([&](Deadline d) { return arrive_[r].wait(expected_[r], d, span); }, deadline, doing);
    if (st.ok()) continue;
    if (st.code() != Code::timeout) return st;
    // Name the list that is stuck: the first whose queue has not consumed it.
    for (const PlanList& l : lists_) {
      if (!l.queue || l.queue->completed() >= l.span.end) continue;
      const int d = l.writes_to.empty() ? static_cast<int>(r) : l.writes_to.front();
      return error(st.code(), std::string(coll_op_name(args_.op)) + " (" + variant_name(variant_) + "): rank " +
                                  std::to_string(r) + " has " + std::to_string(arrive_[r].value()) + " of " +
                                  std::to_string(expected_[r]) + " arrivals; stuck list: rank " +
                                  std::to_string(l.rank) + " engine " + std::to_string(l.engine) + ": " +
                                  diagnose_hang(l.span, arrive_[static_cast<size_t>(d)], expected_[static_cast<size_t>(d)]));
    }
    return st.prefix(std::string(coll_op_name(args_.op)) + ": rank " + std::to_string(r));
  }
  // Then every list to its end, so no packet of this launch is still to run
  // when the caller relaunches, or frees the plan and its signals.
  for (const PlanList& l : lists_)
    if (l.queue)
      CONCCL_RETURN_IF_ERROR(wait_watching([&](Deadline d) { return l.queue->wait_done(d, l.span.end); }, deadline, doing));
  // And the writer the release was handed to past its waits on this launch.
  if (consumed_.valid() && consumed_.value() < consumed_target_) {
    Status st = consumed_.wait(consumed_target_, deadline);
    if (!st.ok())
      return st.prefix(std::string(coll_op_name(args_.op)) +
                       ": the data is in place, but the writer the release was handed to (a compute stream) has not "
                       "made the plan's consumed_store() after its waits");
  }
  return Status();
}

std::string Plan::describe() const {
  std::string out = std::string(coll_op_name(args_.op)) + " variant " + variant_name(variant_) + ", " +
                    std::to_string(args_.bytes) + " bytes per rank, " + std::to_string(lists_.size()) +
                    " command lists" + (comm_ ? "" : " (detached: its Communicator was destroyed)") + "\n";
  for (const PlanList& l : lists_) {
    out += "rank " + std::to_string(l.rank) + " engine " + std::to_string(l.engine) + " (" +
           std::to_string(l.cb.packet_count()) + " packets):\n";
    const std::string text = l.cb.disassemble();
    size_t at = 0;
    while (at < text.size()) {
      const size_t nl = text.find('\n', at);
      out += "  " + text.substr(at, nl == std::string::npos ? std::string::npos : nl - at) + "\n";
      if (nl == std::string::npos) break;
      at = nl + 1;
    }
  }
  return out;
}

}  // namespace conccl
