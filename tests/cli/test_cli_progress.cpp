// tests/cli/test_cli_progress.cpp - the sweep's progress bar: shown when
// stderr is a terminal (here a pseudo-terminal), erased before each row and
// at the end, never in stdout; absent when stderr is captured to a file.
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "probe_runner.hpp"

namespace {

using namespace probe_test;

struct TtyRun {
  int rc = -1;
  std::string out, tty;  // stdout (a file), what went to the terminal (stderr)
};

// Runs sdma-probe with stderr on a pseudo-terminal and stdout in a file.
TtyRun run_with_tty_stderr(std::vector<std::string> args) {
  TtyRun r;
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) return r;
  const std::string slave = ptsname(master);
  const std::string out_path = scratch() + "/tty_run.out";
  args.insert(args.begin(), SDMA_PROBE_PATH);
  std::vector<char*> argv;
  for (std::string& w : args) argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(slave.c_str(), O_RDWR | O_NOCTTY);
    if (o < 0 || e < 0) _exit(126);
    dup2(o, 1);
    dup2(e, 2);
    close(master);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Drain the terminal while the command runs (a full pty would block it).
  int status = 0;
  bool done = false;
  char buf[4096];
  while (true) {
    pollfd p = {master, POLLIN, 0};
    if (poll(&p, 1, 20) > 0 && (p.revents & POLLIN)) {
      const ssize_t n = read(master, buf, sizeof buf);
      if (n > 0) {
        r.tty.append(buf, static_cast<size_t>(n));
        continue;
      }
    }
    if (done) break;
    if (waitpid(pid, &status, WNOHANG) == pid) done = true;  // one more drain, then stop
  }
  close(master);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out_path);
  return r;
}

TEST(Progress, OnlyOnATerminalAndErased) {
  TtyRun r = run_with_tty_stderr({"allgather", "--gpus", "2", "--min", "1K", "--max", "64K"});
  ASSERT_EQ(r.rc, 0) << r.tty;
  EXPECT_TRUE(contains(r.tty, "[")) << r.tty;
  EXPECT_TRUE(contains(r.tty, "/7")) << r.tty;  // "3/7" sizes done
  // Erased (carriage return, erase line) once per row at least, and last.
  size_t erases = 0;
  for (size_t i = r.tty.find("\r\033[K"); i != std::string::npos; i = r.tty.find("\r\033[K", i + 1)) ++erases;
  EXPECT_GE(erases, 7u) << r.tty;
  const std::string tail = "\r\033[K";
  ASSERT_GE(r.tty.size(), tail.size());
  EXPECT_EQ(r.tty.substr(r.tty.size() - tail.size()), tail) << "the bar is left on the terminal";
  // stdout (here a file) carries the table only.
  EXPECT_FALSE(contains(r.out, "\r")) << r.out;
  EXPECT_EQ(data_rows(r.out).size(), 7u) << r.out;
  // Captured stderr: no bar at all.
  Outcome c = probe({"allgather", "--gpus", "2", "--min", "1K", "--max", "64K"});
  EXPECT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(c.err, "");
}

}  // namespace
