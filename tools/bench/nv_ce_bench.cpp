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

}  // namespace

int main(int argc, char** argv) {
  size_t size_mib = 1024;
  int iters = 10, lat_iters = 2000;
  std::string json_path;
  bool verbose = false, explore = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--size-mib") size_mib = std::strtoull(next(), nullptr, 10);
    else if (a == "--iters") iters = std::atoi(next());
    else if (a == "--lat-iters") lat_iters = std::atoi(next());
    else if (a == "--json") json_path = next();
    else if (a == "--verbose") verbose = true;
    else if (a == "--explore") explore = true;
    else {
      std::fprintf(stderr, "usage: nv_ce_bench [--size-mib N] [--iters N] [--lat-iters N] [--json PATH] [--verbose] [--explore]\n");
      return 2;
    }
  }
  if (size_mib < 1 || iters < 1 || lat_iters < 10) {
    std::fprintf(stderr, "sizes/iterations out of range\n");
    return 2;
  }
  const size_t size = size_mib << 20;

  nv::Options opt;
  if (verbose) opt.log = [](const std::string& s) { std::fprintf(stderr, "[nv] %s\n", s.c_str()); };
  const auto t_open = Clock::now();
  Result<std::unique_ptr<nv::Device>> dr = nv::Device::open(opt);
  if (!dr.ok()) {
    std::fprintf(stderr, "nv_ce_bench: %s\n", dr.status().to_string().c_str());
    return exit_code(dr.status());
  }
  const double open_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_open).count();
  nv::Device& dev = **dr;
  std::fprintf(stderr, "opened %s, driver %s, %zu channels in %.1f ms\n", dev.info().uuid_string().c_str(),
               dev.info().driver_version.c_str(), dev.channel_count(), open_ms);
  for (const nv::Engine& e : dev.engines())
    std::fprintf(stderr, "  LCE%d pce_mask=%#x pces=%d caps=%02x,%02x%s%s %s\n", e.lce, e.pce_mask, e.pces, e.caps[0],
                 e.caps[1], e.grce ? " GRCE" : "", e.shared ? " shared" : "",
                 e.has_channel ? "channel" : e.note.c_str());

  auto fail = [&](const Status& s, const char* what) {
    std::fprintf(stderr, "nv_ce_bench: %s: %s\n", what, s.to_string().c_str());
    return exit_code(s);
  };
  Result<nv::Buffer> H = dev.alloc(size, nv::MemKind::host), A = dev.alloc(size, nv::MemKind::device),
                     B = dev.alloc(size, nv::MemKind::device), R = dev.alloc(size, nv::MemKind::host);
  for (auto* r : {&H, &A, &B, &R})
    if (!r->ok()) return fail(r->status(), "allocating buffers");
  Result<uint64_t> s0 = dev.alloc_slot(), s1 = dev.alloc_slot();
  if (!s0.ok() || !s1.ok()) return fail(s0.status(), "slots");
  fill_pattern(H->host, size, 0xC0FFEE);
  const Deadline dl = Deadline::after(std::chrono::seconds(60));
  nv::Channel& best = dev.channel(0);
  CommandBuffer best_cb = best.commands();

  // Upload the pattern (host -> device), timed by the engine.
  double h2d_gbps = 0, d2h_gbps = 0;
  {
    Status st = best_cb.timestamp(*s0);
    if (st.ok()) st = best_cb.copy(A->va, H->va, size);
    if (st.ok()) st = best.submit(best_cb, dl);
    best_cb.clear();
    if (st.ok()) st = best.wait_done(dl);
    if (!st.ok()) return fail(st, "upload");
    h2d_gbps = double(size) / double(best.completed_time_ns() - dev.slot_host(*s0)[1]);
  }

  std::vector<BwRow> rows;
  bool all_ok = true;
  auto verify_b = [&](nv::Channel& ch, BwRow& row) -> Status {
    CommandBuffer cb = ch.commands();
    std::memset(R->host, 0x5A, size);
    CONCCL_RETURN_IF_ERROR(cb.timestamp(*s0));
    CONCCL_RETURN_IF_ERROR(cb.copy(R->va, B->va, size));
    CONCCL_RETURN_IF_ERROR(ch.submit(cb, dl));
    cb.clear();
    CONCCL_RETURN_IF_ERROR(ch.wait_done(dl));
    const double g = double(size) / double(ch.completed_time_ns() - dev.slot_host(*s0)[1]);
    if (&ch == &best) d2h_gbps = g;
    row.mismatch = compare(H->host, R->host, size);
    row.verified = row.mismatch < 0;
    all_ok &= row.verified;
    return Status();
  };

  // Warm-up: the first ~100 ms of copy-engine work on an idle GPU run at about
  // half rate while its clocks ramp (docs/perf/h200-notes.md, run 2), so keep
  // every engine busy for a second before measuring.
  double cold_gbps = 0;
  {
    const auto tw = Clock::now();
    bool first = true;
    while (Clock::now() - tw < std::chrono::seconds(1)) {
      const auto t0 = Clock::now();
      Status st = dev.copy_striped(B->va, A->va, size, dl);
      if (!st.ok()) return fail(st, "warm-up");
      if (first) cold_gbps = double(size) / std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      first = false;
    }
  }

  // (1) per engine.
  for (size_t c = 0; c < dev.channel_count(); ++c) {
    nv::Channel& ch = dev.channel(c);
    CommandBuffer cb = ch.commands();
    BwRow row;
    row.name = "LCE" + std::to_string(ch.lce());
    row.lce = ch.lce();
    row.pces = ch.pces();
    Status st = cb.fill(B->va, 0xDEAD0000u + static_cast<uint32_t>(c), size);  // poison
    if (st.ok()) st = cb.copy(B->va, A->va, size);                             // warm-up
    if (st.ok()) st = ch.submit(cb, dl);
    cb.clear();
    if (st.ok()) st = ch.wait_done(dl);
    if (!st.ok()) return fail(st, row.name.c_str());
    st = cb.fill(B->va, 0xDEAD0000u + static_cast<uint32_t>(c), size);
    if (st.ok()) st = ch.submit(cb, dl);
    cb.clear();
    if (st.ok()) st = ch.wait_done(dl);
    if (!st.ok()) return fail(st, row.name.c_str());
    std::vector<double> eng, wall;
    for (int it = 0; it < iters; ++it) {
      const auto t0 = Clock::now();
      st = cb.timestamp(*s0);
      if (st.ok()) st = cb.copy(B->va, A->va, size);
      if (st.ok()) st = ch.submit(cb, dl);
      cb.clear();
      if (st.ok()) st = ch.wait_done(dl);
      if (!st.ok()) return fail(st, row.name.c_str());
      const double w = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      eng.push_back(double(size) / double(ch.completed_time_ns() - dev.slot_host(*s0)[1]));
      wall.push_back(double(size) / w);
    }
    row.gbps_engine = stats(eng);
    row.gbps_wall = stats(wall);
    st = verify_b(ch, row);
    if (!st.ok()) return fail(st, "verify");
    rows.push_back(row);
  }

  // (2) striped over all async engines: by PCE count, and an equal split.
  for (int mode = 0; mode < 2; ++mode) {
    BwRow row;
    row.name = mode == 0 ? "striped (PCE-weighted)" : "striped (equal split)";
    std::vector<nv::Channel*> chs;
    std::vector<CommandBuffer> cbs;
    std::vector<int> w;
    for (size_t c = 0; c < dev.channel_count(); ++c) {
      chs.push_back(&dev.channel(c));
      cbs.push_back(dev.channel(c).commands());
      w.push_back(mode == 0 ? dev.channel(c).pces() : 1);
      row.pces += dev.channel(c).pces();
    }
    const std::vector<uint64_t> pieces = nv::stripe(size, w, 4096);
    std::vector<uint64_t> ts_slots;
    for (size_t c = 0; c < chs.size(); ++c) {
      Result<uint64_t> s = dev.alloc_slot();
      if (!s.ok()) return fail(s.status(), "slots");
      ts_slots.push_back(*s);
    }
    Status st = best_cb.fill(B->va, 0xBAD00000u + mode, size);
    if (st.ok()) st = best.submit(best_cb, dl);
    best_cb.clear();
    if (st.ok()) st = best.wait_done(dl);
    if (!st.ok()) return fail(st, "poison");
    std::vector<double> eng, wall;
    for (int it = -1; it < iters; ++it) {  // it == -1: warm-up
      const auto t0 = Clock::now();
      uint64_t off = 0;
      for (size_t c = 0; c < chs.size(); ++c) {
        if (!pieces[c]) continue;
        CommandBuffer& cb = cbs[c];
        cb.clear();
        st = cb.timestamp(ts_slots[c]);
        if (st.ok()) st = cb.copy(B->va + off, A->va + off, pieces[c]);
        if (st.ok()) st = chs[c]->submit(cb, dl);
        if (!st.ok()) return fail(st, row.name.c_str());
        off += pieces[c];
      }
      uint64_t first = ~0ull, last = 0;
      for (size_t c = 0; c < chs.size(); ++c) {
        if (!pieces[c]) continue;
        st = chs[c]->wait_done(dl);
        if (!st.ok()) return fail(st, row.name.c_str());
        first = std::min<uint64_t>(first, uint64_t(dev.slot_host(ts_slots[c])[1]));
        last = std::max<uint64_t>(last, chs[c]->completed_time_ns());
      }
      const double w2 = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      if (it < 0) continue;
      eng.push_back(double(size) / double(last - first));
      wall.push_back(double(size) / w2);
    }
    row.gbps_engine = stats(eng);
    row.gbps_wall = stats(wall);
    Status vs = verify_b(best, row);
    if (!vs.ok()) return fail(vs, "verify");
    rows.push_back(row);
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
  struct LatRow {
    int lce;
    std::string kind;
    Stats host_us, engine_us, submit_us, record_us, to_engine_us, to_host_us;
    bool verified = false;
    double offset_halfwidth_us = -1;  // uncertainty of the GPU-timer/host-clock alignment
  };
  std::vector<LatRow> lats;
  const size_t kLat = 4096;
  const size_t span = std::min(size, size_t(lat_iters) * kLat);
  auto realtime_ns = [] {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  };
  // What one call of Channel::state() costs: it reads GP_GET and GP_PUT from
  // USERD in device memory through the BAR1 (write-combined, uncached) CPU
  // mapping, plus the error notifier in system memory. fault_status(), which
  // submit() and wait_done() call, reads only the notifier.
  double state_us = 0, fault_us = 0;
  {
    nv::Channel& ch = dev.channel(0);
    uint32_t sink = 0;
    auto t0 = Clock::now();
    for (int i = 0; i < 1000; ++i) sink += ch.state().gp_get;
    state_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 1000;
    t0 = Clock::now();
    for (int i = 0; i < 1000; ++i) sink += ch.fault_status().ok() ? 1 : 0;
    fault_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 1000;
    if (sink == 0xFFFFFFFFu) std::fprintf(stderr, " ");
  }
  for (size_t c = 0; c < dev.channel_count(); ++c) {
    nv::Channel& ch = dev.channel(c);
    CommandBuffer cb = ch.commands();
    for (int kind = 0; kind < 3; ++kind) {
      Status st = cb.fill(B->va, 0x11110000u + static_cast<uint32_t>(c * 4 + kind), span);
      if (st.ok()) st = ch.submit(cb, dl);
      cb.clear();
      if (st.ok()) st = ch.wait_done(dl);
      if (!st.ok()) return fail(st, "latency poison");
      std::vector<double> host, engine, sub, rec, to_eng, to_host;
      std::vector<int64_t> r1s, r2s, g0s, g1s;
      int64_t lo = INT64_MIN, hi = INT64_MAX;  // bounds on (GPU timer - CLOCK_REALTIME)
      for (int it = -100; it < lat_iters; ++it) {
        const size_t off = (size_t(it + 100) * kLat) % span;
        const int64_t r0 = kind == 0 ? realtime_ns() : 0;
        const auto t0 = Clock::now();
        if (kind == 0) st = cb.timestamp(*s1);
        if (st.ok() && kind < 2) st = cb.copy(B->va + off, A->va + off, kLat);
        const auto tr = Clock::now();
        uint64_t f = 0;
        if (st.ok()) st = ch.submit(cb, dl, &f);
        cb.clear();
        const auto t1 = Clock::now();
        const int64_t r1 = kind == 0 ? realtime_ns() : 0;
        if (st.ok()) st = ch.wait_done(dl, f);
        const auto t2 = Clock::now();
        const int64_t r2 = kind == 0 ? realtime_ns() : 0;
        if (!st.ok()) return fail(st, "latency");
        if (it < 0) continue;
        host.push_back(std::chrono::duration<double, std::micro>(t2 - t0).count());
        sub.push_back(std::chrono::duration<double, std::micro>(t1 - tr).count());
        rec.push_back(std::chrono::duration<double, std::micro>(tr - t0).count());
        if (kind == 0) {
          const int64_t g0 = int64_t(dev.slot_host(*s1)[1]), g1 = int64_t(ch.completed_time_ns());
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
        // Verify the copied 4 KiB pieces.
        std::memset(R->host, 0, span);
        st = cb.copy(R->va, B->va, span);
        if (st.ok()) st = ch.submit(cb, dl);
        cb.clear();
        if (st.ok()) st = ch.wait_done(dl);
        if (!st.ok()) return fail(st, "latency verify");
        lr.verified = compare(H->host, R->host, std::min(span, size_t(lat_iters + 100) * kLat)) < 0;
        all_ok &= lr.verified;
      } else {
        lr.verified = true;
      }
      lats.push_back(lr);
    }
  }

  // (4) --explore: what a single engine's D2D rate depends on (engine timestamps,
  // median of 5; each variant copies A -> B on the channel with the most PCEs).
  struct Variant {
    std::string name;
    double gbps = 0;
  };
  std::vector<Variant> variants;
  if (explore) {
    auto measure = [&](nv::Channel& ch, uint64_t dst, uint64_t src, uint64_t bytes, CopyShape co,
                       int in_flight) -> Result<double> {
      CommandBuffer cb = ch.commands();
      std::vector<double> v;
      for (int it = -1; it < 5; ++it) {
        CONCCL_RETURN_IF_ERROR(cb.timestamp(*s0));
        const uint64_t per = bytes / in_flight;
        for (int k = 0; k < in_flight; ++k) {  // k > 0: separate submissions, PIPELINED
          CopyShape c2 = co;
          if (k > 0) c2.pipelined = true;
          CONCCL_RETURN_IF_ERROR(record_copy(cb, dst + k * per, src + k * per, per, c2));
          if (in_flight > 1) {
            CONCCL_RETURN_IF_ERROR(ch.submit(cb, dl));
            cb.clear();
          }
        }
        if (in_flight == 1) CONCCL_RETURN_IF_ERROR(ch.submit(cb, dl));
        cb.clear();
        CONCCL_RETURN_IF_ERROR(ch.wait_done(dl));
        if (it >= 0) v.push_back(double(bytes) / double(ch.completed_time_ns() - dev.slot_host(*s0)[1]));
      }
      return stats(v).median;
    };
    auto add = [&](const std::string& name, Result<double> r) {
      if (!r.ok()) {
        std::fprintf(stderr, "explore %s: %s\n", name.c_str(), r.status().to_string().c_str());
        return;
      }
      variants.push_back({name, *r});
    };
    CopyShape co;
    add("1 launch, whole buffer", measure(best, B->va, A->va, size, co, 1));
    for (uint64_t piece : {256ull << 20, 64ull << 20, 16ull << 20, 4ull << 20, 1ull << 20, 256ull << 10}) {
      co.piece_bytes = piece;
      add("launches of " + std::to_string(piece >> 10) + " KiB", measure(best, B->va, A->va, size, co, 1));
    }
    co = {};
    co.piece_bytes = 64ull << 20;
    co.pipelined = true;
    add("64 MiB launches, all PIPELINED", measure(best, B->va, A->va, size, co, 1));
    co = {};
    add("4 submissions in flight", measure(best, B->va, A->va, size, co, 4));
    add("3/4 of the buffer at +1/4", measure(best, B->va + size / 4, A->va + size / 4, size / 4 * 3, co, 1));
    add("reverse direction (B -> A)", measure(best, A->va, B->va, size, co, 1));
    add("256 MiB", measure(best, B->va, A->va, std::min<uint64_t>(size, 256ull << 20), co, 1));
    add("host -> device", measure(best, B->va, H->va, size, co, 1));
    // Keep the engines busy ~1 s, then measure again.
    const auto tw = Clock::now();
    while (Clock::now() - tw < std::chrono::seconds(1)) {
      Status st = dev.copy_striped(B->va, A->va, size, dl);
      if (!st.ok()) return fail(st, "warm-up");
    }
    add("1 launch, after 1 s of striped copies", measure(best, B->va, A->va, size, co, 1));
    for (size_t c = 0; c < dev.channel_count(); ++c)
      add("LCE" + std::to_string(dev.channel(c).lce()) + " again", measure(dev.channel(c), B->va, A->va, size, co, 1));
    // Verify what the last variant left in B.
    BwRow vr;
    Status vs = verify_b(best, vr);
    if (!vs.ok()) return fail(vs, "verify");
    variants.push_back({std::string("verified after explore: ") + (vr.verified ? "yes" : "NO"), 0});
  }

  // JSON.
  if (!json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f) {
      std::fprintf(f, "{\n  \"bench\": \"nv_ce_bench\",\n  \"gpu\": \"%s\",\n  \"driver\": \"%s\",\n  \"proc_version\": \"%s\",\n",
                   dev.info().uuid_string().c_str(), dev.info().driver_version.c_str(),
                   dev.info().proc_version.c_str());
      std::fprintf(f, "  \"channel_class\": \"0x%x\",\n  \"open_ms\": %.2f,\n  \"bytes\": %zu,\n  \"iters\": %d,\n",
                   dev.info().channel_class, open_ms, size, iters);
      std::fprintf(f, "  \"engines\": [");
      bool first = true;
      for (const nv::Engine& e : dev.engines()) {
        std::fprintf(f, "%s\n    {\"lce\": %d, \"pce_mask\": %u, \"pces\": %d, \"caps\": [%u, %u], \"grce\": %s, \"shared\": %s, \"channel\": %s}",
                     first ? "" : ",", e.lce, e.pce_mask, e.pces, e.caps[0], e.caps[1], e.grce ? "true" : "false",
                     e.shared ? "true" : "false", e.has_channel ? "true" : "false");
        first = false;
      }
      std::fprintf(f, "\n  ],\n  \"h2d_gbps\": %.2f,\n  \"d2h_gbps\": %.2f,\n  \"cold_first_striped_gbps_wall\": %.2f,\n  \"d2d\": [", h2d_gbps, d2h_gbps, cold_gbps);
      first = true;
      for (const BwRow& r : rows) {
        std::fprintf(f, "%s\n    {\"name\": \"%s\", \"lce\": %d, \"pces\": %d, \"gbps_engine\": %s, \"gbps_wall\": %s, \"verified\": %s, \"first_mismatch\": %lld}",
                     first ? "" : ",", r.name.c_str(), r.lce, r.pces, json_stats(r.gbps_engine).c_str(),
                     json_stats(r.gbps_wall).c_str(), r.verified ? "true" : "false", (long long)r.mismatch);
        first = false;
      }
      std::fprintf(f, "\n  ],\n  \"latency_4k\": [");
      first = true;
      for (const LatRow& l : lats) {
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
      std::fprintf(f, "\n  ],\n  \"state_call_us\": %.4f,\n  \"fault_status_call_us\": %.4f,\n  \"explore\": [", state_us,
                   fault_us);
      first = true;
      for (const Variant& v : variants) {
        std::fprintf(f, "%s\n    {\"variant\": \"%s\", \"gbps_engine_median\": %.2f}", first ? "" : ",", v.name.c_str(), v.gbps);
        first = false;
      }
      std::fprintf(f, "\n  ],\n  \"all_verified\": %s\n}\n", all_ok ? "true" : "false");
      std::fclose(f);
    } else {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
    }
  }

  // Table last.
  std::printf("\nnv_ce_bench: %s, driver %s, %zu MiB copies, %d iterations (GB/s = bytes copied / time; HBM traffic is 2x)\n",
              dev.info().uuid_string().c_str(), dev.info().driver_version.c_str(), size_mib, iters);
  std::printf("host->device %.1f GB/s, device->host %.1f GB/s (LCE%d, engine timestamps); first striped D2D on the "
              "cold GPU %.1f GB/s (wall), then 1 s warm-up\n", h2d_gbps, d2h_gbps, best.lce(), cold_gbps);
  std::printf("%-24s %5s %12s %12s %12s %9s\n", "D2D", "PCEs", "engine med", "engine max", "wall med", "verified");
  for (const BwRow& r : rows)
    std::printf("%-24s %5d %10.1f   %10.1f   %10.1f   %9s\n", r.name.c_str(), r.pces, r.gbps_engine.median,
                r.gbps_engine.max, r.gbps_wall.median, r.verified ? "yes" : "NO");
  std::printf("Channel::state() %.3f us per call (2 BAR1 reads of USERD + notifier); fault_status() %.3f us\n", state_us,
              fault_us);
  std::printf("%-18s %9s %9s %9s %9s %9s %9s %9s %9s %7s %8s\n", "4 KiB latency (us)", "host med", "host p99", "submit",
              "record", "eng med", "eng p99", "sub->eng", "rel->host", "+-", "verified");
  for (const LatRow& l : lats) {
    char name[32];
    std::snprintf(name, sizeof name, "LCE%d %s", l.lce, l.kind.c_str());
    std::printf("%-18s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %7.2f %8s\n", name, l.host_us.median,
                l.host_us.p99, l.submit_us.median, l.record_us.median, l.engine_us.median, l.engine_us.p99,
                l.to_engine_us.median, l.to_host_us.median, l.offset_halfwidth_us, l.verified ? "yes" : "NO");
  }
  if (!variants.empty()) {
    std::printf("%-44s %12s\n", "explore (best engine unless named)", "engine GB/s");
    for (const Variant& v : variants) std::printf("%-44s %12.1f\n", v.name.c_str(), v.gbps);
  }
  for (auto* b : {&*H, &*A, &*B, &*R}) (void)dev.free(*b);
  return all_ok ? 0 : 1;
}
