// tests/multiproc/bootstrap_security_test.cpp - the bootstrap against
// strangers on the machine (issue #24): the socket names reveal nothing of
// the unique id, a process of another user is refused (run as uid 65534 when
// the test runs as root), a process without the id is refused by the
// challenge and never receives a file descriptor, stray connections (garbage,
// silence) are dropped while the real ranks join, a malformed frame is a
// protocol error naming its rank, and timeouts name the ranks that did not
// answer.
//
// A stranger finds a rank's listener as anyone on the machine can: its
// name in /proc/net/unix (proc(5)), picked out by the socket inodes under
// /proc/<pid>/fd where the test needs to know which listener is rank 0's.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/handshake.hpp"
#include "conccl/bootstrap.hpp"
#include "multiproc/fork_ranks.hpp"

namespace conccl::mptest {
namespace {

constexpr uid_t kNobody = 65534;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- pipes between the forked processes: lines, each read by a deadline ----

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int p[2];
    if (pipe(p) == 0) r = p[0], w = p[1];
  }
  ~Pipe() {
    close(r);
    close(w);
  }
  void send(const std::string& line) const {
    const std::string s = line + "\n";
    size_t at = 0;
    while (at < s.size()) {
      const ssize_t n = write(w, s.data() + at, s.size() - at);
      if (n <= 0) return;
      at += static_cast<size_t>(n);
    }
  }
  // One line, or "" at the timeout.
  std::string receive(int timeout_ms) const {
    const auto t0 = std::chrono::steady_clock::now();
    std::string line;
    while (since(t0) * 1000 < timeout_ms) {
      pollfd pf{r, POLLIN, 0};
      if (poll(&pf, 1, 50) != 1) continue;
      char c;
      if (read(r, &c, 1) != 1) return "";
      if (c == '\n') return line;
      line += c;
    }
    return "";
  }
};

// ---- what anyone on the machine sees ----

std::vector<std::string> proc_net_unix() {
  std::ifstream f("/proc/net/unix");
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) lines.push_back(line);
  return lines;
}

// The abstract names ('@' dropped) of the listening Unix sockets process
// `pid` holds: its socket inodes (/proc/<pid>/fd -> "socket:[inode]") matched
// with /proc/net/unix's lines ("Num RefCount Protocol Flags Type St Inode
// Path"; Flags 00010000 is a listener, __SO_ACCEPTCON).
std::vector<std::string> listeners_of(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  std::set<std::string> inodes;
  DIR* d = opendir(dir.c_str());
  if (!d) return {};
  while (dirent* e = readdir(d)) {
    char target[256];
    const ssize_t n = readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
    if (n <= 9) continue;
    target[n] = 0;
    if (std::strncmp(target, "socket:[", 8) == 0) inodes.insert(std::string(target + 8, static_cast<size_t>(n) - 9));
  }
  closedir(d);
  std::vector<std::string> out;
  for (const std::string& line : proc_net_unix()) {
    std::istringstream ss(line);
    std::string num, ref, proto, flags, type, st, inode, path;
    ss >> num >> ref >> proto >> flags >> type >> st >> inode >> path;
    if (flags == "00010000" && inodes.count(inode) && path.size() > 1 && path[0] == '@') out.push_back(path.substr(1));
  }
  return out;
}

// The name of process `pid`'s listener once it listens, or "" after 10 s.
std::string wait_for_listener(pid_t pid) {
  const auto t0 = std::chrono::steady_clock::now();
  while (since(t0) < 10) {
    const std::vector<std::string> names = listeners_of(pid);
    if (names.size() == 1) return names[0];
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return "";
}

// A plain client socket on the abstract `name`, or -1.
int connect_to(const std::string& name) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof a.sun_path) return -1;
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 +
                                                                           name.size())) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything that arrives on `fd` until the other side closes it (or the
// timeout): bytes and file descriptors (SCM_RIGHTS, each closed here).
struct Drained {
  bool closed = false;
  size_t bytes = 0;
  size_t fds = 0;
  double seconds = 0;  // until it was closed
};
Drained drain(int fd, int timeout_ms) {
  Drained d;
  const auto t0 = std::chrono::steady_clock::now();
  while (since(t0) * 1000 < timeout_ms) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 20) != 1) continue;
    char buf[4096];
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 253)];
    iovec iov{buf, sizeof buf};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl;
    mh.msg_controllen = sizeof ctl;
    const ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); n >= 0 && c; c = CMSG_NXTHDR(&mh, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++k) {
          int f;
          std::memcpy(&f, CMSG_DATA(c) + k * sizeof(int), sizeof f);
          close(f);
          ++d.fds;
        }
    if (n > 0) {
      d.bytes += static_cast<size_t>(n);
    } else if (n == 0 || errno == ECONNRESET) {
      d.closed = true;
      break;
    }
  }
  d.seconds = since(t0);
  return d;
}

std::string describe(const Drained& d) {
  return std::string(d.closed ? "closed" : "NOT closed") + " after " + std::to_string(d.seconds) + " s, " +
         std::to_string(d.bytes) + " bytes, " + std::to_string(d.fds) + " fds";
}

// Every rank passes a memfd holding "rank <r>" and checks what it receives.
int exchange_memfds(Bootstrap& b, std::string* out) {
  const int fd = memfd_create("t", MFD_CLOEXEC);
  const std::string mine = "rank " + std::to_string(b.rank());
  if (fd < 0 || write(fd, mine.data(), mine.size()) != ssize_t(mine.size())) return *out += "memfd\n", 10;
  Result<std::vector<Bootstrap::Message>> all = b.exchange("memfds", mine, {fd}, Deadline::after_ms(20000));
  close(fd);
  if (!all.ok()) return *out += "exchange: " + all.status().to_string() + "\n", 11;
  for (int q = 0; q < b.size(); ++q) {
    Bootstrap::Message& m = (*all)[size_t(q)];
    const std::string want = "rank " + std::to_string(q);
    if (m.data != want) return *out += "data from " + std::to_string(q) + "\n", 12;
    if (q == b.rank()) continue;
    std::string got(want.size(), '\0');
    if (m.fds.size() != 1 || pread(m.fds[0], got.data(), got.size(), 0) != ssize_t(got.size()) || got != want)
      return *out += "memfd from " + std::to_string(q) + "\n", 13;
    close(m.fds[0]);
  }
  return 0;
}

// Whether a process exited with `code` having written each of `says`.
::testing::AssertionResult exited(const RankOutcome& o, int code, std::initializer_list<const char*> says = {}) {
  std::string why;
  if (o.exit_code != code) why += "exit code " + std::to_string(o.exit_code) + ", want " + std::to_string(code) + "; ";
  for (const char* s : says)
    if (o.out.find(s) == std::string::npos) why += "no '" + std::string(s) + "'; ";
  if (why.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << why << "it wrote: " << o.out;
}

// A real rank of `n` beside strangers to the join: rank 0 sends them its pid
// (they find its listener by it), rank `late` joins only once they say "go";
// then the memfd exchange. 0, or an exit code with *out saying why.
int real_rank(const UniqueId& id, int r, int n, int late, const Pipe& pid_pipe, const Pipe& go_pipe, std::string* out) {
  if (r == 0) pid_pipe.send(std::to_string(getpid()));
  if (r == late && go_pipe.receive(20000) != "go") return *out = "no go\n", 20;
  Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, r, n, Deadline::after_ms(20000));
  if (!b.ok()) return *out = b.status().to_string(), 21;
  return exchange_memfds(**b, out);
}

// Becomes uid/gid 65534 with no supplementary groups, and dumpable again
// (a change of credentials clears it, prctl(2), which would hide this
// process's own /proc files from it).
bool become_nobody() {
  if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) return false;
  (void)prctl(PR_SET_DUMPABLE, 1);
  return getuid() == kNobody && geteuid() == kNobody;
}

std::string secret_hex(const UniqueId& id) { return id.to_string().substr(std::string("conccl-uid-").size()); }

// ---- the tests ----

// The names every user can list reveal nothing of the id, and differ per
// rank and per id (one rank's name does not give away another's).
TEST(BootstrapSecurity, SocketNamesRevealNothingOfTheId) {
  const UniqueId id = make_unique_id().value(), other = make_unique_id().value();
  const std::string hex = secret_hex(id);
  std::set<std::string> names;
  for (int r = 0; r < 8; ++r) {
    const std::string n = bootstrap_detail::listener_name(id, r);
    EXPECT_EQ(n.find(hex.substr(0, 8)), std::string::npos) << n;
    EXPECT_EQ(n.rfind("conccl-", 0), 0u) << n;
    EXPECT_TRUE(names.insert(n.substr(0, n.rfind('-'))).second) << "rank " << r << " repeats a name: " << n;
    EXPECT_NE(n, bootstrap_detail::listener_name(other, r));
    EXPECT_EQ(n, bootstrap_detail::listener_name(id, r));  // every rank derives the same
  }
  EXPECT_EQ(bootstrap_detail::id_fingerprint(id).size(), 8u);
  EXPECT_EQ(hex.find(bootstrap_detail::id_fingerprint(id)), std::string::npos);
}

// Issue #24's attack, as another user: uid 65534 reads /proc/net/unix (the
// id must not be there), then joins as rank 1 with the right id (rank 0
// refuses it for its uid, and so would the stranger's own ConCCL).
TEST(BootstrapSecurity, AnotherUserCannotFindTheIdNorJoin) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run a process as uid 65534";
  const UniqueId id = make_unique_id().value();
  const std::string hex = secret_hex(id);
  const Pipe pid_pipe, name_pipe;
  // 0: rank 0 (root). 1: the stranger (uid 65534). 2: root's helper that
  // picks out rank 0's listener for the stranger, so that the stranger
  // checks that very name.
  std::vector<RankOutcome> res = fork_ranks(all_ranks(3), [&](int r, std::string* out) {
    if (r == 0) {
      pid_pipe.send(std::to_string(getpid()));
      Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, 0, 2, Deadline::after_ms(5000));
      if (b.ok()) return *out = "rank 0 joined with the stranger\n", 2 + exchange_memfds(**b, out);
      *out = b.status().to_string();
      return b.status().code() == Code::timeout ? 1 : 3;
    }
    if (r == 2) {
      const std::string pid = pid_pipe.receive(10000);
      if (pid.empty()) return *out = "no pid\n", 2;
      const std::string name = wait_for_listener(std::stoi(pid));
      name_pipe.send(name);
      return name.empty() ? (*out = "rank 0 never listened\n", 3) : 0;
    }
    if (!become_nobody()) return *out = "could not become uid 65534\n", 2;
    const std::string name = name_pipe.receive(15000);
    if (name.empty()) return *out = "no listener name\n", 3;
    // (a) The name is there for anyone to read, and the id is not.
    bool listed = false;
    for (const std::string& line : proc_net_unix()) {
      listed |= line.find("@" + name) != std::string::npos;
      for (const std::string& part : {hex, hex.substr(0, 16), hex.substr(16)})
        if (line.find(part) != std::string::npos) *out += "the id is readable in /proc/net/unix: " + line + "\n";
    }
    if (!listed) *out += "rank 0's listener @" + name + " is not in /proc/net/unix\n";
    if (!out->empty()) return 4;
    // (b) With the id (leaked some other way) and its own uid check lifted,
    // rank 0 still refuses it.
    Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, 1, 2, Deadline::after_ms(3000), true);
    if (b.ok()) return *out = "joined as rank 1\n", 5 + exchange_memfds(**b, out);
    *out += "allowed: " + b.status().to_string() + "\n";
    if (b.status().code() != Code::unavailable || b.status().message().find("refused") == std::string::npos) return 6;
    // Its own ConCCL, left as it is, refuses rank 0 (uid 0) as well.
    b = Bootstrap::connect(id, 1, 2, Deadline::after_ms(3000));
    if (b.ok()) return *out += "joined as rank 1\n", 7 + exchange_memfds(**b, out);
    *out += "default: " + b.status().to_string() + "\n";
    return b.status().message().find("it runs as uid 0, this process as uid 65534") == std::string::npos ? 8 : 0;
  });
  EXPECT_TRUE(exited(res[2], 0));
  EXPECT_TRUE(exited(res[1], 0));
  EXPECT_TRUE(exited(res[0], 1,
                     {"rank(s) 1 did not join", "(uid 65534) was refused: it runs as uid 65534",
                      "CONCCL_BOOTSTRAP_ALLOW_OTHER_UIDS=1"}));
}

// With the uid check lifted on both sides, another user's rank joins: the
// option does what it says.
TEST(BootstrapSecurity, AllowOtherUidsLetsAnotherUserJoin) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run a process as uid 65534";
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks(all_ranks(2), [&](int r, std::string* out) {
    if (r == 1 && !become_nobody()) return *out = "could not become uid 65534\n", 2;
    // Rank 0 by the environment variable, rank 1 by the argument.
    if (r == 0 && setenv("CONCCL_BOOTSTRAP_ALLOW_OTHER_UIDS", "1", 1) != 0) return 3;
    Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, r, 2, Deadline::after_ms(20000), r == 1);
    if (!b.ok()) return *out = b.status().to_string(), 4;
    return exchange_memfds(**b, out);
  });
  expect_ranks_ok(res);
}

// A process of the same user that found rank 0's listener but has another
// id: the challenge refuses it, it is sent no file descriptor and nothing
// after the challenge, and the real ranks join and share memory meanwhile.
TEST(BootstrapSecurity, AProcessWithAnotherIdIsRefusedAndGetsNoFd) {
  const UniqueId id = make_unique_id().value(), wrong = make_unique_id().value();
  const Pipe pid_pipe, go_pipe;
  std::vector<RankOutcome> res = fork_ranks(all_ranks(4), [&](int r, std::string* out) {
    if (r == 3) {  // the stranger
      const std::string pid = pid_pipe.receive(10000);
      const std::string name = pid.empty() ? "" : wait_for_listener(std::stoi(pid));
      const int fd = connect_to(name);
      if (fd < 0) return *out = "could not reach rank 0's listener\n", 2;
      if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) return 3;
      Status st = bootstrap_detail::join_handshake(fd, wrong, 2, 0, 3, false, Deadline::after_ms(5000));
      *out += "handshake: " + st.to_string() + "\n";
      const Drained d = drain(fd, 10000);  // until rank 0 hangs up
      close(fd);
      go_pipe.send("go");
      *out += "then: " + describe(d) + "\n";
      if (st.ok() || st.code() != Code::unavailable || st.message().find("refused this process") == std::string::npos)
        return 4;
      return d.closed && d.bytes == 0 && d.fds == 0 ? 0 : 5;
    }
    return real_rank(id, r, 3, /*late=*/2, pid_pipe, go_pipe, out);  // rank 2 joins after the stranger
  });
  expect_ranks_ok(res);
}

// Stray local connections, one sending garbage and one nothing, are dropped
// while the ranks join; neither receives anything but the end.
TEST(BootstrapSecurity, StrayConnectionsDoNotStopTheJoin) {
  const UniqueId id = make_unique_id().value();
  const Pipe pid_pipe, go_pipe;
  std::vector<RankOutcome> res = fork_ranks(all_ranks(3), [&](int r, std::string* out) {
    if (r == 2) {  // the strays
      const std::string pid = pid_pipe.receive(10000);
      const std::string name = pid.empty() ? "" : wait_for_listener(std::stoi(pid));
      const int garbage = connect_to(name), silent = connect_to(name);
      if (garbage < 0 || silent < 0) return *out = "could not reach rank 0's listener\n", 2;
      const std::string junk(64, 'G');
      if (write(garbage, junk.data(), junk.size()) != ssize_t(junk.size())) return 3;
      go_pipe.send("go");
      const Drained g = drain(garbage, 10000), s = drain(silent, 10000);
      *out += "garbage: " + describe(g) + "\nsilent: " + describe(s) + "\n";
      close(garbage);
      close(silent);
      return g.closed && s.closed && g.bytes + g.fds + s.bytes + s.fds == 0 ? 0 : 4;
    }
    return real_rank(id, r, 2, /*late=*/1, pid_pipe, go_pipe, out);  // rank 1 joins after the strays
  });
  expect_ranks_ok(res);
}

// A connection that says nothing is dropped after the handshake timeout (2
// s), not held until the join's deadline; the join's timeout names the rank
// that did not come and the connection it dropped.
TEST(BootstrapSecurity, ASilentConnectionIsDroppedAndTheMissingRankNamed) {
  const UniqueId id = make_unique_id().value();
  const Pipe pid_pipe;
  std::vector<RankOutcome> res = fork_ranks(all_ranks(2), [&](int r, std::string* out) {
    if (r == 1) {  // not rank 1: a silent stray
      const std::string pid = pid_pipe.receive(10000);
      const int fd = connect_to(pid.empty() ? "" : wait_for_listener(std::stoi(pid)));
      if (fd < 0) return *out = "could not reach rank 0's listener\n", 2;
      const Drained d = drain(fd, 20000);
      close(fd);
      *out = describe(d) + "\n";
      // Dropped well before rank 0's 5 s deadline.
      return d.closed && d.seconds < 4.0 ? 0 : 3;
    }
    pid_pipe.send(std::to_string(getpid()));
    Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, 0, 2, Deadline::after_ms(5000));
    *out = b.status().to_string();
    return b.ok() ? 0 : 1;
  });
  EXPECT_TRUE(exited(res[1], 0));
  EXPECT_TRUE(exited(res[0], 1, {"timeout", "rank(s) 1 did not join", "sent no hello in time"}));
}

// A rank that listens but is stuck (stopped, here) is named by the rank
// waiting for its handshake.
TEST(BootstrapSecurity, AStuckListenerIsNamed) {
  const UniqueId id = make_unique_id().value();
  const Pipe pid_pipe;
  std::vector<RankOutcome> res = fork_ranks(all_ranks(2), [&](int r, std::string* out) {
    if (r == 0) {
      pid_pipe.send(std::to_string(getpid()));
      Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, 0, 2, Deadline::after_ms(3000));
      return b.ok() ? 0 : 1;  // either: rank 1 may have gone by the time it resumes
    }
    const std::string pid = pid_pipe.receive(10000);
    if (pid.empty() || wait_for_listener(std::stoi(pid)).empty()) return *out = "rank 0 never listened\n", 2;
    const pid_t p0 = std::stoi(pid);
    kill(p0, SIGSTOP);
    // Stopped ('T' after the command name in /proc/<pid>/stat, proc(5)).
    const auto t0 = std::chrono::steady_clock::now();
    for (bool stopped = false; !stopped && since(t0) < 10;) {
      std::ifstream f("/proc/" + pid + "/stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const size_t at = stat.rfind(')');
      stopped = at != std::string::npos && stat.compare(at, 3, ") T") == 0;
      if (!stopped) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, 1, 2, Deadline::after_ms(1500));
    kill(p0, SIGCONT);
    *out = b.status().to_string();
    return b.ok() ? 3 : 0;
  });
  EXPECT_TRUE(exited(res[1], 0, {"timeout", "rank(s) 0 did not join"}));
  EXPECT_FALSE(res[0].killed_at_deadline);
}

// A rank that stops answering after the join is named by every exchange
// that waits for it.
TEST(BootstrapSecurity, AStuckRankIsNamedByTheExchange) {
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks(all_ranks(3), [&](int r, std::string* out) {
    Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, r, 3, Deadline::after_ms(20000));
    if (!b.ok()) return *out = b.status().to_string(), 2;
    if (r == 2) {  // stuck until the others have given up
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return 0;
    }
    Status st = (*b)->barrier("step", Deadline::after_ms(1000));
    *out = st.to_string();
    // Ranks 0 and 1 stay until rank 2 has gone, so that neither sees the
    // other leave first.
    const auto t0 = std::chrono::steady_clock::now();
    for (std::vector<int> g; std::find(g.begin(), g.end(), 2) == g.end() && since(t0) < 20; g = (*b)->gone())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return st.code() == Code::timeout ? 0 : 3;
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(exited(res[size_t(r)], 0, {"rank(s) 2 did not reach 'step'"})) << "rank " << r;
}

// A peer whose frame is not a ConCCL frame (bytes written straight to its
// socket) is a protocol error naming that rank, not an internal error.
TEST(BootstrapSecurity, AMalformedFrameIsAProtocolErrorNamingTheRank) {
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks(all_ranks(2), [&](int r, std::string* out) {
    Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, r, 2, Deadline::after_ms(20000));
    if (!b.ok()) return *out = b.status().to_string(), 2;
    if (r == 1) {
      // After the join, rank 1's only socket is its connection to rank 0.
      std::vector<int> socks;
      DIR* d = opendir("/proc/self/fd");
      while (dirent* e = d ? readdir(d) : nullptr) {
        char t[64];
        const ssize_t n = readlinkat(dirfd(d), e->d_name, t, sizeof t - 1);
        if (n > 0 && std::strncmp(t, "socket:", 7) == 0) socks.push_back(std::atoi(e->d_name));
      }
      if (d) closedir(d);
      if (socks.size() != 1) return *out = std::to_string(socks.size()) + " sockets\n", 3;
      const std::string junk(64, 'G');
      if (write(socks[0], junk.data(), junk.size()) != ssize_t(junk.size())) return 4;
      return drain(socks[0], 20000).closed ? 0 : 5;  // until rank 0 gives up
    }
    Result<std::vector<Bootstrap::Message>> all = (*b)->exchange("t", "x", {}, Deadline::after_ms(20000));
    *out = all.status().to_string();
    return all.ok() ? 6 : 0;
  });
  EXPECT_TRUE(exited(res[1], 0));
  EXPECT_TRUE(exited(res[0], 0, {"invalid argument", "rank 1 (pid", "malformed frame header (magic 0x47474747"}));
  EXPECT_EQ(res[0].out.find("internal"), std::string::npos) << res[0].out;
}

}  // namespace
}  // namespace conccl::mptest
