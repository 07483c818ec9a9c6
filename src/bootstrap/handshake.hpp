// src/bootstrap/handshake.hpp - the bootstrap's socket names and the joining
// side of its handshake, shared by Bootstrap::connect and by the tests that
// play a stranger on the machine (tests/multiproc/bootstrap_security_test.cpp).
//
// A joining rank connects to a lower rank's listener and both prove that
// they hold the unique id's 16 secret bytes, before anything else crosses:
//   joining -> listener  Hello     {magic, rank, nranks, nonce_j}
//   listener -> joining  Challenge {magic, nranks, nonce_l}
//   joining -> listener  Proof     {magic, HMAC(secret, "...joining rank's proof" || transcript)}
//   listener -> joining  Proof     {magic, HMAC(secret, "...listener's proof" || transcript)}
// where the transcript is nonce_l || nonce_j || both ranks || both nranks
// (HMAC-SHA-256, RFC 2104). Each side's proof covers a nonce the other just
// chose, so no proof can be replayed, and the two labels keep one side's
// proof from serving as the other's. The listener proves itself only after
// the joining rank has, so a stranger learns nothing but a random nonce.
// The secret itself never crosses.
#pragma once

#include <string>

#include "conccl/bootstrap.hpp"

namespace conccl::bootstrap_detail {

// How long a listener waits for one connection's hello and proof before it
// drops that connection and goes on listening (bounded by the join deadline).
inline constexpr int kHandshakeTimeoutMs = 2000;

// The abstract-namespace name (unix(7); without the leading NUL) of `rank`'s
// listener: "conccl-" + 32 hex digits of HMAC(secret, label || rank) + "-"
// + rank. /proc/net/unix shows it to every user; it reveals nothing of the
// secret, nor the names of the other ranks' listeners.
std::string listener_name(const UniqueId& id, int rank);

// 8 hex digits that tell ids apart in messages, derived like the names.
std::string id_fingerprint(const UniqueId& id);

// One attempt to connect a non-blocking, close-on-exec Unix stream socket to
// the abstract `name`: the fd, or not_found while nobody listens there
// (ECONNREFUSED), busy while its backlog is full (EAGAIN).
Result<int> connect_abstract(const std::string& name);

// The joining side's handshake, as `rank` of `nranks`, with the listener of
// `listener_rank` on the connected socket `fd`: refuses a listener of another
// uid (unless allow_other_uids), proves that this process knows `id`, and
// checks that the listener knows it too. Errors: timeout when the listener
// does not answer, unavailable when it refuses us or fails its proof,
// invalid_argument when it was started with another nranks.
Status join_handshake(int fd, const UniqueId& id, int rank, int listener_rank, int nranks, bool allow_other_uids,
                      Deadline deadline);

// Whether CONCCL_BOOTSTRAP_ALLOW_OTHER_UIDS=1 is set.
bool other_uids_allowed_by_environment();

}  // namespace conccl::bootstrap_detail
