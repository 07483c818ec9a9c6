// tests/backends/emu/emu_test_util.hpp - helpers shared by the queue and emulator tests.
//
// Every wait in these tests has a deadline. kLongWaitMs is only reached when
// something is broken (the tests then fail with the queue's hang diagnosis);
// it is generous because sanitizer builds run 5-20x slower.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "conccl/deadline.hpp"
#include "conccl/device.hpp"
#include "conccl/emu.hpp"
#include "conccl/queue.hpp"
#include "conccl/sdma_packets.hpp"
#include "conccl/status.hpp"
#include "queue/sdma_queue.hpp"
#include "util/sanitizers.hpp"

namespace conccl::test {

inline constexpr int64_t kLongWaitMs = 30000;
inline Deadline long_deadline() { return Deadline::after_ms(kLongWaitMs); }

inline constexpr bool kSanitized = util::kThreadSanitizer || util::kAddressSanitizer;

#define CONCCL_TEST_CAT2(a, b) a##b
#define CONCCL_TEST_CAT(a, b) CONCCL_TEST_CAT2(a, b)

#define ASSERT_OK(expr)                                   \
  do {                                                    \
    const ::conccl::Status st_ = (expr);                  \
    ASSERT_TRUE(st_.ok()) << #expr << ": " << st_.to_string(); \
  } while (0)
#define EXPECT_OK(expr)                                   \
  do {                                                    \
    const ::conccl::Status st_ = (expr);                  \
    EXPECT_TRUE(st_.ok()) << #expr << ": " << st_.to_string(); \
  } while (0)
// Checks the code of a failed Status and returns (via the gtest macro) on mismatch.
#define ASSERT_CODE(expr, want_code)                                                   \
  do {                                                                                 \
    const ::conccl::Status st_ = (expr);                                               \
    ASSERT_EQ(st_.code(), (want_code)) << #expr << ": " << st_.to_string();           \
  } while (0)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL(CONCCL_TEST_CAT(result_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr)                      \
  auto tmp = (expr);                                                   \
  ASSERT_TRUE(tmp.ok()) << #expr << ": " << tmp.status().to_string(); \
  lhs = std::move(tmp).value()

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

using conccl::hex;  // "0x1f", from conccl/status.hpp

// The SDMA packet names the emulator's tests build packets with.
using sdma::FieldValue;
using sdma::Gen;
using sdma::Key;
using sdma::Pkt;

// splitmix64: a cheap, well-mixed function of (seed, index) for payloads.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Random bytes, none of them zero (so a zeroed or untouched byte never matches).
inline void fill_random(void* dst, size_t bytes, std::mt19937_64& rng) {
  auto* p = static_cast<uint8_t*>(dst);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w = rng();
    for (int b = 0; b < 8; ++b)
      if (((w >> (8 * b)) & 0xFF) == 0) w |= uint64_t(0x5A) << (8 * b);
    std::memcpy(p + i, &w, 8);
  }
  for (; i < bytes; ++i) p[i] = static_cast<uint8_t>(1 + rng() % 255);
}
inline std::vector<uint8_t> random_bytes(size_t bytes, std::mt19937_64& rng) {
  std::vector<uint8_t> v(bytes);
  fill_random(v.data(), bytes, rng);
  return v;
}
inline std::vector<uint32_t> random_dwords(size_t n, std::mt19937_64& rng) {
  std::vector<uint32_t> v(n);
  fill_random(v.data(), n * 4, rng);
  return v;
}

// Byte-exact comparison that reports the first difference instead of dumping buffers.
inline ::testing::AssertionResult bytes_equal(const void* got, const void* want, size_t n) {
  if (std::memcmp(got, want, n) == 0) return ::testing::AssertionSuccess();
  const auto* g = static_cast<const uint8_t*>(got);
  const auto* w = static_cast<const uint8_t*>(want);
  size_t first = 0, diffs = 0;
  for (size_t i = 0; i < n; ++i)
    if (g[i] != w[i]) {
      if (diffs++ == 0) first = i;
    }
  return ::testing::AssertionFailure() << diffs << " of " << n << " bytes differ; first at offset " << first
                                       << ": got " << hex(g[first]) << ", want " << hex(w[first]);
}

// DeviceOptions for the emulator, its shape given in settings as users give
// it (docs/emulator.md): "preset=small gpus=3 ..."; an empty or 0 argument
// leaves its key out (the preset's own).
inline DeviceOptions options(const std::string& preset, int gpus = 0, int engines = 0, const std::string& gen = "",
                             size_t memory_per_gpu = 0, std::string backend = "emu") {
  DeviceOptions o;
  o.backend = std::move(backend);
  auto add = [&o](const char* key, const std::string& value) {
    if (!value.empty()) o.settings += (o.settings.empty() ? "" : " ") + std::string(key) + "=" + value;
  };
  add("preset", preset);
  if (gpus) add("gpus", std::to_string(gpus));
  if (engines) add("engines", std::to_string(engines));
  add("gen", gen);
  if (memory_per_gpu) add("memory_per_gpu", std::to_string(memory_per_gpu));
  return o;
}

// What the SDMA queue's submission frame (src/queue/sdma_frame.hpp) adds
// around every submission: bytes before the commands, bytes after them (the
// epilogue and the sequence FENCE), and packets in all. Zero for other queues.
inline uint64_t frame_head_bytes(const Queue& q) {
  const auto* s = dynamic_cast<const SdmaQueue*>(&q);
  return s ? s->frame().prologue_bytes() : 0;
}
inline uint64_t frame_tail_bytes(const Queue& q) {
  const auto* s = dynamic_cast<const SdmaQueue*>(&q);
  return s ? s->frame().epilogue_bytes() + s->frame().fence.size() * 4 : 0;
}
inline uint64_t frame_bytes(const Queue& q) { return frame_head_bytes(q) + frame_tail_bytes(q); }
inline uint64_t frame_packets(const Queue& q) {
  const auto* s = dynamic_cast<const SdmaQueue*>(&q);
  return s ? s->frame().prologue.size() + s->frame().epilogue.size() + 1 : 0;
}

inline emu::EmuDevice* as_emu(Device* d) { return dynamic_cast<emu::EmuDevice*>(d); }

inline Result<std::unique_ptr<emu::EmuDevice>> make_small(int gpus = 2, int engines = 4,
                                                          size_t memory_per_gpu = 0) {
  return emu::create(options("small", gpus, engines, "", memory_per_gpu));
}

inline Result<std::unique_ptr<Queue>> make_queue(Device& dev, int gpu, int engine, size_t ring_bytes = 1u << 20) {
  QueueOptions qo;
  qo.ring_bytes = ring_bytes;
  return dev.create_queue(gpu, engine, qo);
}

// Submits and waits until the engine consumed the packets.
inline Status run(Queue& q, const CommandBuffer& cb, Deadline deadline = long_deadline()) {
  QueueSpan span;
  CONCCL_RETURN_IF_ERROR(q.submit(cb, deadline, &span));
  return q.wait_done(deadline, span.end);
}

// Host stores to memory an engine may be reading concurrently (polls, cond_exe).
inline void host_store32(void* p, uint32_t v) {
  std::atomic_ref<uint32_t>(*static_cast<uint32_t*>(p)).store(v, std::memory_order_release);
}
inline void host_store64(void* p, uint64_t v) {
  std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(p)).store(v, std::memory_order_release);
}
inline uint64_t host_load64(const void* p) {
  return std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(const_cast<void*>(p))).load(std::memory_order_acquire);
}
inline uint32_t host_load32(const void* p) {
  return std::atomic_ref<uint32_t>(*static_cast<uint32_t*>(const_cast<void*>(p))).load(std::memory_order_acquire);
}

// The CPU view of a queue's ring, found by its contents: `expect` must be
// what the queue wrote at ring byte offset `at` (pick random payloads so the
// match is unique). Rings of the emulator live in its host arena at 4 KiB
// aligned addresses. Returns null if not found.
inline uint32_t* find_ring(Device& dev, const Queue& q, uint64_t at, std::span<const uint32_t> expect) {
  const uint64_t size = q.ring_bytes();
  const uint64_t off = at & (size - 1);
  for (uint64_t base = emu::kHostVaBase; base < emu::kHostVaBase + (64ull << 20); base += 4096) {
    auto* ring = static_cast<uint32_t*>(dev.host_pointer(base, size));
    if (!ring) return nullptr;
    if (std::memcmp(reinterpret_cast<const uint8_t*>(ring) + off, expect.data(), expect.size_bytes()) == 0)
      return ring;
  }
  return nullptr;
}

}  // namespace conccl::test
