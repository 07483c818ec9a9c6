// tools/bench/nv_interop_bench.cpp - CUDA interop of the nv backend on one GPU:
// registration of cuMemCreate buffers (cost, cache, CE copy between them,
// verified by CUDA), the refusal of cudaMalloc memory, and the two hand-offs
// through semaphores, in a registered device page (Device::alloc_cuda_slot)
// and in our host slot page shared with CUDA (Device::share_slots_with_cuda):
//   CE -> CUDA: our channel releases the slot (64-bit, with the CE timestamp
//               at +8); a CUDA stream waits on it with cuStreamWaitValue64(GEQ)
//               and then runs a 1-thread kernel that reads %globaltimer.
//               Latency = kernel %globaltimer - CE release timestamp.
//   CUDA -> CE: our channel waits on the slot (host-class 64-bit acquire) and
//               then releases a host slot with a timestamp; CUDA runs a kernel
//               that reads %globaltimer, then cuStreamWriteValue64 on the slot.
//               Latency = CE release timestamp - kernel %globaltimer.
// Both clocks are the GPU's ns timer (clc8b5.h semaphore timestamps, open-gpu-doc). Before each
// release the bench checks that the waiting side has not moved (a 200 us
// hold), and it counts violations. Prints a table last; writes JSON.
//
//   nv_interop_bench [--iters 300] [--json PATH]
#include <cuda.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "conccl/hopper_methods.hpp"
#include "backends/nv/nv_device.hpp"
#include "tools/bench/cuda_check.hpp"
#include "tools/bench/cuda_stamp.hpp"
#include "tools/bench/nv_bench_util.hpp"

using namespace conccl;
namespace cnv = conccl::nv;
using Clock = std::chrono::steady_clock;

namespace {

void spin_us(int us) {
  const auto t = Clock::now() + std::chrono::microseconds(us);
  while (Clock::now() < t) {
  }
}

// What the command line sets.
struct Args {
  int iters = 300;
  std::string json_path;
};

// Parses the command line into *o; false on a usage error (exit code 2).
bool parse_args(int argc, char** argv, Args* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) o->iters = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) o->json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: nv_interop_bench [--iters 300] [--json PATH]\n");
      return false;
    }
  }
  return true;
}

// One round of hand-offs through one kind of slot.
struct Handoff {
  const char* kind;
  bench::Stats ce_to_cuda, cuda_to_ce, host;
  int early = 0, wrong_value = 0, early2 = 0;
};

// Everything the bench measured, for the JSON and the table.
struct Results {
  double reg_a_ms = 0, reg_hit_us = 0, copy_ms = 0;
  bool copy_ok = false, refused_ok = false;
  Status refused;
  std::vector<Handoff> rounds;
  bool ok = true;
};

// What the hand-off rounds share: the CUDA stream and stamp kernel, our
// channel, the host timestamp slot and the kernels' output records.
struct HandoffCtx {
  int iters;
  CUstream stream;
  CUfunction stamp;
  cnv::Channel& ch;
  CommandBuffer cb;
  const Deadline& dl;
  uint64_t host_ts;          // our host slot the CE releases with a timestamp
  volatile uint64_t* hts;    // its CPU mapping
  CUdeviceptr out;           // 2 * iters records of 32 bytes from the stamp kernel
  uint64_t base_value = 0x3'0000'0000ull;
};

// (1) Registration: cost, cache hit, CE copy between the buffers, read back
// by CUDA. Returns 0, or 4 when registration or the copy fails.
int measure_registration(cnv::Gpu& dev, const cnv::CudaAlloc& A, const cnv::CudaAlloc& B, size_t bytes,
                         const std::vector<uint8_t>& pattern, std::vector<uint8_t>& back, const Deadline& dl,
                         Results* res) {
  auto t0 = Clock::now();
  Status st = dev.register_cuda(A.ptr, A.size);
  res->reg_a_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (st.ok()) st = dev.register_cuda(B.ptr, B.size);
  if (!st.ok()) {
    std::fprintf(stderr, "register: %s\n", st.to_string().c_str());
    return 4;
  }
  t0 = Clock::now();
  st = dev.register_cuda(A.ptr + 4096, 1 << 20);  // cached
  res->reg_hit_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  if (st.ok()) st = dev.unregister_cuda(A.ptr + 4096, 1 << 20);
  t0 = Clock::now();
  st = dev.copy_striped(B.ptr, A.ptr, bytes, dl);
  res->copy_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!st.ok()) {
    std::fprintf(stderr, "CE copy: %s\n", st.to_string().c_str());
    return 4;
  }
  CU_CHECK(cuMemcpyDtoH(back.data(), B.ptr, bytes));
  res->copy_ok = std::memcmp(back.data(), pattern.data(), bytes) == 0;
  res->ok &= res->copy_ok;
  std::fprintf(stderr, "register 256 MiB: %.3f ms; cached register: %.1f us; striped CE copy %.2f ms; CUDA reads it back: %s\n",
               res->reg_a_ms, res->reg_hit_us, res->copy_ms, res->copy_ok ? "ok" : "MISMATCH");
  return 0;
}

// (2) Plain cuMemAlloc (= cudaMalloc) memory: register_cuda must refuse it
// and say what to use instead.
void check_cudamalloc_refused(cnv::Gpu& dev, Results* res) {
  CUdeviceptr plain = 0;
  CU_CHECK(cuMemAlloc(&plain, 1 << 20));
  res->refused = dev.register_cuda(plain, 1 << 20);
  std::fprintf(stderr, "cudaMalloc memory: %s\n", res->refused.to_string().c_str());
  res->refused_ok = res->refused.code() == Code::invalid_argument &&
                    res->refused.message().find("cuMemCreate(POSIX_FILE_DESCRIPTOR handle type)") != std::string::npos;
  res->ok &= res->refused_ok;
  CU_CHECK(cuMemFree(plain));
}

// CE -> CUDA through `sem`: the stream waits on the slot and stamps; our
// channel releases it after a 200 us hold. Fills r's counters and the
// per-iteration latencies.
Status ce_to_cuda(HandoffCtx& x, uint64_t sem, Handoff* r, std::vector<double>* lat, std::vector<double>* host_lat) {
  for (int i = 0; i < x.iters; ++i) {
    const uint64_t target = x.base_value + 1 + i;
    CUdeviceptr o = x.out + CUdeviceptr(i) * 32;
    CUdeviceptr s = sem;
    void* args[] = {&o, &s};
    CU_CHECK(cuStreamWaitValue64(x.stream, sem, target, CU_STREAM_WAIT_VALUE_GEQ));
    CU_CHECK(cuLaunchKernel(x.stamp, 1, 1, 1, 1, 1, 1, 0, x.stream, args, nullptr));
    spin_us(200);
    if (cuStreamQuery(x.stream) != CUDA_ERROR_NOT_READY) ++r->early;
    const auto h0 = Clock::now();
    CONCCL_RETURN_IF_ERROR(HopperMethods(x.cb).release(sem, target, true, false));
    CONCCL_RETURN_IF_ERROR(x.ch.submit(x.cb, x.dl));
    x.cb.clear();
    CU_CHECK(cuStreamSynchronize(x.stream));
    host_lat->push_back(std::chrono::duration<double, std::micro>(Clock::now() - h0).count());
    CONCCL_RETURN_IF_ERROR(x.ch.wait_done(x.dl));
  }
  {
    std::vector<uint64_t> rec(size_t(x.iters) * 4);
    CU_CHECK(cuMemcpyDtoH(rec.data(), x.out, size_t(x.iters) * 32));
    for (int i = 0; i < x.iters; ++i) {
      const uint64_t k = rec[size_t(i) * 4], v = rec[size_t(i) * 4 + 1], ts = rec[size_t(i) * 4 + 2];
      if (v < x.base_value + 1 + i) ++r->wrong_value;
      lat->push_back((double(int64_t(k - ts))) / 1000.0);
    }
  }
  return Status();
}

// CUDA -> CE through `flag`: our channel waits on the slot, then releases
// the host slot with a timestamp; CUDA stamps, then writes the slot after a
// 200 us hold.
Status cuda_to_ce(HandoffCtx& x, uint64_t flag, Handoff* r, std::vector<double>* lat) {
  for (int i = 0; i < x.iters; ++i) {
    const uint64_t target = x.base_value + 1 + i;
    CONCCL_RETURN_IF_ERROR(x.cb.wait_ge(flag, target));
    CONCCL_RETURN_IF_ERROR(HopperMethods(x.cb).release(x.host_ts, target, true, false));
    uint64_t f = 0;
    CONCCL_RETURN_IF_ERROR(x.ch.submit(x.cb, x.dl, &f));
    x.cb.clear();
    spin_us(200);
    if (x.hts[0] >= target) ++r->early2;
    CUdeviceptr o = x.out + CUdeviceptr(x.iters + i) * 32;
    CUdeviceptr s = flag;
    void* args[] = {&o, &s};
    CU_CHECK(cuLaunchKernel(x.stamp, 1, 1, 1, 1, 1, 1, 0, x.stream, args, nullptr));
    CU_CHECK(cuStreamWriteValue64(x.stream, flag, target, CU_STREAM_WRITE_VALUE_DEFAULT));
    CONCCL_RETURN_IF_ERROR(x.ch.wait_done(x.dl, f));
    CU_CHECK(cuStreamSynchronize(x.stream));
    uint64_t k = 0;
    CU_CHECK(cuMemcpyDtoH(&k, o, 8));
    lat->push_back(double(int64_t(x.hts[1] - k)) / 1000.0);
  }
  return Status();
}

// Both hand-offs through one pair of slots (sem: CE -> CUDA, flag: CUDA -> CE).
Result<Handoff> handoffs(HandoffCtx& x, const char* kind, uint64_t sem, uint64_t flag) {
  Handoff r;
  r.kind = kind;
  x.base_value += 0x1'0000'0000ull;  // above anything an earlier round left in a slot
  CU_CHECK(cuMemsetD8(x.out, 0, size_t(x.iters) * 2 * 32));
  std::vector<double> ce_cuda, host_ce_cuda, cuda_ce;
  CONCCL_RETURN_IF_ERROR(ce_to_cuda(x, sem, &r, &ce_cuda, &host_ce_cuda));
  CONCCL_RETURN_IF_ERROR(cuda_to_ce(x, flag, &r, &cuda_ce));
  r.ce_to_cuda = bench::stats(ce_cuda);
  r.cuda_to_ce = bench::stats(cuda_ce);
  r.host = bench::stats(host_ce_cuda);
  return r;
}

// (3)+(4) The two hand-offs, through slots of each kind: device memory
// (alloc_cuda_slot: a registered cuMemCreate page) and host memory
// (alloc_slot after share_slots_with_cuda: our page registered with CUDA).
// Returns 0, or 4 on a failure.
int measure_handoffs(cnv::Gpu& dev, CUstream stream, CUfunction stamp, int iters, const Deadline& dl,
                     Results* res) {
  Status st = dev.share_slots_with_cuda();
  if (!st.ok()) {
    std::fprintf(stderr, "share_slots_with_cuda: %s\n", st.to_string().c_str());
    return 4;
  }
  Result<uint64_t> host_ts = dev.alloc_slot();
  if (!host_ts.ok()) return 4;
  volatile uint64_t* hts = dev.slot_host(*host_ts);
  CUdeviceptr out;
  CU_CHECK(cuMemAlloc(&out, size_t(iters) * 2 * 32));
  cnv::Channel& ch = dev.channel(0);
  HandoffCtx x{iters, stream, stamp, ch, ch.commands(), dl, *host_ts, hts, out};
  {
    Result<uint64_t> sem = dev.alloc_cuda_slot(), flag = dev.alloc_cuda_slot();
    Result<uint64_t> hsem = dev.alloc_slot(), hflag = dev.alloc_slot();
    if (!sem.ok() || !flag.ok() || !hsem.ok() || !hflag.ok()) {
      std::fprintf(stderr, "slots: %s %s\n", sem.status().to_string().c_str(), hsem.status().to_string().c_str());
      return 4;
    }
    for (auto [kind, a, b] : {std::tuple{"device slot", *sem, *flag}, std::tuple{"host slot", *hsem, *hflag}}) {
      Result<Handoff> r = handoffs(x, kind, a, b);
      if (!r.ok()) {
        std::fprintf(stderr, "hand-offs through the %s: %s\n", kind, r.status().to_string().c_str());
        return 4;
      }
      res->ok &= r->early == 0 && r->wrong_value == 0 && r->early2 == 0;
      res->rounds.push_back(*r);
    }
  }
  CU_CHECK(cuMemFree(out));
  return 0;
}

// Writes the results as JSON to `path` (nothing if it cannot be opened).
void write_json(const std::string& path, int iters, const Results& res) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  std::fprintf(f,
               "{\n  \"bench\": \"nv_interop_bench\", \"iters\": %d,\n  \"register_256mib_ms\": %.3f, "
               "\"register_cached_us\": %.2f, \"copy_verified\": %s, \"cudamalloc_refused\": %s,\n"
               "  \"cudamalloc_message\": \"%s\",\n  \"handoffs\": [",
               iters, res.reg_a_ms, res.reg_hit_us, res.copy_ok ? "true" : "false", res.refused_ok ? "true" : "false",
               res.refused.message().c_str());
  for (size_t i = 0; i < res.rounds.size(); ++i) {
    const Handoff& r = res.rounds[i];
    std::fprintf(f,
                 "%s\n    {\"slot\": \"%s\", \"ce_to_cuda_us\": %s, \"ce_to_cuda_early\": %d, "
                 "\"ce_to_cuda_wrong_value\": %d,\n     \"host_submit_to_stream_sync_us\": %s,\n"
                 "     \"cuda_to_ce_us\": %s, \"cuda_to_ce_early\": %d}",
                 i ? "," : "", r.kind, bench::stats_json(r.ce_to_cuda).c_str(), r.early, r.wrong_value,
                 bench::stats_json(r.host).c_str(), bench::stats_json(r.cuda_to_ce).c_str(), r.early2);
  }
  std::fprintf(f, "\n  ],\n  \"ok\": %s\n}\n", res.ok ? "true" : "false");
  std::fclose(f);
}

// Prints the summary and the hand-off latency table.
void print_table(int iters, const Results& res) {
  std::printf("\nnv_interop_bench: %d iterations per direction and slot kind (device: a registered cuMemCreate "
              "page; host: our slot page shared with CUDA)\n",
              iters);
  std::printf("register_cuda 256 MiB %.2f ms, cached %.1f us; CE copy between registered CUDA buffers verified: %s; "
              "cudaMalloc refused with the fix: %s\n",
              res.reg_a_ms, res.reg_hit_us, res.copy_ok ? "yes" : "NO", res.refused_ok ? "yes" : "NO");
  std::printf("%-48s %8s %8s %8s %8s %8s %8s %s\n", "hand-off (us)", "min", "p10", "median", "p90", "p99", "max",
              "ordering");
  for (const Handoff& r : res.rounds) {
    auto row = [&](const char* what, const bench::Stats& x, const char* order) {
      char name[64];
      std::snprintf(name, sizeof name, "%s (%s)", what, r.kind);
      std::printf("%-48s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %s\n", name, x.min, x.p10, x.median, x.p90, x.p99, x.max,
                  order);
    };
    row("CE release -> CUDA kernel start", r.ce_to_cuda, r.early || r.wrong_value ? "VIOLATED" : "ok");
    row("CUDA kernel -> CE past its wait", r.cuda_to_ce, r.early2 ? "VIOLATED" : "ok");
    row("host: CE submit -> stream sync", r.host, "");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args opt;
  if (!parse_args(argc, argv, &opt)) return 2;
  // CUDA first (docs/nv-backend.md).
  CU_CHECK(cuInit(0));
  CUdevice cdev;
  CU_CHECK(cuDeviceGet(&cdev, 0));
  CUcontext ctx;
  CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, cdev));
  CU_CHECK(cuCtxSetCurrent(ctx));
  CUstream stream;
  CU_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUfunction stamp = bench::load_stamp_kernel();

  const size_t bytes = 256u << 20;
  Result<cnv::CudaAlloc> A = cnv::cuda_alloc(bytes), B = cnv::cuda_alloc(bytes);
  if (!A.ok() || !B.ok()) {
    std::fprintf(stderr, "cuda_alloc: %s %s\n", A.status().to_string().c_str(), B.status().to_string().c_str());
    return 4;
  }
  std::vector<uint8_t> pattern(bytes), back(bytes);
  {
    std::mt19937_64 rng(4242);
    auto* p = reinterpret_cast<uint64_t*>(pattern.data());
    for (size_t i = 0; i < bytes / 8; ++i) p[i] = rng();
  }
  CU_CHECK(cuMemcpyHtoD(A->ptr, pattern.data(), bytes));
  CU_CHECK(cuMemsetD8(B->ptr, 0x5A, bytes));

  Status last;
  std::unique_ptr<cnv::Gpu> dev = bench::open_beside_cuda(&last);
  if (!dev) {
    std::fprintf(stderr, "nv_interop_bench: %s\n", last.to_string().c_str());
    return last.code() == Code::unavailable ? 5 : 4;
  }
  const Deadline dl = Deadline::after(std::chrono::seconds(60));
  Results res;
  if (int rc = measure_registration(*dev, *A, *B, bytes, pattern, back, dl, &res)) return rc;
  check_cudamalloc_refused(*dev, &res);
  if (int rc = measure_handoffs(*dev, stream, stamp, opt.iters, dl, &res)) return rc;

  if (!opt.json_path.empty()) write_json(opt.json_path, opt.iters, res);
  print_table(opt.iters, res);
  (void)dev->unregister_cuda(A->ptr, A->size);
  (void)dev->unregister_cuda(B->ptr, B->size);
  dev.reset();
  (void)cnv::cuda_free(*A);
  (void)cnv::cuda_free(*B);
  return res.ok ? 0 : 1;
}
