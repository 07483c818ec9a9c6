// tests/backends/nv/nv_mp_stream_test.cpp - the NCCL-shaped calls with one process
// per rank, ordered on CUDA streams (src/c_api/conccl_c.cpp): each rank is a
// forked process with its own nv device (process slot = rank) on the one
// GPU (loopback), its own CUDA buffers and its own stream.
//
// Per round, on the rank's stream and with no host wait in between: upload
// the round's random bytes into the send buffer (host to device), all-gather
// (or all-to-all), download the receive buffer into the round's host slot.
// More rounds than the library keeps in flight, then one stream sync and
// every byte of every round checked. Stream order is what makes them right:
// the collective must wait for the upload before it, the download must wait
// for the collective, and the next upload must wait until this rank's lists
// no longer read the send buffer. A round that moves a rank to another
// receive buffer makes every rank plan again while earlier rounds are in
// flight.
//
// Its own test program: the ranks are forked before anything starts CUDA.
// Skips without /dev/nvidiactl or libcuda.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "conccl/conccl.h"
#include "multiproc/fork_ranks.hpp"
#include "backends/nv/cuda_driver.hpp"

namespace {

using conccl::test::CudaDriver;
using conccl::test::have_nv_gpu;

std::string last() { return conccl_last_error(); }

// Rank r's bytes for round k: random, never the poison the receive buffers
// start with.
std::vector<uint8_t> round_data(int r, int k, size_t n) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(7919u * static_cast<unsigned>(k) + static_cast<unsigned>(r));
  for (auto& x : v) x = static_cast<uint8_t>(rng() | 1);
  return v;
}

// One rank's whole run; 0, or an exit code with *out saying why.
int run_rank(int r, int n, const conccl_unique_id& id, size_t chunk, int rounds, std::string* out) {
  CudaDriver cu;
  if (!cu.load()) return *out = "libcuda", 2;
  int cdev = 0;
  void* ctx = nullptr;
  if (cu.cuInit(0) || cu.cuDeviceGet(&cdev, 0) || cu.cuDevicePrimaryCtxRetain(&ctx, cdev) || cu.cuCtxSetCurrent(ctx))
    return *out = "CUDA context", 3;
  conccl_device_options o;
  conccl_device_options_init(&o);
  o.backend = "nv";
  o.process_slot = r;
  conccl_device_t d = nullptr;
  if (conccl_device_open(&o, &d) != CONCCL_OK) return *out = last(), 4;
  conccl_comm_options co;
  conccl_comm_options_init(&co);
  co.timeout_ms = 30000;
  co.loopback = 1;
  conccl_comm_t comm = nullptr;
  if (conccl_comm_create_rank(d, r, n, &id, 0, &co, &comm) != CONCCL_OK) return *out = last(), 5;
  const size_t total = chunk * static_cast<size_t>(n);
  conccl_buffer send, recv, recv2;
  if (conccl_buffer_alloc_cuda(d, 0, total, &send) != CONCCL_OK ||
      conccl_buffer_alloc_cuda(d, 0, total, &recv) != CONCCL_OK ||
      conccl_buffer_alloc_cuda(d, 0, total, &recv2) != CONCCL_OK)
    return *out = last(), 6;
  // CUDA's pointers: with a process slot the buffers' va are addresses in
  // the slot's window, not CUDA's.
  uint64_t send_ptr = 0, recv_ptr = 0, recv2_ptr = 0;
  if (conccl_buffer_cuda_pointer(d, &send, &send_ptr) != CONCCL_OK ||
      conccl_buffer_cuda_pointer(d, &recv, &recv_ptr) != CONCCL_OK ||
      conccl_buffer_cuda_pointer(d, &recv2, &recv2_ptr) != CONCCL_OK)
    return *out = last(), 6;
  void* stream = nullptr;
  if (cu.cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */)) return *out = "cuStreamCreate", 7;
  // Pinned host memory: each round's upload and its download.
  uint8_t *up = nullptr, *down = nullptr;
  if (cu.cuMemHostAlloc(reinterpret_cast<void**>(&up), total * static_cast<size_t>(rounds), 0) ||
      cu.cuMemHostAlloc(reinterpret_cast<void**>(&down), total * static_cast<size_t>(rounds), 0))
    return *out = "cuMemHostAlloc", 8;
  std::memset(down, 0, total * static_cast<size_t>(rounds));
  for (int k = 0; k < rounds; ++k) {
    const std::vector<uint8_t> v = round_data(r, k, total);
    std::memcpy(up + total * static_cast<size_t>(k), v.data(), total);
  }
  // Rounds alternate all-gather and all-to-all; in round 5 rank 1 receives
  // into another buffer, so every rank plans again with rounds in flight.
  auto op_of = [](int k) { return k % 3 == 2 ? 1 : 0; };  // 0 all-gather, 1 all-to-all
  for (int k = 0; k < rounds; ++k) {
    const conccl_buffer& into = k == 5 && r == 1 ? recv2 : recv;
    const uint64_t into_ptr = k == 5 && r == 1 ? recv2_ptr : recv_ptr;
    uint8_t* host_up = up + total * static_cast<size_t>(k);
    uint8_t* host_down = down + total * static_cast<size_t>(k);
    if (int e = cu.cuMemcpyHtoDAsync(send_ptr, host_up, total, stream)) return *out = "upload: CUresult " + std::to_string(e), 9;
    const conccl_status s = op_of(k) == 0 ? conccl_all_gather(&send, &into, chunk, comm, stream)
                                          : conccl_all_to_all(&send, &into, chunk, comm, stream);
    if (s != CONCCL_OK) return *out = "round " + std::to_string(k) + ": " + last(), 10;
    if (int e = cu.cuMemcpyDtoHAsync(host_down, into_ptr, total, stream))
      return *out = "download: CUresult " + std::to_string(e), 11;
  }
  if (int e = cu.cuStreamSynchronize(stream)) return *out = "cuStreamSynchronize: CUresult " + std::to_string(e), 12;
  for (int k = 0; k < rounds; ++k) {
    const uint8_t* got = down + total * static_cast<size_t>(k);
    for (int s = 0; s < n; ++s) {
      const std::vector<uint8_t> theirs = round_data(s, k, total);
      // all-gather: rank s's first chunk; all-to-all: rank s's chunk r.
      const uint8_t* want = theirs.data() + (op_of(k) == 0 ? 0 : chunk * static_cast<size_t>(r));
      if (std::memcmp(got + chunk * static_cast<size_t>(s), want, chunk) != 0)
        return *out = "round " + std::to_string(k) + " (" + (op_of(k) ? "all_to_all" : "all_gather") + "): chunk from rank " +
                      std::to_string(s) + " differs",
               13;
    }
  }
  const size_t cached = conccl_comm_cached_plans(comm);
  if (cached < 2) return *out = "expected several plans in flight per call, cached " + std::to_string(cached), 14;
  conccl_comm_destroy(comm);
  (void)cu.cuStreamDestroy(stream);
  (void)cu.cuMemFreeHost(up);
  (void)cu.cuMemFreeHost(down);
  for (conccl_buffer* b : {&send, &recv, &recv2}) (void)conccl_buffer_free(d, b);
  conccl_device_close(d);
  return 0;
}

void run(int n, size_t chunk, int rounds) {
  conccl_unique_id id;
  ASSERT_EQ(conccl_get_unique_id(&id), CONCCL_OK);
  std::vector<int> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(r);
  std::vector<conccl::mptest::RankOutcome> res = conccl::mptest::fork_ranks(
      ranks, [&](int r, std::string* out) { return run_rank(r, n, id, chunk, rounds, out); }, 180);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(res[static_cast<size_t>(r)].exit_code, 0) << "rank " << r << ": " << res[static_cast<size_t>(r)].out;
}

}  // namespace

TEST(NvMpStream, TwoRanksManyRoundsInFlight) {
  if (!have_nv_gpu()) GTEST_SKIP() << "no NVIDIA GPU with libcuda here";
  run(2, (3u << 20) + 4096, 14);
}

TEST(NvMpStream, FourRanksSmallChunks) {
  if (!have_nv_gpu()) GTEST_SKIP() << "no NVIDIA GPU with libcuda here";
  run(4, 12288 + 256, 12);
}
