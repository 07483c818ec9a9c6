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

// The second process of the ce3proc variant: its own nv::Device and 1 GiB
// buffers; for each int N read from `in` it runs N striped copies (all
// submitted, then waited for) and writes the elapsed ms (a double) to `out`;
// N < 0 ends it. Started with fork() before the parent touches CUDA.
[[noreturn]] void copy_child(int in, int out, size_t bytes) {
  double reply = -1;
  cnv::Options o;
  o.va_size = 16ull << 30;
  Result<std::unique_ptr<cnv::Device>> d = cnv::Device::open(o);
  std::unique_ptr<cnv::Device> dev;
  Result<cnv::Buffer> a = Status(), b = Status();
  if (d.ok()) {
    dev = std::move(d).value();
    a = dev->alloc(bytes, cnv::MemKind::device);
    b = dev->alloc(bytes, cnv::MemKind::device);
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

}  // namespace

int main(int argc, char** argv) {
  int n = 8192, gemms = 600, reps = 3;
  size_t copy_mib = 1024;
  std::string json_path, variant_list = "ce3,lce4,lce23,lce2,budget,ce3same,sm", gemm_data = "uniform";
  double budget_frac = 0.25, copy_frac = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto v = [&] { return i + 1 < argc ? argv[++i] : (std::exit(2), argv[0]); };
    if (a == "--n") n = std::atoi(v());
    else if (a == "--gemms") gemms = std::atoi(v());
    else if (a == "--copy-mib") copy_mib = std::strtoull(v(), nullptr, 10);
    else if (a == "--reps") reps = std::atoi(v());
    else if (a == "--json") json_path = v();
    else if (a == "--variants") variant_list = v();
    else if (a == "--gemm-data") gemm_data = v();
    else if (a == "--budget-frac") budget_frac = std::atof(v());
    else if (a == "--copy-frac") copy_frac = std::atof(v());
    else {
      std::fprintf(stderr,
                   "usage: nv_c3_bench [--n 8192] [--gemms 600] [--copy-mib 1024] [--reps 3] [--json PATH]\n"
                   "                   [--variants ce3,lce4,lce23,lce2,budget,ce3same,ce3sleep,ce3own,ce3proc,sm]\n"
                   "                   [--gemm-data uniform|zeros] [--budget-frac 0.25] [--copy-frac 1.0]\n");
      return 2;
    }
  }
  if (gemm_data != "uniform" && gemm_data != "zeros") {
    std::fprintf(stderr, "nv_c3_bench: --gemm-data is uniform or zeros, not '%s'\n", gemm_data.c_str());
    return 2;
  }
  if (!(budget_frac > 0 && budget_frac <= 1) || !(copy_frac > 0 && copy_frac <= 4)) {
    std::fprintf(stderr, "nv_c3_bench: --budget-frac must be in (0, 1] and --copy-frac in (0, 4]\n");
    return 2;
  }
  auto wanted = [&](const char* key) { return ("," + variant_list + ",").find("," + std::string(key) + ",") != std::string::npos; };
  const size_t copy_bytes = copy_mib << 20;

  // The copy process of the ce3proc variant, forked before CUDA starts.
  int to_child[2] = {-1, -1}, from_child[2] = {-1, -1};
  pid_t child = -1;
  if (wanted("ce3proc") && pipe(to_child) == 0 && pipe(from_child) == 0) {
    child = fork();
    if (child == 0) {
      close(to_child[1]);
      close(from_child[0]);
      copy_child(to_child[0], from_child[1], copy_bytes);
    }
    close(to_child[0]);
    close(from_child[1]);
  }
  auto child_copies = [&](int k) -> double {  // ms, or < 0 on failure
    double ms = -1;
    if (child <= 0 || write(to_child[1], &k, sizeof k) != sizeof k) return -1;
    if (read(from_child[0], &ms, sizeof ms) != sizeof ms) return -1;
    return ms;
  };

  // CUDA first: its VA reservations are in place before ours (docs/nv-backend.md).
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(nullptr));
  CU_CHECK(cuInit(0));
  cudaStream_t s_gemm, s_copy;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s_gemm, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&s_copy, cudaStreamNonBlocking));
  cublasHandle_t blas;
  CUBLAS_CHECK(cublasCreate(&blas));
  CUBLAS_CHECK(cublasSetStream(blas, s_gemm));

  const size_t mat = size_t(n) * n;
  std::vector<uint16_t> ha(mat), hb(mat);
  {
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    const bool zeros = gemm_data == "zeros";
    for (size_t i = 0; i < mat; ++i) ha[i] = zeros ? 0 : to_bf16(d(rng));
    for (size_t i = 0; i < mat; ++i) hb[i] = zeros ? 0 : to_bf16(d(rng));
  }
  void *da, *db, *dc;
  CUDA_CHECK(cudaMalloc(&da, mat * 2));
  CUDA_CHECK(cudaMalloc(&db, mat * 2));
  CUDA_CHECK(cudaMalloc(&dc, mat * 2));
  CUDA_CHECK(cudaMemcpy(da, ha.data(), mat * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(db, hb.data(), mat * 2, cudaMemcpyHostToDevice));
  const float alpha = 1.f, beta = 0.f;
  auto gemm = [&] {
    CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, da, CUDA_R_16BF, n, db, CUDA_R_16BF, n,
                              &beta, dc, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };

  // Copy buffers: CUDA VMM allocations (the nv backend's memory model).
  Result<cnv::CudaAlloc> src = cnv::cuda_alloc(copy_bytes), dst = cnv::cuda_alloc(copy_bytes);
  if (!src.ok() || !dst.ok()) {
    std::fprintf(stderr, "cuda_alloc: %s %s\n", src.status().to_string().c_str(), dst.status().to_string().c_str());
    return 4;
  }
  std::vector<uint8_t> pattern(copy_bytes), back(copy_bytes);
  {
    auto* p = reinterpret_cast<uint64_t*>(pattern.data());
    uint64_t x = 99;
    for (size_t i = 0; i < copy_bytes / 8; ++i) {  // xorshift64*
      x ^= x >> 12;
      x ^= x << 25;
      x ^= x >> 27;
      p[i] = x * 0x2545F4914F6CDD1Dull;
    }
  }
  CUDA_CHECK(cudaMemcpy(reinterpret_cast<void*>(src->ptr), pattern.data(), copy_bytes, cudaMemcpyHostToDevice));

  // Our RM client in the same process; its window must not collide with CUDA's.
  Status last;
  std::unique_ptr<cnv::Device> dev = bench::open_beside_cuda(&last);
  if (!dev) {
    std::fprintf(stderr, "nv_c3_bench: %s\n", last.to_string().c_str());
    return last.code() == Code::unavailable ? 5 : 4;
  }
  const Deadline dl = Deadline::after(std::chrono::seconds(200));
  auto die = [](const Status& s, const char* what) {
    std::fprintf(stderr, "nv_c3_bench: %s: %s\n", what, s.to_string().c_str());
    std::exit(4);
  };
  if (Status s = dev->register_cuda(src->ptr, src->size); !s.ok()) die(s, "register src");
  if (Status s = dev->register_cuda(dst->ptr, dst->size); !s.ok()) die(s, "register dst");
  // Our own device memory for the ce3own variant, filled with the pattern.
  Result<cnv::Buffer> osrc = dev->alloc(copy_bytes, cnv::MemKind::device),
                      odst = dev->alloc(copy_bytes, cnv::MemKind::device),
                      ohost = dev->alloc(copy_bytes, cnv::MemKind::host);
  if (!osrc.ok() || !odst.ok() || !ohost.ok()) die(osrc.status(), "own buffers");
  std::memcpy(ohost->host, pattern.data(), copy_bytes);
  {
    cnv::Channel& c = dev->channel(0);
    CommandBuffer c_cb = c.commands();
    Status s = c_cb.copy(osrc->va, ohost->va, copy_bytes);
    if (s.ok()) s = c.submit(c_cb, dl);
    c_cb.clear();
    if (s.ok()) s = c.wait_done(dl);
    if (!s.ok()) die(s, "upload own");
  }

  // Variants.
  std::vector<cnv::Channel*> all, lce4, lce23, lce2;
  for (size_t c = 0; c < dev->channel_count(); ++c) {
    cnv::Channel* ch = &dev->channel(c);
    all.push_back(ch);
    (ch->lce() == 4 ? lce4 : lce23).push_back(ch);
    if (ch->lce() == 2) lce2.push_back(ch);
  }
  // The reference set first: every other variant is sized against the GEMM,
  // and budget against ce3's rate.
  std::vector<Variant> vars;
  vars.push_back({"ce3", "CE striped LCE2+3+4", all});
  if (wanted("lce4") && !lce4.empty()) vars.push_back({"lce4", "CE LCE4 only", lce4});
  if (wanted("lce23") && !lce23.empty()) vars.push_back({"lce23", "CE LCE2+3 only", lce23});
  if (wanted("lce2") && !lce2.empty()) vars.push_back({"lce2", "CE LCE2 only", lce2});
  if (wanted("budget")) {
    Variant v{"budget", "", {}};
    v.budget = true;
    vars.push_back(v);
    if (wanted("ce3same")) {
      Variant w{"ce3same", "CE striped, budget's bytes", all};
      w.same_as_budget = true;
      vars.push_back(w);
    }
  }
  if (wanted("ce3sleep")) vars.push_back({"ce3sleep", "CE striped, host sleeps 200us", all, false, true});
  if (wanted("ce3own")) vars.push_back({"ce3own", "CE striped, own RM buffers", all, true});
  if (child > 0) {
    double ready = -1;
    if (read(from_child[0], &ready, sizeof ready) == sizeof ready && ready == 0)
      vars.push_back({"ce3proc", "CE striped, second process", {}, false, false, false, true});
    else
      std::fprintf(stderr, "no second copy process: the ce3proc variant is skipped\n");
  }
  if (wanted("sm")) vars.push_back({"sm", "cudaMemcpyAsync D2D (SM)", {}, false, false, true});

  auto submit_ce = [&](const Variant& v, int k) -> Status {
    std::vector<int> w;
    for (cnv::Channel* c : v.chs) w.push_back(c->pces());
    const std::vector<uint64_t> pieces = cnv::stripe(copy_bytes, w, 4096);
    const uint64_t s = v.own ? osrc->va : src->ptr, d = v.own ? odst->va : dst->ptr;
    for (int i = 0; i < k; ++i) {
      uint64_t off = 0;
      for (size_t c = 0; c < v.chs.size(); ++c) {
        if (!pieces[c]) continue;
        CommandBuffer cb = v.chs[c]->commands();
        CONCCL_RETURN_IF_ERROR(cb.copy(d + off, s + off, pieces[c]));
        CONCCL_RETURN_IF_ERROR(v.chs[c]->submit(cb, dl));
        off += pieces[c];
      }
    }
    return Status();
  };
  auto wait_ce = [&](const Variant& v) -> Status {
    for (cnv::Channel* c : v.chs) {
      if (!v.sleep_wait) {
        CONCCL_RETURN_IF_ERROR(c->wait_done(dl));
        continue;
      }
      while (c->completed() < c->submitted()) {
        CONCCL_RETURN_IF_ERROR(c->fault_status());
        if (dl.expired()) return error(Code::timeout, c->diagnose());
        timespec ts{0, 200000};
        nanosleep(&ts, nullptr);
      }
    }
    return Status();
  };
  auto sm_copies = [&](int k) {
    for (int i = 0; i < k; ++i)
      CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<void*>(dst->ptr), reinterpret_cast<void*>(src->ptr), copy_bytes,
                                 cudaMemcpyDeviceToDevice, s_copy));
  };
  auto run_copies = [&](const Variant& v, int k) {
    if (v.proc) {
      if (child_copies(k) < 0) die(error(Code::internal, "the copy process failed (see stderr)"), "ce3proc");
      return;
    }
    if (v.sm) {
      sm_copies(k);
      CUDA_CHECK(cudaStreamSynchronize(s_copy));
      return;
    }
    Status s = submit_ce(v, k);
    if (s.ok()) s = wait_ce(v);
    if (!s.ok()) die(s, v.key.c_str());
  };
  auto verify_dst = [&](const char* what) {
    CUDA_CHECK(cudaMemcpy(back.data(), reinterpret_cast<void*>(dst->ptr), copy_bytes, cudaMemcpyDeviceToHost));
    const bool ok = std::memcmp(back.data(), pattern.data(), copy_bytes) == 0;
    std::fprintf(stderr, "verify %s: %s\n", what, ok ? "ok" : "MISMATCH");
    return ok;
  };

  // Correctness: CE copy between the registered CUDA buffers, read back by CUDA.
  CUDA_CHECK(cudaMemset(reinterpret_cast<void*>(dst->ptr), 0x3C, copy_bytes));
  CUDA_CHECK(cudaDeviceSynchronize());
  run_copies(vars[0], 1);
  bool all_ok = verify_dst("CE copy of registered CUDA buffers");

  // GEMM correctness on a few elements (double reference).
  for (int i = 0; i < 3; ++i) gemm();
  CUDA_CHECK(cudaStreamSynchronize(s_gemm));
  double rel = 0;
  {
    std::vector<uint16_t> hc(mat);
    CUDA_CHECK(cudaMemcpy(hc.data(), dc, mat * 2, cudaMemcpyDeviceToHost));
    double err = 0, ref2 = 0;
    std::mt19937 rng(5);
    for (int s = 0; s < 32; ++s) {
      const int r = rng() % n, c = rng() % n;  // column-major: C[r + c*n] = sum_k A[r + k*n] B[k + c*n]
      double ref = 0;
      for (int k = 0; k < n; ++k) ref += double(from_bf16(ha[r + size_t(k) * n])) * from_bf16(hb[k + size_t(c) * n]);
      const double got = from_bf16(hc[r + size_t(c) * n]);
      err += (got - ref) * (got - ref);
      ref2 += ref * ref;
    }
    rel = ref2 > 0 ? std::sqrt(err / ref2) : std::sqrt(err);  // zeros: the absolute error
    std::fprintf(stderr, "GEMM relative error on 32 samples: %.2e\n", rel);
    if (!(rel < 1e-2)) all_ok = false;
  }

  Sampler sampler;
  const bool have_nvml = sampler.start();
  if (!have_nvml) std::fprintf(stderr, "NVML not available: no clock/power samples\n");

  cudaEvent_t g0, g1;
  CUDA_CHECK(cudaEventCreate(&g0));
  CUDA_CHECK(cudaEventCreate(&g1));
  std::vector<Phase> phases;
  // One phase: GEMMs (if gemm) and copies of v (if v), from one host instant.
  auto phase = [&](const std::string& what, int rep, bool with_gemm, const Variant* v, int copies) {
    CUDA_CHECK(cudaDeviceSynchronize());
    Phase p;
    p.what = what;
    p.rep = rep;
    p.t0 = now_ms();
    const auto t0 = Clock::now();
    if (with_gemm) {
      CUDA_CHECK(cudaEventRecord(g0, s_gemm));
      for (int i = 0; i < gemms; ++i) gemm();
      CUDA_CHECK(cudaEventRecord(g1, s_gemm));
    }
    if (v) {
      if (v->proc) {
        if (child_copies(copies) < 0) die(error(Code::internal, "the copy process failed (see stderr)"), "ce3proc");
      } else if (v->sm) {
        sm_copies(copies);
        CUDA_CHECK(cudaStreamSynchronize(s_copy));
      } else {
        Status s = submit_ce(*v, copies);
        if (s.ok()) s = wait_ce(*v);
        if (!s.ok()) die(s, what.c_str());
      }
      p.copy_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
    if (with_gemm) {
      CUDA_CHECK(cudaStreamSynchronize(s_gemm));
      float ev = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ev, g0, g1));
      p.gemm_ms = ev;
    }
    p.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    p.t1 = now_ms();
    p.avg = sampler.average(p.t0, p.t1);
    phases.push_back(p);
    return p;
  };

  // Warm-up: GEMMs and copy engines busy for about a second each (cold-GPU
  // effect, docs/perf/h200-notes.md run 2).
  {
    const double t = now_ms();
    while (now_ms() - t < 1000) phase("warmup", -1, true, nullptr, 0);
    const double t2 = now_ms();
    while (now_ms() - t2 < 1000) run_copies(vars[0], 8);
  }
  // Copies alone: size each variant to the GEMM time.
  const Phase ga = phase("gemm", -1, true, nullptr, 0);
  const double tflops = 2.0 * n * double(n) * n * gemms / (ga.gemm_ms * 1e-3) / 1e12;
  int budget_copies = 1;
  for (Variant& v : vars) {
    if (v.budget) {
      // The bytes budget_frac of the full-rate stripe moves in the GEMM's
      // time, on the channels the library picks for bytes / GEMM time.
      const double need = budget_frac * vars[0].gbps * 1e9;
      v.chs = dev->channels_for_rate(need);
      std::fprintf(stderr, "budget: %.1f GB/s needed, channels_for_rate estimates %.1f GB/s for its pick\n", need / 1e9,
                   dev->estimated_rate(v.chs) / 1e9);
      v.name = "budget " + std::to_string(int(budget_frac * 100)) + "%: LCE";
      for (size_t i = 0; i < v.chs.size(); ++i) v.name += (i ? "+" : "") + std::to_string(v.chs[i]->lce());
      v.copies = budget_copies = std::max(1, int(std::lround(need * ga.wall_ms * 1e-3 / double(copy_bytes))));
    } else if (v.same_as_budget) {
      v.copies = budget_copies;
    } else {
      const auto t0 = Clock::now();
      run_copies(v, 2);
      const double t2 = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / 2;
      v.copies = std::max(1, int(std::lround(copy_frac * ga.wall_ms / t2)));
    }
    const Phase p = phase(v.key + " alone", -1, false, &v, v.copies);
    v.t_copy_ms = p.copy_ms;
    v.gbps = double(copy_bytes) * v.copies / 1e9 / (p.copy_ms * 1e-3);
  }

  // Concurrent phases, each between two GEMM-alone phases.
  struct Result1 {
    double slowdown = 0, pct = 0, wall = 0, gemm_alone = 0, us_per_gb = 0, copy_ms = 0;
    Sampler::Avg alone, conc;
  };
  std::vector<std::vector<Result1>> res(vars.size());
  for (int r = 0; r < reps; ++r) {
    Phase before = phase("gemm", r, true, nullptr, 0);
    for (size_t k = 0; k < vars.size(); ++k) {
      const size_t vi = (k + size_t(r)) % vars.size();  // rotate the order per repetition
      Variant& v = vars[vi];
      if (!v.own && !v.proc) CUDA_CHECK(cudaMemset(reinterpret_cast<void*>(dst->ptr), 0x5A, copy_bytes));
      const Phase c = phase(v.key, r, true, &v, v.copies);
      const Phase after = phase("gemm", r, true, nullptr, 0);
      Result1 x;
      x.gemm_alone = (before.gemm_ms + after.gemm_ms) / 2;
      const double tg = (before.wall_ms + after.wall_ms) / 2, tc = v.t_copy_ms;
      x.slowdown = c.gemm_ms / x.gemm_alone - 1.0;
      x.us_per_gb = (c.gemm_ms - x.gemm_alone) * 1e3 / (double(copy_bytes) * v.copies / 1e9);
      const double s_ideal = (tg + tc) / std::max(tg, tc), s_real = (tg + tc) / c.wall_ms;
      x.pct = 100.0 * (s_real - 1.0) / (s_ideal - 1.0);
      x.wall = c.wall_ms;
      x.copy_ms = c.copy_ms;
      x.conc = c.avg;
      x.alone = before.avg;
      x.alone.sm = (before.avg.sm + after.avg.sm) / 2;
      x.alone.power_w = (before.avg.power_w + after.avg.power_w) / 2;
      res[vi].push_back(x);
      if (r == 0 && !v.own && !v.proc) all_ok &= verify_dst((v.key + " after concurrent run").c_str());
      before = after;
    }
  }
  sampler.stop();
  if (wanted("ce3own")) {  // own buffers: copy odst back to host and compare
    cnv::Channel& c = dev->channel(0);
    CommandBuffer c_cb = c.commands();
    std::memset(ohost->host, 0, copy_bytes);
    Status s = c_cb.copy(ohost->va, odst->va, copy_bytes);
    if (s.ok()) s = c.submit(c_cb, dl);
    c_cb.clear();
    if (s.ok()) s = c.wait_done(dl);
    if (!s.ok()) die(s, "verify own");
    const bool ok = std::memcmp(ohost->host, pattern.data(), copy_bytes) == 0;
    std::fprintf(stderr, "verify ce3own: %s\n", ok ? "ok" : "MISMATCH");
    all_ok &= ok;
  }

  if (!json_path.empty())
    if (FILE* f = std::fopen(json_path.c_str(), "w")) {
      std::fprintf(f,
                   "{\n  \"bench\": \"nv_c3_bench\", \"gemm_data\": \"%s\", \"budget_frac\": %.3f, \"copy_frac\": %.3f, \"n\": %d, "
                   "\"gemms\": %d, \"copy_bytes\": %zu, \"reps\": %d,\n",
                   gemm_data.c_str(), budget_frac, copy_frac, n, gemms, copy_bytes, reps);
      std::fprintf(f, "  \"gemm_alone\": {\"ms\": %.3f, \"sm_mhz\": %.0f, \"power_w\": %.1f, \"power_cap_frac\": %.2f},\n",
                   ga.gemm_ms, ga.avg.sm, ga.avg.power_w, ga.avg.power_cap_frac);
      std::fprintf(f, "  \"gemm_rel_error\": %.3e, \"gemm_tflops\": %.1f, \"nvml\": %s,\n  \"variants\": [", rel, tflops,
                   have_nvml ? "true" : "false");
      for (size_t vi = 0; vi < vars.size(); ++vi) {
        const Variant& v = vars[vi];
        std::fprintf(f, "%s\n    {\"key\": \"%s\", \"name\": \"%s\", \"copies\": %d, \"t_copy_ms\": %.3f, \"gbps\": %.1f, \"runs\": [",
                     vi ? "," : "", v.key.c_str(), v.name.c_str(), v.copies, v.t_copy_ms, v.gbps);
        for (size_t r = 0; r < res[vi].size(); ++r) {
          const Result1& x = res[vi][r];
          std::fprintf(f,
                       "%s{\"gemm_slowdown\": %.4f, \"pct_ideal\": %.2f, \"t_concurrent_ms\": %.3f, \"gemm_alone_ms\": %.3f, "
                       "\"gemm_us_lost_per_gb\": %.2f, \"copy_ms_concurrent\": %.3f, \"sm_mhz_alone\": %.0f, \"sm_mhz_conc\": %.0f, \"power_w_alone\": %.1f, \"power_w_conc\": %.1f, "
                       "\"power_cap_frac_conc\": %.2f, \"reasons_conc\": %llu}",
                       r ? ", " : "", x.slowdown, x.pct, x.wall, x.gemm_alone, x.us_per_gb, x.copy_ms, x.alone.sm, x.conc.sm, x.alone.power_w,
                       x.conc.power_w, x.conc.power_cap_frac, x.conc.reasons);
        }
        std::fprintf(f, "]}");
      }
      std::fprintf(f, "\n  ],\n  \"phases\": [");
      for (size_t i = 0; i < phases.size(); ++i) {
        const Phase& p = phases[i];
        std::fprintf(f,
                     "%s\n    {\"what\": \"%s\", \"rep\": %d, \"t0_ms\": %.1f, \"wall_ms\": %.3f, \"gemm_ms\": %.3f, "
                     "\"copy_ms\": %.3f, \"sm_mhz\": %.0f, \"mem_mhz\": %.0f, \"power_w\": %.1f, \"temp_c\": %.1f, "
                     "\"power_cap_frac\": %.2f, \"reasons\": %llu, \"samples\": %d}",
                     i ? "," : "", p.what.c_str(), p.rep, p.t0, p.wall_ms, p.gemm_ms, p.copy_ms, p.avg.sm, p.avg.mem,
                     p.avg.power_w, p.avg.temp, p.avg.power_cap_frac, p.avg.reasons, p.avg.n);
      }
      std::fprintf(f, "\n  ],\n  \"verified\": %s\n}\n", all_ok ? "true" : "false");
      std::fclose(f);
    }

  std::printf("\nC3: %d x bf16 GEMM %dx%dx%d on %s data (%.0f TFLOP/s alone, SM %.0f MHz, %.0f W, power cap %.0f%% "
              "of samples; rel. error %.1e) beside %zu MiB D2D copies; %d reps, each concurrent phase between two "
              "GEMM-alone phases\n",
              gemms, n, n, n, gemm_data.c_str(), tflops, ga.avg.sm, ga.avg.power_w, 100 * ga.avg.power_cap_frac, rel,
              copy_mib, reps);
  std::printf("%-28s %6s %7s %7s %-22s %7s %-17s %6s %7s %11s %11s %6s %6s\n", "copy path", "copies", "GB/s", "copy ms",
              "GEMM slowdown per rep", "mean", "% ideal per rep", "mean", "us/GB", "SM MHz a/c", "power W a/c",
              "pwrcap", "copy x");
  for (size_t vi = 0; vi < vars.size(); ++vi) {
    const Variant& v = vars[vi];
    std::string sl, pc;
    double sm_a = 0, sm_c = 0, pw_a = 0, pw_c = 0, cap = 0, msl = 0, mpc = 0, mus = 0, cx = 0;
    const double k = res[vi].empty() ? 1.0 : double(res[vi].size());
    for (const Result1& x : res[vi]) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%+.1f", sl.empty() ? "" : " ", 100 * x.slowdown);
      sl += b;
      std::snprintf(b, sizeof b, "%s%.0f", pc.empty() ? "" : " ", x.pct);
      pc += b;
      msl += 100 * x.slowdown / k;
      mpc += x.pct / k;
      mus += x.us_per_gb / k;
      cx += (v.t_copy_ms > 0 ? x.copy_ms / v.t_copy_ms : 0) / k;  // copy time beside the GEMM over alone
      sm_a += x.alone.sm / k;
      sm_c += x.conc.sm / k;
      pw_a += x.alone.power_w / k;
      pw_c += x.conc.power_w / k;
      cap += x.conc.power_cap_frac / k;
    }
    std::printf("%-28s %6d %7.1f %7.1f %-22s %+6.1f%% %-17s %6.1f %7.1f %5.0f/%-5.0f %5.0f/%-5.0f %5.0f%% %6.2f\n",
                v.name.c_str(), v.copies, v.gbps, v.t_copy_ms, sl.c_str(), msl, pc.c_str(), mpc, mus, sm_a, sm_c, pw_a,
                pw_c, 100 * cap, cx);
  }
  std::printf("verified: %s\n", all_ok ? "yes" : "NO");

  if (child > 0) {
    const int stop = -1;
    if (write(to_child[1], &stop, sizeof stop) == sizeof stop) waitpid(child, nullptr, 0);
  }
  (void)dev->unregister_cuda(src->ptr, src->size);
  (void)dev->unregister_cuda(dst->ptr, dst->size);
  for (auto* b : {&*osrc, &*odst, &*ohost}) (void)dev->free(*b);
  dev.reset();
  (void)cnv::cuda_free(*src);
  (void)cnv::cuda_free(*dst);
  return all_ok ? 0 : 1;
}
