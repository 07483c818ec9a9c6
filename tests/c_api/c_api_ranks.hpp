// tests/c_api/c_api_ranks.hpp - what the C API tests share (c_api_test.cpp,
// c_api_misuse_test.cpp, heap_test.cpp, reductions_test.cpp): an emulated
// device, sub-ranges of buffers, all-gathers checked byte for byte, and
// ranks in forked processes opened through the C API alone.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "conccl/conccl.h"
#include "multiproc/fork_ranks.hpp"

namespace capitest {

// The emulated device of every GPU in one process, with `settings`; NULL
// (and a failure) if it does not open.
inline conccl_device_t open_emu(const std::string& settings = "preset=mi300x") {
  conccl_device_options o;
  conccl_device_options_init(&o);
  o.settings = settings.c_str();
  conccl_device_t d = nullptr;
  EXPECT_EQ(conccl_device_open(&o, &d), CONCCL_OK) << conccl_last_error();
  return d;
}

// The sub-range [offset, offset + bytes) of an allocation, as the C API takes it.
inline conccl_buffer sub(const conccl_buffer& b, size_t offset, size_t bytes) {
  conccl_buffer s = b;
  s.va += offset;
  if (b.host) s.host = static_cast<uint8_t*>(b.host) + offset;
  s.size = bytes;
  return s;
}

// An all-gather of `bytes` per rank from send[r] into recv[r], r < n.
inline conccl_collective_args all_gather_args(const conccl_buffer* send, const conccl_buffer* recv, int n,
                                              size_t bytes) {
  conccl_collective_args a;
  conccl_collective_args_init(&a);
  a.op = CONCCL_ALL_GATHER;
  a.send = send, a.nsend = n;
  a.recv = recv, a.nrecv = n;
  a.bytes = bytes;
  return a;
}

// Every rank's receive buffer holds every rank's chunk (data[s], chunk bytes
// each) in rank order.
inline void expect_gathered(conccl_device_t d, const std::vector<conccl_buffer>& recv,
                            const std::vector<std::vector<uint8_t>>& data, size_t chunk) {
  const size_t n = recv.size();
  for (size_t r = 0; r < n; ++r) {
    std::vector<uint8_t> got(chunk * n);
    ASSERT_EQ(conccl_buffer_download(d, got.data(), &recv[r], 0, got.size(), 5000), CONCCL_OK) << conccl_last_error();
    for (size_t s = 0; s < n; ++s)
      EXPECT_EQ(std::memcmp(got.data() + chunk * s, data[s].data(), chunk), 0) << "rank " << r << " block " << s;
  }
}

// Rank r of n in a forked process: its device at process slot r, and its
// communicator from id with waits of timeout_ms; 0, or a non-zero exit code
// (3: the device, 4: the communicator) with *out saying why.
inline int open_rank(int r, int n, const conccl_unique_id& id, conccl_device_t* d, conccl_comm_t* comm,
                     std::string* out, uint32_t timeout_ms) {
  conccl_device_options o;
  conccl_device_options_init(&o);
  o.process_slot = r;
  if (conccl_device_open(&o, d) != CONCCL_OK) return *out = conccl_last_error(), 3;
  conccl_comm_options co;
  conccl_comm_options_init(&co);
  co.timeout_ms = timeout_ms;
  if (conccl_comm_create_rank(*d, r, n, &id, r, &co, comm) != CONCCL_OK) return *out = conccl_last_error(), 4;
  return 0;
}

// Ranks 0..n-1, one forked process each, every one with its device and its
// communicator from one fresh unique id (open_rank, waits of timeout_ms);
// body(r, d, comm, out) does the rest and returns the rank's exit code,
// closing what it keeps open. Every rank must exit 0 (expect_ranks_ok); the
// outcomes, for further checks.
template <typename Body>
std::vector<conccl::mptest::RankOutcome> run_ranks(int n, uint32_t timeout_ms, Body body) {
  conccl_unique_id id;
  if (conccl_get_unique_id(&id) != CONCCL_OK) {
    ADD_FAILURE() << "conccl_get_unique_id: " << conccl_last_error();
    return {};
  }
  std::vector<conccl::mptest::RankOutcome> res =
      conccl::mptest::fork_ranks(conccl::mptest::all_ranks(n), [&](int r, std::string* out) {
        conccl_device_t d = nullptr;
        conccl_comm_t comm = nullptr;
        if (int rc = open_rank(r, n, id, &d, &comm, out, timeout_ms)) return rc;
        return body(r, d, comm, out);
      });
  conccl::mptest::expect_ranks_ok(res);
  return res;
}

// Rank r's data for a round: `bytes` random bytes, none of them zero, from
// seed seed_per_round * round + r (every rank can make any rank's again).
inline std::vector<uint8_t> rank_data(size_t bytes, unsigned seed_per_round, int r, int round) {
  std::vector<uint8_t> v(bytes);
  std::mt19937 rng(seed_per_round * static_cast<unsigned>(round) + static_cast<unsigned>(r));
  for (auto& x : v) x = static_cast<uint8_t>(rng() | 1);
  return v;
}

}  // namespace capitest
