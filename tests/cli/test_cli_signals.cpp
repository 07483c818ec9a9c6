// tests/cli/test_cli_signals.cpp - SIGINT/SIGTERM during a collective sweep:
// the sweep stops between iterations, writes the finished rows (table and
// valid JSON) and exits 130 / 143.
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "interrupted_sweep.hpp"
#include "json_check.hpp"
#include "probe_runner.hpp"

namespace {

using namespace probe_test;

// Starts a sweep that would run for minutes (2000 timed iterations per size
// up to 256 MiB), waits for its first row, sends `sig`, and checks the end.
void interrupt_sweep(int sig, int want_rc, const char* name) {
  const std::string json = scratch() + "/interrupted_" + name + ".json";
  // ThreadSanitizer fills memory slowly (a 64 MiB poison took over 10 s): 4K..16M there, 13 sizes.
  const bool tsan = conccl::util::kThreadSanitizer;
  Started s = start({"p2p", "--ranks", "2", "--min", "4K", "--max", tsan ? "16M" : "256M", "--iters",
                     std::to_string(2000 / kSlowdown), "--json", json});
  ASSERT_GT(s.pid, 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60 * kSlowdown);
  while (data_rows(read_file(s.out_path)).empty() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_FALSE(data_rows(read_file(s.out_path)).empty()) << "no row within " << 60 * kSlowdown << " s";
  // It ends within 10 s; 4K..256M is 17 sizes.
  const Outcome r = interrupt_and_expect_rows(s, sig, name, want_rc, 10.0 * kSlowdown, tsan ? 13 : 17, json);
  EXPECT_TRUE(contains(r.err, std::string("interrupted by ") + name)) << r.err;
  const std::string j = read_file(json);
  EXPECT_TRUE(contains(j, "\"size\": 4096,")) << j;
}

TEST(Signals, SigintEndsTheSweepWithItsRows) { interrupt_sweep(SIGINT, 130, "SIGINT"); }
TEST(Signals, SigtermEndsTheSweepWithItsRows) { interrupt_sweep(SIGTERM, 143, "SIGTERM"); }

TEST(Signals, JsonCheckerIsStrict) {
  EXPECT_TRUE(is_valid_json("{\"a\": [1, -2.5e3, true, null, \"x\\n\"]}\n"));
  for (const char* bad : {"{\"a\": inf}", "{\"a\": 1,}", "[1 2]", "{\"a\": nan}", "", "{\"a\": 01}"})
    EXPECT_FALSE(is_valid_json(bad)) << bad;
}

}  // namespace
