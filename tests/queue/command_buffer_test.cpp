// tests/queue/command_buffer_test.cpp - recording commands: splitting, validation,
// all-or-nothing errors, raw packets; and the submit checks that need no engine.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "emu/emu_test_util.hpp"
#include "packets/copy_split.hpp"
#include "packets/generation.hpp"

namespace conccl {
namespace {

using namespace conccl::test;
using sdma::Gen;
using sdma::Key;
using sdma::Pkt;

constexpr uint64_t kDst = emu::kGpuVaBase + 0x100000;
constexpr uint64_t kSrc = emu::kGpuVaBase + (64ull << 30);  // far enough for 2 GiB copies

// Decodes cb and checks that its packet_starts() are the real packet boundaries.
void expect_consistent(const CommandBuffer& cb) {
  sdma::StreamDecode d = sdma::decode_stream(cb.gen(), cb.dwords());
  ASSERT_TRUE(d.error.ok()) << d.error.to_string() << " at dword " << d.error_offset;
  ASSERT_EQ(d.offsets.size(), cb.packet_count());
  for (size_t i = 0; i < d.offsets.size(); ++i) EXPECT_EQ(d.offsets[i], cb.packet_starts()[i]) << "packet " << i;
}

TEST(CommandBuffer, CopySplitsAtTheGenerationLimit) {
  for (Gen g : {Gen::v4_4_2, Gen::v5_2, Gen::v7}) {
    const uint64_t max = sdma::limits(g).max_copy_bytes;
    for (uint64_t bytes : {uint64_t(1), uint64_t(3), uint64_t(4096), max, max + 1, 2 * max + 13}) {
      CommandBuffer cb(g);
      ASSERT_OK(cb.copy(kDst, kSrc, bytes));
      EXPECT_EQ(cb.packet_count(), sdma::copy_packet_count(g, kSrc, kDst, bytes)) << bytes;
      expect_consistent(cb);
      // The pieces cover [0, bytes) in order, each within the limit.
      sdma::StreamDecode d = sdma::decode_stream(g, cb.dwords());
      uint64_t off = 0;
      for (const sdma::Packet& p : d.packets) {
        ASSERT_EQ(p.pkt, Pkt::copy);
        EXPECT_EQ(p.get(Key::src), kSrc + off);
        EXPECT_EQ(p.get(Key::dst), kDst + off);
        EXPECT_LE(p.get(Key::bytes), max);
        off += p.get(Key::bytes);
      }
      EXPECT_EQ(off, bytes);
    }
  }
}

TEST(CommandBuffer, InvalidCommandsAppendNothing) {
  CommandBuffer cb(Gen::v4_4_2);
  ASSERT_OK(cb.nop(2));
  const std::vector<uint32_t> before(cb.dwords().begin(), cb.dwords().end());

  EXPECT_EQ(cb.copy(kDst, kSrc, 0).code(), Code::invalid_argument);
  Status overlap = cb.copy(kDst, kDst + 8, 64);
  EXPECT_EQ(overlap.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(overlap.message(), "overlaps")) << overlap.message();
  EXPECT_EQ(cb.copy_bcst(kDst, kDst + 0x1000, kSrc, 0).code(), Code::invalid_argument);
  EXPECT_EQ(cb.fill(kDst + 2, 0x12345678, 64).code(), Code::invalid_argument);
  EXPECT_EQ(cb.fill(kDst, 0x12345678, 6).code(), Code::invalid_argument);
  EXPECT_EQ(cb.fill(kDst, 0x12345678, 0).code(), Code::invalid_argument);
  Status f64 = cb.fence64(kDst + 4, 1);
  EXPECT_EQ(f64.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(f64.message(), "8-byte")) << f64.message();
  EXPECT_FALSE(cb.fence(kDst + 2, 1).ok());
  EXPECT_FALSE(cb.atomic_add64(kDst + 4, -1).ok());
  EXPECT_FALSE(cb.timestamp(kDst + 4).ok());
  EXPECT_FALSE(cb.poll(kDst + 1, 0, ~0u, PollFunc::eq).ok());
  EXPECT_FALSE(cb.write(kDst + 1, std::vector<uint32_t>{1, 2}).ok());
  EXPECT_FALSE(cb.write(kDst, std::vector<uint32_t>{}).ok());
  EXPECT_FALSE(cb.nop(0x4000).ok());  // count is 14 bits
  const sdma::FieldValue bad_atomic[] = {{Key::op, 200}, {Key::addr, kDst}};  // op is 7 bits
  EXPECT_FALSE(cb.packet(Pkt::atomic, bad_atomic).ok());
  const sdma::FieldValue missing[] = {{Key::addr, kDst}};  // swap needs a, b, bytes
  EXPECT_FALSE(cb.packet(Pkt::swap, missing).ok());
  EXPECT_EQ(cb.packet(Pkt::mem_incr, bad_atomic).code(), Code::invalid_argument);  // not on 4.4.2

  EXPECT_EQ(std::vector<uint32_t>(cb.dwords().begin(), cb.dwords().end()), before);
  EXPECT_EQ(cb.packet_count(), 1u);
}

TEST(CommandBuffer, RawPacketsAreDecodedOrRejected) {
  CommandBuffer src(Gen::v4_4_2);
  ASSERT_OK(src.write(kDst, std::vector<uint32_t>{0xA1, 0xB2, 0xC3}));
  ASSERT_OK(src.nop(5));
  ASSERT_OK(src.fence(kDst + 64, 0xFEED));
  ASSERT_OK(src.trap(9));

  CommandBuffer cb(Gen::v4_4_2);
  ASSERT_OK(cb.fence(kDst, 1));
  ASSERT_OK(cb.raw(src.dwords()));
  EXPECT_EQ(cb.packet_count(), 5u);
  EXPECT_EQ(cb.size_bytes(), 4 * (4 + src.dwords().size()));  // fence is 4 dwords
  expect_consistent(cb);

  // An unknown opcode, and a packet cut short, are refused with the offset.
  std::vector<uint32_t> bad(src.dwords().begin(), src.dwords().end());
  const size_t fence_at = src.packet_starts()[2];
  bad[fence_at] = 0x000000FFu;  // opcode 255
  const std::vector<uint32_t> snapshot(cb.dwords().begin(), cb.dwords().end());
  Status st = cb.raw(bad);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "dword " + std::to_string(fence_at))) << st.message();
  std::vector<uint32_t> cut(src.dwords().begin(), src.dwords().begin() + 3);  // write needs 7
  st = cb.raw(cut);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "truncated")) << st.message();
  EXPECT_EQ(std::vector<uint32_t>(cb.dwords().begin(), cb.dwords().end()), snapshot);
  EXPECT_EQ(cb.packet_count(), 5u);

  cb.clear();
  EXPECT_TRUE(cb.empty());
  EXPECT_EQ(cb.packet_count(), 0u);
}

TEST(CommandBuffer, Fence64WritesLowDwordFirst) {
  CommandBuffer cb(Gen::v4_4_2);
  ASSERT_OK(cb.fence64(kDst, 0x1122334455667788ull));
  sdma::StreamDecode d = sdma::decode_stream(cb.gen(), cb.dwords());
  ASSERT_EQ(d.packets.size(), 2u);
  EXPECT_EQ(d.packets[0].get(Key::addr), kDst);
  EXPECT_EQ(d.packets[0].get(Key::value), 0x55667788u);
  EXPECT_EQ(d.packets[1].get(Key::addr), kDst + 4);
  EXPECT_EQ(d.packets[1].get(Key::value), 0x11223344u);
}

TEST(CommandBuffer, FenceIsUncachedWhereTheGenerationNeedsIt) {
  for (Gen g : sdma::kAllGens) {
    CommandBuffer cb(g);
    ASSERT_OK(cb.fence(kDst, 7));
    Result<sdma::Packet> p = sdma::decode(g, cb.dwords());
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->get(Key::mtype), sdma::limits(g).fence_mtype_uc ? 3u : 0u) << sdma::gen_name(g);
  }
}

class SubmitChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(dev_, make_small());
    ASSERT_OK_AND_ASSIGN(q_, make_queue(*dev_, 0, 0, 4096));
  }
  std::unique_ptr<emu::EmuDevice> dev_;
  std::unique_ptr<Queue> q_;
};

TEST_F(SubmitChecks, WrongGenerationIsRefused) {
  CommandBuffer cb(Gen::v6);
  ASSERT_OK(cb.nop());
  Status st = q_->submit(cb, Deadline::now());
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "command_buffer()")) << st.message();
  EXPECT_EQ(q_->submitted(), 0u);
}

TEST_F(SubmitChecks, EmptySubmitPublishesNothing) {
  CommandBuffer cb = q_->command_buffer();
  QueueSpan span{nullptr, 77, 123};
  ASSERT_OK(q_->submit(cb, Deadline::now(), &span));
  EXPECT_EQ(span.queue, q_.get());  // submit fills the span: nothing built by hand
  EXPECT_EQ(span.begin, 0u);
  EXPECT_EQ(span.end, 0u);
  EXPECT_EQ(q_->submitted(), 0u);
  ASSERT_OK(cb.nop());
  ASSERT_OK(q_->submit(cb, long_deadline(), &span));
  const uint64_t end = 4 + frame_bytes(*q_);  // the NOP in the queue's frame
  EXPECT_EQ(span.begin, 0u);
  EXPECT_EQ(span.end, end);
  cb.clear();
  ASSERT_OK(q_->submit(cb, Deadline::now(), &span));
  EXPECT_EQ(span.begin, end);
  EXPECT_EQ(span.end, end);
  ASSERT_OK(q_->wait_done(long_deadline()));
  EXPECT_EQ(q_->completed(), end);
}

TEST_F(SubmitChecks, QueueReportsItsIdentity) {
  EXPECT_EQ(q_->gpu(), 0);
  EXPECT_EQ(q_->engine(), 0);
  EXPECT_EQ(q_->gen(), Gen::v4_4_2);
  EXPECT_EQ(q_->ring_bytes(), 4096u);
  EXPECT_EQ(q_->completed(), 0u);
  EXPECT_EQ(q_->submitted(), 0u);
  EXPECT_EQ(q_->command_buffer().gen(), Gen::v4_4_2);
  std::unique_ptr<Queue> q2;
  ASSERT_OK_AND_ASSIGN(q2, make_queue(*dev_, 1, 3, 8192));
  EXPECT_NE(q2->id(), q_->id());
  EXPECT_EQ(q2->gpu(), 1);
  EXPECT_EQ(q2->engine(), 3);
  const std::string diag = q2->diagnose();
  EXPECT_TRUE(contains(diag, "gpu 1 engine 3")) << diag;
  EXPECT_TRUE(contains(diag, "rptr=0x0 wptr=0x0")) << diag;
}

}  // namespace
}  // namespace conccl
