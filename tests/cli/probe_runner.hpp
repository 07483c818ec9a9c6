// tests/cli/probe_runner.hpp - runs the built sdma-probe binary for the CLI
// tests: stdin fed from a file, stdout/stderr captured, exit code (or signal)
// and wall time returned, with an optional time limit.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "util/sanitizers.hpp"

namespace probe_test {

// How many times slower sdma-probe runs in a sanitizer build (the tests and
// sdma-probe are built alike): the few tests whose work or time limits are
// sized for a plain build scale them by it. ThreadSanitizer: a selftest of
// 128 emulated engines took over 120 s, the first row of a 2000-iteration
// sweep over 60 s.
inline constexpr int kSlowdown = conccl::util::kThreadSanitizer ? 8 : conccl::util::kAddressSanitizer ? 2 : 1;

struct Outcome {
  int rc = -1;             // exit status, or 128 + signal number
  bool signaled = false;   // ended by a signal (a crash, or killed at the time limit)
  bool timed_out = false;  // killed because it ran past the time limit
  double seconds = 0;      // wall time
  std::string out, err;
};

// Runs sdma-probe with `args`, `in` on stdin, in the scratch directory. With limit_s > 0 the process
// is killed (SIGKILL) once it has run that long, and timed_out is set.
Outcome probe(const std::vector<std::string>& args, std::string_view in = "", double limit_s = 0);

// A process started by start(): its id and where its output goes.
struct Started {
  int pid = -1;
  std::string out_path, err_path;
  double t0 = 0;  // steady-clock seconds at the start
};
// Starts sdma-probe with `args` (stdin empty) without waiting for it.
Started start(const std::vector<std::string>& args);
// Runs sdma-probe with its stdout opened (for writing) at `stdout_path`, a
// device such as /dev/full; Outcome::out stays empty.
Outcome probe_stdout_to(const std::vector<std::string>& args, const std::string& stdout_path, double limit_s = 0);
// Waits for a started process (killed after limit_s when > 0) and collects its outcome.
Outcome finish(const Started& s, double limit_s = 0);

// The table rows of a sweep's output: the lines that do not start with '#'.
std::vector<std::string> data_rows(const std::string& out);
// The whitespace-separated fields of a line.
std::vector<std::string> fields(const std::string& line);

// A scratch directory for the whole test program, removed when the tests end.
const std::string& scratch();
std::string write_file(const std::string& name, std::string_view text);
std::string read_file(const std::string& path);

inline bool contains(const std::string& hay, std::string_view needle) {
  return hay.find(needle) != std::string::npos;
}

size_t count_lines(const std::string& s);

// Whether a run ended as a usage error: exit code 2, `says` on stderr.
inline ::testing::AssertionResult usage_error(const Outcome& r, std::string_view says) {
  if (r.rc == 2 && contains(r.err, says)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "exit code " << r.rc << " (want 2), stderr (want '" << says
                                       << "'): " << r.err;
}

// How many times `needle` occurs in `hay` (overlapping ones too).
inline size_t count_of(const std::string& hay, std::string_view needle) {
  size_t n = 0;
  for (size_t i = hay.find(needle); i != std::string::npos; i = hay.find(needle, i + 1)) ++n;
  return n;
}

// Every "--name" (lowercase letters, digits, '-') in `text`, in order.
std::vector<std::string> flag_names(const std::string& text);

}  // namespace probe_test
