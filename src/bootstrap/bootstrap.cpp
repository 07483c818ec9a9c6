// src/bootstrap/bootstrap.cpp - ranks of one node meeting over Unix sockets.
//
// Every rank listens on an abstract-namespace Unix stream socket (unix(7): no
// file to clean up) whose name is derived from the unique id's secret and
// the rank by HMAC-SHA-256 (src/bootstrap/handshake.hpp), connects to every
// lower rank and accepts every higher one: a full mesh, so each rank learns
// at once (POLLHUP) when any other's process exits. Before anything else
// crosses a connection, both ends prove that they know the id (a challenge
// and response on its secret) and the listener refuses a process of another
// user (SO_PEERCRED, socket(7)) unless told to allow it. A listener drops a
// connection that fails the handshake or does not finish it in 2 s, and
// keeps listening. Memory crosses as file descriptors in SCM_RIGHTS
// messages (unix(7), cmsg(3)). All sockets are non-blocking and every step
// polls against the caller's deadline.
#include "conccl/bootstrap.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "bootstrap/handshake.hpp"
#include "bootstrap/wire.hpp"
#include "util/sha256.hpp"

namespace conccl {

using namespace bootstrap_detail;

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

Result<std::unique_ptr<Bootstrap>> Bootstrap::connect(const UniqueId& id, int rank, int nranks, Deadline deadline,
                                                      bool allow_other_uids) {
  using namespace bootstrap_detail;
  if (std::memcmp(id.bytes.data(), kIdMagic, 4) != 0)
    return error(Code::invalid_argument, "the unique id was not made by make_unique_id() (or was damaged in transit)");
  if (nranks < 1 || nranks > kMaxRanks)
    return error(Code::invalid_argument, "nranks " + std::to_string(nranks) + " must be 1.." + std::to_string(kMaxRanks));
  if (rank < 0 || rank >= nranks)
    return error(Code::invalid_argument, "rank " + std::to_string(rank) + " must be 0.." + std::to_string(nranks - 1));
  std::unique_ptr<Bootstrap> b(new Bootstrap(rank, nranks));
  if (nranks == 1) return b;
  allow_other_uids = allow_other_uids || other_uids_allowed_by_environment();
  // The id's fingerprint, never the id: errors end up in logs.
  const std::string who =
      "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " (unique id " + id_fingerprint(id) + ")";
  auto join_timeout = [&](const std::vector<int>& missing, const std::string& detail) {
    return error(Code::timeout, who + ": rank(s) " + rank_list(missing) +
                                    " did not join by the deadline (not started, crashed, stuck, or started with "
                                    "another unique id)" + detail);
  };

  // 1. Listen, so that higher ranks can connect while we connect downwards.
  const int lfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (lfd < 0) return os_error(who + ": socket", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } lclose{lfd};
  {
    const std::string name = listener_name(id, rank);
    sockaddr_un addr;
    std::memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    const auto alen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), alen) != 0) {
      if (errno == EADDRINUSE)
        return error(Code::invalid_argument, who + ": another process is already this rank; give each process its "
                                                   "own rank, or make a new unique id for a new group");
      return os_error(who + ": bind", errno);
    }
  }
  if (::listen(lfd, SOMAXCONN) != 0) return os_error(who + ": listen", errno);

  // 2. Connect to every lower rank (retrying until it listens) and handshake
  // with it. Rank j answers once it has joined the ranks below it.
  for (int j = 0; j < rank; ++j) {
    std::vector<int> missing;
    for (int k = j; k < rank; ++k) missing.push_back(k);
    int fd = -1;
    while (true) {
      Result<int> c = connect_abstract(listener_name(id, j));
      if (c.ok()) {
        fd = *c;
        break;
      }
      if (c.status().code() != Code::not_found && c.status().code() != Code::busy)
        return c.status().prefix(who + ": connecting to rank " + std::to_string(j));
      if (deadline.expired()) return join_timeout(missing, "");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    auto p = std::make_unique<Peer>();
    p->fd = fd;
    b->peers_[static_cast<size_t>(j)] = std::move(p);
    Status st = join_handshake(fd, id, rank, j, nranks, allow_other_uids, deadline);
    if (st.code() == Code::timeout)
      return join_timeout(missing, "; rank " + std::to_string(j) + " listens but did not finish the handshake (" +
                                       (j > 0 ? "it waits for a rank below it, or is stuck)" : "it is stuck)"));
    CONCCL_RETURN_IF_ERROR(st.prefix(who));
    b->pids_[static_cast<size_t>(j)] = peer_cred(fd).pid;
  }

  // 3. Accept every higher rank. Each connection must finish its handshake
  // within kHandshakeTimeoutMs; one that fails it (another user, another id,
  // not ConCCL at all, or silent) is dropped, and listening goes on.
  struct Pending {
    int fd = -1;
    PeerCred cred;
    Deadline until = Deadline::now();
    bool challenged = false;
    Hello hello{};
    uint8_t nonce[16] = {};
    std::string in;
    ~Pending() {
      if (fd >= 0) ::close(fd);
    }
  };
  std::vector<std::unique_ptr<Pending>> pending;
  std::vector<std::string> notes;
  size_t refusals = 0;
  bool other_uid_refused = false;
  auto refuse = [&](const PeerCred& c, const std::string& why) {
    if (notes.size() < kMaxRefusalNotes)
      notes.push_back("pid " + std::to_string(c.pid) + " (uid " + std::to_string(c.uid) + ") " + why);
    ++refusals;
  };
  auto missing_above = [&] {
    std::vector<int> m;
    for (int k = rank + 1; k < nranks; ++k)
      if (!b->peers_[static_cast<size_t>(k)]) m.push_back(k);
    return m;
  };
  const auto handshake_span = std::chrono::milliseconds(kHandshakeTimeoutMs);
  int accepted = 0;
  while (accepted < nranks - 1 - rank) {
    for (auto it = pending.begin(); it != pending.end();) {
      if ((*it)->until.expired()) {
        refuse((*it)->cred, (*it)->challenged ? "did not answer the challenge in time" : "sent no hello in time");
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    if (deadline.expired()) {
      std::string detail;
      if (refusals) {
        detail = "; meanwhile " + std::to_string(refusals) + " connection(s) to this rank were refused: ";
        for (size_t i = 0; i < notes.size(); ++i) detail += (i ? "; " : "") + notes[i];
        if (refusals > notes.size()) detail += "; ...";
        if (other_uid_refused) detail += std::string(". ") + kOtherUidFix;
      }
      return join_timeout(missing_above(), detail);
    }
    std::vector<pollfd> pfs;
    if (pending.size() < kMaxPending) pfs.push_back({lfd, POLLIN, 0});
    int wait_ms = poll_ms(deadline);
    for (const auto& p : pending) {
      pfs.push_back({p->fd, POLLIN, 0});
      wait_ms = std::min(wait_ms, poll_ms(p->until));
    }
    (void)::poll(pfs.data(), pfs.size(), wait_ms);

    // New connections: another user's are refused before a byte is read.
    while (pending.size() < kMaxPending) {
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return os_error(who + ": accept", errno);
      }
      auto p = std::make_unique<Pending>();
      p->fd = fd;
      p->cred = peer_cred(fd);
      if (!allow_other_uids && p->cred.uid != static_cast<long>(::geteuid())) {
        refuse(p->cred, "was refused: " + other_uid_text(p->cred.uid));
        other_uid_refused = true;
        continue;  // closed by ~Pending
      }
      p->until = Deadline::after(std::min<std::chrono::nanoseconds>(handshake_span, deadline.remaining()));
      pending.push_back(std::move(p));
    }

    // Handshakes under way.
    for (auto it = pending.begin(); it != pending.end();) {
      Pending& p = **it;
      const size_t need = p.challenged ? sizeof(Proof) : sizeof(Hello);
      char buf[sizeof(Proof) > sizeof(Hello) ? sizeof(Proof) : sizeof(Hello)];
      const ssize_t n = ::recv(p.fd, buf, need - p.in.size(), MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        ++it;
        continue;
      }
      if (n <= 0) {
        refuse(p.cred, "closed the connection before it finished the handshake");
        it = pending.erase(it);
        continue;
      }
      p.in.append(buf, static_cast<size_t>(n));
      if (p.in.size() < need) {
        ++it;
        continue;
      }
      if (!p.challenged) {
        std::memcpy(&p.hello, p.in.data(), sizeof p.hello);
        p.in.clear();
        if (p.hello.magic != kHelloMagic) {
          refuse(p.cred, "sent something other than a ConCCL hello of this version (magic " + hex(p.hello.magic) + ")");
          it = pending.erase(it);
          continue;
        }
        Challenge c{};
        c.magic = kChallengeMagic;
        c.nranks = nranks;
        CONCCL_RETURN_IF_ERROR(random_bytes(p.nonce, sizeof p.nonce, "a handshake nonce"));
        std::memcpy(c.nonce, p.nonce, sizeof c.nonce);
        Status st = io_exact(p.fd, &c, sizeof c, true, p.until, "challenge");
        if (!st.ok()) {
          refuse(p.cred, "did not take the challenge: " + st.message());
          it = pending.erase(it);
          continue;
        }
        p.challenged = true;
        ++it;
        continue;
      }
      Proof proof;
      std::memcpy(&proof, p.in.data(), sizeof proof);
      const std::string t = transcript(p.nonce, p.hello.nonce, p.hello.rank, rank, p.hello.nranks, nranks);
      util::Digest256 theirs;
      std::memcpy(theirs.data(), proof.mac, theirs.size());
      if (proof.magic != kProofMagic || !util::digests_equal(theirs, keyed(id, kJoiningLabel, t))) {
        refuse(p.cred, "did not prove that it knows the unique id (started with another id, or not a ConCCL rank)");
        it = pending.erase(it);
        continue;
      }
      Proof answer{};
      answer.magic = kAcceptMagic;
      const util::Digest256 mac = keyed(id, kListenerLabel, t);
      std::memcpy(answer.mac, mac.data(), sizeof answer.mac);
      Status st = io_exact(p.fd, &answer, sizeof answer, true, p.until, "proof");
      if (!st.ok()) {
        refuse(p.cred, "did not take this rank's proof: " + st.message());
        it = pending.erase(it);
        continue;
      }
      // A rank of this communicator: what it says is now to be believed.
      const Hello& h = p.hello;
      if (h.nranks != nranks)
        return error(Code::invalid_argument, who + ": rank " + std::to_string(h.rank) + " was started with nranks " +
                                                 std::to_string(h.nranks) + ", this rank with " +
                                                 std::to_string(nranks) + "; every rank must pass the same nranks");
      if (h.rank <= rank || h.rank >= nranks)
        return error(Code::invalid_argument, who + ": a process of this unique id (pid " + std::to_string(p.cred.pid) +
                                                 ") joined as rank " + std::to_string(h.rank) +
                                                 ", which does not connect to rank " + std::to_string(rank) +
                                                 " (ranks connect only to lower ranks): every rank must run the "
                                                 "same ConCCL");
      if (b->peers_[static_cast<size_t>(h.rank)])
        return error(Code::invalid_argument, who + ": two processes joined as rank " + std::to_string(h.rank) +
                                                 " (pids " + std::to_string(b->pids_[static_cast<size_t>(h.rank)]) +
                                                 " and " + std::to_string(p.cred.pid) +
                                                 "); give each process its own rank");
      auto peer = std::make_unique<Peer>();
      peer->fd = p.fd;
      p.fd = -1;
      b->pids_[static_cast<size_t>(h.rank)] = p.cred.pid;
      b->peers_[static_cast<size_t>(h.rank)] = std::move(peer);
      ++accepted;
      it = pending.erase(it);
    }
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

std::vector<int> Bootstrap::hung_up() const {
  std::vector<int> out;
  for (int r = 0; r < nranks_; ++r) {
    const Peer* p = peers_[static_cast<size_t>(r)].get();
    if (!p || p->fd < 0) continue;
    pollfd pf{p->fd, POLLRDHUP, 0};
    if (::poll(&pf, 1, 0) == 1 && (pf.revents & (POLLHUP | POLLRDHUP | POLLERR))) out.push_back(r);
  }
  return out;
}

std::string Bootstrap::describe_rank(int rank) const {
  if (rank < 0 || rank >= nranks_) return "rank " + std::to_string(rank);
  return "rank " + std::to_string(rank) + " (pid " + std::to_string(pids_[static_cast<size_t>(rank)]) + ")";
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
  // What a peer sent that no ConCCL rank of this version sends: its stream
  // cannot be trusted further.
  auto protocol_error = [&](int r, const std::string& what_was_wrong) {
    return error(Code::invalid_argument,
                 "rank " + std::to_string(r) + " (pid " + std::to_string(pids_[static_cast<size_t>(r)]) + ") sent " +
                     what_was_wrong + " in '" + what + "' to rank " + std::to_string(rank_) +
                     ": it runs another ConCCL version, or something else wrote to its socket; destroy this "
                     "communicator and start every rank with the same ConCCL");
  };
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
      std::string wrong;
      if (ph.magic != kFrameMagic) wrong = "magic " + hex(ph.magic) + ", not " + hex(kFrameMagic);
      else if (ph.what_len > 4096) wrong = "a call name of " + std::to_string(ph.what_len) + " bytes (at most 4096)";
      else if (ph.data_len > kMaxData) wrong = std::to_string(ph.data_len) + " bytes of data (at most 64 MiB)";
      else if (ph.nfds > kMaxFds) wrong = std::to_string(ph.nfds) + " fds (at most " + std::to_string(kMaxFds) + ")";
      if (!wrong.empty()) return protocol_error(r, "a malformed frame header (" + wrong + ")");
      if (p.in.size() < sizeof ph + ph.what_len) continue;
      const std::string theirs = p.in.substr(sizeof ph, ph.what_len);
      if (ph.seq != seq || theirs != what)
        return error(Code::invalid_argument,
                     "rank " + std::to_string(r) + " is in '" + theirs + "' (its call #" + std::to_string(ph.seq) +
                         ") while rank " + std::to_string(rank_) + " is in '" + what + "' (call #" +
                         std::to_string(seq) + "): every rank must make the same communicator calls in the same order");
      if (p.in.size() < sizeof ph + ph.what_len + ph.data_len) continue;
      if (p.in_fds.size() < ph.nfds)
        return protocol_error(r, "a message announcing " + std::to_string(ph.nfds) + " fds with only " +
                                     std::to_string(p.in_fds.size()) + " attached");
      Message& m = out[static_cast<size_t>(r)];
      m.data = p.in.substr(sizeof ph + ph.what_len, ph.data_len);
      for (uint32_t i = 0; i < ph.nfds; ++i) {
        m.fds.push_back(p.in_fds.front());
        p.in_fds.pop_front();
      }
      p.in.erase(0, sizeof ph + ph.what_len + ph.data_len);
      got[static_cast<size_t>(r)] = true;
      ++messages_received_;
    }
    bool done = true;
    for (int r = 0; r < nranks_; ++r) done &= got[static_cast<size_t>(r)] && sent[static_cast<size_t>(r)] == frame.size();
    if (done) break;
    if (deadline.expired()) {
      // Named: the ranks whose message did not come, and those that did not
      // take this rank's (a process stopped after it sent, say).
      std::vector<int> late, silent, deaf;
      for (int r = 0; r < nranks_; ++r) {
        const bool no_msg = !got[static_cast<size_t>(r)], unread = sent[static_cast<size_t>(r)] != frame.size();
        if (no_msg || unread) late.push_back(r);
        if (no_msg) silent.push_back(r);
        if (unread) deaf.push_back(r);
      }
      CONCCL_RETURN_IF_ERROR(check_peers("in " + what));
      std::string detail;
      if (!silent.empty()) detail += "no message from rank(s) " + rank_list(silent);
      if (!deaf.empty()) detail += (detail.empty() ? "" : "; ") + std::string("rank(s) ") + rank_list(deaf) +
                                   " did not take this rank's";
      return error(Code::timeout, "rank(s) " + rank_list(late) + " did not reach '" + what + "' by the deadline (rank " +
                                      std::to_string(rank_) + " waited; " + detail +
                                      "): a rank is slow, stuck, or calling something else");
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
        if (n > 0) {
          s += static_cast<size_t>(n);
          if (s == frame.size()) ++messages_sent_;  // the whole frame is out
        }
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
