// tests/backends/emu/packet_semantics_test.cpp - what every emulated packet does to memory.
//
// Checks are model-based: the test keeps a host copy of each destination
// buffer, applies the packet's documented effect to the copy, and compares
// every byte of the buffer (so writes outside the target range are caught).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <thread>
#include <vector>

#include "conccl/sdma_packets.hpp"
#include "backends/emu/emu_test_util.hpp"
#include "packets/copy_split.hpp"
#include "packets/generation.hpp"

namespace conccl::sdma {
// Names parameterised tests' generations in test output ("4.4.2", not a byte).
inline void PrintTo(Gen g, std::ostream* os) { *os << gen_name(g); }
}  // namespace conccl::sdma

namespace conccl {
namespace {

using namespace conccl::test;  // with the sdma:: packet names (emu_test_util.hpp)

uint64_t steady_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

class EmuPackets : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(dev_, make_small(2, 4));
    ASSERT_OK_AND_ASSIGN(q_, make_queue(*dev_, 0, 0, 1u << 20));
  }
  // A buffer filled with random bytes, and its host model.
  void random_buffer(Buffer* b, std::vector<uint8_t>* model, int gpu, size_t bytes, MemKind kind) {
    ASSERT_OK_AND_ASSIGN(*b, dev_->alloc(gpu, bytes, kind));
    *model = random_bytes(bytes, rng_);
    std::memcpy(b->host, model->data(), bytes);
  }
  // Until the engine is seen blocked on this queue's poll (it re-evaluates
  // the poll every 200 us and reads as running meanwhile, so one sighting
  // counts; a second read could catch it between evaluations).
  void wait_polling(Queue& q) {
    const Deadline d = long_deadline();
    bool seen = false;
    while (!(seen = q.engine_status().state == EngineStatus::State::polling) && !d.expired())
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    ASSERT_TRUE(seen) << q.diagnose();
  }
  // Runs cb, expects a device fault whose text contains each of `needles`,
  // then resets the engine so the fixture's queue works again.
  void expect_fault(const CommandBuffer& cb, std::initializer_list<std::string> needles) {
    Status st = run(*q_, cb);
    ASSERT_EQ(st.code(), Code::device_fault) << st.to_string();
    for (const std::string& n : needles) EXPECT_TRUE(contains(st.message(), n)) << "want '" << n << "' in: " << st.message();
    ASSERT_OK(dev_->reset_engine(q_->gpu(), q_->engine()));
    EXPECT_EQ(q_->engine_status().state, EngineStatus::State::idle);
  }

  std::mt19937_64 rng_{0xFACADE};
  std::unique_ptr<emu::EmuDevice> dev_;
  std::unique_ptr<Queue> q_;
};

// ---- COPY_LINEAR -----------------------------------------------------------

TEST_F(EmuPackets, CopyEverySizeClassAndAlignment) {
  const uint64_t max = sdma::limits(Gen::v4_4_2).max_copy_bytes;
  ASSERT_EQ(max, 0x3FFF00u);
  const size_t cap = 2 * max + 64;
  Buffer src, dst;
  std::vector<uint8_t> src_m, dst_m;
  ASSERT_NO_FATAL_FAILURE(random_buffer(&src, &src_m, 1, cap, MemKind::device));
  ASSERT_NO_FATAL_FAILURE(random_buffer(&dst, &dst_m, 0, cap, MemKind::device));
  struct Case {
    uint64_t bytes, src_off, dst_off;
  };
  const Case cases[] = {
      {1, 0, 0},        {1, 5, 3},         {3, 0, 0},          {7, 1, 2},          {64, 0, 0},
      {4095, 4, 8},     {4096, 0, 0},      {4096, 1, 0},       {4097, 0, 3},       {65537, 8, 4},
      {max, 0, 0},      {max, 3, 1},       {max + 1, 0, 0},    {max + 3, 4, 4},    {max + 4, 2, 7},
      {2 * max + 13, 0, 0}, {2 * max + 13, 7, 5},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("copy of " + std::to_string(c.bytes) + " bytes, src+" + std::to_string(c.src_off) + " dst+" +
                 std::to_string(c.dst_off));
    emu::EngineStats before;
    ASSERT_OK_AND_ASSIGN(before, dev_->engine_stats(0, 0));
    CommandBuffer cb = q_->command_buffer();
    ASSERT_OK(cb.copy(dst.va_at(c.dst_off), src.va_at(c.src_off), c.bytes));
    const size_t pieces = sdma::copy_packet_count(Gen::v4_4_2, src.va_at(c.src_off), dst.va_at(c.dst_off), c.bytes);
    EXPECT_EQ(cb.packet_count(), pieces);
    if (c.bytes > max) {
      EXPECT_GE(pieces, 2u);
    }
    ASSERT_OK(run(*q_, cb));
    std::memcpy(dst_m.data() + c.dst_off, src_m.data() + c.src_off, c.bytes);
    ASSERT_TRUE(bytes_equal(dst.host, dst_m.data(), cap));
    ASSERT_TRUE(bytes_equal(src.host, src_m.data(), cap)) << "the source changed";
    emu::EngineStats after;
    ASSERT_OK_AND_ASSIGN(after, dev_->engine_stats(0, 0));
    EXPECT_EQ(after.packets - before.packets, pieces + frame_packets(*q_));
    EXPECT_EQ(after.bytes_copied - before.bytes_copied, c.bytes);
    // Change the destination model's future baseline with fresh random data.
    fill_random(dst_m.data() + c.dst_off, c.bytes, rng_);
    std::memcpy(static_cast<uint8_t*>(dst.host) + c.dst_off, dst_m.data() + c.dst_off, c.bytes);
  }
}

TEST_F(EmuPackets, CopyBetweenEveryKindOfMemory) {
  const size_t n = 300001;  // odd, and > one 256-B allocation granule
  struct Where {
    int gpu;
    MemKind kind;
    const char* name;
  };
  const Where places[] = {{0, MemKind::device, "gpu0"}, {1, MemKind::device, "gpu1"}, {-1, MemKind::host, "host"}};
  for (const Where& from : places)
    for (const Where& to : places) {
      SCOPED_TRACE(std::string(from.name) + " -> " + to.name);
      Buffer src, dst;
      std::vector<uint8_t> src_m, dst_m;
      ASSERT_NO_FATAL_FAILURE(random_buffer(&src, &src_m, from.gpu, n + 16, from.kind));
      ASSERT_NO_FATAL_FAILURE(random_buffer(&dst, &dst_m, to.gpu, n + 16, to.kind));
      CommandBuffer cb = q_->command_buffer();
      ASSERT_OK(cb.copy(dst.va_at(5), src.va_at(3), n));
      ASSERT_OK(run(*q_, cb));
      std::memcpy(dst_m.data() + 5, src_m.data() + 3, n);
      ASSERT_TRUE(bytes_equal(dst.host, dst_m.data(), n + 16));
      ASSERT_OK(dev_->free(src));
      ASSERT_OK(dev_->free(dst));
    }
}

TEST_F(EmuPackets, CopyBroadcastToTwoDestinations) {
  const uint64_t max = sdma::limits(Gen::v4_4_2).max_copy_bytes;
  const size_t cap = max + 4096;
  Buffer src, d0, d1;
  std::vector<uint8_t> src_m, d0_m, d1_m;
  ASSERT_NO_FATAL_FAILURE(random_buffer(&src, &src_m, 0, cap, MemKind::device));
  ASSERT_NO_FATAL_FAILURE(random_buffer(&d0, &d0_m, 0, cap, MemKind::device));
  ASSERT_NO_FATAL_FAILURE(random_buffer(&d1, &d1_m, 1, cap, MemKind::device));
  for (uint64_t bytes : {uint64_t(1), uint64_t(4097), max + 5}) {
    SCOPED_TRACE(bytes);
    CommandBuffer cb = q_->command_buffer();
    ASSERT_OK(cb.copy_bcst(d0.va_at(1), d1.va_at(2), src.va_at(3), bytes));
    EXPECT_EQ(cb.packet_count(), bytes > max ? 2u : 1u);
    ASSERT_OK(run(*q_, cb));
    std::memcpy(d0_m.data() + 1, src_m.data() + 3, bytes);
    std::memcpy(d1_m.data() + 2, src_m.data() + 3, bytes);
    ASSERT_TRUE(bytes_equal(d0.host, d0_m.data(), cap));
    ASSERT_TRUE(bytes_equal(d1.host, d1_m.data(), cap));
    fill_random(src_m.data(), cap, rng_);
    std::memcpy(src.host, src_m.data(), cap);
  }
}

// ---- CONSTANT_FILL, WRITE, FENCE -------------------------------------------

TEST_F(EmuPackets, FillDwordsAndBytes) {
  const uint64_t max = sdma::limits(Gen::v4_4_2).max_fill_bytes;
  const size_t cap = max + 8192;
  Buffer dst;
  std::vector<uint8_t> m;
  ASSERT_NO_FATAL_FAILURE(random_buffer(&dst, &m, 1, cap, MemKind::device));
  for (uint64_t bytes : {uint64_t(4), uint64_t(4096), max, max + 8}) {
    SCOPED_TRACE(bytes);
    const uint32_t v = static_cast<uint32_t>(rng_()) | 0x01010101u;
    CommandBuffer cb = q_->command_buffer();
    ASSERT_OK(cb.fill(dst.va_at(8), v, bytes));
    EXPECT_EQ(cb.packet_count(), bytes > max ? 2u : 1u);
    ASSERT_OK(run(*q_, cb));
    for (uint64_t i = 0; i < bytes; i += 4) std::memcpy(m.data() + 8 + i, &v, 4);
    ASSERT_TRUE(bytes_equal(dst.host, m.data(), cap));
  }
  // A byte fill (fill8) takes any address and size.
  const FieldValue f8[] = {{Key::dst, dst.va_at(13)}, {Key::value, 0xC3}, {Key::bytes, 1001}};
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::fill8, f8));
  ASSERT_OK(run(*q_, cb));
  std::memset(m.data() + 13, 0xC3, 1001);
  ASSERT_TRUE(bytes_equal(dst.host, m.data(), cap));

  // Misaligned dword fills: refused when recorded...
  cb.clear();
  EXPECT_EQ(cb.fill(dst.va_at(2), 1, 64).code(), Code::invalid_argument);
  EXPECT_EQ(cb.fill(dst.va, 1, 62).code(), Code::invalid_argument);
  EXPECT_TRUE(cb.empty());
  // ...and a fault when they reach an engine anyway (hand-patched dwords).
  ASSERT_OK(cb.fill(dst.va_at(8), 0x11111111, 64));
  std::vector<uint32_t> dw(cb.dwords().begin(), cb.dwords().end());
  dw[1] += 2;  // dst low dword
  cb.clear();
  ASSERT_OK(cb.raw(dw));
  ASSERT_NO_FATAL_FAILURE(expect_fault(cb, {"fill", "aligned"}));
  ASSERT_TRUE(bytes_equal(dst.host, m.data(), cap));
}

TEST_F(EmuPackets, WritePayloads) {
  const size_t cap = 256 << 10;
  Buffer dst;
  std::vector<uint8_t> m;
  ASSERT_NO_FATAL_FAILURE(random_buffer(&dst, &m, 0, cap, MemKind::device));
  uint64_t off = 4;
  for (size_t n : {size_t(1), size_t(2), size_t(17), size_t(1000), size_t(50000)}) {
    SCOPED_TRACE(n);
    const std::vector<uint32_t> data = random_dwords(n, rng_);
    CommandBuffer cb = q_->command_buffer();
    ASSERT_OK(SdmaPackets(cb).write(dst.va_at(off), data));
    ASSERT_EQ(cb.packet_count(), 1u);
    ASSERT_OK(run(*q_, cb));
    std::memcpy(m.data() + off, data.data(), n * 4);
    ASSERT_TRUE(bytes_equal(dst.host, m.data(), cap));
    off += n * 4 + 4;
  }
}

TEST_F(EmuPackets, FenceAndFence64) {
  Buffer dst;
  std::vector<uint8_t> m;
  ASSERT_NO_FATAL_FAILURE(random_buffer(&dst, &m, -1, 4096, MemKind::host));
  const uint32_t v32 = static_cast<uint32_t>(rng_());
  const uint64_t v64 = rng_();
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(SdmaPackets(cb).fence(dst.va_at(12), v32));
  ASSERT_OK(SdmaPackets(cb).fence64(dst.va_at(64), v64));
  ASSERT_OK(SdmaPackets(cb).fence(dst.va_at(12), v32 + 1));  // later fences win
  ASSERT_OK(run(*q_, cb));
  const uint32_t v32b = v32 + 1;
  std::memcpy(m.data() + 12, &v32b, 4);
  std::memcpy(m.data() + 64, &v64, 8);
  ASSERT_TRUE(bytes_equal(dst.host, m.data(), 4096));
}

// ---- ATOMIC ----------------------------------------------------------------

TEST_F(EmuPackets, AtomicAdd64WithNegativeValues) {
  Buffer ctr;
  ASSERT_OK_AND_ASSIGN(ctr, dev_->alloc(1, 256, MemKind::device));
  uint64_t want = rng_();
  host_store64(ctr.host, want);
  const int64_t adds[] = {-1, 5, -123456789012345, std::numeric_limits<int64_t>::min(),
                          std::numeric_limits<int64_t>::max(), 1, -static_cast<int64_t>(rng_() >> 2)};
  CommandBuffer cb = q_->command_buffer();
  for (int64_t a : adds) {
    ASSERT_OK(SdmaPackets(cb).atomic_add64(ctr.va, a));
    want += static_cast<uint64_t>(a);
  }
  ASSERT_OK(run(*q_, cb));
  EXPECT_EQ(host_load64(ctr.host), want);
  EXPECT_EQ(host_load64(static_cast<uint8_t*>(ctr.host) + 8), 0u) << "the add spilled into the next word";
}

// TC_OP codes: bits[4:0] operation, bit 5 = 64-bit, bit 6 = no return.
template <typename T>
T apply_op(unsigned op, T old, T src, T cmp) {
  using S = std::make_signed_t<T>;
  switch (op) {
    case 7: return src;
    case 8: return old == cmp ? src : old;
    case 15: return old + src;
    case 16: return old - src;
    case 17: return static_cast<S>(old) < static_cast<S>(src) ? old : src;
    case 18: return std::min(old, src);
    case 19: return static_cast<S>(old) > static_cast<S>(src) ? old : src;
    case 20: return std::max(old, src);
    case 21: return old & src;
    case 22: return old | src;
    case 23: return old ^ src;
    case 24: return old >= src ? 0 : old + 1;
    case 25: return (old == 0 || old > src) ? src : old - 1;
  }
  ADD_FAILURE() << "no model for op " << op;
  return old;
}

TEST_F(EmuPackets, AtomicOpsOfEveryKind) {
  Buffer mem;
  ASSERT_OK_AND_ASSIGN(mem, dev_->alloc(0, 64 << 10, MemKind::device));
  std::vector<uint8_t> m(mem.size);
  fill_random(m.data(), m.size(), rng_);
  std::memcpy(mem.host, m.data(), m.size());
  const unsigned ops[] = {7, 8, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25};
  CommandBuffer cb = q_->command_buffer();
  uint64_t off = 0;
  for (bool is64 : {false, true})
    for (bool no_return : {false, true})
      for (unsigned base : ops)
        for (int variant = 0; variant < 3; ++variant) {
          const unsigned op = base | (is64 ? 0x20 : 0) | (no_return ? 0x40 : 0);
          uint64_t src = rng_(), cmp = rng_();
          uint64_t old;
          std::memcpy(&old, m.data() + off, 8);
          if (variant == 1) cmp = old;          // cmpswap hit
          if (variant == 2) src = old >> 3;     // min/max/inc/dec on the other side
          if (base == 24 && variant == 1) src = is64 ? old : (old & 0xFFFFFFFF);  // inc wraps to 0
          if (base == 25 && variant == 1) {     // dec of 0 wraps to src
            std::memset(m.data() + off, 0, 8);
            std::memset(static_cast<uint8_t*>(mem.host) + off, 0, 8);
          }
          const FieldValue f[] = {{Key::op, op}, {Key::addr, mem.va_at(off)}, {Key::value, src}, {Key::cmp, cmp}};
          ASSERT_OK(SdmaPackets(cb).packet(Pkt::atomic, f));
          if (is64) {
            uint64_t o;
            std::memcpy(&o, m.data() + off, 8);
            const uint64_t n = apply_op<uint64_t>(base, o, src, cmp);
            std::memcpy(m.data() + off, &n, 8);
          } else {
            uint32_t o;
            std::memcpy(&o, m.data() + off, 4);
            const uint32_t n = apply_op<uint32_t>(base, o, static_cast<uint32_t>(src), static_cast<uint32_t>(cmp));
            std::memcpy(m.data() + off, &n, 4);
          }
          off += 16;
        }
  ASSERT_OK(run(*q_, cb));
  ASSERT_TRUE(bytes_equal(mem.host, m.data(), m.size()));

  // An operation the emulator does not know faults and names the TC_OP.
  cb.clear();
  const FieldValue bad[] = {{Key::op, 0x20 | 3}, {Key::addr, mem.va}, {Key::value, 1}};
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::atomic, bad));
  ASSERT_NO_FATAL_FAILURE(expect_fault(cb, {"TC_OP 35", "not emulated"}));
  // 64-bit atomics need 8-byte alignment (the field allows 4).
  cb.clear();
  const FieldValue mis[] = {{Key::op, 47}, {Key::addr, mem.va_at(4)}, {Key::value, 1}};
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::atomic, mis));
  ASSERT_NO_FATAL_FAILURE(expect_fault(cb, {"misaligned", hex(mem.va_at(4))}));
  ASSERT_TRUE(bytes_equal(mem.host, m.data(), m.size()));
}

// ---- POLL_REGMEM -----------------------------------------------------------

TEST_F(EmuPackets, PollWithEveryCompareFunction) {
  Buffer word, marks;
  ASSERT_OK_AND_ASSIGN(word, dev_->alloc(-1, 256, MemKind::host));
  ASSERT_OK_AND_ASSIGN(marks, dev_->alloc(0, 4096, MemKind::device));
  constexpr uint32_t kMask = 0x00FFFF00, kNoise = 0xAB0000CD;  // noise lies outside the mask
  using Compare = EngineStatus::Compare;
  struct Case {
    PollFunc func;
    Compare compare;  // how the engine status reports the function
    uint32_t ref, fail, fail2, pass;
  };
  const Case cases[] = {
      {PollFunc::always, Compare::always, 0x4000, 0, 0, 0},
      {PollFunc::lt, Compare::lt, 0x4000, 0x4000, 0x5000, 0x3F00},
      {PollFunc::le, Compare::le, 0x4000, 0x4100, 0x7700, 0x4000},
      {PollFunc::eq, Compare::eq, 0x4200, 0x4300, 0x4100, 0x4200},
      {PollFunc::ne, Compare::ne, 0x4400, 0x4400, 0x4400, 0x4500},
      {PollFunc::ge, Compare::ge, 0x4600, 0x4500, 0x0100, 0x4600},
      {PollFunc::gt, Compare::gt, 0x4800, 0x4800, 0x4700, 0x4900},
  };
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE("func " + std::to_string(static_cast<int>(c.func)));
    const std::vector<uint32_t> mark = random_dwords(2, rng_);
    host_store32(word.host, (c.fail << 8 & kMask) | kNoise);
    CommandBuffer cb = q_->command_buffer();
    ASSERT_OK(SdmaPackets(cb).poll(word.va, c.ref << 8, kMask, c.func));
    ASSERT_OK(SdmaPackets(cb).write(marks.va_at(i * 8), mark));
    QueueSpan end_span;
    ASSERT_OK(q_->submit(cb, long_deadline(), &end_span));
    const uint64_t end = end_span.end;
    if (c.func != PollFunc::always) {
      ASSERT_NO_FATAL_FAILURE(wait_polling(*q_));
      EngineStatus es = q_->engine_status();
      EXPECT_EQ(es.wait.addr, word.va);
      EXPECT_EQ(es.wait.compare, c.compare);
      EXPECT_EQ(es.wait.mask, kMask);
      EXPECT_EQ(es.wait.target, c.ref << 8);
      EXPECT_EQ(es.wait.seen, (c.fail << 8 & kMask) | kNoise);
      EXPECT_EQ(es.wait.bits, 32);
      EXPECT_EQ(es.wait.queue, q_->id());
      EXPECT_STREQ(es.wait.command, "POLL_REGMEM");
      // The text says the same: the word, its mask, the compare, the target and what it reads.
      char want[160];
      std::snprintf(want, sizeof want, "waits on POLL_REGMEM: *0x%llx & 0x%x %s 0x%x; it reads 0x%x)",
                    static_cast<unsigned long long>(word.va), kMask, compare_name(c.compare), c.ref << 8,
                    (c.fail << 8 & kMask) | kNoise);
      EXPECT_TRUE(contains(es.detail(), want)) << es.detail() << "\nwant: " << want;
      // Another value that still fails keeps it waiting.
      host_store32(word.host, (c.fail2 << 8 & kMask) | kNoise);
      dev_->wake_pollers();
      EXPECT_EQ(q_->wait_done(Deadline::after_ms(10), end).code(), Code::timeout);
      EXPECT_EQ(host_load32(marks.as<uint32_t>() + i * 2), 0u) << "ran past an unsatisfied poll";
      host_store32(word.host, (c.pass << 8 & kMask) | kNoise);
      dev_->wake_pollers();
    }
    ASSERT_OK(q_->wait_done(long_deadline(), end));
    EXPECT_TRUE(bytes_equal(marks.as<uint32_t>() + i * 2, mark.data(), 8));
    ++i;
  }
  emu::EngineStats st;
  ASSERT_OK_AND_ASSIGN(st, dev_->engine_stats(0, 0));
  EXPECT_EQ(st.poll_timeouts, 0u);
}

TEST_F(EmuPackets, PollReleasedByAnotherQueuesFence) {
  std::unique_ptr<Queue> other;
  ASSERT_OK_AND_ASSIGN(other, make_queue(*dev_, 1, 2));
  Buffer flag, src, dst;
  std::vector<uint8_t> src_m, dst_m;
  ASSERT_OK_AND_ASSIGN(flag, dev_->alloc(1, 256, MemKind::device));
  ASSERT_NO_FATAL_FAILURE(random_buffer(&src, &src_m, 1, 1 << 20, MemKind::device));
  ASSERT_NO_FATAL_FAILURE(random_buffer(&dst, &dst_m, 0, 1 << 20, MemKind::device));
  const uint32_t token = static_cast<uint32_t>(rng_()) | 1u;

  // gpu 0 waits for gpu 1's producer to finish writing src, then pulls it.
  CommandBuffer consumer = q_->command_buffer();
  ASSERT_OK(SdmaPackets(consumer).poll(flag.va, token, 0xFFFFFFFF, PollFunc::eq));
  ASSERT_OK(consumer.copy(dst.va, src.va, 1 << 20));
  QueueSpan end_span;
  ASSERT_OK(q_->submit(consumer, long_deadline(), &end_span));
  const uint64_t end = end_span.end;
  ASSERT_NO_FATAL_FAILURE(wait_polling(*q_));

  CommandBuffer producer = other->command_buffer();
  ASSERT_OK(producer.fill(src.va, 0x5A5AA5A5, 4096));
  ASSERT_OK(SdmaPackets(producer).fence(flag.va, token));
  ASSERT_OK(run(*other, producer));
  ASSERT_OK(q_->wait_done(long_deadline(), end));
  for (size_t k = 0; k < 4096; k += 4) std::memcpy(src_m.data() + k, "\xA5\xA5\x5A\x5A", 4);
  ASSERT_TRUE(bytes_equal(dst.host, src_m.data(), 1 << 20)) << "the copy ran before the producer's fence";
}

TEST_F(EmuPackets, PollWithFiniteRetryGivesUp) {
  Buffer word, marks;
  ASSERT_OK_AND_ASSIGN(word, dev_->alloc(0, 256, MemKind::device));
  ASSERT_OK_AND_ASSIGN(marks, dev_->alloc(0, 256, MemKind::device));
  const std::vector<uint32_t> mark = random_dwords(4, rng_);
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(SdmaPackets(cb).poll(word.va, 1, 0xFFFFFFFF, PollFunc::eq, /*interval=*/4, /*retry=*/3));
  ASSERT_OK(SdmaPackets(cb).poll(word.va, 1, 0xFFFFFFFF, PollFunc::eq, 4, /*retry=*/0));
  ASSERT_OK(SdmaPackets(cb).write(marks.va, mark));
  ASSERT_OK(run(*q_, cb));  // never satisfied, yet the queue moves on
  EXPECT_TRUE(bytes_equal(marks.host, mark.data(), 16));
  emu::EngineStats st;
  ASSERT_OK_AND_ASSIGN(st, dev_->engine_stats(0, 0));
  EXPECT_EQ(st.poll_timeouts, 2u);
  EXPECT_EQ(host_load32(word.host), 0u);
}

// ---- TIMESTAMP, TRAP -------------------------------------------------------

TEST_F(EmuPackets, TimestampsAreNonzeroMonotonicAndOrdered) {
  Buffer ts, src, dst;
  std::vector<uint8_t> src_m, dst_m;
  ASSERT_OK_AND_ASSIGN(ts, dev_->alloc(-1, 4096, MemKind::host));
  ASSERT_NO_FATAL_FAILURE(random_buffer(&src, &src_m, 0, 4 << 20, MemKind::device));
  ASSERT_NO_FATAL_FAILURE(random_buffer(&dst, &dst_m, 1, 4 << 20, MemKind::device));
  const uint64_t host_before = steady_ns();
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(cb.timestamp(ts.va_at(0)));
  ASSERT_OK(cb.copy(dst.va, src.va, 4 << 20));  // real work between two stamps
  ASSERT_OK(cb.timestamp(ts.va_at(8)));
  for (int k = 2; k < 32; ++k) {
    ASSERT_OK(SdmaPackets(cb).write(dst.va_at(k * 4), random_dwords(1, rng_)));
    ASSERT_OK(cb.timestamp(ts.va_at(k * 8)));
  }
  const FieldValue local[] = {{Key::addr, ts.va_at(32 * 8)}};
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::timestamp_local, local));
  ASSERT_OK(run(*q_, cb));
  const uint64_t host_after = steady_ns();
  const auto* t = ts.as<const uint64_t>();
  EXPECT_NE(t[0], 0u);
  EXPECT_GE(t[0], host_before);
  EXPECT_GT(t[1], t[0]) << "a 4 MiB copy took no time";
  for (int k = 2; k <= 32; ++k) EXPECT_GE(t[k], t[k - 1]) << k;
  EXPECT_LE(t[32], host_after);
  EXPECT_EQ(t[33], 0u);
  EXPECT_FALSE(cb.timestamp(ts.va_at(4)).ok()) << "timestamps need an 8-byte aligned address";

  // Across queues: B stamps only after A's fence, so B's stamp is later.
  std::unique_ptr<Queue> b;
  ASSERT_OK_AND_ASSIGN(b, make_queue(*dev_, 1, 1));
  Buffer flag;
  ASSERT_OK_AND_ASSIGN(flag, dev_->alloc(-1, 256, MemKind::host));
  CommandBuffer cbb = b->command_buffer();
  ASSERT_OK(SdmaPackets(cbb).poll(flag.va, 7, 0xFFFFFFFF, PollFunc::eq));
  ASSERT_OK(cbb.timestamp(ts.va_at(512)));
  QueueSpan bend_span;
  ASSERT_OK(b->submit(cbb, long_deadline(), &bend_span));
  const uint64_t bend = bend_span.end;
  CommandBuffer cba = q_->command_buffer();
  ASSERT_OK(cba.timestamp(ts.va_at(520)));
  ASSERT_OK(SdmaPackets(cba).fence(flag.va, 7));
  ASSERT_OK(run(*q_, cba));
  ASSERT_OK(b->wait_done(long_deadline(), bend));
  EXPECT_GE(t[64], t[65]);
  EXPECT_GE(t[65], t[32]);
}

TEST_F(EmuPackets, TrapRaisesTheQueueEvent) {
  Event& ev = *q_->wake_event();
  const uint64_t c0 = ev.count();
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(SdmaPackets(cb).trap(0xABC));
  ASSERT_OK(q_->submit(cb, long_deadline()));
  ASSERT_OK(ev.wait(c0 + 1, long_deadline()));
  EXPECT_EQ(ev.count(), c0 + 1);
  EXPECT_EQ(ev.last_context(), 0xABCu);

  // No trap: the wait ends at its deadline, with a message.
  const auto t0 = Clock::now();
  Status st = ev.wait(c0 + 2, Deadline::after_ms(15));
  EXPECT_EQ(st.code(), Code::timeout);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(15));
  EXPECT_TRUE(contains(st.message(), "did not reach")) << st.message();

  // Several traps; another queue's traps do not count here.
  std::unique_ptr<Queue> other;
  ASSERT_OK_AND_ASSIGN(other, make_queue(*dev_, 0, 0));
  CommandBuffer ocb = other->command_buffer();
  ASSERT_OK(SdmaPackets(ocb).trap(0x999));
  ASSERT_OK(run(*other, ocb));
  ASSERT_OK(other->wake_event()->wait(1, long_deadline()));
  EXPECT_EQ(ev.count(), c0 + 1);
  cb.clear();
  for (uint32_t k = 1; k <= 3; ++k) ASSERT_OK(SdmaPackets(cb).trap(k));
  ASSERT_OK(run(*q_, cb));
  ASSERT_OK(ev.wait(c0 + 4, long_deadline()));
  EXPECT_EQ(ev.last_context(), 3u);
  // A target already reached returns at once, even with a past deadline.
  ASSERT_OK(ev.wait(c0 + 4, Deadline::now()));
}

// ---- COND_EXE, IB ----------------------------------------------------------

TEST_F(EmuPackets, CondExeSkipsOrExecutes) {
  Buffer cond, out;
  ASSERT_OK_AND_ASSIGN(cond, dev_->alloc(0, 256, MemKind::device));
  ASSERT_OK_AND_ASSIGN(out, dev_->alloc(0, 4096, MemKind::device));
  const uint32_t ref = static_cast<uint32_t>(rng_()) | 1u;
  for (bool take : {true, false}) {
    SCOPED_TRACE(take ? "condition true" : "condition false");
    std::memset(out.host, 0, 4096);
    host_store32(cond.host, take ? ref : ref ^ 0x100);
    const std::vector<uint32_t> guarded_a = random_dwords(3, rng_), guarded_b = random_dwords(2, rng_),
                                after = random_dwords(2, rng_);
    CommandBuffer body = q_->command_buffer();
    ASSERT_OK(SdmaPackets(body).write(out.va_at(0), guarded_a));
    ASSERT_OK(SdmaPackets(body).write(out.va_at(64), guarded_b));
    CommandBuffer cb = q_->command_buffer();
    const FieldValue f[] = {{Key::addr, cond.va}, {Key::ref, ref}, {Key::count, body.dwords().size()}};
    ASSERT_OK(SdmaPackets(cb).packet(Pkt::cond_exe, f));
    ASSERT_OK(cb.raw(body.dwords()));
    ASSERT_OK(SdmaPackets(cb).write(out.va_at(128), after));
    ASSERT_OK(run(*q_, cb));
    EXPECT_EQ(q_->completed(), q_->submitted());
    std::vector<uint8_t> want(4096, 0);
    if (take) {
      std::memcpy(want.data(), guarded_a.data(), 12);
      std::memcpy(want.data() + 64, guarded_b.data(), 8);
    }
    std::memcpy(want.data() + 128, after.data(), 8);
    EXPECT_TRUE(bytes_equal(out.host, want.data(), 4096));
  }
}

TEST_F(EmuPackets, IndirectBufferInDeviceMemory) {
  Buffer ib, src, dst, ctr;
  std::vector<uint8_t> src_m, dst_m;
  ASSERT_OK_AND_ASSIGN(ib, dev_->alloc(1, 4096, MemKind::device));
  ASSERT_OK_AND_ASSIGN(ctr, dev_->alloc(0, 256, MemKind::device));
  ASSERT_NO_FATAL_FAILURE(random_buffer(&src, &src_m, 0, 100000, MemKind::device));
  ASSERT_NO_FATAL_FAILURE(random_buffer(&dst, &dst_m, 1, 100000, MemKind::device));
  const std::vector<uint32_t> data = random_dwords(9, rng_);
  CommandBuffer inner = q_->command_buffer();
  ASSERT_OK(inner.copy(dst.va_at(1), src.va_at(2), 77777));
  ASSERT_OK(SdmaPackets(inner).write(dst.va_at(80000), data));
  ASSERT_OK(SdmaPackets(inner).atomic_add64(ctr.va, -3));
  ASSERT_OK(SdmaPackets(inner).fence(ctr.va_at(8), 0xD0D0));
  while (inner.dwords().size() % 8) ASSERT_OK(SdmaPackets(inner).nop());  // IBs end on 8 dwords
  std::memcpy(ib.host, inner.dwords().data(), inner.size_bytes());

  CommandBuffer cb = q_->command_buffer();
  const FieldValue f[] = {{Key::addr, ib.va}, {Key::size, inner.dwords().size()}};
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::ib, f));
  ASSERT_OK(SdmaPackets(cb).fence(ctr.va_at(12), 0xE0E0));
  ASSERT_OK(run(*q_, cb));
  std::memcpy(dst_m.data() + 1, src_m.data() + 2, 77777);
  std::memcpy(dst_m.data() + 80000, data.data(), 36);
  ASSERT_TRUE(bytes_equal(dst.host, dst_m.data(), dst_m.size()));
  EXPECT_EQ(host_load64(ctr.host), uint64_t(-3));
  EXPECT_EQ(host_load32(ctr.as<uint32_t>() + 2), 0xD0D0u);
  EXPECT_EQ(host_load32(ctr.as<uint32_t>() + 3), 0xE0E0u);

  // What an IB may not do: chain another IB, wait on a poll, live nowhere,
  // or hold something that is not a packet.
  CommandBuffer nested = q_->command_buffer();
  ASSERT_OK(SdmaPackets(nested).packet(Pkt::ib, f));
  while (nested.dwords().size() % 8) ASSERT_OK(SdmaPackets(nested).nop());
  std::memcpy(static_cast<uint8_t*>(ib.host) + 1024, nested.dwords().data(), nested.size_bytes());
  const FieldValue fn[] = {{Key::addr, ib.va_at(1024)}, {Key::size, nested.dwords().size()}};
  cb.clear();
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::ib, fn));
  ASSERT_NO_FATAL_FAILURE(expect_fault(cb, {"may not chain"}));

  CommandBuffer polls = q_->command_buffer();
  ASSERT_OK(SdmaPackets(polls).poll(ctr.va_at(16), 1, 0xFFFFFFFF, PollFunc::eq));
  while (polls.dwords().size() % 8) ASSERT_OK(SdmaPackets(polls).nop());
  std::memcpy(static_cast<uint8_t*>(ib.host) + 2048, polls.dwords().data(), polls.size_bytes());
  const FieldValue fp[] = {{Key::addr, ib.va_at(2048)}, {Key::size, polls.dwords().size()}};
  cb.clear();
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::ib, fp));
  ASSERT_NO_FATAL_FAILURE(expect_fault(cb, {"polls inside indirect buffers"}));

  const uint64_t nowhere = emu::kGpuVaBase + 5 * emu::kGpuVaStride;
  const FieldValue fu[] = {{Key::addr, nowhere}, {Key::size, 8}};
  cb.clear();
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::ib, fu));
  ASSERT_NO_FATAL_FAILURE(expect_fault(cb, {"page fault", "indirect buffer", hex(nowhere)}));

  std::memset(static_cast<uint8_t*>(ib.host) + 3072, 0xFF, 32);
  const FieldValue fg[] = {{Key::addr, ib.va_at(3072)}, {Key::size, 8}};
  cb.clear();
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::ib, fg));
  ASSERT_NO_FATAL_FAILURE(expect_fault(cb, {"in indirect buffer " + hex(ib.va_at(3072)), "dword 0"}));
  ASSERT_TRUE(bytes_equal(dst.host, dst_m.data(), dst_m.size()));
}

// ---- COPY_LINEAR_SUB_WINDOW, SWAP ------------------------------------------

struct Window {
  uint64_t x, y, z, pitch, slice;  // elements
};

// Applies a sub-window copy to host models.
void model_window(std::vector<uint8_t>& dst, const std::vector<uint8_t>& src, uint64_t es, const Window& s,
                  const Window& d, uint64_t rx, uint64_t ry, uint64_t rz) {
  for (uint64_t z = 0; z < rz; ++z)
    for (uint64_t y = 0; y < ry; ++y)
      std::memcpy(dst.data() + ((d.z + z) * d.slice + (d.y + y) * d.pitch + d.x) * es,
                  src.data() + ((s.z + z) * s.slice + (s.y + y) * s.pitch + s.x) * es, rx * es);
}

TEST_F(EmuPackets, CopyWindowRectangles) {
  struct Case {
    uint64_t elementsize_log2;
    Window s, d;
    uint64_t rx, ry, rz;
  };
  const Case cases[] = {
      // 2D, bytes: a 123x20 rectangle of a 300-byte pitch image into a 256-byte pitch one
      {0, {17, 5, 0, 300, 300 * 40}, {3, 9, 0, 256, 256 * 40}, 123, 20, 1},
      // 3D, dwords: 10x7x3 elements between images with different slice pitches
      {2, {1, 2, 1, 64, 64 * 16}, {5, 0, 2, 32, 32 * 12}, 10, 7, 3},
      // 16-byte elements, a single row
      {4, {0, 3, 0, 8, 8 * 8}, {2, 1, 0, 8, 8 * 8}, 6, 1, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("elementsize " + std::to_string(1 << c.elementsize_log2));
    const uint64_t es = 1ull << c.elementsize_log2;
    const size_t sbytes = (c.s.z + c.rz + 1) * c.s.slice * es, dbytes = (c.d.z + c.rz + 1) * c.d.slice * es;
    Buffer src, dst;
    std::vector<uint8_t> src_m, dst_m;
    ASSERT_NO_FATAL_FAILURE(random_buffer(&src, &src_m, 0, sbytes, MemKind::device));
    ASSERT_NO_FATAL_FAILURE(random_buffer(&dst, &dst_m, 1, dbytes, MemKind::device));
    const FieldValue f[] = {{Key::elementsize, c.elementsize_log2},
                            {Key::src, src.va},
                            {Key::src_x, c.s.x},
                            {Key::src_y, c.s.y},
                            {Key::src_z, c.s.z},
                            {Key::src_pitch, c.s.pitch},
                            {Key::src_slice_pitch, c.s.slice},
                            {Key::dst, dst.va},
                            {Key::dst_x, c.d.x},
                            {Key::dst_y, c.d.y},
                            {Key::dst_z, c.d.z},
                            {Key::dst_pitch, c.d.pitch},
                            {Key::dst_slice_pitch, c.d.slice},
                            {Key::rect_x, c.rx},
                            {Key::rect_y, c.ry},
                            {Key::rect_z, c.rz}};
    CommandBuffer cb = q_->command_buffer();
    ASSERT_OK(SdmaPackets(cb).packet(Pkt::copy_window, f));
    ASSERT_OK(run(*q_, cb));
    model_window(dst_m, src_m, es, c.s, c.d, c.rx, c.ry, c.rz);
    ASSERT_TRUE(bytes_equal(dst.host, dst_m.data(), dbytes));
    ASSERT_TRUE(bytes_equal(src.host, src_m.data(), sbytes));
    emu::EngineStats st;
    ASSERT_OK_AND_ASSIGN(st, dev_->engine_stats(0, 0));
    EXPECT_GE(st.bytes_copied, c.rx * c.ry * c.rz * es);
  }
}

TEST_F(EmuPackets, SwapExchangesTwoRanges) {
  Buffer a, b;
  std::vector<uint8_t> am, bm;
  ASSERT_NO_FATAL_FAILURE(random_buffer(&a, &am, 0, 8192, MemKind::device));
  ASSERT_NO_FATAL_FAILURE(random_buffer(&b, &bm, 1, 8192, MemKind::device));
  const FieldValue f[] = {{Key::a, a.va_at(3)}, {Key::b, b.va_at(100)}, {Key::bytes, 4099}};
  CommandBuffer cb = q_->command_buffer();
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::swap, f));
  ASSERT_OK(run(*q_, cb));
  std::swap_ranges(am.begin() + 3, am.begin() + 3 + 4099, bm.begin() + 100);
  EXPECT_TRUE(bytes_equal(a.host, am.data(), 8192));
  EXPECT_TRUE(bytes_equal(b.host, bm.data(), 8192));
  // SWAP_LINEAR exists only on MI300's SDMA 4.4.2.
  CommandBuffer other(Gen::v6);
  EXPECT_EQ(SdmaPackets(other).packet(Pkt::swap, f).code(), Code::invalid_argument);
}

// ---- the rest of the vocabulary -------------------------------------------

TEST_F(EmuPackets, CacheAndRegisterPacketsAreHarmlessOrRefused) {
  Buffer out;
  ASSERT_OK_AND_ASSIGN(out, dev_->alloc(0, 256, MemKind::device));
  const std::vector<uint32_t> mark = random_dwords(2, rng_);
  CommandBuffer cb = q_->command_buffer();
  const FieldValue hdp[] = {{Key::done, 0x80}, {Key::req, 0x84}, {Key::ref, 1}, {Key::mask, 1}};
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::hdp_flush, hdp));
  const FieldValue preg[] = {{Key::req, 0x80000000u}};
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::poll_reg, preg));
  const FieldValue tset[] = {{Key::value, 1234}};
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::timestamp_set, tset));
  ASSERT_OK(SdmaPackets(cb).write(out.va, mark));
  ASSERT_OK(run(*q_, cb));
  EXPECT_TRUE(bytes_equal(out.host, mark.data(), 8));

  cb.clear();
  const FieldValue sem[] = {{Key::addr, out.va_at(64)}};
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::semaphore, sem));
  ASSERT_NO_FATAL_FAILURE(expect_fault(cb, {"semaphore", "not emulated"}));
  cb.clear();
  const FieldValue reg[] = {{Key::reg, 0x1234}, {Key::value, 1}};
  ASSERT_OK(SdmaPackets(cb).packet(Pkt::reg_write, reg));
  ASSERT_NO_FATAL_FAILURE(expect_fault(cb, {"privileged"}));
}

// The common vocabulary on every generation the emulator can take.
class EveryGeneration : public ::testing::TestWithParam<Gen> {};

TEST_P(EveryGeneration, CommonPacketsExecute) {
  const Gen g = GetParam();
  std::unique_ptr<emu::EmuDevice> dev;
  ASSERT_OK_AND_ASSIGN(dev, emu::create(options("small", 0, 0, std::string(sdma::gen_name(g)))));
  ASSERT_EQ(dev->topology().gpus[0].isa, Isa::sdma_gen(g));
  std::unique_ptr<Queue> q;
  ASSERT_OK_AND_ASSIGN(q, make_queue(*dev, 0, 1, 64 << 10));
  ASSERT_EQ(q->gen(), g);
  std::mt19937_64 rng(static_cast<uint64_t>(g) + 1);
  Buffer src, dst, sig;
  ASSERT_OK_AND_ASSIGN(src, dev->alloc(0, 1 << 20, MemKind::device));
  ASSERT_OK_AND_ASSIGN(dst, dev->alloc(1, 1 << 20, MemKind::device));
  ASSERT_OK_AND_ASSIGN(sig, dev->alloc(-1, 4096, MemKind::host));
  std::vector<uint8_t> src_m = random_bytes(1 << 20, rng), dst_m = random_bytes(1 << 20, rng);
  std::memcpy(src.host, src_m.data(), src_m.size());
  std::memcpy(dst.host, dst_m.data(), dst_m.size());
  const std::vector<uint32_t> data = random_dwords(5, rng);

  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(cb.copy(dst.va_at(1), src.va_at(3), 600001));
  ASSERT_OK(cb.fill(dst.va_at(700000), 0xA1B2C3D4, 4096));
  ASSERT_OK(SdmaPackets(cb).write(dst.va_at(800000), data));
  ASSERT_OK(cb.copy_bcst(dst.va_at(900000), dst.va_at(950000), src.va, 1000));
  ASSERT_OK(SdmaPackets(cb).atomic_add64(sig.va, -7));
  ASSERT_OK(SdmaPackets(cb).fence64(sig.va_at(8), 0x0123456789ABCDEFull));
  ASSERT_OK(SdmaPackets(cb).poll(sig.va_at(8), 0x89ABCDEF, 0xFFFFFFFF, PollFunc::eq));
  ASSERT_OK(cb.timestamp(sig.va_at(16)));
  if (sdma::limits(g).has_mem_incr) {
    const FieldValue inc[] = {{Key::addr, sig.va_at(24)}};
    ASSERT_OK(SdmaPackets(cb).packet(Pkt::mem_incr, inc));
    ASSERT_OK(SdmaPackets(cb).packet(Pkt::mem_incr, inc));
  }
  if (sdma::limits(g).has_gcr) {
    const FieldValue gcr[] = {{Key::base, 0}, {Key::limit, 0}};
    ASSERT_OK(SdmaPackets(cb).packet(Pkt::gcr_user, gcr));
  }
  ASSERT_OK(SdmaPackets(cb).trap(0x77));
  ASSERT_OK(run(*q, cb));
  ASSERT_OK(q->wake_event()->wait(1, long_deadline()));

  std::memcpy(dst_m.data() + 1, src_m.data() + 3, 600001);
  for (int k = 0; k < 4096; k += 4) std::memcpy(dst_m.data() + 700000 + k, "\xD4\xC3\xB2\xA1", 4);
  std::memcpy(dst_m.data() + 800000, data.data(), 20);
  std::memcpy(dst_m.data() + 900000, src_m.data(), 1000);
  std::memcpy(dst_m.data() + 950000, src_m.data(), 1000);
  EXPECT_TRUE(bytes_equal(dst.host, dst_m.data(), dst_m.size()));
  const auto* s = sig.as<const uint64_t>();
  EXPECT_EQ(s[0], uint64_t(-7));
  EXPECT_EQ(s[1], 0x0123456789ABCDEFull);
  EXPECT_NE(s[2], 0u);
  EXPECT_EQ(s[3], sdma::limits(g).has_mem_incr ? 2u : 0u);
  EXPECT_EQ(q->wake_event()->last_context(), 0x77u);
}

INSTANTIATE_TEST_SUITE_P(Emu, EveryGeneration, ::testing::ValuesIn(sdma::kAllGens),
                         [](const ::testing::TestParamInfo<Gen>& i) {
                           std::string n = "v" + std::string(sdma::gen_name(i.param));
                           for (char& ch : n)
                             if (ch == '.') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace conccl
