// tests/cli/test_cli_property.cpp - random argument vectors never crash or
// hang sdma-probe.
//
// Each vector is a random subcommand (from `sdma-probe --help`) with random
// flags from its real flag set (from `sdma-probe help CMD`), given values
// that are hostile (huge, negative, wrapping, garbage, empty) or plausible
// and small, sometimes as --flag=value, sometimes with shared flags before
// the command or stray arguments. Properties: the process exits by itself
// (no signal: no crash, no sanitizer abort), within a bound, with an exit code
// documented in docs/sdma-probe.md (0..5), and says something on stderr when
// it fails. Sizes stay small and a deadline is given where none is, so the
// run stays fast; the seed is fixed, so a failure reproduces.
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "probe_runner.hpp"

namespace {

using probe_test::Outcome;
using probe_test::probe;

struct Flag {
  std::string name;  // "--gpus"
  bool takes_value = false;
};

struct CommandFlags {
  std::string name;
  std::vector<Flag> flags;
};

// The commands and flags as the binary documents them: `--help` lists the
// commands as "  NAME  summary" lines; `help NAME` lists flags as
// "  --flag VALUE  help" or "  --switch  help".
std::vector<CommandFlags> discover() {
  std::vector<CommandFlags> out;
  const std::string usage = probe({"--help"}).out;
  std::istringstream lines(usage.substr(usage.find("commands:\n") + 10));
  std::string line;
  while (std::getline(lines, line) && line.rfind("  ", 0) == 0) {
    const size_t end = line.find(' ', 2);
    out.push_back({line.substr(2, end - 2), {}});
  }
  for (CommandFlags& c : out) {
    std::istringstream help(probe({"help", c.name}).out);
    while (std::getline(help, line)) {
      if (line.rfind("  --", 0) != 0) continue;
      const size_t name_end = line.find(' ', 2);
      if (name_end == std::string::npos) continue;
      // One space then a placeholder: a value flag; two spaces: a switch.
      const bool takes_value = line.compare(name_end, 2, "  ") != 0;
      c.flags.push_back({line.substr(2, name_end - 2), takes_value});
    }
  }
  return out;
}

// Numbers that fit 64 bits (so they pass a plain uint64/int64 parse) but are
// huge, negative, or wrap when narrowed.
const std::vector<std::string> kHugeNumbers = {
    "0", "-1", "4294967295", "4294967296", "4294967297", "2147483648", "-2147483649", "9223372036854775807",
    "9223372036854775808", "18446744073709551615", "0xFFFFFFFFFFFFFFFF", "0x100000000", "-0x8000000000000000",
    "16777215T", "a=18446744073709551615", "a=4K@4294967296", "a+0xFFFFFFFFFFFFFFF0:16", "a:18446744073709551615"};
// Text no parser should accept.
const std::vector<std::string> kGarbage = {
    "18446744073709551616", "99999999999999999999999", "-0", "0x", "", " ", "abc", "1e3", "1.5", "nan",
    "inf", "--", "-", "=", "a=", "=4K", "a=4K@-1", "a:0", "\x01\x7f", "%s%n%s", std::string(300, '9')};

std::string hostile(std::mt19937_64& rng) {
  return rng() % 3 ? kHugeNumbers[rng() % kHugeNumbers.size()] : kGarbage[rng() % kGarbage.size()];
}

// A plausible value for a flag, small enough to run quickly.
std::string plausible(const std::string& flag, std::mt19937_64& rng) {
  auto pick = [&](std::vector<std::string> v) { return v[rng() % v.size()]; };
  if (flag == "--backend") return pick({"emu", "emu", "kfd", "nv", "cuda"});
  if (flag == "--preset") return pick({"mi300x", "small", "h200", "nope"});
  if (flag == "--timeout-ms") return pick({"1", "50", "500", "2000", "0x10"});
  if (flag == "--gen" || flag == "--sdma-gen") return pick({"4", "4.4.2", "5", "5.2", "6", "7", "hopper-ce", "9"});
  if (flag == "--gfx") return pick({"gfx942", "gfx90a", "gfx1100", "gfx0"});
  if (flag == "--min" || flag == "--max" || flag == "--bytes") return pick({"1", "4", "1K", "4K", "16K", "0x100"});
  // (64 GPUs of 16 emulated engines are 1024 engine threads: correct, but slow on a small machine.)
  if (flag == "--gpus") return pick({"1", "2", "4", "8"});
  if (flag == "--engines") return pick({"1", "2", "4", "32"});
  if (flag == "--ranks") return pick({"1", "2", "3", "8", "64"});
  if (flag == "--procs") return pick({"0", "1", "2", "3", "2", "65"});
  if (flag == "--rank") return pick({"0", "1", "-1", "9"});
  if (flag == "--unique-id") return pick({"conccl-uid-00112233445566778899aabbccddeeff", "nope", ""});
  if (flag == "--iters" || flag == "--warmup") return pick({"0", "1", "2", "3"});
  if (flag == "--dtype") return pick({"float", "half", "bfloat16", "int32", "int64", "uint8", "bf16", "double"});
  if (flag == "--op") return pick({"sum", "prod", "min", "max", "avg", "mean"});
  if (flag == "--staging") return pick({"4K", "64K", "1M", "1"});
  if (flag == "--variant") return pick({"auto", "pcpy", "bcst", "b2b", "swap", "fanout", "chain", "zzz"});
  if (flag == "--inject") return pick({"stall", "lost-signal", "fire"});
  if (flag == "--buffer") return pick({"a=4K", "b=4K@host", "a=64@1", "b=4K", "a=1M@7", "a=4K@63"});
  if (flag == "--fill") return pick({"a=0xdeadbeef", "b=1", "a=0x100000000", "c=1"});
  if (flag == "--dump") return pick({"a:16", "b+4:8", "a+4096:4", "b:4096", "c:4"});
  if (flag == "--json-file") return pick({"/dev/null", "/nonexistent/dir/x.json"});
  return pick({"0", "1", "2", "3", "7", "15"});
}

const std::vector<std::string> kStdin = {
    "", "trap\n", "fence addr=$a value=1\n", "copy src=$a dst=$b bytes=64\n", "nop count=3\n",
    "00000006 00001234\n", "5e00000a 00600004 00007f00 ffffffff ffffffff 00000000 00000000 00000000\n",
    "raw data=0x00000006,0x1\n", "zz\x01\x02\n", "write dst=$b data=1,2,3\n"};

bool is_sweep(const std::string& c) {
  for (const char* s : {"allgather", "alltoall", "broadcast", "gather", "scatter", "p2p", "reducescatter", "allreduce",
                        "reduce"})
    if (c == s) return true;
  return false;
}

bool has(const std::vector<std::string>& v, const std::string& flag) {
  for (const std::string& w : v)
    if (w == flag || w.rfind(flag + "=", 0) == 0) return true;
  return false;
}

std::string show(const std::vector<std::string>& argv) {
  std::string s = "sdma-probe";
  for (const std::string& w : argv) s += " '" + w + "'";
  return s;
}

TEST(Property, RandomArgumentVectorsNeverCrashOrHang) {
  const std::vector<CommandFlags> commands = discover();
  ASSERT_GE(commands.size(), 10u);
  std::mt19937_64 rng(20250915);
  const std::vector<Flag> shared = {{"--backend", true}, {"--preset", true}, {"--json", false}, {"--timeout-ms", true}};
  int by_code[6] = {};
  for (int i = 0; i < 200; ++i) {
    const CommandFlags& c = commands[rng() % commands.size()];
    std::vector<std::string> argv;
    if (rng() % 8 == 0) {  // a shared flag before the command
      const Flag& f = shared[rng() % shared.size()];
      argv.push_back(f.name);
      if (f.takes_value) argv.push_back(plausible(f.name, rng));
    }
    argv.push_back(c.name);
    // One to four flags, mostly the command's own (its help lists the shared
    // ones last): fewer flags reach further past the parser.
    const int n = 1 + static_cast<int>(rng() % 4);
    const size_t own = c.flags.size() > shared.size() ? c.flags.size() - shared.size() : c.flags.size();
    for (int k = 0; k < n && !c.flags.empty(); ++k) {
      const Flag& f = c.flags[rng() % 4 ? rng() % own : rng() % c.flags.size()];
      // --rank and --unique-id are what --procs hands its ranks: given alone
      // they are always usage errors, and crowd out the vectors that run.
      if ((f.name == "--rank" || f.name == "--unique-id") && rng() % 8) continue;
      if (!f.takes_value) {
        argv.push_back(f.name);
        continue;
      }
      const std::string v = rng() % 2 ? hostile(rng) : plausible(f.name, rng);
      if (rng() % 4 == 0) {
        argv.push_back(f.name + "=" + v);
      } else {
        argv.push_back(f.name);
        argv.push_back(v);
      }
    }
    if (rng() % 10 == 0) argv.push_back(rng() % 2 ? "-" : hostile(rng));
    // Small and bounded: sweeps stop at 16K, waits at 2 s.
    if (is_sweep(c.name) && !has(argv, "--max")) argv.insert(argv.end(), {"--max", "16K"});
    if (!has(argv, "--timeout-ms")) argv.insert(argv.end(), {"--timeout-ms", "2000"});

    // A hang is still running after 60 s. The heaviest vectors (selftest
    // --all-peers: every engine into every peer of 8 emulated GPUs) took
    // 19.7 s on a loaded two-core machine, so 15 s was a load test.
    const Outcome r = probe(argv, kStdin[rng() % kStdin.size()], 60.0 * probe_test::kSlowdown);
    SCOPED_TRACE(show(argv));
    EXPECT_FALSE(r.timed_out) << "hung: still running after 60 s";
    EXPECT_FALSE(r.signaled) << "killed by signal " << r.rc - 128 << "\n" << r.err.substr(0, 2000);
    EXPECT_TRUE(r.rc >= 0 && r.rc <= 5) << "exit " << r.rc << " is not a documented exit code\n" << r.err;
    // Under -DCONCCL_SANITIZE=address, UBSan exits 1 (which is also "verification failed").
    for (const char* s : {"runtime error:", "AddressSanitizer", "LeakSanitizer"})
      EXPECT_EQ(r.err.find(s), std::string::npos) << r.err.substr(0, 2000);
    if (r.rc != 0 && r.rc <= 5) {
      EXPECT_FALSE(r.err.empty()) << "exit " << r.rc << " without a message";
    }
    EXPECT_LT(r.seconds, 45.0 * probe_test::kSlowdown) << "took " << r.seconds << " s";
    if (r.rc >= 0 && r.rc <= 5) ++by_code[static_cast<size_t>(r.rc)];
  }
  // The vectors must reach past the parser, not only into usage errors.
  std::printf("exit codes of 200 random vectors: 0:%d 1:%d 2:%d 3:%d 4:%d 5:%d\n", by_code[0], by_code[1],
              by_code[2], by_code[3], by_code[4], by_code[5]);
  EXPECT_GE(by_code[0], 20);
}

}  // namespace
