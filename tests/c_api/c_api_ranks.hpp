// tests/c_api/c_api_ranks.hpp - what the C API tests with one process per
// rank (c_api_test.cpp, heap_test.cpp, reductions_test.cpp) share: opening
// rank r of n in a forked process through the C API alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "conccl/conccl.h"

namespace capitest {

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

// Rank r's data for a round: `bytes` random bytes, none of them zero, from
// seed seed_per_round * round + r (every rank can make any rank's again).
inline std::vector<uint8_t> rank_data(size_t bytes, unsigned seed_per_round, int r, int round) {
  std::vector<uint8_t> v(bytes);
  std::mt19937 rng(seed_per_round * static_cast<unsigned>(round) + static_cast<unsigned>(r));
  for (auto& x : v) x = static_cast<uint8_t>(rng() | 1);
  return v;
}

}  // namespace capitest
