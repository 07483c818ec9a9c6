// tests/queue/ring_wrap_test.cpp - a million random packets through a small ring.
//
// The ring is 8 KiB, so it wraps thousands of times with NOP padding at its
// end. The packet mix (random per packet):
//   WRITE of 1..16 data dwords into log slot seq % kLog: {seq, mix(seq, i)...}
//   NOP with a random body of 0..31 dwords
//   FENCE writing f(seq) into fence_log[seq % kLog]
//   ATOMIC add64 of a random (often negative) value to counter[0]
//   ATOMIC cmpswap64 chain on counter[1]: cmp = previous chain value, src = seq
//     (an out-of-order, lost or repeated link stops the chain for good)
//   COPY of counter[0..1] (16 bytes) into snap[seq % kLog]: must equal the sum of
//     the adds and the last chain link issued before it, which proves order
//     between atomics and copies.
// Batches are verified as soon as the engine has consumed them (rptr >= their
// end), while later batches are still in flight; a slot is reused only after
// kLog sequence numbers, far more than a ring holds.
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <vector>

#include "conccl/sdma_packets.hpp"
#include "backends/emu/emu_test_util.hpp"

namespace conccl {
namespace {

using namespace conccl::test;

enum Kind : uint8_t { kWrite, kNop, kFence, kAdd, kChain, kSnap };

struct Rec {
  uint64_t seq;
  Kind kind;
  uint8_t dwords;   // kWrite
  uint64_t sum;     // kSnap: expected counter[0]
  uint64_t chain;   // kSnap: expected counter[1]
};

struct Batch {
  uint64_t end_wptr;
  std::vector<Rec> recs;
};

constexpr uint64_t kLog = 8192;
constexpr uint64_t kSlotDwords = 16;

uint32_t payload(uint64_t seq, uint64_t i) { return static_cast<uint32_t>(mix64(seq * 64 + i)); }
uint32_t fence_value(uint64_t seq) { return static_cast<uint32_t>(mix64(~seq)) | 1u; }

class RingWrap : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(dev_, make_small());
    ASSERT_OK_AND_ASSIGN(log_, dev_->alloc(0, kLog * kSlotDwords * 4, MemKind::device));
    ASSERT_OK_AND_ASSIGN(fence_log_, dev_->alloc(0, kLog * 4, MemKind::device));
    ASSERT_OK_AND_ASSIGN(snap_, dev_->alloc(0, kLog * 16, MemKind::device));
    ASSERT_OK_AND_ASSIGN(ctr_, dev_->alloc(0, 256, MemKind::device));
  }

  ::testing::AssertionResult verify(const Batch& b) {
    const auto* log = log_.as<const uint32_t>();
    const auto* fences = fence_log_.as<const uint32_t>();
    const auto* snaps = snap_.as<const uint64_t>();
    for (const Rec& r : b.recs) {
      const uint64_t slot = r.seq % kLog;
      switch (r.kind) {
        case kWrite:
          for (uint64_t i = 0; i < r.dwords; ++i) {
            const uint32_t want = i == 0 ? static_cast<uint32_t>(r.seq) : payload(r.seq, i);
            if (log[slot * kSlotDwords + i] != want)
              return ::testing::AssertionFailure() << "write seq " << r.seq << " dword " << i << ": got "
                                                   << hex(log[slot * kSlotDwords + i]) << " want " << hex(want);
          }
          break;
        case kFence:
          if (fences[slot] != fence_value(r.seq))
            return ::testing::AssertionFailure() << "fence seq " << r.seq << ": got " << hex(fences[slot]);
          break;
        case kSnap:
          if (snaps[slot * 2] != r.sum || snaps[slot * 2 + 1] != r.chain)
            return ::testing::AssertionFailure()
                   << "snapshot seq " << r.seq << ": counters were {" << hex(snaps[slot * 2]) << ", "
                   << hex(snaps[slot * 2 + 1]) << "}, program order says {" << hex(r.sum) << ", " << hex(r.chain)
                   << "}";
          break;
        default:
          break;
      }
    }
    return ::testing::AssertionSuccess();
  }

  std::unique_ptr<emu::EmuDevice> dev_;
  Buffer log_, fence_log_, snap_, ctr_;
};

TEST_F(RingWrap, MillionRandomPacketsExecuteExactlyOnceInOrder) {
  constexpr size_t kRing = 8192;
  constexpr uint64_t kPackets = 1'000'000;
  std::unique_ptr<Queue> q;
  ASSERT_OK_AND_ASSIGN(q, make_queue(*dev_, 0, 0, kRing));
  std::mt19937_64 rng(0xC0FFEE);

  CommandBuffer cb = q->command_buffer();
  std::deque<Batch> inflight;
  uint64_t seq = 0, packets = 0, sum = 0, chain = 0, verified = 0, submits = 0;
  uint32_t data[kSlotDwords];
  while (packets < kPackets) {
    cb.clear();
    Batch b;
    const size_t want = 1 + rng() % 160;
    while (b.recs.size() < want && cb.size_bytes() + 96 <= kRing / 2 && packets < kPackets) {
      const unsigned r = static_cast<unsigned>(rng() % 100);
      Rec rec{};
      if (r < 15) {
        ASSERT_OK(SdmaPackets(cb).nop(static_cast<uint32_t>(rng() % 32)));
        ++packets;
        continue;
      }
      rec.seq = ++seq;
      const uint64_t slot = rec.seq % kLog;
      if (r < 60) {
        rec.kind = kWrite;
        rec.dwords = static_cast<uint8_t>(1 + rng() % kSlotDwords);
        data[0] = static_cast<uint32_t>(rec.seq);
        for (uint64_t i = 1; i < rec.dwords; ++i) data[i] = payload(rec.seq, i);
        ASSERT_OK(SdmaPackets(cb).write(log_.va_at(slot * kSlotDwords * 4), std::span<const uint32_t>(data, rec.dwords)));
      } else if (r < 72) {
        rec.kind = kFence;
        ASSERT_OK(SdmaPackets(cb).fence(fence_log_.va_at(slot * 4), fence_value(rec.seq)));
      } else if (r < 82) {
        rec.kind = kAdd;
        const int64_t v = static_cast<int64_t>(rng() % 2000001) - 1000000;
        sum += static_cast<uint64_t>(v);
        ASSERT_OK(SdmaPackets(cb).atomic_add64(ctr_.va, v));
      } else if (r < 90) {
        rec.kind = kChain;
        const sdma::FieldValue f[] = {{sdma::Key::op, 40 /* CMPSWAP_RTN_64 */},
                                      {sdma::Key::addr, ctr_.va_at(8)},
                                      {sdma::Key::value, rec.seq},
                                      {sdma::Key::cmp, chain}};
        ASSERT_OK(SdmaPackets(cb).packet(sdma::Pkt::atomic, f));
        chain = rec.seq;
      } else {
        rec.kind = kSnap;
        rec.sum = sum;
        rec.chain = chain;
        ASSERT_OK(cb.copy(snap_.va_at(slot * 16), ctr_.va, 16));
      }
      b.recs.push_back(rec);
      ++packets;
    }
    QueueSpan span;
    ASSERT_OK(q->submit(cb, long_deadline(), &span));
    b.end_wptr = span.end;
    ++submits;
    inflight.push_back(std::move(b));
    // Verify what the engine finished, while the rest is still in flight.
    const uint64_t r = q->completed();
    while (!inflight.empty() && inflight.front().end_wptr <= r) {
      ASSERT_TRUE(verify(inflight.front()));
      verified += inflight.front().recs.size();
      inflight.pop_front();
    }
  }
  ASSERT_OK(q->wait_done(long_deadline()));
  for (const Batch& b : inflight) {
    ASSERT_TRUE(verify(b));
    verified += b.recs.size();
  }
  EXPECT_EQ(verified, seq);
  EXPECT_EQ(host_load64(ctr_.as<uint64_t>()), sum);
  EXPECT_EQ(host_load64(ctr_.as<uint64_t>() + 1), chain) << "the cmpswap chain broke: a link ran out of order";
  EXPECT_EQ(q->completed(), q->submitted());
  // The ring wrapped many times...
  EXPECT_GT(q->submitted(), 1000 * kRing);
  // ...and every packet ran exactly once: the engine's count is ours plus at
  // most one padding NOP per wrap (an 8 KiB tail fits one NOP).
  emu::EngineStats st;
  ASSERT_OK_AND_ASSIGN(st, dev_->engine_stats(0, 0));
  // Each submission also runs its frame's packets (docs/queues.md).
  EXPECT_GE(st.packets, packets + submits * frame_packets(*q));
  EXPECT_LE(st.packets, packets + submits * frame_packets(*q) + q->submitted() / kRing + 1);
  RecordProperty("submits", std::to_string(submits));
}

// A packet that would straddle the ring end must be moved to the ring start
// behind a NOP pad: place an 80-byte write so that it would straddle by each
// possible amount (4..76 bytes), many times over. The ring is filled with
// WRITE packets of random payload between placements, so the bytes an
// unpadded tail would leave behind are garbage, not harmless NOPs.
TEST_F(RingWrap, EveryTailOffsetIsPaddedWithNops) {
  constexpr uint64_t kRing = 4096;
  constexpr uint64_t kWriteBytes = (4 + kSlotDwords) * 4;  // 80
  std::unique_ptr<Queue> q;
  ASSERT_OK_AND_ASSIGN(q, make_queue(*dev_, 0, 1, kRing));
  Buffer scratch;
  ASSERT_OK_AND_ASSIGN(scratch, dev_->alloc(1, 4096, MemKind::device));
  std::mt19937_64 rng(99);
  CommandBuffer cb = q->command_buffer();
  // Advances the write pointer by `bytes` (not crossing the ring end) with
  // filler packets, each submitted on its own in the queue's frame, so each
  // submission takes at least frame + 4 bytes.
  const uint64_t frame = frame_bytes(*q), head = frame_head_bytes(*q);
  auto fill = [&](uint64_t bytes) -> Status {
    while (bytes > 0) {
      if (bytes < frame + 4) return error(Code::internal, "fill(" + std::to_string(bytes) + ") is below one frame");
      uint64_t chunk = bytes - frame > 2048 ? 2048 : bytes - frame;
      if (bytes - frame - chunk != 0 && bytes - frame - chunk < frame + 4) chunk /= 2;  // leave room for one more
      cb.clear();
      if (chunk >= 20)
        CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).write(scratch.va, random_dwords(chunk / 4 - 4, rng)));
      else
        CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).nop(static_cast<uint32_t>(chunk / 4 - 1)));
      CONCCL_RETURN_IF_ERROR(run(*q, cb));
      bytes -= chunk + frame;
    }
    return Status();
  };
  // Moves the write pointer to the ring start: a tail too short for a frame
  // is crossed by a NOP submission (the ring pads it), then filled exactly.
  auto to_start = [&]() -> Status {
    for (int i = 0; i < 4 && (q->submitted() & (kRing - 1)) != 0; ++i) {
      const uint64_t left = kRing - (q->submitted() & (kRing - 1));
      if (left >= frame + 4) {
        CONCCL_RETURN_IF_ERROR(fill(left));
      } else {
        cb.clear();
        CONCCL_RETURN_IF_ERROR(SdmaPackets(cb).nop(0));
        CONCCL_RETURN_IF_ERROR(run(*q, cb));
        CONCCL_RETURN_IF_ERROR(fill(kRing - (q->submitted() & (kRing - 1))));
      }
    }
    return Status();
  };
  ASSERT_OK(fill(kRing - 4 - frame));  // one lap of garbage first
  uint64_t seq = 0;
  uint32_t data[kSlotDwords];
  for (int round = 0; round < 40; ++round)
    for (uint64_t over = 4; over < kWriteBytes; over += 4) {
      SCOPED_TRACE("round " + std::to_string(round) + ", " + std::to_string(over) + " bytes over the end");
      // The write packet comes after the frame's prologue.
      const uint64_t target = kRing - (kWriteBytes - over) - head;
      uint64_t off = q->submitted() & (kRing - 1);
      if (off > target || (off < target && target - off < frame + 4)) {
        ASSERT_OK(to_start());
        off = 0;
      }
      if (off < target) ASSERT_OK(fill(target - off));
      const uint64_t start = q->submitted();
      ASSERT_EQ(start & (kRing - 1), target);
      cb.clear();
      Batch b;
      Rec rec{};
      rec.seq = ++seq;
      rec.kind = kWrite;
      rec.dwords = kSlotDwords;
      data[0] = static_cast<uint32_t>(rec.seq);
      for (uint64_t i = 1; i < kSlotDwords; ++i) data[i] = payload(rec.seq, i);
      ASSERT_OK(SdmaPackets(cb).write(log_.va_at((rec.seq % kLog) * kSlotDwords * 4), data));
      b.recs.push_back(rec);
      QueueSpan span;
      ASSERT_OK(q->submit(cb, long_deadline(), &span));
      const uint64_t end = span.end;
      // The write went to the ring start, behind a pad of exactly the tail,
      // and the frame's tail after it.
      const uint64_t pad = kWriteBytes - over;
      ASSERT_EQ(end, start + head + pad + kWriteBytes + frame_tail_bytes(*q));
      ASSERT_EQ(end & (kRing - 1), kWriteBytes + frame_tail_bytes(*q));
      ASSERT_OK(q->wait_done(long_deadline(), end));
      ASSERT_TRUE(verify(b));
    }
  EXPECT_EQ(q->completed(), q->submitted());
}

}  // namespace
}  // namespace conccl
