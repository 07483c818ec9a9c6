// tests/backends/nv/replay_tick_ptx_test.cpp - the replay tick kernel
// (src/backends/nv/replay_tick.cpp), the step a captured call records on a
// CUDA stream, on any machine: its PTX text well formed (only a driver's
// JIT compiles it; nv_local_capture_test.cpp runs it on a GPU), its stores
// in the order the armed lists rely on, and launch_replay_tick's checks.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "backends/nv/ptx_text.hpp"
#include "backends/nv/replay_tick.hpp"

namespace conccl::nv {
namespace {

TEST(NvReplayTickPtx, WellFormedWithItsStoresInOrder) {
  for (auto [version, target] : {std::pair{"7.0", "sm_70"}, std::pair{"7.5", "sm_75"}}) {
    const std::string ptx = replay_tick_ptx(version, target);
    SCOPED_TRACE(target);
    EXPECT_NE(ptx.find(std::string(".version ") + version + "\n"), std::string::npos);
    EXPECT_NE(ptx.find(std::string(".target ") + target + "\n"), std::string::npos);
    EXPECT_NE(ptx.find(".address_size 64\n"), std::string::npos);
    const size_t entry = ptx.find(".visible .entry conccl_replay_tick(");
    ASSERT_NE(entry, std::string::npos);
    size_t at = entry;
    for (const char* param : {".param .u64 conccl_replay_tick_counter,", ".param .u64 conccl_replay_tick_reset,",
                              ".param .u64 conccl_replay_tick_stop\n"}) {
      const size_t p = ptx.find(param, at);
      EXPECT_NE(p, std::string::npos) << "parameter missing or out of order: " << param;
      if (p != std::string::npos) at = p;
    }
    EXPECT_EQ(expect_well_formed_ptx(ptx), 16);
    // Stop is read first; the reset is stored and fenced before the counter
    // is read and stored, and the counter store is fenced too: an armed list
    // must never see the new count before the end signal was reset.
    const size_t stop = ptx.find("ld.volatile.global.u64 %v, [%s];");
    const size_t reset = ptx.find("st.volatile.global.u64 [%r], 0;");
    const size_t fence = ptx.find("membar.sys;", reset);
    const size_t read = ptx.find("ld.volatile.global.u64 %v, [%c];");
    const size_t count = ptx.find("st.volatile.global.u64 [%c], %v;");
    ASSERT_NE(stop, std::string::npos);
    ASSERT_NE(reset, std::string::npos);
    ASSERT_NE(count, std::string::npos);
    EXPECT_LT(stop, reset);
    EXPECT_LT(reset, fence);
    EXPECT_LT(fence, read);
    EXPECT_LT(read, count);
    EXPECT_NE(ptx.find("membar.sys;", count), std::string::npos);
    // A stopped capture only releases its stream.
    const size_t stopped = ptx.find("STOPPED:");
    ASSERT_NE(stopped, std::string::npos);
    EXPECT_NE(ptx.find("st.volatile.global.u64 [%r], 1;", stopped), std::string::npos);
    EXPECT_EQ(ptx.find("[%c]", stopped), std::string::npos) << "no count after STOPPED";
  }
}

TEST(NvReplayTick, RefusesNullAddressesAndNamesMissingLibcuda) {
  Status s = launch_replay_tick(nullptr, {0x1000, 0, 0x2000});
  EXPECT_EQ(s.code(), Code::invalid_argument) << s.to_string();
  if (void* l = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(l);
    GTEST_SKIP() << "libcuda.so.1 loads here (nv_local_capture_test.cpp covers it)";
  }
  s = launch_replay_tick(nullptr, {0x1000, 0x1010, 0x1020});
  EXPECT_EQ(s.code(), Code::unavailable) << s.to_string();
  EXPECT_NE(s.message().find("libcuda"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("CONCCL_CUDA_GRAPHS=0"), std::string::npos) << "names what to do: " << s.message();
}

}  // namespace
}  // namespace conccl::nv
