// tools/bench/nv_window_bench.cpp - one process per rank on the H200, calls
// through symmetric windows (Communicator::call) ordered on a CUDA stream,
// back to back: time per call, host time per call (mean, and the median:
// one call's own cost, where the mean also holds the waits of calls made
// once the host ran as far ahead of the streams as the queues let it) and
// bootstrap messages per call, for each size; every byte of one call per
// size verified first.
//
//   nv_window_bench --procs N [--op allgather|alltoall] [--min 1K] [--max 256M]
//                   [--iters 200] [--host] [--graph] [--graph-execs K] [--kick-us N] [--engines a,b]
//                   [--json FILE]
//   nv_window_bench --ranks N [--op ...] [--min ...] [--max ...] [--iters ...] [--engines a,b] [--json FILE]
//   --engines a,b,...: the copy engines (LCE ids) the plans may use
//   (Communicator::Options::engines); the table's banner lists the GPU's.
//
// --ranks N: the reference for the process-per-rank rows, the same calls
// with every rank in this one process (N loopback ranks of one
// communicator, Communicator::call with every rank's buffers, plans cached
// per call) on one CUDA stream, back to back: what issue #25's "within
// 1.2x of the same collective with every rank in one process" compares
// against when both are ordered on a stream.
// --host: calls ordered on the host (stream null) instead of the stream.
// --graph: also one call per size captured into a CUDA graph and replayed
// `iters` times back to back (docs/graphs.md): time and host time per
// replay beside the uncaptured call's, one replay's bytes verified, and how
// the communicator's keeper saw each replay (CommStats: from its tick to its
// end, and from its end to the next tick; the slowest rank's).
// --graph-execs K: the captured graph instantiated K times, the launches
// taking turns (one stream: still one replay after another), and a graph
// of only a stream write and a satisfied wait timed alike, so that the
// driver's own cost per launch shows beside the collective's.
// The parent forks the ranks before any CUDA call; rank 0 prints the table
// (the slowest rank's numbers) and writes the JSON.
#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "conccl/collectives.hpp"
#include "conccl/nv.hpp"

using namespace conccl;

namespace {

struct Opts {
  int procs = 2;
  int ranks = 0;  // --ranks: one process, this many loopback ranks
  std::vector<int> engines;  // --engines a,b,...: Communicator::Options::engines (empty: all)
  CollOp op = CollOp::all_gather;
  uint64_t min = 1024, max = 256ull << 20;
  int iters = 200;
  bool host = false;
  bool graph = false;
  int graph_execs = 1;
  int kick_us = 0;
  std::string json;
};

uint64_t parse_size(const std::string& s) {
  uint64_t v = std::strtoull(s.c_str(), nullptr, 10);
  const char u = s.empty() ? 0 : s.back();
  if (u == 'K' || u == 'k') v <<= 10;
  if (u == 'M' || u == 'm') v <<= 20;
  if (u == 'G' || u == 'g') v <<= 30;
  return v;
}

uint8_t pattern(int rank, uint64_t size, uint64_t i) {
  uint64_t x = (uint64_t(rank) + 1) * 0x9E3779B97F4A7C15ull ^ size * 0xBF58476D1CE4E5B9ull ^ (i / 8) * 0x94D049BB133111EBull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<uint8_t>(x >> (8 * (i % 8)));
}

struct Row {
  uint64_t bytes = 0;
  double us = 0, host_us = 0, msgs = 0;
  // The median host time of one call: its own cost. The mean (host_us) also
  // holds the waits of calls made once the host ran as far ahead of the
  // streams as the queues let it (with many calls, most of them wait).
  double host_p50_us = 0;
  double early = 0;  // gated submission: fraction of timed calls whose gate opened before every rank posted
  uint64_t wrong = 0;
  double graph_us = 0, graph_host_us = 0;  // --graph: per replay
  double keeper_busy_us = 0, keeper_idle_us = 0;  // --graph: per replay, as the keeper saw it (CommStats)
};

#define CHECK_CU(x)                                                          \
  do {                                                                       \
    CUresult r_ = (x);                                                       \
    if (r_ != CUDA_SUCCESS) {                                                \
      std::fprintf(stderr, "rank %d: %s -> %d\n", me, #x, int(r_));          \
      return 4;                                                              \
    }                                                                        \
  } while (0)
#define CHECK_OK(x, what)                                                         \
  do {                                                                            \
    Status s_ = (x);                                                              \
    if (!s_.ok()) {                                                               \
      std::fprintf(stderr, "rank %d: %s: %s\n", me, what, s_.to_string().c_str()); \
      return 5;                                                                   \
    }                                                                             \
  } while (0)

// `iters` calls back to back, then one stream synchronize: the time per
// call and the host's time inside call() per call (mean and median), into
// row->us, row->host_us and row->host_p50_us. Returns 0, or the exit code of
// a CUDA (4) or ConCCL (5) error.
int time_calls(int me, Communicator& c, const CollectiveArgs& a, StreamOps* s, CUstream stream, int iters, Row* row) {
  std::vector<double> host(static_cast<size_t>(iters));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    const auto h0 = std::chrono::steady_clock::now();
    CHECK_OK(c.call(a, s), "timed call");
    host[size_t(i)] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
  }
  CHECK_CU(cuStreamSynchronize(stream));
  row->us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  double sum = 0;
  for (double h : host) sum += h;
  row->host_us = sum / iters;
  std::nth_element(host.begin(), host.begin() + iters / 2, host.end());
  row->host_p50_us = host[size_t(iters / 2)];
  CHECK_OK(c.async_error(), "timed calls (async)");
  return 0;
}

// What one size's measurement needs from run_rank's setup: the rank, its
// communicator and window, the CUDA stream and the host staging buffers.
struct RankCtx {
  const Opts& o;
  int me;
  Communicator& c;
  const Window& w;
  CUstream stream;
  StreamOps* s;  // null: host-ordered calls
  uint64_t base;  // the window's memory: send region, then recv region
  uint64_t send_region;
  std::vector<uint8_t>& up;
  std::vector<uint8_t>& down;
};

// One size: a verified call, warm-up, then `iters` timed calls back to back.
// Returns 0, or the rank's exit code on a CUDA (4) or ConCCL (5) error.
int measure_size(RankCtx& x, uint64_t bytes, Row* out) {
  const Opts& o = x.o;
  const int me = x.me, n = o.procs;
  const uint64_t nn = static_cast<uint64_t>(n);
  Communicator& c = x.c;
  StreamOps* s = x.s;
  const uint64_t sb = o.op == CollOp::all_to_all ? bytes * nn : bytes, rb = bytes * nn;
  CollectiveArgs a;
  a.op = o.op;
  a.bytes = bytes;
  a.send = {x.w.at(0, sb)};
  a.recv = {x.w.at(x.send_region, rb)};
  // One verified call.
  for (uint64_t i = 0; i < sb; ++i) x.up[i] = pattern(me, bytes, i);
  CHECK_CU(cuMemcpyHtoDAsync(x.base, x.up.data(), sb, x.stream));
  CHECK_CU(cuMemsetD8Async(x.base + x.send_region, 0xA5, rb, x.stream));
  if (!s) CHECK_CU(cuStreamSynchronize(x.stream));  // host-ordered: the data must be there first
  CHECK_OK(c.call(a, s), "verified call");
  CHECK_CU(cuMemcpyDtoHAsync(x.down.data(), x.base + x.send_region, rb, x.stream));
  CHECK_CU(cuStreamSynchronize(x.stream));
  CHECK_OK(c.async_error(), "verified call (async)");
  Row row;
  row.bytes = bytes;
  auto count_wrong = [&] {
    uint64_t bad = 0;
    for (int r = 0; r < n; ++r)
      for (uint64_t i = 0; i < bytes; ++i) {
        const uint64_t src = o.op == CollOp::all_to_all ? uint64_t(me) * bytes + i : i;
        bad += x.down[uint64_t(r) * bytes + i] != pattern(r, bytes, src);
      }
    return bad;
  };
  row.wrong += count_wrong();
  const int iters = static_cast<int>(std::max<uint64_t>(
      5, std::min<uint64_t>(static_cast<uint64_t>(o.iters), (8ull << 30) / std::max<uint64_t>(rb, 1))));
  for (int i = 0; i < 3; ++i) CHECK_OK(c.call(a, s), "warm-up call");
  CHECK_CU(cuStreamSynchronize(x.stream));
  // The first size of the run: calls for at least 1.5 s first, in rounds of
  // 100 that every rank makes (the ranks agree after each round), since an
  // idle GPU's copy-engine clock needs about a second of work to come up
  // (sdma-probe's warm-up says more).
  static bool clocks_raised = false;
  for (const auto w0 = std::chrono::steady_clock::now(); !clocks_raised;) {
    for (int i = 0; i < 100; ++i) CHECK_OK(c.call(a, s), "warm-up call");
    CHECK_CU(cuStreamSynchronize(x.stream));
    const bool more = std::chrono::steady_clock::now() - w0 < std::chrono::milliseconds(1500);
    Result<std::vector<Bootstrap::Message>> all =
        c.bootstrap()->exchange("warm-up", more ? "1" : "0", {}, Deadline::after_ms(60000));
    CHECK_OK(all.status(), "warm-up exchange");
    clocks_raised = true;
    for (const Bootstrap::Message& m : *all) clocks_raised = clocks_raised && m.data != "1";
  }
  CHECK_OK(c.bootstrap()->barrier("size " + std::to_string(bytes), Deadline::after_ms(60000)), "barrier");
  const CommStats before = c.stats();
  if (int rc = time_calls(me, c, a, s, x.stream, iters, &row)) return rc;
  const CommStats after = c.stats();
  row.msgs = double(after.bootstrap_messages_sent - before.bootstrap_messages_sent + after.bootstrap_messages_received -
                    before.bootstrap_messages_received) / iters;
  row.early = double(after.gates_opened_early - before.gates_opened_early) / iters;
  if (o.graph && s) {
    // The same call captured (CUDA records the replay tick and the wait;
    // ConCCL keeps the lists armed), one replay verified, then `iters`
    // replays back to back.
    CUgraph g = nullptr;
    CUgraphExec ge = nullptr;
    CHECK_CU(cuStreamBeginCapture(x.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    const Status captured = c.call(a, s);
    CHECK_CU(cuStreamEndCapture(x.stream, &g));
    CHECK_OK(captured, "captured call");
    CHECK_CU(cuGraphInstantiateWithFlags(&ge, g, 0));
    std::vector<CUgraphExec> more(size_t(o.graph_execs - 1), nullptr);
    for (CUgraphExec& m : more) CHECK_CU(cuGraphInstantiateWithFlags(&m, g, 0));
    CHECK_CU(cuMemsetD8Async(x.base + x.send_region, 0xA5, rb, x.stream));
    CHECK_CU(cuGraphLaunch(ge, x.stream));
    CHECK_CU(cuMemcpyDtoHAsync(x.down.data(), x.base + x.send_region, rb, x.stream));
    CHECK_CU(cuStreamSynchronize(x.stream));
    CHECK_OK(c.async_error(), "verified replay (async)");
    row.wrong += count_wrong();
    for (int i = 0; i < 3; ++i) CHECK_CU(cuGraphLaunch(ge, x.stream));
    CHECK_CU(cuStreamSynchronize(x.stream));
    CHECK_OK(c.bootstrap()->barrier("graph " + std::to_string(bytes), Deadline::after_ms(60000)), "barrier");
    double ghost = 0;
    const CommStats k0 = c.stats();
    const auto g0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      const auto h0 = std::chrono::steady_clock::now();
      const size_t turn = size_t(i) % size_t(o.graph_execs);
      CHECK_CU(cuGraphLaunch(turn ? more[turn - 1] : ge, x.stream));
      ghost += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
    }
    CHECK_CU(cuStreamSynchronize(x.stream));
    row.graph_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - g0).count() / iters;
    row.graph_host_us = ghost / iters;
    const CommStats k1 = c.stats();
    if (k1.replays > k0.replays) {
      const double seen = double(k1.replays - k0.replays);
      row.keeper_busy_us = double(k1.replay_busy_ns - k0.replay_busy_ns) / seen / 1e3;
      row.keeper_idle_us = double(k1.replay_idle_ns - k0.replay_idle_ns) / seen / 1e3;
    }
    CHECK_OK(c.async_error(), "timed replays (async)");
    CHECK_CU(cuGraphExecDestroy(ge));
    for (CUgraphExec m : more) CHECK_CU(cuGraphExecDestroy(m));
    CHECK_CU(cuGraphDestroy(g));
  }
  *out = row;
  return 0;
}

// "# engines: ..." of GPU 0 (LCE ids and weights, the ones --engines allows marked).
void print_engines(const Opts& o, const Device& dev) {
  std::printf("# engines of GPU 0 (LCE id x weight, * = used):");
  for (const EngineInfo& e : dev.topology().gpus[0].engines) {
    const bool used = o.engines.empty() || std::find(o.engines.begin(), o.engines.end(), e.id) != o.engines.end();
    std::printf(" %d x %g%s", e.id, e.weight, used ? "*" : "");
  }
  std::printf("\n");
}

// Rank 0: folds every other rank's rows into its own (slowest time, summed
// wrong bytes), prints the table and writes the JSON. Returns 1 if any byte
// was wrong, else 0.
int report(const Opts& o, std::vector<Row>& rows, const std::vector<Bootstrap::Message>& all) {
  const int n = o.ranks ? o.ranks : o.procs;
  const uint64_t nn = static_cast<uint64_t>(n);
  int rc = 0;
  for (int r = 1; r < n && size_t(r) < all.size(); ++r) {
    const std::string& m = all[size_t(r)].data;
    for (size_t i = 0; i < rows.size() && (i + 1) * sizeof(Row) <= m.size(); ++i) {
      Row x;
      std::memcpy(&x, m.data() + i * sizeof(Row), sizeof(Row));
      rows[i].us = std::max(rows[i].us, x.us);
      rows[i].host_us = std::max(rows[i].host_us, x.host_us);
      rows[i].host_p50_us = std::max(rows[i].host_p50_us, x.host_p50_us);
      rows[i].msgs = std::max(rows[i].msgs, x.msgs);
      rows[i].early = std::max(rows[i].early, x.early);
      rows[i].graph_us = std::max(rows[i].graph_us, x.graph_us);
      rows[i].graph_host_us = std::max(rows[i].graph_host_us, x.graph_host_us);
      rows[i].keeper_busy_us = std::max(rows[i].keeper_busy_us, x.keeper_busy_us);
      rows[i].keeper_idle_us = std::max(rows[i].keeper_idle_us, x.keeper_idle_us);
      rows[i].wrong += x.wrong;
    }
  }
  if (o.ranks)
    std::printf("# nv_window_bench %s, one process, %d loopback ranks, cached plans, stream-ordered\n",
                coll_op_name(o.op), n);
  else
    std::printf("# nv_window_bench %s, %d processes, windows, %s-ordered\n", coll_op_name(o.op), n,
                o.host ? "host" : "stream");
  std::printf("%12s %12s %12s %12s %10s %10s %8s", "bytes", "us/call", "host us", "host p50", "algbw GB/s", "msgs/call",
              "#wrong");
  if (o.graph) std::printf(" %12s %12s %12s %12s", "us/replay", "host us/rep", "keeper busy", "keeper idle");
  std::printf("\n");
  std::string js = "{\"op\":\"" + std::string(coll_op_name(o.op)) + "\",\"procs\":" +
                   std::to_string(o.ranks ? 1 : n) + ",\"ranks\":" + std::to_string(n) +
                   ",\"ordered\":\"" + (o.host ? "host" : "stream") + "\",\"rows\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& x = rows[i];
    const double gbs = double(x.bytes) * nn / (x.us * 1e3);
    std::printf("%12llu %12.2f %12.2f %12.2f %10.2f %10.2f %8llu", (unsigned long long)x.bytes, x.us, x.host_us,
                x.host_p50_us, gbs, x.msgs, (unsigned long long)x.wrong);
    if (o.graph) std::printf(" %12.2f %12.2f %12.2f %12.2f", x.graph_us, x.graph_host_us, x.keeper_busy_us, x.keeper_idle_us);
    std::printf("\n");
    js += std::string(i ? "," : "") + "{\"bytes\":" + std::to_string(x.bytes) + ",\"us_per_call\":" +
          std::to_string(x.us) + ",\"host_us_per_call\":" + std::to_string(x.host_us) +
          ",\"host_us_per_call_p50\":" + std::to_string(x.host_p50_us) +
          ",\"algbw_gbs\":" + std::to_string(gbs) + ",\"bootstrap_messages_per_call\":" + std::to_string(x.msgs) +
          ",\"gates_opened_early_per_call\":" + std::to_string(x.early) +
          (o.graph ? ",\"us_per_replay\":" + std::to_string(x.graph_us) +
                         ",\"host_us_per_replay\":" + std::to_string(x.graph_host_us) +
                         ",\"keeper_busy_us_per_replay\":" + std::to_string(x.keeper_busy_us) +
                         ",\"keeper_idle_us_per_replay\":" + std::to_string(x.keeper_idle_us)
                   : std::string()) +
          ",\"wrong\":" + std::to_string(x.wrong) + "}";
    if (x.wrong) rc = 1;
  }
  js += "]}\n";
  if (!o.json.empty())
    if (FILE* f = std::fopen(o.json.c_str(), "w")) {
      std::fputs(js.c_str(), f);
      std::fclose(f);
    }
  return rc;
}

// CUDA first (the primary context of GPU 0, current, and a non-blocking
// stream), then the nv device at process slot `slot` (-1: the default), as
// the library recommends (docs/nv-backend.md). Returns 0, or 4 (CUDA) / 5
// (ConCCL) as the rank's exit code.
int open_cuda_and_device(int me, int slot, CUcontext* ctx, CUstream* stream, std::unique_ptr<Device>* dev) {
  CHECK_CU(cuInit(0));
  CUdevice cdev;
  CHECK_CU(cuDeviceGet(&cdev, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(ctx, cdev));
  CHECK_CU(cuCtxSetCurrent(*ctx));
  CHECK_CU(cuStreamCreate(stream, CU_STREAM_NON_BLOCKING));
  DeviceOptions d;
  d.backend = "nv";
  if (slot >= 0) d.process_slot = slot;
  Result<std::unique_ptr<Device>> opened = open_device(d);
  CHECK_OK(opened.status(), "open_device");
  *dev = std::move(opened).value();
  return 0;
}

// One rank (a forked process): CUDA context and stream, device, communicator
// and window, then every size; rank 0 reports. Returns the rank's exit code.
int run_rank(const Opts& o, const UniqueId& id, int me) {
  const int n = o.procs;
  CUcontext ctx;
  CUstream stream;
  std::unique_ptr<Device> owned;
  if (int rc = open_cuda_and_device(me, me, &ctx, &stream, &owned)) return rc;
  Result<std::unique_ptr<Device>> dev = std::move(owned);
  Communicator::Options co;
  co.loopback = true;
  co.gpu = 0;
  co.call_timeout_ms = 60000;
  co.engines = o.engines;
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(**dev, me, n, id, co);
  CHECK_OK(comm.status(), "create");
  Communicator& c = **comm;
  if (me == 0) print_engines(o, **dev);
  const uint64_t nn = static_cast<uint64_t>(n);
  const uint64_t send_region = (o.op == CollOp::all_to_all ? o.max * nn : o.max);
  const uint64_t total = send_region + o.max * nn;
  Result<nv::CudaAlloc> mem = nv::cuda_alloc(total, 0);
  CHECK_OK(mem.status(), "cuda_alloc");
  Result<Buffer> wb = nv::register_cuda(**dev, mem->ptr, mem->size, 0);
  CHECK_OK(wb.status(), "register_cuda");
  Result<Window> w = c.register_window(*wb);
  CHECK_OK(w.status(), "register_window");
  Result<std::unique_ptr<StreamOps>> ops = nv::stream_ops(**dev, stream);
  CHECK_OK(ops.status(), "stream_ops");
  StreamOps* s = o.host ? nullptr : ops->get();
  std::vector<uint8_t> up(send_region), down(o.max * nn);
  std::vector<Row> rows;
  RankCtx x{o, me, c, *w, stream, s, mem->ptr, send_region, up, down};
  // --kick-us N: a thread of this process stores into a word on a stream of
  // its own every N us while the sizes run: an experiment on whether work
  // arriving on another channel of the context brings a stream that waits
  // at a failed acquire back sooner (docs/perf/h200-graphs.md).
  std::atomic<bool> kicking{o.kick_us > 0};
  std::thread kicker;
  CUdeviceptr kick_word = 0;
  if (o.kick_us > 0) {
    CHECK_CU(cuMemAlloc(&kick_word, 64));
    kicker = std::thread([&] {
      (void)cuCtxSetCurrent(ctx);
      CUstream ks;
      if (cuStreamCreate(&ks, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return;
      for (uint32_t i = 1; kicking.load(std::memory_order_relaxed); ++i) {
        (void)cuStreamWriteValue32(ks, kick_word, i, 0);
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(o.kick_us)) {
        }
      }
      (void)cuStreamSynchronize(ks);
      (void)cuStreamDestroy(ks);
    });
  }
  for (uint64_t bytes = o.min; bytes <= o.max; bytes *= 2) {
    Row row;
    if (int rc = measure_size(x, bytes, &row)) {
      kicking = false;
      if (kicker.joinable()) kicker.join();
      return rc;
    }
    rows.push_back(row);
  }
  kicking = false;
  if (kicker.joinable()) kicker.join();
  if (kick_word) (void)cuMemFree(kick_word);
  if (o.graph && o.graph_execs > 1 && me == 0) {
    // The driver's own cost: a graph of a stream write and a wait it satisfies.
    CUdeviceptr word = 0;
    CHECK_CU(cuMemAlloc(&word, 8));
    CUgraph g = nullptr;
    CUgraphExec ge = nullptr;
    CHECK_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CHECK_CU(cuStreamWriteValue64(stream, word, 1, 0));
    CHECK_CU(cuStreamWaitValue64(stream, word, 1, 0));
    CHECK_CU(cuStreamEndCapture(stream, &g));
    CHECK_CU(cuGraphInstantiateWithFlags(&ge, g, 0));
    for (int i = 0; i < 10; ++i) CHECK_CU(cuGraphLaunch(ge, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    double host = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iters; ++i) {
      const auto h0 = std::chrono::steady_clock::now();
      CHECK_CU(cuGraphLaunch(ge, stream));
      host += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
    }
    CHECK_CU(cuStreamSynchronize(stream));
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::printf("graph of one stream write and one satisfied wait (rank 0): %.2f us per launch, host %.2f us\n",
                us / o.iters, host / o.iters);
    CHECK_CU(cuGraphExecDestroy(ge));
    CHECK_CU(cuGraphDestroy(g));
    CHECK_CU(cuMemFree(word));
  }
  // Rank 0 gets every rank's rows (outside the timed loops) and reports the slowest.
  std::string mine(reinterpret_cast<const char*>(rows.data()), rows.size() * sizeof(Row));
  Result<std::vector<Bootstrap::Message>> all = c.bootstrap()->exchange("results", mine, {}, Deadline::after_ms(60000));
  CHECK_OK(all.status(), "results");
  int rc = 0;
  if (me == 0) rc = report(o, rows, *all);
  CHECK_OK(c.deregister_window(*w), "deregister_window");
  return rc;
}

// --ranks N: every rank in this process, calls with every rank's buffers on
// one CUDA stream (the cached-plan path of Communicator::call), timed as
// measure_size times the process-per-rank calls: one verified call per
// size, warm-up (1.5 s of calls before the first size), then `iters` calls
// back to back and one stream synchronize.
int run_one_process(const Opts& o) {
  const int me = 0;  // for CHECK_CU / CHECK_OK
  const int n = o.ranks;
  const uint64_t nn = static_cast<uint64_t>(n);
  CUcontext ctx;
  CUstream stream;
  std::unique_ptr<Device> owned;
  if (int rc = open_cuda_and_device(me, -1, &ctx, &stream, &owned)) return rc;
  Result<std::unique_ptr<Device>> dev = std::move(owned);
  Communicator::Options co;
  co.loopback = true;
  co.call_timeout_ms = 60000;
  co.engines = o.engines;
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(**dev, std::vector<int>(size_t(n), 0), co);
  CHECK_OK(comm.status(), "create");
  Communicator& c = **comm;
  print_engines(o, **dev);
  const uint64_t sb_max = o.op == CollOp::all_to_all ? o.max * nn : o.max, rb_max = o.max * nn;
  std::vector<nv::CudaAlloc> mem;
  std::vector<Buffer> send, recv;
  for (int r = 0; r < n; ++r)
    for (auto [bytes, into] : {std::pair{sb_max, &send}, std::pair{rb_max, &recv}}) {
      Result<nv::CudaAlloc> m = nv::cuda_alloc(bytes, 0);
      CHECK_OK(m.status(), "cuda_alloc");
      mem.push_back(*m);
      Result<Buffer> b = nv::register_cuda(**dev, m->ptr, m->size, 0);
      CHECK_OK(b.status(), "register_cuda");
      into->push_back(*b);
    }
  Result<std::unique_ptr<StreamOps>> ops = nv::stream_ops(**dev, stream);
  CHECK_OK(ops.status(), "stream_ops");
  StreamOps* s = ops->get();
  std::vector<uint8_t> up(sb_max), down(rb_max);
  std::vector<Row> rows;
  bool clocks_raised = false;
  for (uint64_t bytes = o.min; bytes <= o.max; bytes *= 2) {
    const uint64_t sb = o.op == CollOp::all_to_all ? bytes * nn : bytes, rb = bytes * nn;
    CollectiveArgs a;
    a.op = o.op;
    a.bytes = bytes;
    for (int r = 0; r < n; ++r) {
      a.send.push_back(send[size_t(r)].slice(0, sb));
      a.recv.push_back(recv[size_t(r)].slice(0, rb));
    }
    Row row;
    row.bytes = bytes;
    for (int r = 0; r < n; ++r) {
      for (uint64_t i = 0; i < sb; ++i) up[i] = pattern(r, bytes, i);
      CHECK_CU(cuMemcpyHtoD(send[size_t(r)].va, up.data(), sb));
      CHECK_CU(cuMemsetD8(recv[size_t(r)].va, 0xA5, rb));
    }
    CHECK_OK(c.call(a, s), "verified call");
    CHECK_CU(cuStreamSynchronize(stream));
    CHECK_OK(c.async_error(), "verified call (async)");
    for (int me_r = 0; me_r < n; ++me_r) {
      CHECK_CU(cuMemcpyDtoH(down.data(), recv[size_t(me_r)].va, rb));
      for (int r = 0; r < n; ++r)
        for (uint64_t i = 0; i < bytes; ++i) {
          const uint64_t src = o.op == CollOp::all_to_all ? uint64_t(me_r) * bytes + i : i;
          row.wrong += down[uint64_t(r) * bytes + i] != pattern(r, bytes, src);
        }
    }
    const int iters = static_cast<int>(std::max<uint64_t>(
        5, std::min<uint64_t>(static_cast<uint64_t>(o.iters), (8ull << 30) / std::max<uint64_t>(rb * nn, 1))));
    for (const auto w0 = std::chrono::steady_clock::now(); !clocks_raised;) {
      for (int i = 0; i < 100; ++i) CHECK_OK(c.call(a, s), "warm-up call");
      CHECK_CU(cuStreamSynchronize(stream));
      clocks_raised = std::chrono::steady_clock::now() - w0 >= std::chrono::milliseconds(1500);
    }
    for (int i = 0; i < 3; ++i) CHECK_OK(c.call(a, s), "warm-up call");
    CHECK_CU(cuStreamSynchronize(stream));
    if (int rc = time_calls(me, c, a, s, stream, iters, &row)) return rc;
    rows.push_back(row);
  }
  comm->reset();  // its plans before the buffers they name
  for (const Buffer& b : send) CHECK_OK(nv::unregister_cuda(**dev, b), "unregister_cuda");
  for (const Buffer& b : recv) CHECK_OK(nv::unregister_cuda(**dev, b), "unregister_cuda");
  for (nv::CudaAlloc& m : mem) CHECK_OK(nv::cuda_free(m), "cuda_free");
  return report(o, rows, {});
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--procs") o.procs = std::atoi(next().c_str());
    else if (a == "--ranks") o.ranks = std::atoi(next().c_str());
    else if (a == "--engines") {
      const std::string v = next();
      for (size_t at = 0; at < v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        o.engines.push_back(std::atoi(v.substr(at, comma - at).c_str()));
        at = comma + 1;
      }
    }
    else if (a == "--op") {
      if (!parse_coll_op(next(), &o.op) || (o.op != CollOp::all_gather && o.op != CollOp::all_to_all)) {
        std::fprintf(stderr, "--op: allgather or alltoall\n");
        return 2;
      }
    } else if (a == "--min") o.min = parse_size(next());
    else if (a == "--max") o.max = parse_size(next());
    else if (a == "--iters") o.iters = std::atoi(next().c_str());
    else if (a == "--host") o.host = true;
    else if (a == "--graph") o.graph = true;
    else if (a == "--graph-execs") o.graph_execs = std::atoi(next().c_str());
    else if (a == "--kick-us") o.kick_us = std::atoi(next().c_str());
    else if (a == "--json") o.json = next();
    else {
      std::fprintf(stderr, "usage: nv_window_bench --procs N [--op allgather|alltoall] [--min 1K] [--max 256M] "
                           "[--iters 200] [--host] [--graph] [--graph-execs K] [--kick-us N] [--engines a,b] [--json FILE]\n"
                           "       nv_window_bench --ranks N [--op allgather|alltoall] [--min 1K] [--max 256M] "
                           "[--iters 200] [--engines a,b] [--json FILE]\n");
      return 2;
    }
  }
  if (o.procs < 1 || o.procs > 16 || o.min == 0 || o.min > o.max || o.iters < 1 || o.graph_execs < 1 ||
      o.graph_execs > 8) {
    std::fprintf(stderr, "nv_window_bench: --procs 1..16, 0 < --min <= --max, --iters >= 1, --graph-execs 1..8\n");
    return 2;
  }
  if (o.ranks) {
    if (o.ranks < 1 || o.ranks > 16 || o.host || o.graph) {
      std::fprintf(stderr, "nv_window_bench: --ranks 1..16, without --host or --graph (one process, on a stream)\n");
      return 2;
    }
    return run_one_process(o);
  }
  Result<UniqueId> id = make_unique_id();
  if (!id.ok()) return 3;
  std::vector<pid_t> kids;
  for (int r = 0; r < o.procs; ++r) {
    const pid_t p = fork();
    if (p == 0) {
      const int rc = run_rank(o, *id, r);
      std::fflush(stdout);  // _exit does not flush stdio
      std::fflush(stderr);
      _exit(rc);
    }
    kids.push_back(p);
  }
  int rc = 0;
  for (pid_t p : kids) {
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  return rc;
}
