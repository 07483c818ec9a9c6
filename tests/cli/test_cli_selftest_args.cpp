// tests/cli/test_cli_selftest_args.cpp - selftest's judgement in-process:
// which engines are slow (like with like), verdicts, exit codes, the first
// difference of a comparison, and the report's JSON.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "json_check.hpp"
#include "selftest/selftest_memory.hpp"
#include "selftest/selftest_report.hpp"

namespace probe::selftest {
namespace {

EngineReport engine(int gpu, int id, const std::string& kind, double weight, double gbps) {
  EngineReport e;
  e.gpu = gpu;
  e.engine = id;
  e.kind = kind;
  e.weight = weight;
  e.gbps = gbps;
  e.cells.fill(Cell::ok);
  e.placement = "ok";
  return e;
}

TEST(SelftestSlow, BelowHalfTheMedianOfLikeEngines) {
  std::vector<EngineReport> v = {engine(0, 2, "xgmi", 1, 50), engine(0, 3, "xgmi", 1, 52), engine(0, 4, "xgmi", 1, 48),
                                 engine(0, 5, "xgmi", 1, 20), engine(0, 0, "pcie", 1, 10), engine(0, 1, "pcie", 1, 11)};
  const std::vector<size_t> marked = mark_slow(v, 0.5);
  ASSERT_EQ(marked, (std::vector<size_t>{3}));
  EXPECT_TRUE(v[3].slow);
  EXPECT_DOUBLE_EQ(v[3].group_median_gbps, 50);  // median of the others: 48, 50, 52
  EXPECT_EQ(v[3].group_size, 4u);
  // PCIe engines are not held to xGMI engines' bandwidth.
  EXPECT_FALSE(v[4].slow);
  EXPECT_EQ(v[3].verdict(), Verdict::slow);
  EXPECT_EQ(selftest_exit_code(v), ExitCode::verify_failed);
}

TEST(SelftestSlow, NvidiaEnginesAreComparedOnlyWithEnginesOfTheirPceCount) {
  // LCE4 has 12 PCEs, LCE2/3 have 2: LCE2 at a sixth of LCE4 is not slow,
  // LCE3 at a fifth of LCE2 is.
  std::vector<EngineReport> v = {engine(0, 2, "ce", 2, 20), engine(0, 3, "ce", 2, 4), engine(0, 4, "ce", 12, 120)};
  EXPECT_EQ(mark_slow(v, 0.5), (std::vector<size_t>{1}));
  EXPECT_FALSE(v[0].slow);
  EXPECT_EQ(v[2].group_size, 1u);  // alone: never judged
  EXPECT_FALSE(v[2].slow);
}

TEST(SelftestSlow, AnEngineIsNotItsOwnReference) {
  // A group of two on a loaded host (seen in CI): the healthy LCE2 slowed to
  // 1.25 GB/s, the slow LCE3 at 0.21. Against a median that counted LCE3
  // itself (0.73) it passed; against its peer it is slow.
  std::vector<EngineReport> v = {engine(0, 2, "ce", 2, 1.25), engine(0, 3, "ce", 2, 0.21)};
  EXPECT_EQ(mark_slow(v, 0.25), (std::vector<size_t>{1}));
  EXPECT_DOUBLE_EQ(v[1].group_median_gbps, 1.25);
  EXPECT_DOUBLE_EQ(v[0].group_median_gbps, 0.21);
  EXPECT_FALSE(v[0].slow);
}

TEST(SelftestSlow, OtherGpusAndUnmeasuredEnginesDoNotCount) {
  std::vector<EngineReport> v = {engine(0, 2, "xgmi", 1, 10), engine(1, 2, "xgmi", 1, 100), engine(0, 3, "xgmi", 1, 0)};
  EXPECT_TRUE(mark_slow(v, 0.5).empty());  // one measured engine per GPU
}

TEST(SelftestVerdict, WorstFindingWinsAndGivesTheExitCode) {
  std::vector<EngineReport> v = {engine(0, 0, "pcie", 1, 10)};
  EXPECT_EQ(v[0].verdict(), Verdict::pass);
  EXPECT_EQ(selftest_exit_code(v), ExitCode::ok);
  v[0].record(Check::atomic, {Cell::skipped, "no atomics", {}});
  EXPECT_EQ(v[0].verdict(), Verdict::pass);  // a skip is not a failure
  v[0].record(Check::fill, {Cell::failed, "byte 3 differs", {}});
  EXPECT_EQ(v[0].verdict(), Verdict::fail);
  EXPECT_FALSE(v[0].stopped());
  v.push_back(engine(0, 1, "pcie", 1, 10));
  v[1].record(Check::poll, {Cell::faulted, "VM fault", {}});
  EXPECT_EQ(selftest_exit_code(v), ExitCode::fault);
  EXPECT_TRUE(v[1].stopped());
  v.push_back(engine(1, 1, "pcie", 1, 10));
  v[2].record(Check::copy, {Cell::hung, "hang: never fetched ...", "never fetched"});
  EXPECT_EQ(v[2].verdict(), Verdict::hang);
  EXPECT_EQ(selftest_exit_code(v), ExitCode::timeout);
}

TEST(SelftestReport, JsonNamesHungFailedAndSlowEngines) {
  std::vector<EngineReport> v = {engine(0, 2, "xgmi", 1, 50), engine(0, 3, "xgmi", 1, 5), engine(0, 4, "xgmi", 1, 0)};
  v[2].record(Check::copy, {Cell::hung, "hang: completion write lost: \"x\"\nqueue 3", "completion write lost"});
  v[0].findings.push_back({"peer 1", Cell::failed, "copy of 65539 bytes: byte 7 differs", {}});
  mark_slow(v, 0.5);
  RunInfo info;
  info.backend = "emu";
  info.preset = "small";
  const std::string j = report_json(info, v);
  EXPECT_TRUE(probe_test::is_valid_json(j)) << j;
  EXPECT_NE(j.find("\"hung\": [\n  {\"gpu\": 0, \"engine\": 4, \"check\": \"copy\", \"hang_kind\": \"completion write lost\""),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"failed\": [\n  {\"gpu\": 0, \"engine\": 2, \"check\": \"peer 1\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"slow\": [\n  {\"gpu\": 0, \"engine\": 3"), std::string::npos) << j;
  EXPECT_NE(j.find("\"exit_code\": 3"), std::string::npos) << j;
  const std::string t = report_table(info, v);
  EXPECT_NE(t.find("gpu 0 engine 4: copy: HANG (completion write lost)\n  hang: completion write lost"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("gpu 0 engine 3: SLOW"), std::string::npos) << t;
}

TEST(SelftestCompare, FirstDifferenceSaysWhereAndWhetherOutsideTheRange) {
  std::vector<uint8_t> want(64 + 10 + 64, 0xAA), got = want;
  EXPECT_EQ(first_difference(got.data(), want.data(), got.size(), 64, 74), "");
  got[64 + 3] = 0x55;
  EXPECT_EQ(first_difference(got.data(), want.data(), got.size(), 64, 74),
            "byte 3 of the range reads 0x55, expected 0xaa; 1 bytes differ");
  got[64 + 3] = 0xAA;
  got[74] = 0;  // one past the end
  EXPECT_NE(first_difference(got.data(), want.data(), got.size(), 64, 74).find("byte 10 of the range (outside it"),
            std::string::npos);
  got[74] = 0xAA;
  got[0] = 0;  // before it
  EXPECT_NE(first_difference(got.data(), want.data(), got.size(), 64, 74).find("byte -64 of the range (outside"),
            std::string::npos);
}

}  // namespace
}  // namespace probe::selftest
