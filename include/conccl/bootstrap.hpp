// conccl/bootstrap.hpp - how ranks in separate processes find each other.
//
// As with NCCL (ncclGetUniqueId / ncclCommInitRank): one process makes a
// UniqueId, the user hands it to every rank (a file, an environment variable,
// their own key-value store), and every rank creates its communicator from
// it (Communicator::create(device, rank, nranks, id)). The ranks of one node
// then connect to each other over Unix domain sockets in the abstract
// namespace (no files to clean up), and pass memory as file descriptors
// (SCM_RIGHTS). See docs/multiprocess.md.
//
// The id is a secret: a process that has it can join the group and map its
// memory. The sockets are named by a hash of it, which reveals nothing of it
// (every user can list the names in /proc/net/unix); every connection starts
// with both ends proving that they know it, and a rank refuses processes of
// other users unless allowed (Bootstrap::connect). Hand the id to the ranks
// the way you would hand them a password: not on a command line, which
// every user can read in /proc/<pid>/cmdline.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conccl/deadline.hpp"
#include "conccl/status.hpp"

namespace conccl {

// 128 bytes, the size of ncclUniqueId, so a user's transport that carries
// those carries these. Only the first 20 bytes are used (magic + 16 secret
// random bytes).
struct UniqueId {
  std::array<uint8_t, 128> bytes{};

  // "conccl-uid-" + 32 hex digits: the printable form, for files and
  // environment variables.
  std::string to_string() const;
  static Result<UniqueId> parse(const std::string& text);
  bool operator==(const UniqueId& o) const { return bytes == o.bytes; }
};

// A fresh id (16 random bytes from getrandom).
Result<UniqueId> make_unique_id();

// The ranks' connections: a full mesh of Unix stream sockets, so that every
// rank sees at once when any other rank's process goes away. Collective
// calls (exchange, barrier) must be made by every rank in the same order;
// a rank that calls something else is named in the error.
class Bootstrap {
 public:
  // Connects rank `rank` of `nranks` (1..256) to the others; returns when
  // every pair is connected, or at the deadline with an error naming the
  // ranks that did not join (and the connections this rank refused).
  //
  // Every connection is refused unless both of its processes prove that
  // they know `id`, and unless both run as the same user (SO_PEERCRED's
  // uid): `allow_other_uids`, or CONCCL_BOOTSTRAP_ALLOW_OTHER_UIDS=1 in the
  // environment, lifts the second check; every rank must allow it. A
  // connection that fails the handshake, or does not finish it in 2 s, is
  // dropped and the rank goes on listening.
  static Result<std::unique_ptr<Bootstrap>> connect(const UniqueId& id, int rank, int nranks, Deadline deadline,
                                                    bool allow_other_uids = false);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int size() const { return nranks_; }
  int pid_of(int rank) const { return pids_[static_cast<size_t>(rank)]; }

  // One message from each rank: every rank gives `mine` (and file
  // descriptors, duplicated into the receivers; the caller keeps its own)
  // and receives everyone's in rank order (its own included, without fds).
  // `what` names the step for errors and must match on every rank.
  struct Message {
    std::string data;
    std::vector<int> fds;  // owned by the receiver: close them
  };
  Result<std::vector<Message>> exchange(const std::string& what, const std::string& mine,
                                        const std::vector<int>& fds, Deadline deadline);
  Status barrier(const std::string& what, Deadline deadline);

  // Point-to-point messages this rank has sent to and received from the
  // other ranks since connect() (an exchange or barrier of n ranks: n - 1
  // each way), for counting host round trips (Communicator::stats).
  uint64_t messages_sent() const { return messages_sent_; }
  uint64_t messages_received() const { return messages_received_; }

  // Ranks whose process has gone (its socket hung up), without blocking.
  std::vector<int> gone() const;
  // The same, polled without changing any state: another thread (a
  // watchdog) may call it while this one exchanges.
  std::vector<int> hung_up() const;
  // "rank 2 (pid 1234)"
  std::string describe_rank(int rank) const;
  // An error naming the gone ranks, or ok when all are there.
  Status check_peers(const std::string& doing) const;

 private:
  struct Peer;
  Bootstrap(int rank, int nranks);
  int rank_;
  int nranks_;
  std::vector<int> pids_;
  std::vector<std::unique_ptr<Peer>> peers_;  // [rank]; null for self
  uint32_t seq_ = 0;
  uint64_t messages_sent_ = 0;
  uint64_t messages_received_ = 0;
};

}  // namespace conccl
