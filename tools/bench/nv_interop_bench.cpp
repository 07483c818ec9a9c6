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

}  // namespace

int main(int argc, char** argv) {
  int iters = 300;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: nv_interop_bench [--iters 300] [--json PATH]\n");
      return 2;
    }
  }
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
  std::unique_ptr<cnv::Device> dev = bench::open_beside_cuda(&last);
  if (!dev) {
    std::fprintf(stderr, "nv_interop_bench: %s\n", last.to_string().c_str());
    return last.code() == Code::unavailable ? 5 : 4;
  }
  const Deadline dl = Deadline::after(std::chrono::seconds(60));
  bool ok = true;

  // (1) Registration: cost, cache hit, CE copy between the buffers.
  auto t0 = Clock::now();
  Status st = dev->register_cuda(A->ptr, A->size);
  const double reg_a_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (st.ok()) st = dev->register_cuda(B->ptr, B->size);
  if (!st.ok()) {
    std::fprintf(stderr, "register: %s\n", st.to_string().c_str());
    return 4;
  }
  t0 = Clock::now();
  st = dev->register_cuda(A->ptr + 4096, 1 << 20);  // cached
  const double reg_hit_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  if (st.ok()) st = dev->unregister_cuda(A->ptr + 4096, 1 << 20);
  t0 = Clock::now();
  st = dev->copy_striped(B->ptr, A->ptr, bytes, dl);
  const double copy_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!st.ok()) {
    std::fprintf(stderr, "CE copy: %s\n", st.to_string().c_str());
    return 4;
  }
  CU_CHECK(cuMemcpyDtoH(back.data(), B->ptr, bytes));
  const bool copy_ok = std::memcmp(back.data(), pattern.data(), bytes) == 0;
  ok &= copy_ok;
  std::fprintf(stderr, "register 256 MiB: %.3f ms; cached register: %.1f us; striped CE copy %.2f ms; CUDA reads it back: %s\n",
               reg_a_ms, reg_hit_us, copy_ms, copy_ok ? "ok" : "MISMATCH");

  // (2) Plain cuMemAlloc (= cudaMalloc) memory.
  CUdeviceptr plain = 0;
  CU_CHECK(cuMemAlloc(&plain, 1 << 20));
  Status refused = dev->register_cuda(plain, 1 << 20);
  std::fprintf(stderr, "cudaMalloc memory: %s\n", refused.to_string().c_str());
  const bool refused_ok = refused.code() == Code::invalid_argument &&
                          refused.message().find("cuMemCreate(POSIX_FILE_DESCRIPTOR handle type)") != std::string::npos;
  ok &= refused_ok;
  CU_CHECK(cuMemFree(plain));

  // (3)+(4) The two hand-offs, through slots of each kind: device memory
  // (alloc_cuda_slot: a registered cuMemCreate page) and host memory
  // (alloc_slot after share_slots_with_cuda: our page registered with CUDA).
  st = dev->share_slots_with_cuda();
  if (!st.ok()) {
    std::fprintf(stderr, "share_slots_with_cuda: %s\n", st.to_string().c_str());
    return 4;
  }
  Result<uint64_t> host_ts = dev->alloc_slot();
  if (!host_ts.ok()) return 4;
  volatile uint64_t* hts = dev->slot_host(*host_ts);
  CUdeviceptr out;
  CU_CHECK(cuMemAlloc(&out, size_t(iters) * 2 * 32));
  cnv::Channel& ch = dev->channel(0);
  CommandBuffer cb = ch.commands();
  struct Handoff {
    const char* kind;
    bench::Stats ce_to_cuda, cuda_to_ce, host;
    int early = 0, wrong_value = 0, early2 = 0;
  };
  uint64_t base_value = 0x3'0000'0000ull;
  auto handoffs = [&](const char* kind, uint64_t sem, uint64_t flag) -> Result<Handoff> {
    Handoff r;
    r.kind = kind;
    base_value += 0x1'0000'0000ull;  // above anything an earlier round left in a slot
    CU_CHECK(cuMemsetD8(out, 0, size_t(iters) * 2 * 32));
    std::vector<double> ce_to_cuda, host_ce_to_cuda, cuda_to_ce;
    // CE -> CUDA.
    for (int i = 0; i < iters; ++i) {
      const uint64_t target = base_value + 1 + i;
      CUdeviceptr o = out + CUdeviceptr(i) * 32;
      CUdeviceptr s = sem;
      void* args[] = {&o, &s};
      CU_CHECK(cuStreamWaitValue64(stream, sem, target, CU_STREAM_WAIT_VALUE_GEQ));
      CU_CHECK(cuLaunchKernel(stamp, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr));
      spin_us(200);
      if (cuStreamQuery(stream) != CUDA_ERROR_NOT_READY) ++r.early;
      const auto h0 = Clock::now();
      CONCCL_RETURN_IF_ERROR(HopperMethods(cb).release(sem, target, true, false));
      CONCCL_RETURN_IF_ERROR(ch.submit(cb, dl));
      cb.clear();
      CU_CHECK(cuStreamSynchronize(stream));
      host_ce_to_cuda.push_back(std::chrono::duration<double, std::micro>(Clock::now() - h0).count());
      CONCCL_RETURN_IF_ERROR(ch.wait_done(dl));
    }
    {
      std::vector<uint64_t> rec(size_t(iters) * 4);
      CU_CHECK(cuMemcpyDtoH(rec.data(), out, size_t(iters) * 32));
      for (int i = 0; i < iters; ++i) {
        const uint64_t k = rec[size_t(i) * 4], v = rec[size_t(i) * 4 + 1], ts = rec[size_t(i) * 4 + 2];
        if (v < base_value + 1 + i) ++r.wrong_value;
        ce_to_cuda.push_back((double(int64_t(k - ts))) / 1000.0);
      }
    }
    // CUDA -> CE.
    for (int i = 0; i < iters; ++i) {
      const uint64_t target = base_value + 1 + i;
      CONCCL_RETURN_IF_ERROR(cb.wait_ge(flag, target));
      CONCCL_RETURN_IF_ERROR(HopperMethods(cb).release(*host_ts, target, true, false));
      uint64_t f = 0;
      CONCCL_RETURN_IF_ERROR(ch.submit(cb, dl, &f));
      cb.clear();
      spin_us(200);
      if (hts[0] >= target) ++r.early2;
      CUdeviceptr o = out + CUdeviceptr(iters + i) * 32;
      CUdeviceptr s = flag;
      void* args[] = {&o, &s};
      CU_CHECK(cuLaunchKernel(stamp, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr));
      CU_CHECK(cuStreamWriteValue64(stream, flag, target, CU_STREAM_WRITE_VALUE_DEFAULT));
      CONCCL_RETURN_IF_ERROR(ch.wait_done(dl, f));
      CU_CHECK(cuStreamSynchronize(stream));
      uint64_t k = 0;
      CU_CHECK(cuMemcpyDtoH(&k, o, 8));
      cuda_to_ce.push_back(double(int64_t(hts[1] - k)) / 1000.0);
    }
    r.ce_to_cuda = bench::stats(ce_to_cuda);
    r.cuda_to_ce = bench::stats(cuda_to_ce);
    r.host = bench::stats(host_ce_to_cuda);
    return r;
  };
  std::vector<Handoff> rounds;
  {
    Result<uint64_t> sem = dev->alloc_cuda_slot(), flag = dev->alloc_cuda_slot();
    Result<uint64_t> hsem = dev->alloc_slot(), hflag = dev->alloc_slot();
    if (!sem.ok() || !flag.ok() || !hsem.ok() || !hflag.ok()) {
      std::fprintf(stderr, "slots: %s %s\n", sem.status().to_string().c_str(), hsem.status().to_string().c_str());
      return 4;
    }
    for (auto [kind, a, b] : {std::tuple{"device slot", *sem, *flag}, std::tuple{"host slot", *hsem, *hflag}}) {
      Result<Handoff> r = handoffs(kind, a, b);
      if (!r.ok()) {
        std::fprintf(stderr, "hand-offs through the %s: %s\n", kind, r.status().to_string().c_str());
        return 4;
      }
      ok &= r->early == 0 && r->wrong_value == 0 && r->early2 == 0;
      rounds.push_back(*r);
    }
  }
  CU_CHECK(cuMemFree(out));

  if (!json_path.empty())
    if (FILE* f = std::fopen(json_path.c_str(), "w")) {
      std::fprintf(f,
                   "{\n  \"bench\": \"nv_interop_bench\", \"iters\": %d,\n  \"register_256mib_ms\": %.3f, "
                   "\"register_cached_us\": %.2f, \"copy_verified\": %s, \"cudamalloc_refused\": %s,\n"
                   "  \"cudamalloc_message\": \"%s\",\n  \"handoffs\": [",
                   iters, reg_a_ms, reg_hit_us, copy_ok ? "true" : "false", refused_ok ? "true" : "false",
                   refused.message().c_str());
      for (size_t i = 0; i < rounds.size(); ++i) {
        const Handoff& r = rounds[i];
        std::fprintf(f,
                     "%s\n    {\"slot\": \"%s\", \"ce_to_cuda_us\": %s, \"ce_to_cuda_early\": %d, "
                     "\"ce_to_cuda_wrong_value\": %d,\n     \"host_submit_to_stream_sync_us\": %s,\n"
                     "     \"cuda_to_ce_us\": %s, \"cuda_to_ce_early\": %d}",
                     i ? "," : "", r.kind, bench::stats_json(r.ce_to_cuda).c_str(), r.early, r.wrong_value,
                     bench::stats_json(r.host).c_str(), bench::stats_json(r.cuda_to_ce).c_str(), r.early2);
      }
      std::fprintf(f, "\n  ],\n  \"ok\": %s\n}\n", ok ? "true" : "false");
      std::fclose(f);
    }
  std::printf("\nnv_interop_bench: %d iterations per direction and slot kind (device: a registered cuMemCreate "
              "page; host: our slot page shared with CUDA)\n",
              iters);
  std::printf("register_cuda 256 MiB %.2f ms, cached %.1f us; CE copy between registered CUDA buffers verified: %s; "
              "cudaMalloc refused with the fix: %s\n",
              reg_a_ms, reg_hit_us, copy_ok ? "yes" : "NO", refused_ok ? "yes" : "NO");
  std::printf("%-48s %8s %8s %8s %8s %8s %8s %s\n", "hand-off (us)", "min", "p10", "median", "p90", "p99", "max",
              "ordering");
  for (const Handoff& r : rounds) {
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
  (void)dev->unregister_cuda(A->ptr, A->size);
  (void)dev->unregister_cuda(B->ptr, B->size);
  dev.reset();
  (void)cnv::cuda_free(*A);
  (void)cnv::cuda_free(*B);
  return ok ? 0 : 1;
}
