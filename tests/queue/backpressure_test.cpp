// tests/queue/backpressure_test.cpp - a full ring: producers wait or time out,
// never overwrite packets the engine has not read, and resume when it drains.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "conccl/sdma_packets.hpp"
#include "backends/emu/emu_test_util.hpp"

namespace conccl {
namespace {

using namespace conccl::test;

constexpr size_t kRing = 4096;
constexpr uint32_t kDataDwords = 8;            // each write packet: 4 + 8 dwords = 48 bytes
constexpr uint64_t kPacketBytes = (4 + kDataDwords) * 4;
// Each submission is one write packet in the queue's frame (HDP flush before,
// sequence FENCE after on the small preset): sub_ bytes; fits_ of them fill
// the ring.

class Backpressure : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(dev_, make_small());
    ASSERT_OK_AND_ASSIGN(q_, make_queue(*dev_, 0, 0, kRing));
    sub_ = kPacketBytes + frame_bytes(*q_);
    fits_ = (kRing - 4) / sub_;
    ASSERT_OK_AND_ASSIGN(slots_, dev_->alloc(0, kSlots * kDataDwords * 4, MemKind::device));
    // Sentinels: a slot no packet wrote still holds these.
    sentinel_ = random_dwords(kSlots * kDataDwords, rng_);
    std::memcpy(slots_.host, sentinel_.data(), slots_.size);
    for (size_t i = 0; i < kSlots; ++i) payload_.push_back(random_dwords(kDataDwords, rng_));
  }

  // Records "write payload i into slot i" into cb.
  Status add_write(CommandBuffer& cb, size_t i) {
    return SdmaPackets(cb).write(slots_.va_at(i * kDataDwords * 4), payload_[i]);
  }
  ::testing::AssertionResult slot_written(size_t i) {
    return bytes_equal(slots_.as<uint32_t>() + i * kDataDwords, payload_[i].data(), kDataDwords * 4);
  }
  ::testing::AssertionResult slot_untouched(size_t i) {
    return bytes_equal(slots_.as<uint32_t>() + i * kDataDwords, sentinel_.data() + i * kDataDwords,
                       kDataDwords * 4);
  }

  // Stalls the engine and fills the ring with one-packet submits until one
  // fails; returns how many went in.
  size_t fill_stalled_ring() {
    EXPECT_OK(dev_->inject(0, 0, emu::Injection{.stall = true}));
    CommandBuffer cb = q_->command_buffer();
    size_t n = 0;
    for (;; ++n) {
      cb.clear();
      EXPECT_OK(add_write(cb, n));
      const uint64_t w = q_->submitted();
      Status st = q_->submit(cb, Deadline::now());
      if (!st.ok()) {
        EXPECT_EQ(st.code(), Code::timeout) << st.to_string();
        EXPECT_EQ(q_->submitted(), w) << "a failed submit published packets";
        last_error_ = st;
        break;
      }
      if (n > 2 * fits_) {
        ADD_FAILURE() << "the ring never filled";
        break;
      }
    }
    return n;
  }

  static constexpr size_t kSlots = 256;
  uint64_t sub_ = 0, fits_ = 0;
  std::mt19937_64 rng_{0xBAC0};
  std::unique_ptr<emu::EmuDevice> dev_;
  std::unique_ptr<Queue> q_;
  Buffer slots_;
  std::vector<uint32_t> sentinel_;
  std::vector<std::vector<uint32_t>> payload_;
  Status last_error_;
};

TEST_F(Backpressure, FullRingTimesOutWritesNothingThenDrains) {
  const size_t n = fill_stalled_ring();
  ASSERT_EQ(n, fits_);
  const Status& st = last_error_;
  EXPECT_TRUE(contains(st.message(), "ring full")) << st.message();
  // The refused submission would not fit before the ring end: it needs its
  // own bytes plus the NOP pad that moves its write packet to the ring start.
  EXPECT_TRUE(contains(st.message(), "need ")) << st.message();
  EXPECT_TRUE(contains(st.message(), "stalled")) << st.message();
  EXPECT_TRUE(contains(st.message(), "pending packets")) << st.message();
  EXPECT_TRUE(contains(st.message(), "write")) << st.message();
  EXPECT_EQ(q_->completed(), 0u);
  EXPECT_EQ(q_->submitted(), fits_ * sub_);
  EXPECT_EQ(q_->engine_status().state, EngineStatus::State::stalled);
  Result<EngineStatus> es = dev_->engine_status(0, 0);
  ASSERT_TRUE(es.ok());
  EXPECT_EQ(es->state, EngineStatus::State::stalled);

  // The ring holds exactly the unread packets; a submit that waits for space
  // and gives up leaves every byte of it alone.
  CommandBuffer last = q_->command_buffer();
  ASSERT_OK(add_write(last, fits_ - 1));
  uint32_t* ring = find_ring(*dev_, *q_, q_->submitted() - frame_tail_bytes(*q_) - kPacketBytes, last.dwords());
  ASSERT_NE(ring, nullptr);
  const std::vector<uint8_t> before(reinterpret_cast<uint8_t*>(ring), reinterpret_cast<uint8_t*>(ring) + kRing);
  CommandBuffer more = q_->command_buffer();
  ASSERT_OK(add_write(more, fits_));
  const auto t0 = Clock::now();
  Status again = q_->submit(more, Deadline::after_ms(30));
  EXPECT_EQ(again.code(), Code::timeout) << again.to_string();
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(30));
  EXPECT_TRUE(bytes_equal(ring, before.data(), kRing));
  EXPECT_EQ(q_->submitted(), fits_ * sub_);
  for (size_t i = 0; i < kSlots; ++i) ASSERT_TRUE(slot_untouched(i)) << "slot " << i << " written while stalled";

  // Clear the stall: everything drains, in order, and nothing more.
  ASSERT_OK(dev_->inject(0, 0, emu::Injection{}));
  ASSERT_OK(q_->wait_done(long_deadline()));
  for (size_t i = 0; i < fits_; ++i) ASSERT_TRUE(slot_written(i)) << "slot " << i;
  for (size_t i = fits_; i < kSlots; ++i) ASSERT_TRUE(slot_untouched(i)) << "slot " << i;
  // The refused packet can be submitted now.
  ASSERT_OK(run(*q_, more));
  EXPECT_TRUE(slot_written(fits_));
  EXPECT_NE(q_->engine_status().state, EngineStatus::State::stalled);
}

TEST_F(Backpressure, BlockedProducerNeverOverwritesUnreadPackets) {
  const size_t n = fill_stalled_ring();
  ASSERT_EQ(n, fits_);
  CommandBuffer first = q_->command_buffer();
  ASSERT_OK(add_write(first, 0));
  uint32_t* ring = find_ring(*dev_, *q_, frame_head_bytes(*q_), first.dwords());
  ASSERT_NE(ring, nullptr);
  const std::vector<uint8_t> before(reinterpret_cast<uint8_t*>(ring), reinterpret_cast<uint8_t*>(ring) + kRing);

  // A producer with a 40-packet batch (and a long deadline) has to wait.
  CommandBuffer big = q_->command_buffer();
  for (size_t i = fits_; i < fits_ + 40; ++i) ASSERT_OK(add_write(big, i));
  std::atomic<bool> done{false};
  Status producer_status;
  std::thread producer([&] {
    producer_status = q_->submit(big, long_deadline());
    done.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  EXPECT_FALSE(done.load()) << "submit returned although the ring is full";
  EXPECT_EQ(q_->submitted(), fits_ * sub_);
  EXPECT_TRUE(bytes_equal(ring, before.data(), kRing)) << "a waiting producer wrote into unread ring space";

  ASSERT_OK(dev_->inject(0, 0, emu::Injection{}));
  producer.join();
  ASSERT_OK(producer_status);
  ASSERT_OK(q_->wait_done(long_deadline()));
  for (size_t i = 0; i < fits_ + 40; ++i) ASSERT_TRUE(slot_written(i)) << "slot " << i;
  for (size_t i = fits_ + 40; i < kSlots; ++i) ASSERT_TRUE(slot_untouched(i)) << "slot " << i;
}

TEST_F(Backpressure, CommandBufferLargerThanTheRingIsRefused) {
  // The queue's own buffers stop at what one submission holds, when recorded.
  CommandBuffer bounded = q_->command_buffer();
  Status rec;
  for (size_t i = 0; i < 100 && rec.ok(); ++i) rec = add_write(bounded, i);
  EXPECT_EQ(rec.code(), Code::resource_exhausted) << "recorded past the ring";
  // One lifted past that is refused by submit.
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(cb.set_max_bytes(CommandBuffer::kMaxBytes));
  for (size_t i = 0; i < 100; ++i) ASSERT_OK(add_write(cb, i));  // 4800 bytes
  Status st = q_->submit(cb, long_deadline());
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "exceeds")) << st.message();
  EXPECT_EQ(q_->submitted(), 0u);

  // One packet larger than the ring.
  cb.clear();
  ASSERT_OK(SdmaPackets(cb).write(slots_.va, random_dwords(1100, rng_)));
  st = q_->submit(cb, long_deadline());
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "cannot fit")) << st.message();
  cb.clear();
  ASSERT_OK(SdmaPackets(cb).nop(1023));  // exactly the ring size
  EXPECT_EQ(q_->submit(cb, long_deadline()).code(), Code::invalid_argument);
  EXPECT_EQ(q_->submitted(), 0u);

  // ring - 4 bytes is the most a ring holds, frame included; that goes in.
  cb.clear();
  ASSERT_OK(SdmaPackets(cb).nop(static_cast<uint32_t>(1022 - frame_bytes(*q_) / 4)));
  ASSERT_OK(run(*q_, cb));
  EXPECT_EQ(q_->completed(), kRing - 4);
  for (size_t i = 0; i < kSlots; ++i) ASSERT_TRUE(slot_untouched(i));
  // ...and the queue still works after the refusals.
  cb.clear();
  ASSERT_OK(add_write(cb, 7));
  ASSERT_OK(run(*q_, cb));
  EXPECT_TRUE(slot_written(7));
}

TEST_F(Backpressure, FullRingBehindAHaltedEngineIsADeviceFault) {
  CommandBuffer cb = q_->command_buffer();
  const uint64_t unmapped = emu::kGpuVaBase + 7 * emu::kGpuVaStride;  // GPU 7 of a 2-GPU node
  ASSERT_OK(SdmaPackets(cb).write(unmapped, std::vector<uint32_t>{1, 2, 3}));
  ASSERT_OK(q_->submit(cb, long_deadline()));
  Status st = q_->wait_done(long_deadline());
  ASSERT_EQ(st.code(), Code::device_fault) << st.to_string();

  // Producers are told at once (not at their deadline) that no space will come.
  size_t i = 0;
  const auto t0 = Clock::now();
  for (;; ++i) {
    cb.clear();
    ASSERT_OK(add_write(cb, i));
    st = q_->submit(cb, long_deadline());
    if (!st.ok()) break;
    ASSERT_LT(i, 2 * fits_);
  }
  EXPECT_EQ(st.code(), Code::device_fault) << st.to_string();
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(kLongWaitMs / 2));
  EXPECT_TRUE(contains(st.message(), "halted")) << st.message();
  EXPECT_TRUE(contains(st.message(), "page fault")) << st.message();
  EXPECT_TRUE(contains(st.message(), hex(unmapped))) << st.message();
  for (size_t k = 0; k < kSlots; ++k) ASSERT_TRUE(slot_untouched(k));

  // A reset drops the faulting queue's packets; the queue then works again.
  ASSERT_OK(dev_->reset_engine(0, 0));
  EXPECT_EQ(q_->completed(), q_->submitted());
  cb.clear();
  ASSERT_OK(add_write(cb, 200));
  ASSERT_OK(run(*q_, cb));
  EXPECT_TRUE(slot_written(200));
  for (size_t k = 0; k < 200; ++k) ASSERT_TRUE(slot_untouched(k));
}

}  // namespace
}  // namespace conccl
