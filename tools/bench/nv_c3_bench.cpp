// tools/bench/nv_c3_bench.cpp - C3: a cuBLAS bf16 GEMM running concurrently
// with device-to-device copies, and what the copies cost the GEMM.
//
// Copy paths (variants), each sized so that the copies alone take about as
// long as the GEMMs alone:
//   ce3      our CE copies striped over the async LCEs by PCE count, on CUDA
//            buffers from nv::cuda_alloc registered with register_cuda (CUDA's
//            own addresses), the host in wait_done (it spins 50 us, then
//            sleeps on the engine's interrupt) - the default path;
//   lce4     the same on LCE4 alone (12 PCEs, shares no PCE with a GRCE);
//   lce23    the same on LCE2+LCE3 alone (4 PCEs that the GRCEs also use):
//            a quarter of the bandwidth, to see whether the cost scales with it;
//   lce2     the same on LCE2 alone (2 PCEs);
//   budget   the library's bandwidth-budget choice: the bytes a fraction
//            (--budget-frac) of the ce3 rate moves in the GEMM's time, on the
//            channels Device::channels_for_rate picks for bytes / GEMM time;
//   ce3same  the budget variant's bytes on all channels at full rate (done
//            early), so that budget vs ce3same is the same bytes at two rates;
//   ce3sleep ce3, but the host polls completion every 200 us and sleeps;
//   ce3own   ce3 between our own RM allocations (not imported CUDA memory);
//   ce3proc  ce3 in a second process (forked before CUDA starts, its own RM
//            client and buffers), as the pre-project study measured it;
//   sm       cudaMemcpyAsync D2D on a second stream (an SM kernel on CUDA 13.0
//            / driver 580, docs/perf/h200.md).
// The order of the variants rotates from one repetition to the next.
// Every concurrent phase is bracketed by GEMM-alone phases, and the GEMM
// slowdown of a phase is its GEMM time (CUDA events) over the mean of the two
// neighbouring GEMM-alone times, so clock drift between phases cancels. An
// NVML sampler thread (libnvidia-ml loaded with dlopen, read-only queries)
// records SM clock, power and throttle reasons every 10 ms; each phase gets
// their averages. % of ideal = 100*(S_real-1)/(S_ideal-1),
//   S_ideal = (t_gemm + t_copy) / max(t_gemm, t_copy),
//   S_real  = (t_gemm + t_copy) / t_concurrent          (the ConCCL paper, arXiv 2412.14335),
// host wall clock from enqueue to completion. Also per variant: GEMM time lost
// per GB the copies moved (us/GB), which compares paths at unequal bytes.
// --copy-frac R sizes the copies of every variant but budget and ce3same to
// R times the GEMM's time alone (default 1: equal durations).
// --gemm-data zeros runs the GEMM on all-zero matrices, which draw far less
// power than random ones: the way to see what the copies cost a GEMM that is
// not at the power cap.
//
//   nv_c3_bench [--n 8192] [--gemms 600] [--copy-mib 1024] [--reps 3] [--json PATH]
//               [--variants ce3,lce4,...] [--gemm-data uniform|zeros] [--budget-frac 0.25] [--copy-frac 1.0]
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/nv/nv_device.hpp"
#include "tools/bench/cuda_check.hpp"
#include "tools/bench/nv_bench_util.hpp"
#include "tools/bench/nvml_sampler.hpp"

using namespace conccl;
namespace cnv = conccl::nv;  // CUDA headers have their own namespace nv
using Clock = std::chrono::steady_clock;


namespace {

using bench::Sampler;
double now_ms() { return bench::sampler_now_ms(); }

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Variant {
  std::string key, name;
  std::vector<cnv::Channel*> chs;
  bool own = false, sleep_wait = false, sm = false, proc = false;
  int copies = 0;
  double t_copy_ms = 0, gbps = 0;
  bool budget = false, same_as_budget = false;
};

struct Phase {
  std::string what;  // "gemm" or a variant key, or "<key> alone"
  int rep = 0;
  double t0 = 0, t1 = 0, wall_ms = 0, gemm_ms = 0, copy_ms = 0;
  Sampler::Avg avg;
};

// The second process of the ce3proc variant: its own nv::Gpu and 1 GiB
// buffers; for each int N read from `in` it runs N striped copies (all
// submitted, then waited for) and writes the elapsed ms (a double) to `out`;
// N < 0 ends it. Started with fork() before the parent touches CUDA.
[[noreturn]] void copy_child(int in, int out, size_t bytes) {
  double reply = -1;
  cnv::Options o;
  o.va_size = 16ull << 30;
  Result<std::unique_ptr<cnv::Gpu>> d = cnv::Gpu::open(o);
  std::unique_ptr<cnv::Gpu> dev;
  Result<cnv::Allocation> a = Status(), b = Status();
  if (d.ok()) {
    dev = std::move(d).value();
    a = dev->alloc(bytes, cnv::Placement::device);
    b = dev->alloc(bytes, cnv::Placement::device);
  }
  const bool ready = dev && a.ok() && b.ok();
  if (!ready)
    std::fprintf(stderr, "copy child: %s\n",
                 (!d.ok() ? d.status() : !a.ok() ? a.status() : b.status()).to_string().c_str());
  reply = ready ? 0 : -1;  // first message: ready or not
  if (write(out, &reply, sizeof reply) != sizeof reply) _exit(1);
  int k = 0;
  while (read(in, &k, sizeof k) == sizeof k && k >= 0) {
    reply = -1;
    if (ready) {
      const auto t0 = Clock::now();
      const Deadline dl = Deadline::after(std::chrono::seconds(60));
      std::vector<int> w;
      for (size_t c = 0; c < dev->channel_count(); ++c) w.push_back(dev->channel(c).pces());
      const std::vector<uint64_t> pieces = cnv::stripe(bytes, w, 4096);
      Status st;
      for (int i = 0; i < k && st.ok(); ++i) {
        uint64_t off = 0;
        for (size_t c = 0; c < dev->channel_count() && st.ok(); ++c) {
          if (!pieces[c]) continue;
          CommandBuffer cb = dev->channel(c).commands();
          st = cb.copy(b->va + off, a->va + off, pieces[c]);
          if (st.ok()) st = dev->channel(c).submit(cb, dl);
          off += pieces[c];
        }
      }
      for (size_t c = 0; c < dev->channel_count() && st.ok(); ++c) st = dev->channel(c).wait_done(dl);
      if (st.ok()) reply = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      else std::fprintf(stderr, "copy child: %s\n", st.to_string().c_str());
    }
    if (write(out, &reply, sizeof reply) != sizeof reply) break;
  }
  dev.reset();
  _exit(0);
}

// What the command line sets.
struct Args {
  int n = 8192, gemms = 600, reps = 3;
  size_t copy_mib = 1024;
  std::string json_path, variant_list = "ce3,lce4,lce23,lce2,budget,ce3same,sm", gemm_data = "uniform";
  double budget_frac = 0.25, copy_frac = 1.0;
};

// Parses the command line into *o; false on a usage or range error (exit
// code 2). A flag without its value exits with 2 at once.
bool parse_args(int argc, char** argv, Args* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto v = [&] { return i + 1 < argc ? argv[++i] : (std::exit(2), argv[0]); };
    if (a == "--n") o->n = std::atoi(v());
    else if (a == "--gemms") o->gemms = std::atoi(v());
    else if (a == "--copy-mib") o->copy_mib = std::strtoull(v(), nullptr, 10);
    else if (a == "--reps") o->reps = std::atoi(v());
    else if (a == "--json") o->json_path = v();
    else if (a == "--variants") o->variant_list = v();
    else if (a == "--gemm-data") o->gemm_data = v();
    else if (a == "--budget-frac") o->budget_frac = std::atof(v());
    else if (a == "--copy-frac") o->copy_frac = std::atof(v());
    else {
      std::fprintf(stderr,
                   "usage: nv_c3_bench [--n 8192] [--gemms 600] [--copy-mib 1024] [--reps 3] [--json PATH]\n"
                   "                   [--variants ce3,lce4,lce23,lce2,budget,ce3same,ce3sleep,ce3own,ce3proc,sm]\n"
                   "                   [--gemm-data uniform|zeros] [--budget-frac 0.25] [--copy-frac 1.0]\n");
      return false;
    }
  }
  if (o->gemm_data != "uniform" && o->gemm_data != "zeros") {
    std::fprintf(stderr, "nv_c3_bench: --gemm-data is uniform or zeros, not '%s'\n", o->gemm_data.c_str());
    return false;
  }
  if (!(o->budget_frac > 0 && o->budget_frac <= 1) || !(o->copy_frac > 0 && o->copy_frac <= 4)) {
    std::fprintf(stderr, "nv_c3_bench: --budget-frac must be in (0, 1] and --copy-frac in (0, 4]\n");
    return false;
  }
  return true;
}

// Whether the comma-separated `list` names `key`.
bool wanted(const std::string& list, const char* key) {
  return ("," + list + ",").find("," + std::string(key) + ",") != std::string::npos;
}

// The copy process of the ce3proc variant and the pipes to it.
struct Child {
  int to[2] = {-1, -1}, from[2] = {-1, -1};
  pid_t pid = -1;
};

// Forks the copy process (before CUDA starts); c->pid stays <= 0 if not.
void start_child(Child* c, size_t copy_bytes) {
  if (pipe(c->to) == 0 && pipe(c->from) == 0) {
    c->pid = fork();
    if (c->pid == 0) {
      close(c->to[1]);
      close(c->from[0]);
      copy_child(c->to[0], c->from[1], copy_bytes);
    }
    close(c->to[0]);
    close(c->from[1]);
  }
}

// Has the copy process run k striped copies; its ms, or < 0 on failure.
double child_copies(Child& c, int k) {
  double ms = -1;
  if (c.pid <= 0 || write(c.to[1], &k, sizeof k) != sizeof k) return -1;
  if (read(c.from[0], &ms, sizeof ms) != sizeof ms) return -1;
  return ms;
}

// Concurrent phase results of one variant in one repetition.
struct Result1 {
  double slowdown = 0, pct = 0, wall = 0, gemm_alone = 0, us_per_gb = 0, copy_ms = 0;
  Sampler::Avg alone, conc;
};

// Everything the phases share: arguments, the GEMM, the copy buffers, our
// device, the variants and what was measured.
struct C3 {
  const Args& o;
  size_t copy_bytes = 0;
  Child& child;
  cudaStream_t s_gemm = nullptr, s_copy = nullptr;
  cublasHandle_t blas = nullptr;
  size_t mat = 0;  // elements per matrix
  std::vector<uint16_t> ha = {}, hb = {};
  void *da = nullptr, *db = nullptr, *dc = nullptr;
  cudaEvent_t g0 = nullptr, g1 = nullptr;  // brackets of a phase's GEMMs
  cnv::CudaAlloc src = {}, dst = {};       // copy buffers (CUDA VMM, registered)
  std::vector<uint8_t> pattern = {}, back = {};
  std::unique_ptr<cnv::Gpu> dev = nullptr;
  cnv::Allocation osrc = {}, odst = {}, ohost = {};  // our own buffers (ce3own)
  Deadline dl = Deadline::now();
  std::vector<Variant> vars = {};
  std::vector<Phase> phases = {};
  Sampler sampler = {};
  bool have_nvml = false, all_ok = true;
  double rel = 0, tflops = 0;  // GEMM relative error; TFLOP/s alone
  Phase ga = {};               // the GEMM alone, before the copies alone
  std::vector<std::vector<Result1>> res = {};
};

// Prints what failed and exits with 4 (a device fault).
[[noreturn]] void die(const Status& s, const char* what) {
  std::fprintf(stderr, "nv_c3_bench: %s: %s\n", what, s.to_string().c_str());
  std::exit(4);
}

// One bf16 GEMM of n x n matrices on s_gemm.
void gemm(C3& x) {
  const int n = x.o.n;
  const float alpha = 1.f, beta = 0.f;
  CUBLAS_CHECK(cublasGemmEx(x.blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, x.da, CUDA_R_16BF, n, x.db, CUDA_R_16BF,
                            n, &beta, x.dc, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The CUDA side: streams, cuBLAS and the GEMM's matrices.
void setup_cuda(C3& x) {
  // CUDA first: its VA reservations are in place before ours (docs/nv-backend.md).
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  CU_CHECK(cuInit(0));
  CUDA_CHECK(cudaStreamCreateWithFlags(&x.s_gemm, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&x.s_copy, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&x.blas));
  CUBLAS_CHECK(cublasSetStream(x.blas, x.s_gemm));

  x.mat = size_t(x.o.n) * x.o.n;
  const size_t mat = x.mat;
  x.ha.resize(mat);
  x.hb.resize(mat);
  {
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    const bool zeros = x.o.gemm_data == "zeros";
    for (size_t i = 0; i < mat; ++i) x.ha[i] = zeros ? 0 : to_bf16(d(rng));
    for (size_t i = 0; i < mat; ++i) x.hb[i] = zeros ? 0 : to_bf16(d(rng));
  }
  CUDA_CHECK(cudaMalloc(&x.da, mat * 2));
  CUDA_CHECK(cudaMalloc(&x.db, mat * 2));
  CUDA_CHECK(cudaMalloc(&x.dc, mat * 2));
  CUDA_CHECK(cudaMemcpy(x.da, x.ha.data(), mat * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(x.db, x.hb.data(), mat * 2, cudaMemcpyHostToDevice));
}

// The copy buffers and the pattern in src. Returns 0, or 4 on failure.
int setup_copy_buffers(C3& x) {
  const size_t copy_bytes = x.copy_bytes;
  // Copy buffers: CUDA VMM allocations (the nv backend's memory model).
  Result<cnv::CudaAlloc> src = cnv::cuda_alloc(copy_bytes), dst = cnv::cuda_alloc(copy_bytes);
  if (!src.ok() || !dst.ok()) {
    std::fprintf(stderr, "cuda_alloc: %s %s\n", src.status().to_string().c_str(), dst.status().to_string().c_str());
    return 4;
  }
  x.src = *src;
  x.dst = *dst;
  x.pattern.resize(copy_bytes);
  x.back.resize(copy_bytes);
  {
    auto* p = reinterpret_cast<uint64_t*>(x.pattern.data());
    uint64_t r = 99;
    for (size_t i = 0; i < copy_bytes / 8; ++i) {  // xorshift64*
      r ^= r >> 12;
      r ^= r << 25;
      r ^= r >> 27;
      p[i] = r * 0x2545F4914F6CDD1Dull;
    }
  }
  CUDA_CHECK(cudaMemcpy(reinterpret_cast<void*>(x.src.ptr), x.pattern.data(), copy_bytes, cudaMemcpyHostToDevice));
  return 0;
}

// Copies `bytes` between two of our buffers on channel 0 and waits.
Status copy_on_channel0(C3& x, uint64_t dst, uint64_t src, size_t bytes) {
  cnv::Channel& c = x.dev->channel(0);
  CommandBuffer c_cb = c.commands();
  Status s = c_cb.copy(dst, src, bytes);
  if (s.ok()) s = c.submit(c_cb, x.dl);
  c_cb.clear();
  if (s.ok()) s = c.wait_done(x.dl);
  return s;
}

// Our RM client beside CUDA, the copy buffers registered with it, and our
// own buffers for ce3own. Returns 0, or 4/5 when the device does not open.
int setup_device(C3& x) {
  const size_t copy_bytes = x.copy_bytes;
  // Our RM client in the same process; its window must not collide with CUDA's.
  Status last;
  x.dev = bench::open_beside_cuda(&last);
  if (!x.dev) {
    std::fprintf(stderr, "nv_c3_bench: %s\n", last.to_string().c_str());
    return last.code() == Code::unavailable ? 5 : 4;
  }
  x.dl = Deadline::after(std::chrono::seconds(200));
  if (Status s = x.dev->register_cuda(x.src.ptr, x.src.size); !s.ok()) die(s, "register src");
  if (Status s = x.dev->register_cuda(x.dst.ptr, x.dst.size); !s.ok()) die(s, "register dst");
  // Our own device memory for the ce3own variant, filled with the pattern.
  Result<cnv::Allocation> osrc = x.dev->alloc(copy_bytes, cnv::Placement::device),
                      odst = x.dev->alloc(copy_bytes, cnv::Placement::device),
                      ohost = x.dev->alloc(copy_bytes, cnv::Placement::host);
  if (!osrc.ok() || !odst.ok() || !ohost.ok()) die(osrc.status(), "own buffers");
  x.osrc = *osrc;
  x.odst = *odst;
  x.ohost = *ohost;
  std::memcpy(x.ohost.host, x.pattern.data(), copy_bytes);
  if (Status s = copy_on_channel0(x, x.osrc.va, x.ohost.va, copy_bytes); !s.ok()) die(s, "upload own");
  return 0;
}

// The variants the command line asks for (ce3 always, first).
void make_variants(C3& x) {
  const std::string& list = x.o.variant_list;
  std::vector<cnv::Channel*> all, lce4, lce23, lce2;
  for (size_t c = 0; c < x.dev->channel_count(); ++c) {
    cnv::Channel* ch = &x.dev->channel(c);
    all.push_back(ch);
    (ch->lce() == 4 ? lce4 : lce23).push_back(ch);
    if (ch->lce() == 2) lce2.push_back(ch);
  }
  // The reference set first: every other variant is sized against the GEMM,
  // and budget against ce3's rate.
  std::vector<Variant>& vars = x.vars;
  vars.push_back({"ce3", "CE striped LCE2+3+4", all});
  if (wanted(list, "lce4") && !lce4.empty()) vars.push_back({"lce4", "CE LCE4 only", lce4});
  if (wanted(list, "lce23") && !lce23.empty()) vars.push_back({"lce23", "CE LCE2+3 only", lce23});
  if (wanted(list, "lce2") && !lce2.empty()) vars.push_back({"lce2", "CE LCE2 only", lce2});
  if (wanted(list, "budget")) {
    Variant v{"budget", "", {}};
    v.budget = true;
    vars.push_back(v);
    if (wanted(list, "ce3same")) {
      Variant w{"ce3same", "CE striped, budget's bytes", all};
      w.same_as_budget = true;
      vars.push_back(w);
    }
  }
  if (wanted(list, "ce3sleep")) vars.push_back({"ce3sleep", "CE striped, host sleeps 200us", all, false, true});
  if (wanted(list, "ce3own")) vars.push_back({"ce3own", "CE striped, own RM buffers", all, true});
  if (x.child.pid > 0) {
    double ready = -1;
    if (read(x.child.from[0], &ready, sizeof ready) == sizeof ready && ready == 0)
      vars.push_back({"ce3proc", "CE striped, second process", {}, false, false, false, true});
    else
      std::fprintf(stderr, "no second copy process: the ce3proc variant is skipped\n");
  }
  if (wanted(list, "sm")) vars.push_back({"sm", "cudaMemcpyAsync D2D (SM)", {}, false, false, true});
}

// Submits k copies of the whole buffer, each striped over v's channels by
// PCE count.
Status submit_ce(C3& x, const Variant& v, int k) {
  std::vector<int> w;
  for (cnv::Channel* c : v.chs) w.push_back(c->pces());
  const std::vector<uint64_t> pieces = cnv::stripe(x.copy_bytes, w, 4096);
  const uint64_t s = v.own ? x.osrc.va : x.src.ptr, d = v.own ? x.odst.va : x.dst.ptr;
  for (int i = 0; i < k; ++i) {
    uint64_t off = 0;
    for (size_t c = 0; c < v.chs.size(); ++c) {
      if (!pieces[c]) continue;
      CommandBuffer cb = v.chs[c]->commands();
      CONCCL_RETURN_IF_ERROR(cb.copy(d + off, s + off, pieces[c]));
      CONCCL_RETURN_IF_ERROR(v.chs[c]->submit(cb, x.dl));
      off += pieces[c];
    }
  }
  return Status();
}

// Waits for v's channels: wait_done, or (sleep_wait) polling every 200 us.
Status wait_ce(C3& x, const Variant& v) {
  for (cnv::Channel* c : v.chs) {
    if (!v.sleep_wait) {
      CONCCL_RETURN_IF_ERROR(c->wait_done(x.dl));
      continue;
    }
    while (c->completed() < c->submitted()) {
      CONCCL_RETURN_IF_ERROR(c->fault_status());
      if (x.dl.expired()) return error(Code::timeout, c->diagnose());
      timespec ts{0, 200000};
      nanosleep(&ts, nullptr);
    }
  }
  return Status();
}

// k copies of variant v, to completion; a CE failure dies naming `what`.
void run_copies(C3& x, const Variant& v, int k, const char* what) {
  if (v.proc) {
    if (child_copies(x.child, k) < 0) die(error(Code::internal, "the copy process failed (see stderr)"), "ce3proc");
    return;
  }
  if (v.sm) {
    for (int i = 0; i < k; ++i)
      CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(x.dst.ptr), reinterpret_cast<void*>(x.src.ptr), x.copy_bytes,
                                 cudaMemcpyDeviceToDevice, x.s_copy));
    CUDA_CHECK(cudaStreamSynchronize(x.s_copy));
    return;
  }
  Status s = submit_ce(x, v, k);
  if (s.ok()) s = wait_ce(x, v);
  if (!s.ok()) die(s, what);
}

// Reads dst back through CUDA and compares it with the pattern.
bool verify_dst(C3& x, const char* what) {
  CUDA_CHECK(cudaMemcpy(x.back.data(), reinterpret_cast<void*>(x.dst.ptr), x.copy_bytes, cudaMemcpyDeviceToHost));
  const bool ok = std::memcmp(x.back.data(), x.pattern.data(), x.copy_bytes) == 0;
  std::fprintf(stderr, "verify %s: %s\n", what, ok ? "ok" : "MISMATCH");
  return ok;
}

// GEMM correctness on a few elements (double reference); sets x.rel.
void check_gemm(C3& x) {
  const int n = x.o.n;
  for (int i = 0; i < 3; ++i) gemm(x);
  CUDA_CHECK(cudaStreamSynchronize(x.s_gemm));
  std::vector<uint16_t> hc(x.mat);
  CUDA_CHECK(cudaMemcpy(hc.data(), x.dc, x.mat * 2, cudaMemcpyDeviceToHost));
  double err = 0, ref2 = 0;
  std::mt19937 rng(5);
  for (int s = 0; s < 32; ++s) {
    const int r = rng() % n, c = rng() % n;  // column-major: C[r + c*n] = sum_k A[r + k*n] B[k + c*n]
    double ref = 0;
    for (int k = 0; k < n; ++k) ref += double(from_bf16(x.ha[r + size_t(k) * n])) * from_bf16(x.hb[k + size_t(c) * n]);
    const double got = from_bf16(hc[r + size_t(c) * n]);
    err += (got - ref) * (got - ref);
    ref2 += ref * ref;
  }
  x.rel = ref2 > 0 ? std::sqrt(err / ref2) : std::sqrt(err);  // zeros: the absolute error
  std::fprintf(stderr, "GEMM relative error on 32 samples: %.2e\n", x.rel);
  if (!(x.rel < 1e-2)) x.all_ok = false;
}

// One phase: GEMMs (if gemm) and copies of v (if v), from one host instant.
Phase phase(C3& x, const std::string& what, int rep, bool with_gemm, const Variant* v, int copies) {
  CUDA_CHECK(cudaDeviceSynchronize());
  Phase p;
  p.what = what;
  p.rep = rep;
  p.t0 = now_ms();
  const auto t0 = Clock::now();
  if (with_gemm) {
    CUDA_CHECK(cudaEventRecord(x.g0, x.s_gemm));
    for (int i = 0; i < x.o.gemms; ++i) gemm(x);
    CUDA_CHECK(cudaEventRecord(x.g1, x.s_gemm));
  }
  if (v) {
    run_copies(x, *v, copies, what.c_str());
    p.copy_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  if (with_gemm) {
    CUDA_CHECK(cudaStreamSynchronize(x.s_gemm));
    float ev = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ev, x.g0, x.g1));
    p.gemm_ms = ev;
  }
  p.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  p.t1 = now_ms();
  p.avg = x.sampler.average(p.t0, p.t1);
  x.phases.push_back(p);
  return p;
}

// Copies alone: size each variant to the GEMM time (x.ga, measured first).
void size_variants(C3& x) {
  const size_t copy_bytes = x.copy_bytes;
  x.ga = phase(x, "gemm", -1, true, nullptr, 0);
  const Phase& ga = x.ga;
  x.tflops = 2.0 * x.o.n * double(x.o.n) * x.o.n * x.o.gemms / (ga.gemm_ms * 1e-3) / 1e12;
  int budget_copies = 1;
  for (Variant& v : x.vars) {
    if (v.budget) {
      // The bytes budget_frac of the full-rate stripe moves in the GEMM's
      // time, on the channels the library picks for bytes / GEMM time.
      const double need = x.o.budget_frac * x.vars[0].gbps * 1e9;
      v.chs = x.dev->channels_for_rate(need);
      std::fprintf(stderr, "budget: %.1f GB/s needed, channels_for_rate estimates %.1f GB/s for its pick\n", need / 1e9,
                   x.dev->estimated_rate(v.chs) / 1e9);
      v.name = "budget " + std::to_string(int(x.o.budget_frac * 100)) + "%: LCE";
      for (size_t i = 0; i < v.chs.size(); ++i) v.name += (i ? "+" : "") + std::to_string(v.chs[i]->lce());
      v.copies = budget_copies = std::max(1, int(std::lround(need * ga.wall_ms * 1e-3 / double(copy_bytes))));
    } else if (v.same_as_budget) {
      v.copies = budget_copies;
    } else {
      const auto t0 = Clock::now();
      run_copies(x, v, 2, v.key.c_str());
      const double t2 = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / 2;
      v.copies = std::max(1, int(std::lround(x.o.copy_frac * ga.wall_ms / t2)));
    }
    const Phase p = phase(x, v.key + " alone", -1, false, &v, v.copies);
    v.t_copy_ms = p.copy_ms;
    v.gbps = double(copy_bytes) * v.copies / 1e9 / (p.copy_ms * 1e-3);
  }
}

// Concurrent phases, each between two GEMM-alone phases.
void run_concurrent(C3& x) {
  std::vector<Variant>& vars = x.vars;
  x.res.assign(vars.size(), {});
  for (int r = 0; r < x.o.reps; ++r) {
    Phase before = phase(x, "gemm", r, true, nullptr, 0);
    for (size_t k = 0; k < vars.size(); ++k) {
      const size_t vi = (k + size_t(r)) % vars.size();  // rotate the order per repetition
      Variant& v = vars[vi];
      if (!v.own && !v.proc) CUDA_CHECK(cudaMemset(reinterpret_cast<void*>(x.dst.ptr), 0x5A, x.copy_bytes));
      const Phase c = phase(x, v.key, r, true, &v, v.copies);
      const Phase after = phase(x, "gemm", r, true, nullptr, 0);
      Result1 y;
      y.gemm_alone = (before.gemm_ms + after.gemm_ms) / 2;
      const double tg = (before.wall_ms + after.wall_ms) / 2, tc = v.t_copy_ms;
      y.slowdown = c.gemm_ms / y.gemm_alone - 1.0;
      y.us_per_gb = (c.gemm_ms - y.gemm_alone) * 1e3 / (double(x.copy_bytes) * v.copies / 1e9);
      const double s_ideal = (tg + tc) / std::max(tg, tc), s_real = (tg + tc) / c.wall_ms;
      y.pct = 100.0 * (s_real - 1.0) / (s_ideal - 1.0);
      y.wall = c.wall_ms;
      y.copy_ms = c.copy_ms;
      y.conc = c.avg;
      y.alone = before.avg;
      y.alone.sm = (before.avg.sm + after.avg.sm) / 2;
      y.alone.power_w = (before.avg.power_w + after.avg.power_w) / 2;
      x.res[vi].push_back(y);
      if (r == 0 && !v.own && !v.proc) x.all_ok &= verify_dst(x, (v.key + " after concurrent run").c_str());
      before = after;
    }
  }
}

// Own buffers (ce3own): copy odst back to host and compare.
void verify_own(C3& x) {
  std::memset(x.ohost.host, 0, x.copy_bytes);
  if (Status s = copy_on_channel0(x, x.ohost.va, x.odst.va, x.copy_bytes); !s.ok()) die(s, "verify own");
  const bool ok = std::memcmp(x.ohost.host, x.pattern.data(), x.copy_bytes) == 0;
  std::fprintf(stderr, "verify ce3own: %s\n", ok ? "ok" : "MISMATCH");
  x.all_ok &= ok;
}

// Writes everything as JSON to x.o.json_path (nothing if it cannot be opened).
void write_json(const C3& x) {
  FILE* f = std::fopen(x.o.json_path.c_str(), "w");
  if (!f) return;
  const Args& o = x.o;
  const Phase& ga = x.ga;
  std::fprintf(f,
               "{\n  \"bench\": \"nv_c3_bench\", \"gemm_data\": \"%s\", \"budget_frac\": %.3f, \"copy_frac\": %.3f, \"n\": %d, "
               "\"gemms\": %d, \"copy_bytes\": %zu, \"reps\": %d,\n",
               o.gemm_data.c_str(), o.budget_frac, o.copy_frac, o.n, o.gemms, x.copy_bytes, o.reps);
  std::fprintf(f, "  \"gemm_alone\": {\"ms\": %.3f, \"sm_mhz\": %.0f, \"power_w\": %.1f, \"power_cap_frac\": %.2f},\n",
               ga.gemm_ms, ga.avg.sm, ga.avg.power_w, ga.avg.power_cap_frac);
  std::fprintf(f, "  \"gemm_rel_error\": %.3e, \"gemm_tflops\": %.1f, \"nvml\": %s,\n  \"variants\": [", x.rel, x.tflops,
               x.have_nvml ? "true" : "false");
  for (size_t vi = 0; vi < x.vars.size(); ++vi) {
    const Variant& v = x.vars[vi];
    std::fprintf(f, "%s\n    {\"key\": \"%s\", \"name\": \"%s\", \"copies\": %d, \"t_copy_ms\": %.3f, \"gbps\": %.1f, \"runs\": [",
                 vi ? "," : "", v.key.c_str(), v.name.c_str(), v.copies, v.t_copy_ms, v.gbps);
    for (size_t r = 0; r < x.res[vi].size(); ++r) {
      const Result1& y = x.res[vi][r];
      std::fprintf(f,
                   "%s{\"gemm_slowdown\": %.4f, \"pct_ideal\": %.2f, \"t_concurrent_ms\": %.3f, \"gemm_alone_ms\": %.3f, "
                   "\"gemm_us_lost_per_gb\": %.2f, \"copy_ms_concurrent\": %.3f, \"sm_mhz_alone\": %.0f, \"sm_mhz_conc\": %.0f, \"power_w_alone\": %.1f, \"power_w_conc\": %.1f, "
                   "\"power_cap_frac_conc\": %.2f, \"reasons_conc\": %llu}",
                   r ? ", " : "", y.slowdown, y.pct, y.wall, y.gemm_alone, y.us_per_gb, y.copy_ms, y.alone.sm, y.conc.sm, y.alone.power_w,
                   y.conc.power_w, y.conc.power_cap_frac, y.conc.reasons);
    }
    std::fprintf(f, "]}");
  }
  std::fprintf(f, "\n  ],\n  \"phases\": [");
  for (size_t i = 0; i < x.phases.size(); ++i) {
    const Phase& p = x.phases[i];
    std::fprintf(f,
                 "%s\n    {\"what\": \"%s\", \"rep\": %d, \"t0_ms\": %.1f, \"wall_ms\": %.3f, \"gemm_ms\": %.3f, "
                 "\"copy_ms\": %.3f, \"sm_mhz\": %.0f, \"mem_mhz\": %.0f, \"power_w\": %.1f, \"temp_c\": %.1f, "
                 "\"power_cap_frac\": %.2f, \"reasons\": %llu, \"samples\": %d}",
                 i ? "," : "", p.what.c_str(), p.rep, p.t0, p.wall_ms, p.gemm_ms, p.copy_ms, p.avg.sm, p.avg.mem,
                 p.avg.power_w, p.avg.temp, p.avg.power_cap_frac, p.avg.reasons, p.avg.n);
  }
  std::fprintf(f, "\n  ],\n  \"verified\": %s\n}\n", x.all_ok ? "true" : "false");
  std::fclose(f);
}

// Prints the summary line and one row per variant (per-rep values and means).
void print_table(const C3& x) {
  const Args& o = x.o;
  const Phase& ga = x.ga;
  std::printf("\nC3: %d x bf16 GEMM %dx%dx%d on %s data (%.0f TFLOP/s alone, SM %.0f MHz, %.0f W, power cap %.0f%% "
              "of samples; rel. error %.1e) beside %zu MiB D2D copies; %d reps, each concurrent phase between two "
              "GEMM-alone phases\n",
              o.gemms, o.n, o.n, o.n, o.gemm_data.c_str(), x.tflops, ga.avg.sm, ga.avg.power_w,
              100 * ga.avg.power_cap_frac, x.rel, o.copy_mib, o.reps);
  std::printf("%-28s %6s %7s %7s %-22s %7s %-17s %6s %7s %11s %11s %6s %6s\n", "copy path", "copies", "GB/s", "copy ms",
              "GEMM slowdown per rep", "mean", "% ideal per rep", "mean", "us/GB", "SM MHz a/c", "power W a/c",
              "pwrcap", "copy x");
  for (size_t vi = 0; vi < x.vars.size(); ++vi) {
    const Variant& v = x.vars[vi];
    std::string sl, pc;
    double sm_a = 0, sm_c = 0, pw_a = 0, pw_c = 0, cap = 0, msl = 0, mpc = 0, mus = 0, cx = 0;
    const double k = x.res[vi].empty() ? 1.0 : double(x.res[vi].size());
    for (const Result1& y : x.res[vi]) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%+.1f", sl.empty() ? "" : " ", 100 * y.slowdown);
      sl += b;
      std::snprintf(b, sizeof b, "%s%.0f", pc.empty() ? "" : " ", y.pct);
      pc += b;
      msl += 100 * y.slowdown / k;
      mpc += y.pct / k;
      mus += y.us_per_gb / k;
      cx += (v.t_copy_ms > 0 ? y.copy_ms / v.t_copy_ms : 0) / k;  // copy time beside the GEMM over alone
      sm_a += y.alone.sm / k;
      sm_c += y.conc.sm / k;
      pw_a += y.alone.power_w / k;
      pw_c += y.conc.power_w / k;
      cap += y.conc.power_cap_frac / k;
    }
    std::printf("%-28s %6d %7.1f %7.1f %-22s %+6.1f%% %-17s %6.1f %7.1f %5.0f/%-5.0f %5.0f/%-5.0f %5.0f%% %6.2f\n",
                v.name.c_str(), v.copies, v.gbps, v.t_copy_ms, sl.c_str(), msl, pc.c_str(), mpc, mus, sm_a, sm_c, pw_a,
                pw_c, 100 * cap, cx);
  }
  std::printf("verified: %s\n", x.all_ok ? "yes" : "NO");
}

}  // namespace

int main(int argc, char** argv) {
  Args o;
  if (!parse_args(argc, argv, &o)) return 2;
  const size_t copy_bytes = o.copy_mib << 20;

  // The copy process of the ce3proc variant, forked before CUDA starts.
  Child child;
  if (wanted(o.variant_list, "ce3proc")) start_child(&child, copy_bytes);

  C3 x{o, copy_bytes, child};
  setup_cuda(x);
  if (int rc = setup_copy_buffers(x)) return rc;
  if (int rc = setup_device(x)) return rc;
  make_variants(x);

  // Correctness: CE copy between the registered CUDA buffers, read back by CUDA.
  CUDA_CHECK(cudaMemset(reinterpret_cast<void*>(x.dst.ptr), 0x3C, copy_bytes));
  CUDA_CHECK(cudaDeviceSynchronize());
  run_copies(x, x.vars[0], 1, x.vars[0].key.c_str());
  x.all_ok = verify_dst(x, "CE copy of registered CUDA buffers");
  check_gemm(x);

  x.have_nvml = x.sampler.start();
  if (!x.have_nvml) std::fprintf(stderr, "NVML not available: no clock/power samples\n");

  CUDA_CHECK(cudaEventCreate(&x.g0));
  CUDA_CHECK(cudaEventCreate(&x.g1));
  // Warm-up: GEMMs and copy engines busy for about a second each (cold-GPU
  // effect, docs/perf/h200-notes.md run 2).
  {
    const double t = now_ms();
    while (now_ms() - t < 1000) phase(x, "warmup", -1, true, nullptr, 0);
    const double t2 = now_ms();
    while (now_ms() - t2 < 1000) run_copies(x, x.vars[0], 8, x.vars[0].key.c_str());
  }
  size_variants(x);
  run_concurrent(x);
  x.sampler.stop();
  if (wanted(o.variant_list, "ce3own")) verify_own(x);

  if (!o.json_path.empty()) write_json(x);
  print_table(x);

  if (child.pid > 0) {
    const int stop = -1;
    if (write(child.to[1], &stop, sizeof stop) == sizeof stop) waitpid(child.pid, nullptr, 0);
  }
  (void)x.dev->unregister_cuda(x.src.ptr, x.src.size);
  (void)x.dev->unregister_cuda(x.dst.ptr, x.dst.size);
  for (auto* b : {&x.osrc, &x.odst, &x.ohost}) (void)x.dev->free(*b);
  x.dev.reset();
  (void)cnv::cuda_free(x.src);
  (void)cnv::cuda_free(x.dst);
  return x.all_ok ? 0 : 1;
}
