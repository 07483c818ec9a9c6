// tests/signal/signal_fixture.hpp - a small emulated node for signal tests.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "conccl/emu.hpp"
#include "conccl/signal.hpp"

namespace conccl::testing {

class SignalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceOptions o;
    o.settings = "preset=small memory_per_gpu=256M";
    auto d = emu::create(o);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    dev = std::move(d).value();
  }
  std::unique_ptr<Queue> queue(int gpu, int engine, size_t ring = 64 * 1024) {
    QueueOptions qo;
    qo.ring_bytes = ring;
    auto q = dev->create_queue(gpu, engine, qo);
    EXPECT_TRUE(q.ok()) << q.status().to_string();
    return q.ok() ? std::move(q).value() : nullptr;
  }
  Buffer alloc(int gpu, size_t n) {
    auto b = dev->alloc(gpu, n, gpu < 0 ? MemKind::host : MemKind::device);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    return b.ok() ? *b : Buffer{};
  }
  static void random_fill(const Buffer& b, uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto* p = b.as<uint8_t>();
    for (size_t i = 0; i < b.size; ++i) p[i] = static_cast<uint8_t>(rng() | 1);  // never zero
  }
  std::unique_ptr<emu::EmuDevice> dev;
};

}  // namespace conccl::testing
