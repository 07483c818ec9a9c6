// tests/backends/kfd/kfd_smi_test.cpp - the SMI fault watch (src/backends/kfd/
// kfd_smi.hpp) against a fake KFD whose event files are socket pairs: the
// test writes what kfd_smi_events.c would queue, in its format.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "backends/kfd/fake_smi.hpp"
#include "backends/kfd/kfd_smi.hpp"

namespace {

using conccl::test::FakeSmi;
using conccl::kfd::SmiWatch;
using conccl::kfd::smi_fault_text;

bool contains(const std::string& s, const std::string& n) { return s.find(n) != std::string::npos; }

TEST(KfdSmi, LinesOfThisProcessAreFaultsOthersAreNot) {
  const pid_t me = 0x1234;
  std::optional<std::string> f = smi_fault_text("1 1234:conccl_test", me);
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(contains(*f, "VMFAULT")) << *f;
  EXPECT_TRUE(contains(*f, "pid 4660 'conccl_test'")) << *f;
  EXPECT_TRUE(contains(*f, "dmesg")) << *f;
  EXPECT_FALSE(smi_fault_text("1 1235:other", me).has_value()) << "another process's fault";
  ASSERT_TRUE(smi_fault_text("3 7", me).has_value()) << "a reset concerns every process";
  EXPECT_TRUE(contains(*smi_fault_text("3 7 MODE1", me), "GPU_PRE_RESET, 7 MODE1"));
  EXPECT_FALSE(smi_fault_text("2 ff:12", me).has_value()) << "thermal throttling is no fault";
  EXPECT_FALSE(smi_fault_text("", me).has_value());
  EXPECT_FALSE(smi_fault_text("zz 1234:x", me).has_value());
  EXPECT_FALSE(smi_fault_text("1 nopid", me).has_value());
}

TEST(KfdSmi, WatchEnablesFaultsAndResetsAndReadsWhateverArrived) {
  FakeSmi k;
  SmiWatch w;
  ASSERT_TRUE(w.open(k, {11, 22}).ok());
  EXPECT_TRUE(w.watching());
  // VMFAULT (bit 0) and GPU_PRE_RESET (bit 2): KFD_SMI_EVENT_MASK_FROM_INDEX.
  EXPECT_EQ(k.mask_written(11), 0x5u);
  EXPECT_EQ(k.mask_written(22), 0x5u);
  const pid_t me = ::getpid();
  char mine[64];
  std::snprintf(mine, sizeof mine, "1 %x:conccl", static_cast<unsigned>(me));
  EXPECT_EQ(w.poll(me), (std::vector<std::string>{"", ""})) << "nothing queued: nothing, and no blocking";
  k.queue(22, "1 1:someone_else\n");
  k.queue(22, std::string(mine, 4));  // a line in two reads
  EXPECT_EQ(w.poll(me), (std::vector<std::string>{"", ""}));
  k.queue(22, std::string(mine + 4) + "\n");
  std::vector<std::string> got = w.poll(me);
  EXPECT_TRUE(got[0].empty());
  EXPECT_TRUE(contains(got[1], "VMFAULT")) << got[1];
  k.queue(11, "3 2\n");
  got = w.poll(me);
  EXPECT_TRUE(contains(got[0], "GPU_PRE_RESET")) << got[0];
}

TEST(KfdSmi, AGpuWhoseFileCannotOpenIsNamed) {
  FakeSmi k;
  k.refuse[22] = true;
  SmiWatch w;
  const conccl::Status st = w.open(k, {11, 22});
  EXPECT_EQ(st.code(), conccl::Code::unavailable);
  EXPECT_TRUE(contains(st.message(), "gpu_id 22")) << st.message();
  EXPECT_TRUE(contains(st.message(), "timeouts")) << st.message();
  EXPECT_TRUE(w.watching()) << "the other GPU is still watched";
  SmiWatch none;
  FakeSmi all;
  all.refuse[11] = true;
  EXPECT_FALSE(none.open(all, {11}).ok());
  EXPECT_FALSE(none.watching());
  EXPECT_EQ(none.poll(::getpid()), std::vector<std::string>{""});
}

}  // namespace
