// src/collectives/captured_calls.cpp - collective calls recorded into a
// graph (docs/graphs.md): Communicator::call on a capturing stream.
//
// A captured call is compiled once, at capture, on counters of its own and
// on queues of its own, so that its replays never wait behind ordinary
// calls' lists nor those behind its. The stream records two steps:
//   1. a replay tick, after the stream's earlier work: it resets the
//      capture's end signal to 0 and counts one more replay in the
//      capture's "posted" counter (ReplayEnd, calls.hpp: by two stream
//      stores that the keeper turns into the count, or by a one-thread
//      kernel);
//   2. a wait for the end signal >= 1: a fixed value, as a graph's memory
//      operation node needs.
// The caller's thread is on no replay's path: the communicator's keeper
// (replay_keeper.hpp) queues each capture's replays onto the engines.
// Replay r's lists wait on the engines for every rank's posted >= r
// before they read or write anything; every other value they wait for or
// add is computed from the counts of the replays before r, so counters only
// grow and nothing is reset between replays but the end signal, which only
// this rank's stream waits on. Once this rank's arrivals and its own lists'
// ends are in, 1 is added to the end signal: by the keeper, or by a closing
// list on an engine that waits for them (close_by_keeper).
// A failed communicator releases the capture (ReplayEnd::release): later
// replays then only let the stream go on.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "collectives/calls.hpp"
#include "util/env.hpp"

namespace conccl {

namespace {

// The closing list of a replay: it waits until every (counter, value) of
// `until` is reached, then adds 1 to `done` (which the replay's tick reset
// to 0). *span says where it sits in `q`.
Status close_replay(Queue& q, const std::vector<std::pair<uint64_t, uint64_t>>& until, Signal& done, Deadline dl,
                    QueueSpan* span) {
  CommandBuffer close(q.isa());
  for (const auto& [va, value] : until) CONCCL_RETURN_IF_ERROR(close.wait_ge(va, value));
  CONCCL_RETURN_IF_ERROR(close.signal_add(done.va(), 1));
  return q.submit(close, dl, span);
}

// The queue of a capture's closing lists, on GPU `gpu`'s engine toward itself.
Result<std::unique_ptr<Queue>> make_closer(Device& device, int gpu, const std::string& what) {
  Result<int> engine = device.engine_toward(gpu, gpu);
  if (!engine.ok()) return engine.status().prefix(what);
  QueueOptions qo;
  qo.ring_bytes = 16384;
  Result<std::unique_ptr<Queue>> closer = device.create_queue(gpu, *engine, qo);
  if (!closer.ok()) return closer.status().prefix(what + ": the queue of its closing list");
  return closer;
}

// Who ends a replay (adds 1 to its end signal). With arming on ticks (the
// default) the keeper does, once this rank's counters show every arrival
// and its own lists' ends: it looks at them between ticks anyway, and on an
// H100 that made a 1 KiB replay of 2 processes 30-31 us against 35-38 us
// with a closing list on an engine, whose acquire switches its channel out
// while it waits (docs/perf/h200-graphs.md, run 49). Arming ahead keeps the
// host off the replay's path, so there a closing list on an engine does
// it. CONCCL_REPLAY_CLOSE=engine|keeper chooses, read once.
bool close_by_keeper() {
  static const bool k = util::env_is("CONCCL_REPLAY_CLOSE", "keeper") ||
                        (!util::env_is("CONCCL_REPLAY_CLOSE", "engine") &&
                         ReplayKeeper::default_arm() == ReplayKeeper::Arm::on_tick);
  return k;
}

constexpr uint64_t kMaxArmed = 16;
// CONCCL_REPLAY_DEPTH=N arms at most N replays ahead (a diagnostic: how far
// ahead armed lists cost what they wait at), read once.
uint64_t max_armed() {
  static const uint64_t n = [] {
    const char* e = std::getenv("CONCCL_REPLAY_DEPTH");
    const unsigned long long v = e ? std::strtoull(e, nullptr, 10) : 0;
    return v >= 1 && v <= kMaxArmed ? uint64_t(v) : kMaxArmed;
  }();
  return n;
}
constexpr uint64_t kSubmitSlack = 256;  // what a submission adds to its list (timeline release, padding)

// A tick seen while the replay before it has not ended: two launches of
// one captured call at once (its graph instantiated twice and launched on
// two streams). Only where the keeper ends the replays itself can it tell:
// it then knows every end the moment it makes it. Launches that store
// their flags at the same moment look like one and cannot be told apart.
Status tick_while_running(uint64_t started, uint64_t settled) {
  if (!close_by_keeper() || started <= settled) return Status();
  return error(Code::invalid_argument,
               "replay " + std::to_string(started + 1) + " began while replay " + std::to_string(settled + 1) +
                   " was still running: replays of one captured call run one after another (was its graph "
                   "instantiated twice and launched on two streams at once?); destroy this communicator");
}

}  // namespace

bool ReplayEnd::ticks_by_writes() {
  static const bool by_writes = !util::env_is("CONCCL_REPLAY_TICK", "kernel");
  return by_writes;
}

Result<ReplayEnd> ReplayEnd::create(Device& device, const std::string& what) {
  ReplayEnd e;
  for (Signal* sig : {&e.done, &e.stop, &e.flag}) {
    Result<Signal> made = Signal::create(device, -1, 0);
    if (!made.ok()) return made.status().prefix(what + ": its end signal");
    *sig = std::move(made).value();
  }
  // The signal's value is one little-endian 64-bit word (include/conccl/signal.hpp).
  e.done_upper = static_cast<uint32_t*>(device.host_pointer(e.done.va() + 4, 4));
  if (!e.done_upper) return error(Code::internal, what + ": its end signal has no host mapping");
  return e;
}

Status ReplayEnd::record(StreamOps& stream, std::shared_ptr<void> keep, const Signal& posted,
                         const std::string& what) const {
  CONCCL_RETURN_IF_ERROR(stream.retain_for_replays(std::move(keep)).prefix(what));
  if (ticks_by_writes()) {
    // The reset before the flag: the keeper arms the replay, whose closing
    // list adds to `done`, only once it sees the flag.
    CONCCL_RETURN_IF_ERROR(stream.write_value32(done.va(), 0).prefix(what + " (CONCCL_REPLAY_TICK=kernel ticks "
                                                                            "without it)"));
    CONCCL_RETURN_IF_ERROR(stream.write_value64(flag.va(), 1).prefix(what));
  } else {
    CONCCL_RETURN_IF_ERROR(
        stream.replay_tick(StreamOps::ReplayTick{posted.va(), done.va(), stop.va()}).prefix(what));
  }
  return stream.wait_value64(done.va(), 1).prefix(what);
}

bool ReplayEnd::take_tick(Signal& posted) {
  if (!ticks_by_writes() || flag.value() == 0) return false;
  // One flag per replay: the next replay stores it only after this one's
  // end, which comes after this (the keeper's, or a closing list queued
  // after this).
  flag.set(0);
  posted.set(posted.value() + 1);
  return true;
}

void ReplayEnd::release() {
  if (stop.value() == 0) stop.set(1);
  if (ticks_by_writes()) {
    std::atomic_ref<uint32_t>(*done_upper).store(1, std::memory_order_release);
    return;
  }
  if (done.value() == 0) done.set(1);  // a kernel tick that read "stop" as 0 just before it was set may reset it
}

uint64_t CallState::armed_depth(const Plan& plan) {
  std::map<const Queue*, uint64_t> bytes;
  for (const PlanList& l : plan.lists_)
    if (l.queue) bytes[l.queue] += l.cb.size_dwords() * 4 + kSubmitSlack;
  uint64_t depth = max_armed() + 1;
  for (const auto& [q, b] : bytes) depth = std::min<uint64_t>(depth, q->ring_bytes() / b);
  return std::max<uint64_t>(depth, 2) - 1;
}

// One captured call of a multi-process communicator: a slot of every rank's
// pool holds its counters (calls.hpp), the same slot on every rank.
struct CapturedCall final : ReplayKeeper::Replays {
  std::shared_ptr<CaptureLink> link;
  CallState* state = nullptr;  // valid while link->state is
  uint64_t id = 0;
  size_t slot = 0;
  std::string name;
  CallDesc desc;
  int64_t timeout_ms = 0;
  std::map<std::pair<int, int>, std::unique_ptr<Queue>> queues;  // its lists' (made while compiling)
  std::unique_ptr<Plan> plan;
  std::unique_ptr<Queue> closer;         // the closing lists'
  ReplayEnd end;                         // what the stream waits for, and how replays tick
  Signal posted_me, arrive_me, sent_me;  // this rank's slot counters
  // The keeper's: every rank captured this call; each counter before the
  // next replay to arm; the replays armed and not yet seen to end (with the
  // counters after each); the last that ended and the counters after it.
  bool peers_checked = false;
  std::vector<uint64_t> next_base[kCounters];
  struct Armed {
    uint64_t r = 0, ticket = 0;
    std::vector<uint64_t> after[kCounters];
    uint64_t arrive_target = 0, sent_target = 0;  // close_by_keeper(): it ends when this rank's counters reach these
  };
  std::deque<Armed> armed;
  uint64_t settled = 0;
  std::vector<uint64_t> settled_base[kCounters];

  uint64_t started() const override { return posted_me.value(); }
  Status take_ticks() override {
    const uint64_t before = started();
    if (!end.take_tick(posted_me)) return Status();
    return tick_while_running(before, settled);
  }
  Result<bool> arm(uint64_t r) override { return state->arm_capture(*this, r); }
  bool ended(uint64_t r) override {
    settle();
    return r <= settled;
  }
  void fail(uint64_t r, const Status& why) override {
    state->fail(Status(why).prefix(name + " replay " + std::to_string(r)));
  }
  void release() override { end.release(); }
  Status check(uint64_t r, bool expired) override { return state->check_capture(*this, r, expired); }
  // Moves the replays that ended into `settled`: those whose closing list
  // has run, or (`ticked`: the graph's launches are done, so every replay
  // that ticked here has ended here) every replay that ticked. The closing
  // list's ticket completes a little after the end signal that released the
  // stream, so at the graph's destruction only the tick count is exact.
  // A replay closed by the keeper (close_by_keeper) ends here: its end
  // signal gets the 1 a closing list would add.
  void settle(bool ticked = false) {
    const uint64_t ticks = ticked ? started() : 0;
    while (!armed.empty()) {
      const Armed& a = armed.front();
      if (a.r > ticks) {
        if (!close_by_keeper() && closer->completed() < a.ticket) break;
        if (close_by_keeper()) {
          if (arrive_me.value() < a.arrive_target || sent_me.value() < a.sent_target) break;
          end.done.add(1);
        }
      }
      settled = armed.front().r;
      for (size_t c = 0; c < kCounters; ++c) settled_base[c] = std::move(armed.front().after[c]);
      armed.pop_front();
    }
  }

  ~CapturedCall() override {
    std::lock_guard<std::mutex> lk(link->mu);
    if (CallState* st = link->state) {  // freed by the communicator's calling thread (reap_captures)
      st->keeper.forget(this);
      settle(true);
      CallState::RetiredCapture r{std::move(plan), std::move(queues), std::move(closer), std::move(end), slot,
                                  settled, {}};
      for (size_t c = 0; c < kCounters; ++c) r.base[c] = settled_base[c];
      std::lock_guard<std::mutex> rl(st->retired_mu);
      st->retired.push_back(std::move(r));
      return;
    }
    plan.reset();  // detached with its communicator: nothing of it is shared now
  }
};

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
    if (r.slot >= capture_slots.size()) continue;
    CaptureSlot& s = capture_slots[r.slot];
    s.busy = false;
    s.replays = r.replays;
    for (size_t c = 0; c < kCounters; ++c) s.base[c] = r.base[c];
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
  CaptureSlot& s = capture_slots[slot];
  if (s.busy)
    return error(Code::resource_exhausted,
                 what + ": " + std::to_string(kCaptureSlots) + " captured calls of this communicator are alive "
                        "(capture " + std::to_string(id - kCaptureSlots) + " holds slot " + std::to_string(slot) +
                        "): destroy graphs that are no longer replayed first");

  auto cap = std::make_shared<CapturedCall>();
  cap->link = capture_link;
  cap->state = this;
  cap->id = id;
  cap->slot = slot;
  cap->name = what;
  cap->desc = prepared->d;
  cap->timeout_ms = comm.options_.call_timeout_ms;
  Result<ReplayEnd> end = ReplayEnd::create(comm.device_, what);
  if (!end.ok()) return end.status();
  cap->end = std::move(end).value();
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
  Result<std::unique_ptr<Queue>> closer = make_closer(comm.device_, comm.gpu(me), what);
  if (!closer.ok()) return closer.status();
  cap->closer = std::move(closer).value();
  const uint64_t first = s.replays + 1;
  cap->settled = s.replays;
  for (size_t c = 0; c < kCounters; ++c) cap->next_base[c] = cap->settled_base[c] = s.base[c];

  // The stream's steps, then the capture's bookkeeping (nothing is left
  // half-made when the stream refuses a step).
  CONCCL_RETURN_IF_ERROR(cap->end.record(stream, cap, cap->posted_me, what));
  s.busy = true;
  ++captures;
  uint64_t* w = capture_desc(me, slot);
  prepared->d.write_fields(w);
  word_store(&w[0], id + 1);
  keeper.add(cap.get(), first, armed_depth(*cap->plan), comm.options_.call_timeout_ms);
  return Status();
}

// Replay r of `c`, queued ahead of its tick (the keeper's thread).
Result<bool> CallState::arm_capture(CapturedCall& c, uint64_t r) {
  const std::string name = c.name + " replay " + std::to_string(r);
  // Every rank must have captured the same call before any list of it may
  // write into a peer.
  if (!c.peers_checked) {
    for (int q = 0; q < n; ++q) {
      const uint64_t* w = capture_desc(q, c.slot);
      if (!w || q == me) continue;
      if (word_load(&w[0]) != c.id + 1) return false;  // not captured there yet
      CallDesc theirs = CallDesc::read_fields(w);
      theirs.k = c.desc.k;
      if (!(theirs == c.desc))
        return error(Code::invalid_argument,
                     name + ": rank " + std::to_string(q) + " captured " + theirs.describe() + " as capture " +
                         std::to_string(c.id) + ", rank " + std::to_string(me) + " " + c.desc.describe() +
                         ": every rank captures the same calls in the same order");
    }
    c.peers_checked = true;
  }
  if (!c.plan->attached()) return error(Code::invalid_argument, name + ": its plan was detached");
  const Deadline dl = Deadline::after_ms(c.timeout_ms);
  Plan& plan = *c.plan;
  CONCCL_RETURN_IF_ERROR(submit_lists(plan, r - 1, c.next_base, dl, name));
  const size_t mi = size_t(me);
  const uint64_t arrive_target = c.next_base[kCounterArrive][mi] + plan.expected_[mi];
  const uint64_t sent_target = c.next_base[kCounterSent][mi] + plan.sent_expected_[mi];
  for (size_t q = 0; q < size_t(n); ++q) {
    c.next_base[kCounterArrive][q] += plan.expected_[q];
    c.next_base[kCounterPhase][q] += plan.ready_adds_[q];
    c.next_base[kCounterSent][q] += plan.sent_expected_[q];
  }
  QueueSpan span;
  if (!close_by_keeper())
    CONCCL_RETURN_IF_ERROR(
        close_replay(*c.closer, {{c.arrive_me.va(), arrive_target}, {c.sent_me.va(), sent_target}}, c.end.done, dl,
                     &span)
            .prefix(name + ": its closing list"));
  CapturedCall::Armed a{r, span.end, {}, arrive_target, sent_target};
  for (size_t k = 0; k < kCounters; ++k) a.after[k] = c.next_base[k];
  c.armed.push_back(std::move(a));
  return true;
}

Status CallState::check_capture(CapturedCall& c, uint64_t r, bool expired) const {
  auto slot_word = [&](int q, uint64_t off) {
    const uint64_t va = comm.pool_va_[size_t(q)] + kCaptureArea + c.slot * kCaptureSlotBytes + off;
    const auto* w = static_cast<const uint64_t*>(comm.device_.host_pointer(va, 8));
    return w ? word_load(w) : 0;
  };
  for (int q = 0; q < n; ++q) {
    const uint64_t* f = q == me ? nullptr : failed_word(q);
    if (!f || word_load(f) == 0) continue;
    const char* why = reason_text(q);
    return error(Code::unavailable, "rank " + std::to_string(q) + " failed the communicator (" +
                                        (why ? std::string(why, strnlen(why, kCallReasonBytes - 1)) : "") +
                                        "), so this replay cannot complete; destroy this communicator");
  }
  // Replay r's counters on every rank, once armed here (the oldest armed).
  const std::vector<uint64_t>* sent_after = nullptr;
  const std::vector<uint64_t>* arrive_after = nullptr;
  for (const CapturedCall::Armed& a : c.armed)
    if (a.r == r) {
      sent_after = &a.after[kCounterSent];
      arrive_after = &a.after[kCounterArrive];
    }
  if (Bootstrap* b = comm.boot_.get()) {
    std::vector<int> gone = b->hung_up();
    // A rank that began replay r and whose lists of it have all ended brought
    // everything it owes: its leaving fails nothing. Nor does any rank's once
    // every byte this rank receives in replay r has arrived (its own lists
    // then wait for no one): a peer that finished and tore its communicator
    // down may no longer show its counters.
    const bool all_arrived = arrive_after && slot_word(me, kCaptureArrive) >= (*arrive_after)[size_t(me)];
    std::erase_if(gone, [&](int q) {
      return all_arrived ||
             (sent_after && slot_word(q, kCapturePosted) >= r && slot_word(q, kCaptureSent) >= (*sent_after)[size_t(q)]);
    });
    if (!gone.empty()) {
      std::string names;
      for (int q : gone) names += (names.empty() ? "" : ", ") + b->describe_rank(q);
      return error(Code::unavailable, names + (gone.size() == 1 ? " has" : " have") +
                                          " left the communicator (process exited or communicator destroyed) "
                                          "while this replay was in flight; destroy this communicator and start the "
                                          "group again");
    }
  }
  if (!expired) return Status();
  const std::string limit = "not complete within call_timeout_ms (" + std::to_string(comm.options_.call_timeout_ms) +
                            " ms): ";
  if (!c.peers_checked)
    return error(Code::timeout, limit + "another rank has not captured this call (capture " + std::to_string(c.id) +
                                    "); every rank captures the same calls in the same order");
  std::string late;
  for (int q = 0; q < n; ++q) {
    const uint64_t begun = slot_word(q, kCapturePosted);
    if (q != me && begun < r)
      late += (late.empty() ? "" : "; ") + std::string("rank ") + std::to_string(q) + " has begun " +
              std::to_string(begun) + " replays of it";
  }
  if (!late.empty())
    return error(Code::timeout, limit + late + " (a rank stopped replaying its graph, or replays its graphs in "
                                               "another order; every rank replays as the others do)");
  return error(Code::timeout, limit + "every rank has begun it; its lists have not ended (an engine stalled or "
                                      "faulted?)");
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
  keeper.stop();
  // The live captures' replays that ended count in their slots, for
  // wait_for_captures_of_peers().
  keeper.visit([&](ReplayKeeper::Replays& r) {
    auto& c = static_cast<CapturedCall&>(r);
    c.settle(true);
    if (c.slot >= capture_slots.size()) return;
    capture_slots[c.slot].replays = c.settled;
    for (size_t k = 0; k < kCounters; ++k) capture_slots[c.slot].base[k] = c.settled_base[k];
  });
  std::lock_guard<std::mutex> lk(capture_link->mu);
  capture_link->state = nullptr;
}


// ---- every rank in this process ----
//
// The same two stream steps and the same keeper (the communicator's
// LocalReplays, which captures may outlive); the counters are the capture's
// own signals (no other process reads them), and one "posted" counter, which
// the tick bumps, gates every rank's lists. No other process can hold a
// replay up, but an engine can (a fault, a stall): the keeper gives each
// replay that ticked the call timeout, then records why (async_error()) and
// releases the stream, which would otherwise wait forever; later ticks then
// only release it.
struct LocalCapture final : ReplayKeeper::Replays {
  std::string name;
  std::map<std::pair<int, int>, std::unique_ptr<Queue>> queues;
  std::unique_ptr<Plan> plan;  // detached with its communicator (plans_mu_ guards its table)
  std::unique_ptr<Queue> closer;
  Signal posted;                            // replays begun: every rank's trigger
  std::vector<Signal> arrive, phase, sent;  // per rank
  std::vector<uint64_t> base[kCounters];    // per rank: each counter before the next replay to arm
  struct Armed {
    uint64_t r = 0, ticket = 0;  // the replay, its closing list's ticket
    std::vector<uint64_t> arrive_after, sent_after;  // per rank: the counters once it has ended
  };
  std::deque<Armed> armed;  // not yet seen to end
  uint64_t settled = 0;                             // the last replay seen to end
  ReplayEnd end;
  std::shared_ptr<LocalReplays> shared;  // the communicator's failure and keeper

  ~LocalCapture() override {
    if (shared) shared->keeper.forget(this);
    // The plan before its queues, and the queues before the signals their
    // lists write: armed replays are still queued, and an engine must not
    // run them into freed memory.
    plan.reset();
    closer.reset();
    queues.clear();
  }

  uint64_t started() const override { return posted.value(); }
  Status take_ticks() override {
    const uint64_t before = started();
    if (!end.take_tick(posted)) return Status();
    return tick_while_running(before, settled);
  }
  bool ended(uint64_t r) override {
    auto reached = [&](const Armed& a) {
      for (size_t q = 0; q < arrive.size(); ++q)
        if (arrive[q].value() < a.arrive_after[q] || sent[q].value() < a.sent_after[q]) return false;
      return true;
    };
    while (!armed.empty()) {
      const Armed& a = armed.front();
      if (!close_by_keeper()) {
        if (closer->completed() < a.ticket) break;
      } else {
        if (!reached(a)) break;
        end.done.add(1);  // what the closing list would add
      }
      settled = a.r;
      armed.pop_front();
    }
    return r <= settled;
  }
  void fail(uint64_t r, const Status& why) override {
    shared->set(Status(why).prefix(name + " replay " + std::to_string(r)));
  }
  void release() override { end.release(); }
  Status check(uint64_t, bool expired) override {
    if (!expired) return Status();
    return error(Code::timeout, "its lists did not end within the call timeout (call_timeout_ms " +
                                    std::to_string(shared_timeout_ms) +
                                    " ms): with every rank in this process only an engine can hold a replay up "
                                    "(stalled or faulted)");
  }

  // Replay r's lists, their waits rewritten, and its closing list (unless
  // the keeper ends replays), queued behind its tick; the counters' bases
  // moved past it.
  Result<bool> arm(uint64_t r) override {
    const std::string what = name + " replay " + std::to_string(r);
    if (!plan || !plan->attached()) return error(Code::unavailable, what + ": its communicator is gone");
    const Deadline dl = Deadline::after_ms(shared_timeout_ms);
    CONCCL_RETURN_IF_ERROR(CallState::submit_lists(*plan, r - 1, base, dl, what));
    for (size_t q = 0; q < arrive.size(); ++q) {
      base[kCounterPhase][q] += plan->ready_adds_[q];
      base[kCounterArrive][q] += plan->arrivals_expected(int(q));
      base[kCounterSent][q] += plan->sent_expected(int(q));
    }
    Armed a{r, 0, base[kCounterArrive], base[kCounterSent]};
    if (!close_by_keeper()) {
      std::vector<std::pair<uint64_t, uint64_t>> until;
      for (size_t q = 0; q < arrive.size(); ++q) {
        until.emplace_back(arrive[q].va(), a.arrive_after[q]);
        until.emplace_back(sent[q].va(), a.sent_after[q]);
      }
      QueueSpan span;
      CONCCL_RETURN_IF_ERROR(close_replay(*closer, until, end.done, dl, &span).prefix(what + ": its closing list"));
      a.ticket = span.end;
    }
    armed.push_back(std::move(a));
    return true;
  }
  int64_t shared_timeout_ms = 60000;  // the communicator's call timeout
};

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
  cap->shared_timeout_ms = options_.call_timeout_ms;
  Result<Signal> posted = Signal::create(device_, -1, 0);
  if (!posted.ok()) return posted.status().prefix(what + ": its counters");
  cap->posted = std::move(posted).value();
  Result<ReplayEnd> end = ReplayEnd::create(device_, what);
  if (!end.ok()) return end.status();
  cap->end = std::move(end).value();
  for (auto* v : {&cap->arrive, &cap->phase, &cap->sent})
    for (int r = 0; r < n; ++r) {
      Result<Signal> made = Signal::create(device_, -1, 0);
      if (!made.ok()) return made.status().prefix(what + ": its counters");
      v->push_back(std::move(made).value());
    }
  RankSignals sig;
  for (int r = 0; r < n; ++r) {
    sig.trigger.push_back(cap->posted.va());
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
  Result<std::unique_ptr<Queue>> closer = make_closer(device_, gpu(0), what);
  if (!closer.ok()) return closer.status();
  cap->closer = std::move(closer).value();
  CONCCL_RETURN_IF_ERROR(cap->end.record(stream, cap, cap->posted, what));
  local_replays_->keeper.add(cap.get(), 1, CallState::armed_depth(*cap->plan), options_.call_timeout_ms);
  return Status();
}

}  // namespace conccl
