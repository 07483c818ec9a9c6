// src/bootstrap/wire.cpp - the helpers of wire.hpp.
#include "bootstrap/wire.hpp"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace conccl::bootstrap_detail {

const uint8_t* secret_of(const UniqueId& id) { return id.bytes.data() + 4; }
std::string hex_bytes(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}
util::Digest256 keyed(const UniqueId& id, const char* label, const std::string& parts) {
  std::string m(label);
  m += '\0';
  m += parts;
  return util::hmac_sha256(secret_of(id), kSecretBytes, m.data(), m.size());
}
std::string transcript(const uint8_t* nonce_l, const uint8_t* nonce_j, int32_t joining, int32_t listening,
                       int32_t nranks_j, int32_t nranks_l) {
  std::string t(reinterpret_cast<const char*>(nonce_l), 16);
  t.append(reinterpret_cast<const char*>(nonce_j), 16);
  put(&t, joining);
  put(&t, listening);
  put(&t, nranks_j);
  put(&t, nranks_l);
  return t;
}
Status os_error(const std::string& what, int err) {
  return error(Code::unavailable, what + ": " + std::strerror(err));
}
Status random_bytes(uint8_t* p, size_t n, const std::string& what) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(p + got, n - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return os_error("getrandom for " + what, errno);
    }
    got += static_cast<size_t>(r);
  }
  return Status();
}
int poll_ms(Deadline deadline, int cap_ms) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, cap_ms));
}
Status io_exact(int fd, void* buf, size_t n, bool write, Deadline deadline, const std::string& what,
                bool* closed) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = write ? ::send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE))) {
      if (closed) *closed = true;
      return error(Code::unavailable, what + ": the other side closed the connection");
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return os_error(what, errno);
    if (deadline.expired()) return error(Code::timeout, what + ": no answer by the deadline");
    pollfd pf{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    (void)::poll(&pf, 1, poll_ms(deadline));
  }
  return Status();
}
PeerCred peer_cred(int fd) {
  ucred c{};
  socklen_t len = sizeof c;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) return {};
  return {static_cast<int>(c.pid), static_cast<long>(c.uid)};
}
std::string other_uid_text(long theirs) {
  return "it runs as uid " + std::to_string(theirs) + ", this process as uid " + std::to_string(::geteuid());
}
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}
std::string secret_hex(const UniqueId& id) { return hex_bytes(secret_of(id), kSecretBytes); }

}  // namespace conccl::bootstrap_detail
