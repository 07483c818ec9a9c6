// tests/cli/test_cli_robust.cpp - sdma-probe on hostile values: every one
// gives a clear error and the documented exit code (docs/sdma-probe.md),
// never a crash, a silent wrap to another index, or a false diagnosis.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "probe_runner.hpp"

namespace {

using probe_test::contains;
using probe_test::Outcome;
using probe_test::probe;

using Argv = std::vector<std::string>;

// Values an int or uint64 cast would wrap: 2^32 -> 0, 2^64-1 -> -1, ...
const std::vector<std::string> kWrapping = {"4294967296", "4294967297", "18446744073709551615",
                                            "-1", "0x100000000", "99999999999999999999999"};

// Runs argv + {flag, v} for every wrapping v: exit 2 and an error naming the flag.
void expect_refused(const Argv& argv, const std::string& flag, const std::string& range) {
  for (const std::string& v : kWrapping) {
    Argv a = argv;
    a.push_back(flag);
    a.push_back(v);
    Outcome r = probe(a, "", 20);
    EXPECT_EQ(r.rc, 2) << flag << " " << v << ": " << r.err;
    EXPECT_TRUE(contains(r.err, flag)) << r.err;
    EXPECT_TRUE(contains(r.err, range)) << flag << " " << v << ": " << r.err;
    EXPECT_TRUE(r.out.empty() || !contains(r.out, "#wrong")) << r.out;  // no table
  }
}

// ---------------------------------------------------------------------------
// Integer narrowing: indices and counts are range-checked on 64 bits.

TEST(Narrowing, GpuEngineAndCountFlags) {
  expect_refused({"copy", "--dst", "1", "--bytes", "4K"}, "--src", "0..63");
  expect_refused({"copy", "--src", "0", "--bytes", "4K"}, "--dst", "0..63");
  expect_refused({"copy", "--src", "0", "--dst", "1", "--bytes", "4K"}, "--engine", "0..255");
  expect_refused({"exec"}, "--gpu", "0..63");
  expect_refused({"exec"}, "--engine", "0..255");
  expect_refused({"list"}, "--gpus", "1..64");
  expect_refused({"list"}, "--engines", "1..32");
  expect_refused({"allgather", "--max", "4K"}, "--ranks", "1..64");
  expect_refused({"allgather", "--max", "4K"}, "--iters", "1..1000000");
  expect_refused({"allgather", "--max", "4K"}, "--warmup", "0..1000000");
  expect_refused({"broadcast", "--max", "4K"}, "--root", "0..63");
  expect_refused({"p2p", "--ranks", "2", "--max", "4K"}, "--peer", "0..63");
}

TEST(Narrowing, IndicesPastTheNodeNameTheFlag) {
  Outcome r = probe({"copy", "--src", "0", "--dst", "8", "--bytes", "4K"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--dst 8 is out of range: the node has GPUs 0..7")) << r.err;
  r = probe({"exec", "--gpu", "8"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--gpu 8 is out of range")) << r.err;
  r = probe({"p2p", "--ranks", "2", "--peer", "2", "--max", "4K"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--peer 2 is out of range: give a rank 0..1")) << r.err;
  r = probe({"exec", "--buffer", "a=4K@4294967296"});
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "GPU index (0..63)")) << r.err;
}

// ---------------------------------------------------------------------------
// --timeout-ms: 1..86400000; 0 and values whose deadline would overflow the
// clock are usage errors, not an instant false hang diagnosis.

TEST(Timeout, ZeroAndHugeAreUsageErrors) {
  for (const Argv& cmd : {Argv{"copy", "--src", "0", "--dst", "1", "--bytes", "4K"}, Argv{"exec"},
                          Argv{"allgather", "--gpus", "2", "--max", "4K"}}) {
    for (const char* v : {"0", "10000000000000", "9223372036854775807", "18446744073709551615"}) {
      Argv a = cmd;
      a.insert(a.end(), {"--timeout-ms", v});
      Outcome r = probe(a, "", 20);
      EXPECT_EQ(r.rc, 2) << cmd[0] << " --timeout-ms " << v << ": " << r.err;
      EXPECT_TRUE(contains(r.err, "--timeout-ms")) << r.err;
      EXPECT_TRUE(contains(r.err, "1..86400000")) << r.err;
      EXPECT_FALSE(contains(r.err, "rptr=")) << r.err;  // no hang diagnosis
    }
  }
  Outcome ok = probe({"copy", "--src", "0", "--dst", "1", "--bytes", "4K", "--timeout-ms", "86400000"});
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

// ---------------------------------------------------------------------------
// Bounds checks that wrapped for huge values

TEST(Overflow, ExecDumpNeverReadsOutsideTheBuffer) {
  // OFF + BYTES wraps past 2^64 to a small number: it must not pass the check
  // (it printed host memory from before the buffer, or crashed).
  for (const char* dump : {"a+0xFFFFFFFFFFFFFFF0:16", "a+0xFFFFFFFFFFFFFFFC:8", "a+4:0xFFFFFFFFFFFFFFFC",
                           "a+4084:16", "a:8192"}) {
    Outcome r = probe({"exec", "--buffer", "a=4K", "--dump", dump}, "", 20);
    EXPECT_EQ(r.rc, 2) << dump << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "reads past the end of a")) << dump << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << dump << ": " << r.out;
  }
  Outcome last = probe({"exec", "--buffer", "a=4K", "--dump", "a+4080:16"});
  EXPECT_EQ(last.rc, 0) << last.err;
  EXPECT_EQ(last.out, "a+4080: 00000000 00000000 00000000 00000000\n");
}

TEST(Overflow, HugeBufferSizesAreRefusedNotWrapped) {
  // Rounding 2^64-1 up to the allocation granule wrapped to a 0-byte buffer:
  // exit 0, or a wrong "not CPU-visible" exit 5 once it was filled.
  for (const char* size : {"18446744073709551615", "0xFFFFFFFFFFFFFF01", "16777215T"}) {
    Outcome r = probe({"exec", "--buffer", std::string("a=") + size, "--fill", "a=1"}, "", 20);
    EXPECT_EQ(r.rc, 4) << size << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "of memory on GPU 0, which has 4 GiB")) << size << ": " << r.err;
    EXPECT_FALSE(contains(r.err, "CPU-visible")) << r.err;
  }
}

// ---------------------------------------------------------------------------
// Sweeps of sizes below the core count: every byte is still verified (the
// per-thread share rounded to 0 bytes: nothing was checked, and the empty
// compare passed a null pointer to memcmp, which UBSan reports).

TEST(TinySizes, EveryByteIsVerified) {
  for (const Argv& a : {Argv{"scatter", "--ranks", "64", "--min", "1", "--max", "1"},
                        Argv{"broadcast", "--gpus", "2", "--min", "1", "--max", "8"},
                        Argv{"p2p", "--ranks", "2", "--min", "1", "--max", "4"}}) {
    Outcome r = probe(a, "", 60);
    EXPECT_EQ(r.rc, 0) << a[0] << ": " << r.err;
    EXPECT_EQ(r.err.find("runtime error"), std::string::npos) << r.err;
  }
}

}  // namespace
