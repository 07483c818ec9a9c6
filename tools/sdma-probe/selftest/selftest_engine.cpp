// tools/sdma-probe/selftest_engine.cpp
#include "selftest/selftest_engine.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "cli.hpp"

namespace probe::selftest {

using conccl::Buffer;
using conccl::Code;
using conccl::CommandBuffer;
using conccl::Deadline;
using conccl::QueueSpan;
using conccl::Signal;
using conccl::Status;

namespace {

struct CopyCase {
  size_t bytes, src_off, dst_off;
};
// Odd sizes and offsets on both sides, small to 256 KiB.
constexpr CopyCase kCopyCases[] = {{1, 0, 0},         {3, 1, 2},         {64, 0, 0},       {4093, 3, 1},
                                   {65536, 0, 0},     {65541, 7, 3},     {262145, 1, 6}};
// Fills are dword-granular (dst and size 4-aligned).
struct FillCase {
  size_t bytes, dst_off;
};
// The last, 4 MiB + 36 bytes, crosses ROCr's fill limit (CONSTANT_FILL::kMaxSize_
// 0x3fffe0, ROCR-Runtime core/inc/sdma_registers.h) on every generation, so a fill
// count field narrower than the library believes (gfx90a's 30 bits rest on one
// Linux patch) shows as unfilled bytes here, whatever the generation's limit.
constexpr FillCase kFillCases[] = {{4, 0}, {12, 4}, {4096, 0}, {65548, 8}, {262148, 12}, {(4u << 20) + 36, 4}};
// Peer copies: one odd-sized copy into each peer tested.
constexpr CopyCase kPeerCase = {65539, 1, 5};
// How long the poll check lets the engine sit on its poll before releasing it.
constexpr auto kPollHold = std::chrono::milliseconds(2);
// Bytes checked at each of the bandwidth copy's spots.
constexpr size_t kSpotBytes = 256;
constexpr size_t kSpots = 33;

CopyCase cross_copy_case(const conccl::Caps& c) { return {c.max_copy_bytes + 4099, 1, 3}; }
FillCase cross_fill_case(const conccl::Caps& c) { return {c.max_fill_bytes + 36, 4}; }

Outcome from_status(const Status& st) {
  Outcome o;
  o.cell = st.code() == Code::timeout ? Cell::hung : st.code() == Code::device_fault ? Cell::faulted : Cell::failed;
  o.message = st.to_string();
  return o;
}

Outcome failed(std::string message) { return {Cell::failed, std::move(message), {}}; }
Outcome skipped(std::string why) { return {Cell::skipped, std::move(why), {}}; }

}  // namespace

size_t buffer_bytes_needed(const Settings& s, const conccl::Caps& caps) {
  size_t need = static_cast<size_t>(s.bandwidth_bytes);
  auto span = [](size_t bytes, size_t a, size_t b) { return std::max(a, b) + bytes + 2 * kGuard; };
  for (const CopyCase& c : kCopyCases) need = std::max(need, span(c.bytes, c.src_off, c.dst_off));
  need = std::max(need, span(kPeerCase.bytes, kPeerCase.src_off, kPeerCase.dst_off));
  for (const FillCase& c : kFillCases) need = std::max(need, span(c.bytes, 0, c.dst_off));
  if (caps.max_copy_bytes <= kCheapLimit) {
    const CopyCase c = cross_copy_case(caps);
    need = std::max(need, span(c.bytes, c.src_off, c.dst_off));
  }
  if (caps.max_fill_bytes <= kCheapLimit) {
    const FillCase c = cross_fill_case(caps);
    need = std::max(need, span(c.bytes, 0, c.dst_off));
  }
  return (need + 4095) & ~size_t(4095);
}

std::vector<int> peers_to_test(const conccl::GpuInfo& g, size_t engine_index, bool all_peers) {
  std::vector<int> linked, recommended;
  const int engine = g.engines.empty() ? -1 : g.engines[engine_index % g.engines.size()].id;
  for (const conccl::LinkInfo& l : g.links) {
    if (l.peer == g.index) continue;
    linked.push_back(l.peer);
    if (std::find(l.recommended_engines.begin(), l.recommended_engines.end(), engine) != l.recommended_engines.end())
      recommended.push_back(l.peer);
  }
  std::sort(linked.begin(), linked.end());
  if (all_peers || linked.empty()) return linked;
  std::vector<int> out;
  if (!recommended.empty()) out.push_back(recommended[engine_index % recommended.size()]);
  const int rotated = linked[engine_index % linked.size()];
  if (std::find(out.begin(), out.end(), rotated) == out.end()) out.push_back(rotated);
  return out;
}

conccl::Result<std::unique_ptr<EngineRun>> EngineRun::create(conccl::Device& dev, const Memory& mem, int gpu,
                                                             int engine, const Settings& s, uint64_t seed) {
  std::unique_ptr<EngineRun> run(new EngineRun(dev, mem, gpu, s, seed));
  conccl::Result<std::unique_ptr<conccl::Queue>> q = dev.create_queue(gpu, engine);
  if (!q.ok()) return q.status();
  run->q_ = std::move(*q);
  for (Signal* sig : {&run->done_, &run->sig_, &run->gate_, &run->atom_}) {
    conccl::Result<Signal> r = Signal::create(dev, -1, sig == &run->atom_ ? 1000 : 0);
    if (!r.ok()) return r.status().prefix("selftest signal");
    *sig = std::move(*r);
  }
  conccl::Result<conccl::UniqueBuffer> ts = conccl::UniqueBuffer::alloc(dev, -1, 4096, conccl::MemKind::host);
  if (!ts.ok()) return ts.status().prefix("selftest timestamp slots");
  run->ts_ = std::move(*ts);
  return run;
}

uint64_t EngineRun::read64(uint64_t va) const {
  auto* p = static_cast<uint64_t*>(dev_.host_pointer(va, 8));
  return p ? std::atomic_ref<uint64_t>(*p).load(std::memory_order_acquire) : 0;
}

Outcome EngineRun::submit(CommandBuffer& cb, Deadline deadline, uint64_t* value, QueueSpan* span) {
  const uint64_t v = next_ + 1;
  if (Status st = done_.signal_set(cb, v); !st.ok()) return from_status(st);
  next_ = v;
  *value = v;
  // Data the CPU wrote through a write-combined BAR mapping must have left
  // the CPU before the engine reads it (x86: this is an MFENCE).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (Status st = q_->submit(cb, deadline, span); !st.ok()) return from_status(st);
  return {};
}

Outcome EngineRun::await(uint64_t value, Deadline deadline, const QueueSpan& span) {
  Status st = done_.wait(value, deadline, &span);
  if (st.ok()) return {};
  Outcome o = from_status(st);
  if (o.cell == Cell::hung) o.hang_kind = conccl::hang_kind_name(conccl::classify_hang(span, done_, value));
  if (o.cell == Cell::faulted) o.hang_kind = "engine halted";
  return o;
}

Outcome EngineRun::finish(CommandBuffer& cb) {
  const Deadline deadline = Deadline::after_ms(static_cast<int64_t>(s_.timeout_ms));
  uint64_t v = 0;
  QueueSpan span;
  if (Outcome o = submit(cb, deadline, &v, &span); o.cell != Cell::ok) return o;
  return await(v, deadline, span);
}

Outcome EngineRun::copy_case(const Buffer& src, const Buffer& dst, size_t bytes, size_t src_off, size_t dst_off) {
  uint8_t* s = src.as<uint8_t>() + kGuard + src_off;
  uint8_t* window = dst.as<uint8_t>() + dst_off;  // guard, range, guard
  const size_t wbytes = bytes + 2 * kGuard;
  random_bytes(rng_, s, bytes);
  random_bytes(rng_, window, wbytes);
  for (size_t i = 0; i < bytes; ++i) window[kGuard + i] = static_cast<uint8_t>(~s[i]);  // a missed byte shows
  std::vector<uint8_t> want(window, window + wbytes);
  std::memcpy(want.data() + kGuard, s, bytes);

  CommandBuffer cb = q_->command_buffer();
  if (Status st = cb.copy(dst.va + dst_off + kGuard, src.va + kGuard + src_off, bytes); !st.ok())
    return from_status(st);
  if (Outcome o = finish(cb); o.cell != Cell::ok) return o;
  bytes_moved_ += bytes;
  std::vector<uint8_t> got(window, window + wbytes);
  const std::string diff = first_difference(got.data(), want.data(), wbytes, kGuard, kGuard + bytes);
  if (diff.empty()) return {};
  return failed("copy of " + std::to_string(bytes) + " bytes (source +" + std::to_string(src_off) +
                ", destination +" + std::to_string(dst_off) + "): " + diff);
}

Outcome EngineRun::fill_case(const Buffer& dst, size_t bytes, size_t dst_off) {
  uint8_t* window = dst.as<uint8_t>() + dst_off;
  const size_t wbytes = bytes + 2 * kGuard;
  const auto value = static_cast<uint32_t>(rng_());
  const uint32_t other = ~value;
  random_bytes(rng_, window, wbytes);
  for (size_t i = 0; i < bytes; i += 4) std::memcpy(window + kGuard + i, &other, 4);
  std::vector<uint8_t> want(window, window + wbytes);
  for (size_t i = 0; i < bytes; i += 4) std::memcpy(want.data() + kGuard + i, &value, 4);

  CommandBuffer cb = q_->command_buffer();
  if (Status st = cb.fill(dst.va + dst_off + kGuard, value, bytes); !st.ok()) return from_status(st);
  if (Outcome o = finish(cb); o.cell != Cell::ok) return o;
  bytes_moved_ += bytes;
  std::vector<uint8_t> got(window, window + wbytes);
  const std::string diff = first_difference(got.data(), want.data(), wbytes, kGuard, kGuard + bytes);
  if (diff.empty()) return {};
  return failed("fill of " + std::to_string(bytes) + " bytes at +" + std::to_string(dst_off) + " with " +
                conccl::hex(value) + ": " + diff);
}

Outcome EngineRun::check_copy() {
  const GpuMemory& m = mem_.gpu(gpu_);
  std::vector<CopyCase> cases(std::begin(kCopyCases), std::end(kCopyCases));
  if (q_->caps().max_copy_bytes <= kCheapLimit) cases.push_back(cross_copy_case(q_->caps()));
  for (const CopyCase& c : cases)
    if (Outcome o = copy_case(m.src, m.dst, c.bytes, c.src_off, c.dst_off); o.cell != Cell::ok) return o;
  return {};
}

Outcome EngineRun::check_fill() {
  const GpuMemory& m = mem_.gpu(gpu_);
  std::vector<FillCase> cases(std::begin(kFillCases), std::end(kFillCases));
  if (q_->caps().max_fill_bytes <= kCheapLimit) cases.push_back(cross_fill_case(q_->caps()));
  for (const FillCase& c : cases)
    if (Outcome o = fill_case(m.dst, c.bytes, c.dst_off); o.cell != Cell::ok) return o;
  return {};
}

// signal_set: the value (and the SDMA twin at +8) as stored by the engine.
Outcome EngineRun::check_signal() {
  const uint64_t v = (rng_() >> 4) | 0x80000001ull;  // a low dword >= 2^31 and a high dword
  CommandBuffer cb = q_->command_buffer();
  if (Status st = sig_.signal_set(cb, v); !st.ok()) return from_status(st);
  if (Outcome o = finish(cb); o.cell != Cell::ok) return o;
  if (sig_.value() != v)
    return failed("signal_set(" + conccl::hex(v) + ") left the signal at " + conccl::hex(sig_.value()));
  if (sig_.has_twin() && read64(sig_.va() + 8) != v + Signal::kTwinOffset)
    return failed("signal_set(" + conccl::hex(v) + ") left the twin at +8 at " + conccl::hex(read64(sig_.va() + 8)) +
                  ", expected " + conccl::hex(v + Signal::kTwinOffset));
  return {};
}

// The host sleeps on the queue's wake-up event (SDMA TRAP) or, where the
// backend has no countable event (NVIDIA), in wait_done on the non-stall
// interrupt; the work before the wake-up must be done when it comes.
Outcome EngineRun::check_wake() {
  if (!q_->caps().interrupt_wakeup) return skipped("this engine cannot wake the host (caps().interrupt_wakeup false)");
  conccl::Event* ev = q_->wake_event();
  if (!ev && q_->isa().is_sdma())
    return skipped("this queue has no wake-up event: TRAP wake-ups are off (the topology notes of `sdma-probe list` "
                   "say why); waits poll instead");
  const uint64_t v = sig_.value() + 1;
  const uint64_t before = ev ? ev->count() : 0;
  CommandBuffer cb = q_->command_buffer();
  Status st = sig_.signal_set(cb, v);
  if (st.ok()) st = q_->record_wake(cb);
  if (!st.ok()) return from_status(st);
  const Deadline deadline = Deadline::after_ms(static_cast<int64_t>(s_.timeout_ms));
  uint64_t done_value = 0;
  QueueSpan span;
  if (Outcome o = submit(cb, deadline, &done_value, &span); o.cell != Cell::ok) return o;
  if (ev) {
    // Wake-ups coalesce and an earlier submission's may still arrive: sleep
    // until one comes that finds the work before it done.
    for (uint64_t seen = before; st.ok() && sig_.value() < v; seen = ev->count()) st = ev->wait(seen + 1, deadline);
  } else {
    st = q_->wait_done(deadline, span.end);
  }
  if (st.code() == Code::timeout)
    return {Cell::hung, "no wake-up after the work within " + std::to_string(s_.timeout_ms) + " ms: " +
                            st.message() + "\n" + q_->diagnose(), "no wake-up"};
  if (!st.ok()) return from_status(st);
  if (sig_.value() < v)
    return failed("the queue completed but the work queued ahead of the wake-up is not visible (signal " +
                  std::to_string(sig_.value()) + ", expected " + std::to_string(v) + ")");
  return await(done_value, deadline, span);
}

// wait_ge on a host signal: the engine must hold the work behind it until
// the host releases the signal, then run it.
Outcome EngineRun::check_poll() {
  const uint64_t target = gate_.value() + 1;
  CommandBuffer cb = q_->command_buffer();
  if (Status st = gate_.wait_ge(cb, target); !st.ok()) return from_status(st);
  const Deadline deadline = Deadline::after_ms(static_cast<int64_t>(s_.timeout_ms));
  uint64_t v = 0;
  QueueSpan span;
  if (Outcome o = submit(cb, deadline, &v, &span); o.cell != Cell::ok) return o;
  std::this_thread::sleep_for(kPollHold);
  const bool ran_early = done_.value() >= v;
  gate_.set(target);
  if (Outcome o = await(v, deadline, span); o.cell != Cell::ok) return o;
  if (ran_early)
    return failed("the work behind wait_ge(signal >= " + std::to_string(target) +
                  ") ran before the host released the signal: the poll did not wait");
  return {};
}

Outcome EngineRun::check_atomic() {
  if (!q_->caps().atomic64)
    return skipped("signal_add is a 64-bit ATOMIC, and this queue's path to memory has no 64-bit atomics "
                   "(caps().atomic64 false: see the topology notes)");
  const uint64_t base = atom_.value();
  CommandBuffer cb = q_->command_buffer();
  Status st = atom_.signal_add(cb, 5);
  if (st.ok()) st = atom_.signal_add(cb, 7);
  if (!st.ok()) return from_status(st);
  if (Outcome o = finish(cb); o.cell != Cell::ok) return o;
  if (atom_.value() != base + 12)
    return failed("signal_add 5 then 7 from " + std::to_string(base) + " gave " + std::to_string(atom_.value()) +
                  ", expected " + std::to_string(base + 12));
  if (atom_.has_twin() && read64(atom_.va() + 8) != base + 12 + Signal::kTwinOffset)
    return failed("signal_add left the twin at +8 at " + conccl::hex(read64(atom_.va() + 8)) + ", expected " +
                  conccl::hex(base + 12 + Signal::kTwinOffset));
  return {};
}

// Two timestamps around a small copy: both written, the second not earlier.
Outcome EngineRun::check_timestamp() {
  const GpuMemory& m = mem_.gpu(gpu_);
  const Buffer& ts = ts_.get();
  std::memset(ts.host, 0, ts.size);
  const uint64_t slot0 = ts.va, slot1 = ts.va + 64;
  const uint32_t at = q_->caps().timestamp_offset;
  CommandBuffer cb = q_->command_buffer();
  Status st = cb.timestamp(slot0);
  if (st.ok()) st = cb.copy(m.dst.va, m.src.va, 4096);
  if (st.ok()) st = cb.timestamp(slot1);
  if (!st.ok()) return from_status(st);
  if (Outcome o = finish(cb); o.cell != Cell::ok) return o;
  bytes_moved_ += 4096;
  const uint64_t t0 = read64(slot0 + at), t1 = read64(slot1 + at);
  if (t0 == 0 || t1 == 0) return failed("a timestamp was not written (slots read " + conccl::hex(t0) + ", " +
                                        conccl::hex(t1) + ")");
  if (t1 < t0)
    return failed("the second timestamp (" + std::to_string(t1) + ") is earlier than the first (" +
                  std::to_string(t0) + ")");
  return {};
}

Outcome EngineRun::bandwidth(double* gbps) {
  *gbps = 0;
  const GpuMemory& m = mem_.gpu(gpu_);
  const size_t n = static_cast<size_t>(s_.bandwidth_bytes);
  const size_t spot = std::min(kSpotBytes, n);
  auto* s = m.src.as<uint8_t>();
  auto* d = m.dst.as<uint8_t>();
  for (int rep = 0; rep < s_.reps; ++rep) {
    for (size_t k = 0; k < kSpots; ++k) {  // poison the spots, so a copy that did not happen shows
      const size_t o = (n - spot) / (kSpots - 1) * k;
      for (size_t i = 0; i < spot; ++i) d[o + i] = static_cast<uint8_t>(~s[o + i]);
    }
    CommandBuffer cb = q_->command_buffer();
    if (Status st = cb.copy(m.dst.va, m.src.va, n); !st.ok()) return from_status(st);
    const auto t0 = std::chrono::steady_clock::now();
    if (Outcome o = finish(cb); o.cell != Cell::ok) return o;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bytes_moved_ += n;
    for (size_t k = 0; k < kSpots; ++k) {
      const size_t o = (n - spot) / (kSpots - 1) * k;
      if (std::memcmp(d + o, s + o, spot) != 0)
        return failed("bandwidth copy of " + format_size(n) + ": the " + std::to_string(spot) + " bytes at +" +
                      std::to_string(o) + " differ from the source");
    }
    if (secs > 0) *gbps = std::max(*gbps, static_cast<double>(n) / secs / 1e9);
  }
  return {};
}

void EngineRun::run_all(const conccl::GpuInfo& g, size_t engine_index, EngineReport& r) {
  using Fn = Outcome (EngineRun::*)();
  const std::pair<Check, Fn> checks[] = {
      {Check::copy, &EngineRun::check_copy},     {Check::fill, &EngineRun::check_fill},
      {Check::signal, &EngineRun::check_signal}, {Check::wake, &EngineRun::check_wake},
      {Check::poll, &EngineRun::check_poll},     {Check::atomic, &EngineRun::check_atomic},
      {Check::timestamp, &EngineRun::check_timestamp}};
  r.peers_linked = 0;
  for (const conccl::LinkInfo& l : g.links) r.peers_linked += l.peer != g.index;
  for (const auto& [check, fn] : checks) {
    r.record(check, (this->*fn)());
    if (r.stopped()) return;
  }
  for (int p : peers_to_test(g, engine_index, s_.all_peers)) {
    const Outcome o = copy_case(mem_.gpu(gpu_).src, mem_.gpu(p).dst, kPeerCase.bytes, kPeerCase.src_off,
                                kPeerCase.dst_off);
    r.peers.push_back({p, o.cell});
    if (o.cell != Cell::ok) r.findings.push_back({"peer " + std::to_string(p), o.cell, o.message, o.hang_kind});
    if (r.stopped()) return;
  }
  double gbps = 0;
  const Outcome o = bandwidth(&gbps);
  r.gbps = gbps;
  if (o.cell != Cell::ok) r.findings.push_back({"bandwidth", o.cell, o.message, o.hang_kind});
}

}  // namespace probe::selftest
