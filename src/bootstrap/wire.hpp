// src/bootstrap/wire.hpp - what the bootstrap's two ends share
// (bootstrap.cpp, handshake.cpp): the handshake's and frames' layouts and
// limits, the keyed values derived from the id's secret, and the
// non-blocking socket steps. Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "conccl/bootstrap.hpp"
#include "util/sha256.hpp"

namespace conccl::bootstrap_detail {

inline constexpr uint8_t kIdMagic[4] = {'C', 'C', 'L', '1'};
// Version 2 of the handshake: another magic, so that a rank of an older
// ConCCL is dropped as "not a ConCCL hello of this version".
inline constexpr uint32_t kHelloMagic = 0x32484343;      // "CCH2"
inline constexpr uint32_t kChallengeMagic = 0x32434343;  // "CCC2"
inline constexpr uint32_t kProofMagic = 0x32504343;      // "CCP2"
inline constexpr uint32_t kAcceptMagic = 0x32414343;     // "CCA2"
inline constexpr uint32_t kFrameMagic = 0x46434343;      // "CCCF"
// Per message: Linux's SCM_MAX_FD (253, include/net/scm.h), the most one
// SCM_RIGHTS message carries. A plan's buffers may need many: a PyTorch
// tensor of expandable segments is one region (one fd) per 20 MiB or so.
inline constexpr size_t kMaxFds = 253;
inline constexpr uint32_t kMaxData = 64u << 20;
inline constexpr int kMaxRanks = 256;
// Connections a listener handshakes with at once; more wait in its backlog.
inline constexpr size_t kMaxPending = 64;
// Refused connections described in a join's timeout (the rest are counted).
inline constexpr size_t kMaxRefusalNotes = 4;
inline constexpr size_t kSecretBytes = 16;

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t nranks;
  uint8_t nonce[16];
};

struct Challenge {
  uint32_t magic;
  int32_t nranks;
  uint8_t nonce[16];
};

struct Proof {
  uint32_t magic;
  uint8_t mac[32];
};

struct FrameHeader {
  uint32_t magic;
  uint32_t seq;
  uint32_t what_len;
  uint32_t data_len;
  uint32_t nfds;
};

template <typename T>
inline void put(std::string* s, const T& v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof v);
}

inline constexpr const char* kJoiningLabel = "conccl bootstrap v2: joining rank's proof";
inline constexpr const char* kListenerLabel = "conccl bootstrap v2: listener's proof";

struct PeerCred {
  int pid = -1;
  long uid = -1;  // -1: unknown
};

inline constexpr const char* kOtherUidFix =
    "ConCCL refuses ranks of other users (they would map this process's memory); to allow them, set "
    "CONCCL_BOOTSTRAP_ALLOW_OTHER_UIDS=1 (or pass allow_other_uids to Bootstrap::connect) in every rank";

// The helpers of both ends (wire.cpp).
const uint8_t* secret_of(const UniqueId& id);
std::string hex_bytes(const uint8_t* p, size_t n);
// HMAC(secret, label || NUL || parts): every value the bootstrap derives
// from the secret, each under its own label.
util::Digest256 keyed(const UniqueId& id, const char* label, const std::string& parts);
// What both proofs of one handshake cover: both nonces, both ranks, both
// nranks.
std::string transcript(const uint8_t* nonce_l, const uint8_t* nonce_j, int32_t joining, int32_t listening,
                       int32_t nranks_j, int32_t nranks_l);
Status os_error(const std::string& what, int err);
Status random_bytes(uint8_t* p, size_t n, const std::string& what);
int poll_ms(Deadline deadline, int cap_ms = 100);
// Reads or writes exactly n bytes of a non-blocking socket by the deadline.
// No file descriptors are taken: any that a peer attached are discarded by
// the kernel (unix(7): without a control buffer they are closed).
// *closed (when given) tells a peer that closed the connection from other
// failures.
Status io_exact(int fd, void* buf, size_t n, bool write, Deadline deadline, const std::string& what,
                bool* closed = nullptr);
PeerCred peer_cred(int fd);
// Why a peer of another user is refused (how to allow it: kOtherUidFix).
std::string other_uid_text(long theirs);
std::string rank_list(const std::vector<int>& ranks);
std::string secret_hex(const UniqueId& id);

}  // namespace conccl::bootstrap_detail
