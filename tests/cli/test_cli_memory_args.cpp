// tests/cli/test_cli_memory_args.cpp - sdma-probe's memory arithmetic,
// in-process: saturating sums, MemAvailable, the budget check, and what a
// collective sweep allocates.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "coll_memory.hpp"
#include "mem_budget.hpp"

namespace probe {
namespace {

using conccl::CollOp;
using conccl::Code;

constexpr uint64_t kGiB = 1ull << 30;

TEST(MemArithmetic, SaturatesInsteadOfWrapping) {
  EXPECT_EQ(add_sat(1, 2), 3u);
  EXPECT_EQ(add_sat(UINT64_MAX, 1), UINT64_MAX);
  EXPECT_EQ(mul_sat(1ull << 40, 1ull << 30), UINT64_MAX);
  EXPECT_EQ(mul_sat(3, 5), 15u);
  EXPECT_EQ(round_up_sat(5, 4), 8u);
  EXPECT_EQ(round_up_sat(8, 4), 8u);
  EXPECT_EQ(round_up_sat(UINT64_MAX - 1, 4), UINT64_MAX);  // (x + 3) & ~3 wrapped to 0
  EXPECT_EQ(alloc_bytes(UINT64_MAX), UINT64_MAX);
}

TEST(MemAvailable, ParsesMeminfo) {
  EXPECT_EQ(parse_mem_available("MemTotal:       32768 kB\nMemFree:  1 kB\nMemAvailable:    2048 kB\n"),
            2048u * 1024);
  EXPECT_EQ(parse_mem_available("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(parse_mem_available("MemAvailable: lots\n"), std::nullopt);
  EXPECT_TRUE(mem_available().has_value());  // Linux
}

conccl::Topology two_gpus(uint64_t memory) {
  conccl::Topology t;
  t.gpus.resize(2);
  for (auto& g : t.gpus) g.memory_bytes = memory;
  return t;
}

TEST(Budget, PerGpuAndHostWithTheSumAndTheFix) {
  MemBudget need;
  need.gpu = {3 * kGiB, 1 * kGiB};
  need.host = 1 * kGiB;
  EXPECT_TRUE(check_budget(need, two_gpus(4 * kGiB), true, "lower --max", 100 * kGiB).ok());
  need.gpu[1] = 5 * kGiB;
  conccl::Status st = check_budget(need, two_gpus(4 * kGiB), true, "lower --max", 100 * kGiB);
  EXPECT_EQ(st.code(), Code::resource_exhausted);
  EXPECT_EQ(st.message(), "needs 5 GiB of memory on GPU 1, which has 4 GiB (emulated); lower --max");
  // Host: on the emulator the GPU bytes are host bytes.
  need.gpu[1] = 1 * kGiB;
  st = check_budget(need, two_gpus(4 * kGiB), true, "lower --max", 4 * kGiB);
  EXPECT_EQ(st.code(), Code::resource_exhausted);
  EXPECT_EQ(st.message(),
            "needs 5 GiB of host memory (emulated GPU memory, which lives in host memory: 4 GiB; staging and "
            "verification: 1 GiB), but only 4 GiB is available (MemAvailable in /proc/meminfo); lower --max");
  // On a real GPU they are not.
  EXPECT_TRUE(check_budget(need, two_gpus(4 * kGiB), false, "lower --max", 4 * kGiB).ok());
  // Unknown memory sizes and an unreadable MemAvailable check nothing.
  EXPECT_TRUE(check_budget(need, two_gpus(0), true, "x", std::nullopt).ok());
}

uint64_t sum_of(CollOp op, int root, int peer, int n, uint64_t chunk) {
  uint64_t sum = 0;
  for (int r = 0; r < n; ++r) {
    const RankBuffers b = buffer_bytes(op, root, peer, r, n, chunk);
    sum += b.send + b.recv;
  }
  return sum;
}

TEST(SweepMemory, OnlyWhatTheOpTouches) {
  const uint64_t c = 1 << 20;
  // p2p: the root's send and the peer's recv, whatever the rank count.
  EXPECT_EQ(sum_of(CollOp::p2p, 0, 1, 64, c), 2 * c);
  EXPECT_EQ(sum_of(CollOp::p2p, 5, 63, 64, c), 2 * c);
  // broadcast: the root's send and one message per rank.
  EXPECT_EQ(sum_of(CollOp::broadcast, 0, 1, 64, c), 65 * c);
  EXPECT_EQ(sum_of(CollOp::gather, 0, 1, 8, c), 8 * c + 8 * c);
  EXPECT_EQ(sum_of(CollOp::scatter, 0, 1, 8, c), 8 * c + 8 * c);
  EXPECT_EQ(sum_of(CollOp::all_gather, 0, 1, 8, c), 8 * c + 64 * c);
  EXPECT_EQ(sum_of(CollOp::all_to_all, 0, 1, 8, c), 128 * c);
  // Saturates.
  EXPECT_EQ(buffer_bytes(CollOp::all_to_all, 0, 1, 0, 64, UINT64_MAX / 2).send, UINT64_MAX);
}

TEST(SweepMemory, BudgetPlacesRanksOnTheirGpus) {
  // 4 ranks on 2 GPUs (loopback), p2p 3 -> 2: rank 3's send on GPU 1, rank 2's recv on GPU 0.
  MemBudget b = sweep_budget(CollOp::p2p, 3, 2, {0, 1, 0, 1}, 2, 1001);
  ASSERT_EQ(b.gpu.size(), 2u);
  EXPECT_EQ(b.gpu[0], 1004u);
  EXPECT_EQ(b.gpu[1], 1004u);
  EXPECT_EQ(b.host, 2 * staging_bytes(2) + kVerifyBytes);
  // Staging for many GPUs fits the emulator's 1 GiB of host memory.
  EXPECT_LE(staging_bytes(64) * 64, 512ull << 20);
  EXPECT_EQ(staging_bytes(1), 32u << 20);
}

// --procs through windows: every rank's buffers at the same offsets of one
// window, which holds them, the few bytes that name a buffer a rank has none
// of, and the in-place gather/scatter chunks at root x chunk.
TEST(SweepMemory, WindowLayoutIsTheSameOnEveryRankAndHoldsEveryBuffer) {
  for (CollOp op : {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                    CollOp::all_to_all})
    for (int n : {1, 2, 3, 8})
      for (int root : {0, n - 1})
        for (uint64_t chunk : {uint64_t(1), uint64_t(341), uint64_t(4096), uint64_t(1 << 20) + 3}) {
          const int peer = n > 1 ? (root + 1) % n : 0;
          const WindowLayout first = window_layout(op, root, peer, 0, n, chunk);
          for (int r = 0; r < n; ++r) {
            const WindowLayout w = window_layout(op, root, peer, r, n, chunk);
            const std::string at = "op " + std::to_string(static_cast<int>(op)) + " n=" + std::to_string(n) + " root=" +
                                   std::to_string(root) + " chunk=" + std::to_string(chunk) + " rank " +
                                   std::to_string(r);
            EXPECT_EQ(w.send_off, first.send_off) << at;
            EXPECT_EQ(w.recv_off, first.recv_off) << at;
            EXPECT_EQ(w.size % 4096, 0u) << at;
            EXPECT_EQ(w.send_off % 4096, 0u) << at;
            EXPECT_EQ(w.recv_off % 4096, 0u) << at;
            const RankBuffers b = buffer_bytes(op, root, peer, r, n, chunk);
            const uint64_t send_end = w.send_off + std::max<uint64_t>(alloc_bytes(b.send), 1);
            const uint64_t recv_end = w.recv_off + std::max<uint64_t>(alloc_bytes(b.recv), 1);
            EXPECT_LE(send_end, w.size) << at;
            EXPECT_LE(recv_end, w.size) << at;
            EXPECT_TRUE(send_end <= w.recv_off || recv_end <= w.send_off) << at << ": send and recv overlap";
            // In place (every size up to chunk): gather's send and scatter's
            // recv at root x chunk of the root's buffer, whole 4-byte words.
            const uint64_t in_place_end = alloc_bytes((uint64_t(root) + 1) * chunk);
            if (op == CollOp::gather) {
              EXPECT_LE(w.recv_off + in_place_end, w.size) << at;
            }
            if (op == CollOp::scatter) {
              EXPECT_LE(w.send_off + in_place_end, w.size) << at;
            }
          }
        }
  // The root-only region goes last, so that the other ranks need little.
  const uint64_t c = 1 << 20;
  EXPECT_EQ(window_layout(CollOp::scatter, 0, 1, 5, 8, c).size, 2 * c);  // its recv, then the root's chunk 0
  EXPECT_EQ(window_layout(CollOp::gather, 0, 1, 5, 8, c).size, 2 * c);
  EXPECT_EQ(window_layout(CollOp::gather, 0, 1, 0, 8, c).size, 9 * c);
  EXPECT_EQ(window_layout(CollOp::p2p, 0, 1, 2, 3, c).size, c + 4096);
  // The budget counts the windows.
  MemBudget w = sweep_budget(CollOp::gather, 0, 1, {0, 1, 2}, 3, c, true);
  ASSERT_EQ(w.gpu.size(), 3u);
  EXPECT_EQ(w.gpu[0], 4 * c);
  EXPECT_EQ(w.gpu[1], 2 * c);
}

}  // namespace
}  // namespace probe
