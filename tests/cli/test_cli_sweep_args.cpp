// tests/cli/test_cli_sweep_args.cpp - the sweep table's helpers in-process:
// the sizes a --step-factor gives and the time statistics of a row.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "sweep/sweep_inplace.hpp"
#include "sweep/sweep_stats.hpp"
#include "sweep/sweep_table.hpp"

namespace probe {
namespace {

using Sizes = std::vector<uint64_t>;

TEST(SweepSizes, StepFactor) {
  EXPECT_EQ(sweep_sizes(1024, 65536, 2), (Sizes{1024, 2048, 4096, 8192, 16384, 32768, 65536}));
  EXPECT_EQ(sweep_sizes(1024, 65536, 4), (Sizes{1024, 4096, 16384, 65536}));
  EXPECT_EQ(sweep_sizes(1000, 99999, 10), (Sizes{1000, 10000}));  // the next would pass --max
  EXPECT_EQ(sweep_sizes(7, 7, 3), (Sizes{7}));
  // Near 2^64 the next size would wrap: the sweep stops instead of looping.
  const uint64_t top = ~uint64_t(0);
  EXPECT_EQ(sweep_sizes(top / 2, top, 2), (Sizes{top / 2, top / 2 * 2}));
  EXPECT_EQ(sweep_sizes(top / 3 + 1, top, 1024), (Sizes{top / 3 + 1}));
}

TEST(SweepStats, MeanMinMaxStddev) {
  const TimeStats s = time_stats({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_DOUBLE_EQ(s.mean, 5);
  EXPECT_DOUBLE_EQ(s.min, 2);
  EXPECT_DOUBLE_EQ(s.max, 9);
  EXPECT_DOUBLE_EQ(s.stddev, 2);  // population standard deviation
  const TimeStats one = time_stats({3.5});
  EXPECT_DOUBLE_EQ(one.stddev, 0);
  EXPECT_DOUBLE_EQ(one.min, 3.5);
  const TimeStats none = time_stats({});
  EXPECT_DOUBLE_EQ(none.mean, 0);
}

std::string printed(void (*fn)(FILE*, const std::vector<SweepRow>&), const std::vector<SweepRow>& rows) {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  fn(f, rows);
  std::fclose(f);
  std::string s(buf, len);
  std::free(buf);
  return s;
}

TEST(SweepTable, SummaryCountsWrongBytesAndAveragesBusbw) {
  std::vector<SweepRow> rows(2);
  rows[0].busbw = 1.0;
  rows[1].busbw = 3.0;
  EXPECT_EQ(printed(print_summary, rows), "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 2.000\n#\n");
  rows[1].wrong = 17;
  rows[0].wrong = 3;
  EXPECT_EQ(printed(print_summary, rows), "# Out of bounds values : 20 FAILED\n# Avg bus bandwidth    : 2.000\n#\n");
  EXPECT_EQ(printed(print_summary, {}), "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.000\n#\n");
}

conccl::CollectiveArgs args_of(conccl::CollOp op, int n, uint64_t chunk) {
  conccl::CollectiveArgs a;
  a.op = op;
  a.bytes = chunk;
  a.root = 1;
  for (int r = 0; r < n; ++r) {
    a.send.push_back({.va = 0x1000000u * (r + 1), .size = 4u * chunk});
    a.recv.push_back({.va = 0x8000000u * (r + 1), .size = 4u * chunk});
  }
  return a;
}

TEST(SweepInPlace, SourcesAreViewsOfTheDestinations) {
  std::optional<InPlace> ag = in_place_of(args_of(conccl::CollOp::all_gather, 3, 100), 3);
  ASSERT_TRUE(ag);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ag->args.send[r].va, ag->args.recv[r].va + 100u * r);
    EXPECT_EQ(ag->args.send[r].size, 100u);
  }
  ASSERT_EQ(ag->sources.size(), 3u);
  EXPECT_EQ(ag->sources[2].src_rank, 2);
  EXPECT_EQ(ag->sources[2].at.va, ag->args.recv[2].va + 200u);

  std::optional<InPlace> g = in_place_of(args_of(conccl::CollOp::gather, 3, 100), 3);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->args.send[1].va, g->args.recv[1].va + 100u);  // root 1's chunk of its recv
  EXPECT_EQ(g->args.send[0].va, 0x1000000u);                 // the others send from their own buffers

  std::optional<InPlace> b = in_place_of(args_of(conccl::CollOp::broadcast, 3, 100), 3);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->args.send[1].va, b->args.recv[1].va);

  std::optional<InPlace> s = in_place_of(args_of(conccl::CollOp::scatter, 3, 100), 3);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->args.recv[1].va, s->args.send[1].va + 100u);
  EXPECT_FALSE(s->poison[1]);  // the root's recv is its source: not poisoned
  EXPECT_TRUE(s->poison[0]);
  EXPECT_TRUE(s->sources.empty());

  EXPECT_FALSE(in_place_of(args_of(conccl::CollOp::all_to_all, 3, 100), 3));
  EXPECT_FALSE(in_place_of(args_of(conccl::CollOp::p2p, 3, 100), 3));
}

}  // namespace
}  // namespace probe
