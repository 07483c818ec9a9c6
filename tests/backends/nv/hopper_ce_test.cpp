// tests/backends/nv/hopper_ce_test.cpp - golden vectors and round trips for the Hopper
// copy-engine pushbuffer layer (packets/hopper_ce), through the vocabulary
// and the Hopper encoder.
//
// Every expected dword is a literal computed by hand from the public class
// headers, never by running our encoder:
//   method header  = (SEC_OP << 29) | (COUNT << 16) | (SUBCH << 13) | (OFFSET >> 2)
//                    SEC_OP inc=1 noninc=3 immd=4 oneinc=5 (clc56f.h NVC56F_DMA_*)
//   copy methods   (open-gpu-doc classes/dma-copy/clc8b5.h): SET_SEMAPHORE_A 0x240,
//                  LAUNCH_DMA 0x300, OFFSET_IN_UPPER 0x400, OFFSET_OUT_UPPER 0x408,
//                  LINE_LENGTH_IN 0x418, SET_REMAP_CONST_B 0x704, SET_REMAP_COMPONENTS 0x708
//   LAUNCH_DMA     DATA_TRANSFER_TYPE 1:0 (NON_PIPELINED 2, PIPELINED 1), FLUSH_ENABLE 2,
//                  SEMAPHORE_TYPE 4:3 (WITH_TIMESTAMP 2), SRC/DST_MEMORY_LAYOUT 7/8 (PITCH 1),
//                  REMAP_ENABLE 10, SEMAPHORE_PAYLOAD_SIZE 27 (TWO_WORD 1)
//                  -> copy 0x182, pipelined copy 0x181, fill 0x582, release 0x08000014
//                  (0x182 and 0x14 are tinygrad's ops_nv.py values; 0x08000014 is
//                  open-gpu-kernel-modules kernel-open/nvidia-uvm/uvm_hopper_ce.c)
//   host methods   (clc86f.h / clc56f.h): SET_OBJECT 0x0, NOP 0x8, SEM_ADDR_LO 0x5c ..
//                  SEM_EXECUTE 0x6c (OPERATION 2:0 ACQ_CIRC_GEQ 3, ACQUIRE_SWITCH_TSG 12 EN 1
//                  (clc86f.h), PAYLOAD_SIZE 24 64BIT)
//   GP entry       ENTRY0_GET 31:2, ENTRY1_GET_HI 7:0, LEVEL 9, LENGTH 30:10, SYNC 31
//                  (tinygrad: (addr/4<<2) | (len<<42) | (1<<41))
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "conccl/commands.hpp"
#include "conccl/hopper_methods.hpp"
#include "packets/hopper_ce.hpp"

namespace conccl::hopper {
namespace {

std::string hexs(std::span<const uint32_t> dw) {
  std::string s;
  char b[12];
  for (uint32_t d : dw) {
    std::snprintf(b, sizeof b, "%08x ", d);
    s += b;
  }
  return s;
}

#define EXPECT_DW(got, ...)                                 \
  do {                                                      \
    const std::vector<uint32_t> want_ = __VA_ARGS__;        \
    EXPECT_EQ(hexs(got), hexs(want_));                      \
  } while (0)

TEST(HopperHeader, Encodings) {
  EXPECT_EQ(inc_header(4, 0x400, 4), 0x20048100u);
  EXPECT_EQ(inc_header(4, 0x300, 1), 0x200180C0u);
  EXPECT_EQ(inc_header(0, 0x05C, 5), 0x20050017u);
  EXPECT_EQ(*encode_header({HdrOp::non_inc, 4, 0x100, 2}), 0x60028040u);
  EXPECT_EQ(*encode_header({HdrOp::immd, 0, 0x008, 5}), 0x80050002u);
  EXPECT_EQ(*encode_header({HdrOp::one_inc, 4, 0x240, 3}), 0xA0038090u);
  const Header h = *decode_header(0x200180C0u);
  EXPECT_EQ(h, (Header{HdrOp::inc, 4, 0x300, 1}));
  EXPECT_EQ(*decode_header(0xA0038090u), (Header{HdrOp::one_inc, 4, 0x240, 3}));
  EXPECT_FALSE(decode_header(0xE0000000u).ok());  // END_PB_SEGMENT
  EXPECT_FALSE(decode_header(0x00010000u).ok());  // grp0
  EXPECT_EQ(encode_header({HdrOp::inc, 8, 0, 1}).status().code(), Code::out_of_range);
  EXPECT_EQ(encode_header({HdrOp::inc, 0, 0x402, 1}).status().code(), Code::out_of_range);
  EXPECT_EQ(encode_header({HdrOp::inc, 0, 0, 0x2000}).status().code(), Code::out_of_range);
}

// The vocabulary's Hopper lowering (CommandBuffer over Isa::hopper()) and the
// Hopper encoder (HopperMethods) against hand-computed vectors.
CommandBuffer hopper_buffer() { return CommandBuffer(Isa::hopper()); }

TEST(HopperCommands, CopyVector) {
  CommandBuffer cb = hopper_buffer();
  ASSERT_TRUE(cb.copy(0x0000001000400000ull, 0x0000001000200000ull, 4096).ok());
  EXPECT_DW(cb.dwords(), {0x20048100, 0x00000010, 0x00200000, 0x00000010, 0x00400000,  //
                          0x20018106, 0x00001000,                                      //
                          0x200180C0, 0x00000182});
  EXPECT_EQ(cb.packet_count(), 1u) << "one LAUNCH_DMA group is one command";
}

TEST(HopperCommands, CopySplitsAt2GiB) {
  CommandBuffer cb = hopper_buffer();
  ASSERT_TRUE(cb.copy(0x100000000ull, 0x0, 0xC0000000ull).ok());
  EXPECT_DW(cb.dwords(), {0x20048100, 0x00000000, 0x00000000, 0x00000001, 0x00000000,  //
                          0x20018106, 0x80000000, 0x200180C0, 0x00000182,              //
                          0x20048100, 0x00000000, 0x80000000, 0x00000001, 0x80000000,  //
                          0x20018106, 0x40000000, 0x200180C0, 0x00000181});
  EXPECT_EQ(copy_pieces(0xC0000000ull), 2u);
  EXPECT_EQ(copy_pieces(1ull << 31), 1u);
}

TEST(HopperCommands, CopyAlongsideEarlierIsPipelined) {
  CommandBuffer cb = hopper_buffer();
  ASSERT_TRUE(cb.copy(0x2000, 0x1000, 0x100, CommandBuffer::CopyOrder::alongside_earlier).ok());
  EXPECT_DW(cb.dwords(), {0x20048100, 0x00000000, 0x00001000, 0x00000000, 0x00002000,  //
                          0x20018106, 0x00000100, 0x200180C0, 0x00000181});
}

TEST(HopperCommands, FillVector) {
  CommandBuffer cb = hopper_buffer();
  ASSERT_TRUE(cb.fill(0x2000, 0xDEADBEEF, 0x100).ok());
  EXPECT_DW(cb.dwords(), {0x200281C1, 0xDEADBEEF, 0x00030005,  //
                          0x20028102, 0x00000000, 0x00002000,  //
                          0x20018106, 0x00000040,              //
                          0x200180C0, 0x00000582});
}

// SET_OBJECT, a release with timestamp (LAUNCH_DMA 0x08000014), the
// vocabulary's wait (SEM_EXECUTE 0x01001003), and WFI + NON_STALL_INTERRUPT.
TEST(HopperCommands, BindReleaseWaitInterrupt) {
  CommandBuffer cb = hopper_buffer();
  HopperMethods hm(cb);
  ASSERT_TRUE(hm.bind_copy_object().ok());
  ASSERT_TRUE(hm.release(0x1000000040ull, 0x0000000300000001ull, /*timestamp=*/true, /*interrupt=*/false).ok());
  ASSERT_TRUE(cb.wait_ge(0x1000000040ull, 0x0000000300000001ull).ok());
  ASSERT_TRUE(hm.nonstall_interrupt().ok());
  EXPECT_DW(cb.dwords(), {0x20018000, 0x0000C8B5,                                      //
                          0x20048090, 0x00000010, 0x00000040, 0x00000001, 0x00000003,  //
                          0x200180C0, 0x08000014,                                      //
                          0x20050017, 0x00000040, 0x00000010, 0x00000001, 0x00000003, 0x01001003,
                          0x2001001E, 0x00000000,  //
                          0x20010008, 0x00000000});
  EXPECT_EQ(cb.packet_count(), 4u);
}

// The vocabulary's signal_set is a release without timestamp (0x0800000C);
// with `interrupt` the encoder adds LAUNCH_DMA bits 6:5 = 2 (NON_BLOCKING).
TEST(HopperCommands, ReleaseForms) {
  CommandBuffer cb = hopper_buffer();
  ASSERT_TRUE(cb.signal_set(0x1000000040ull, 7).ok());
  ASSERT_TRUE(HopperMethods(cb).release(0x1000000040ull, 7, /*timestamp=*/true, /*interrupt=*/true).ok());
  EXPECT_DW(cb.dwords(), {0x20048090, 0x00000010, 0x00000040, 0x00000007, 0x00000000,  //
                          0x200180C0, 0x0800000C,                                      //
                          0x20048090, 0x00000010, 0x00000040, 0x00000007, 0x00000000,  //
                          0x200180C0, 0x08000054});
  const std::string text = disassemble_text(cb.dwords());
  EXPECT_NE(text.find("interrupt_type=non_blocking"), std::string::npos) << text;
}

TEST(HopperCommands, Errors) {
  CommandBuffer cb = hopper_buffer();
  EXPECT_EQ(cb.fill(0x2002, 1, 16).code(), Code::invalid_argument);
  EXPECT_EQ(cb.fill(0x2000, 1, 18).code(), Code::invalid_argument);
  EXPECT_EQ(HopperMethods(cb).release(0x1008, 1, true, false).code(), Code::invalid_argument) << "16-byte slots";
  EXPECT_EQ(HopperMethods(cb).release(1ull << 57, 1, true, false).code(), Code::out_of_range);
  EXPECT_EQ(cb.wait_ge(0x1004, 1).code(), Code::invalid_argument);
  EXPECT_EQ(cb.copy(1ull << 57, 0, 16).code(), Code::out_of_range);
  EXPECT_EQ(cb.copy(0, 0x1000, 0).code(), Code::invalid_argument) << "a zero-byte copy is refused";
  EXPECT_TRUE(cb.empty()) << "failed commands must append nothing";
}

TEST(HopperGpEntry, Vectors) {
  EXPECT_EQ(*encode_gp_entry({0x1000201000ull, 12, true, false, false}), 0x0000321000201000ull);
  EXPECT_EQ(*encode_gp_entry({0xFFFFFFFFFCull, 0x1FFFFF, false, true, false}), 0xFFFFFCFFFFFFFFFCull);
  EXPECT_EQ(decode_gp_entry(0x0000321000201000ull), (GpEntry{0x1000201000ull, 12, true, false, false}));
  EXPECT_EQ(encode_gp_entry({1ull << 40, 1}).status().code(), Code::out_of_range);
  EXPECT_EQ(encode_gp_entry({0x1002, 1}).status().code(), Code::invalid_argument);
  EXPECT_EQ(encode_gp_entry({0x1000, 1u << 21}).status().code(), Code::out_of_range);
  EXPECT_EQ(format_gp_entry(decode_gp_entry(0x0000321000201000ull)),
            "gp addr=0x1000201000 dwords=12 level=subroutine");
}

struct AsmVector {
  const char* text;
  std::vector<uint32_t> dw;
};

const AsmVector kAsm[] = {
    {"copy.launch_dma data_transfer_type=non_pipelined src_memory_layout=pitch dst_memory_layout=pitch",
     {0x200180C0, 0x00000182}},
    {"copy.launch_dma flush_enable=true semaphore_type=release_semaphore_with_timestamp semaphore_payload_size=two_word",
     {0x200180C0, 0x08000014}},
    {"host.sem_execute operation=acq_circ_geq payload_size=64bit", {0x2001001B, 0x01000003}},
    {"host.sem_execute operation=acq_circ_geq acquire_switch_tsg=1 payload_size=64bit", {0x2001001B, 0x01001003}},
    {"noninc copy.nop parameter=0x1; copy.nop parameter=0x2", {0x60028040, 1, 2}},
    {"immd host.nop handle=0x5", {0x80050002}},
    {"oneinc copy.set_semaphore_a upper=0x1; copy.set_semaphore_b lower=0x40; copy.set_semaphore_b lower=0x80",
     {0xA0038090, 1, 0x40, 0x80}},
    {"subch=2 host.sem_payload_lo payload=0x7", {0x20014019, 7}},
    {"copy.set_remap_components dst_x=const_a dst_y=const_b component_size=four num_dst_components=two",
     {0x200181C2, 0x01030054}},
    {"subch=4 host.set_object nvclass=0xc8b5", {0x20018000, 0x0000C8B5}},
    {"copy.set_semaphore_a upper=0x1 rsvd=0x80000000", {0x20018090, 0x80000001}},
    {"subch=3 mthd offset=0x300 value=0x182", {0x200160C0, 0x00000182}},
    {"host.sem_addr_lo addr=0x12345678; host.sem_addr_hi addr_hi=0x1", {0x20020017, 0x12345678, 1}},
    {"copy.offset_in_upper upper=0x10; copy.offset_in_lower value=0x200000; copy.offset_out_upper upper=0x10; "
     "copy.offset_out_lower value=0x400000",
     {0x20048100, 0x10, 0x200000, 0x10, 0x400000}},
};

TEST(HopperAsm, GoldenBothWays) {
  for (const AsmVector& v : kAsm) {
    SCOPED_TRACE(v.text);
    Result<std::vector<uint32_t>> dw = assemble(v.text);
    ASSERT_TRUE(dw.ok()) << dw.status().to_string();
    EXPECT_EQ(hexs(*dw), hexs(v.dw));
    const Disassembly d = disassemble(v.dw);
    ASSERT_TRUE(d.error.ok()) << d.error.to_string();
    ASSERT_EQ(d.lines.size(), 1u);
    EXPECT_EQ(d.lines[0], v.text) << "disassembly should print the canonical text";
  }
}

TEST(HopperAsm, CommandsRoundTrip) {
  CommandBuffer cb = hopper_buffer();
  ASSERT_TRUE(HopperMethods(cb).bind_copy_object().ok());
  ASSERT_TRUE(cb.wait_ge(0x1000000040ull, 7).ok());
  ASSERT_TRUE(cb.fill(0x2000, 0xDEADBEEF, 0x100).ok());
  ASSERT_TRUE(cb.copy(0x100000000ull, 0x12345, 0xC0000001ull).ok());
  ASSERT_TRUE(HopperMethods(cb).release(0x1000000040ull, 8, true, false).ok());
  const Disassembly d = disassemble(cb.dwords());
  ASSERT_TRUE(d.error.ok()) << d.error.to_string();
  std::string text;
  for (const std::string& l : d.lines) text += l + "\n";
  Result<std::vector<uint32_t>> back = assemble(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << text;
  EXPECT_EQ(hexs(*back), hexs(cb.dwords()));
  EXPECT_NE(text.find("copy.launch_dma data_transfer_type=pipelined"), std::string::npos) << text;
}

TEST(HopperAsm, SetObjectRebindsSubchannel) {
  // Subchannel 2 starts unbound: its 0x300 is raw; after SET_OBJECT(0xC8B5) it is copy.launch_dma.
  const std::vector<uint32_t> dw = {0x200140C0, 0x182, 0x20014000, 0xC8B5, 0x200140C0, 0x182};
  const Disassembly d = disassemble(dw);
  ASSERT_TRUE(d.error.ok());
  ASSERT_EQ(d.lines.size(), 3u);
  EXPECT_EQ(d.lines[0], "subch=2 mthd offset=0x300 value=0x182");
  EXPECT_EQ(d.lines[1], "subch=2 host.set_object nvclass=0xc8b5");
  EXPECT_EQ(d.lines[2],
            "subch=2 copy.launch_dma data_transfer_type=non_pipelined src_memory_layout=pitch dst_memory_layout=pitch");
}

TEST(HopperAsm, Errors) {
  struct E {
    const char* text;
    const char* needle;
  } cases[] = {
      {"copy.bogus x=1", "unknown method"},
      {"launch_dma", "class.method"},
      {"copy.set_semaphore_a upper=0x2000000", "does not fit 25 bits"},
      {"copy.launch_dma data_transfer_type=sideways", "not a number or one of"},
      {"copy.offset_in_upper upper=0; copy.offset_out_lower value=1", "header addresses"},
      {"immd copy.set_semaphore_b lower=0x2000", "exceeds 13 bits"},
      {"copy.launch_dma bogus=1", "unknown key"},
      {"host.sem_addr_lo addr=0x3", "must be aligned"},
      {"copy.set_semaphore_a upper=1 rsvd=0x1", "overlaps defined fields"},
      {"subch=9 host.nop", "not 0..7"},
      {"copy.nop;", "trailing ';'"},
  };
  for (const E& e : cases) {
    Result<std::vector<uint32_t>> r = assemble(e.text);
    ASSERT_FALSE(r.ok()) << e.text;
    EXPECT_NE(r.status().message().find(e.needle), std::string::npos) << e.text << " -> " << r.status().to_string();
  }
  Result<std::vector<uint32_t>> r = assemble("host.nop\ncopy.bogus");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("line 2: ", 0), 0u) << r.status().message();
  // Truncated and undecodable pushbuffers stop with an offset.
  Disassembly d = disassemble(std::vector<uint32_t>{0x20018000, 0xC8B5, 0x20048100, 1});
  EXPECT_FALSE(d.error.ok());
  EXPECT_EQ(d.error_offset, 2u);
  EXPECT_EQ(d.lines.size(), 1u);
  d = disassemble(std::vector<uint32_t>{0xE0000000});
  EXPECT_FALSE(d.error.ok());
}

TEST(HopperTable, WellFormed) {
  for (const Method& m : methods()) {
    SCOPED_TRACE(std::string(cls_name(m.cls)) + "." + std::string(m.name));
    EXPECT_EQ(m.offset % 4, 0);
    EXPECT_EQ(m.cls == Cls::host, m.offset < 0x100);
    EXPECT_EQ(find_method(m.cls, m.offset), &m);
    EXPECT_EQ(find_method(std::string(cls_name(m.cls)) + "." + std::string(m.name)), &m);
    uint32_t seen = 0;
    for (const Field& f : m.fields) {
      EXPECT_LE(f.lo, f.hi);
      EXPECT_LT(f.hi, 32);
      EXPECT_EQ(seen & f.mask(), 0u) << f.name << " overlaps another field";
      seen |= f.mask();
      for (const EnumVal& e : f.values) EXPECT_LE(uint64_t(e.value), (uint64_t(f.mask()) >> f.lo)) << e.name;
    }
  }
  EXPECT_NE(describe_methods().find("copy.launch_dma (0x300)"), std::string::npos);
  EXPECT_EQ(kGenName, "hopper-ce");
}

TEST(HopperAsm, FuzzRoundTrip) {
  // Random well-formed headers with random data: disassemble -> assemble is exact.
  std::mt19937_64 rng(12345);
  const std::span<const Method> ms = methods();
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<uint32_t> dw;
    for (int k = 0; k < 8; ++k) {
      const Method& m = ms[rng() % ms.size()];
      const uint8_t subch = m.cls == Cls::copy ? kCopySubchannel : static_cast<uint8_t>(rng() % 8);
      if (m.cls == Cls::host && m.offset == 0) continue;  // keep the subchannel map fixed
      const int op = static_cast<int>(rng() % 4);
      if (op == 3) {  // immediate
        dw.push_back(*encode_header({HdrOp::immd, subch, m.offset, static_cast<uint16_t>(rng() & 0x1FFF)}));
        continue;
      }
      const HdrOp hop = op == 0 ? HdrOp::inc : op == 1 ? HdrOp::non_inc : HdrOp::one_inc;
      const uint16_t n = static_cast<uint16_t>(1 + rng() % (hop == HdrOp::inc ? 1 : 3));
      dw.push_back(*encode_header({hop, subch, m.offset, n}));
      for (int i = 0; i < n; ++i) dw.push_back(static_cast<uint32_t>(rng()));
    }
    const Disassembly d = disassemble(dw);
    ASSERT_TRUE(d.error.ok()) << d.error.to_string();
    std::string text;
    for (const std::string& l : d.lines) text += l + "\n";
    Result<std::vector<uint32_t>> back = assemble(text);
    ASSERT_TRUE(back.ok()) << back.status().to_string() << "\n" << text;
    ASSERT_EQ(hexs(*back), hexs(dw)) << text;
  }
}

}  // namespace
}  // namespace conccl::hopper
