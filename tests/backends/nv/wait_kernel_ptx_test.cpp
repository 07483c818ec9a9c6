// tests/backends/nv/wait_kernel_ptx_test.cpp - the wait kernel
// (src/backends/nv/wait_kernel.cpp, CONCCL_STREAM_WAITS=kernel) on any
// machine: its PTX well formed (only a driver's JIT compiles it;
// nv_cuda_test.cpp runs it on a GPU), each word's loop reading, comparing
// as CU_STREAM_WAIT_VALUE_GEQ does, sleeping and checking the budget, and
// launch_wait_kernel's and the setting's checks.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backends/nv/ptx_text.hpp"
#include "backends/nv/wait_kernel.hpp"

namespace conccl::nv {
namespace {

TEST(NvWaitKernelPtx, WellFormedOneLoopPerWord) {
  const std::string ptx = wait_kernel_ptx("7.0", "sm_70");
  EXPECT_NE(ptx.find(".version 7.0\n"), std::string::npos);
  EXPECT_NE(ptx.find(".target sm_70\n"), std::string::npos);
  const size_t entry = ptx.find(".visible .entry conccl_wait_ge(");
  ASSERT_NE(entry, std::string::npos);
  size_t at = entry;
  for (size_t i = 0; i < kWaitKernelWords; ++i)
    for (const std::string p : {"va", "value"}) {
      const size_t f = ptx.find(".param .u64 conccl_wait_ge_" + p + std::to_string(i) + ",", at);
      ASSERT_NE(f, std::string::npos) << "parameter " << p << i << " missing or out of order";
      at = f;
    }
  ASSERT_NE(ptx.find(".param .u64 conccl_wait_ge_budget\n", at), std::string::npos);
  EXPECT_GT(expect_well_formed_ptx(ptx, {"%globaltimer"}), int(12 * kWaitKernelWords));
  // Per word: a null address is skipped; the read comes before the signed
  // difference and the branch out, the sleep and the budget check after.
  for (size_t i = 0; i < kWaitKernelWords; ++i) {
    const std::string n = std::to_string(i);
    SCOPED_TRACE("word " + n);
    const size_t skip = ptx.find("@%p bra PASSED" + n + ";");
    const size_t poll = ptx.find("POLL" + n + ":\n");
    ASSERT_NE(skip, std::string::npos);
    ASSERT_NE(poll, std::string::npos);
    EXPECT_LT(skip, poll);
    const size_t read = ptx.find("ld.volatile.global.s64 %x, [%a];", poll);
    const size_t diff = ptx.find("sub.s64 %d, %x, %t;", poll);
    const size_t ge = ptx.find("setp.ge.s64 %p, %d, 0;", poll);
    const size_t out = ptx.find("@%p bra PASSED" + n + ";", poll);
    const size_t nap = ptx.find("nanosleep.u32", poll);
    const size_t budget = ptx.find("setp.gt.u64 %p, %e, %budget;", poll);
    const size_t again = ptx.find("bra POLL" + n + ";", poll);
    const size_t passed = ptx.find("PASSED" + n + ":\n", poll);
    ASSERT_NE(passed, std::string::npos);
    EXPECT_LT(read, diff);
    EXPECT_LT(diff, ge);
    EXPECT_LT(ge, out);
    EXPECT_LT(out, nap);
    EXPECT_LT(nap, budget);
    EXPECT_LT(budget, again);
    EXPECT_LT(again, passed);
  }
  // Every way out ends in the fence.
  const size_t done = ptx.find("DONE:\n");
  ASSERT_NE(done, std::string::npos);
  EXPECT_NE(ptx.find("membar.sys;", done), std::string::npos);
}

TEST(NvWaitKernel, RefusesWritesAndNullAddresses) {
  const StreamMemOp write{false, 0x1000, 1}, null_wait{true, 0, 1};
  for (const StreamMemOp& op : {write, null_wait}) {
    Status s = launch_wait_kernel(nullptr, std::span<const StreamMemOp>(&op, 1), 1000);
    EXPECT_EQ(s.code(), Code::invalid_argument) << s.to_string();
  }
}

TEST(NvWaitKernel, TheSettingNamesItsValues) {
  ::setenv("CONCCL_STREAM_WAITS", "spin", 1);
  Status s = check_stream_waits_setting();
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_NE(s.message().find("memop"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("kernel"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("auto"), std::string::npos) << s.message();
  for (const char* ok : {"memop", "kernel", "auto"}) {
    ::setenv("CONCCL_STREAM_WAITS", ok, 1);
    EXPECT_TRUE(check_stream_waits_setting().ok()) << ok;
  }
  ::unsetenv("CONCCL_STREAM_WAITS");
  EXPECT_TRUE(check_stream_waits_setting().ok());
}

}  // namespace
}  // namespace conccl::nv
