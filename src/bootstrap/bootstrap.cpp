// src/bootstrap/bootstrap.cpp - ranks of one node meeting over Unix sockets.
//
// Every rank listens on an abstract-namespace Unix stream socket named by the
// unique id and its rank ("\0conccl-<nonce>-<rank>": unix(7), no file to
// clean up), connects to every lower rank, and accepts every higher one: a
// full mesh, so each rank learns at once (POLLHUP) when any other's process
// exits. Memory crosses as file descriptors in SCM_RIGHTS messages (unix(7),
// cmsg(3)). All sockets are non-blocking and every step polls against the
// caller's deadline.
#include "conccl/bootstrap.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <thread>

namespace conccl {

namespace {

constexpr uint8_t kIdMagic[4] = {'C', 'C', 'L', '1'};
constexpr uint32_t kHelloMagic = 0x48434343;  // "CCCH"
constexpr uint32_t kFrameMagic = 0x46434343;  // "CCCF"
// Per message: Linux's SCM_MAX_FD (253, include/net/scm.h), the most one
// SCM_RIGHTS message carries. A plan's buffers may need many: a PyTorch
// tensor of expandable segments is one region (one fd) per 20 MiB or so.
constexpr size_t kMaxFds = 253;
constexpr uint32_t kMaxData = 64u << 20;
constexpr int kMaxRanks = 256;

struct Hello {
  uint32_t magic;
  uint8_t nonce[16];
  int32_t rank;
  int32_t nranks;
};

struct FrameHeader {
  uint32_t magic;
  uint32_t seq;
  uint32_t what_len;
  uint32_t data_len;
  uint32_t nfds;
};

std::string nonce_hex(const UniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int i = 4; i < 20; ++i) {
    s += digits[id.bytes[static_cast<size_t>(i)] >> 4];
    s += digits[id.bytes[static_cast<size_t>(i)] & 15];
  }
  return s;
}

// The abstract address of `rank`'s listener: sun_path[0] == 0.
socklen_t address_of(const UniqueId& id, int rank, sockaddr_un* a) {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  const std::string name = "conccl-" + nonce_hex(id) + "-" + std::to_string(rank);
  std::memcpy(a->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

Status os_error(const std::string& what, int err) {
  return error(Code::unavailable, what + ": " + std::strerror(err));
}

int poll_ms(Deadline deadline, int cap_ms = 100) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, cap_ms));
}

// Reads or writes exactly n bytes of a non-blocking socket by the deadline.
Status io_exact(int fd, void* buf, size_t n, bool write, Deadline deadline, const std::string& what) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = write ? ::send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return error(Code::unavailable, what + ": the other side closed the connection");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return os_error(what, errno);
    if (deadline.expired()) return error(Code::timeout, what + ": no answer by the deadline");
    pollfd pf{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    (void)::poll(&pf, 1, poll_ms(deadline));
  }
  return Status();
}

int peer_pid(int fd) {
  ucred c{};
  socklen_t len = sizeof c;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) == 0 ? c.pid : -1;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

// ---- UniqueId ----

std::string UniqueId::to_string() const { return "conccl-uid-" + nonce_hex(*this); }

Result<UniqueId> UniqueId::parse(const std::string& text) {
  const std::string prefix = "conccl-uid-";
  auto bad = [&] {
    return error(Code::invalid_argument, "'" + text.substr(0, 64) +
                                             "' is not a ConCCL unique id (\"conccl-uid-\" and 32 hex digits, as "
                                             "UniqueId::to_string() prints it)");
  };
  if (text.size() != prefix.size() + 32 || text.compare(0, prefix.size(), prefix) != 0) return bad();
  UniqueId id;
  std::memcpy(id.bytes.data(), kIdMagic, 4);
  for (size_t i = 0; i < 16; ++i) {
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = nib(text[prefix.size() + 2 * i]), lo = nib(text[prefix.size() + 2 * i + 1]);
    if (hi < 0 || lo < 0) return bad();
    id.bytes[4 + i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return id;
}

Result<UniqueId> make_unique_id() {
  UniqueId id;
  std::memcpy(id.bytes.data(), kIdMagic, 4);
  size_t got = 0;
  while (got < 16) {
    const ssize_t r = getrandom(id.bytes.data() + 4 + got, 16 - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return os_error("getrandom for a unique id", errno);
    }
    got += static_cast<size_t>(r);
  }
  return id;
}

// ---- Bootstrap ----

struct Bootstrap::Peer {
  int fd = -1;
  bool gone = false;
  std::string in;          // received bytes not yet taken as a frame
  std::deque<int> in_fds;  // received fds not yet taken
  ~Peer() {
    if (fd >= 0) ::close(fd);
    for (int f : in_fds) ::close(f);
  }
};

Bootstrap::Bootstrap(int rank, int nranks) : rank_(rank), nranks_(nranks) {
  pids_.assign(static_cast<size_t>(nranks), -1);
  pids_[static_cast<size_t>(rank)] = static_cast<int>(::getpid());
  peers_.resize(static_cast<size_t>(nranks));
}

Bootstrap::~Bootstrap() = default;

Result<std::unique_ptr<Bootstrap>> Bootstrap::connect(const UniqueId& id, int rank, int nranks, Deadline deadline) {
  if (std::memcmp(id.bytes.data(), kIdMagic, 4) != 0)
    return error(Code::invalid_argument, "the unique id was not made by make_unique_id() (or was damaged in transit)");
  if (nranks < 1 || nranks > kMaxRanks)
    return error(Code::invalid_argument, "nranks " + std::to_string(nranks) + " must be 1.." + std::to_string(kMaxRanks));
  if (rank < 0 || rank >= nranks)
    return error(Code::invalid_argument, "rank " + std::to_string(rank) + " must be 0.." + std::to_string(nranks - 1));
  std::unique_ptr<Bootstrap> b(new Bootstrap(rank, nranks));
  if (nranks == 1) return b;
  const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " (" + id.to_string() + ")";

  // 1. Listen, so that higher ranks can connect while we connect downwards.
  const int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (lfd < 0) return os_error("socket", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } lclose{lfd};
  sockaddr_un addr;
  socklen_t alen = address_of(id, rank, &addr);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), alen) != 0) {
    if (errno == EADDRINUSE)
      return error(Code::invalid_argument, who + ": another process is already this rank; give each process its own "
                                                 "rank, or make a new unique id for a new group");
    return os_error(who + ": bind", errno);
  }
  if (::listen(lfd, nranks) != 0) return os_error(who + ": listen", errno);

  Hello mine{};
  mine.magic = kHelloMagic;
  std::memcpy(mine.nonce, id.bytes.data() + 4, 16);
  mine.rank = rank;
  mine.nranks = nranks;
  auto check_hello = [&](const Hello& h, int expect_rank) -> Status {
    if (h.magic != kHelloMagic || std::memcmp(h.nonce, mine.nonce, 16) != 0)
      return error(Code::invalid_argument, who + ": a connection that is not a ConCCL rank of this id");
    if (h.nranks != nranks)
      return error(Code::invalid_argument, who + ": rank " + std::to_string(h.rank) + " was started with nranks " +
                                               std::to_string(h.nranks) + ", this rank with " + std::to_string(nranks) +
                                               "; every rank must pass the same nranks");
    if (h.rank < 0 || h.rank >= nranks || (expect_rank >= 0 && h.rank != expect_rank) ||
        (expect_rank < 0 && h.rank <= rank))
      return error(Code::internal, who + ": unexpected rank " + std::to_string(h.rank) + " in a hello");
    return Status();
  };

  // 2. Connect to every lower rank (retrying until it listens), say hello.
  for (int j = 0; j < rank; ++j) {
    sockaddr_un pa;
    const socklen_t plen = address_of(id, j, &pa);
    int fd = -1;
    while (true) {
      fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return os_error("socket", errno);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&pa), plen) == 0) break;
      const int e = errno;
      ::close(fd);
      if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN && e != EINTR)
        return os_error(who + ": connecting to rank " + std::to_string(j), e);
      if (deadline.expired()) {
        std::vector<int> missing;
        for (int k = j; k < rank; ++k) missing.push_back(k);
        return error(Code::timeout, who + ": rank(s) " + rank_list(missing) +
                                        " did not join by the deadline (not started, crashed, or started with "
                                        "another unique id)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    (void)::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    auto p = std::make_unique<Peer>();
    p->fd = fd;
    b->peers_[static_cast<size_t>(j)] = std::move(p);
    CONCCL_RETURN_IF_ERROR(io_exact(fd, &mine, sizeof mine, true, deadline, who + ": hello to rank " + std::to_string(j)));
  }

  // 3. Accept every higher rank; each says hello first, we answer.
  int accepted = 0;
  while (accepted < nranks - 1 - rank) {
    const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return os_error(who + ": accept", errno);
      if (deadline.expired()) {
        std::vector<int> missing;
        for (int k = rank + 1; k < nranks; ++k)
          if (!b->peers_[static_cast<size_t>(k)]) missing.push_back(k);
        return error(Code::timeout, who + ": rank(s) " + rank_list(missing) +
                                        " did not join by the deadline (not started, crashed, or started with "
                                        "another unique id)");
      }
      pollfd pf{lfd, POLLIN, 0};
      (void)::poll(&pf, 1, poll_ms(deadline));
      continue;
    }
    auto p = std::make_unique<Peer>();
    p->fd = fd;
    Hello h{};
    CONCCL_RETURN_IF_ERROR(io_exact(fd, &h, sizeof h, false, deadline, who + ": hello from a joining rank"));
    CONCCL_RETURN_IF_ERROR(check_hello(h, -1));
    if (b->peers_[static_cast<size_t>(h.rank)])
      return error(Code::invalid_argument, who + ": two processes joined as rank " + std::to_string(h.rank));
    CONCCL_RETURN_IF_ERROR(io_exact(fd, &mine, sizeof mine, true, deadline, who + ": answer to rank " + std::to_string(h.rank)));
    b->pids_[static_cast<size_t>(h.rank)] = peer_pid(fd);
    b->peers_[static_cast<size_t>(h.rank)] = std::move(p);
    ++accepted;
  }

  // 4. The lower ranks' answers.
  for (int j = 0; j < rank; ++j) {
    Peer& p = *b->peers_[static_cast<size_t>(j)];
    Hello h{};
    CONCCL_RETURN_IF_ERROR(io_exact(p.fd, &h, sizeof h, false, deadline, who + ": answer from rank " + std::to_string(j)));
    CONCCL_RETURN_IF_ERROR(check_hello(h, j));
    b->pids_[static_cast<size_t>(j)] = peer_pid(p.fd);
  }
  return b;
}

std::vector<int> Bootstrap::gone() const {
  std::vector<int> out;
  for (int r = 0; r < nranks_; ++r) {
    Peer* p = peers_[static_cast<size_t>(r)].get();
    if (!p) continue;
    if (!p->gone) {
      pollfd pf{p->fd, POLLRDHUP, 0};
      if (::poll(&pf, 1, 0) == 1 && (pf.revents & (POLLHUP | POLLRDHUP | POLLERR))) p->gone = true;
    }
    if (p->gone) out.push_back(r);
  }
  return out;
}

Status Bootstrap::check_peers(const std::string& doing) const {
  const std::vector<int> g = gone();
  if (g.empty()) return Status();
  std::string names;
  for (int r : g)
    names += (names.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " (pid " +
             std::to_string(pids_[static_cast<size_t>(r)]) + ")";
  return error(Code::unavailable, names + (g.size() == 1 ? " has" : " have") +
                                      " left the communicator (process exited or communicator destroyed) while rank " +
                                      std::to_string(rank_) + " was " + doing +
                                      "; destroy this communicator and start the group again");
}

Result<std::vector<Bootstrap::Message>> Bootstrap::exchange(const std::string& what, const std::string& mine,
                                                            const std::vector<int>& fds, Deadline deadline) {
  if (mine.size() > kMaxData || what.size() > 4096 || fds.size() > kMaxFds)
    return error(Code::invalid_argument, "bootstrap message too large (" + std::to_string(mine.size()) + " bytes, " +
                                             std::to_string(fds.size()) + " fds; at most 64 MiB and " +
                                             std::to_string(kMaxFds) + " fds)");
  const uint32_t seq = ++seq_;
  std::vector<Message> out(static_cast<size_t>(nranks_));
  out[static_cast<size_t>(rank_)].data = mine;
  if (nranks_ == 1) return out;

  FrameHeader h{kFrameMagic, seq, static_cast<uint32_t>(what.size()), static_cast<uint32_t>(mine.size()),
                static_cast<uint32_t>(fds.size())};
  std::string frame(reinterpret_cast<const char*>(&h), sizeof h);
  frame += what;
  frame += mine;

  std::vector<size_t> sent(static_cast<size_t>(nranks_), 0);
  std::vector<bool> got(static_cast<size_t>(nranks_), false);
  sent[static_cast<size_t>(rank_)] = frame.size();
  got[static_cast<size_t>(rank_)] = true;
  auto fail_gone = [&](int r) {
    peers_[static_cast<size_t>(r)]->gone = true;
    return check_peers("in " + what);
  };
  // Cleans up fds already received on failure.
  struct Owned {
    std::vector<Message>* m;
    bool keep = false;
    ~Owned() {
      if (keep) return;
      for (Message& x : *m)
        for (int f : x.fds) ::close(f);
    }
  } owned{&out};

  while (true) {
    // Parse whatever complete frames have arrived.
    for (int r = 0; r < nranks_; ++r) {
      if (got[static_cast<size_t>(r)]) continue;
      Peer& p = *peers_[static_cast<size_t>(r)];
      if (p.in.size() < sizeof(FrameHeader)) continue;
      FrameHeader ph;
      std::memcpy(&ph, p.in.data(), sizeof ph);
      if (ph.magic != kFrameMagic || ph.what_len > 4096 || ph.data_len > kMaxData || ph.nfds > kMaxFds)
        return error(Code::internal, "rank " + std::to_string(r) + " sent a malformed bootstrap frame");
      if (p.in.size() < sizeof ph + ph.what_len) continue;
      const std::string theirs = p.in.substr(sizeof ph, ph.what_len);
      if (ph.seq != seq || theirs != what)
        return error(Code::invalid_argument,
                     "rank " + std::to_string(r) + " is in '" + theirs + "' (its call #" + std::to_string(ph.seq) +
                         ") while rank " + std::to_string(rank_) + " is in '" + what + "' (call #" +
                         std::to_string(seq) + "): every rank must make the same communicator calls in the same order");
      if (p.in.size() < sizeof ph + ph.what_len + ph.data_len) continue;
      if (p.in_fds.size() < ph.nfds)
        return error(Code::internal, "rank " + std::to_string(r) + "'s message lacks its file descriptors");
      Message& m = out[static_cast<size_t>(r)];
      m.data = p.in.substr(sizeof ph + ph.what_len, ph.data_len);
      for (uint32_t i = 0; i < ph.nfds; ++i) {
        m.fds.push_back(p.in_fds.front());
        p.in_fds.pop_front();
      }
      p.in.erase(0, sizeof ph + ph.what_len + ph.data_len);
      got[static_cast<size_t>(r)] = true;
    }
    bool done = true;
    for (int r = 0; r < nranks_; ++r) done &= got[static_cast<size_t>(r)] && sent[static_cast<size_t>(r)] == frame.size();
    if (done) break;
    if (deadline.expired()) {
      std::vector<int> late;
      for (int r = 0; r < nranks_; ++r)
        if (!got[static_cast<size_t>(r)] || sent[static_cast<size_t>(r)] != frame.size()) late.push_back(r);
      CONCCL_RETURN_IF_ERROR(check_peers("in " + what));
      return error(Code::timeout, "rank(s) " + rank_list(late) + " did not reach '" + what + "' by the deadline (rank " +
                                      std::to_string(rank_) + " waited): a rank is slow, stuck, or calling something else");
    }
    std::vector<pollfd> pfs;
    std::vector<int> who;
    for (int r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      short ev = POLLIN;
      if (sent[static_cast<size_t>(r)] < frame.size()) ev |= POLLOUT;
      pfs.push_back({peers_[static_cast<size_t>(r)]->fd, ev, 0});
      who.push_back(r);
    }
    (void)::poll(pfs.data(), pfs.size(), poll_ms(deadline, 50));
    for (size_t i = 0; i < pfs.size(); ++i) {
      const int r = who[i];
      Peer& p = *peers_[static_cast<size_t>(r)];
      size_t& s = sent[static_cast<size_t>(r)];
      if ((pfs[i].revents & POLLOUT) && s < frame.size()) {
        msghdr mh{};
        iovec iov{frame.data() + s, frame.size() - s};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxFds)];
        if (s == 0 && !fds.empty()) {  // the fds ride with the frame's first byte
          mh.msg_control = ctl;
          mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
          cmsghdr* c = CMSG_FIRSTHDR(&mh);
          c->cmsg_level = SOL_SOCKET;
          c->cmsg_type = SCM_RIGHTS;
          c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
          std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
        }
        const ssize_t n = ::sendmsg(p.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) s += static_cast<size_t>(n);
        else if (n < 0 && errno == EPIPE) return fail_gone(r);
        else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          return os_error("sending '" + what + "' to rank " + std::to_string(r), errno);
      }
      if (pfs[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[65536];
        alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxFds)];
        msghdr mh{};
        iovec iov{buf, sizeof buf};
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = ctl;
        mh.msg_controllen = sizeof ctl;
        const ssize_t n = ::recvmsg(p.fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (n < 0 && errno != ECONNRESET) return os_error("receiving '" + what + "' from rank " + std::to_string(r), errno);
        for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
          if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t j = 0; j < k; ++j) {
              int f;
              std::memcpy(&f, CMSG_DATA(c) + j * sizeof(int), sizeof f);
              p.in_fds.push_back(f);
            }
          }
        if (mh.msg_flags & MSG_CTRUNC)
          return error(Code::resource_exhausted, "file descriptors from rank " + std::to_string(r) +
                                                     " were dropped (MSG_CTRUNC): raise the open-files limit (ulimit -n)");
        if (n <= 0) {
          if (!got[static_cast<size_t>(r)]) return fail_gone(r);
          p.gone = true;
          continue;
        }
        p.in.append(buf, static_cast<size_t>(n));
      }
    }
  }
  owned.keep = true;
  return out;
}

Status Bootstrap::barrier(const std::string& what, Deadline deadline) {
  Result<std::vector<Message>> r = exchange(what, std::string(), {}, deadline);
  return r.ok() ? Status() : r.status();
}

}  // namespace conccl
