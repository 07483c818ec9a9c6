// tools/bench/nv_coll_bench.cpp - collectives on the H200's copy engines
// through the one command layer (open_device("nv"), Communicator, Plan), on
// CUDA buffers (cuMemCreate, registered with nv::register_cuda), with N
// loopback ranks on the one GPU. Three measurements:
//
//  c3       A cuBLAS bf16 GEMM (n^3, random data) concurrent with an
//           all-gather, against the same all-gather done by cudaMemcpyAsync
//           (the SM path: a copy kernel on CUDA 13 / driver 580), and on a
//           bandwidth budget: --budget-frac of the full-rate path's bytes,
//           on the engines nv::pick_for_rate picks to move them within the
//           GEMM phase (Communicator::Options::engines). Per variant: the
//           all-gathers alone, then (nv_c3_bench's protocol) each concurrent
//           phase between two GEMM-alone phases, the variants' order rotating
//           between repetitions: the GEMM's slowdown is its CUDA-event time
//           beside the copies over the mean of its two neighbours', and % of
//           ideal speedup is 100*(S_real-1)/(S_ideal-1), S_ideal =
//           (t_g+t_c)/max(t_g,t_c), S_real = (t_g+t_c)/t_both (the ConCCL
//           paper's metric) with t_g the neighbours' mean, so drift in clock
//           and power between phases cancels; medians over repetitions. NVML
//           (dlopen, read-only) gives each phase's SM clock and power. Every
//           variant's result is verified byte for byte.
//           --copy-frac R sizes the all-gathers to R x the GEMM's time alone
//           (R = 1: as long as the GEMM; R = 0.8: they end inside it, the
//           method of docs/perf/h200.md runs 6-7), --gemm-data zeros runs
//           the same GEMM on all-zero matrices, which stays off the power cap,
//           and --soak-ms S runs S ms of GEMMs before every phase.
//  latency  Plan completion -> a dependent CUDA kernel: the plan is
//           prelaunched (queued behind its trigger), a stream waits with
//           cuStreamWaitValue64(GEQ) on rank 0's arrival signal (host memory
//           shared with CUDA: nv::share_signals_with_cuda) and then runs a
//           1-thread kernel that reads %globaltimer; the trigger is released.
//           Latency = kernel %globaltimer - the engine timestamp (GPU ns)
//           that ends the last list writing to rank 0, right after its
//           arrival (CollectiveArgs::timestamps).
//  hostcost Host time per queued copy through the vocabulary: 64 copies of
//           256 B recorded into a CommandBuffer and submitted (one doorbell),
//           and written straight into the pushbuffer with reserve/commit;
//           8 submissions timed at a time, the engine drained between them
//           (untimed), so the ring never pushes back.
//
//           Extra variants (--variants) separate what the engines cost from
//           what the collective costs: ce1/ceq/budget1 share one queue per
//           engine between the ranks (Communicator::Options::queues
//           per_engine; ce and budget per_rank), ce1/budget2 keep a second
//           plan in flight (no host round trip between launches),
//           budgetpace spreads the budget's launches evenly over the GEMM
//           instead of back to back, and cecp/budgetcp move the same bytes
//           as one plain copy per engine, no collective (a single Hopper
//           copy runs on one PCE, so cecp moves its bytes at about 40 GB/s
//           per engine, not at the all-gather's rate). agdest/agpiece
//           write the all-gather's copies by hand on one queue per engine,
//           destination-major or piece-major (each --piece-kib piece of a
//           source copied to every destination back to back, so that it is
//           read from HBM once and then from L2).
//
//   nv_coll_bench [--ranks 4] [--n 8192] [--gemms 300] [--chunk-mib 64] [--reps 3] [--soak-ms 0]
//                 [--budget-frac 0.25] [--copy-frac 1] [--gemm-data random|zeros]
//                 [--lat-iters 300] [--json PATH] [--only c3|latency|hostcost]
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/nv/nv_device.hpp"
#include "conccl/collectives.hpp"
#include "conccl/nv.hpp"
#include "queue/gpfifo_queue.hpp"
#include "tools/bench/cuda_check.hpp"
#include "tools/bench/cuda_stamp.hpp"
#include "tools/bench/nv_bench_util.hpp"
#include "tools/bench/nvml_sampler.hpp"

using namespace conccl;
namespace cnv = conccl::nv;
using Clock = std::chrono::steady_clock;
using bench::Sampler;


namespace {

void check(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "nv_coll_bench: %s: %s\n", what, s.to_string().c_str());
  std::exit(s.code() == Code::unavailable ? 5 : 4);
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

// Rank r's send data: xorshift64* words seeded by the rank.
void fill_pattern(std::vector<uint8_t>& v, int rank) {
  auto* p = reinterpret_cast<uint64_t*>(v.data());
  uint64_t x = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank + 1);
  for (size_t i = 0; i < v.size() / 8; ++i) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    p[i] = x * 0x2545F4914F6CDD1Dull;
  }
}

struct Ranks {
  int n = 0;
  uint64_t chunk = 0;
  std::vector<cnv::CudaAlloc> send, recv;
  std::vector<Buffer> send_b, recv_b;  // the same memory as conccl::Buffers
  std::vector<std::vector<uint8_t>> data;  // what each rank sends
};

Ranks make_ranks(Device& dev, int n, uint64_t chunk) {
  Ranks r;
  r.n = n;
  r.chunk = chunk;
  for (int i = 0; i < n; ++i) {
    Result<cnv::CudaAlloc> s = cnv::cuda_alloc(chunk), d = cnv::cuda_alloc(chunk * n);
    check(s.status(), "cuda_alloc send");
    check(d.status(), "cuda_alloc recv");
    r.send.push_back(*s);
    r.recv.push_back(*d);
    Result<Buffer> sb = cnv::register_cuda(dev, s->ptr, chunk), rb = cnv::register_cuda(dev, d->ptr, chunk * n);
    check(sb.status(), "register send");
    check(rb.status(), "register recv");
    r.send_b.push_back(*sb);
    r.recv_b.push_back(*rb);
    r.data.emplace_back(chunk);
    fill_pattern(r.data.back(), i);
    CUDA_CHECK(cudaMemcpy(reinterpret_cast<void*>(s->ptr), r.data.back().data(), chunk, cudaMemcpyHostToDevice));
  }
  return r;
}

// Poisons every recv buffer (so that a copy that did not happen shows).
void poison(const Ranks& r) {
  for (const cnv::CudaAlloc& d : r.recv) CUDA_CHECK(cudaMemset(reinterpret_cast<void*>(d.ptr), 0xA5, r.chunk * r.n));
  CUDA_CHECK(cudaDeviceSynchronize());
}

// Every byte of every recv buffer against what the ranks sent.
uint64_t wrong_bytes(const Ranks& r) {
  std::vector<uint8_t> back(r.chunk * r.n);
  uint64_t wrong = 0;
  for (int d = 0; d < r.n; ++d) {
    CUDA_CHECK(cudaMemcpy(back.data(), reinterpret_cast<void*>(r.recv[d].ptr), back.size(), cudaMemcpyDeviceToHost));
    for (int s = 0; s < r.n; ++s) {
      const uint8_t* got = back.data() + uint64_t(s) * r.chunk;
      if (std::memcmp(got, r.data[s].data(), r.chunk) == 0) continue;
      for (uint64_t i = 0; i < r.chunk; ++i) wrong += got[i] != r.data[s][i];
    }
  }
  return wrong;
}

CollectiveArgs all_gather_args(const Ranks& r) {
  CollectiveArgs a;
  a.op = CollOp::all_gather;
  a.variant = Variant::pcpy;
  a.bytes = r.chunk;
  a.send = r.send_b;
  a.recv = r.recv_b;
  return a;
}

struct Gemm {
  int n;
  cublasHandle_t blas;
  cudaStream_t stream;
  void *a, *b, *c;
  cudaEvent_t e0, e1;
  void run(int count) {
    const float alpha = 1.f, beta = 0.f;
    CUDA_CHECK(cudaEventRecord(e0, stream));
    for (int i = 0; i < count; ++i)
      CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b, CUDA_R_16BF, n,
                                &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CUDA_CHECK(cudaEventRecord(e1, stream));
  }
  double gpu_ms() {
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
  }
};

Gemm make_gemm(int n, bool zeros) {
  Gemm g;
  g.n = n;
  CUBLAS_CHECK(cublasCreate(&g.blas));
  CUDA_CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasSetStream(g.blas, g.stream));
  const size_t mat = size_t(n) * n;
  std::vector<uint16_t> h(mat);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& x : h) x = zeros ? 0 : to_bf16(d(rng));
  CUDA_CHECK(cudaMalloc(&g.a, mat * 2));
  CUDA_CHECK(cudaMalloc(&g.b, mat * 2));
  CUDA_CHECK(cudaMalloc(&g.c, mat * 2));
  CUDA_CHECK(cudaMemcpy(g.a, h.data(), mat * 2, cudaMemcpyHostToDevice));
  for (auto& x : h) x = zeros ? 0 : to_bf16(d(rng));
  CUDA_CHECK(cudaMemcpy(g.b, h.data(), mat * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaEventCreate(&g.e0));
  CUDA_CHECK(cudaEventCreate(&g.e1));
  return g;
}

// One way of doing the all-gather `count` times back to back.
struct Path {
  std::string key, name;
  // Plans before their communicator: a move assignment (vector::erase)
  // assigns members in this order, so the old plans go before the old
  // communicator they point to (ASan found the other order on the H200).
  std::vector<std::unique_ptr<Plan>> plans;  // >1: launched round robin, each waited only before its relaunch
  std::unique_ptr<Communicator> comm;        // CE paths
  cudaStream_t stream = nullptr;       // SM path
  // The "copy" path: the same bytes per launch as single copies, one per
  // engine queue (src[i] -> dst[i]), no collective.
  std::vector<std::unique_ptr<Queue>> queues;
  std::vector<cnv::CudaAlloc> src, dst;
  uint64_t copy_bytes = 0;
  double pace_ms = 0;  // > 0: launch i starts no earlier than i * pace_ms after the first
  // The "manual all-gather" paths: the all-gather's copies written by hand
  // on one queue per engine (queues, stripe[q] of every chunk on queue q):
  // dest-major (for each destination, every source's stripe) or piece-major
  // (for each piece of a source, its copies to every destination back to
  // back, so that the piece is read from HBM once and then from L2).
  bool gather = false, piece_major = false;
  uint64_t piece = 0;
  std::vector<uint64_t> stripe;
  int count = 0;
};

void run_path(Path& p, const Ranks& r, int count) {
  const Deadline dl = Deadline::after(std::chrono::seconds(60));
  if (!p.plans.empty()) {
    const auto t0 = Clock::now();
    for (int i = 0; i < count; ++i) {
      if (p.pace_ms > 0) std::this_thread::sleep_until(t0 + std::chrono::duration<double, std::milli>(i * p.pace_ms));
      Plan& plan = *p.plans[static_cast<size_t>(i) % p.plans.size()];
      if (plan.running()) check(plan.wait(dl), "wait");
      check(plan.launch(dl), "launch");
      if (p.plans.size() == 1) check(plan.wait(dl), "wait");
    }
    for (auto& plan : p.plans)
      if (plan->running()) check(plan->wait(dl), "wait");
    return;
  }
  if (p.gather) {
    for (int i = 0; i < count; ++i) {
      for (size_t q = 0; q < p.queues.size(); ++q) {
        uint64_t off = 0;
        for (size_t k = 0; k < q; ++k) off += p.stripe[k];
        const uint64_t len = p.stripe[q];
        CommandBuffer cb = p.queues[q]->command_buffer();
        auto put = [&](int d, int s, uint64_t o, uint64_t n) {
          check(cb.copy(r.recv[d].ptr + uint64_t(s) * r.chunk + o, r.send[s].ptr + o, n), "copy");
        };
        for (int a = 0; a < r.n; ++a) {
          if (!p.piece_major) {
            for (int s = 0; s < r.n; ++s) put(a, s, off, len);  // a: the destination
            continue;
          }
          for (uint64_t o = off; o < off + len; o += p.piece)  // a: the source
            for (int d = 0; d < r.n; ++d) put(d, a, o, std::min(p.piece, off + len - o));
        }
        check(p.queues[q]->submit(cb, dl), "submit");
      }
      for (auto& q : p.queues) check(q->wait_done(dl), "wait_done");
    }
    return;
  }
  if (!p.queues.empty()) {
    for (int i = 0; i < count; ++i) {
      for (size_t q = 0; q < p.queues.size(); ++q) {
        CommandBuffer cb = p.queues[q]->command_buffer();
        check(cb.copy(p.dst[q].ptr, p.src[q].ptr, p.copy_bytes), "copy");
        check(p.queues[q]->submit(cb, dl), "submit");
      }
      for (auto& q : p.queues) check(q->wait_done(dl), "wait_done");
    }
    return;
  }
  for (int i = 0; i < count; ++i)
    for (int d = 0; d < r.n; ++d)
      for (int s = 0; s < r.n; ++s)
        CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(r.recv[d].ptr + uint64_t(s) * r.chunk),
                                   reinterpret_cast<void*>(r.send[s].ptr), r.chunk, cudaMemcpyDeviceToDevice, p.stream));
  CUDA_CHECK(cudaStreamSynchronize(p.stream));
}

// What the path got wrong: the all-gather's recv buffers, or each copy's
// destination against its source.
uint64_t path_wrong(const Path& p, const Ranks& r) {
  if (p.queues.empty() || p.gather) return wrong_bytes(r);
  uint64_t wrong = 0;
  std::vector<uint8_t> a(p.copy_bytes), b(p.copy_bytes);
  for (size_t q = 0; q < p.queues.size(); ++q) {
    CUDA_CHECK(cudaMemcpy(a.data(), reinterpret_cast<void*>(p.src[q].ptr), a.size(), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b.data(), reinterpret_cast<void*>(p.dst[q].ptr), b.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < a.size(); ++i) wrong += a[i] != b[i];
    CUDA_CHECK(cudaMemset(reinterpret_cast<void*>(p.dst[q].ptr), 0xA5, p.copy_bytes));  // poison for the next run
  }
  return wrong;
}

struct C3Row {
  std::string key, name;
  double copy_ms = 0, gemm_ms = 0, both_ms = 0, gemm_both_ms = 0, ideal_pct = 0, slowdown_pct = 0;
  std::vector<double> ideal_reps, slowdown_reps;  // per repetition
  uint64_t wrong = 0;
  std::string engines;
  int launches = 0;
  double gbytes = 0;  // moved per measurement (all launches)
  // NVML averages: GEMM-alone neighbours / concurrent phase.
  double sm_mhz_alone = 0, sm_mhz_both = 0, power_w_alone = 0, power_w_both = 0;
};

// What the command line sets.
struct Args {
  int ranks = 4, n = 8192, gemms = 300, reps = 3, lat_iters = 300, soak_ms = 0;
  uint64_t chunk_mib = 64, piece_kib = 2048;
  double budget_frac = 0.25, copy_frac = 1.0;
  bool zeros = false;
  std::string json_path, only, variants = "ce,sm,budget";
};

// Whether the comma-separated `list` names `key`.
bool wanted(const std::string& list, const char* key) {
  return ("," + list + ",").find("," + std::string(key) + ",") != std::string::npos;
}

// What the C3 measurement shares: the device, the arguments, the ranks'
// buffers, the GEMM, the copy paths and the NVML sampler.
struct C3 {
  Device& dev;
  const Args& o;
  Ranks r;
  Gemm g;
  uint64_t bytes_per;                 // what one all-gather moves
  std::vector<int> all_ids, weights;  // GPU 0's engines and their weights
  std::vector<Path> paths;
  Sampler sampler;
};

// One phase's times and NVML averages.
struct C3Phase {
  double wall_ms = 0, gemm_ms = 0, copy_ms = 0;
  Sampler::Avg avg;
};

// --soak-ms: GEMMs for that long before every timed phase, so that each
// starts from the same power and thermal state (run 24: the GEMMs alone
// took 482 or 508 ms depending on what ran before them).
void soak(C3& x) {
  const auto s = Clock::now();
  while (x.o.soak_ms > 0 && ms_since(s) < x.o.soak_ms) {
    x.g.run(10);
    (void)x.g.gpu_ms();
  }
}

// An all-gather path on a communicator of its own. shared: one queue per
// engine for all ranks; in_flight: plans launched round robin, so the next
// launch is queued before the last one ends.
Path ce_path(C3& x, const std::string& key, const std::string& name, std::vector<int> engines, bool shared,
             int in_flight) {
  Path p;
  p.key = key;
  p.name = name;
  Communicator::Options o;
  o.loopback = true;
  o.queues = shared ? Communicator::Options::QueueSharing::per_engine : Communicator::Options::QueueSharing::per_rank;
  o.engines = std::move(engines);
  Result<std::unique_ptr<Communicator>> c = Communicator::create(x.dev, std::vector<int>(x.o.ranks, 0), o);
  check(c.status(), "communicator");
  p.comm = std::move(c).value();
  for (int i = 0; i < in_flight; ++i) {
    Result<std::unique_ptr<Plan>> pl = p.comm->plan(all_gather_args(x.r));
    check(pl.status(), "plan");
    p.plans.push_back(std::move(pl).value());
  }
  return p;
}

// The all-gather's bytes per launch as one plain copy per engine (src ->
// dst on each), no collective: what the engines cost the GEMM without a
// collective's many copies and signals.
Path cp_path(C3& x, const std::string& key, const std::string& name, const std::vector<int>& ids) {
  Path b;
  b.key = key;
  b.name = name;
  b.copy_bytes = x.bytes_per / ids.size() / 4096 * 4096;
  std::vector<uint8_t> pattern(b.copy_bytes);
  for (int id : ids) {
    QueueOptions qo;
    Result<std::unique_ptr<Queue>> q = x.dev.create_queue(0, id, qo);
    check(q.status(), "queue");
    b.queues.push_back(std::move(q).value());
    Result<cnv::CudaAlloc> s = cnv::cuda_alloc(b.copy_bytes), d = cnv::cuda_alloc(b.copy_bytes);
    check(s.status(), "cuda_alloc");
    check(d.status(), "cuda_alloc");
    check(cnv::register_cuda(x.dev, s->ptr, b.copy_bytes).status(), "register");
    check(cnv::register_cuda(x.dev, d->ptr, b.copy_bytes).status(), "register");
    fill_pattern(pattern, 100 + id);
    CUDA_CHECK(cudaMemcpy(reinterpret_cast<void*>(s->ptr), pattern.data(), b.copy_bytes, cudaMemcpyHostToDevice));
    b.src.push_back(*s);
    b.dst.push_back(*d);
  }
  return b;
}

// The all-gather written by hand on one queue per engine (agdest, agpiece).
Path gather_path(C3& x, const std::string& key, const std::string& name, bool piece_major) {
  Path b;
  b.key = key;
  b.name = name;
  b.gather = true;
  b.piece_major = piece_major;
  b.piece = x.o.piece_kib << 10;
  b.stripe = cnv::stripe(x.r.chunk, x.weights, 4096);
  for (int id : x.all_ids) {
    Result<std::unique_ptr<Queue>> q = x.dev.create_queue(0, id, QueueOptions{});
    check(q.status(), "queue");
    b.queues.push_back(std::move(q).value());
  }
  return b;
}

// The --variants paths that do not depend on the calibration.
void add_extra_paths(C3& x) {
  const std::string& v = x.o.variants;
  if (wanted(v, "agdest")) x.paths.push_back(gather_path(x, "agdest", "all-gather by hand, dest-major", false));
  if (wanted(v, "agpiece"))
    x.paths.push_back(gather_path(x, "agpiece", "all-gather by hand, piece-major (L2 reuse)", true));
  if (wanted(v, "ce1"))
    x.paths.push_back(ce_path(x, "ce1", "all-gather, one queue per engine, 2 plans in flight", {}, true, 2));
  if (wanted(v, "ceq")) x.paths.push_back(ce_path(x, "ceq", "all-gather, one queue per engine", {}, true, 1));
  if (wanted(v, "cecp")) x.paths.push_back(cp_path(x, "cecp", "all-gather bytes as one copy per engine", x.all_ids));
  if (wanted(v, "sm")) {
    Path sm;
    sm.key = "sm";
    sm.name = "all-gather by cudaMemcpyAsync (SM)";
    CUDA_CHECK(cudaStreamCreateWithFlags(&sm.stream, cudaStreamNonBlocking));
    x.paths.push_back(std::move(sm));
  }
}

// One phase from one host instant: GEMMs (with_gemm) and `count` runs of
// path p (if any); the copy time is the host's, the GEMM's CUDA events'.
C3Phase phase(C3& x, bool with_gemm, Path* p, int count) {
  soak(x);
  CUDA_CHECK(cudaDeviceSynchronize());
  C3Phase ph;
  const double s0 = bench::sampler_now_ms();
  const auto t0 = Clock::now();
  if (with_gemm) x.g.run(x.o.gemms);
  if (p) {
    run_path(*p, x.r, count);
    ph.copy_ms = ms_since(t0);
  }
  if (with_gemm) ph.gemm_ms = x.g.gpu_ms();
  ph.wall_ms = ms_since(t0);
  ph.avg = x.sampler.average(s0, bench::sampler_now_ms());
  return ph;
}

// Sizes every path to copy_frac of the GEMM phase (gemm_ms). Returns the
// full-rate count (the budget's reference), which comes from the "ce" path,
// calibrated even when it is not measured.
int calibrate(C3& x, double gemm_ms) {
  Path ref = ce_path(x, "ce", "all-gather on copy engines (LCE2+3+4)", {}, false, 1);
  x.paths.insert(x.paths.begin(), std::move(ref));
  for (Path& p : x.paths) {
    run_path(p, x.r, 2);  // warm-up
    const auto t0 = Clock::now();
    run_path(p, x.r, 10);
    const double one = ms_since(t0) / 10;
    p.count = std::max(1, static_cast<int>(x.o.copy_frac * gemm_ms / one + 0.5));
  }
  const int full_count = x.paths[0].count;
  if (!wanted(x.o.variants, "ce")) x.paths.erase(x.paths.begin());
  return full_count;
}

// The budget: budget_frac of the full-rate path's bytes, on the fewest
// engines that move them within the GEMM phase (nv::pick_for_rate with the
// PCE rate measured beside a GEMM).
void add_budget_paths(C3& x, int full_count, double gemm_ms) {
  const std::string& v = x.o.variants;
  const Topology& t = x.dev.topology();
  std::vector<cnv::RateCandidate> cand;
  for (const EngineInfo& e : t.gpus[0].engines) {
    bool shared = false;  // shares PCEs with a graphics CE (CUDA's copies use those too)
    for (const cnv::Engine& ne : cnv::native(x.dev)->engines())
      if (ne.lce == e.id) shared = ne.shared;
    cand.push_back({static_cast<int>(e.weight), shared});
  }
  const int count = std::max(1, static_cast<int>(full_count * x.o.budget_frac + 0.5));
  const double need = double(x.bytes_per) * count / (gemm_ms * 1e-3);
  std::vector<int> ids;
  for (size_t i : cnv::pick_for_rate(cand, need, cnv::Options{}.pce_bytes_per_s)) ids.push_back(t.gpus[0].engines[i].id);
  std::string names;
  for (int id : ids) names += (names.empty() ? "LCE" : "+LCE") + std::to_string(id);
  auto add = [&](Path b) {
    b.count = count;
    x.paths.push_back(std::move(b));
  };
  if (wanted(v, "budget")) add(ce_path(x, "budget", "all-gather on a bandwidth budget (" + names + ")", ids, false, 1));
  if (wanted(v, "budget1"))
    add(ce_path(x, "budget1", "budget, one queue per engine (" + names + ")", ids, true, 1));
  if (wanted(v, "budget2"))
    add(ce_path(x, "budget2", "budget, one queue per engine, 2 plans in flight (" + names + ")", ids, true, 2));
  if (wanted(v, "budgetpace")) {
    // The budget's launches spread evenly over copy_frac of the GEMM's
    // time instead of back to back: the same bytes at a lower rate.
    Path b = ce_path(x, "budgetpace", "budget, launches paced over the GEMM (" + names + ")", ids, true, 1);
    b.pace_ms = x.o.copy_frac * gemm_ms / count;
    add(std::move(b));
  }
  if (wanted(v, "budgetcp")) add(cp_path(x, "budgetcp", "budget bytes as one copy per engine (" + names + ")", ids));
}

// Each path alone: its row's copy time, bytes, engines and a first check.
std::vector<C3Row> measure_alone(C3& x) {
  std::vector<C3Row> rows(x.paths.size());
  for (size_t i = 0; i < x.paths.size(); ++i) {
    Path& p = x.paths[i];
    C3Row& row = rows[i];
    row.key = p.key;
    row.name = p.name;
    row.launches = p.count;
    row.gbytes = 1e-9 * double(p.queues.empty() || p.gather ? x.bytes_per : p.copy_bytes * p.queues.size()) * p.count;
    poison(x.r);
    row.copy_ms = phase(x, false, &p, p.count).copy_ms;
    row.wrong += path_wrong(p, x.r);
    for (const auto& plan : p.plans)
      for (const PlanList& l : plan->lists())
        if (row.engines.find("LCE" + std::to_string(l.engine)) == std::string::npos)
          row.engines += (row.engines.empty() ? "LCE" : "+LCE") + std::to_string(l.engine);
    for (const auto& q : p.queues) {
      const std::string e = "LCE" + std::to_string(q->engine());
      row.engines += (row.engines.empty() ? "" : "+") + e;
    }
  }
  return rows;
}

// Each concurrent phase between two GEMM-alone phases, the paths' order
// rotating per repetition; then the medians into the rows. Stops the sampler.
void measure_concurrent(C3& x, std::vector<C3Row>& rows) {
  const int reps = x.o.reps;
  std::vector<std::vector<double>> gemm_alone(x.paths.size()), both(x.paths.size()), gemm_beside(x.paths.size());
  poison(x.r);
  C3Phase before = phase(x, true, nullptr, 0);
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t k = 0; k < x.paths.size(); ++k) {
      const size_t vi = (k + static_cast<size_t>(rep)) % x.paths.size();
      Path& p = x.paths[vi];
      C3Row& row = rows[vi];
      const C3Phase c = phase(x, true, &p, p.count);
      const C3Phase after = phase(x, true, nullptr, 0);
      // Verified after the GEMM-alone phase, so the check's idle time on the
      // GPU precedes a phase that has its own neighbours.
      row.wrong += path_wrong(p, x.r);
      poison(x.r);
      const double tg = (before.wall_ms + after.wall_ms) / 2, ga = (before.gemm_ms + after.gemm_ms) / 2;
      const double tc = row.copy_ms;
      const double s_ideal = (tg + tc) / std::max(tg, tc), s_real = (tg + tc) / c.wall_ms;
      row.ideal_reps.push_back(100 * (s_real - 1) / (s_ideal - 1));
      row.slowdown_reps.push_back(100 * (c.gemm_ms / ga - 1));
      gemm_alone[vi].push_back(ga);
      both[vi].push_back(c.wall_ms);
      gemm_beside[vi].push_back(c.gemm_ms);
      const double k_reps = reps;
      row.sm_mhz_alone += (before.avg.sm + after.avg.sm) / 2 / k_reps;
      row.sm_mhz_both += c.avg.sm / k_reps;
      row.power_w_alone += (before.avg.power_w + after.avg.power_w) / 2 / k_reps;
      row.power_w_both += c.avg.power_w / k_reps;
      before = after;
    }
  }
  x.sampler.stop();
  for (size_t i = 0; i < x.paths.size(); ++i) {
    C3Row& row = rows[i];
    row.gemm_ms = bench::stats(gemm_alone[i]).median;
    row.both_ms = bench::stats(both[i]).median;
    row.gemm_both_ms = bench::stats(gemm_beside[i]).median;
    row.ideal_pct = bench::stats(row.ideal_reps).median;
    row.slowdown_pct = bench::stats(row.slowdown_reps).median;
    std::fprintf(stderr, "c3 %s: copy %.1f ms, gemm %.1f ms, both %.1f ms -> %.1f%% of ideal, gemm +%.1f%%\n",
                 row.key.c_str(), row.copy_ms, row.gemm_ms, row.both_ms, row.ideal_pct, row.slowdown_pct);
  }
}

// The C3 measurement (see the file comment): one row per path.
std::vector<C3Row> run_c3(Device& dev, const Args& o) {
  const uint64_t chunk = o.chunk_mib << 20;
  C3 x{dev, o, make_ranks(dev, o.ranks, chunk), make_gemm(o.n, o.zeros), 0, {}, {}, {}, {}};
  x.g.run(20);  // warm up cuBLAS and the clocks
  (void)x.g.gpu_ms();
  x.bytes_per = chunk * uint64_t(o.ranks) * uint64_t(o.ranks);
  for (const EngineInfo& e : dev.topology().gpus[0].engines) {
    x.all_ids.push_back(e.id);
    x.weights.push_back(static_cast<int>(e.weight));
  }
  add_extra_paths(x);

  if (!x.sampler.start()) std::fprintf(stderr, "NVML not available: no clock/power samples\n");

  // Calibrate: GEMM alone, then each path alone, sized to the GEMM phase.
  const double gemm_ms = phase(x, true, nullptr, 0).gemm_ms;
  const int full_count = calibrate(x, gemm_ms);
  add_budget_paths(x, full_count, gemm_ms);

  // Each path alone, then each concurrent phase between two GEMM-alone
  // phases (nv_c3_bench's protocol): its GEMM slowdown is its GEMM time over
  // the mean of the two neighbours', and % of ideal takes their mean wall
  // time as the GEMM's, so drift in clock and power between phases cancels.
  // The order of the paths rotates from one repetition to the next.
  std::vector<C3Row> rows = measure_alone(x);
  measure_concurrent(x, rows);
  for (int i = 0; i < o.ranks; ++i) {
    (void)cnv::unregister_cuda(dev, x.r.send_b[i]);
    (void)cnv::unregister_cuda(dev, x.r.recv_b[i]);
  }
  return rows;
}

// Plan completion -> dependent CUDA kernel (see the file comment).
bench::Stats run_latency(Device& dev, int ranks, int iters, uint64_t* wrong) {
  check(cnv::share_signals_with_cuda(dev), "share_signals_with_cuda");
  Ranks r = make_ranks(dev, ranks, 4096);
  Communicator::Options o;
  o.loopback = true;
  Result<std::unique_ptr<Communicator>> c = Communicator::create(dev, std::vector<int>(ranks, 0), o);
  check(c.status(), "communicator");
  CollectiveArgs a = all_gather_args(r);
  a.prelaunch = true;
  a.timestamps = true;
  Result<std::unique_ptr<Plan>> pl = (*c)->plan(a);
  check(pl.status(), "plan");
  Plan& plan = **pl;
  CUfunction stamp = bench::load_stamp_kernel();
  CUstream stream;
  CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  uint64_t* out = nullptr;
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&out), 64, cudaHostAllocMapped));
  std::vector<double> lat;
  *wrong = 0;
  for (int it = 0; it < iters + 10; ++it) {
    const Deadline dl = Deadline::after(std::chrono::seconds(10));
    poison(r);
    check(plan.prelaunch(dl), "prelaunch");
    const Signal& arrival = plan.arrival(0);
    CU_CHECK(cuStreamWaitValue64(stream, arrival.va(), plan.arrivals_expected(0), CU_STREAM_WAIT_VALUE_GEQ));
    uint64_t sem = arrival.va();
    void* args[] = {&out, &sem};
    CU_CHECK(cuLaunchKernel(stamp, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr));
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // the stream is parked on the wait
    check(plan.release(), "release");
    check(plan.wait(dl), "wait");
    CU_CHECK(cuStreamSynchronize(stream));
    uint64_t done_ns = 0;
    for (size_t i = 0; i < plan.lists().size(); ++i) {
      const std::vector<int>& w = plan.lists()[i].writes_to;
      if (std::find(w.begin(), w.end(), 0) != w.end()) done_ns = std::max(done_ns, plan.finish_timestamp(i));
    }
    if (it >= 10) lat.push_back((static_cast<double>(out[0]) - static_cast<double>(done_ns)) / 1000.0);
    if (it == 10) *wrong += wrong_bytes(r);
  }
  for (int i = 0; i < ranks; ++i) {
    (void)cnv::unregister_cuda(dev, r.send_b[i]);
    (void)cnv::unregister_cuda(dev, r.recv_b[i]);
  }
  return bench::stats(lat);
}

struct HostCost {
  double cb_ns, reserve_ns;
};

// Host time per queued copy through the vocabulary on one Hopper queue.
HostCost run_hostcost(Device& dev) {
  QueueOptions qo;
  qo.ring_bytes = 1u << 20;
  Result<std::unique_ptr<Queue>> q = dev.create_queue(0, dev.topology().gpus[0].engines[0].id, qo);
  check(q.status(), "queue");
  Result<Buffer> a_ = dev.alloc(0, 1 << 20, MemKind::device), b_ = dev.alloc(0, 1 << 20, MemKind::device);
  check(a_.status(), "alloc");
  check(b_.status(), "alloc");
  constexpr int kCopies = 64, kBatches = 250, kPerBatch = 8;
  const Deadline dl = Deadline::after(std::chrono::seconds(60));
  CommandBuffer cb = (*q)->command_buffer();
  double cb_ns = 0, res_ns = 0;
  for (int pass = 0; pass < 2; ++pass) {  // pass 0 warms up
    double t_cb = 0, t_res = 0;
    for (int b = 0; b < kBatches; ++b) {
      auto t0 = Clock::now();
      for (int r = 0; r < kPerBatch; ++r) {
        cb.clear();
        for (int i = 0; i < kCopies; ++i) check(cb.copy(b_->va + i * 256, a_->va + i * 256, 256), "copy");
        check((*q)->submit(cb, dl), "submit");
      }
      t_cb += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      check((*q)->wait_done(dl), "drain");
      t0 = Clock::now();
      for (int r = 0; r < kPerBatch; ++r) {
        Result<Queue::Reservation> res = (*q)->reserve(kCopies * hopper::kCopyPieceDwords * 4, dl);
        check(res.status(), "reserve");
        for (int i = 0; i < kCopies; ++i) check(res->commands().copy(b_->va + i * 256, a_->va + i * 256, 256), "copy");
        check(res->commit(), "commit");
      }
      t_res += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
      check((*q)->wait_done(dl), "drain");
    }
    cb_ns = t_cb / (kBatches * kPerBatch * kCopies);
    res_ns = t_res / (kBatches * kPerBatch * kCopies);
  }
  q->reset();
  (void)dev.free(*a_);
  (void)dev.free(*b_);
  return {cb_ns, res_ns};
}

// Parses the command line into *o; false on a usage or range error (exit
// code 2). A flag without its value exits with 2 at once.
bool parse_args(int argc, char** argv, Args* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto v = [&] { return i + 1 < argc ? argv[++i] : (std::exit(2), argv[0]); };
    if (a == "--ranks") o->ranks = std::atoi(v());
    else if (a == "--n") o->n = std::atoi(v());
    else if (a == "--gemms") o->gemms = std::atoi(v());
    else if (a == "--chunk-mib") o->chunk_mib = std::strtoull(v(), nullptr, 10);
    else if (a == "--reps") o->reps = std::atoi(v());
    else if (a == "--soak-ms") o->soak_ms = std::atoi(v());
    else if (a == "--piece-kib") o->piece_kib = std::strtoull(v(), nullptr, 10);
    else if (a == "--budget-frac") o->budget_frac = std::atof(v());
    else if (a == "--copy-frac") o->copy_frac = std::atof(v());
    else if (a == "--gemm-data") {
      const std::string d = v();
      if (d != "random" && d != "zeros") {
        std::fprintf(stderr, "nv_coll_bench: --gemm-data is random or zeros\n");
        return false;
      }
      o->zeros = d == "zeros";
    } else if (a == "--lat-iters") o->lat_iters = std::atoi(v());
    else if (a == "--json") o->json_path = v();
    else if (a == "--only") o->only = v();
    else if (a == "--variants") o->variants = v();
    else {
      std::fprintf(stderr,
                   "usage: nv_coll_bench [--ranks 4] [--n 8192] [--gemms 300] [--chunk-mib 64] [--reps 3] [--soak-ms 0]\n"
                   "                     [--budget-frac 0.25] [--copy-frac 1] [--gemm-data random|zeros]\n"
                   "                     [--lat-iters 300] [--json PATH] [--only c3|latency|hostcost]\n"
                   "                     [--variants ce,sm,budget (also ce1,ceq,cecp,agdest,agpiece,budget1,budget2,budgetpace,budgetcp)]\n"
                   "                     [--piece-kib 2048]\n");
      return false;
    }
  }
  if (o->ranks < 2 || o->ranks > 16 || !(o->budget_frac > 0 && o->budget_frac <= 1) ||
      !(o->copy_frac > 0 && o->copy_frac <= 4)) {
    std::fprintf(stderr, "nv_coll_bench: --ranks must be 2..16, --budget-frac in (0, 1] and --copy-frac in (0, 4]\n");
    return false;
  }
  return true;
}

// The JSON member "c3" (with its leading ", ") for the rows of run_c3.
std::string c3_json(const Args& o, const std::vector<C3Row>& c3) {
  std::string json = ", \"c3\": {\"n\": " + std::to_string(o.n) + ", \"gemms\": " + std::to_string(o.gemms) +
                     ", \"gemm_data\": \"" + (o.zeros ? "zeros" : "random") + "\", \"soak_ms\": " + std::to_string(o.soak_ms) + ", \"copy_frac\": " + std::to_string(o.copy_frac) +
                     ", \"budget_frac\": " + std::to_string(o.budget_frac) +
                     ", \"chunk_bytes\": " + std::to_string(o.chunk_mib << 20) + ", \"rows\": [";
  for (size_t i = 0; i < c3.size(); ++i) {
    auto list = [](const std::vector<double>& v) {
      std::string out = "[";
      for (size_t k = 0; k < v.size(); ++k) out += (k ? ", " : "") + std::to_string(v[k]);
      return out + "]";
    };
    char b[768];
    std::snprintf(b, sizeof b,
                  "%s{\"variant\": \"%s\", \"engines\": \"%s\", \"copy_ms\": %.3f, \"gemm_ms\": %.3f, \"both_ms\": "
                  "%.3f, \"gemm_beside_ms\": %.3f, \"ideal_pct\": %.2f, \"gemm_slowdown_pct\": %.2f, "
                  "\"wrong_bytes\": %llu, \"launches\": %d, \"gbytes\": %.3f, \"sm_mhz_alone\": %.0f, "
                  "\"sm_mhz_both\": %.0f, \"power_w_alone\": %.1f, \"power_w_both\": %.1f, ",
                  i ? ", " : "", c3[i].key.c_str(), c3[i].engines.c_str(), c3[i].copy_ms, c3[i].gemm_ms,
                  c3[i].both_ms, c3[i].gemm_both_ms, c3[i].ideal_pct, c3[i].slowdown_pct,
                  static_cast<unsigned long long>(c3[i].wrong), c3[i].launches, c3[i].gbytes, c3[i].sm_mhz_alone,
                  c3[i].sm_mhz_both, c3[i].power_w_alone, c3[i].power_w_both);
    json += b;
    json += "\"ideal_pct_reps\": " + list(c3[i].ideal_reps) + ", \"gemm_slowdown_pct_reps\": " +
            list(c3[i].slowdown_reps) + "}";
  }
  json += "]}";
  return json;
}

// Prints the C3 table; false if any path got a byte wrong.
bool print_c3(const Args& o, const std::vector<C3Row>& c3) {
  bool ok = true;
  std::printf("C3: bf16 GEMM %d^3 x %d (%s data) beside all-gathers of %d loopback ranks x %llu MiB sized to %.2f x "
              "the GEMM, budget %.2f\n",
              o.n, o.gemms, o.zeros ? "zero" : "random", o.ranks, static_cast<unsigned long long>(o.chunk_mib),
              o.copy_frac, o.budget_frac);
  std::printf("%-10s %-14s %7s %8s %8s %8s %7s %7s %-16s %11s %11s %6s\n", "variant", "engines", "GB", "copy_ms",
              "gemm_ms", "both_ms", "ideal%", "gemm+%", "ideal% per rep", "SM MHz a/c", "power W a/c", "wrong");
  for (const C3Row& r : c3) {
    std::string per;
    for (double x : r.ideal_reps) per += (per.empty() ? "" : " ") + std::to_string(static_cast<int>(x + 0.5));
    std::printf("%-10s %-14s %7.1f %8.1f %8.1f %8.1f %7.1f %7.1f %-16s %5.0f/%-5.0f %5.0f/%-5.0f %6llu\n",
                r.key.c_str(), r.engines.c_str(), r.gbytes, r.copy_ms, r.gemm_ms, r.both_ms, r.ideal_pct,
                r.slowdown_pct, per.c_str(), r.sm_mhz_alone, r.sm_mhz_both, r.power_w_alone, r.power_w_both,
                static_cast<unsigned long long>(r.wrong));
    ok &= r.wrong == 0;
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Args o;
  if (!parse_args(argc, argv, &o)) return 2;
  // CUDA first: its address reservations are in place before ours.
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  CU_CHECK(cuInit(0));
  DeviceOptions dopt;
  dopt.backend = "nv";
  Result<std::unique_ptr<Device>> d = open_device(dopt);
  check(d.status(), "open_device(nv)");
  Device& dev = **d;

  std::string json = "{\"ranks\": " + std::to_string(o.ranks);
  std::vector<C3Row> c3;
  if (o.only.empty() || o.only == "c3") {
    c3 = run_c3(dev, o);
    json += c3_json(o, c3);
  }
  bench::Stats lat;
  uint64_t lat_wrong = 0;
  if (o.only.empty() || o.only == "latency") {
    lat = run_latency(dev, o.ranks, o.lat_iters, &lat_wrong);
    json += ", \"plan_to_kernel_us\": " + bench::stats_json(lat) + ", \"latency_wrong_bytes\": " +
            std::to_string(lat_wrong);
  }
  HostCost hc{0, 0};
  if (o.only.empty() || o.only == "hostcost") {
    hc = run_hostcost(dev);
    char b[160];
    std::snprintf(b, sizeof b, ", \"host_ns_per_copy\": {\"command_buffer\": %.1f, \"reserve_commit\": %.1f}", hc.cb_ns,
                  hc.reserve_ns);
    json += b;
  }
  json += "}\n";
  if (!o.json_path.empty()) {
    FILE* f = std::fopen(o.json_path.c_str(), "w");
    if (f) {
      std::fputs(json.c_str(), f);
      std::fclose(f);
    }
  }
  bool ok = true;
  if (!c3.empty()) ok &= print_c3(o, c3);
  if (lat.n)
    std::printf("plan completion -> CUDA kernel (cuStreamWaitValue64): median %.2f us, p99 %.2f us (n=%zu, wrong %llu)\n",
                lat.median, lat.p99, lat.n, static_cast<unsigned long long>(lat_wrong));
  ok &= lat_wrong == 0;
  if (hc.cb_ns > 0)
    std::printf("host per queued copy: CommandBuffer+submit %.1f ns, reserve+commit %.1f ns\n", hc.cb_ns, hc.reserve_ns);
  return ok ? 0 : 1;
}
