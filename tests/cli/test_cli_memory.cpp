// tests/cli/test_cli_memory.cpp - sdma-probe refuses, before allocating, a
// run that does not fit in GPU or host memory, with the sum and a fix that
// names real flags; and it allocates only what an op needs.
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "probe_runner.hpp"

namespace {

using probe_test::contains;
using probe_test::Outcome;
using probe_test::probe;
using probe_test::read_file;

using Argv = std::vector<std::string>;

std::optional<unsigned long long> mem_available_kib() {
  const std::string info = read_file("/proc/meminfo");
  const size_t at = info.find("MemAvailable:");
  if (at == std::string::npos) return std::nullopt;
  return std::strtoull(info.c_str() + at + 13, nullptr, 10);
}

// Every --flag that `text` names is a flag of `command` (from its help).
void expect_real_flags(const std::string& command, const std::string& text) {
  std::set<std::string> known;
  for (const std::string& f : probe_test::flag_names(probe({"help", command}).out)) known.insert(f);
  const std::vector<std::string> named = probe_test::flag_names(text);
  for (const std::string& f : named)
    EXPECT_TRUE(known.count(f)) << command << " names " << f << ", which it does not have: " << text;
  EXPECT_FALSE(named.empty()) << "the refusal names no flag to change: " << text;
}

TEST(Memory, GpuMemoryRefusalGivesTheSumAndARealFix) {
  struct Case {
    Argv argv;
    std::vector<std::string> says;
  };
  for (const Case& c : std::vector<Case>{
           {{"broadcast", "--gpus", "2", "--max", "8G"}, {"needs 16 GiB of memory on GPU 0", "has 4 GiB", "--max", "--ranks"}},
           {{"allgather", "--gpus", "2", "--ranks", "8", "--min", "8G", "--max", "8G"}, {"GPU 0", "--max", "--ranks"}},
           {{"copy", "--src", "0", "--dst", "1", "--bytes", "5G"}, {"needs 5 GiB of memory on GPU 0", "--bytes"}},
           {{"exec", "--buffer", "a=3G", "--buffer", "b=3G"}, {"needs 6 GiB of memory on GPU 0", "--buffer"}},
       }) {
    Outcome r = probe(c.argv, "", 30);
    EXPECT_EQ(r.rc, 4) << c.argv[0] << ": " << r.err;
    for (const std::string& s : c.says) EXPECT_TRUE(contains(r.err, s)) << s << " in " << r.err;
    EXPECT_FALSE(contains(r.err, "--memory-per-gpu")) << r.err;
    expect_real_flags(c.argv[0], r.err);
  }
}

TEST(Memory, HostMemoryIsCheckedBeforeAllocating) {
  // 64 emulated GPUs with 2 GiB each in use: about 131 GiB of host memory.
  const std::optional<unsigned long long> kib = mem_available_kib();
  if (!kib || *kib >= (131ull << 20)) GTEST_SKIP() << "this host has the memory for it";
  Outcome r = probe({"allgather", "--gpus", "64", "--engines", "1", "--ranks", "64", "--min", "2G", "--max", "2G"}, "",
                    60);
  EXPECT_EQ(r.rc, 4) << r.err;  // not 137 (the OOM killer)
  EXPECT_FALSE(r.signaled) << r.err;
  EXPECT_LT(r.seconds, 10.0) << "refused only after allocating";
  for (const char* s : {"of host memory", "130 GiB", "MemAvailable", "--max", "--ranks"})
    EXPECT_TRUE(contains(r.err, s)) << s << " in " << r.err;
  expect_real_flags("allgather", r.err);
}

TEST(Memory, ManyGpusShareTheEmulatedHostMemory) {
  // 40 stagers of 32 MiB did not fit the emulator's 1 GiB of host memory.
  Outcome r = probe({"allgather", "--gpus", "40", "--engines", "1", "--min", "4K", "--max", "4K"}, "", 60);
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST(Memory, TheArenaNamesNoFlagThatDoesNotExist) {
  Outcome r = probe({"exec", "--buffer", "a=2G@host"});
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_FALSE(contains(r.err, "--memory-per-gpu")) << r.err;
  EXPECT_TRUE(contains(r.err, "emulated host memory is 1024 MiB")) << r.err;
}

}  // namespace
