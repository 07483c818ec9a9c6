// src/bootstrap/handshake.cpp - the joining end of the handshake
// (handshake.hpp) and the unique id: where a rank's listener is found, how a
// joining rank proves that it knows the id, and the id's text form.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "bootstrap/handshake.hpp"
#include "bootstrap/wire.hpp"

namespace conccl {

using namespace bootstrap_detail;

// ---- the handshake (handshake.hpp) ----

namespace bootstrap_detail {

std::string listener_name(const UniqueId& id, int rank) {
  std::string parts;
  put(&parts, static_cast<int32_t>(rank));
  const util::Digest256 d = keyed(id, "conccl bootstrap v2: socket name", parts);
  return "conccl-" + hex_bytes(d.data(), 16) + "-" + std::to_string(rank);
}

std::string id_fingerprint(const UniqueId& id) {
  const util::Digest256 d = keyed(id, "conccl bootstrap v2: fingerprint", std::string());
  return hex_bytes(d.data(), 4);
}

Result<int> connect_abstract(const std::string& name) {
  sockaddr_un a;
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof a.sun_path) return error(Code::invalid_argument, "socket name too long: " + name);
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: the abstract namespace
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return os_error("socket", errno);
  // A Unix stream connect completes at once or fails: EAGAIN when the
  // listener's backlog is full (unix(7)), never EINPROGRESS.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), len) == 0) return fd;
  const int e = errno;
  ::close(fd);
  if (e == ECONNREFUSED || e == ENOENT) return error(Code::not_found, "nobody listens on @" + name);
  if (e == EAGAIN || e == EINTR) return error(Code::busy, "@" + name + "'s backlog is full");
  return os_error("connecting to @" + name, e);
}

bool other_uids_allowed_by_environment() {
  const char* v = std::getenv("CONCCL_BOOTSTRAP_ALLOW_OTHER_UIDS");
  return v && std::strcmp(v, "1") == 0;
}

Status join_handshake(int fd, const UniqueId& id, int rank, int listener_rank, int nranks, bool allow_other_uids,
                      Deadline deadline) {
  const std::string them = "rank " + std::to_string(listener_rank);
  const PeerCred cred = peer_cred(fd);
  if (!allow_other_uids && cred.uid != static_cast<long>(::geteuid()))
    return error(Code::unavailable, "the process listening as " + them + " (pid " + std::to_string(cred.pid) +
                                        ") is refused: " + other_uid_text(cred.uid) + ". " + kOtherUidFix);
  Hello mine{};
  mine.magic = kHelloMagic;
  mine.rank = rank;
  mine.nranks = nranks;
  CONCCL_RETURN_IF_ERROR(random_bytes(mine.nonce, sizeof mine.nonce, "a handshake nonce"));
  const std::string refused = them + " closed the connection during the handshake: it refused this process (it "
                                     "runs as another user, or was started with another unique id: see " +
                              them + "'s error)";
  bool closed = false;
  Status st = io_exact(fd, &mine, sizeof mine, true, deadline, "hello to " + them, &closed);
  Challenge c{};
  if (st.ok()) st = io_exact(fd, &c, sizeof c, false, deadline, "challenge from " + them, &closed);
  if (closed) return error(Code::unavailable, refused);
  CONCCL_RETURN_IF_ERROR(st);
  if (c.magic != kChallengeMagic)
    return error(Code::unavailable, "the process listening as " + them + " (pid " + std::to_string(cred.pid) +
                                        ") answered with something other than a ConCCL challenge of this version "
                                        "(magic " + hex(c.magic) + "): every rank must run the same ConCCL");
  const std::string t = transcript(c.nonce, mine.nonce, rank, listener_rank, nranks, c.nranks);
  Proof p{};
  p.magic = kProofMagic;
  const util::Digest256 mac = keyed(id, kJoiningLabel, t);
  std::memcpy(p.mac, mac.data(), sizeof p.mac);
  st = io_exact(fd, &p, sizeof p, true, deadline, "proof to " + them, &closed);
  Proof a{};
  if (st.ok()) st = io_exact(fd, &a, sizeof a, false, deadline, "proof from " + them, &closed);
  if (closed) return error(Code::unavailable, refused);
  CONCCL_RETURN_IF_ERROR(st);
  util::Digest256 theirs;
  std::memcpy(theirs.data(), a.mac, theirs.size());
  if (a.magic != kAcceptMagic || !util::digests_equal(theirs, keyed(id, kListenerLabel, t)))
    return error(Code::unavailable, "the process listening as " + them + " (pid " + std::to_string(cred.pid) +
                                        ") did not prove that it knows the unique id: it is not a rank of this "
                                        "communicator; nothing was shared with it");
  if (c.nranks != nranks)
    return error(Code::invalid_argument, them + " was started with nranks " + std::to_string(c.nranks) +
                                             ", rank " + std::to_string(rank) + " with " + std::to_string(nranks) +
                                             "; every rank must pass the same nranks");
  return Status();
}

}  // namespace bootstrap_detail

// ---- UniqueId ----

std::string UniqueId::to_string() const { return "conccl-uid-" + secret_hex(*this); }

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
  CONCCL_RETURN_IF_ERROR(random_bytes(id.bytes.data() + 4, kSecretBytes, "a unique id"));
  return id;
}

}  // namespace conccl
