// tests/backends/nv/nv_cuda_test.cpp - CUDA interop (src/backends/nv/cuda_interop.cpp):
// cuda_alloc, register_cuda / unregister_cuda with their cache, the refusal of
// plain cudaMalloc memory, semaphore slots in a registered device page, and
// the wait kernel (wait_kernel.cpp) holding a stream.
//
// libcuda is loaded with dlopen, here too: without it (this project's build
// machines) only the unavailable path runs. On a GPU machine CUDA is set up
// first and our nv::Gpu second, as the library recommends
// (docs/nv-backend.md), and every byte is checked through our own channels.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "conccl/hopper_methods.hpp"
#include "backends/nv/nv_device.hpp"
#include "backends/nv/wait_kernel.hpp"

namespace conccl::nv {
namespace {

bool have_driver() { return access("/dev/nvidiactl", F_OK) == 0; }

TEST(NvCuda, UnavailableWithoutLibcuda) {
  Status s = cuda_available();
  if (s.ok()) GTEST_SKIP() << "libcuda.so.1 loads here";
  EXPECT_EQ(s.code(), Code::unavailable);
  EXPECT_NE(s.message().find("libcuda"), std::string::npos) << s.message();
  Result<CudaAlloc> a = cuda_alloc(1 << 20);
  EXPECT_EQ(a.status().code(), Code::unavailable);
  CudaAlloc empty;
  EXPECT_TRUE(cuda_free(empty).ok()) << "freeing nothing is fine";
  // The host wait for a stream (multi-process NCCL-shaped calls) says the same.
  Status w = synchronize_stream(reinterpret_cast<void*>(1), Deadline::after_ms(100));
  EXPECT_EQ(w.code(), Code::unavailable) << w.to_string();
  EXPECT_NE(w.message().find("libcuda"), std::string::npos) << w.message();
}

class NvCudaHw : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_driver() || !cuda_available().ok()) return;
    // CUDA first: its address reservations are in place before our window.
    for (CudaAlloc* c : {&a_, &b_}) {
      Result<CudaAlloc> r = cuda_alloc(kBytes);
      if (!r.ok()) {
        error_ = "cuda_alloc: " + r.status().to_string();
        return;
      }
      *c = *r;
    }
    // The device places its windows where nothing (CUDA, ASan) is mapped.
    Options o;
    o.va_size = 32ull << 30;
    Result<std::unique_ptr<Gpu>> d = Gpu::open(o);
    if (d.ok()) dev_ = std::move(d).value();
    else error_ = d.status().to_string();
  }
  static void TearDownTestSuite() {
    dev_.reset();
    (void)cuda_free(a_);
    (void)cuda_free(b_);
  }
  void SetUp() override {
    if (!have_driver()) GTEST_SKIP() << "no /dev/nvidiactl";
    if (!cuda_available().ok()) GTEST_SKIP() << cuda_available().to_string();
    ASSERT_TRUE(dev_) << error_;
  }
  // Copies [src, src+n) to [dst, dst+n) on channel 0 and waits.
  static Status copy(uint64_t dst, uint64_t src, uint64_t n) {
    Channel& ch = dev_->channel(0);
    CommandBuffer cb = ch.commands();
    CONCCL_RETURN_IF_ERROR(cb.copy(dst, src, n));
    uint64_t f = 0;
    CONCCL_RETURN_IF_ERROR(ch.submit(cb, Deadline::after_ms(1000), &f));
    cb.clear();
    return ch.wait_done(Deadline::after_ms(5000), f);
  }
  static constexpr size_t kBytes = 6u << 20;  // three 2 MiB granules
  static CudaAlloc a_, b_;
  static std::unique_ptr<Gpu> dev_;
  static std::string error_;
};
CudaAlloc NvCudaHw::a_, NvCudaHw::b_;
std::unique_ptr<Gpu> NvCudaHw::dev_;
std::string NvCudaHw::error_;

TEST_F(NvCudaHw, RegisterCopyAndCache) {
  ASSERT_EQ(a_.size, kBytes);
  const size_t before = dev_->registered_allocations();
  ASSERT_TRUE(dev_->register_cuda(a_.ptr, a_.size).ok());
  ASSERT_TRUE(dev_->register_cuda(b_.ptr, b_.size).ok());
  EXPECT_EQ(dev_->registered_allocations(), before + 2);
  EXPECT_TRUE(dev_->is_registered(a_.ptr + 4096, 100));
  // A sub-range of a registered allocation: cached, one more reference.
  ASSERT_TRUE(dev_->register_cuda(a_.ptr + 0x1234, 5000).ok());
  EXPECT_EQ(dev_->registered_allocations(), before + 2);

  Result<Allocation> h = dev_->alloc(kBytes, Placement::host), r = dev_->alloc(kBytes, Placement::host);
  ASSERT_TRUE(h.ok() && r.ok());
  std::mt19937_64 rng(77);
  for (size_t i = 0; i < kBytes / 8; ++i) h->as<uint64_t>()[i] = rng();
  std::memset(r->host, 0, kBytes);
  // host -> CUDA A -> CUDA B -> host, all through our channel at CUDA's addresses.
  ASSERT_TRUE(copy(a_.ptr, h->va, kBytes).ok());
  Status st = copy(b_.ptr + 0x3003, a_.ptr + 0x1001, kBytes - 0x4000);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(copy(r->va, b_.ptr, kBytes).ok());
  EXPECT_EQ(std::memcmp(r->as<uint8_t>() + 0x3003, h->as<uint8_t>() + 0x1001, kBytes - 0x4000), 0);

  // Two references on A: the first unregister keeps it.
  EXPECT_TRUE(dev_->unregister_cuda(a_.ptr + 0x1234, 5000).ok());
  EXPECT_TRUE(dev_->is_registered(a_.ptr, a_.size));
  EXPECT_TRUE(dev_->unregister_cuda(a_.ptr, a_.size).ok());
  EXPECT_FALSE(dev_->is_registered(a_.ptr, 1));
  EXPECT_EQ(dev_->unregister_cuda(a_.ptr, 1).code(), Code::not_found);
  EXPECT_TRUE(dev_->unregister_cuda(b_.ptr, b_.size).ok());
  EXPECT_EQ(dev_->registered_allocations(), before);
  EXPECT_TRUE(dev_->free(*h).ok());
  EXPECT_TRUE(dev_->free(*r).ok());
}

TEST_F(NvCudaHw, PlainCudaMallocIsRefusedClearly) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  using Alloc = int (*)(unsigned long long*, size_t);
  using Free = int (*)(unsigned long long);
  auto mem_alloc = reinterpret_cast<Alloc>(dlsym(lib, "cuMemAlloc_v2"));
  auto mem_free = reinterpret_cast<Free>(dlsym(lib, "cuMemFree_v2"));
  ASSERT_TRUE(mem_alloc && mem_free);
  unsigned long long p = 0;
  ASSERT_EQ(mem_alloc(&p, 1 << 20), 0);
  Status st = dev_->register_cuda(p, 1 << 20);
  EXPECT_EQ(st.code(), Code::invalid_argument) << st.to_string();
  EXPECT_NE(st.message().find("cuMemCreate(POSIX_FILE_DESCRIPTOR handle type) or conccl::nv::cuda_alloc"),
            std::string::npos)
      << st.message();
  std::printf("cudaMalloc memory: %s\n", st.to_string().c_str());
  EXPECT_FALSE(dev_->is_registered(p, 1));
  EXPECT_EQ(mem_free(p), 0);
  dlclose(lib);
}

TEST_F(NvCudaHw, SemaphoreSlotsInDeviceMemory) {
  Result<uint64_t> s1 = dev_->alloc_cuda_slot(), s2 = dev_->alloc_cuda_slot();
  ASSERT_TRUE(s1.ok()) << s1.status().to_string();
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(*s2, *s1 + 16);
  EXPECT_TRUE(dev_->is_registered(*s1, 16));
  Result<Allocation> r = dev_->alloc(4096, Placement::host);
  ASSERT_TRUE(r.ok());
  std::memset(r->host, 0xFF, 64);
  // Zeroed at creation.
  ASSERT_TRUE(copy(r->va, *s1, 32).ok());
  EXPECT_EQ(r->as<uint64_t>()[0], 0u);
  EXPECT_EQ(r->as<uint64_t>()[2], 0u);
  // One engine releases a 64-bit value into the page; another waits on it.
  Channel& a = dev_->channel(0);
  CommandBuffer a_cb = a.commands();
  Channel& b = dev_->channel(dev_->channel_count() > 1 ? 1 : 0);
  CommandBuffer b_cb = b.commands();
  ASSERT_TRUE(b_cb.wait_ge(*s1, 0x300000001ull).ok());
  ASSERT_TRUE(HopperMethods(b_cb).release(*s2, 0x500000007ull, /*timestamp=*/true, /*interrupt=*/false).ok());
  ASSERT_TRUE(b.submit(b_cb, Deadline::after_ms(1000)).ok());
  b_cb.clear();
  ASSERT_TRUE(HopperMethods(a_cb).release(*s1, 0x300000001ull, /*timestamp=*/true, /*interrupt=*/false).ok());
  ASSERT_TRUE(a.submit(a_cb, Deadline::after_ms(1000)).ok());
  a_cb.clear();
  ASSERT_TRUE(b.wait_done(Deadline::after_ms(5000)).ok()) << b.diagnose();
  ASSERT_TRUE(a.wait_done(Deadline::after_ms(5000)).ok()) << a.diagnose();
  ASSERT_TRUE(copy(r->va, *s1, 32).ok());
  EXPECT_EQ(r->as<uint64_t>()[0], 0x300000001ull);
  EXPECT_NE(r->as<uint64_t>()[1], 0u) << "CE timestamp at +8";
  EXPECT_EQ(r->as<uint64_t>()[2], 0x500000007ull);
  EXPECT_TRUE(dev_->free(*r).ok());
}

// The host slot page shared with CUDA (SYS-reg): CUDA writes a slot that our
// channel waits on, our channel releases a slot that CUDA reads, and the CPU
// sees both at the same addresses.
TEST_F(NvCudaHw, HostSlotsSharedWithCuda) {
  Status st = dev_->share_slots_with_cuda();
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(dev_->share_slots_with_cuda().ok()) << "a second call is a no-op";
  EXPECT_TRUE(dev_->slots_shared_with_cuda());
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr);
  using MemsetD32 = int (*)(unsigned long long, unsigned, size_t);
  using DtoH = int (*)(void*, unsigned long long, size_t);
  using Sync = int (*)();
  auto memset32 = reinterpret_cast<MemsetD32>(dlsym(lib, "cuMemsetD32_v2"));
  auto dtoh = reinterpret_cast<DtoH>(dlsym(lib, "cuMemcpyDtoH_v2"));
  auto sync = reinterpret_cast<Sync>(dlsym(lib, "cuCtxSynchronize"));
  ASSERT_TRUE(memset32 && dtoh && sync);

  Result<uint64_t> in = dev_->alloc_slot(), out = dev_->alloc_slot();
  ASSERT_TRUE(in.ok() && out.ok());
  volatile uint64_t* hin = dev_->slot_host(*in);
  volatile uint64_t* hout = dev_->slot_host(*out);
  hin[0] = 0;
  hout[0] = 0;
  const uint64_t want_in = 0x0000000700000007ull, want_out = 0x0000ABCD00001234ull;
  Channel& ch = dev_->channel(0);
  CommandBuffer cb = ch.commands();
  ASSERT_TRUE(cb.wait_ge(*in, want_in).ok());
  ASSERT_TRUE(HopperMethods(cb).release(*out, want_out, /*timestamp=*/true, /*interrupt=*/false).ok());
  uint64_t f = 0;
  ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000), &f).ok());
  cb.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(hout[0], 0u) << "the channel must hold at its acquire";
  // CUDA writes the slot through its device pointer, which is the same VA.
  ASSERT_EQ(memset32(*in, 7, 2), 0);
  ASSERT_EQ(sync(), 0);
  EXPECT_EQ(hin[0], want_in) << "the CPU sees CUDA's write";
  st = ch.wait_done(Deadline::after_ms(5000), f);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(hout[0], want_out);
  EXPECT_NE(hout[1], 0u) << "CE timestamp at +8";
  uint64_t seen = 0;
  ASSERT_EQ(dtoh(&seen, *out, 8), 0);
  EXPECT_EQ(seen, want_out) << "CUDA reads our release";
}

// The wait kernel (CONCCL_STREAM_WAITS=kernel): the stream goes past it only
// once every word has reached its value (64-bit, compared as
// CU_STREAM_WAIT_VALUE_GEQ does), and past its budget when one never does.
TEST_F(NvCudaHw, WaitKernelHoldsTheStreamUntilEveryWordIsReached) {
  ASSERT_TRUE(dev_->share_slots_with_cuda().ok());
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr);
  using Sync = int (*)();
  auto sync = reinterpret_cast<Sync>(dlsym(lib, "cuCtxSynchronize"));
  ASSERT_TRUE(sync);
  uint64_t slot[5];
  for (uint64_t& x : slot) {
    Result<uint64_t> r = dev_->alloc_slot();
    ASSERT_TRUE(r.ok());
    x = *r;
    dev_->slot_host(x)[0] = 0;
  }
  auto host = [&](int i) { return dev_->slot_host(slot[i]); };
  // Five words, so that the second launch (kWaitKernelWords per launch)
  // waits too; the last one passes at once (0 >= 0).
  const uint64_t want[5] = {5, 0x100000000ull, 9, 0x7000000000000001ull, 0};
  std::vector<StreamMemOp> waits;
  for (int i = 0; i < 4; ++i) waits.push_back({true, slot[i], want[i]});
  waits.push_back({true, slot[4], want[4]});
  Result<uint64_t> flag_r = dev_->alloc_slot();
  ASSERT_TRUE(flag_r.ok());
  const uint64_t flag = *flag_r;
  dev_->slot_host(flag)[0] = 0;
  Status st = launch_wait_kernel(nullptr, waits, 10ull * 1000 * 1000 * 1000);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(stream_write_value64(nullptr, flag, 1).ok());
  auto flag_after = [&](int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (dev_->slot_host(flag)[0] == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    return dev_->slot_host(flag)[0];
  };
  EXPECT_EQ(flag_after(30), 0u) << "the stream went past an unreached wait";
  host(0)[0] = 5;
  host(1)[0] = 0xFFFFFFFFull;  // below 2^32: the upper half counts
  host(2)[0] = 9;
  host(3)[0] = 0x7000000000000001ull;
  EXPECT_EQ(flag_after(30), 0u) << "word 1 is one short";
  host(1)[0] = 0x100000000ull;
  EXPECT_EQ(flag_after(2000), 1u) << "the stream did not go on once every word was reached";
  ASSERT_EQ(sync(), 0);
  // A word never reached: the stream goes on once the budget (50 ms) is spent.
  dev_->slot_host(flag)[0] = 0;
  const StreamMemOp never{true, slot[0], 6};
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(launch_wait_kernel(nullptr, std::span<const StreamMemOp>(&never, 1), 50ull * 1000 * 1000).ok());
  ASSERT_TRUE(stream_write_value64(nullptr, flag, 2).ok());
  EXPECT_EQ(flag_after(5000), 2u) << "the budget did not end the wait";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(45));
  ASSERT_EQ(sync(), 0);
  dlclose(lib);
}

// CONCCL_STREAM_WAITS=auto polls only where the stream's context runs under
// CUDA MPS: what the driver says (CU_DEVICE_ATTRIBUTE_MPS_ENABLED), checked
// against CONCCL_TEST_EXPECT_MPS=0|1 where the run knows (the device
// scripts start the MPS daemon or not).
TEST_F(NvCudaHw, MpsIsSeenAsTheDriverSaysIt) {
  const bool mps = stream_context_uses_mps(nullptr);
  std::printf("stream_context_uses_mps: %d\n", int(mps));
  const char* expect = std::getenv("CONCCL_TEST_EXPECT_MPS");
  if (!expect) GTEST_SKIP() << "CONCCL_TEST_EXPECT_MPS unset: nothing to compare with (MPS seen: " << mps << ")";
  EXPECT_EQ(mps, std::string(expect) == "1");
}

}  // namespace
}  // namespace conccl::nv
