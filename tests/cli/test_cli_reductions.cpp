// tests/cli/test_cli_reductions.cpp - sdma-probe reducescatter, allreduce and
// reduce on the emulator: nccl-tests' table with the redop and root columns
// filled, busbw by each op's factor, every result element checked against
// the host reduction (#wrong 0), the JSON, -d/-o (short and long), their
// errors naming the accepted values, the staging in pieces, host-ordered
// calls, and one run with a process per rank through windows.
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "json_check.hpp"
#include "probe_runner.hpp"

namespace {

using namespace probe_test;

using Argv = std::vector<std::string>;

// Columns of a reduction row: size count type redop root variant eng iters
// time min max stddev algbw busbw #wrong | time algbw busbw #wrong.
constexpr size_t kColumns = 19;
constexpr size_t kTime = 8, kAlgbw = 12, kBusbw = 13, kWrong = 14, kIpTime = 15, kIpAlgbw = 16, kIpBusbw = 17,
                 kIpWrong = 18;

double busbw_factor(const std::string& op, int n) {
  if (op == "reducescatter") return double(n - 1) / n;
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  return 1.0;
}

size_t elem_size(const std::string& type) {
  if (type == "uint8") return 1;
  if (type == "half" || type == "bfloat16") return 2;
  if (type == "int64") return 8;
  return 4;
}

struct Case {
  std::string op, type, redop;
};

// Every op on 2 and 4 ranks, a different type and operator each time: the
// table, busbw = algbw x the op's factor, #wrong 0 in both forms, the JSON.
TEST(CliReductions, EveryOpOnTwoAndFourRanksVerifies) {
  const std::vector<Case> cases = {
      {"reducescatter", "float", "sum"}, {"reducescatter", "bfloat16", "prod"}, {"allreduce", "int32", "max"},
      {"allreduce", "half", "avg"},      {"reduce", "int64", "min"},           {"reduce", "uint8", "sum"},
  };
  int k = 0;
  for (int n : {2, 4}) {
    for (const Case& c : cases) {
      const std::string what = c.op + " " + c.type + " " + c.redop + " on " + std::to_string(n) + " ranks";
      SCOPED_TRACE(what);
      const std::string json = scratch() + "/red_" + std::to_string(k++) + ".json";
      // 1K, 16K, 256K: allreduce switches to reduce-scatter + all-gather at 256 KiB per rank.
      Argv argv = {c.op, "--ranks", std::to_string(n), "--min", "1K", "--max", "256K", "--step-factor", "16",
                   "--json", json};
      // Long and short spellings of the type and operator, alternately.
      if (k % 2) argv.insert(argv.end(), {"--dtype", c.type, "--op", c.redop});
      else argv.insert(argv.end(), {"-d", c.type, "-o" + c.redop});
      const bool reduce = c.op == "reduce";
      if (reduce) argv.insert(argv.end(), {"-r", std::to_string(n - 1)});
      Outcome r = probe(argv, "", 120);
      ASSERT_EQ(r.rc, 0) << r.err;
      for (const std::string& text :
           {"# sdma-probe " + c.op + ": " + std::to_string(n) + " ranks", "#  reduction: op " + c.redop + ", type " + c.type,
            std::string("#  ordering: a HostStream"), std::string("redop root  variant"),
            std::string("# Out of bounds values : 0 OK\n")})
        EXPECT_TRUE(contains(r.out, text)) << text << " in " << r.out;
      const std::vector<std::string> rows = data_rows(r.out);
      ASSERT_EQ(rows.size(), 3u) << r.out;
      const size_t es = elem_size(c.type);
      for (size_t i = 0; i < rows.size(); ++i) {
        const std::vector<std::string> f = fields(rows[i]);
        ASSERT_EQ(f.size(), kColumns) << rows[i];
        const uint64_t asked = 1024ull << (4 * i);
        const uint64_t size = std::stoull(f[0]);
        // Rounded down to whole elements (reducescatter: n x elements).
        const uint64_t unit = c.op == "reducescatter" ? n * es : es;
        EXPECT_EQ(size, asked / unit * unit) << rows[i];
        EXPECT_EQ(std::stoull(f[1]), size / es) << rows[i];
        EXPECT_EQ(f[2], c.type) << rows[i];
        EXPECT_EQ(f[3], c.redop) << rows[i];
        EXPECT_EQ(f[4], reduce ? std::to_string(n - 1) : "-1") << rows[i];
        const std::string variant = c.op == "reducescatter" ? "a2a"
                                    : reduce                ? "gather"
                                    : i == 2                ? "rs+ag"
                                                            : "oneshot";
        EXPECT_EQ(f[5], variant) << rows[i];
        EXPECT_EQ(f[kWrong], "0") << rows[i];
        EXPECT_EQ(f[kIpWrong], "0") << rows[i];
        for (size_t a : {kAlgbw, kIpAlgbw}) {
          // algbw is the size over the time (GB/s, printed to 3 decimals: a
          // slow 1 KiB call on a loaded machine prints 0.000).
          const double time_us = std::stod(f[a == kAlgbw ? kTime : kIpTime]);
          const double algbw = std::stod(f[a]), busbw = std::stod(f[a + 1]);
          EXPECT_GT(time_us, 0) << rows[i];
          EXPECT_NEAR(algbw, double(size) / time_us / 1e3, 0.0006 + algbw * 0.002) << rows[i];
          EXPECT_NEAR(busbw, algbw * busbw_factor(c.op, n), 0.0015 + algbw * 0.002) << rows[i];
        }
      }
      const std::string j = read_file(json);
      EXPECT_TRUE(probe_test::is_valid_json(j)) << j;
      for (const std::string& key :
           {"\"op\": \"" + c.op + "\"", "\"redop\": \"" + c.redop + "\"", "\"dtype\": \"" + c.type + "\"",
            std::string("\"root\": ") + (reduce ? std::to_string(n - 1) : "null") + ", \"ordering\": \"hoststream\"",
            "\"ranks\": " + std::to_string(n), std::string("\"staging_bytes\": 67108864"),
            "\"type\": \"" + c.type + "\", \"redop\": \"" + c.redop + "\", \"root\": " + (reduce ? std::to_string(n - 1) : "-1") +
                ", \"pieces\": 1",
            std::string("\"in_place\": {\"time_us\": "), std::string("\"interrupted\": null")})
        EXPECT_TRUE(contains(j, key)) << key << " in " << j;
      EXPECT_EQ(count_of(j, "\"verified\": true"), 3u) << j;
      EXPECT_EQ(count_of(j, "\"wrong_elements\": 0"), 6u) << j;  // each row, out of place and in place
      EXPECT_FALSE(contains(j, "wrong_bytes")) << j;
    }
  }
}

// A staging smaller than the data: reducescatter runs in pieces (n gathers
// and a reduce per piece), every op still exact; the JSON counts the pieces.
TEST(CliReductions, SmallStagingRunsInPieces) {
  for (const char* op : {"reducescatter", "allreduce", "reduce"}) {
    SCOPED_TRACE(op);
    const std::string json = scratch() + "/red_pieces_" + op + ".json";
    Outcome r = probe({op, "--ranks", "3", "--min", "64K", "--max", "64K", "--staging", "4K", "-d", "bf16", "--json",
                       json},
                      "", 120);
    ASSERT_EQ(r.rc, 0) << r.err;
    const std::vector<std::string> rows = data_rows(r.out);
    ASSERT_EQ(rows.size(), 1u) << r.out;
    const std::vector<std::string> f = fields(rows[0]);
    ASSERT_EQ(f.size(), kColumns) << rows[0];
    EXPECT_EQ(f[2], "bfloat16") << rows[0];  // f32, bf16, ...: the short forms name the type
    EXPECT_EQ(f[kWrong], "0") << rows[0];
    EXPECT_EQ(f[kIpWrong], "0") << rows[0];
    if (std::string(op) == "reducescatter") {
      EXPECT_EQ(f[5], "a2a") << rows[0];  // in pieces: a strided all-to-all each
    }
    const std::string j = read_file(json);
    EXPECT_TRUE(contains(j, "\"staging_bytes\": 4096")) << j;
    EXPECT_FALSE(contains(j, "\"pieces\": 1,")) << j;
    EXPECT_FALSE(contains(j, "\"pieces\": 0,")) << j;
  }
}

// --no-stream: host-ordered calls (Device::reduce_now), still exact.
TEST(CliReductions, HostOrderedCalls) {
  Outcome r = probe({"allreduce", "--ranks", "2", "--max", "4K", "--no-stream", "--json"}, "", 60);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(probe_test::is_valid_json(r.out)) << r.out;
  EXPECT_TRUE(contains(r.out, "\"ordering\": \"host\"")) << r.out;
  EXPECT_FALSE(contains(r.out, "\"verified\": false")) << r.out;
  Outcome t = probe({"reduce", "--ranks", "2", "--max", "2K", "--no-stream"}, "", 60);
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_TRUE(contains(t.out, "#  ordering: host-ordered")) << t.out;
  EXPECT_TRUE(contains(t.out, "(--no-stream)")) << t.out;
}

// Bad -d/-o values name every accepted one; flags that do not apply are
// refused, not ignored.
TEST(CliReductions, BadTypeOperatorAndRootAreUsageErrors) {
  for (const Argv& form : {Argv{"-d", "double"}, Argv{"--dtype", "double"}, Argv{"-ddouble"}}) {
    Argv argv = {"allreduce", "--ranks", "2", "--max", "4K"};
    argv.insert(argv.end(), form.begin(), form.end());
    Outcome r = probe(argv, "", 30);
    EXPECT_TRUE(usage_error(r, "unknown -d/--dtype 'double': give one of float, bfloat16, half, int32, int64, uint8"));
    EXPECT_TRUE(data_rows(r.out).empty()) << r.out;
  }
  for (const Argv& form : {Argv{"-o", "mean"}, Argv{"--op", "mean"}, Argv{"--op=mean"}}) {
    Argv argv = {"reducescatter", "--ranks", "2", "--max", "4K"};
    argv.insert(argv.end(), form.begin(), form.end());
    EXPECT_TRUE(usage_error(probe(argv, "", 30), "unknown -o/--op 'mean': give one of sum, prod, min, max, avg"))
        << argv.back();
  }
  EXPECT_TRUE(usage_error(probe({"allreduce", "-d"}, "", 30), "-d (--dtype) needs a value (TYPE)"));
  EXPECT_TRUE(
      usage_error(probe({"allreduce", "-d", "float", "--dtype", "half"}, "", 30), "--dtype given more than once"));
  Outcome x = probe({"allreduce", "-x", "1"}, "", 30);
  EXPECT_TRUE(usage_error(x, "unknown option '-x'"));
  EXPECT_TRUE(contains(x.err, "-o (--op)")) << x.err;
  EXPECT_TRUE(usage_error(probe({"allreduce", "--ranks", "2", "--max", "4K", "--root", "1"}, "", 30),
                          "--root does not apply to allreduce"));
  for (const char* ranks : {"--ranks", "--procs"})
    EXPECT_TRUE(usage_error(probe({"reduce", ranks, "2", "--max", "4K", "-r", "2"}, "", 30),
                            "--root 2 is out of range: give a rank 0..1"))
        << ranks;
  EXPECT_TRUE(usage_error(probe({"allreduce", "--ranks", "4", "--max", "4K", "--staging", "8"}, "", 30),
                          "give at least 16"));
  EXPECT_TRUE(usage_error(probe({"allreduce", "--ranks", "2", "--max", "4K", "--no-windows"}, "", 30),
                          "--no-windows applies to --procs N"));
  EXPECT_TRUE(usage_error(probe({"allreduce", "--ranks", "2", "--max", "4K", "--variant", "pcpy"}, "", 30),
                          "unknown flag --variant"));
}

// The copy collectives take the same short flags (nccl-tests' -b -e -f -n -w -d).
TEST(CliReductions, ShortFlagsWorkForTheCopyCollectivesToo) {
  Outcome r = probe({"allgather", "--ranks", "2", "-b", "1K", "-e", "4K", "-f", "4", "-n", "3", "-w", "1", "-d", "float"},
                    "", 60);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<std::string> rows = data_rows(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;  // 1K, 4K
  EXPECT_EQ(fields(rows[1])[0], "4096") << rows[1];
  EXPECT_EQ(fields(rows[1])[2], "float") << rows[1];
  EXPECT_EQ(fields(rows[1])[5], "3") << rows[1];  // iters
  Outcome help = probe({"help", "allreduce"});
  EXPECT_EQ(help.rc, 0);
  for (const char* text : {"--dtype TYPE", "(short: -d)", "--op OP", "(short: -o)", "busbw = algbw x",
                           "2(n-1)/n", "reduce_on_host", "PTX kernel"})
    EXPECT_TRUE(contains(help.out, text)) << text << " in " << help.out;
  Outcome top = probe({"--help"});
  for (const char* cmd : {"reducescatter", "allreduce", "reduce "}) EXPECT_TRUE(contains(top.out, cmd)) << cmd;
}

// nccl-tests' -g (GPUs, each a rank) is --ranks, for the copy collectives and
// the reductions alike; given twice it is refused.
TEST(CliReductions, DashGIsTheRankCount) {
  for (const char* op : {"allgather", "reducescatter"}) {
    Outcome r = probe({op, "-g", "3", "-b", "1K", "-e", "1K", "-n", "2", "-w", "1"}, "", 60);
    ASSERT_EQ(r.rc, 0) << op << ": " << r.err;
    EXPECT_TRUE(contains(r.out, "# sdma-probe " + std::string(op) + ": 3 ranks on")) << r.out;
    ASSERT_EQ(data_rows(r.out).size(), 1u) << r.out;
    EXPECT_EQ(fields(data_rows(r.out)[0]).back(), "0") << r.out;  // in place: 0 wrong
  }
  EXPECT_TRUE(usage_error(probe({"allgather", "-g", "2", "--ranks", "2"}, "", 30), "--ranks given more than once"));
  EXPECT_TRUE(contains(probe({"help", "allgather"}).out, "(short: -g)"));
}

// A run too big for the emulated GPU is refused before allocating, naming
// real flags.
TEST(CliReductions, MemoryRefusalNamesRealFlags) {
  Outcome r = probe({"allreduce", "--gpus", "2", "--ranks", "4", "--min", "2G", "--max", "2G"}, "", 30);
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_TRUE(contains(r.err, "GPU 0")) << r.err;
  std::set<std::string> known;
  for (const std::string& f : probe_test::flag_names(probe({"help", "allreduce"}).out)) known.insert(f);
  const std::vector<std::string> named = probe_test::flag_names(r.err);
  EXPECT_FALSE(named.empty()) << r.err;
  for (const std::string& f : named) EXPECT_TRUE(known.count(f)) << f << " in " << r.err;
}

// One process per rank: send and receive buffers in one window per rank, so
// no message between the ranks per timed call; every element verified by
// its rank; rank 0 alone prints and writes the JSON.
TEST(CliReductions, TwoProcessesThroughWindows) {
  const std::string json = scratch() + "/red_procs.json";
  Outcome r = probe({"allreduce", "--procs", "2", "--min", "1K", "--max", "256K", "--step-factor", "16", "-d", "half",
                     "-o", "sum", "--json", json},
                    "", 180);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<std::string> rows = data_rows(r.out);
  ASSERT_EQ(rows.size(), 3u) << r.out;  // one table, from rank 0
  for (const std::string& row : rows) {
    const std::vector<std::string> f = fields(row);
    ASSERT_EQ(f.size(), kColumns) << row;
    EXPECT_EQ(f[kWrong], "0") << row;
    EXPECT_EQ(f[kIpWrong], "0") << row;
  }
  EXPECT_TRUE(contains(r.out, "#  processes: 2, one per rank; buffers: send and recv in one window per rank")) << r.out;
  EXPECT_TRUE(contains(r.out, "# Bootstrap msgs/call  : 0.00")) << r.out;
  const std::string j = read_file(json);
  EXPECT_TRUE(probe_test::is_valid_json(j)) << j;
  EXPECT_TRUE(contains(j, "\"windows\": true, \"bootstrap_messages_per_call\": 0.000}")) << j;
  EXPECT_EQ(count_of(j, "\"verified\": true"), 3u) << j;
  EXPECT_EQ(count_of(j, "\"wrong_elements\": 0"), 6u) << j;
  EXPECT_TRUE(contains(j, "\"variant\": \"rs+ag\"")) << j;
}

}  // namespace
