// tools/bench/nv_ce_bench.cpp - Hopper copy engines on our own RM channels:
// device-to-device bandwidth per asynchronous copy engine and striped over all
// of them (every byte verified), and the latency of a 4 KiB copy from submit to
// host-visible completion, with the engine's own time from the CE's
// semaphore timestamps. Prints a table last and writes JSON.
//
//   nv_ce_bench [--size-mib N] [--iters N] [--lat-iters N] [--json PATH] [--verbose]
//
// Exit codes (ARCHITECTURE.md): 0 ok, 1 verification failed, 2 usage,
// 3 deadline passed, 4 device fault, 5 backend unavailable.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "backends/nv/nv_device.hpp"
#include "tools/bench/nv_bench_util.hpp"

using namespace conccl;
using Clock = std::chrono::steady_clock;

namespace {

int exit_code(const Status& s) {
  switch (s.code()) {
    case Code::ok: return 0;
    case Code::verify_failed: return 1;
    case Code::invalid_argument: return 2;
    case Code::timeout: return 3;
    case Code::device_fault: return 4;
    case Code::unavailable: return 5;
    default: return 4;
  }
}

using bench::Stats;
using bench::stats;
const auto json_stats = bench::stats_json;

void fill_pattern(void* p, size_t n, uint64_t seed) {
  auto* q = static_cast<uint64_t*>(p);
  const size_t words = n / 8;
  const unsigned nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < nt; ++t)
    ts.emplace_back([=] {
      const size_t lo = words * t / nt, hi = words * (t + 1) / nt;
      uint64_t x = seed * 0x9E3779B97F4A7C15ull + t * 0xD1B54A32D192ED03ull + 1;
      for (size_t i = lo; i < hi; ++i) {  // xorshift64*
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        q[i] = x * 0x2545F4914F6CDD1Dull;
      }
    });
  for (auto& t : ts) t.join();
}

// First differing byte offset, or -1.
int64_t compare(const void* a, const void* b, size_t n) {
  if (std::memcmp(a, b, n) == 0) return -1;
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < n; ++i)
    if (x[i] != y[i]) return static_cast<int64_t>(i);
  return -1;
}

// How --explore cuts a copy: LAUNCH_DMAs of at most piece_bytes (0: as
// CommandBuffer::copy cuts it, at the engine's largest), the first waiting for
// earlier work unless `pipelined`.
struct CopyShape {
  uint64_t piece_bytes = 0;
  bool pipelined = false;
};

Status record_copy(CommandBuffer& cb, uint64_t dst, uint64_t src, uint64_t bytes, const CopyShape& s) {
  const uint64_t piece = s.piece_bytes ? s.piece_bytes : bytes;
  for (uint64_t off = 0; off < bytes; off += piece) {
    const bool alongside = off != 0 || s.pipelined;
    CONCCL_RETURN_IF_ERROR(cb.copy(dst + off, src + off, std::min(piece, bytes - off),
                                   alongside ? CommandBuffer::CopyOrder::alongside_earlier
                                             : CommandBuffer::CopyOrder::after_earlier));
  }
  return Status();
}

struct BwRow {
  std::string name;
  int lce = -1, pces = 0;
  Stats gbps_engine, gbps_wall;
  bool verified = false;
  int64_t mismatch = -1;
};

// One row of the 4 KiB latency table: one channel, one kind of submission.
struct LatRow {
  int lce;
  std::string kind;
  Stats host_us, engine_us, submit_us, record_us, to_engine_us, to_host_us;
  bool verified = false;
  double offset_halfwidth_us = -1;  // uncertainty of the GPU-timer/host-clock alignment
};

// One --explore variant: its name and median engine rate.
struct ExploreRow {
  std::string name;
  double gbps = 0;
};

// What the command line sets.
struct Args {
  size_t size_mib = 1024;
  int iters = 10, lat_iters = 2000;
  std::string json_path;
  bool verbose = false, explore = false;
};

// The device, buffers and results that every phase of the bench shares.
struct Bench {
  nv::Gpu& dev;
  size_t size;
  int iters, lat_iters;
  nv::Allocation& H;  // host: the pattern
  nv::Allocation& A;  // device: the copies' source
  nv::Allocation& B;  // device: the copies' destination
  nv::Allocation& R;  // host: read-backs
  uint64_t s0, s1;  // slots for the engines' start timestamps
  const Deadline& dl;
  nv::Channel& best;  // channel 0: uploads, read-backs, --explore
  CommandBuffer best_cb;
  double h2d_gbps = 0, d2h_gbps = 0, cold_gbps = 0, state_us = 0, fault_us = 0;
  std::vector<BwRow> rows = {};
  std::vector<LatRow> lats = {};
  std::vector<ExploreRow> variants = {};
  bool all_ok = true;
};

// Prints what went wrong; returns the exit code for it.
int fail(const Status& s, const char* what) {
  std::fprintf(stderr, "nv_ce_bench: %s: %s\n", what, s.to_string().c_str());
  return exit_code(s);
}

// Parses the command line into *o; false on a usage or range error (exit
// code 2). A flag without its value exits with 2 at once.
bool parse_args(int argc, char** argv, Args* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--size-mib") o->size_mib = std::strtoull(next(), nullptr, 10);
    else if (a == "--iters") o->iters = std::atoi(next());
    else if (a == "--lat-iters") o->lat_iters = std::atoi(next());
    else if (a == "--json") o->json_path = next();
    else if (a == "--verbose") o->verbose = true;
    else if (a == "--explore") o->explore = true;
    else {
      std::fprintf(stderr, "usage: nv_ce_bench [--size-mib N] [--iters N] [--lat-iters N] [--json PATH] [--verbose] [--explore]\n");
      return false;
    }
  }
  if (o->size_mib < 1 || o->iters < 1 || o->lat_iters < 10) {
    std::fprintf(stderr, "sizes/iterations out of range\n");
    return false;
  }
  return true;
}

// Copies B back to the host on `ch`, timed by the engine (the device->host
// rate when ch is `best`), and compares it with the pattern.
Status verify_b(Bench& b, nv::Channel& ch, BwRow& row) {
  CommandBuffer cb = ch.commands();
  std::memset(b.R.host, 0x5A, b.size);
  CONCCL_RETURN_IF_ERROR(cb.timestamp(b.s0));
  CONCCL_RETURN_IF_ERROR(cb.copy(b.R.va, b.B.va, b.size));
  CONCCL_RETURN_IF_ERROR(ch.submit(cb, b.dl));
  cb.clear();
  CONCCL_RETURN_IF_ERROR(ch.wait_done(b.dl));
  const double g = double(b.size) / double(ch.completed_time_ns() - b.dev.slot_host(b.s0)[1]);
  if (&ch == &b.best) b.d2h_gbps = g;
  row.mismatch = compare(b.H.host, b.R.host, b.size);
  row.verified = row.mismatch < 0;
  b.all_ok &= row.verified;
  return Status();
}

// Upload the pattern (host -> device), timed by the engine. Returns 0 or
// the exit code (as every phase below does).
int upload(Bench& b) {
  Status st = b.best_cb.timestamp(b.s0);
  if (st.ok()) st = b.best_cb.copy(b.A.va, b.H.va, b.size);
  if (st.ok()) st = b.best.submit(b.best_cb, b.dl);
  b.best_cb.clear();
  if (st.ok()) st = b.best.wait_done(b.dl);
  if (!st.ok()) return fail(st, "upload");
  b.h2d_gbps = double(b.size) / double(b.best.completed_time_ns() - b.dev.slot_host(b.s0)[1]);
  return 0;
}

// Warm-up: the first ~100 ms of copy-engine work on an idle GPU run at about
// half rate while its clocks ramp (docs/perf/h200-notes.md, run 2), so keep
// every engine busy for a second before measuring.
int warm_up(Bench& b) {
  const auto tw = Clock::now();
  bool first = true;
  while (Clock::now() - tw < std::chrono::seconds(1)) {
    const auto t0 = Clock::now();
    Status st = b.dev.copy_striped(b.B.va, b.A.va, b.size, b.dl);
    if (!st.ok()) return fail(st, "warm-up");
    if (first) b.cold_gbps = double(b.size) / std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    first = false;
  }
  return 0;
}

// (1) per engine.
int measure_engines(Bench& b) {
  for (size_t c = 0; c < b.dev.channel_count(); ++c) {
    nv::Channel& ch = b.dev.channel(c);
    CommandBuffer cb = ch.commands();
    BwRow row;
    row.name = "LCE" + std::to_string(ch.lce());
    row.lce = ch.lce();
    row.pces = ch.pces();
    Status st = cb.fill(b.B.va, 0xDEAD0000u + static_cast<uint32_t>(c), b.size);  // poison
    if (st.ok()) st = cb.copy(b.B.va, b.A.va, b.size);                           // warm-up
    if (st.ok()) st = ch.submit(cb, b.dl);
    cb.clear();
    if (st.ok()) st = ch.wait_done(b.dl);
    if (!st.ok()) return fail(st, row.name.c_str());
    st = cb.fill(b.B.va, 0xDEAD0000u + static_cast<uint32_t>(c), b.size);
    if (st.ok()) st = ch.submit(cb, b.dl);
    cb.clear();
    if (st.ok()) st = ch.wait_done(b.dl);
    if (!st.ok()) return fail(st, row.name.c_str());
    std::vector<double> eng, wall;
    for (int it = 0; it < b.iters; ++it) {
      const auto t0 = Clock::now();
      st = cb.timestamp(b.s0);
      if (st.ok()) st = cb.copy(b.B.va, b.A.va, b.size);
      if (st.ok()) st = ch.submit(cb, b.dl);
      cb.clear();
      if (st.ok()) st = ch.wait_done(b.dl);
      if (!st.ok()) return fail(st, row.name.c_str());
      const double w = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      eng.push_back(double(b.size) / double(ch.completed_time_ns() - b.dev.slot_host(b.s0)[1]));
      wall.push_back(double(b.size) / w);
    }
    row.gbps_engine = stats(eng);
    row.gbps_wall = stats(wall);
    st = verify_b(b, ch, row);
    if (!st.ok()) return fail(st, "verify");
    b.rows.push_back(row);
  }
  return 0;
}

// (2) striped over all async engines, weighted by PCE count (mode 0) or an
// equal split (mode 1).
int measure_striped(Bench& b, int mode) {
  BwRow row;
  row.name = mode == 0 ? "striped (PCE-weighted)" : "striped (equal split)";
  std::vector<nv::Channel*> chs;
  std::vector<CommandBuffer> cbs;
  std::vector<int> w;
  for (size_t c = 0; c < b.dev.channel_count(); ++c) {
    chs.push_back(&b.dev.channel(c));
    cbs.push_back(b.dev.channel(c).commands());
    w.push_back(mode == 0 ? b.dev.channel(c).pces() : 1);
    row.pces += b.dev.channel(c).pces();
  }
  const std::vector<uint64_t> pieces = nv::stripe(b.size, w, 4096);
  std::vector<uint64_t> ts_slots;
  for (size_t c = 0; c < chs.size(); ++c) {
    Result<uint64_t> s = b.dev.alloc_slot();
    if (!s.ok()) return fail(s.status(), "slots");
    ts_slots.push_back(*s);
  }
  Status st = b.best_cb.fill(b.B.va, 0xBAD00000u + mode, b.size);
  if (st.ok()) st = b.best.submit(b.best_cb, b.dl);
  b.best_cb.clear();
  if (st.ok()) st = b.best.wait_done(b.dl);
  if (!st.ok()) return fail(st, "poison");
  std::vector<double> eng, wall;
  for (int it = -1; it < b.iters; ++it) {  // it == -1: warm-up
    const auto t0 = Clock::now();
    uint64_t off = 0;
    for (size_t c = 0; c < chs.size(); ++c) {
      if (!pieces[c]) continue;
      CommandBuffer& cb = cbs[c];
      cb.clear();
      st = cb.timestamp(ts_slots[c]);
      if (st.ok()) st = cb.copy(b.B.va + off, b.A.va + off, pieces[c]);
      if (st.ok()) st = chs[c]->submit(cb, b.dl);
      if (!st.ok()) return fail(st, row.name.c_str());
      off += pieces[c];
    }
    uint64_t first = ~0ull, last = 0;
    for (size_t c = 0; c < chs.size(); ++c) {
      if (!pieces[c]) continue;
      st = chs[c]->wait_done(b.dl);
      if (!st.ok()) return fail(st, row.name.c_str());
      first = std::min<uint64_t>(first, uint64_t(b.dev.slot_host(ts_slots[c])[1]));
      last = std::max<uint64_t>(last, chs[c]->completed_time_ns());
    }
    const double w2 = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    if (it < 0) continue;
    eng.push_back(double(b.size) / double(last - first));
    wall.push_back(double(b.size) / w2);
  }
  row.gbps_engine = stats(eng);
  row.gbps_wall = stats(wall);
  Status vs = verify_b(b, b.best, row);
  if (!vs.ok()) return fail(vs, "verify");
  b.rows.push_back(row);
  return 0;
}

// CLOCK_REALTIME in ns.
int64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// What one call of Channel::state() costs: it reads GP_GET and GP_PUT from
// USERD in device memory through the BAR1 (write-combined, uncached) CPU
// mapping, plus the error notifier in system memory. fault_status(), which
// submit() and wait_done() call, reads only the notifier.
void measure_call_costs(Bench& b) {
  nv::Channel& ch = b.dev.channel(0);
  uint32_t sink = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < 1000; ++i) sink += ch.state().gp_get;
  b.state_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 1000;
  t0 = Clock::now();
  for (int i = 0; i < 1000; ++i) sink += ch.fault_status().ok() ? 1 : 0;
  b.fault_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 1000;
  if (sink == 0xFFFFFFFFu) std::fprintf(stderr, " ");
}

const size_t kLat = 4096;  // the latency copies' size

// The 4 KiB pieces' region of A and B (the latency copies cycle through it).
size_t lat_span(const Bench& b) { return std::min(b.size, size_t(b.lat_iters) * kLat); }

// Reads back the latency copies' region of B on `ch` and compares it with the
// pattern: sets lr.verified.
int verify_latency(Bench& b, nv::Channel& ch, CommandBuffer& cb, LatRow& lr) {
  const size_t span = lat_span(b);
  // Verify the copied 4 KiB pieces.
  std::memset(b.R.host, 0, span);
  Status st = cb.copy(b.R.va, b.B.va, span);
  if (st.ok()) st = ch.submit(cb, b.dl);
  cb.clear();
  if (st.ok()) st = ch.wait_done(b.dl);
  if (!st.ok()) return fail(st, "latency verify");
  lr.verified = compare(b.H.host, b.R.host, std::min(span, size_t(b.lat_iters + 100) * kLat)) < 0;
  b.all_ok &= lr.verified;
  return 0;
}

// One latency row: channel c, submission kind 0 (ts+copy), 1 (copy) or 2
// (signal), lat_iters times after 100 untimed ones (see measure_latency).
int latency_row(Bench& b, size_t c, nv::Channel& ch, CommandBuffer& cb, int kind) {
  const size_t span = lat_span(b);
  Status st = cb.fill(b.B.va, 0x11110000u + static_cast<uint32_t>(c * 4 + kind), span);
  if (st.ok()) st = ch.submit(cb, b.dl);
  cb.clear();
  if (st.ok()) st = ch.wait_done(b.dl);
  if (!st.ok()) return fail(st, "latency poison");
  std::vector<double> host, engine, sub, rec, to_eng, to_host;
  std::vector<int64_t> r1s, r2s, g0s, g1s;
  int64_t lo = INT64_MIN, hi = INT64_MAX;  // bounds on (GPU timer - CLOCK_REALTIME)
  for (int it = -100; it < b.lat_iters; ++it) {
    const size_t off = (size_t(it + 100) * kLat) % span;
    const int64_t r0 = kind == 0 ? realtime_ns() : 0;
    const auto t0 = Clock::now();
    if (kind == 0) st = cb.timestamp(b.s1);
    if (st.ok() && kind < 2) st = cb.copy(b.B.va + off, b.A.va + off, kLat);
    const auto tr = Clock::now();
    uint64_t f = 0;
    if (st.ok()) st = ch.submit(cb, b.dl, &f);
    cb.clear();
    const auto t1 = Clock::now();
    const int64_t r1 = kind == 0 ? realtime_ns() : 0;
    if (st.ok()) st = ch.wait_done(b.dl, f);
    const auto t2 = Clock::now();
    const int64_t r2 = kind == 0 ? realtime_ns() : 0;
    if (!st.ok()) return fail(st, "latency");
    if (it < 0) continue;
    host.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count());
    sub.push_back(std::chrono::duration<double, std::micro>(t1 - tr).count());
    rec.push_back(std::chrono::duration<double, std::micro>(tr - t0).count());
    if (kind == 0) {
      const int64_t g0 = int64_t(b.dev.slot_host(b.s1)[1]), g1 = int64_t(ch.completed_time_ns());
      engine.push_back(double(g1 - g0) / 1000.0);
      // The first release happened after r0 and the last before r2 (real
      // time), so offset < g0 - r0 and offset > g1 - r2.
      hi = std::min(hi, g0 - r0);
      lo = std::max(lo, g1 - r2);
      r1s.push_back(r1);
      r2s.push_back(r2);
      g0s.push_back(g0);
      g1s.push_back(g1);
    }
  }
  double offset_halfwidth_us = -1;
  if (kind == 0 && lo <= hi) {
    const int64_t offset = lo + (hi - lo) / 2;
    offset_halfwidth_us = double(hi - lo) / 2000.0;
    for (size_t i = 0; i < g0s.size(); ++i) {
      to_eng.push_back(double(g0s[i] - offset - r1s[i]) / 1000.0);
      to_host.push_back(double(r2s[i] - (g1s[i] - offset)) / 1000.0);
    }
  }
  LatRow lr{ch.lce(), kind == 0 ? "ts+copy" : kind == 1 ? "copy" : "signal", stats(host), stats(engine),
            stats(sub), stats(rec), stats(to_eng), stats(to_host)};
  lr.offset_halfwidth_us = offset_halfwidth_us;
  if (kind < 2) {
    if (int rc = verify_latency(b, ch, cb, lr)) return rc;
  } else {
    lr.verified = true;
  }
  b.lats.push_back(lr);
  return 0;
}

// (3) latency of a 4 KiB copy: submit -> host sees the timeline release.
// Three submissions per channel, each measured lat_iters times:
//   ts+copy: CE timestamp, 4 KiB copy (the engine time comes from the two
//            releases) - the form runs 1-3 measured;
//   copy:    the 4 KiB copy alone (plus the timeline release every
//            submission ends with) - the latency a user sees;
//   signal:  an empty submission (only the timeline release).
// Host times: steady_clock before recording the commands (t0), after the
// record (tr), after submit() returned (t1), when the host saw the release
// (t2). For ts+copy, CLOCK_REALTIME is also read before t0, at t1 and at
// t2 and set against the CE's own timestamps: the GPU timer runs about
// 0.4 ms off CLOCK_REALTIME here (run 4), so the offset is bracketed per
// channel - the first release came after the host's first reading and the
// last before its last one - and the two gaps, t1 -> first release
// ("submit returned to engine") and last release -> t2 ("release to host
// saw it"), are computed with the middle of that bracket; +- half its width.
int measure_latency(Bench& b) {
  measure_call_costs(b);
  for (size_t c = 0; c < b.dev.channel_count(); ++c) {
    nv::Channel& ch = b.dev.channel(c);
    CommandBuffer cb = ch.commands();
    for (int kind = 0; kind < 3; ++kind)
      if (int rc = latency_row(b, c, ch, cb, kind)) return rc;
  }
  return 0;
}

// One --explore measurement: `bytes` from src to dst on `ch` cut as `co`
// says, in `in_flight` submissions; the median engine rate of 5 (after one
// warm-up).
Result<double> explore_rate(Bench& b, nv::Channel& ch, uint64_t dst, uint64_t src, uint64_t bytes, CopyShape co,
                            int in_flight) {
  CommandBuffer cb = ch.commands();
  std::vector<double> v;
  for (int it = -1; it < 5; ++it) {
    CONCCL_RETURN_IF_ERROR(cb.timestamp(b.s0));
    const uint64_t per = bytes / in_flight;
    for (int k = 0; k < in_flight; ++k) {  // k > 0: separate submissions, PIPELINED
      CopyShape c2 = co;
      if (k > 0) c2.pipelined = true;
      CONCCL_RETURN_IF_ERROR(record_copy(cb, dst + k * per, src + k * per, per, c2));
      if (in_flight > 1) {
        CONCCL_RETURN_IF_ERROR(ch.submit(cb, b.dl));
        cb.clear();
      }
    }
    if (in_flight == 1) CONCCL_RETURN_IF_ERROR(ch.submit(cb, b.dl));
    cb.clear();
    CONCCL_RETURN_IF_ERROR(ch.wait_done(b.dl));
    if (it >= 0) v.push_back(double(bytes) / double(ch.completed_time_ns() - b.dev.slot_host(b.s0)[1]));
  }
  return stats(v).median;
}

// Records one --explore result (or says why there is none).
void add_variant(Bench& b, const std::string& name, Result<double> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "explore %s: %s\n", name.c_str(), r.status().to_string().c_str());
    return;
  }
  b.variants.push_back({name, *r});
}

// (4) --explore: what a single engine's D2D rate depends on (engine timestamps,
// median of 5; each variant copies A -> B on the channel with the most PCEs).
int explore(Bench& b) {
  nv::Channel& best = b.best;
  const uint64_t A = b.A.va, B = b.B.va, size = b.size;
  CopyShape co;
  add_variant(b, "1 launch, whole buffer", explore_rate(b, best, B, A, size, co, 1));
  for (uint64_t piece : {256ull << 20, 64ull << 20, 16ull << 20, 4ull << 20, 1ull << 20, 256ull << 10}) {
    co.piece_bytes = piece;
    add_variant(b, "launches of " + std::to_string(piece >> 10) + " KiB", explore_rate(b, best, B, A, size, co, 1));
  }
  co = {};
  co.piece_bytes = 64ull << 20;
  co.pipelined = true;
  add_variant(b, "64 MiB launches, all PIPELINED", explore_rate(b, best, B, A, size, co, 1));
  co = {};
  add_variant(b, "4 submissions in flight", explore_rate(b, best, B, A, size, co, 4));
  add_variant(b, "3/4 of the buffer at +1/4", explore_rate(b, best, B + size / 4, A + size / 4, size / 4 * 3, co, 1));
  add_variant(b, "reverse direction (B -> A)", explore_rate(b, best, A, B, size, co, 1));
  add_variant(b, "256 MiB", explore_rate(b, best, B, A, std::min<uint64_t>(size, 256ull << 20), co, 1));
  add_variant(b, "host -> device", explore_rate(b, best, B, b.H.va, size, co, 1));
  // Keep the engines busy ~1 s, then measure again.
  const auto tw = Clock::now();
  while (Clock::now() - tw < std::chrono::seconds(1)) {
    Status st = b.dev.copy_striped(B, A, size, b.dl);
    if (!st.ok()) return fail(st, "warm-up");
  }
  add_variant(b, "1 launch, after 1 s of striped copies", explore_rate(b, best, B, A, size, co, 1));
  for (size_t c = 0; c < b.dev.channel_count(); ++c)
    add_variant(b, "LCE" + std::to_string(b.dev.channel(c).lce()) + " again",
                explore_rate(b, b.dev.channel(c), B, A, size, co, 1));
  // Verify what the last variant left in B.
  BwRow vr;
  Status vs = verify_b(b, best, vr);
  if (!vs.ok()) return fail(vs, "verify");
  b.variants.push_back({std::string("verified after explore: ") + (vr.verified ? "yes" : "NO"), 0});
  return 0;
}

// Writes everything as JSON to `path` (says so on stderr if it cannot).
void write_json(const Bench& b, const std::string& path, double open_ms) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return;
  }
  const nv::Gpu& dev = b.dev;
  std::fprintf(f, "{\n  \"bench\": \"nv_ce_bench\",\n  \"gpu\": \"%s\",\n  \"driver\": \"%s\",\n  \"proc_version\": \"%s\",\n",
               dev.info().uuid_string().c_str(), dev.info().driver_version.c_str(),
               dev.info().proc_version.c_str());
  std::fprintf(f, "  \"channel_class\": \"0x%x\",\n  \"open_ms\": %.2f,\n  \"bytes\": %zu,\n  \"iters\": %d,\n",
               dev.info().channel_class, open_ms, b.size, b.iters);
  std::fprintf(f, "  \"engines\": [");
  bool first = true;
  for (const nv::Engine& e : dev.engines()) {
    std::fprintf(f, "%s\n    {\"lce\": %d, \"pce_mask\": %u, \"pces\": %d, \"caps\": [%u, %u], \"grce\": %s, \"shared\": %s, \"channel\": %s}",
                 first ? "" : ",", e.lce, e.pce_mask, e.pces, e.caps[0], e.caps[1], e.grce ? "true" : "false",
                 e.shared ? "true" : "false", e.has_channel ? "true" : "false");
    first = false;
  }
  std::fprintf(f, "\n  ],\n  \"h2d_gbps\": %.2f,\n  \"d2h_gbps\": %.2f,\n  \"cold_first_striped_gbps_wall\": %.2f,\n  \"d2d\": [", b.h2d_gbps, b.d2h_gbps, b.cold_gbps);
  first = true;
  for (const BwRow& r : b.rows) {
    std::fprintf(f, "%s\n    {\"name\": \"%s\", \"lce\": %d, \"pces\": %d, \"gbps_engine\": %s, \"gbps_wall\": %s, \"verified\": %s, \"first_mismatch\": %lld}",
                 first ? "" : ",", r.name.c_str(), r.lce, r.pces, json_stats(r.gbps_engine).c_str(),
                 json_stats(r.gbps_wall).c_str(), r.verified ? "true" : "false", (long long)r.mismatch);
    first = false;
  }
  std::fprintf(f, "\n  ],\n  \"latency_4k\": [");
  first = true;
  for (const LatRow& l : b.lats) {
    std::fprintf(f,
                 "%s\n    {\"lce\": %d, \"kind\": \"%s\", \"host_us\": %s, \"engine_us\": %s, \"submit_us\": %s, "
                 "\"record_us\": %s, \"submit_to_first_release_us\": %s, \"last_release_to_host_us\": %s, "
                 "\"clock_offset_halfwidth_us\": %.3f, \"verified\": %s}",
                 first ? "" : ",", l.lce, l.kind.c_str(), json_stats(l.host_us).c_str(),
                 json_stats(l.engine_us).c_str(), json_stats(l.submit_us).c_str(), json_stats(l.record_us).c_str(),
                 json_stats(l.to_engine_us).c_str(), json_stats(l.to_host_us).c_str(), l.offset_halfwidth_us,
                 l.verified ? "true" : "false");
    first = false;
  }
  std::fprintf(f, "\n  ],\n  \"state_call_us\": %.4f,\n  \"fault_status_call_us\": %.4f,\n  \"explore\": [", b.state_us,
               b.fault_us);
  first = true;
  for (const ExploreRow& v : b.variants) {
    std::fprintf(f, "%s\n    {\"variant\": \"%s\", \"gbps_engine_median\": %.2f}", first ? "" : ",", v.name.c_str(), v.gbps);
    first = false;
  }
  std::fprintf(f, "\n  ],\n  \"all_verified\": %s\n}\n", b.all_ok ? "true" : "false");
  std::fclose(f);
}

// Table last.
void print_table(const Bench& b, size_t size_mib) {
  const nv::Gpu& dev = b.dev;
  std::printf("\nnv_ce_bench: %s, driver %s, %zu MiB copies, %d iterations (GB/s = bytes copied / time; HBM traffic is 2x)\n",
              dev.info().uuid_string().c_str(), dev.info().driver_version.c_str(), size_mib, b.iters);
  std::printf("host->device %.1f GB/s, device->host %.1f GB/s (LCE%d, engine timestamps); first striped D2D on the "
              "cold GPU %.1f GB/s (wall), then 1 s warm-up\n", b.h2d_gbps, b.d2h_gbps, b.best.lce(), b.cold_gbps);
  std::printf("%-24s %5s %12s %12s %12s %9s\n", "D2D", "PCEs", "engine med", "engine max", "wall med", "verified");
  for (const BwRow& r : b.rows)
    std::printf("%-24s %5d %10.1f   %10.1f   %10.1f   %9s\n", r.name.c_str(), r.pces, r.gbps_engine.median,
                r.gbps_engine.max, r.gbps_wall.median, r.verified ? "yes" : "NO");
  std::printf("Channel::state() %.3f us per call (2 BAR1 reads of USERD + notifier); fault_status() %.3f us\n", b.state_us,
              b.fault_us);
  std::printf("%-18s %9s %9s %9s %9s %9s %9s %9s %9s %7s %8s\n", "4 KiB latency (us)", "host med", "host p99", "submit",
              "record", "eng med", "eng p99", "sub->eng", "rel->host", "+-", "verified");
  for (const LatRow& l : b.lats) {
    char name[32];
    std::snprintf(name, sizeof name, "LCE%d %s", l.lce, l.kind.c_str());
    std::printf("%-18s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %7.2f %8s\n", name, l.host_us.median,
                l.host_us.p99, l.submit_us.median, l.record_us.median, l.engine_us.median, l.engine_us.p99,
                l.to_engine_us.median, l.to_host_us.median, l.offset_halfwidth_us, l.verified ? "yes" : "NO");
  }
  if (!b.variants.empty()) {
    std::printf("%-44s %12s\n", "explore (best engine unless named)", "engine GB/s");
    for (const ExploreRow& v : b.variants) std::printf("%-44s %12.1f\n", v.name.c_str(), v.gbps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args o;
  if (!parse_args(argc, argv, &o)) return 2;
  const size_t size = o.size_mib << 20;

  nv::Options opt;
  if (o.verbose) opt.log = [](const std::string& s) { std::fprintf(stderr, "[nv] %s\n", s.c_str()); };
  const auto t_open = Clock::now();
  Result<std::unique_ptr<nv::Gpu>> dr = nv::Gpu::open(opt);
  if (!dr.ok()) {
    std::fprintf(stderr, "nv_ce_bench: %s\n", dr.status().to_string().c_str());
    return exit_code(dr.status());
  }
  const double open_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_open).count();
  nv::Gpu& dev = **dr;
  std::fprintf(stderr, "opened %s, driver %s, %zu channels in %.1f ms\n", dev.info().uuid_string().c_str(),
               dev.info().driver_version.c_str(), dev.channel_count(), open_ms);
  for (const nv::Engine& e : dev.engines())
    std::fprintf(stderr, "  LCE%d pce_mask=%#x pces=%d caps=%02x,%02x%s%s %s\n", e.lce, e.pce_mask, e.pces, e.caps[0],
                 e.caps[1], e.grce ? " GRCE" : "", e.shared ? " shared" : "",
                 e.has_channel ? "channel" : e.note.c_str());

  Result<nv::Allocation> H = dev.alloc(size, nv::Placement::host), A = dev.alloc(size, nv::Placement::device),
                     B = dev.alloc(size, nv::Placement::device), R = dev.alloc(size, nv::Placement::host);
  for (auto* r : {&H, &A, &B, &R})
    if (!r->ok()) return fail(r->status(), "allocating buffers");
  Result<uint64_t> s0 = dev.alloc_slot(), s1 = dev.alloc_slot();
  if (!s0.ok() || !s1.ok()) return fail(s0.status(), "slots");
  fill_pattern(H->host, size, 0xC0FFEE);
  const Deadline dl = Deadline::after(std::chrono::seconds(60));
  nv::Channel& best = dev.channel(0);
  Bench b{dev, size, o.iters, o.lat_iters, *H, *A, *B, *R, *s0, *s1, dl, best, best.commands()};

  if (int rc = upload(b)) return rc;
  if (int rc = warm_up(b)) return rc;
  if (int rc = measure_engines(b)) return rc;
  // (2) striped over all async engines: by PCE count, and an equal split.
  for (int mode = 0; mode < 2; ++mode)
    if (int rc = measure_striped(b, mode)) return rc;
  if (int rc = measure_latency(b)) return rc;
  if (o.explore)
    if (int rc = explore(b)) return rc;

  // JSON.
  if (!o.json_path.empty()) write_json(b, o.json_path, open_ms);
  print_table(b, o.size_mib);
  for (auto* p : {&*H, &*A, &*B, &*R}) (void)dev.free(*p);
  return b.all_ok ? 0 : 1;
}
