// src/backends/emu/engine.cpp - one emulated DMA engine: a thread that
// serves its queues like the hardware's scheduler.
//
// The engine sleeps until a doorbell, then serves each of its queues in turn:
// an SDMA ring's packets between rptr and wptr (decoded and executed, rptr
// stored after each), or a GPFIFO channel's GP entries between GP_GET and
// GP_PUT (each entry's pushbuffer segment decoded method header by method
// header, GP_GET stored after each entry). A wait that is not yet satisfied
// (POLL_REGMEM, semaphore acquire) blocks only its own queue - the engine
// moves on to its other queues, as SDMA's round robin and the GPU's channel
// time slicing do - and is re-evaluated when memory changes or every 200 us.
// On an SDMA engine an undecodable packet or a page fault halts the engine;
// on a copy engine it kills only that channel (RC error), as on hardware.
#include <cinttypes>
#include <cstdio>

#include "backends/emu/node.hpp"
#include "packets/hopper_ce.hpp"
#include "packets/sdma_asm.hpp"
#include "queue/gpfifo_queue.hpp"
#include "util/thread_name.hpp"

namespace conccl::emu {

namespace {

constexpr auto kIdleWait = std::chrono::milliseconds(100);
constexpr auto kPollWait = std::chrono::microseconds(200);
constexpr int kBudget = 4096;  // packets per queue per turn (fairness)
// Waiters on a queue's progress (ring space, wait_consumed, signal waits)
// are woken after this many packets, after any completion write (fence,
// atomic), after any packet that moved kProgressBytes or was delayed, and
// whenever the engine leaves the queue. Waking them after every packet
// costs a futex syscall per packet whenever someone sleeps on the queue,
// which made the engine several times slower under back-pressure.
constexpr int kProgressEvery = 32;
constexpr uint64_t kProgressBytes = 64 << 10;

bool is_completion(sdma::Pkt p) {
  return p == sdma::Pkt::fence || p == sdma::Pkt::atomic || p == sdma::Pkt::atomic_add64 ||
         p == sdma::Pkt::mem_incr;
}

// The kernel's HDP-flush form, or ROCr's firmware flush (POLL_REGMEM
// register form with dword 2 = 0x80000000, core/inc/sdma_registers.h).
bool is_hdp_flush(const sdma::Packet& p) {
  return p.pkt == sdma::Pkt::hdp_flush || (p.pkt == sdma::Pkt::poll_reg && p.get(sdma::Key::req) == 0x80000000u);
}

}  // namespace

Status EmuEvent::wait(uint64_t target, Deadline deadline) {
  while (count() < target) {
    const uint32_t seen = wake_.seq();
    if (count() >= target) break;
    if (deadline.expired())
      return error(Code::timeout, "TRAP event count " + std::to_string(count()) + " did not reach " +
                                      std::to_string(target) + " before the deadline");
    wake_.wait(seen, std::min<std::chrono::nanoseconds>(deadline.remaining(), std::chrono::milliseconds(10)));
  }
  return Status();
}

Engine::Engine(Node& node, int gpu, int id, Isa isa) : node_(node), gpu_(gpu), id_(id), isa_(isa) {}

Engine::~Engine() { stop(); }

void Engine::stop() {
  stop_.store(true, std::memory_order_release);
  wake_.bump();
  if (thread_.joinable()) thread_.join();
}

void Engine::start_locked() {
  if (started_.load(std::memory_order_acquire)) return;
  thread_ = util::named_thread("conccl-emu-" + std::to_string(gpu_) + "." + std::to_string(id_), [this] { run(); });
  started_.store(true, std::memory_order_release);
}

void Engine::add_queue(EmuQueue* q) {
  std::lock_guard<std::mutex> lock(mu_);
  queues_.push_back(q);
  start_locked();
}

void Engine::add_channel(EmuChannel* c) {
  std::lock_guard<std::mutex> lock(mu_);
  channels_.push_back(c);
  start_locked();
}

void Engine::remove_channel(EmuChannel* c) {
  std::lock_guard<std::mutex> run(run_mu_);
  std::lock_guard<std::mutex> lock(mu_);
  channels_.erase(std::remove(channels_.begin(), channels_.end(), c), channels_.end());
  if (detail_.wait.queue == c->id) detail_.wait.queue = -1;
}

void Engine::fault_channel(EmuChannel& c, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    c.fault = "gpu " + std::to_string(gpu_) + " LCE" + std::to_string(id_) + " channel " + std::to_string(c.id) +
              ": " + why;
    c.faulted.store(true, std::memory_order_release);
  }
  c.progress.bump();
}

void Engine::remove_queue(EmuQueue* q) {
  std::lock_guard<std::mutex> run(run_mu_);  // not while the engine is inside it
  std::lock_guard<std::mutex> lock(mu_);
  queues_.erase(std::remove(queues_.begin(), queues_.end(), q), queues_.end());
  if (faulted_queue_ == q->id) faulted_queue_ = -1;
}

void Engine::set_polling(bool on) {
  if (polling_.exchange(on, std::memory_order_acq_rel) != on) node_.polling_engines.fetch_add(on ? 1 : -1);
}

void Engine::set_injection(const Injection& inj) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    injection_ = inj;
  }
  stall_.store(inj.stall, std::memory_order_release);
  drop_.store(inj.drop_completions, std::memory_order_release);
  delay_us_.store(inj.delay.count(), std::memory_order_release);
  slowdown_.store(std::max<uint32_t>(inj.slowdown, 1), std::memory_order_release);
  early_rptr_.store(inj.early_rptr, std::memory_order_release);
  wake_.bump();
}

EngineStatus Engine::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStatus s = detail_;
  s.state = static_cast<EngineStatus::State>(state_.load(std::memory_order_acquire));
  if (halted_.load()) s.state = EngineStatus::State::halted;
  else if (stall_.load()) s.state = EngineStatus::State::stalled;
  return s;
}

EngineStats Engine::stats() const {
  return EngineStats{packets_.load(), bytes_.load(), dropped_.load(), poll_timeouts_.load(), hdp_flushes_.load(),
                     cache_ops_.load()};
}

void Engine::reset() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (EmuQueue* q : queues_)
      if (q->id == faulted_queue_) {
        const uint64_t w = std::atomic_ref<uint64_t>(*q->wptr).load();
        std::atomic_ref<uint64_t>(*q->rptr).store(w);
        // A reset queue has nothing outstanding: its completion word says so.
        if (q->done) std::atomic_ref<uint32_t>(*q->done).store(static_cast<uint32_t>(w), std::memory_order_release);
        q->progress.bump();
      }
    faulted_queue_ = -1;
    detail_ = EngineStatus{};
    halted_.store(false, std::memory_order_release);
    state_.store(static_cast<uint8_t>(EngineStatus::State::idle));
  }
  wake_.bump();
}

void Engine::halt(const EmuQueue& q, uint64_t rptr, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    detail_.fault = "gpu " + std::to_string(gpu_) + " engine " + std::to_string(id_) + " queue " +
                    std::to_string(q.id) + " at rptr " + hex(rptr) + ": " + why;
    detail_.fault_pos = rptr;
    faulted_queue_ = q.id;
    halted_.store(true, std::memory_order_release);
    state_.store(static_cast<uint8_t>(EngineStatus::State::halted));
  }
  // Wake anyone waiting on this queue so they see the fault at once.
  const_cast<EmuQueue&>(q).progress.bump();
}

void Engine::run() {
  std::vector<EmuQueue*> qs;
  std::vector<EmuChannel*> cs;
  while (!stop_.load(std::memory_order_acquire)) {
    const uint32_t seen = wake_.seq();
    bool progressed = false, blocked = false;
    if (!halted_.load(std::memory_order_acquire) && !stall_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> run(run_mu_);
      {
        std::lock_guard<std::mutex> lock(mu_);
        qs = queues_;
        cs = channels_;
      }
      for (EmuQueue* q : qs) {
        const Step s = run_queue(*q);
        progressed |= s == Step::advanced;
        blocked |= s == Step::blocked;
        if (s == Step::halted) break;
      }
      for (EmuChannel* c : cs) {
        const Step s = run_channel(*c);
        progressed |= s == Step::advanced;
        blocked |= s == Step::blocked;
      }
    }
    if (!halted_.load()) {
      state_.store(static_cast<uint8_t>(blocked ? EngineStatus::State::polling : EngineStatus::State::idle));
      if (!blocked) {
        std::lock_guard<std::mutex> lock(mu_);
        detail_.wait.queue = -1;
      }
    }
    set_polling(blocked);
    if (!progressed) {
      wake_.wait(seen, blocked ? std::chrono::nanoseconds(kPollWait) : std::chrono::nanoseconds(kIdleWait));
    }
  }
  set_polling(false);
}

Engine::Step Engine::run_queue(EmuQueue& q) {
  std::atomic_ref<uint64_t> rptr_ref(*q.rptr);
  uint64_t r = rptr_ref.load(std::memory_order_relaxed);
  const uint64_t w = std::atomic_ref<uint64_t>(*q.wptr).load(std::memory_order_acquire);
  if (r >= w) return Step::idle;
  if (w - r > q.size) {
    halt(q, r, "wptr " + hex(w) + " is more than a ring (" + std::to_string(q.size) + " bytes) ahead of rptr");
    return Step::halted;
  }
  Step result = Step::idle;
  int unannounced = 0;  // packets consumed since waiters were last woken
  for (int budget = kBudget; r < w && budget > 0; --budget) {
    if (stall_.load(std::memory_order_acquire) || stop_.load(std::memory_order_acquire)) break;
    const uint64_t off = r & (q.size - 1);
    const uint64_t avail = std::min<uint64_t>(w - r, q.size - off) / 4;
    Result<sdma::Packet> p = sdma::decode(isa_.gen(), std::span<const uint32_t>(q.ring + off / 4, avail));
    if (!p.ok()) {
      halt(q, r, "invalid packet: " + p.status().message());
      return Step::halted;
    }
    ExecContext ctx{&node_, &q, false, 0};
    if (is_completion(p->pkt)) {
      uint32_t d = drop_.load(std::memory_order_acquire);
      while (d > 0 && !drop_.compare_exchange_weak(d, d - 1)) {
      }
      ctx.drop_completion = d > 0;
    }
    // The early-rptr model reports the fetch before the work (never for a
    // wait or a conditional: rptr is also this engine's cursor).
    if (early_rptr_.load(std::memory_order_acquire) && p->pkt != sdma::Pkt::poll && p->pkt != sdma::Pkt::cond_exe) {
      rptr_ref.store(r + p->dwords * 4, std::memory_order_release);
      q.progress.bump();
    }
    // A poll read again while it still fails is not work: the engine stays
    // "polling" for anyone who looks (a status read between two reads of the
    // word must not say "running").
    if (p->pkt != sdma::Pkt::poll || q.poll_evals.load(std::memory_order_relaxed) == 0)
      state_.store(static_cast<uint8_t>(EngineStatus::State::running));
    const int64_t delay_us = delay_us_.load(std::memory_order_acquire);
    if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    const ExecOutcome o = throttled([&] { return execute_packet(ctx, isa_.gen(), *p); });
    if (is_hdp_flush(*p)) hdp_flushes_.fetch_add(1, std::memory_order_relaxed);
    if (p->pkt == sdma::Pkt::gcr || p->pkt == sdma::Pkt::gcr_user) cache_ops_.fetch_add(1, std::memory_order_relaxed);
    if (o.result == ExecResult::fault) {
      halt(q, r, o.fault + " (packet: " + sdma::format_packet(*p) + ")");
      return Step::halted;
    }
    if (o.result == ExecResult::blocked) {
      const uint64_t retry = p->get(sdma::Key::retry);
      const uint32_t evals = q.poll_evals.fetch_add(1, std::memory_order_relaxed) + 1;
      if (retry == 0xFFF || evals <= retry) {
        std::lock_guard<std::mutex> lock(mu_);
        detail_.wait = o.wait;
        detail_.wait.queue = q.id;
        if (unannounced) q.progress.bump();
        return result == Step::advanced ? Step::advanced : Step::blocked;
      }
      poll_timeouts_.fetch_add(1);  // finite retry exhausted: move on
    }
    q.poll_evals.store(0, std::memory_order_relaxed);
    const uint64_t len = (p->dwords + o.skip_dwords) * 4;
    if (len > w - r) {
      halt(q, r, "cond_exe skips " + std::to_string(o.skip_dwords) + " dwords past the write pointer");
      return Step::halted;
    }
    // Counted before rptr moves: a waiter that sees the packet done sees it counted.
    packets_.fetch_add(1, std::memory_order_relaxed);
    if (o.bytes) bytes_.fetch_add(o.bytes, std::memory_order_relaxed);
    if (o.dropped) dropped_.fetch_add(1, std::memory_order_relaxed);
    r += len;
    rptr_ref.store(r, std::memory_order_release);
    if (o.wrote_memory) node_.memory_changed();
    if (++unannounced >= kProgressEvery || r >= w || is_completion(p->pkt) || o.bytes >= kProgressBytes ||
        delay_us > 0) {
      q.progress.bump();
      unannounced = 0;
    }
    result = Step::advanced;
  }
  if (unannounced) q.progress.bump();  // stalled, stopping, or out of budget
  return result;
}

}  // namespace conccl::emu

namespace conccl::emu {

// One GPFIFO channel: GP entries from GP_GET up to GP_PUT, each entry's
// segment header by header (packets/hopper_ce decode_header), each data dword
// one method write (execute_hopper.cpp). The cursor (entry, header, data
// index) lives in the channel, so a blocked acquire resumes where it stopped.
Engine::Step Engine::run_channel(EmuChannel& c) {
  if (c.faulted.load(std::memory_order_acquire)) return Step::idle;
  const uint32_t put = std::atomic_ref<uint32_t>(c.userd[kUserdGpPutOffset / 4]).load(std::memory_order_acquire);
  Step result = Step::idle;
  for (int budget = kBudget; budget > 0; --budget) {
    if (stall_.load(std::memory_order_acquire) || stop_.load(std::memory_order_acquire)) break;
    if (!c.in_segment) {
      if (c.get % c.entries == put % c.entries) break;  // GP_GET == GP_PUT: empty
      const hopper::GpEntry e = hopper::decode_gp_entry(c.gp[c.get % c.entries]);
      c.seg_va = e.addr;
      c.seg_dwords = e.dwords;
      c.seg_pos = 0;
      c.data_idx = 0;
      c.in_segment = true;
    }
    const auto* seg = static_cast<const uint32_t*>(node_.translate(c.seg_va, uint64_t(c.seg_dwords) * 4));
    if (!seg && c.seg_dwords) {
      fault_channel(c, "MMU fault: pushbuffer segment [" + hex(c.seg_va) + ", +" + std::to_string(c.seg_dwords * 4) +
                           ") of GP entry " + std::to_string(c.get) + " is outside every mapping");
      return Step::advanced;
    }
    if (c.seg_pos >= c.seg_dwords) {  // entry done: GP_GET moves on
      c.in_segment = false;
      ++c.get;
      std::atomic_ref<uint32_t>(c.userd[kUserdGpGetOffset / 4]).store(c.get % c.entries, std::memory_order_release);
      c.progress.bump();
      result = Step::advanced;
      continue;
    }
    Result<hopper::Header> h = hopper::decode_header(seg[c.seg_pos]);
    if (!h.ok()) {
      fault_channel(c, "invalid method header " + hex(seg[c.seg_pos]) + " at dword " + std::to_string(c.seg_pos) +
                           " of the segment at " + hex(c.seg_va) + ": " + h.status().message());
      return Step::advanced;
    }
    const bool immd = h->op == hopper::HdrOp::immd;
    const uint32_t n = immd ? 1 : h->count;
    if (!immd && c.seg_pos + 1 + n > c.seg_dwords) {
      fault_channel(c, "method header at dword " + std::to_string(c.seg_pos) + " has " + std::to_string(n) +
                           " data dwords but the segment ends after " + std::to_string(c.seg_dwords));
      return Step::advanced;
    }
    const int64_t delay_us = delay_us_.load(std::memory_order_acquire);
    if (delay_us > 0 && c.data_idx == 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    for (; c.data_idx < n; ++c.data_idx) {
      uint16_t mthd = h->method;
      if (h->op == hopper::HdrOp::inc) mthd = static_cast<uint16_t>(h->method + 4 * c.data_idx);
      else if (h->op == hopper::HdrOp::one_inc && c.data_idx > 0) mthd = static_cast<uint16_t>(h->method + 4);
      const uint32_t data = immd ? h->count : seg[c.seg_pos + 1 + c.data_idx];
      MethodContext ctx{&node_, &c, false};
      if (method_is_completion(c, h->subch, mthd, data)) {
        uint32_t d = drop_.load(std::memory_order_acquire);
        while (d > 0 && !drop_.compare_exchange_weak(d, d - 1)) {
        }
        ctx.drop_completion = d > 0;
      }
      // As for a poll: an acquire read again while it still fails is not work.
      if (c.poll_evals.load(std::memory_order_relaxed) == 0)
        state_.store(static_cast<uint8_t>(EngineStatus::State::running));
      const ExecOutcome o = throttled([&] { return execute_method(ctx, h->subch, mthd, data); });
      if (o.result == ExecResult::fault) {
        fault_channel(c, o.fault);
        return Step::advanced;
      }
      if (o.result == ExecResult::blocked) {
        c.poll_evals.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(mu_);
        detail_.wait = o.wait;
        detail_.wait.queue = c.id;
        return result == Step::advanced ? Step::advanced : Step::blocked;
      }
      c.poll_evals.store(0, std::memory_order_relaxed);
      packets_.fetch_add(1, std::memory_order_relaxed);
      if (o.bytes) bytes_.fetch_add(o.bytes, std::memory_order_relaxed);
      if (o.dropped) dropped_.fetch_add(1, std::memory_order_relaxed);
      if (o.wrote_memory) {
        node_.memory_changed();
        c.progress.bump();
      }
    }
    c.seg_pos += immd ? 1 : 1 + n;
    c.data_idx = 0;
    result = Step::advanced;
  }
  return result;
}

}  // namespace conccl::emu
