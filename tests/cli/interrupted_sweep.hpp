// tests/cli/interrupted_sweep.hpp - what a sweep that a signal ends must show,
// with one process (test_cli_signals.cpp) or a process per rank
// (test_cli_procs.cpp).
#pragma once

#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "json_check.hpp"
#include "probe_runner.hpp"

namespace probe_test {

// Sends `sig` (named `name`) to a started sweep of `sizes` sizes that has
// written its first row, and waits for its end (60 s at most). It must end
// by itself within `within_s`, exit `want_rc` and keep what it measured: at
// least one row and not all of them, the signal and the average on stdout,
// and the JSON at `json` naming the signal with one record a row. The
// outcome, for the caller's own checks.
inline Outcome interrupt_and_expect_rows(const Started& s, int sig, const char* name, int want_rc, double within_s,
                                         size_t sizes, const std::string& json) {
  const auto sent = std::chrono::steady_clock::now();
  kill(s.pid, sig);
  Outcome r = finish(s, 60);
  const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  EXPECT_FALSE(r.signaled) << name << " killed the process instead of ending the sweep";
  EXPECT_EQ(r.rc, want_rc) << r.err;
  EXPECT_LT(after, within_s) << "the sweep did not stop between iterations";
  const std::vector<std::string> rows = data_rows(r.out);
  EXPECT_GE(rows.size(), 1u) << r.out;
  EXPECT_LT(rows.size(), sizes) << "the whole sweep ran: " << r.out;
  EXPECT_TRUE(contains(r.out, std::string("# interrupted by ") + name)) << r.out;
  EXPECT_TRUE(contains(r.out, "# Avg bus bandwidth")) << r.out;
  const std::string j = read_file(json);
  EXPECT_TRUE(is_valid_json(j)) << j;
  EXPECT_TRUE(contains(j, std::string("\"interrupted\": \"") + name + "\"")) << j;
  EXPECT_EQ(count_of(j, "\"size\": "), rows.size()) << j;  // the finished rows, no more
  return r;
}

}  // namespace probe_test
