// tools/bench/bench_queue.cpp - host cost of enqueueing copies, and the
// emulated engines' copy throughput against plain memcpy.
//
//   bench_queue [--benchmark_filter=...] [--benchmark_out=FILE --benchmark_out_format=json]
//
// (a) Enqueue cost, ns per copy, one doorbell per 64 copies:
//   BM_EnqueueCopy          encode 64 copies into a CommandBuffer + submit
//                           (the engine is stalled while timed; the ring is
//                           drained, untimed, whenever it gets full)
//   BM_EncodeCopy           the encode half alone
//   BM_SubmitEncoded        the submit half alone (ring copy + wptr + doorbell)
//   BM_EnqueueCopyRunning   encode + submit with the engine executing the
//                           copies concurrently (steady state: bounded by
//                           whichever side is slower)
//   BM_Vocabulary/isa:I/path:P  the same 64 copies through the neutral layer
//                           on both instruction sets (I = 0: SDMA 4.4.2 on the
//                           small preset, 1: Hopper CE on the h200 preset) and
//                           both paths (P = 0: CommandBuffer + submit, 1:
//                           reserve + copies encoded in the ring + commit);
//                           engine stalled while timed, drained untimed
// (b) Throughput of 64 MiB device-to-device copies (gpu0 -> gpu1):
//   BM_Memcpy               plain memcpy of the same buffers (baseline)
//   BM_EmuCopy/engines:N    one copy split evenly over N engines of gpu0
// (a) reports Time and CPU per iteration (= per 64 copies) and copies/s;
// CPU is the producer thread's time, the host cost. (b) reports GBps, the
// memcpy rate measured (best of 5) right before each run on the same
// buffers, and vs_memcpy = GBps / memcpy_GBps.
//
// Every copy is verified: (a) after the timed loop the destination must equal
// the source; (b) after each benchmark the whole 64 MiB is compared.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "conccl/emu.hpp"
#include "conccl/packets/generation.hpp"
#include "conccl/queue.hpp"

using namespace conccl;

namespace {

constexpr int kCopiesPerSubmit = 64;
constexpr uint64_t kSmallCopy = 256;
constexpr size_t kBig = 64ull << 20;

void fill_random(void* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto* b = static_cast<uint8_t*>(p);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = rng() | 0x0101010101010101ull;  // no zero bytes
    std::memcpy(b + i, &w, 8);
  }
  for (; i < n; ++i) b[i] = static_cast<uint8_t>(1 + rng() % 255);
}

bool check(benchmark::State& state, const Status& st, const char* what) {
  if (st.ok()) return true;
  state.SkipWithError((std::string(what) + ": " + st.to_string()).c_str());
  return false;
}

// The emulated nodes the benchmarks share.
struct Node {
  std::unique_ptr<emu::EmuDevice> dev;
  Status status;
  explicit Node(const DeviceOptions& o) {
    Result<std::unique_ptr<emu::EmuDevice>> d = emu::create(o);
    if (d.ok()) dev = std::move(d).value();
    else status = d.status();
  }
};
DeviceOptions with_settings(const char* settings) {
  DeviceOptions o;
  o.settings = settings;
  return o;
}
// 2 GPUs x 8 SDMA engines.
Node& node() {
  static Node n(with_settings("preset=small gpus=2 engines=8"));
  return n;
}
// One emulated H200 (Hopper CE methods on GPFIFO channels).
Node& hopper_node() {
  static Node n(with_settings("preset=h200"));
  return n;
}

// ---- (a) enqueue cost -------------------------------------------------------

struct SmallCopies {
  Buffer src, dst;
  Status init(emu::EmuDevice& dev) {
    Result<Buffer> s = dev.alloc(0, kCopiesPerSubmit * kSmallCopy, MemKind::device);
    if (!s.ok()) return s.status();
    Result<Buffer> d = dev.alloc(0, kCopiesPerSubmit * kSmallCopy, MemKind::device);
    if (!d.ok()) return d.status();
    src = *s;
    dst = *d;
    fill_random(src.host, src.size, 1);
    return Status();
  }
  void record(CommandBuffer& cb) const {
    for (int i = 0; i < kCopiesPerSubmit; ++i) {
      Status st = cb.copy(dst.va_at(i * kSmallCopy), src.va_at(i * kSmallCopy), kSmallCopy);
      benchmark::DoNotOptimize(st);
    }
  }
  bool verified() const { return std::memcmp(src.host, dst.host, src.size) == 0; }
  void release(emu::EmuDevice& dev) const {
    (void)dev.free(src);
    (void)dev.free(dst);
  }
};

// Time and CPU are per iteration = per 64 copies; items are copies.
void per_copy_counter(benchmark::State& state) { state.SetItemsProcessed(state.iterations() * kCopiesPerSubmit); }

// What the queue benchmarks of (a) share: one queue on an engine of gpu0 with
// the 64 small copies allocated and recorded once into cb; stall() and drain()
// hold the engine back and let it empty the ring (untimed); finish() waits for
// the rest, checks the data, counts and frees.
struct SmallCopyQueue {
  emu::EmuDevice* dev = nullptr;
  int engine = 0;
  std::unique_ptr<Queue> queue;
  SmallCopies c;
  CommandBuffer cb;

  bool open(benchmark::State& state, Node& n, int eng, uint64_t ring_bytes, bool record = true) {
    if (!check(state, n.status, "emu::create")) return false;
    dev = n.dev.get();
    engine = eng;
    QueueOptions qo;
    qo.ring_bytes = ring_bytes;
    Result<std::unique_ptr<Queue>> q = dev->create_queue(0, engine, qo);
    if (!check(state, q.status(), "create_queue")) return false;
    queue = std::move(q).value();
    if (!check(state, c.init(*dev), "alloc")) return false;
    cb = queue->command_buffer();
    if (record) c.record(cb);
    return true;
  }
  bool stall(benchmark::State& state) {
    return check(state, dev->inject(0, engine, emu::Injection{.stall = true}), "inject");
  }
  bool drain(benchmark::State& state) {
    state.PauseTiming();
    Status st = dev->inject(0, engine, emu::Injection{});
    if (st.ok()) st = queue->wait_done(Deadline::after_ms(60000));
    if (st.ok()) st = dev->inject(0, engine, emu::Injection{.stall = true});
    if (!check(state, st, "drain")) return false;
    state.ResumeTiming();
    return true;
  }
  void finish(benchmark::State& state, bool stalled = true) {
    Status st = stalled ? dev->inject(0, engine, emu::Injection{}) : Status();
    if (st.ok()) st = queue->wait_done(Deadline::after_ms(60000));
    if (!check(state, st, "final drain")) return;
    if (!c.verified()) state.SkipWithError("copied data does not match the source");
    per_copy_counter(state);
    c.release(*dev);
  }
};

void BM_EnqueueCopy(benchmark::State& state) {
  SmallCopyQueue s;
  if (!s.open(state, node(), 0, 16u << 20)) return;
  Queue& queue = *s.queue;
  const uint64_t batch = s.cb.size_bytes();
  if (!s.stall(state)) return;
  for (auto _ : state) {
    // drain, untimed
    if (queue.submitted() - queue.completed() + batch > queue.ring_bytes() - 4 && !s.drain(state)) return;
    s.cb.clear();
    s.c.record(s.cb);
    if (!check(state, queue.submit(s.cb, Deadline::after_ms(1000)), "submit")) return;
  }
  s.finish(state);
}
// CPU time (the producer thread's) is the host cost; Time also counts being
// descheduled, which on a shared 2-core machine is noise.
BENCHMARK(BM_EnqueueCopy);

// 64 copies through the vocabulary, by CommandBuffer + submit or by
// reserve + in-place encoding + commit, on either instruction set.
void BM_Vocabulary(benchmark::State& state) {
  const bool hopper = state.range(0) == 1, reserve = state.range(1) == 1;
  SmallCopyQueue s;
  if (!s.open(state, hopper ? hopper_node() : node(), hopper ? 4 : 0, 16u << 20)) return;
  Queue& queue = *s.queue;
  const uint64_t batch = s.cb.size_bytes();
  if (!check(state, queue.wait_done(Deadline::after_ms(10000)), "idle")) return;
  if (!s.stall(state)) return;
  uint64_t since_drain = 0;
  for (auto _ : state) {
    if (since_drain + batch + 256 > queue.max_submit_bytes() || queue.submitted() - queue.completed() > 900) {
      // drain, untimed (ring bytes or GPFIFO entries)
      if (!s.drain(state)) return;
      since_drain = 0;
    }
    if (reserve) {
      Result<Queue::Reservation> r = queue.reserve(batch, Deadline::after_ms(1000));
      if (!check(state, r.status(), "reserve")) return;
      s.c.record(r->commands());
      if (!check(state, r->commit(), "commit")) return;
    } else {
      s.cb.clear();
      s.c.record(s.cb);
      if (!check(state, queue.submit(s.cb, Deadline::after_ms(1000)), "submit")) return;
    }
    since_drain += batch;
  }
  s.finish(state);
}
BENCHMARK(BM_Vocabulary)->ArgNames({"isa", "path"})->Args({0, 0})->Args({0, 1})->Args({1, 0})->Args({1, 1});

void BM_EncodeCopy(benchmark::State& state) {
  CommandBuffer cb(sdma::Gen::v4_4_2);
  SmallCopies c;
  c.src.va = emu::kGpuVaBase;
  c.dst.va = emu::kGpuVaBase + (1 << 20);
  for (auto _ : state) {
    cb.clear();
    c.record(cb);
    benchmark::DoNotOptimize(cb.dwords().data());
  }
  per_copy_counter(state);
}
BENCHMARK(BM_EncodeCopy);

void BM_SubmitEncoded(benchmark::State& state) {
  SmallCopyQueue s;
  if (!s.open(state, node(), 1, 16u << 20)) return;
  Queue& queue = *s.queue;
  if (!s.stall(state)) return;
  for (auto _ : state) {
    if (queue.submitted() - queue.completed() + s.cb.size_bytes() > queue.ring_bytes() - 4 && !s.drain(state)) return;
    if (!check(state, queue.submit(s.cb, Deadline::after_ms(1000)), "submit")) return;
  }
  s.finish(state);
}
BENCHMARK(BM_SubmitEncoded);

void BM_EnqueueCopyRunning(benchmark::State& state) {
  SmallCopyQueue s;
  if (!s.open(state, node(), 2, 1u << 20, /*record=*/false)) return;
  for (auto _ : state) {
    s.cb.clear();
    s.c.record(s.cb);
    if (!check(state, s.queue->submit(s.cb, Deadline::after_ms(10000)), "submit")) return;
  }
  s.finish(state, /*stalled=*/false);
}
BENCHMARK(BM_EnqueueCopyRunning)->UseRealTime();

// ---- (b) copy throughput ----------------------------------------------------

struct BigBuffers {
  Buffer src, dst;
  Status init(emu::EmuDevice& dev) {
    Result<Buffer> s = dev.alloc(0, kBig, MemKind::device);
    if (!s.ok()) return s.status();
    Result<Buffer> d = dev.alloc(1, kBig, MemKind::device);
    if (!d.ok()) return d.status();
    src = *s;
    dst = *d;
    fill_random(src.host, kBig, 2);
    std::memset(dst.host, 0x5A, kBig);  // fault the pages in before timing
    return Status();
  }
  void release(emu::EmuDevice& dev) const {
    (void)dev.free(src);
    (void)dev.free(dst);
  }
};

void BM_Memcpy(benchmark::State& state) {
  Node& n = node();
  if (!check(state, n.status, "emu::create")) return;
  BigBuffers b;
  if (!check(state, b.init(*n.dev), "alloc")) return;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    std::memcpy(b.dst.host, b.src.host, kBig);
    benchmark::ClobberMemory();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (std::memcmp(b.dst.host, b.src.host, kBig) != 0) state.SkipWithError("memcpy mismatch");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBig));
  state.counters["GBps"] = static_cast<double>(state.iterations() * kBig) / seconds / 1e9;
  b.release(*n.dev);
}
BENCHMARK(BM_Memcpy)->UseRealTime()->Unit(benchmark::kMillisecond);

// BM_Memcpy's rate, measured again next to each BM_EmuCopy run (best of 5)
// for the vs_memcpy ratio, so both sides see the same machine state.
double measure_memcpy_rate(const BigBuffers& b) {
  using C = std::chrono::steady_clock;
  std::memcpy(b.dst.host, b.src.host, kBig);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = C::now();
    std::memcpy(b.dst.host, b.src.host, kBig);
    const double s = std::chrono::duration<double>(C::now() - t0).count();
    best = std::max(best, static_cast<double>(kBig) / s);
  }
  return best;
}

void BM_EmuCopy(benchmark::State& state) {
  Node& n = node();
  if (!check(state, n.status, "emu::create")) return;
  emu::EmuDevice& dev = *n.dev;
  const int engines = static_cast<int>(state.range(0));
  BigBuffers b;
  if (!check(state, b.init(dev), "alloc")) return;
  const double memcpy_rate = measure_memcpy_rate(b);
  std::memset(b.dst.host, 0x5A, kBig);
  std::vector<std::unique_ptr<Queue>> qs;
  std::vector<CommandBuffer> cbs;
  const uint64_t part = kBig / static_cast<uint64_t>(engines);
  for (int e = 0; e < engines; ++e) {
    Result<std::unique_ptr<Queue>> q = dev.create_queue(0, e);
    if (!check(state, q.status(), "create_queue")) return;
    qs.push_back(std::move(q).value());
    cbs.push_back(qs.back()->command_buffer());
    const uint64_t off = part * static_cast<uint64_t>(e);
    const uint64_t len = e + 1 == engines ? kBig - off : part;
    if (!check(state, cbs.back().copy(b.dst.va_at(off), b.src.va_at(off), len), "record")) return;
  }
  std::vector<QueueSpan> ends(static_cast<size_t>(engines));
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (int e = 0; e < engines; ++e)
      if (!check(state, qs[e]->submit(cbs[e], Deadline::after_ms(10000), &ends[e]), "submit")) return;
    for (int e = 0; e < engines; ++e)
      if (!check(state, qs[e]->wait_done(Deadline::after_ms(60000), ends[e].end), "wait")) return;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (std::memcmp(b.dst.host, b.src.host, kBig) != 0) state.SkipWithError("copied data does not match the source");
  const double bytes = static_cast<double>(state.iterations()) * kBig;
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["GBps"] = bytes / seconds / 1e9;
  state.counters["memcpy_GBps"] = memcpy_rate / 1e9;
  state.counters["vs_memcpy"] = bytes / seconds / memcpy_rate;
  qs.clear();
  b.release(dev);
}
BENCHMARK(BM_EmuCopy)->ArgName("engines")->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
