// tests/commands/vocabulary_test.cpp - the command vocabulary and its two
// lowerings: exact Hopper method dwords (computed here from the bit positions
// of clc8b5.h / clc56f.h, independently of packets/hopper_ce's emitters),
// the SDMA lowering of the signal commands, capabilities as data, errors for
// commands an instruction set lacks, all-or-nothing appends, and recording
// into fixed (reserved) storage.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "conccl/hopper_methods.hpp"
#include "conccl/sdma_packets.hpp"
#include "conccl/commands.hpp"
#include "conccl/emu.hpp"
#include "conccl/signal.hpp"
#include "backends/emu/emu_test_util.hpp"
#include "packets/hopper_ce.hpp"
#include "packets/sdma_asm.hpp"

namespace conccl {
namespace {

using namespace conccl::test;

// (2 << 28) | (count << 16) | (subch << 13) | (method >> 2): NVC56F_DMA_SEC_OP_INC_METHOD.
constexpr uint32_t inc(uint32_t subch, uint32_t method, uint32_t count) {
  return (2u << 28) | (count << 16) | (subch << 13) | (method >> 2);
}

std::vector<uint32_t> dw(const CommandBuffer& cb) { return {cb.dwords().begin(), cb.dwords().end()}; }

TEST(Vocabulary, IsaNamesAndCaps) {
  EXPECT_EQ(Isa::hopper().name(), "Hopper CE");
  EXPECT_EQ(Isa::sdma_gen(sdma::Gen::v4_4_2).name(), "SDMA 4.4.2");
  ASSERT_OK_AND_ASSIGN(Isa h, parse_isa("hopper-ce"));
  EXPECT_EQ(h, Isa::hopper());
  ASSERT_OK_AND_ASSIGN(Isa s, parse_isa("SDMA 5.2"));
  EXPECT_EQ(s, Isa::sdma_gen(sdma::Gen::v5_2));
  EXPECT_EQ(parse_isa("volta").status().code(), Code::invalid_argument);

  const Caps& hc = caps(Isa::hopper());
  EXPECT_FALSE(hc.broadcast_copy);
  EXPECT_FALSE(hc.swap);
  EXPECT_FALSE(hc.signal_twin);
  EXPECT_TRUE(hc.atomic64);
  EXPECT_EQ(hc.timestamp_offset, 8u);
  EXPECT_EQ(hc.max_copy_bytes, 1ull << 31);
  const Caps& mi300 = caps(Isa::sdma_gen(sdma::Gen::v4_4_2));
  EXPECT_TRUE(mi300.broadcast_copy);
  EXPECT_TRUE(mi300.swap);
  EXPECT_TRUE(mi300.signal_twin);
  EXPECT_EQ(mi300.timestamp_offset, 0u);
  EXPECT_EQ(mi300.max_copy_bytes, 0x3FFF00u);
  for (sdma::Gen g : {sdma::Gen::v4, sdma::Gen::v5, sdma::Gen::v5_2, sdma::Gen::v6, sdma::Gen::v7}) {
    EXPECT_FALSE(caps(Isa::sdma_gen(g)).swap) << sdma::gen_name(g);
    EXPECT_EQ(caps(Isa::sdma_gen(g)).max_copy_bytes, sdma::limits(g).max_copy_bytes);
  }
}

TEST(HopperLowering, CopyIsOffsetsLengthLaunch) {
  CommandBuffer cb(Isa::hopper());
  ASSERT_OK(cb.copy(0x123456789000ull, 0xAB00001000ull, 4096));
  const std::vector<uint32_t> want = {
      inc(4, 0x400, 4), 0xAB, 0x00001000, 0x1234, 0x56789000,  // OFFSET_IN_UPPER.. OFFSET_OUT_LOWER
      inc(4, 0x418, 1), 4096,                                  // LINE_LENGTH_IN
      inc(4, 0x300, 1), 2u | (1u << 7) | (1u << 8),            // LAUNCH_DMA NON_PIPELINED, pitch/pitch
  };
  EXPECT_EQ(dw(cb), want);
  EXPECT_EQ(cb.packet_count(), 1u);
}

// A copy recorded as independent of the earlier ones may run alongside them:
// its first piece is PIPELINED too. SDMA runs packets in order: no change.
TEST(HopperLowering, CopiesAlongsideEarlierOnesArePipelined) {
  CommandBuffer cb(Isa::hopper());
  ASSERT_OK(cb.copy(0x10000, 0x20000, 4096));
  ASSERT_OK(cb.copy(0x30000, 0x20000, 4096, CommandBuffer::CopyOrder::alongside_earlier));
  const std::vector<uint32_t> d = dw(cb);
  ASSERT_EQ(d.size(), 18u);
  EXPECT_EQ(d[8], 2u | (1u << 7) | (1u << 8)) << "the first waits for earlier work";
  EXPECT_EQ(d[9 + 8], 1u | (1u << 7) | (1u << 8)) << "the second runs alongside it";
  CommandBuffer a(sdma::Gen::v4_4_2), b(sdma::Gen::v4_4_2);
  ASSERT_OK(a.copy(0x10000, 0x20000, 4096));
  ASSERT_OK(b.copy(0x10000, 0x20000, 4096, CommandBuffer::CopyOrder::alongside_earlier));
  EXPECT_EQ(dw(a), dw(b));
}

TEST(HopperLowering, BigCopiesSplitAt2GiBAndPipelineTheRest) {
  CommandBuffer cb(Isa::hopper());
  const uint64_t two = 1ull << 31;
  ASSERT_OK(cb.copy(0x10'0000'0000ull, 0x20'0000'0000ull, 2 * two + 5));
  ASSERT_EQ(cb.packet_count(), 3u);
  const std::vector<uint32_t> d = dw(cb);
  ASSERT_EQ(d.size(), 27u);
  EXPECT_EQ(d[6], two);
  EXPECT_EQ(d[8], 0x182u);                          // first piece waits for earlier work
  EXPECT_EQ(d[9 + 1], 0x20u);                       // second piece: src 0x20_0000_0000 + 2 GiB
  EXPECT_EQ(d[9 + 2], 0x80000000u);
  EXPECT_EQ(d[9 + 8], 1u | (1u << 7) | (1u << 8));  // PIPELINED
  EXPECT_EQ(d[18 + 6], 5u);
}

// copy_add: the copy's LAUNCH_DMA adds to the signal itself (SET_SEMAPHORE_A/B/
// PAYLOAD/PAYLOAD_UPPER, then FLUSH, SEMAPHORE_TYPE=RELEASE_NO_TIMESTAMP,
// REDUCTION=IADD 17:14, SIGN=UNSIGNED 18, REDUCTION_ENABLE 19, TWO_WORD 27).
// A copy of several pieces adds on its last piece, which then waits for the
// others (NON_PIPELINED). Where the engine cannot add as a copy ends (SDMA),
// copy_add is the copy and then signal_add.
TEST(HopperLowering, CopyAddIsTheCopysOwnSemaphoreReduction) {
  EXPECT_TRUE(caps(Isa::hopper()).copy_add);
  const uint64_t sig = 0x7000'0010ull;
  CommandBuffer cb(Isa::hopper());
  ASSERT_OK(cb.copy_add(0x123456789000ull, 0xAB00001000ull, 4096, CommandBuffer::CopyOrder::after_earlier, sig,
                        0x100000003ull));
  const uint32_t launch = 2u | (1u << 2) | (1u << 3) | (1u << 7) | (1u << 8) | (5u << 14) | (1u << 18) | (1u << 19) |
                          (1u << 27);
  EXPECT_EQ(launch, 0x080D418Eu);
  const std::vector<uint32_t> want = {
      inc(4, 0x240, 4), 0, 0x70000010, 3, 1,                   // SET_SEMAPHORE_A/B, PAYLOAD, PAYLOAD_UPPER
      inc(4, 0x400, 4), 0xAB, 0x00001000, 0x1234, 0x56789000,  // OFFSET_IN_UPPER.. OFFSET_OUT_LOWER
      inc(4, 0x418, 1), 4096,                                  // LINE_LENGTH_IN
      inc(4, 0x300, 1), launch,
  };
  EXPECT_EQ(dw(cb), want);
  const std::string text = cb.disassemble();
  EXPECT_NE(text.find("semaphore_reduction=iadd semaphore_reduction_sign=unsigned semaphore_reduction_enable=true"),
            std::string::npos)
      << text;

  CommandBuffer along(Isa::hopper());
  ASSERT_OK(along.copy_add(0x10000, 0x20000, 64, CommandBuffer::CopyOrder::alongside_earlier, sig, 1));
  EXPECT_EQ(dw(along).back(), (launch & ~3u) | 1u) << "PIPELINED, still adding";

  const uint64_t two = 1ull << 31;
  CommandBuffer big(Isa::hopper());
  ASSERT_OK(big.copy_add(0x10'0000'0000ull, 0x20'0000'0000ull, 2 * two + 5, CommandBuffer::CopyOrder::alongside_earlier,
                         sig, 1));
  const std::vector<uint32_t> d = dw(big);
  ASSERT_EQ(d.size(), 9u + 9u + 14u);
  EXPECT_EQ(d[8], 1u | (1u << 7) | (1u << 8)) << "the first piece runs alongside earlier work";
  EXPECT_EQ(d[17], 1u | (1u << 7) | (1u << 8));
  EXPECT_EQ(d[18], inc(4, 0x240, 4));
  EXPECT_EQ(d[18 + 5 + 6], 5u);
  EXPECT_EQ(d.back(), (launch & ~3u) | 2u) << "the adding piece waits for the others";

  EXPECT_EQ(cb.copy_add(0x10000, 0x20000, 64, CommandBuffer::CopyOrder::after_earlier, sig + 4, 1).code(),
            Code::invalid_argument)
      << "a signal is 8-byte aligned";
  EXPECT_EQ(cb.copy_add(0x10000, 0x10020, 64, CommandBuffer::CopyOrder::after_earlier, sig, 1).code(),
            Code::invalid_argument)
      << "overlapping ranges";
  EXPECT_EQ(dw(cb), want) << "a refused copy_add appends nothing";

  // The same add without a transfer (CONCCL_NV_CE_ADD's signal_add): a
  // release LAUNCH_DMA with the reduction bits.
  uint32_t rel[hopper::kReleaseDwords];
  ASSERT_EQ(hopper::put_release_add(rel, sig, 0x100000003ull), hopper::kReleaseDwords);
  EXPECT_EQ(std::vector<uint32_t>(rel, rel + hopper::kReleaseDwords),
            (std::vector<uint32_t>{inc(4, 0x240, 4), 0, 0x70000010, 3, 1, inc(4, 0x300, 1), 0x080D400Cu}));

  CommandBuffer sdma_add(sdma::Gen::v4_4_2), sdma_two(sdma::Gen::v4_4_2);
  EXPECT_FALSE(sdma_add.caps().copy_add);
  ASSERT_OK(sdma_add.copy_add(0x10000, 0x20000, 4096, CommandBuffer::CopyOrder::after_earlier, sig, 9));
  ASSERT_OK(sdma_two.copy(0x10000, 0x20000, 4096));
  ASSERT_OK(sdma_two.signal_add(sig, 9));
  EXPECT_EQ(dw(sdma_add), dw(sdma_two));
}

TEST(HopperLowering, SignalsAreNative64BitSemaphores) {
  const uint64_t va = 0x7000'0010ull;
  CommandBuffer add(Isa::hopper());
  ASSERT_OK(add.signal_add(va, 5));
  // SEM_EXECUTE: OPERATION=REDUCTION(6), RELEASE_WFI=EN (bit 20), PAYLOAD_SIZE=64BIT
  // (bit 24), REDUCTION=IADD(5) at 30:27, REDUCTION_FORMAT=UNSIGNED (bit 31).
  EXPECT_EQ(dw(add), (std::vector<uint32_t>{inc(0, 0x5C, 5), 0x70000010, 0, 5, 0, 0xA9100006u}));

  CommandBuffer set(Isa::hopper());
  ASSERT_OK(set.signal_set(va, 0x100000002ull));
  // LAUNCH_DMA: FLUSH_ENABLE, SEMAPHORE_TYPE=RELEASE_SEMAPHORE_NO_TIMESTAMP, PAYLOAD_SIZE=TWO_WORD.
  EXPECT_EQ(dw(set), (std::vector<uint32_t>{inc(4, 0x240, 4), 0, 0x70000010, 2, 1, inc(4, 0x300, 1), 0x0800000Cu}));

  CommandBuffer wait(Isa::hopper());
  ASSERT_OK(wait.wait_ge(va, 0x300000004ull));
  // SEM_EXECUTE: OPERATION=ACQ_CIRC_GEQ(3), ACQUIRE_SWITCH_TSG=EN (bit 12), PAYLOAD_SIZE=64BIT.
  EXPECT_EQ(dw(wait), (std::vector<uint32_t>{inc(0, 0x5C, 5), 0x70000010, 0, 4, 3, 0x01001003u}));

  CommandBuffer ts(Isa::hopper());
  ASSERT_OK(ts.timestamp(0x7000'0020ull));
  EXPECT_EQ(dw(ts), (std::vector<uint32_t>{inc(4, 0x240, 4), 0, 0x70000020, 0, 0, inc(4, 0x300, 1), 0x08000014u}));
  EXPECT_EQ(ts.timestamp(0x7000'0028ull).code(), Code::invalid_argument) << "a timestamp slot is 16-byte aligned";
}

// A failing acquire must let the PBDMA switch to another TSG
// (clc86f.h NVC86F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG 12:12, _EN 1), or a wait on a
// signal another process's channel releases idles a shared copy engine for a
// timeslice.
TEST(HopperLowering, WaitSwitchesTsgWhileTheAcquireFails) {
  CommandBuffer wait(Isa::hopper());
  ASSERT_OK(wait.wait_ge(0x7000'0010ull, 1));
  const std::vector<uint32_t> d = dw(wait);
  ASSERT_EQ(d.size(), 6u);
  EXPECT_EQ(d[0], inc(0, 0x5C, 5));
  EXPECT_EQ(d[5] & 7u, 3u) << "ACQ_CIRC_GEQ";
  EXPECT_EQ(d[5] & (1u << 12), 1u << 12) << "ACQUIRE_SWITCH_TSG";
  EXPECT_EQ(d[5], hopper::kSemAcquireSwitchTsg | hopper::kSemPayload64 | 3u);
  const std::string text = wait.disassemble();
  EXPECT_TRUE(contains(text, "host.sem_execute operation=acq_circ_geq acquire_switch_tsg=1 payload_size=64bit")) << text;

  // The other semaphore methods leave the bit clear (it only concerns acquires).
  CommandBuffer add(Isa::hopper());
  ASSERT_OK(add.signal_add(0x7000'0010ull, 1));
  EXPECT_EQ(dw(add)[5] & (1u << 12), 0u);
  EXPECT_FALSE(contains(add.disassemble(), "acquire_switch_tsg")) << add.disassemble();

  // A holding wait (for a signal no channel on the engine releases) keeps
  // the channel resident; rewriting it for a new value keeps its style.
  CommandBuffer hold(Isa::hopper());
  ASSERT_OK(hold.wait_ge(0x7000'0010ull, 1, CommandBuffer::WaitStyle::hold));
  EXPECT_EQ(dw(hold)[5], hopper::kSemPayload64 | 3u);
  ASSERT_OK(hold.rewrite_wait_ge(0, 6, 0x7000'0010ull, 0x500000002ull, CommandBuffer::WaitStyle::hold));
  EXPECT_EQ(dw(hold), (std::vector<uint32_t>{inc(0, 0x5C, 5), 0x70000010, 0, 2, 5, hopper::kSemPayload64 | 3u}));
  ASSERT_OK(hold.rewrite_wait_ge(0, 6, 0x7000'0010ull, 7));
  EXPECT_EQ(dw(hold)[5], hopper::kSemAcquireSwitchTsg | hopper::kSemPayload64 | 3u);
  CommandBuffer sdma_y(sdma::Gen::v4_4_2), sdma_h(sdma::Gen::v4_4_2);
  ASSERT_OK(sdma_y.wait_ge(0x7000'0010ull, 9));
  ASSERT_OK(sdma_h.wait_ge(0x7000'0010ull, 9, CommandBuffer::WaitStyle::hold));
  EXPECT_EQ(dw(sdma_y), dw(sdma_h)) << "SDMA polls alike";
}

// RELEASE_WFI makes an add wait until the engine is idle (and its writes are
// flushed). An add right behind such an add finds the engine idle already,
// so it leaves the WFI out; anything the engine runs in between, or a run of
// adds that did not start with a WFI (raw methods), brings it back.
TEST(HopperLowering, AddsRightAfterAWaitedAddSkipTheWaitForIdle) {
  constexpr uint32_t kWfi = 1u << 20;
  auto wfi_of = [](const CommandBuffer& cb) {
    std::vector<bool> out;
    const std::vector<uint32_t> d = dw(cb);
    for (uint32_t at : cb.packet_starts())
      if (d[at] == inc(0, 0x5C, 5) && (d[at + 5] & 7u) == 6u) out.push_back((d[at + 5] & kWfi) != 0);
    return out;
  };
  CommandBuffer cb(Isa::hopper());
  ASSERT_OK(cb.copy(0x10000, 0x20000, 256));
  ASSERT_OK(cb.signal_add(0x7000'0010ull, 1));
  ASSERT_OK(cb.signal_add(0x7000'0020ull, 2));
  ASSERT_OK(cb.signal_add(0x7000'0030ull, 3));
  ASSERT_OK(cb.copy(0x30000, 0x20000, 256));
  ASSERT_OK(cb.signal_add(0x7000'0040ull, 1));
  ASSERT_OK(cb.wait_ge(0x7000'0050ull, 1));
  ASSERT_OK(cb.signal_add(0x7000'0060ull, 1));  // after an acquire: waits again
  EXPECT_EQ(wfi_of(cb), (std::vector<bool>{true, false, false, true, true})) << cb.disassemble();
  const std::vector<uint32_t> d = dw(cb);
  EXPECT_EQ(d[cb.packet_starts()[2] + 5], (0xA9100006u & ~kWfi)) << "the same add, less the WFI";

  // A run of adds that began without a WFI (raw) does not vouch for the engine.
  CommandBuffer r(Isa::hopper());
  ASSERT_OK(r.copy(0x10000, 0x20000, 256));
  ASSERT_OK(r.raw(std::vector<uint32_t>{inc(0, 0x5C, 5), 0x70000010, 0, 1, 0, 0xA9100006u & ~kWfi}));
  ASSERT_OK(r.signal_add(0x7000'0020ull, 1));
  EXPECT_EQ(wfi_of(r), (std::vector<bool>{false, true})) << r.disassemble();
}

TEST(HopperLowering, FillUsesTheRemapUnit) {
  CommandBuffer cb(Isa::hopper());
  ASSERT_OK(cb.fill(0x4000, 0xC0FFEE11u, 64));
  const std::vector<uint32_t> want = {
      inc(4, 0x704, 2), 0xC0FFEE11u, (3u << 16) | 5u,  // SET_REMAP_CONST_B, COMPONENTS: const_b, 4-byte, one
      inc(4, 0x408, 2), 0, 0x4000,                     // OFFSET_OUT
      inc(4, 0x418, 1), 16,                            // 16 components of 4 bytes
      inc(4, 0x300, 1), 2u | (1u << 7) | (1u << 8) | (1u << 10),
  };
  EXPECT_EQ(dw(cb), want);
  EXPECT_EQ(cb.fill(0x4002, 1, 64).code(), Code::invalid_argument);
}

TEST(HopperLowering, WhatCopyEnginesLackIsAClearError) {
  CommandBuffer cb(Isa::hopper());
  Status st = cb.copy_bcst(0x1000, 0x2000, 0x3000, 64);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "broadcast")) << st.message();
  EXPECT_TRUE(contains(st.message(), "Hopper CE")) << st.message();
  st = cb.swap(0x1000, 0x2000, 64);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "swap")) << st.message();
  for (Status s : {SdmaPackets(cb).fence(0x1000, 1), SdmaPackets(cb).poll(0x1000, 1, ~0u, PollFunc::ge), SdmaPackets(cb).trap(1), SdmaPackets(cb).atomic_add64(0x1000, 1),
                   SdmaPackets(cb).nop(0)}) {
    EXPECT_EQ(s.code(), Code::invalid_argument);
    EXPECT_TRUE(contains(s.message(), "SDMA packet")) << s.message();
  }
  EXPECT_TRUE(cb.empty()) << "failed commands append nothing";
  CommandBuffer sdma(Isa::sdma_gen(sdma::Gen::v4_4_2));
  EXPECT_EQ(HopperMethods(sdma).nonstall_interrupt().code(), Code::invalid_argument);
  EXPECT_EQ(HopperMethods(sdma).bind_copy_object().code(), Code::invalid_argument);
  EXPECT_EQ(HopperMethods(sdma).release(0x1000, 1, true, false).code(), Code::invalid_argument);
  EXPECT_TRUE(sdma.empty()) << "a Hopper method appends nothing to an SDMA buffer";
  EXPECT_EQ(cb.copy(0x1000, 0x1800, 0x1000).code(), Code::invalid_argument) << "overlap";
  EXPECT_EQ(cb.copy(0x1000, 0x9000, 0).code(), Code::invalid_argument);
  EXPECT_EQ(cb.copy(1ull << 57, 0x9000, 16).code(), Code::out_of_range) << "57-bit addresses";
  EXPECT_TRUE(cb.empty());
}

TEST(HopperLowering, RawMethodsAreDecodedAndBadOnesRefused) {
  CommandBuffer a(Isa::hopper());
  ASSERT_OK(a.copy(0x1000, 0x9000, 256));
  ASSERT_OK(a.signal_add(0x7000, 1));
  CommandBuffer b(Isa::hopper());
  ASSERT_OK(b.raw(a.dwords()));
  EXPECT_EQ(dw(b), dw(a));
  EXPECT_EQ(b.packet_count(), 4u) << "one per method header";
  const uint32_t bad[] = {0xE0000000u};  // SEC_OP 7: reserved
  EXPECT_EQ(b.raw(bad).code(), Code::invalid_argument);
  EXPECT_EQ(b.packet_count(), 4u);
  EXPECT_TRUE(contains(a.disassemble(), "copy.launch_dma")) << a.disassemble();
  EXPECT_TRUE(contains(a.disassemble(), "host.sem_execute")) << a.disassemble();
}

TEST(SdmaLowering, SignalCommandsKeepTheTwin) {
  const uint64_t va = 0x10000;
  CommandBuffer add(Isa::sdma_gen(sdma::Gen::v4_4_2));
  ASSERT_OK(add.signal_add(va, 3));
  sdma::StreamDecode d = sdma::decode_stream(add.gen(), add.dwords());
  ASSERT_TRUE(d.error.ok());
  ASSERT_EQ(d.packets.size(), 2u);
  EXPECT_EQ(d.packets[0].pkt, sdma::Pkt::atomic_add64);
  EXPECT_EQ(d.packets[0].get(sdma::Key::addr), va + 8) << "twin first";
  EXPECT_EQ(d.packets[1].get(sdma::Key::addr), va) << "value last";

  CommandBuffer set(Isa::sdma_gen(sdma::Gen::v5_2));
  ASSERT_OK(set.signal_set(va, 0x100000007ull));
  d = sdma::decode_stream(set.gen(), set.dwords());
  ASSERT_EQ(d.packets.size(), 5u);  // GCR write-back (SDMA 5.2 is a GL2 client), then the 4 FENCEs
  EXPECT_EQ(d.packets[0].pkt, sdma::Pkt::gcr_user);
  EXPECT_EQ(d.packets[1].get(sdma::Key::addr), va + 8);
  EXPECT_EQ(d.packets[1].get(sdma::Key::value), 7u + (1u << 31));
  EXPECT_EQ(d.packets[4].get(sdma::Key::addr), va + 4);
  EXPECT_EQ(d.packets[4].get(sdma::Key::value), 1u);

  CommandBuffer wait(Isa::sdma_gen(sdma::Gen::v4_4));  // one poll per dword (4.0 doubles them)
  ASSERT_OK(wait.wait_ge(va, 0x80000001ull));  // low dword >= 2^31: waits on the twin
  d = sdma::decode_stream(wait.gen(), wait.dwords());
  ASSERT_EQ(d.packets.size(), 4u);  // POLL, COND_EXE, POLL, then the HDP flush
  EXPECT_EQ(d.packets[0].get(sdma::Key::addr), va + 8 + 4);
  EXPECT_EQ(d.packets[1].pkt, sdma::Pkt::cond_exe);
  EXPECT_EQ(d.packets[2].get(sdma::Key::ref), 1u);  // 0x80000001 + 2^31 = 0x1_00000001
  EXPECT_EQ(d.packets[3].pkt, sdma::Pkt::poll_reg);
  EXPECT_EQ(wait.signal_add(va + 4, 1).code(), Code::invalid_argument) << "8-byte aligned";
}

// Cache maintenance inside a list (ROCR-Runtime amd_blit_sdma.cpp: dependency
// polls -> HDP flush -> GCR invalidate -> work -> GCR write-back -> signal): a
// list that waits, copies and signals in the middle of one submission (broadcast
// `chain`) gets, on every generation, the firmware HDP flush after each wait where
// the firmware has it, and on GL2 clients (SDMA 5.x+) a GL2 invalidate after each
// wait and a write-back before each signal update, so that a consumer who sees the
// signal sees the data, and reads after a wait do not hit older lines.
TEST(SdmaLowering, ListsKeepCachesInOrderAroundWaitsAndSignals) {
  for (sdma::Gen g : sdma::kAllGens) {
    SCOPED_TRACE(sdma::gen_name(g));
    const sdma::Limits& l = sdma::limits(g);
    CommandBuffer cb(Isa::sdma_gen(g));
    ASSERT_OK(cb.wait_ge(0x10000, 5));
    ASSERT_OK(cb.copy(0x7F00'0020'0000ull, 0x7F00'0010'0000ull, 4096));
    ASSERT_OK(cb.signal_add(0x20000, 1));
    ASSERT_OK(cb.signal_set(0x30000, 9));
    sdma::StreamDecode d = sdma::decode_stream(g, cb.dwords());
    ASSERT_TRUE(d.error.ok()) << d.error.message();
    std::vector<sdma::Pkt> want = {sdma::Pkt::poll, sdma::Pkt::cond_exe, sdma::Pkt::poll};
    if (l.double_poll) want = {sdma::Pkt::poll, sdma::Pkt::poll, sdma::Pkt::cond_exe, sdma::Pkt::poll, sdma::Pkt::poll};
    if (l.user_hdp_flush) want.push_back(sdma::Pkt::poll_reg);
    if (l.has_gcr) want.push_back(sdma::Pkt::gcr_user);
    want.push_back(sdma::Pkt::copy);
    if (l.has_gcr) want.push_back(sdma::Pkt::gcr_user);
    want.insert(want.end(), {sdma::Pkt::atomic_add64, sdma::Pkt::atomic_add64});
    if (l.has_gcr) want.push_back(sdma::Pkt::gcr_user);
    want.insert(want.end(), {sdma::Pkt::fence, sdma::Pkt::fence, sdma::Pkt::fence, sdma::Pkt::fence});
    std::vector<sdma::Pkt> got;
    for (const sdma::Packet& p : d.packets) got.push_back(p.pkt);
    ASSERT_EQ(got, want) << cb.disassemble();
    size_t i = l.double_poll ? 5 : 3;
    if (l.user_hdp_flush) {
      EXPECT_EQ(d.packets[i++].get(sdma::Key::req), 0x80000000u) << "the firmware HDP flush";
    }
    if (l.has_gcr) {
      EXPECT_EQ(d.packets[i].get(sdma::Key::control), 0xC3C0u) << "invalidate after the wait";
      EXPECT_EQ(d.packets[i + 2].get(sdma::Key::control), 0x8040u) << "write-back before the add";
      EXPECT_EQ(d.packets[i + 5].get(sdma::Key::control), 0x8040u) << "write-back before the store";
    }
    // A wait keeps one size whatever its value: prelaunched lists rewrite it in place.
    const size_t dwords = cb.size_dwords();
    CommandBuffer other(Isa::sdma_gen(g));
    ASSERT_OK(other.wait_ge(0x10000, 0xFFFF'FFFF'0000'0001ull));
    ASSERT_OK(other.copy(0x7F00'0020'0000ull, 0x7F00'0010'0000ull, 4096));
    ASSERT_OK(other.signal_add(0x20000, 1));
    ASSERT_OK(other.signal_set(0x30000, 9));
    EXPECT_EQ(other.size_dwords(), dwords);
  }
}

// ROCr polls every dependency twice on gfx9.0.x below gfx90a ("rare-issue on
// gfx908 where SDMA_OP_POLL_REGMEM returns before polled memory is cleared":
// rocr-runtime core/runtime/amd_blit_sdma.cpp SubmitCommand). Generation 4 is
// exactly those targets; its waits poll each dword twice and the COND_EXE skips
// both low-dword polls. Every other generation polls once. On the emulator the
// doubled wait still waits and still lets a value above the target through.
TEST(SdmaLowering, Gfx908PollsEveryDwordTwiceAsROCrDoes) {
  for (uint32_t version : {90000u, 90006u, 90008u, 90012u, 90010u, 90402u, 110000u}) {
    const std::optional<sdma::GfxTarget> t = sdma::gfx_target_version_to_target(version);
    ASSERT_TRUE(t) << version;
    SCOPED_TRACE(std::string(t->gfx));
    const bool twice = t->gfx.substr(0, 5) == "gfx90" && t->gfx != "gfx90a";
    EXPECT_EQ(sdma::limits(t->gen).double_poll, twice);
    CommandBuffer cb(Isa::sdma_gen(t->gen));
    ASSERT_OK(cb.wait_ge(0x10000, 0x2'0000'0005ull));
    sdma::StreamDecode d = sdma::decode_stream(t->gen, cb.dwords());
    ASSERT_TRUE(d.error.ok()) << d.error.message();
    std::vector<uint64_t> hi_lo;  // the polled addresses, in order
    uint64_t skip = 0;
    for (const sdma::Packet& p : d.packets) {
      if (p.pkt == sdma::Pkt::poll) hi_lo.push_back(p.get(sdma::Key::addr));
      if (p.pkt == sdma::Pkt::cond_exe) skip = p.get(sdma::Key::count);
    }
    const std::vector<uint64_t> want =
        twice ? std::vector<uint64_t>{0x10004, 0x10004, 0x10000, 0x10000} : std::vector<uint64_t>{0x10004, 0x10000};
    EXPECT_EQ(hi_lo, want) << cb.disassemble();
    EXPECT_EQ(skip, twice ? 12u : 6u) << "COND_EXE skips every low-dword poll";
    // Prelaunched lists rewrite a wait's value in place: the doubled wait too.
    const size_t dwords = cb.size_dwords();
    ASSERT_OK(cb.signal_add(0x20000, 1));
    ASSERT_OK(cb.rewrite_wait_ge(0, dwords, 0x10000, 0x3'0000'0009ull));
    CommandBuffer fresh(Isa::sdma_gen(t->gen));
    ASSERT_OK(fresh.wait_ge(0x10000, 0x3'0000'0009ull));
    ASSERT_OK(fresh.signal_add(0x20000, 1));
    EXPECT_EQ(std::vector<uint32_t>(cb.dwords().begin(), cb.dwords().end()),
              std::vector<uint32_t>(fresh.dwords().begin(), fresh.dwords().end()));
  }

  // Run on an emulated gfx908 node: the doubled wait holds until the signal
  // reaches the target, and passes at once for a value whose high dword is above.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, emu::create(options("small", 0, 0, "4")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Queue> q, dev->create_queue(0, 0));
  ASSERT_OK_AND_ASSIGN(Signal gate, Signal::create(*dev));
  ASSERT_OK_AND_ASSIGN(Signal done, Signal::create(*dev));
  CommandBuffer cb = q->command_buffer();
  ASSERT_OK(gate.wait_ge(cb, 7));
  ASSERT_OK(done.signal_set(cb, 1));
  ASSERT_OK(q->submit(cb, Deadline::after_ms(5000)));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(done.value(), 0u) << "the doubled wait did not wait";
  gate.set(6);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(done.value(), 0u) << "6 < 7";
  gate.set(7);
  ASSERT_OK(done.wait(1, Deadline::after_ms(5000)));
  gate.set(0x1'0000'0000ull);
  CommandBuffer above = q->command_buffer();
  ASSERT_OK(gate.wait_ge(above, 9));  // the high dword is above the target's: COND_EXE skips both low polls
  ASSERT_OK(done.signal_set(above, 2));
  ASSERT_OK(q->submit(above, Deadline::after_ms(5000)));
  ASSERT_OK(done.wait(2, Deadline::after_ms(5000)));
}

// gfx90a (SDMA 4.4.0) takes 30-bit COPY_LINEAR counts (Linux sdma_v4_0.c:
// sdma_v4_4_buffer_funcs, 1 << 30 per command; ROCr raises its copy size for
// gfx90a too); gfx908 (SDMA 4.2.2) keeps 22 bits. Fills split at ROCr's 0x3FFFE0
// on both (ROCr splits every fill there, gfx90a included; packets/generation.cpp).
// The KFD backend gets the Isa from the gfx target.
TEST(SdmaLowering, Gfx90aCopiesUseThe30BitCountAndFillsSplitAsROCrDoes) {
  const std::optional<sdma::GfxTarget> mi200 = sdma::gfx_target_version_to_target(90010);
  const std::optional<sdma::GfxTarget> mi100 = sdma::gfx_target_version_to_target(90008);
  ASSERT_TRUE(mi200 && mi100);
  const Isa wide = Isa::sdma_gen(mi200->gen), narrow = Isa::sdma_gen(mi100->gen);
  EXPECT_EQ(wide.name(), "SDMA 4.4");
  EXPECT_EQ(caps(wide).max_copy_bytes, 0x3FFFFF00u);
  EXPECT_EQ(caps(wide).max_fill_bytes, 0x3FFFE0u);
  EXPECT_EQ(caps(narrow).max_copy_bytes, 0x3FFF00u);
  EXPECT_FALSE(caps(wide).swap);

  const uint64_t n = 64ull << 20;  // 64 MiB
  CommandBuffer a(wide);
  ASSERT_OK(a.copy(0x7F01'0000'0000ull, 0x7F00'0000'1000ull, n));
  const std::vector<uint32_t> one_copy = {0x00000001, uint32_t(n - 1), 0, 0x00001000, 0x7F00, 0, 0x7F01};
  EXPECT_EQ(dw(a), one_copy);
  CommandBuffer b(narrow);
  ASSERT_OK(b.copy(0x7F01'0000'0000ull, 0x7F00'0000'1000ull, n));
  EXPECT_EQ(b.packet_count(), 17u);  // ceil(64 MiB / 0x3FFF00)
  EXPECT_EQ(dw(b)[1], 0x3FFF00u - 1);

  // The largest single command, then one byte more (two packets).
  CommandBuffer c(wide);
  ASSERT_OK(c.copy(0x10000, 0x20000000000ull, 0x3FFFFF00u + 1));
  ASSERT_EQ(c.packet_count(), 2u);
  EXPECT_EQ(dw(c)[1], 0x3FFFFEFFu);
  EXPECT_EQ(dw(c)[7 + 1], 0u);  // the 1-byte tail: count 0

  CommandBuffer f(wide);
  ASSERT_OK(f.fill(0x7F00'0020'0000ull, 0, (4ull << 20) + 36));
  ASSERT_EQ(f.packet_count(), 2u);  // 0x3FFFE0, then the 68-byte tail
  const std::vector<uint32_t> two_fills = {0x8000000B, 0x00200000, 0x7F00, 0, 0x3FFFDF,
                                           0x8000000B, 0x005FFFE0, 0x7F00, 0, 68 - 1};
  EXPECT_EQ(dw(f), two_fills);
}

TEST(Vocabulary, FixedStorageFillsThenRefuses) {
  std::vector<uint32_t> storage(12);
  CommandBuffer cb(Isa::hopper(), storage);
  ASSERT_OK(cb.copy(0x1000, 0x9000, 64));  // 9 dwords
  Status st = cb.signal_add(0x7000, 1);     // 6 more do not fit
  EXPECT_EQ(st.code(), Code::resource_exhausted);
  EXPECT_EQ(cb.size_dwords(), 9u) << "all or nothing";
  EXPECT_EQ(storage[8], 0x182u) << "written in place";
  CommandBuffer copy = cb;  // a copy owns its dwords
  ASSERT_OK(copy.signal_add(0x7000, 1));
  EXPECT_EQ(copy.size_dwords(), 15u);
}

TEST(Vocabulary, SignalsRefuseCommandBuffersOfAnotherLayout) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> amd, emu::create(options("small")));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> nv, emu::create(options("h200")));
  ASSERT_OK_AND_ASSIGN(Signal s_amd, Signal::create(*amd));
  ASSERT_OK_AND_ASSIGN(Signal s_nv, Signal::create(*nv));
  EXPECT_TRUE(s_amd.has_twin());
  EXPECT_FALSE(s_nv.has_twin());
  CommandBuffer hop(Isa::hopper());
  Status st = s_amd.signal_add(hop);
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "layout")) << st.message();
  ASSERT_OK(s_nv.signal_add(hop));
  ASSERT_OK(s_nv.wait_ge(hop, 3));
  // The host side follows the layout: no twin written on Hopper signals.
  s_nv.set(41);
  EXPECT_EQ(s_nv.add(1), 42u);
  EXPECT_EQ(host_load64(static_cast<uint8_t*>(nv->host_pointer(s_nv.va(), 16)) + 8), 0u);
  s_amd.set(41);
  EXPECT_EQ(host_load64(static_cast<uint8_t*>(amd->host_pointer(s_amd.va(), 16)) + 8), 41u + Signal::kTwinOffset);
}

}  // namespace
}  // namespace conccl
