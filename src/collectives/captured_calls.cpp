// src/collectives/captured_calls.cpp - window calls recorded into a graph
// (docs/graphs.md): Communicator::call on a capturing stream.
//
// A captured call is compiled once, at capture, on counters of its own (a
// capture slot of every rank's pool, calls.hpp) and on queues of its own, so
// that its replays never wait behind ordinary calls' lists nor those behind
// its. The stream records two steps:
//   1. a host function that starts replay r: it rewrites the lists' waits
//      for r (every rank's slot "posted" >= r, other waits by the counts of
//      earlier replays), submits them, submits a closing list that waits for
//      this rank's arrivals and its lists' end and then adds 1 to the
//      capture's end signal (reset to 0 first), and posts r. It runs when the
//      stream's earlier work is done, so nothing is written into this rank
//      before the stream said so, and it returns at once.
//   2. a wait for the end signal >= 1: a fixed value, as a graph's memory
//      operation node needs.
// Replays are numbered per slot on every rank alike (every rank replays its
// graphs as the others do, as every rank makes the same calls), counters
// only grow, nothing is reset between replays but the end signal, which
// only this rank's stream waits on. Between replays no list is queued: a
// graph destroyed between replays leaves nothing behind on the engines.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

#include "collectives/calls.hpp"

namespace conccl {

struct CapturedCall : std::enable_shared_from_this<CapturedCall> {
  std::shared_ptr<CaptureLink> link;
  uint64_t id = 0;
  size_t slot = 0;
  std::string name;
  CallDesc desc;
  std::map<std::pair<int, int>, std::unique_ptr<Queue>> queues;  // its lists' (made while compiling)
  std::unique_ptr<Plan> plan;
  std::unique_ptr<Queue> closer;  // the closing list's
  Signal done;                           // its end: what the stream waits for
  Signal posted_me, arrive_me, sent_me;  // this rank's slot counters

  ~CapturedCall() {
    std::lock_guard<std::recursive_mutex> lk(link->mu);
    if (CallState* st = link->state) {  // freed by the communicator's calling thread (reap_captures)
      std::lock_guard<std::mutex> rl(st->retired_mu);
      st->retired.push_back(CallState::RetiredCapture{std::move(plan), std::move(queues), std::move(closer),
                                                      std::move(done), slot});
      return;
    }
    plan.reset();  // detached with its communicator: nothing of it is shared now
  }
};

namespace {

void replay_entry(void* arg);

// The closing list of a replay: it waits until every (counter, value) of
// `until` is reached, then adds 1 to `done`, reset to 0 first. *span says
// where it sits in `q`.
Status close_replay(Queue& q, const std::vector<std::pair<uint64_t, uint64_t>>& until, Signal& done, Deadline dl,
                    QueueSpan* span = nullptr) {
  CommandBuffer close(q.isa());
  for (const auto& [va, value] : until) CONCCL_RETURN_IF_ERROR(close.wait_ge(va, value));
  CONCCL_RETURN_IF_ERROR(close.signal_add(done.va(), 1));
  done.set(0);
  return q.submit(close, dl, span);
}

}  // namespace

uint64_t* CallState::capture_desc(int q, size_t slot) const {
  const uint64_t va = comm.pool_va_[size_t(q)] + kCaptureArea + slot * kCaptureSlotBytes + kCaptureDesc;
  return static_cast<uint64_t*>(comm.device().host_pointer(va, kCallDescBytes));
}

void CallState::reap_captures() {
  std::vector<RetiredCapture> gone;
  {
    std::lock_guard<std::mutex> rl(retired_mu);
    gone.swap(retired);
  }
  for (RetiredCapture& r : gone) {
    r.plan.reset();  // before its queues
    if (r.slot < capture_slots.size()) capture_slots[r.slot].busy = false;
  }
}

Status CallState::capture(const CollectiveArgs& a, StreamOps& stream) {
  const std::string what = std::string("call ") + coll_op_name(a.op) + " (captured)";
  reap_captures();
  {
    std::lock_guard<std::mutex> lk(mu);
    if (!failed.ok()) return failed;
  }
  Result<PreparedCall> prepared = prepare(a);
  if (!prepared.ok())
    return prepared.status().prefix("capturing a call records it through windows (one process per rank, every "
                                    "buffer in a registered window); this one cannot be recorded");
  if (capture_slots.empty()) {
    capture_slots.resize(kCaptureSlots);
    for (CaptureSlot& s : capture_slots)
      for (auto& b : s.base) b.assign(size_t(n), 0);
  }
  const uint64_t id = captures;
  const size_t slot = size_t(id % kCaptureSlots);
  if (capture_slots[slot].busy)
    return error(Code::resource_exhausted,
                 what + ": " + std::to_string(kCaptureSlots) + " captured calls of this communicator are alive "
                        "(capture " + std::to_string(id - kCaptureSlots) + " holds slot " + std::to_string(slot) +
                        "): destroy graphs that are no longer replayed first");

  auto cap = std::make_shared<CapturedCall>();
  cap->link = capture_link;
  cap->id = id;
  cap->slot = slot;
  cap->name = what;
  cap->desc = prepared->d;
  Result<Signal> done = Signal::create(comm.device_, -1, 0);
  if (!done.ok()) return done.status().prefix(what + ": its end signal");
  cap->done = std::move(done).value();
  for (auto [sig, off] : {std::pair{&cap->posted_me, kCapturePosted}, std::pair{&cap->arrive_me, kCaptureArrive},
                          std::pair{&cap->sent_me, kCaptureSent}}) {
    const uint64_t va = comm.pool_va_[size_t(me)] + kCaptureArea + slot * kCaptureSlotBytes + off;
    Result<Signal> w = Signal::wrap(comm.device_, va, comm.device_.host_pointer(va, Signal::kBytes));
    if (!w.ok()) return w.status().prefix(what);
    *sig = std::move(w).value();
  }
  // The plan, its lists on queues of its own.
  const uint64_t at = kCaptureArea + slot * kCaptureSlotBytes;
  comm.queue_redirect_ = &cap->queues;
  Result<std::unique_ptr<Plan>> plan = compile_plan(
      *prepared, signals_at(at + kCapturePosted, at + kCaptureArrive, at + kCapturePhase, at + kCaptureSent));
  comm.queue_redirect_ = nullptr;
  if (!plan.ok()) return plan.status().prefix("capturing");
  cap->plan = std::move(plan).value();
  Result<int> engine = comm.device_.engine_toward(comm.gpu(me), comm.gpu(me));
  if (!engine.ok()) return engine.status().prefix(what);
  QueueOptions qo;
  qo.ring_bytes = 4096;
  Result<std::unique_ptr<Queue>> closer = comm.device_.create_queue(comm.gpu(me), *engine, qo);
  if (!closer.ok()) return closer.status().prefix(what + ": the queue of its closing list");
  cap->closer = std::move(closer).value();

  // The stream's steps, then the capture's bookkeeping (nothing is left
  // half-made when the stream refuses a step).
  CONCCL_RETURN_IF_ERROR(stream.retain_for_replays(cap).prefix(what));
  CONCCL_RETURN_IF_ERROR(stream.host_function(replay_entry, cap.get()).prefix(what));
  CONCCL_RETURN_IF_ERROR(stream.wait_value64(cap->done.va(), 1).prefix(what));
  capture_slots[slot].busy = true;
  ++captures;
  uint64_t* w = capture_desc(me, slot);
  prepared->d.write_fields(w);
  word_store(&w[0], id + 1);
  return Status();
}

// Replay r of `c` (on the stream's host function): see the top of the file.
void CallState::start_replay(CapturedCall& c) {
  CaptureSlot& s = capture_slots[c.slot];
  const uint64_t r = s.replays + 1;
  const std::string name = c.name + " replay " + std::to_string(r);
  auto refuse = [&](const Status& why) {
    fail(why);
    c.done.set(1);  // the stream goes on; async_error() says why
  };
  {
    std::lock_guard<std::mutex> lk(mu);
    if (!failed.ok()) {
      c.done.set(1);
      return;
    }
  }
  if (!c.plan->attached()) return refuse(error(Code::invalid_argument, name + ": its plan was detached"));
  // Every rank that has written this slot's descriptor must have captured
  // the same call.
  for (int q = 0; q < n; ++q) {
    const uint64_t* w = capture_desc(q, c.slot);
    if (!w || q == me || word_load(&w[0]) != c.id + 1) continue;
    CallDesc theirs = CallDesc::read_fields(w);
    theirs.k = c.desc.k;
    if (!(theirs == c.desc))
      return refuse(error(Code::invalid_argument,
                          name + ": rank " + std::to_string(q) + " captured " + theirs.describe() + " as capture " +
                              std::to_string(c.id) + ", rank " + std::to_string(me) + " " + c.desc.describe() +
                              ": every rank captures the same calls in the same order"));
  }
  const Deadline dl = Deadline::after_ms(comm.options_.call_timeout_ms);
  Plan& plan = *c.plan;
  if (Status st = submit_lists(plan, r - 1, s.base, dl, name); !st.ok()) return refuse(st);
  const size_t mi = size_t(me);
  const uint64_t arrive_target = s.base[kCounterArrive][mi] + plan.expected_[mi];
  const uint64_t sent_target = s.base[kCounterSent][mi] + plan.sent_expected_[mi];
  for (size_t q = 0; q < size_t(n); ++q) {
    s.base[kCounterArrive][q] += plan.expected_[q];
    s.base[kCounterPhase][q] += plan.ready_adds_[q];
    s.base[kCounterSent][q] += plan.sent_expected_[q];
  }
  s.replays = r;
  Status st = close_replay(*c.closer, {{c.arrive_me.va(), arrive_target}, {c.sent_me.va(), sent_target}}, c.done, dl);
  if (!st.ok()) return refuse(st.prefix(name + ": its closing list"));
  {
    std::lock_guard<std::mutex> lk(mu);
    capture_pending.push_back(CapturePending{c.shared_from_this(), r, dl, arrive_target, sent_target});
    start_watchdog();
  }
  cv.notify_all();
  c.posted_me.set(r);  // last: the lists may start
}

namespace {

// A replay's host function: the link held, so that the communicator stays
// (or is known gone) while the replay starts.
void replay_entry(void* arg) {
  auto* c = static_cast<CapturedCall*>(arg);
  std::lock_guard<std::recursive_mutex> lk(c->link->mu);
  if (!c->link->state) {
    // Its communicator is gone: nothing can run; the stream goes on.
    c->done.set(1);
    return;
  }
  c->link->state->start_replay(*c);
}

}  // namespace

void CallState::release_captures(std::vector<std::shared_ptr<CapturedCall>>* graveyard) {
  for (CapturePending& p : capture_pending) {
    p.call->done.set(1);
    graveyard->push_back(std::move(p.call));
  }
  capture_pending.clear();
}

bool CallState::watch_captures(std::unique_lock<std::mutex>& lk) {
  if (capture_pending.empty()) return false;
  CapturePending& f = capture_pending.front();
  // Done by its own targets (the end signal is reset by the next replay).
  if (f.call->arrive_me.value() >= f.arrive && f.call->sent_me.value() >= f.sent) {
    std::shared_ptr<CapturedCall> gone = std::move(f.call);
    capture_pending.pop_front();
    lk.unlock();
    gone.reset();  // may be the last reference: its destructor takes the link's lock
    lk.lock();
    return true;
  }
  if (!f.deadline.expired()) return false;
  const std::string what = f.call->name + " replay " + std::to_string(f.replay);
  lk.unlock();
  fail(error(Code::timeout, what + ": not complete within call_timeout_ms (" +
                                std::to_string(comm.options_.call_timeout_ms) +
                                " ms): a rank did not replay its graph, or replayed its graphs in another order"));
  lk.lock();
  return true;
}

void CallState::wait_for_captures_of_peers(Deadline dl) {
  for (int q = 0; q < n; ++q) {
    if (q == me) continue;
    for (size_t slot = 0; slot < capture_slots.size(); ++slot) {
      if (!capture_slots[slot].replays) continue;
      const uint64_t va = comm.pool_va_[size_t(q)] + kCaptureArea + slot * kCaptureSlotBytes + kCaptureSent;
      const auto* word = static_cast<const uint64_t*>(comm.device_.host_pointer(va, 8));
      while (word && word_load(word) < capture_slots[slot].base[kCounterSent][size_t(q)] && !dl.expired()) {
        const std::vector<int> gone = comm.boot_ ? comm.boot_->hung_up() : std::vector<int>{};
        if (std::find(gone.begin(), gone.end(), q) != gone.end()) break;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
}

void CallState::cut_captures() {
  std::lock_guard<std::recursive_mutex> lk(capture_link->mu);
  capture_link->state = nullptr;
}


// ---- every rank in this process ----
//
// The same two stream steps; the counters are the capture's own signals
// (no other process reads them), the replays its own count, and the host
// function submits every rank's lists and posts every rank's "posted".
// No other process can hold a replay up, but an engine can (a fault, a
// stall): the communicator's replay watchdog (replay_watchdog.hpp) gives each
// replay's closing list the call timeout, then records why (async_error())
// and releases the stream, which would otherwise wait forever. After a
// failure replays submit nothing and only release their stream.
struct LocalCapture {
  std::string name;
  std::map<std::pair<int, int>, std::unique_ptr<Queue>> queues;
  std::unique_ptr<Plan> plan;  // detached with its communicator (plans_mu_ guards its table)
  std::unique_ptr<Queue> closer;
  std::vector<Signal> posted, arrive, phase, sent;  // per rank
  std::vector<uint64_t> base[kCounters];            // per rank: each counter after the replays so far
  uint64_t replays = 0;
  Signal done;
  std::shared_ptr<LocalReplays> shared;  // the communicator's failure and watchdog
  int64_t timeout_ms = 60000;            // the communicator's call timeout

  ~LocalCapture() {
    if (shared) shared->watchdog.forget(this);
    // The plan before its queues, and the queues before the signals their
    // lists write: after a failed replay lists may still be queued, and an
    // engine that comes back must not run them into freed memory.
    plan.reset();
    closer.reset();
    queues.clear();
  }

  // Replay r's closing list, ending at `ticket` of `closer`, is watched
  // until `deadline`.
  void watch(uint64_t r, uint64_t ticket, Deadline deadline) {
    ReplayWatchdog::Watched w{this, closer.get(), ticket, deadline, nullptr};
    w.fail = [this, r](Status st) {
      fail(r, st.prefix("its lists did not end within the call timeout (" + std::to_string(timeout_ms) + " ms)"));
    };
    shared->watchdog.watch(std::move(w));
  }
  // Records a failure of replay r and lets its stream go on.
  void fail(uint64_t r, Status why) {
    shared->set(why.prefix(name + " replay " + std::to_string(r)));
    done.set(1);
  }

  // Replay r's lists, their waits rewritten, submitted; the phase counters'
  // bases moved past it.
  void submit(uint64_t r, Deadline dl, Status* st) {
    *st = CallState::submit_lists(*plan, r - 1, base, dl, name + " replay " + std::to_string(r));
    for (size_t q = 0; q < base[kCounterPhase].size(); ++q) base[kCounterPhase][q] += plan->ready_adds_[q];
  }
};

namespace {

void local_replay(void* arg) {
  auto* c = static_cast<LocalCapture*>(arg);
  if (!c->plan || !c->plan->attached()) {  // its communicator is gone: the stream goes on
    c->done.set(1);
    return;
  }
  const uint64_t r = ++c->replays;
  if (!c->shared->get().ok()) {  // an earlier replay failed: async_error() says why
    c->done.set(1);
    return;
  }
  const Deadline dl = Deadline::after_ms(c->timeout_ms);
  const size_t n = c->posted.size();
  Status st;
  c->submit(r, dl, &st);
  std::vector<std::pair<uint64_t, uint64_t>> until;
  for (size_t q = 0; q < n; ++q) {
    const uint64_t a = c->base[kCounterArrive][q] + c->plan->arrivals_expected(int(q));
    const uint64_t s = c->base[kCounterSent][q] + c->plan->sent_expected(int(q));
    until.emplace_back(c->arrive[q].va(), a);
    until.emplace_back(c->sent[q].va(), s);
    c->base[kCounterArrive][q] = a;
    c->base[kCounterSent][q] = s;
  }
  QueueSpan span;
  if (st.ok()) st = close_replay(*c->closer, until, c->done, dl, &span);
  if (!st.ok()) {
    // A host node returns nothing: the stream goes on, the data is not what
    // the call promised, and async_error() says why.
    c->fail(r, st.prefix("could not start"));
    return;
  }
  c->watch(r, span.end, dl);
  for (Signal& p : c->posted) p.set(r);
}

}  // namespace

Status Communicator::capture_local(const CollectiveArgs& given, StreamOps& stream) {
  const std::string what = std::string("call ") + coll_op_name(given.op) + " (captured)";
  const int n = size();
  CollectiveArgs in = given;
  in.prelaunch = true;  // gated on every rank's "posted"
  const bool root_only = in.op == CollOp::broadcast || in.op == CollOp::scatter || in.op == CollOp::p2p;
  if (root_only && in.send.size() == 1 && n > 1 && in.root >= 0 && in.root < n) {
    Buffer root_send = in.send[0];
    in.send.assign(size_t(n), Buffer{});
    in.send[size_t(in.root)] = root_send;
  }
  CollectiveArgs args = in;
  args.variant = automatic_variant(args, true);
  CONCCL_RETURN_IF_ERROR(validate_args(*this, args).prefix("capturing " + what));
  auto cap = std::make_shared<LocalCapture>();
  cap->name = what;
  if (!local_replays_) local_replays_ = std::make_shared<LocalReplays>();
  cap->shared = local_replays_;
  cap->timeout_ms = options_.call_timeout_ms;
  RankSignals sig;
  for (auto* v : {&cap->posted, &cap->arrive, &cap->phase, &cap->sent})
    for (int r = 0; r < n; ++r) {
      Result<Signal> made = Signal::create(device_, -1, 0);
      if (!made.ok()) return made.status().prefix(what + ": its counters");
      v->push_back(std::move(made).value());
    }
  for (int r = 0; r < n; ++r) {
    sig.trigger.push_back(cap->posted[size_t(r)].va());
    sig.arrive.push_back(cap->arrive[size_t(r)].va());
    sig.ready.push_back(cap->phase[size_t(r)].va());
    sig.sent.push_back(cap->sent[size_t(r)].va());
    sig.stamps.push_back(0);
  }
  sig.monotonic = true;
  for (auto& b : cap->base) b.assign(size_t(n), 0);
  queue_redirect_ = &cap->queues;
  Result<std::unique_ptr<Plan>> plan = compile(args, in, false, &sig);
  queue_redirect_ = nullptr;
  if (!plan.ok()) return plan.status().prefix("capturing " + what);
  cap->plan = std::move(plan).value();
  Result<Signal> done = Signal::create(device_, -1, 0);
  if (!done.ok()) return done.status().prefix(what + ": its end signal");
  cap->done = std::move(done).value();
  Result<int> engine = device_.engine_toward(gpu(0), gpu(0));
  if (!engine.ok()) return engine.status().prefix(what);
  QueueOptions qo;
  qo.ring_bytes = 4096;
  Result<std::unique_ptr<Queue>> closer = device_.create_queue(gpu(0), *engine, qo);
  if (!closer.ok()) return closer.status().prefix(what + ": the queue of its closing list");
  cap->closer = std::move(closer).value();
  CONCCL_RETURN_IF_ERROR(stream.retain_for_replays(cap).prefix(what));
  CONCCL_RETURN_IF_ERROR(stream.host_function(local_replay, cap.get()).prefix(what));
  return stream.wait_value64(cap->done.va(), 1).prefix(what);
}

}  // namespace conccl
