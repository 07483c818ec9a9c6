// tests/cli/test_cli_procs.cpp - issue #24, items 12-14:
// - --procs and signals: SIGTERM/SIGINT to the launcher reach the ranks, which
//   stop together; rank 0 writes the finished rows (table, JSON) and the
//   launcher exits 143/130 with no rank left behind; a rank that does not end
//   is SIGKILLed after the launcher's deadline.
// - --json FILE is opened before the sweep (an unwritable path is exit 2 at
//   once) and every write is checked (/dev/full is an error); stdout's writes
//   are checked for every command that prints JSON.
// - --peer is checked only where the op has one; --procs above 16 (the
//   devices' process slots) is refused up front.
// Issue #25 item 6: --procs times calls through windows (0 bootstrap
// messages per call), --no-windows plans (some).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "interrupted_sweep.hpp"
#include "json_check.hpp"
#include "probe_runner.hpp"

namespace {

using namespace probe_test;

// "/proc/PID/stat" fields after the command name: state, ppid.
bool stat_of(int pid, char* state, int* ppid) {
  const std::string st = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = st.rfind(')');
  if (close == std::string::npos || close + 4 >= st.size()) return false;
  *state = st[close + 2];
  *ppid = std::atoi(st.c_str() + close + 4);
  return true;
}

// The processes whose parent is `pid`.
std::vector<int> children_of(int pid) {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const int p = std::atoi(e->d_name);
    char state = 0;
    int ppid = 0;
    if (p > 0 && stat_of(p, &state, &ppid) && ppid == pid) out.push_back(p);
  }
  closedir(d);
  return out;
}

// A --procs rank (its command line carries --unique-id), still there (a
// zombie counts as gone: it has ended and waits only to be reaped).
bool rank_alive(int pid) {
  char state = 0;
  int ppid = 0;
  if (!stat_of(pid, &state, &ppid) || state == 'Z') return false;
  std::string cmd = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  for (char& c : cmd)
    if (c == '\0') c = ' ';
  return contains(cmd, "--unique-id");
}

// Waits up to 5 s for the ranks to go (an orphan is reaped by init), then
// SIGKILLs those left so that a failing test leaves nothing running.
std::vector<int> ranks_left(const std::vector<int>& ranks) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::vector<int> left;
  do {
    left.clear();
    for (int p : ranks)
      if (rank_alive(p)) left.push_back(p);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < until);
  for (int p : left) kill(p, SIGKILL);
  return left;
}

// Starts `args`, waits for the first table row and for the launcher's
// `nranks` ranks; the ranks' pids in rank order (spawn order: pids rise,
// unless they wrapped).
Started start_sweep(const std::vector<std::string>& args, int nranks, std::vector<int>* ranks) {
  Started s = start(args);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < until) {
    *ranks = children_of(s.pid);
    if (!data_rows(read_file(s.out_path)).empty() && static_cast<int>(ranks->size()) == nranks) break;
    char state = 0;
    int ppid = 0;
    if (!stat_of(s.pid, &state, &ppid) || state == 'Z') break;  // it has ended
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return s;
}

// A 2-process p2p sweep that would run for minutes (2000 timed launches per
// size, each agreed on by the ranks); `sig` to the launcher
// after its first row.
void interrupt_procs(int sig, int want_rc, const char* name) {
  const std::string json = scratch() + "/procs_interrupted_" + name + ".json";
  std::vector<int> ranks;
  // (A sanitizer build: fewer iterations, and a deadline that its slower engines' 64 MiB fills meet.)
  Started s = start_sweep({"p2p", "--procs", "2", "--min", "4K", "--max", "64M", "--iters", std::to_string(2000 / kSlowdown),
                           "--timeout-ms", std::to_string(10000 * kSlowdown), "--json", json},
                          2, &ranks);
  ASSERT_GT(s.pid, 0);
  ASSERT_FALSE(data_rows(read_file(s.out_path)).empty()) << "no row within 90 s: " << read_file(s.err_path);
  ASSERT_EQ(ranks.size(), 2u) << "the launcher should have two rank processes";
  // The launcher ends within 20 s; 4K..64M is 15 sizes.
  const Outcome r = interrupt_and_expect_rows(s, sig, name, want_rc, 20.0 * kSlowdown, 15, json);
  EXPECT_TRUE(ranks_left(ranks).empty()) << "rank processes outlived the launcher";
  EXPECT_EQ(count_of(r.err, std::string("interrupted by ") + name), 1u) << "rank 0 speaks for the group: " << r.err;
}

TEST(ProcsSignals, SigtermReachesTheRanksAndEndsTheSweepWithItsRows) { interrupt_procs(SIGTERM, 143, "SIGTERM"); }
TEST(ProcsSignals, SigintReachesTheRanksAndEndsTheSweepWithItsRows) { interrupt_procs(SIGINT, 130, "SIGINT"); }

// A rank that cannot act on the signal (stopped) is killed once the
// launcher's deadline (2 x --timeout-ms + 2 s: 6 s here) has passed; the launcher
// still exits 143 and leaves nothing behind.
TEST(ProcsSignals, ARankThatDoesNotEndIsKilledAfterTheDeadline) {
  std::vector<int> ranks;
  Started s = start_sweep({"p2p", "--procs", "2", "--min", "4K", "--max", "16M", "--iters", "2000", "--timeout-ms",
                           "2000", "--json", scratch() + "/procs_stopped.json"},
                          2, &ranks);
  ASSERT_GT(s.pid, 0);
  ASSERT_EQ(ranks.size(), 2u) << read_file(s.err_path);
  kill(ranks.back(), SIGSTOP);
  const auto sent = std::chrono::steady_clock::now();
  kill(s.pid, SIGTERM);
  Outcome r = finish(s, 60);
  const double after = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  EXPECT_FALSE(r.signaled) << r.err;
  EXPECT_EQ(r.rc, 143) << r.err;
  EXPECT_GE(after, 5.5) << "killed before the deadline: " << r.err;
  EXPECT_LT(after, 20.0) << r.err;
  EXPECT_TRUE(contains(r.err, "SIGKILL")) << r.err;
  EXPECT_TRUE(ranks_left(ranks).empty()) << "rank processes outlived the launcher";
}

TEST(ProcsLimits, MoreThanSixteenProcessesAreRefusedUpFront) {
  for (const char* n : {"17", "64"}) {
    const auto t0 = std::chrono::steady_clock::now();
    Outcome r = probe({"allgather", "--procs", n, "--max", "4K"}, "", 60);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.rc, 2) << n << ": " << r.err;
    EXPECT_LT(took, 5.0) << n << ": ranks were started";
    EXPECT_TRUE(contains(r.err, "--procs " + std::string(n))) << r.err;
    EXPECT_TRUE(contains(r.err, "16 processes")) << r.err;
  }
  Outcome ok = probe({"allgather", "--procs", "16", "--gpus", "2", "--max", "4K", "--timeout-ms", "30000"}, "", 120);
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

TEST(ProcsLimits, PeerIsCheckedOnlyWhereTheOpHasOne) {
  // One rank: the default --peer 1 does not exist, and allgather has none.
  for (const char* ranks : {"--ranks", "--procs"}) {
    Outcome r = probe({"allgather", ranks, "1", "--max", "4K"}, "", 60);
    EXPECT_EQ(r.rc, 0) << ranks << ": " << r.err;
    EXPECT_EQ(data_rows(r.out).size(), 3u) << r.out;  // 1K, 2K, 4K
    Outcome b = probe({"broadcast", ranks, "1", "--max", "4K"}, "", 60);
    EXPECT_EQ(b.rc, 0) << ranks << ": " << b.err;
  }
  // p2p: checked, in the launcher before any rank starts.
  Outcome p = probe({"p2p", "--procs", "2", "--peer", "2", "--max", "4K"}, "", 60);
  EXPECT_EQ(p.rc, 2) << p.err;
  EXPECT_EQ(count_of(p.err, "--peer 2 is out of range: give a rank 0..1"), 1u) << p.err;
  EXPECT_TRUE(usage_error(probe({"p2p", "--procs", "1", "--max", "4K"}, "", 60), "give --procs 2"));
  // Given to an op without one: refused, not ignored.
  EXPECT_TRUE(usage_error(probe({"allgather", "--ranks", "2", "--peer", "1", "--max", "4K"}, "", 60),
                          "--peer does not apply to allgather"));
}

// Every "bootstrap_messages_per_call": X of a JSON text, as written.
std::vector<std::string> messages_in_json(const std::string& j) {
  std::vector<std::string> out;
  const std::string key = "\"bootstrap_messages_per_call\": ";
  for (size_t i = j.find(key); i != std::string::npos; i = j.find(key, i + 1)) {
    const size_t b = i + key.size();
    out.push_back(j.substr(b, j.find_first_of(",}", b) - b));
  }
  return out;
}

// The summary's value: "# Bootstrap msgs/call  : X (bootstrap_messages_per_call: ...)"; -1 when absent.
double messages_in_summary(const std::string& out) {
  const std::string key = "# Bootstrap msgs/call  : ";
  const size_t i = out.find(key);
  if (i == std::string::npos) return -1;
  if (!contains(out.substr(i, out.find('\n', i) - i), "(bootstrap_messages_per_call: ")) return -1;
  return std::atof(out.c_str() + i + key.size());
}

// Every row verified: the #wrong columns (out of place: 13th; in place: 17th,
// or n/a) are 0, the summary says so, and every JSON row is verified.
void expect_verified(const std::string& what, const Outcome& r, const std::string& j) {
  const std::vector<std::string> rows = data_rows(r.out);
  EXPECT_FALSE(rows.empty()) << what << ": " << r.out;
  for (const std::string& row : rows) {
    const std::vector<std::string> c = fields(row);
    ASSERT_EQ(c.size(), 17u) << what << ": " << row;
    EXPECT_EQ(c[12], "0") << what << ": " << row;
    EXPECT_TRUE(c[16] == "0" || c[16] == "n/a") << what << ": " << row;
  }
  EXPECT_TRUE(contains(r.out, "# Out of bounds values : 0 OK")) << what << ": " << r.out;
  EXPECT_EQ(count_of(j, "\"verified\": true"), rows.size()) << what << ": " << j;
  EXPECT_FALSE(contains(j, "\"verified\": false")) << what << ": " << j;
}

// Issue #25 item 6: `sdma-probe allgather --procs 2` times calls through
// windows: 0 bootstrap messages per timed call in the summary and the JSON
// (per row, per in-place form, over the run), every byte still verified;
// --no-windows, in the same build, times plans: a positive count.
TEST(ProcsWindows, AllgatherTwoProcsCountsNoMessagePerCallAndNoWindowsSome) {
  const std::string json = scratch() + "/procs_windows_allgather.json";
  Outcome w = probe({"allgather", "--procs", "2", "--min", "1K", "--max", "64K", "--step-factor", "4", "--json", json},
                    "", 120);
  ASSERT_EQ(w.rc, 0) << w.err;
  std::string j = read_file(json);
  EXPECT_TRUE(is_valid_json(j)) << j;
  EXPECT_TRUE(contains(j, "\"windows\": true, \"bootstrap_messages_per_call\": 0.000}")) << j;
  const std::vector<std::string> counts = messages_in_json(j);
  EXPECT_EQ(counts.size(), 2 * data_rows(w.out).size() + 1) << j;  // each row, its in-place form, the run
  for (const std::string& c : counts) EXPECT_EQ(c, "0.000") << j;
  EXPECT_EQ(messages_in_summary(w.out), 0.0) << w.out;
  EXPECT_TRUE(contains(w.out, "# Bootstrap msgs/call  : 0.00 (bootstrap_messages_per_call")) << w.out;
  EXPECT_TRUE(contains(w.out, "#  processes: 2, one per rank; timed: calls through one window per rank")) << w.out;
  expect_verified("windows", w, j);

  Outcome nw = probe({"allgather", "--procs", "2", "--min", "1K", "--max", "64K", "--step-factor", "4",
                      "--no-windows", "--json", json},
                     "", 120);
  ASSERT_EQ(nw.rc, 0) << nw.err;
  j = read_file(json);
  EXPECT_TRUE(is_valid_json(j)) << j;
  EXPECT_TRUE(contains(j, "\"windows\": false")) << j;
  const std::vector<std::string> plan_counts = messages_in_json(j);
  ASSERT_FALSE(plan_counts.empty()) << j;
  EXPECT_GT(std::atof(plan_counts.back().c_str()), 0.0) << j;  // the run's: each launch meets at barriers
  for (const std::string& c : plan_counts) EXPECT_GT(std::atof(c.c_str()), 0.0) << j;
  EXPECT_GT(messages_in_summary(nw.out), 0.0) << nw.out;
  EXPECT_TRUE(contains(nw.out, "#  processes: 2, one per rank; timed: plans (--no-windows")) << nw.out;
  expect_verified("--no-windows", nw, j);
}

// Every op through windows, roots other than 0 included (in-place gather and
// scatter name every rank's chunk at root x chunk of its window), and
// --variant reaches the calls.
TEST(ProcsWindows, EveryOpNoMessagePerTimedCall) {
  const std::string json = scratch() + "/procs_windows_ops.json";
  const std::vector<std::vector<std::string>> runs = {
      {"allgather"},          {"alltoall"},           {"broadcast", "--root", "2"}, {"gather"},
      {"gather", "--root", "2"}, {"scatter"},         {"scatter", "--root", "1"},   {"p2p", "--root", "2", "--peer", "0"},
      {"allgather", "--variant", "pcpy"},
  };
  for (std::vector<std::string> args : runs) {
    const std::string what = args[0] + (args.size() > 1 ? " " + args[1] + " " + args[2] : "");
    args.insert(args.end(), {"--procs", "3", "--max", "16K", "--step-factor", "4", "--json", json});
    Outcome r = probe(args, "", 120);
    ASSERT_EQ(r.rc, 0) << what << ": " << r.err;
    const std::string j = read_file(json);
    EXPECT_TRUE(contains(j, "\"windows\": true, \"bootstrap_messages_per_call\": 0.000}")) << what << ": " << j;
    for (const std::string& c : messages_in_json(j)) EXPECT_EQ(c, "0.000") << what << ": " << j;
    EXPECT_EQ(messages_in_summary(r.out), 0.0) << what << ": " << r.out;
    expect_verified(what, r, j);
    if (args[1] == "--variant") {
      for (const std::string& row : data_rows(r.out)) EXPECT_EQ(fields(row)[3], "pcpy") << row;
    }
  }
  // One process has no bootstrap: nothing to count, and no windows to leave.
  Outcome one = probe({"allgather", "--ranks", "2", "--max", "4K"}, "", 60);
  EXPECT_EQ(one.rc, 0) << one.err;
  EXPECT_FALSE(contains(one.out, "Bootstrap msgs")) << one.out;
  EXPECT_TRUE(usage_error(probe({"allgather", "--ranks", "2", "--max", "4K", "--no-windows"}, "", 60),
                          "--no-windows applies to --procs N"));
  // A window call has no trigger: --prelaunch needs --no-windows.
  EXPECT_TRUE(usage_error(probe({"allgather", "--procs", "2", "--max", "4K", "--prelaunch"}, "", 60),
                          "add --no-windows"));
  Outcome pre_nw = probe({"allgather", "--procs", "2", "--max", "4K", "--prelaunch", "--no-windows"}, "", 60);
  EXPECT_EQ(pre_nw.rc, 0) << pre_nw.err;
}

// A sweep that runs for minutes if it starts.
std::vector<std::string> long_sweep(std::vector<std::string> json_args) {
  std::vector<std::string> a = {"allgather", "--min", "4K", "--max", "256M", "--iters", "2000"};
  a.insert(a.end(), json_args.begin(), json_args.end());
  return a;
}

TEST(JsonFile, AnUnwritablePathIsRefusedBeforeTheSweep) {
  const std::string path = scratch() + "/no/such/dir/rows.json";
  for (const std::vector<std::string>& form :
       {std::vector<std::string>{"--json", path}, {"--json=" + path}, {"--json-file", path},
        {"--procs", "2", "--json", path}}) {
    std::vector<std::string> args = long_sweep(form);
    const auto t0 = std::chrono::steady_clock::now();
    Outcome r = probe(args, "", 30);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_FALSE(r.timed_out) << form[0] << ": the sweep ran before the path was checked";
    EXPECT_EQ(r.rc, 2) << form[0] << ": " << r.err;
    EXPECT_LT(took, 5.0) << form[0];
    EXPECT_TRUE(contains(r.err, "'" + path + "'")) << r.err;
    EXPECT_TRUE(contains(r.err, "No such file or directory")) << r.err;
    EXPECT_TRUE(data_rows(r.out).empty()) << r.out;
  }
  // A directory is no file either.
  EXPECT_TRUE(usage_error(probe(long_sweep({"--json", scratch()}), "", 30), "Is a directory"));
}

TEST(JsonFile, EveryWriteIsChecked) {
  for (const char* procs : {"", "2"}) {
    std::vector<std::string> args = {"allgather", "--max", "4K", "--json", "/dev/full"};
    if (*procs) args.insert(args.end(), {"--procs", procs});
    Outcome r = probe(args, "", 60);
    EXPECT_EQ(r.rc, 4) << r.err;
    EXPECT_TRUE(contains(r.err, "writing '/dev/full' failed: No space left on device")) << r.err;
  }
  // Refused at the open (EACCES), or, where the open is allowed (root),
  // at the write (EIO): never a silent exit 0.
  Outcome v = probe({"allgather", "--max", "4K", "--json", "/proc/version"}, "", 60);
  EXPECT_TRUE(v.rc == 2 || v.rc == 4) << v.rc << ": " << v.err;
  EXPECT_TRUE(contains(v.err, "'/proc/version'")) << v.err;
  // `--json -` is stdout, as before.
  Outcome s = probe({"allgather", "--max", "4K", "--json", "-"}, "", 60);
  EXPECT_EQ(s.rc, 0) << s.err;
  EXPECT_TRUE(is_valid_json(s.out)) << s.out;
}

TEST(JsonFile, StdoutWritesAreCheckedForEveryJsonCommand) {
  const std::vector<std::vector<std::string>> cmds = {
      {"list", "--json"},
      {"gfx", "--json"},
      {"copy", "--src", "0", "--dst", "1", "--bytes", "4K", "--json"},
      // (--slow-ratio 0.01: a loaded machine must not turn this into a
      // slow-engine verdict, exit 1, before the write is tried)
      {"selftest", "--preset", "small", "--bytes", "4K", "--slow-ratio", "0.01", "--json"},
      {"allgather", "--max", "4K", "--json"},
      {"allgather", "--max", "4K", "--json", "-"},
  };
  for (const std::vector<std::string>& c : cmds) {
    Outcome r = probe_stdout_to(c, "/dev/full", 120);
    EXPECT_EQ(r.rc, 4) << c[0] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "writing the output (stdout) failed")) << c[0] << ": " << r.err;
  }
}

}  // namespace
