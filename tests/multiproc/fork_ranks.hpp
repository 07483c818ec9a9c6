// tests/multiproc/fork_ranks.hpp - run a function as N rank processes.
//
// The test process forks one child per rank before it creates any device
// (no threads are running then, so fork is safe); each child runs the rank's
// function, sends its text back through a pipe and leaves with _exit, never
// returning into gtest. The parent collects every child's exit status and
// text, killing children still running at the deadline. In AddressSanitizer
// builds each child checks for leaks before it leaves (kLeaked).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define CONCCL_MPTEST_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CONCCL_MPTEST_LSAN 1
#endif
#endif
#ifdef CONCCL_MPTEST_LSAN
#include <sanitizer/lsan_interface.h>
#endif

namespace conccl::mptest {

// Exit code of a rank whose objects leaked memory (AddressSanitizer builds:
// a child leaves with _exit, so LeakSanitizer's exit check would not run).
inline constexpr int kLeaked = 97;

struct RankOutcome {
  int exit_code = -1;  // exit status, or 128 + signal
  bool killed_at_deadline = false;
  std::string out;     // what the rank wrote
  double seconds = 0;  // from fork until its pipe closed (it exited)
};

// fn(rank, &out) returns the child's exit code. `ranks`: which ranks to
// start (a rank left out never joins).
inline std::vector<RankOutcome> fork_ranks(const std::vector<int>& ranks,
                                           const std::function<int(int rank, std::string* out)>& fn,
                                           int timeout_s = 240) {
  struct Child {
    pid_t pid;
    int fd;
    bool done;
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<Child> kids;
  std::vector<RankOutcome> res(ranks.size());
  for (int rank : ranks) {
    int p[2];
    if (pipe(p) != 0) return res;
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      std::string out;
      int code = 99;
      try {
        code = fn(rank, &out);  // its objects are destroyed when it returns
      } catch (...) {
        out += "exception\n";
      }
#ifdef CONCCL_MPTEST_LSAN
      if (__lsan_do_recoverable_leak_check() != 0) {
        out += "LeakSanitizer: memory leaked (report on stderr)\n";
        code = kLeaked;
      }
#endif
      size_t at = 0;
      while (at < out.size()) {
        const ssize_t n = write(p[1], out.data() + at, out.size() - at);
        if (n <= 0) break;
        at += static_cast<size_t>(n);
      }
      _exit(code);
    }
    close(p[1]);
    kids.push_back({pid, p[0], false});
  }
  const auto deadline = start + std::chrono::seconds(timeout_s);
  size_t open = kids.size();
  while (open > 0) {
    std::vector<pollfd> pfs;
    std::vector<size_t> who;
    for (size_t i = 0; i < kids.size(); ++i)
      if (!kids[i].done) {
        pfs.push_back({kids[i].fd, POLLIN, 0});
        who.push_back(i);
      }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      for (size_t i = 0; i < kids.size(); ++i)
        if (!kids[i].done) {
          kill(kids[i].pid, SIGKILL);
          res[i].killed_at_deadline = true;
        }
      break;
    }
    (void)poll(pfs.data(), pfs.size(), static_cast<int>(std::min<int64_t>(left.count(), 200)));
    for (size_t j = 0; j < pfs.size(); ++j) {
      if (!(pfs[j].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      const ssize_t n = read(pfs[j].fd, buf, sizeof buf);
      if (n > 0) {
        res[who[j]].out.append(buf, static_cast<size_t>(n));
      } else {
        kids[who[j]].done = true;
        res[who[j]].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        --open;
      }
    }
  }
  for (size_t i = 0; i < kids.size(); ++i) {
    int status = 0;
    waitpid(kids[i].pid, &status, 0);
    close(kids[i].fd);
    res[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return res;
}

inline std::vector<int> all_ranks(int n) {
  std::vector<int> r;
  for (int i = 0; i < n; ++i) r.push_back(i);
  return r;
}

// Every process of a fork_ranks run finished before the deadline and exited
// 0; a failure shows what the process wrote. (A hang stops the checks: wrap
// the call in ASSERT_NO_FATAL_FAILURE where the test goes on after it.)
inline void expect_ranks_ok(const std::vector<RankOutcome>& res) {
  for (size_t r = 0; r < res.size(); ++r) {
    ASSERT_FALSE(res[r].killed_at_deadline) << "rank " << r << " hung:\n" << res[r].out;
    EXPECT_EQ(res[r].exit_code, 0) << "rank " << r << ":\n" << res[r].out;
  }
}

}  // namespace conccl::mptest
