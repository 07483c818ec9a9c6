// src/collectives/calls.cpp - Communicator::call: one collective through
// symmetric windows with no message between the ranks (the protocol:
// calls.hpp), ordered on a stream or waited for on the host. Waiting,
// failing and the watchdog: call_waits.cpp.
#include "collectives/calls.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "collectives/cached_calls.hpp"
#include "util/env.hpp"

namespace conccl {

namespace {

constexpr uint64_t kNone = ~uint64_t(0);


// What rank r of n gives and receives in op (bytes per rank as in
// CollectiveArgs): 0 where the op gives it no buffer.
uint64_t send_bytes(const CollectiveArgs& a, int r, int n) {
  switch (a.op) {
    case CollOp::all_to_all: return all_to_all_send_bytes(a, n);
    case CollOp::scatter: return r == a.root ? a.bytes * static_cast<uint64_t>(n) : 0;
    case CollOp::broadcast:
    case CollOp::p2p: return r == a.root ? a.bytes : 0;
    case CollOp::gather:
    case CollOp::all_gather: return a.bytes;
  }
  return 0;
}

uint64_t recv_bytes(const CollectiveArgs& a, int r, int n) {
  switch (a.op) {
    case CollOp::all_gather:
    case CollOp::all_to_all: return a.bytes * static_cast<uint64_t>(n);
    case CollOp::gather: return r == a.root ? a.bytes * static_cast<uint64_t>(n) : 0;
    case CollOp::p2p: return r == a.peer ? a.bytes : 0;
    case CollOp::broadcast:
    case CollOp::scatter: return a.bytes;
  }
  return 0;
}

}  // namespace

void CallDesc::write_fields(uint64_t* w) const {
  const uint64_t v[7] = {op, bytes, send_window, send_offset, recv_window, recv_offset, send_stride};
  for (int i = 0; i < 7; ++i) std::atomic_ref<uint64_t>(w[i + 1]).store(v[i], std::memory_order_relaxed);
}

CallDesc CallDesc::read_fields(const uint64_t* w) {
  CallDesc d;
  uint64_t* f[7] = {&d.op, &d.bytes, &d.send_window, &d.send_offset, &d.recv_window, &d.recv_offset, &d.send_stride};
  for (int i = 0; i < 7; ++i) *f[i] = std::atomic_ref<const uint64_t>(w[i + 1]).load(std::memory_order_relaxed);
  return d;
}

std::string CallDesc::describe() const {
  const CollOp o = static_cast<CollOp>(op & 0xFF);
  auto at = [](uint64_t w, uint64_t off) { return w == kNone ? std::string("none") : "w" + std::to_string(w) + "+" + std::to_string(off); };
  return std::string(coll_op_name(o)) + "/" + variant_name(static_cast<Variant>((op >> 8) & 0xFF)) +
         ((op >> 48) & 1 ? " in place" : "") + " " +
         std::to_string(bytes) + " B root " + std::to_string((op >> 16) & 0xFFFF) + " peer " +
         std::to_string((op >> 32) & 0xFFFF) + " send " + at(send_window, send_offset) + " recv " +
         at(recv_window, recv_offset) + (send_stride ? " send stride " + std::to_string(send_stride) : "");
}

// ---- the state ----

CallState::CallState(Communicator& c) : comm(c), n(c.size()), me(c.rank()), shares_gpu(processes_share_gpu(c)) {
  capture_link->state = this;
  for (int r = 0; r < n; ++r) {
    const uint64_t base = comm.pool_va_[static_cast<size_t>(r)];
    auto wrap = [&](uint64_t off) {
      Result<Signal> s = Signal::wrap(comm.device_, base + off, comm.device_.host_pointer(base + off, Signal::kBytes));
      return s.ok() ? std::move(s).value() : Signal();
    };
    posted.push_back(wrap(kCallPosted));
    arrive.push_back(wrap(kCallArrive));
    phase.push_back(wrap(kCallPhase));
    sent.push_back(wrap(kCallSent));
  }
  const std::vector<uint64_t>& words = comm.post_words_va_;
  if (words.size() == static_cast<size_t>(n) && std::find(words.begin(), words.end(), 0) == words.end()) {
    const bool twin = Signal::twin_layout(comm.device_);
    for (int r = 0; r < n; ++r) posted_dev.push_back(GpuWord{words[static_cast<size_t>(r)] + kCallPosted, twin});
  }
  for (auto& b : base) b.assign(static_cast<size_t>(n), 0);
  // Read here rather than once per process, so that a program (or a test)
  // can trace one communicator and not another. The rank that watches:
  // CONCCL_CALL_TRACE_RANK (default 0), since the watching thread takes a
  // core of its process.
  const std::string tracer = util::env_str("CONCCL_CALL_TRACE_RANK");
  if (const std::string path = util::env_trace_path("CONCCL_CALL_TRACE");
      !path.empty() && me == (tracer.empty() ? 0 : std::atoi(tracer.c_str()))) {
    std::vector<const uint64_t*> words;
    for (int r = 0; r < n; ++r)
      for (const Signal* s : {&posted[size_t(r)], &arrive[size_t(r)], &sent[size_t(r)]})
        words.push_back(static_cast<const uint64_t*>(comm.device_.host_pointer(s->va(), 8)));
    if (std::find(words.begin(), words.end(), nullptr) == words.end())
      trace = std::make_unique<CallTrace>(std::move(words), path);
  }
}

CallState::~CallState() {
  cut_captures();  // the keeper ends: a graph replayed from now on only releases its stream
  reap_captures();
  // Calls still in flight on a stream: give them the call timeout to end
  // (the queues and the stream's waits need them), then fail the rest.
  {
    std::unique_lock<std::mutex> lk(mu);
    const Deadline dl = Deadline::after_ms(comm.options_.call_timeout_ms);
    while (!pending.empty() && !dl.expired()) cv.wait_for(lk, std::chrono::milliseconds(1));
  }
  bool left;
  {
    std::lock_guard<std::mutex> lk(mu);
    left = !pending.empty();
  }
  if (left)
    fail(error(Code::timeout, "the communicator was destroyed with stream-ordered calls still in flight"));
  // The other ranks' hosts may still be waiting for the last call, and a
  // rank that leaves mid-wait looks like a failure to them: wait (bounded)
  // until every rank's lists of the last call have ended, after which every
  // rank's data is in place and its wait completes whether this rank is
  // there or not. (Its counters cannot vouch for it after it leaves: its
  // signal memory is freed, and the emulator zeroes freed memory.)
  bool ok;
  {
    std::lock_guard<std::mutex> lk(mu);
    ok = failed.ok();
  }
  if (ok) {
    const Deadline dl = Deadline::after_ms(std::min<int64_t>(comm.options_.call_timeout_ms, 10000));
    for (int q = 0; q < n; ++q) {
      const size_t qi = static_cast<size_t>(q);
      while (k.load() > 0 && q != me && sent[qi].value() < base[kCounterSent][qi] && !dl.expired()) {
        const std::vector<int> gone = comm.boot_ ? comm.boot_->hung_up() : std::vector<int>{};
        if (std::find(gone.begin(), gone.end(), q) != gone.end()) break;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    wait_for_captures_of_peers(dl);  // the same for every captured call's last replay
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    stop = true;
  }
  cv.notify_all();
  if (watchdog.joinable()) watchdog.join();
  stop_gates();
  plans.clear();
  if (poster) (void)poster->wait_done(Deadline::after_ms(1000));
}

uint64_t* CallState::failed_word(int r) const {
  return static_cast<uint64_t*>(comm.device_.host_pointer(comm.pool_va_[static_cast<size_t>(r)] + kCallFailed, 8));
}
uint64_t* CallState::published_word(int r) const {
  return static_cast<uint64_t*>(comm.device_.host_pointer(comm.pool_va_[static_cast<size_t>(r)] + kCallPublished, 8));
}
char* CallState::reason_text(int r) const {
  return static_cast<char*>(
      comm.device_.host_pointer(comm.pool_va_[static_cast<size_t>(r)] + kCallReason, kCallReasonBytes));
}
uint64_t* CallState::desc_slot(int r, uint64_t call) const {
  const uint64_t off = kCallDescs + (call % kCallDescCount) * kCallDescBytes;
  return static_cast<uint64_t*>(comm.device_.host_pointer(comm.pool_va_[static_cast<size_t>(r)] + off, kCallDescBytes));
}

CallState& Communicator::calls() {
  if (!calls_) calls_ = std::make_unique<CallState>(*this);
  return *calls_;
}

Status Communicator::async_error() const {
  if (local_replays_)
    if (Status s = local_replays_->get(); !s.ok()) return s;
  if (!calls_) return Status();
  std::lock_guard<std::mutex> lk(calls_->mu);
  return calls_->failed;
}

std::vector<int> Communicator::ranks_gone() const { return boot_ ? boot_->hung_up() : std::vector<int>{}; }

CommStats Communicator::stats() const {
  CommStats s;
  if (calls_) {
    std::lock_guard<std::mutex> lk(calls_->mu);
    s = calls_->counts;
  }
  if (cached_) {
    s.calls += cached_->calls;
    s.cached_plans = cached_->cached_plans();
  }
  for (const ReplayKeeper* k : {calls_ ? &calls_->keeper : nullptr, local_replays_ ? &local_replays_->keeper : nullptr}) {
    if (!k) continue;
    const ReplayKeeper::Timing t = k->timing();
    s.replays += t.replays;
    s.replay_busy_ns += t.busy_ns;
    s.replay_idle_ns += t.idle_ns;
  }
  if (boot_) {
    s.bootstrap_messages_sent = boot_->messages_sent();
    s.bootstrap_messages_received = boot_->messages_received();
  }
  return s;
}

Window Communicator::window_of(const Buffer& b, uint64_t bytes) const {
  if (!calls_ || !b.va) return Window{};
  const int r = me_;
  for (size_t w = 0; w < calls_->windows.size(); ++w) {
    const auto& e = calls_->windows[w];
    if (e.ranks.empty()) continue;
    const Buffer& mine = e.ranks[static_cast<size_t>(r)];
    if (b.va >= mine.va && b.va + bytes <= mine.va + mine.size && b.va + bytes >= b.va)
      return Window{static_cast<int>(w), mine};
  }
  return Window{};
}

Status Communicator::call(const CollectiveArgs& args, StreamOps* stream) { return call_impl(args, stream, nullptr); }

Status Communicator::call_impl(const CollectiveArgs& args, StreamOps* stream, std::vector<StreamOps::Op>* deferred) {
  // Nothing is submitted for a stream that would not run it in order now
  // (a CUDA stream capturing a graph): the call is refused, the
  // communicator unharmed.
  // A capturing stream that records collectives (docs/graphs.md): the call
  // is recorded for replays, through windows, or refused now.
  if (stream && stream->capturing()) {
    if (!boot_) return capture_local(args, *stream);
    return calls().capture(args, *stream);
  }
  if (stream) CONCCL_RETURN_IF_ERROR(stream->ready_to_order().prefix(std::string("call ") + coll_op_name(args.op)));
  // Windows when every buffer given lies in one (ranks in separate
  // processes); else the cached path (cached_calls.hpp), which takes any
  // buffers and, across processes, exchanges a message per call.
  // A buffer that starts in a window but runs past its end is a mistake
  // (the window is smaller than the call needs), never another path.
  size_t given = 0, inside = 0;
  for (const std::vector<Buffer>* v : {&args.send, &args.recv})
    for (const Buffer& b : *v) {
      if (!b.va || !boot_) continue;
      ++given;
      const Window w = window_of(b, 1);
      if (!w.valid()) continue;
      if (!window_of(b, std::max<uint64_t>(b.size, 1)).valid())
        return error(Code::invalid_argument,
                     std::string("call ") + coll_op_name(args.op) + ": a buffer of " + std::to_string(b.size) +
                         " bytes at " + hex(b.va) + " starts in window " + std::to_string(w.id) + " (" +
                         std::to_string(w.local.size) + " bytes at " + hex(w.local.va) +
                         ") and runs past its end: register_window() a buffer large enough for the call");
      ++inside;
    }
  if (given > 0 && inside == given) return calls().run(args, stream, deferred);
  if (calls_) {
    Status failed = async_error();
    if (!failed.ok()) return failed;
  }
  if (!cached_) cached_ = std::make_unique<CachedCalls>(*this);
  return cached_->run(args, stream, Deadline::after_ms(options_.call_timeout_ms), deferred)
      .prefix(std::string("call ") + coll_op_name(args.op));
}

// ---- one call ----

Result<PreparedCall> CallState::prepare(const CollectiveArgs& a) {
  PreparedCall pc;
  pc.name = std::string("call ") + coll_op_name(a.op);
  const std::string& name = pc.name;
  CallDesc& d = pc.d;
  CollectiveArgs& full = pc.full;
  if (a.send.size() > 1 || a.recv.size() > 1)
    return error(Code::invalid_argument, name + ": give this rank's buffers alone (send and recv: {mine}, or none "
                                                "where the op gives this rank none)");
  if (a.timestamps) return error(Code::invalid_argument, name + ": timestamps are for plan(); call() takes none");
  if (a.root < 0 || a.root >= n || (a.op == CollOp::p2p && (a.peer < 0 || a.peer >= n)))
    return error(Code::invalid_argument, name + ": root " + std::to_string(a.root) + (a.op == CollOp::p2p ? " / peer " + std::to_string(a.peer) : "") +
                                             " is not a rank of this " + std::to_string(n) + "-rank communicator");
  if (a.bytes == 0) return error(Code::invalid_argument, name + ": bytes must be > 0");
  const Buffer* s = !a.send.empty() && a.send[0].va ? &a.send[0] : nullptr;
  const Buffer* r = !a.recv.empty() && a.recv[0].va ? &a.recv[0] : nullptr;
  const uint64_t sb = send_bytes(a, me, n), rb = recv_bytes(a, me, n);
  if (sb && !s) return error(Code::invalid_argument, name + ": this rank needs a send buffer of " + std::to_string(sb) + " bytes");
  if (rb && !r) return error(Code::invalid_argument, name + ": this rank needs a receive buffer of " + std::to_string(rb) + " bytes");
  auto where = [&](const Buffer* b, uint64_t need, const char* what, uint64_t* win, uint64_t* off) -> Status {
    *win = *off = kNone;
    if (!b) return Status();
    if (b->size < need)
      return error(Code::invalid_argument, name + ": the " + what + " buffer has " + std::to_string(b->size) +
                                               " bytes; this rank's part of the call needs " + std::to_string(need));
    const Window w = comm.window_of(*b, std::max<uint64_t>(need, 1));
    if (!w.valid())
      return error(Code::invalid_argument, name + ": the " + what + " buffer at " + hex(b->va) + " (" +
                                               std::to_string(std::max<uint64_t>(need, 1)) +
                                               " bytes) lies in no window of this communicator: register_window() "
                                               "the memory first, or use plan(), launch() and wait() (or the C API's "
                                               "NCCL-shaped calls) for buffers outside windows");
    *win = static_cast<uint64_t>(w.id);
    *off = b->va - w.local.va;
    return Status();
  };
  // In place, as NCCL allows it: an all-gather whose send is its chunk of
  // the receive buffer (recv + rank x bytes), an all-to-all whose send is
  // its receive buffer. Every rank's send then follows from its receive
  // buffer, so the ranks' send offsets may differ.
  const bool in_place = s && r &&
                        ((a.op == CollOp::all_gather && s->va == r->va + uint64_t(me) * a.bytes) ||
                         (a.op == CollOp::all_to_all && s->va == r->va));
  d.op = uint64_t(a.op) | uint64_t(a.variant) << 8 | uint64_t(a.root) << 16 |
         uint64_t(a.op == CollOp::p2p ? a.peer : 0) << 32 | uint64_t(in_place) << 48;
  d.bytes = a.bytes;
  d.send_stride = packed_send(a) ? 0 : a.send_stride;
  CONCCL_RETURN_IF_ERROR(where(s, sb, "send", &d.send_window, &d.send_offset));
  CONCCL_RETURN_IF_ERROR(where(r, rb, "receive", &d.recv_window, &d.recv_offset));
  if (in_place) {
    d.send_window = d.recv_window;
    d.send_offset = d.recv_offset;
  }
  // A buffer the op gives this rank none of, but other ranks one: the
  // root's (broadcast, scatter: its send; gather: its recv; p2p: either
  // end's) is taken to sit at this rank's other buffer's place, unless this
  // rank passed one (every rank may pass the same buffers, as NCCL's
  // symmetric windows want). The descriptors check that the ranks agree.
  if (d.send_window == kNone) {
    d.send_window = d.recv_window;
    d.send_offset = d.recv_offset;
  }
  if (d.recv_window == kNone) {
    d.recv_window = d.send_window;
    d.recv_offset = d.send_offset;
  }

  // Every rank's buffers, from the window table.
  full = a;
  full.prelaunch = true;
  full.send.assign(static_cast<size_t>(n), Buffer{});
  full.recv.assign(static_cast<size_t>(n), Buffer{});
  for (int q = 0; q < n; ++q) {
    for (int dir = 1; dir >= 0; --dir) {  // recv first: an in-place send is part of it
      const uint64_t need = dir == 0 ? send_bytes(a, q, n) : recv_bytes(a, q, n);
      if (!need) continue;
      if (dir == 0 && in_place) {
        Buffer b = full.recv[static_cast<size_t>(q)];
        if (a.op == CollOp::all_gather) {
          b.va += uint64_t(q) * a.bytes;
          b.host = b.host ? static_cast<uint8_t*>(b.host) + uint64_t(q) * a.bytes : nullptr;
        }
        b.size = need;
        full.send[static_cast<size_t>(q)] = b;
        continue;
      }
      const uint64_t win = dir == 0 ? d.send_window : d.recv_window, off = dir == 0 ? d.send_offset : d.recv_offset;
      if (win == kNone || win >= windows.size() || windows[win].ranks.empty())
        return error(Code::invalid_argument, name + ": rank " + std::to_string(q) + "'s " +
                                                 (dir == 0 ? "send" : "receive") +
                                                 " buffer has no window this rank can place it in: pass the root's "
                                                 "buffers on every rank, at the same window offsets");
      const Buffer& wb = windows[win].ranks[static_cast<size_t>(q)];
      if (off + need > wb.size)
        return error(Code::invalid_argument, name + ": rank " + std::to_string(q) + "'s window " + std::to_string(win) +
                                                 " has " + std::to_string(wb.size) + " bytes, but the call needs [" +
                                                 std::to_string(off) + ", " + std::to_string(off + need) +
                                                 ") of it (every rank's buffers sit at the same window offsets)");
      Buffer b = wb;
      b.va = wb.va + off;
      b.size = need;
      b.host = comm.device_.host_pointer(b.va, b.size);
      (dir == 0 ? full.send : full.recv)[static_cast<size_t>(q)] = b;
    }
  }

  pc.key = {d.op,          d.bytes,         d.send_window, d.send_offset, d.recv_window,
            d.recv_offset, d.send_stride,    uint64_t(a.engines), uint64_t(a.b2b_ways),
            uint64_t(a.chain_chunks)};
  return pc;
}

Communicator::RankSignals CallState::signals_at(uint64_t posted_at, uint64_t arrive_at, uint64_t phase_at,
                                                uint64_t sent_at) const {
  Communicator::RankSignals sig;
  for (int q = 0; q < n; ++q) {
    const uint64_t pb = comm.pool_va_[static_cast<size_t>(q)];
    sig.arrive.push_back(pb + arrive_at);
    sig.ready.push_back(pb + phase_at);
    sig.trigger.push_back(pb + posted_at);
    sig.sent.push_back(pb + sent_at);
    sig.stamps.push_back(0);
  }
  sig.monotonic = true;
  return sig;
}

Result<std::unique_ptr<Plan>> CallState::compile_plan(const PreparedCall& pc, const Communicator::RankSignals& sig) {
  CollectiveArgs args = pc.full;
  args.variant = comm.automatic_variant(args, true);
  CONCCL_RETURN_IF_ERROR(validate_args(comm, args).prefix(pc.name));
  Result<std::unique_ptr<Plan>> p = comm.compile(args, pc.full, false, &sig);
  if (!p.ok()) return p.status().prefix(pc.name);
  {
    std::lock_guard<std::mutex> lk(mu);
    counts.window_plans++;
  }
  return p;
}

Status CallState::submit_lists(Plan& plan, uint64_t posted_before, const std::vector<uint64_t> (&bases)[kCounters],
                               Deadline dl, const std::string& name, std::vector<std::pair<Queue*, uint64_t>>* held) {
  for (PlanList& l : plan.lists_) {
    if (!l.queue) continue;
    for (const PlanList::WaitPatch& p : l.patches) {
      const uint64_t b = p.counter == kCounterPosted ? posted_before : bases[p.counter][static_cast<size_t>(p.rank)];
      CONCCL_RETURN_IF_ERROR(l.cb.rewrite_wait_ge(p.at, p.dwords, p.va, b + p.rel, p.style).prefix(name));
    }
  }
  return plan.submit_lists(dl, name, held);
}

Status CallState::run(const CollectiveArgs& a, StreamOps* stream, std::vector<StreamOps::Op>* deferred) {
  reap_captures();
  {
    std::lock_guard<std::mutex> lk(mu);
    if (!failed.ok()) return failed;
    counts.calls++;
  }
  Result<PreparedCall> prepared = prepare(a);
  if (!prepared.ok()) return prepared.status();
  const std::string& name = prepared->name;
  Result<Plan*> plan = plan_of(*prepared);
  if (!plan.ok()) return plan.status();
  // Stream-ordered calls before a host-ordered one end first, so that this
  // rank's posted counter only grows.
  if (!stream) CONCCL_RETURN_IF_ERROR(drain_stream_calls(name));
  const uint64_t call = ++k;
  prepared->d.k = call;
  CONCCL_RETURN_IF_ERROR(publish(prepared->d, name));

  // This rank's lists, their waits rewritten for call k, queued behind every
  // rank's "posted k".
  const Deadline dl = Deadline::after_ms(comm.options_.call_timeout_ms);
  Gate gate{call, {}};
  const bool gated = gated_submit();
  if (Status st = submit_lists(**plan, call - 1, base, dl, name, gated ? &gate.held : nullptr); !st.ok()) {
    for (auto& [q, t] : gate.held) q->release(t);
    fail(st);
    return st;
  }
  if (gated && stream) hold_gate(std::move(gate));
  const size_t mi = static_cast<size_t>(me);
  const uint64_t arrive_target = base[kCounterArrive][mi] + (*plan)->expected_[mi];
  const uint64_t sent_target = base[kCounterSent][mi] + (*plan)->sent_expected_[mi];
  for (size_t q = 0; q < static_cast<size_t>(n); ++q) {
    base[kCounterArrive][q] += (*plan)->expected_[q];
    base[kCounterPhase][q] += (*plan)->ready_adds_[q];
    base[kCounterSent][q] += (*plan)->sent_expected_[q];
  }
  if (trace) {
    std::vector<uint64_t> targets;
    for (size_t q = 0; q < static_cast<size_t>(n); ++q)
      targets.insert(targets.end(), {call, base[kCounterArrive][q], base[kCounterSent][q]});
    trace->note_call(call, targets);
  }
  for (uint64_t w : {prepared->d.send_window, prepared->d.recv_window})
    if (w != kNone && w < windows.size()) windows[w].last_call = call;
  {
    std::lock_guard<std::mutex> lk(mu);
    counts.window_calls++;
    if (gated) counts.gated_calls++;
  }
  return stream ? end_on_stream(*stream, call, arrive_target, sent_target,
                                stream_waits_may_poll(comm, prepared->full), dl, name, deferred)
                : end_on_host(call, arrive_target, sent_target, dl, name, gated ? &gate : nullptr);
}

// The plan: compiled once per distinct call, with no exchange (every rank
// compiles the same lists from the same table).
Result<Plan*> CallState::plan_of(const PreparedCall& prepared) {
  auto it = plans.find(prepared.key);
  if (it == plans.end()) {
    Communicator::RankSignals sig = signals_at(kCallPosted, kCallArrive, kCallPhase, kCallSent);
    if (!posted_dev.empty())  // every rank asked for GPU words (a rank that did not has none)
      for (int q = 0; q < n; ++q) sig.trigger[static_cast<size_t>(q)] = posted_dev[static_cast<size_t>(q)].va;
    Result<std::unique_ptr<Plan>> p = compile_plan(prepared, sig);
    if (!p.ok()) return p.status();
    it = plans.emplace(prepared.key, std::move(p).value()).first;
  }
  return it->second.get();
}

Status CallState::drain_stream_calls(const std::string& name) {
  std::unique_lock<std::mutex> lk(mu);
  const Deadline dl = Deadline::after_ms(comm.options_.call_timeout_ms);
  while (!pending.empty() && failed.ok() && !dl.expired()) cv.wait_for(lk, std::chrono::milliseconds(1));
  if (!failed.ok()) return failed;
  if (!pending.empty())
    return error(Code::timeout, name + ": earlier stream-ordered calls did not complete within call_timeout_ms");
  return Status();
}

// Call d.k: its descriptor, then what the other ranks have said of theirs.
// A rank that made another call as the same k fails the communicator.
Status CallState::publish(const CallDesc& d, const std::string& name) {
  const uint64_t call = d.k;
  uint64_t* slot = desc_slot(me, call);
  word_store(&slot[0], 0);
  d.write_fields(slot);
  word_store(&slot[0], call);
  word_store(published_word(me), call);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int q = 0; q < n; ++q) {
    if (q == me || word_load(published_word(q)) < call) continue;
    const uint64_t* o = desc_slot(q, call);
    CallDesc theirs = CallDesc::read_fields(o);
    theirs.k = word_load(&o[0]);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (theirs.k != call || word_load(&o[0]) != call) continue;  // overwritten by a later call: it agreed long ago
    if (theirs == d) continue;
    Status st = error(Code::invalid_argument,
                      name + ": rank " + std::to_string(q) + " made call " + std::to_string(call) + " as " +
                          theirs.describe() + ", but rank " + std::to_string(me) + " as " + d.describe() +
                          " (window+offset): every rank makes the same calls in the same order, with its buffers at "
                          "the same offsets of the same windows; the communicator is now failed");
    fail(st);
    return st;
  }
  return Status();
}

// A host-ordered call: post it, then wait here for this rank's part.
Status CallState::end_on_host(uint64_t call, uint64_t arrive_target, uint64_t sent_target, Deadline dl,
                              const std::string& name, const Gate* gate) {
  const size_t mi = static_cast<size_t>(me);
  last_stream = nullptr;
  posted[mi].set(call);
  if (Status p = post_by_engine(call, dl); !p.ok()) {
    p = p.prefix(name);
    fail(p);
    return p;
  }
  if (gate) open_gate_here(*gate);  // this thread waits anyway: it is the gate
  Status st = wait_here(call, arrive_target, sent_target, base[kCounterSent], dl);
  if (!st.ok()) {
    // Lists of this call may stay queued behind a rank that never posts:
    // the communicator cannot go on.
    st = st.prefix(name);
    fail(st);
  }
  return st;
}

// On the stream: post k once the work before it is done, then make the
// work after it wait for this rank's data and for its lists' end (they
// read its send buffer). All in one step of the stream (CUDA: one
// cuStreamBatchMemOp, or that and a wait kernel where the waits poll:
// `poll`, docs/collectives.md); with `deferred`, the two waits go there
// instead, for the caller to queue later (Communicator::call_impl).
Status CallState::end_on_stream(StreamOps& stream, uint64_t call, uint64_t arrive_target, uint64_t sent_target,
                                bool poll, Deadline dl, const std::string& name,
                                std::vector<StreamOps::Op>* deferred) {
  const size_t mi = static_cast<size_t>(me);
  StreamOps::Op ops[10];
  size_t nops = 0;
  if (&stream != last_stream && last_stream) {
    ops[nops++] = StreamOps::Op{true, arrive[mi].va(), last_arrive};
    ops[nops++] = StreamOps::Op{true, sent[mi].va(), last_sent};
  }
  last_stream = &stream;
  last_arrive = arrive_target;
  last_sent = sent_target;
  for (const SignalStore& w : posted[mi].stores_for(call)) ops[nops++] = StreamOps::Op{false, w.va, w.value};
  // A host-ordered call's post by the engine must land before the stream's
  // store of a later call, or the word would go back (a rank with no part
  // in that call did not wait for its lists, which wait for the post).
  if (poster_unseen) {
    poster_unseen = false;
    if (Status w = poster->wait_done(dl); !w.ok()) {
      w = w.prefix(name + ": the previous call's post in GPU memory");
      fail(w);
      return w;
    }
  }
  if (!posted_dev.empty())  // the stream writes GPU memory at CUDA's address of it
    for (const SignalStore& w : Signal::stores_at(posted_dev[mi].va, posted_dev[mi].twin, call))
      ops[nops++] = StreamOps::Op{false, comm.device_.compute_address(w.va), w.value};
  const StreamOps::Op waits[2] = {{true, arrive[mi].va(), arrive_target, poll, shares_gpu},
                                  {true, sent[mi].va(), sent_target, poll, shares_gpu}};
  if (deferred) {
    deferred->assign(waits, waits + 2);
  } else {
    ops[nops++] = waits[0];
    ops[nops++] = waits[1];
  }
  Status st = stream.batch(std::span<const StreamOps::Op>(ops, nops));
  if (!st.ok()) {
    // The stream refused: post from the host so that no rank waits for this
    // one, and wait here instead.
    posted[mi].set(call);
    if (deferred) deferred->clear();
    Status w = post_by_engine(call, dl);
    if (w.ok()) w = wait_here(call, arrive_target, sent_target, base[kCounterSent], dl);
    return st.prefix(name + ": the stream refused its part (the call was completed from the host" +
                     (w.ok() ? std::string(")") : "; then: " + w.to_string() + ")"));
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    pending.push_back(Pending{call, arrive_target, sent_target, dl, base[kCounterSent]});
    start_watchdog();
  }
  cv.notify_all();
  return Status();
}

Result<CallState::PostedWords> CallState::posted_words_setting() {
  static const std::string v = util::env_str("CONCCL_POSTED_WORDS");
  if (v.empty() || v == "host") return PostedWords::host;
  if (v == "device") return PostedWords::device;
  return error(Code::invalid_argument, "CONCCL_POSTED_WORDS=" + v +
                                           " is not a setting: use \"host\" (the default: window calls' lists "
                                           "wait on each rank's posted word in host memory) or \"device\" (in "
                                           "its GPU's memory, where every rank asks for it)");
}

// A host-ordered post of the GPU word: a release on `poster`, a queue of
// this rank's GPU with nothing else on it (a release behind this rank's
// lists would wait for the lists, which wait for it).
Status CallState::post_by_engine(uint64_t call, Deadline dl) {
  if (posted_dev.empty()) return Status();
  const std::string what = "posting call " + std::to_string(call) + " in GPU memory";
  if (!poster) {
    Result<int> engine = comm.device_.engine_toward(comm.gpu(me), comm.gpu(me));
    if (!engine.ok()) return engine.status().prefix(what);
    QueueOptions qo;
    qo.ring_bytes = 64 << 10;
    Result<std::unique_ptr<Queue>> q = comm.device_.create_queue(comm.gpu(me), *engine, qo);
    if (!q.ok()) return q.status().prefix(what + ": its queue");
    poster = std::move(q).value();
  }
  CommandBuffer cb = poster->command_buffer();
  CONCCL_RETURN_IF_ERROR(cb.signal_set(posted_dev[static_cast<size_t>(me)].va, call).prefix(what));
  poster_unseen = true;
  return poster->submit(cb, dl).prefix(what);
}

}  // namespace conccl
