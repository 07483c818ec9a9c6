// tests/commands/command_buffer_test.cpp - recording commands: splitting, validation,
// all-or-nothing errors, raw packets; and the submit checks that need no engine.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <vector>

#include "conccl/sdma_packets.hpp"
#include "backends/emu/emu_test_util.hpp"
#include "packets/copy_split.hpp"
#include "packets/generation.hpp"
#include "packets/hopper_ce.hpp"

namespace conccl {
namespace {

using namespace conccl::test;  // with the sdma:: packet names (emu_test_util.hpp)

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

// append(): another buffer's commands after this one's, boundaries kept;
// another Isa or too little room is refused with nothing appended.
TEST(CommandBuffer, AppendJoinsBuffersOfOneIsa) {
  for (Isa isa : {Isa::sdma_gen(Gen::v4_4_2), Isa::sdma_gen(Gen::v6), Isa::hopper()}) {
    SCOPED_TRACE(isa.name());
    CommandBuffer a(isa), b(isa);
    ASSERT_OK(a.copy(0x10000, 0x20000, 4096));
    ASSERT_OK(a.signal_add(0x30000, 1));
    ASSERT_OK(b.wait_ge(0x30010, 5));
    ASSERT_OK(b.copy(0x40000, 0x50000, 8192));
    std::vector<uint32_t> want(a.dwords().begin(), a.dwords().end());
    want.insert(want.end(), b.dwords().begin(), b.dwords().end());
    std::vector<uint32_t> starts(a.packet_starts().begin(), a.packet_starts().end());
    for (uint32_t s : b.packet_starts()) starts.push_back(static_cast<uint32_t>(a.size_dwords() + s));
    CommandBuffer joined(isa);
    ASSERT_OK(joined.append(a));
    ASSERT_OK(joined.append(CommandBuffer(isa)));  // an empty one adds nothing
    ASSERT_OK(joined.append(b));
    EXPECT_EQ(std::vector<uint32_t>(joined.dwords().begin(), joined.dwords().end()), want);
    EXPECT_EQ(std::vector<uint32_t>(joined.packet_starts().begin(), joined.packet_starts().end()), starts);
    EXPECT_EQ(joined.disassemble(), a.disassemble() + b.disassemble());

    CommandBuffer other(isa.is_sdma() ? Isa::hopper() : Isa::sdma_gen(Gen::v4_4_2));
    ASSERT_OK(other.signal_add(0x30000, 1));
    EXPECT_EQ(joined.append(other).code(), Code::invalid_argument);
    CommandBuffer small(isa);
    ASSERT_OK(small.set_max_bytes(a.size_bytes() + 4));
    ASSERT_OK(small.append(a));
    EXPECT_EQ(small.append(b).code(), Code::resource_exhausted);
    EXPECT_EQ(small.size_bytes(), a.size_bytes()) << "a refused append leaves the buffer as it was";
    EXPECT_EQ(small.packet_count(), a.packet_count());
  }
}

TEST(CommandBuffer, InvalidCommandsAppendNothing) {
  CommandBuffer cb(Gen::v4_4_2);
  ASSERT_OK(SdmaPackets(cb).nop(2));
  const std::vector<uint32_t> before(cb.dwords().begin(), cb.dwords().end());

  EXPECT_EQ(cb.copy(kDst, kSrc, 0).code(), Code::invalid_argument);
  Status overlap = cb.copy(kDst, kDst + 8, 64);
  EXPECT_EQ(overlap.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(overlap.message(), "overlaps")) << overlap.message();
  EXPECT_EQ(cb.copy_bcst(kDst, kDst + 0x1000, kSrc, 0).code(), Code::invalid_argument);
  EXPECT_EQ(cb.fill(kDst + 2, 0x12345678, 64).code(), Code::invalid_argument);
  EXPECT_EQ(cb.fill(kDst, 0x12345678, 6).code(), Code::invalid_argument);
  EXPECT_EQ(cb.fill(kDst, 0x12345678, 0).code(), Code::invalid_argument);
  Status f64 = SdmaPackets(cb).fence64(kDst + 4, 1);
  EXPECT_EQ(f64.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(f64.message(), "8-byte")) << f64.message();
  EXPECT_FALSE(SdmaPackets(cb).fence(kDst + 2, 1).ok());
  EXPECT_FALSE(SdmaPackets(cb).atomic_add64(kDst + 4, -1).ok());
  EXPECT_FALSE(cb.timestamp(kDst + 4).ok());
  EXPECT_FALSE(SdmaPackets(cb).poll(kDst + 1, 0, ~0u, PollFunc::eq).ok());
  EXPECT_FALSE(SdmaPackets(cb).write(kDst + 1, std::vector<uint32_t>{1, 2}).ok());
  EXPECT_FALSE(SdmaPackets(cb).write(kDst, std::vector<uint32_t>{}).ok());
  EXPECT_FALSE(SdmaPackets(cb).nop(0x4000).ok());  // count is 14 bits
  const sdma::FieldValue bad_atomic[] = {{Key::op, 200}, {Key::addr, kDst}};  // op is 7 bits
  EXPECT_FALSE(SdmaPackets(cb).packet(Pkt::atomic, bad_atomic).ok());
  const sdma::FieldValue missing[] = {{Key::addr, kDst}};  // swap needs a, b, bytes
  EXPECT_FALSE(SdmaPackets(cb).packet(Pkt::swap, missing).ok());
  EXPECT_EQ(SdmaPackets(cb).packet(Pkt::mem_incr, bad_atomic).code(), Code::invalid_argument);  // not on 4.4.2

  EXPECT_EQ(std::vector<uint32_t>(cb.dwords().begin(), cb.dwords().end()), before);
  EXPECT_EQ(cb.packet_count(), 1u);
}

TEST(CommandBuffer, RawPacketsAreDecodedOrRejected) {
  CommandBuffer src(Gen::v4_4_2);
  ASSERT_OK(SdmaPackets(src).write(kDst, std::vector<uint32_t>{0xA1, 0xB2, 0xC3}));
  ASSERT_OK(SdmaPackets(src).nop(5));
  ASSERT_OK(SdmaPackets(src).fence(kDst + 64, 0xFEED));
  ASSERT_OK(SdmaPackets(src).trap(9));

  CommandBuffer cb(Gen::v4_4_2);
  ASSERT_OK(SdmaPackets(cb).fence(kDst, 1));
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
  ASSERT_OK(SdmaPackets(cb).fence64(kDst, 0x1122334455667788ull));
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
    ASSERT_OK(SdmaPackets(cb).fence(kDst, 7));
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
  ASSERT_OK(SdmaPackets(cb).nop());
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
  ASSERT_OK(SdmaPackets(cb).nop());
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

// ---- the size limit: refusing what can never be submitted, up front ----------

// One packet or method group of a copy / fill piece, as the lowerings emit it.
uint64_t copy_piece_bytes(const Isa& isa) {
  return isa.is_sdma() ? sdma::packet_dwords(isa.gen(), Pkt::copy, {}) * 4 : hopper::kCopyPieceDwords * 4;
}
uint64_t fill_piece_bytes(const Isa& isa) {
  return isa.is_sdma() ? sdma::packet_dwords(isa.gen(), Pkt::fill, {}) * 4 : hopper::kFillPieceDwords * 4;
}
uint64_t fill_setup_bytes(const Isa& isa) { return isa.is_sdma() ? 0 : hopper::kFillSetupDwords * 4; }

const Isa kLimitIsas[] = {Isa::sdma_gen(Gen::v4), Isa::sdma_gen(Gen::v4_4), Isa::sdma_gen(Gen::v4_4_2),
                          Isa::sdma_gen(Gen::v5_2), Isa::sdma_gen(Gen::v7), Isa::hopper()};

// Something already recorded, so that "unchanged" means more than "empty".
void record_prefix(CommandBuffer& cb) {
  if (cb.isa().is_sdma())
    ASSERT_OK(SdmaPackets(cb).nop(3));
  else
    ASSERT_OK(cb.signal_set(kDst, 5));
}

std::vector<uint32_t> dwords_of(const CommandBuffer& cb) { return {cb.dwords().begin(), cb.dwords().end()}; }

TEST(CommandBufferLimit, EncodedSizesAreWhatTheLoweringsAppend) {
  const uint64_t seed = 0x5A1E;
  std::mt19937_64 rng(seed);
  for (const Isa& isa : kLimitIsas) {
    const uint64_t max_copy = caps(isa).max_copy_bytes, max_fill = caps(isa).max_fill_bytes;
    for (int i = 0; i < 40; ++i) {
      // Small sizes, and sizes around 1-3 times the largest command; addresses
      // of every alignment (the SDMA tail rule depends on them).
      const uint64_t k = i % 4 == 0 ? 0 : 1 + rng() % 3;
      const uint64_t bytes = k == 0 ? 1 + rng() % 64 : k * max_copy - 4 + rng() % 9;
      const uint64_t dst = kDst + rng() % 8, src = kSrc + rng() % 8;
      CommandBuffer cb(isa);
      SCOPED_TRACE(isa.name() + ", seed " + std::to_string(seed) + ", step " + std::to_string(i));
      ASSERT_OK(cb.copy(dst, src, bytes));
      EXPECT_EQ(cb.copy_encoded_bytes(dst, src, bytes), cb.size_bytes())
          << isa.name() << " copy of " << bytes << " bytes " << hex(src) << " -> " << hex(dst) << " (seed " << seed
          << ")";
      const uint64_t fill_bytes = (k == 0 ? 4 + rng() % 64 : k * max_fill - 4 + rng() % 9) & ~3ull;
      CommandBuffer f(isa);
      ASSERT_OK(f.fill(kDst, 0x12345678u, fill_bytes));
      EXPECT_EQ(f.fill_encoded_bytes(fill_bytes), f.size_bytes())
          << isa.name() << " fill of " << fill_bytes << " bytes (seed " << seed << ")";
    }
    CommandBuffer cb(isa);
    EXPECT_EQ(cb.copy_encoded_bytes(kDst, kSrc, 0), 0u);
    EXPECT_EQ(cb.fill_encoded_bytes(6), 0u);
    EXPECT_EQ(cb.max_bytes(), CommandBuffer::kMaxBytes) << "a buffer of no queue: the largest ring";
  }
}

TEST(CommandBufferLimit, HugeCopiesAndFillsAreRefusedAtOnce) {
  const uint64_t huge = 1ull << 62;
  const uint64_t dst = 0x10000, src = dst + huge;  // disjoint
  const auto start = std::chrono::steady_clock::now();
  for (const Isa& isa : kLimitIsas) {
    CommandBuffer cb(isa);
    record_prefix(cb);
    const std::vector<uint32_t> before = dwords_of(cb);
    const size_t packets = cb.packet_count();
    Status copy = cb.copy(dst, src, huge);
    EXPECT_EQ(copy.code(), Code::resource_exhausted) << isa.name() << ": " << copy.to_string();
    Status fill = cb.fill(dst, 7, huge);
    EXPECT_EQ(fill.code(), Code::resource_exhausted) << isa.name() << ": " << fill.to_string();
    for (const Status& st : {copy, fill}) {
      // The message names the size, the commands it needs, the limit and the fix.
      EXPECT_TRUE(contains(st.message(), std::to_string(huge) + " bytes needs ")) << st.message();
      EXPECT_TRUE(contains(st.message(), " bytes of commands")) << st.message();
      EXPECT_TRUE(contains(st.message(), std::to_string(CommandBuffer::kMaxBytes))) << st.message();
      EXPECT_TRUE(contains(st.message(), "split it into parts of at most")) << st.message();
      EXPECT_TRUE(contains(st.message(), "ring_bytes")) << st.message();
    }
    if (isa.is_sdma()) {
      EXPECT_EQ(cb.copy_bcst(dst, src + huge, src, huge).code(), Code::resource_exhausted) << isa.name();
      if (caps(isa).swap) {
        EXPECT_EQ(cb.swap(dst, src, huge).code(), Code::resource_exhausted) << isa.name();
      }
    }
    EXPECT_EQ(dwords_of(cb), before) << isa.name() << ": all or nothing";
    EXPECT_EQ(cb.packet_count(), packets) << isa.name();
  }
  // A queue's command buffer (what the C API's conccl_queue_copy records into).
  ASSERT_OK_AND_ASSIGN(auto dev, make_small());
  ASSERT_OK_AND_ASSIGN(auto q, make_queue(*dev, 0, 0));
  CommandBuffer cb = q->command_buffer();
  EXPECT_EQ(cb.copy(dst, src, huge).code(), Code::resource_exhausted);
  EXPECT_TRUE(cb.empty());
  // Refusing is arithmetic, not encoding until memory runs out: all of the
  // above together is microseconds; seconds would mean packets were encoded.
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 2.0) << "refusing the huge commands took " << secs << " s";
}

TEST(CommandBufferLimit, JustPastTheDefaultLimitIsRefusedWithTheLargestPartThatFits) {
  for (const Isa& isa : kLimitIsas) {
    CommandBuffer cb(isa);
    const uint64_t per = copy_piece_bytes(isa), piece = caps(isa).max_copy_bytes;
    const uint64_t fit_pieces = CommandBuffer::kMaxBytes / per;
    // One piece more than the limit holds.
    const uint64_t bytes = (fit_pieces + 1) * piece;
    Status st = cb.copy(kDst, kDst + bytes, bytes);
    ASSERT_EQ(st.code(), Code::resource_exhausted) << isa.name() << ": " << st.to_string();
    EXPECT_TRUE(contains(st.message(), "needs " + std::to_string((fit_pieces + 1) * per) + " bytes of commands"))
        << st.message();
    EXPECT_TRUE(contains(st.message(), "parts of at most " + std::to_string(fit_pieces * piece) + " bytes"))
        << st.message();
    EXPECT_TRUE(cb.empty());
    const uint64_t fper = fill_piece_bytes(isa), fpiece = caps(isa).max_fill_bytes;
    const uint64_t ffit = (CommandBuffer::kMaxBytes - fill_setup_bytes(isa)) / fper;
    st = cb.fill(kDst, 1, (ffit + 1) * fpiece);
    ASSERT_EQ(st.code(), Code::resource_exhausted) << isa.name() << ": " << st.to_string();
    EXPECT_TRUE(contains(st.message(), "parts of at most " + std::to_string(ffit * fpiece) + " bytes"))
        << st.message();
    EXPECT_TRUE(cb.empty());
  }
}

TEST(CommandBufferLimit, SetLimitHoldsExactlyWhatFits) {
  for (const Isa& isa : kLimitIsas) {
    CommandBuffer cb(isa);
    record_prefix(cb);
    const uint64_t per = copy_piece_bytes(isa), piece = caps(isa).max_copy_bytes;
    ASSERT_OK(cb.set_max_bytes(cb.size_bytes() + 3 * per));
    EXPECT_EQ(cb.max_bytes(), cb.size_bytes() + 3 * per);
    const std::vector<uint32_t> before = dwords_of(cb);
    // Unaligned: 3 * piece + 1 bytes take 4 pieces; refused, nothing appended.
    Status st = cb.copy(kDst + 1, kSrc, 3 * piece + 1);
    ASSERT_EQ(st.code(), Code::resource_exhausted) << isa.name();
    EXPECT_TRUE(contains(st.message(), "set_max_bytes")) << st.message();
    EXPECT_TRUE(contains(st.message(), "parts of at most " + std::to_string(3 * piece))) << st.message();
    EXPECT_EQ(dwords_of(cb), before);
    if (isa.is_sdma()) {
      // Aligned with a 1-3 byte tail, the tail is a packet of its own:
      // 3 * piece - 1 bytes take 4 packets (two whole pieces, the rest of the
      // dword body, the tail), where unaligned they take 3.
      EXPECT_EQ(cb.copy_encoded_bytes(kDst, kSrc, 3 * piece - 1), 4 * per);
      EXPECT_EQ(cb.copy_encoded_bytes(kDst + 1, kSrc, 3 * piece - 1), 3 * per);
      EXPECT_EQ(cb.copy(kDst, kSrc, 3 * piece - 1).code(), Code::resource_exhausted);
      EXPECT_EQ(dwords_of(cb), before);
    }
    // Exactly at the limit: recorded.
    SCOPED_TRACE(isa.name());
    ASSERT_OK(cb.copy(kDst + 1, kSrc, 3 * piece));
    EXPECT_EQ(cb.size_bytes(), cb.max_bytes());
    // Full: even the smallest command is refused, whole.
    EXPECT_EQ(cb.copy(kDst, kSrc, 1).code(), Code::resource_exhausted);
    EXPECT_EQ(cb.signal_add(kDst, 1).code(), Code::resource_exhausted);
    EXPECT_EQ(cb.size_bytes(), cb.max_bytes());
    // A limit below what is recorded is refused; clear() makes room again.
    EXPECT_EQ(cb.set_max_bytes(cb.size_bytes() - 4).code(), Code::invalid_argument);
    cb.clear();
    ASSERT_OK(cb.copy(kDst, kSrc, 3 * piece));
  }
  // Over caller storage the limit is the storage; it can be lowered, not raised.
  std::vector<uint32_t> storage(64);
  CommandBuffer fixed(Isa::sdma_gen(Gen::v4_4_2), storage);
  EXPECT_EQ(fixed.max_bytes(), 256u);
  EXPECT_EQ(fixed.set_max_bytes(260).code(), Code::invalid_argument);
  ASSERT_OK(fixed.set_max_bytes(2 * copy_piece_bytes(fixed.isa())));
  Status st = fixed.copy(kDst, kSrc, 2 * fixed.caps().max_copy_bytes + 8);
  EXPECT_EQ(st.code(), Code::resource_exhausted);
  EXPECT_TRUE(contains(st.message(), "reserved ring space")) << st.message();
  EXPECT_TRUE(fixed.empty());
  // Its copy owns its dwords and is bound by the default limit, not the storage.
  ASSERT_OK(SdmaPackets(fixed).nop(1));
  CommandBuffer owned = fixed;
  EXPECT_EQ(owned.max_bytes(), CommandBuffer::kMaxBytes);
}

// Within the limit the commands run: on the emulator (SDMA 4.4.2, pieces of
// 0x3FFF00 bytes), a reservation of exactly the ring space a copy needs, and
// a queue's command buffer bounded to a few pieces; random data, every byte
// checked.
TEST(CommandBufferLimit, JustWithinTheLimitRecordsSubmitsAndCopies) {
  ASSERT_OK_AND_ASSIGN(auto dev, make_small(2, 4, 64u << 20));
  ASSERT_OK_AND_ASSIGN(auto q, make_queue(*dev, 0, 0, 64u << 10));
  const Isa isa = q->isa();
  const uint64_t per = copy_piece_bytes(isa), piece = q->caps().max_copy_bytes;
  const uint64_t bytes = 3 * piece;
  ASSERT_OK_AND_ASSIGN(Buffer src, dev->alloc(0, bytes + 8, MemKind::device));
  ASSERT_OK_AND_ASSIGN(Buffer dst, dev->alloc(1, bytes + 8, MemKind::device));
  const uint64_t seed = 0xC0FFEE;
  std::mt19937_64 rng(seed);
  fill_random(src.host, bytes + 8, rng);
  fill_random(dst.host, bytes + 8, rng);
  auto* d = static_cast<uint8_t*>(dst.host);
  const auto* s = static_cast<const uint8_t*>(src.host);
  const std::vector<uint8_t> dst_before(d, d + bytes + 8);

  {
    // A reservation of exactly three packets: one byte more (unaligned: a
    // fourth packet) is refused and leaves it empty; three pieces fill it.
    ASSERT_OK_AND_ASSIGN(Queue::Reservation r, q->reserve(3 * per, long_deadline()));
    Status st = r.commands().copy(dst.va + 1, src.va + 3, bytes + 1);
    ASSERT_EQ(st.code(), Code::resource_exhausted);
    EXPECT_TRUE(contains(st.message(), "reserved ring space")) << st.message();
    EXPECT_TRUE(r.commands().empty());
    ASSERT_OK(r.commands().copy(dst.va + 1, src.va + 3, bytes));
    EXPECT_EQ(r.commands().size_bytes(), 3 * per);
    QueueSpan span;
    ASSERT_OK(r.commit(&span));
    ASSERT_OK(q->wait_done(long_deadline(), span.end));
  }
  EXPECT_TRUE(bytes_equal(d + 1, s + 3, bytes)) << "seed " << seed;
  EXPECT_EQ(d[0], dst_before[0]) << "nothing before the copy";
  EXPECT_TRUE(bytes_equal(d + 1 + bytes, dst_before.data() + 1 + bytes, 7)) << "nothing after it";

  // The queue's command buffer bounded to what one submission takes, then to
  // a NOP and three pieces: a copy that needs a fourth piece is refused, the
  // one that fits runs.
  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(cb.set_max_bytes(q->max_submit_bytes()));
  Status too_big = cb.copy(kDst, kSrc, (q->max_submit_bytes() / per + 1) * piece);
  ASSERT_EQ(too_big.code(), Code::resource_exhausted);
  EXPECT_TRUE(contains(too_big.message(), std::to_string(q->max_submit_bytes()))) << too_big.message();
  EXPECT_TRUE(cb.empty());
  fill_random(src.host, bytes + 8, rng);
  ASSERT_OK(SdmaPackets(cb).nop(1));
  ASSERT_OK(cb.set_max_bytes(cb.size_bytes() + 3 * per));
  EXPECT_EQ(cb.copy(dst.va, src.va, bytes + 4).code(), Code::resource_exhausted);
  EXPECT_EQ(cb.size_bytes(), 8u) << "all or nothing";
  ASSERT_OK(cb.copy(dst.va, src.va, bytes));
  ASSERT_OK(run(*q, cb));
  EXPECT_TRUE(bytes_equal(d, s, bytes)) << "seed " << seed;
}

}  // namespace
}  // namespace conccl
