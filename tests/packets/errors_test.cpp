// tests/packets/errors_test.cpp - every way a packet can be wrong, and what
// the error says about it. Messages must name the op and the key at fault.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "packets/packet_test_util.hpp"

namespace conccl::sdma {
namespace {

// assemble(g, text) must fail with `code` and a message containing every needle.
void expect_asm_error(Gen g, const std::string& text, Code code,
                      std::initializer_list<const char*> needles) {
  Result<std::vector<uint32_t>> r = assemble(g, text);
  ASSERT_FALSE(r.ok()) << "SDMA " << gen_name(g) << ": '" << text << "' assembled to "
                       << format_dwords(*r);
  EXPECT_EQ(r.status().code(), code) << text << ": " << r.status().to_string();
  const std::string m = r.status().message();
  for (const char* n : needles)
    EXPECT_NE(m.find(n), std::string::npos) << "'" << text << "': message '" << m
                                            << "' lacks '" << n << "'";
}

void expect_asm_ok(Gen g, const std::string& text) {
  Result<std::vector<uint32_t>> r = assemble(g, text);
  EXPECT_TRUE(r.ok()) << "SDMA " << gen_name(g) << ": '" << text << "': "
                      << r.status().to_string();
}

constexpr Code kBad = Code::invalid_argument;
constexpr Code kRange = Code::out_of_range;

TEST(Errors, UnknownOp) {
  for (Gen g : kAllGens) {
    expect_asm_error(g, "frobnicate addr=0x1000", kBad, {"unknown op 'frobnicate'", "copy", "fence"});
    expect_asm_error(g, "COPY src=0 dst=0 bytes=4", kBad, {"unknown op 'COPY'"});
    expect_asm_error(g, "addr=0x1000", kBad, {"unknown op 'addr=0x1000'"});
  }
}

TEST(Errors, UnknownKey) {
  for (Gen g : kAllGens) {
    expect_asm_error(g, "copy src=0 dst=0 bytes=4 colour=3", kBad,
                     {"copy", "unknown key 'colour'", "keys:", "bytes"});
    expect_asm_error(g, "fence addr=0 value=0 data=1", kBad, {"fence", "unknown key 'data'"});
    // write's count is derived from the data.
    expect_asm_error(g, "write dst=0 count=1 data=1", kBad, {"write", "unknown key 'count'"});
    expect_asm_error(g, "trap =5", kBad, {"trap", "expected key=value", "'=5'"});
    expect_asm_error(g, "trap ctx", kBad, {"trap", "expected key=value", "'ctx'"});
  }
  // Keys of other generations are unknown here, and name the generation.
  expect_asm_error(Gen::v4, "copy src=0 dst=0 bytes=4 cpv=1", kBad, {"copy", "'cpv'", "SDMA 4"});
  expect_asm_error(Gen::v7, "copy src=0 dst=0 bytes=4 src_sw=1", kBad, {"copy", "'src_sw'", "SDMA 7"});
  expect_asm_error(Gen::v6, "copy src=0 dst=0 bytes=4 dcc=1", kBad, {"copy", "'dcc'", "SDMA 6"});
  expect_asm_error(Gen::v4, "fence addr=0 value=0 mtype=3", kBad, {"fence", "'mtype'"});
  expect_asm_error(Gen::v5, "reg_write reg=1 value=1 mall_policy=1", kBad, {"reg_write", "'mall_policy'"});
  expect_asm_error(Gen::v7, "reg_write reg=1 value=1 byte_en=15", kBad, {"reg_write", "'byte_en'"});
  expect_asm_error(Gen::v5, "gcr_user control=1 vmid=1", kBad, {"gcr_user", "'vmid'"});
}

TEST(Errors, MissingRequiredKey) {
  struct Case {
    const char* text;
    const char* key;
  };
  const Case cases[] = {
      {"copy src=0x1000 dst=0x2000", "bytes"},
      {"copy dst=0x2000 bytes=4", "src"},
      {"copy_bcst src=0 dst0=0 bytes=4", "dst1"},
      {"fill dst=0 value=1", "bytes"},
      {"fill dst=0 bytes=4", "value"},
      {"fence addr=0x1000", "value"},
      {"fence value=1", "addr"},
      {"poll addr=0 ref=0 mask=1", "func"},
      {"atomic_add64 addr=0x1000", "value"},
      {"atomic addr=0x1000", "op"},
      {"timestamp", "addr"},
      {"cond_exe addr=0 ref=1", "count"},
      {"ib addr=0", "size"},
      {"copy_window src=0 dst=0 src_pitch=1 dst_pitch=1 rect_x=1", "rect_y"},
      {"hdp_flush done=0x10", "req"},
      {"reg_write value=1", "reg"},
  };
  for (Gen g : kAllGens)
    for (const Case& c : cases) {
      const std::string op(c.text, std::string_view(c.text).find(' ') == std::string_view::npos
                                       ? std::string_view(c.text).size()
                                       : std::string_view(c.text).find(' '));
      expect_asm_error(g, c.text, kBad,
                       {op.c_str(), "missing required field", (std::string("'") + c.key + "'").c_str()});
    }
}

TEST(Errors, DuplicateKey) {
  for (Gen g : kAllGens) {
    expect_asm_error(g, "fence addr=0 addr=4 value=1", kBad, {"fence", "key 'addr' given twice"});
    expect_asm_error(g, "write dst=0 data=1 data=2", kBad, {"write", "key 'data' given twice"});
    expect_asm_error(g, "nop data=1 data=2", kBad, {"nop", "'data' given twice"});
  }
}

TEST(Errors, NotANumber) {
  for (Gen g : kAllGens) {
    expect_asm_error(g, "fence addr=zz value=1", kBad, {"fence", "'zz'", "key 'addr'", "not a number"});
    expect_asm_error(g, "fence addr=0x value=1", kBad, {"fence", "key 'addr'", "not a number"});
    expect_asm_error(g, "fence addr=0 value=", kBad, {"fence", "key 'value'", "not a number"});
    expect_asm_error(g, "trap ctx=1.5", kBad, {"trap", "key 'ctx'"});
    expect_asm_error(g, "trap ctx=0x1g", kBad, {"trap", "key 'ctx'"});
    // Negative numbers only for the 64-bit two's-complement fields.
    expect_asm_error(g, "fence addr=0 value=-1", kBad, {"fence", "'-1'", "key 'value'"});
    expect_asm_error(g, "copy src=0 dst=0 bytes=-4", kBad, {"copy", "key 'bytes'"});
    // More than 64 bits.
    expect_asm_error(g, "timestamp_set value=0x10000000000000000", kBad, {"timestamp_set", "key 'value'"});
    expect_asm_error(g, "atomic_add64 addr=0 value=-9223372036854775809", kBad,
                     {"atomic_add64", "key 'value'"});
    expect_asm_error(g, "write dst=0 data=1,,2", kBad, {"write", "data item ''"});
    expect_asm_error(g, "write dst=0 data=0x100000000", kBad, {"write", "data item '0x100000000'", "32-bit"});
    expect_asm_error(g, "nop data=x", kBad, {"nop", "data item 'x'"});
  }
}

TEST(Errors, ValueTooWideForItsField) {
  for (Gen g : kAllGens) {
    expect_asm_error(g, "fence addr=0 value=0x100000000", kRange, {"fence", "value=0x100000000", "32-bit field"});
    expect_asm_error(g, "poll addr=0 ref=0 mask=0 func=8", kRange, {"poll", "func=0x8", "3-bit"});
    expect_asm_error(g, "poll addr=0 ref=0 mask=0 func=0 retry=0x1000", kRange, {"poll", "retry", "12-bit"});
    expect_asm_error(g, "poll addr=0 ref=0 mask=0 func=0 interval=0x10000", kRange, {"poll", "interval", "16-bit"});
    expect_asm_error(g, "nop count=0x4000", kRange, {"nop", "count=0x4000", "14-bit"});
    expect_asm_error(g, "cond_exe addr=0 ref=0 count=0x4000", kRange, {"cond_exe", "count", "14-bit"});
    expect_asm_error(g, "ib addr=0 size=0x100000", kRange, {"ib", "size", "20-bit"});
    expect_asm_error(g, "ib addr=0 size=1 vmid=16", kRange, {"ib", "vmid", "4-bit"});
    expect_asm_error(g, "atomic addr=0 op=128", kRange, {"atomic", "op=0x80", "7-bit"});
    expect_asm_error(g, "atomic_add64 addr=0 value=1 loop_interval=0x2000", kRange, {"atomic_add64", "loop_interval"});
    expect_asm_error(g, "copy_window src=0 dst=0 src_pitch=1 dst_pitch=1 rect_x=1 rect_y=1 elementsize=8", kRange,
                     {"copy_window", "elementsize", "3-bit"});
    expect_asm_error(g, "copy src=0 dst=0 bytes=0", kRange, {"copy", "bytes", "at least 1"});
    expect_asm_error(g, "copy src=0 dst=0 bytes=4 tmz=2", kRange, {"copy", "tmz", "1-bit"});
  }
  // Widths that differ between generations.
  expect_asm_error(Gen::v6, "trap ctx=0x10000000", kRange, {"trap", "ctx=0x10000000", "28-bit"});
  expect_asm_ok(Gen::v7, "trap ctx=0xffffffff");
  expect_asm_error(Gen::v4, "copy_window src=0 dst=0 src_pitch=1 dst_pitch=1 rect_x=1 rect_y=1 src_z=2048",
                   kRange, {"copy_window", "src_z", "11-bit"});
  expect_asm_ok(Gen::v5, "copy_window src=0 dst=0 src_pitch=1 dst_pitch=1 rect_x=1 rect_y=1 src_z=2048");
  expect_asm_error(Gen::v6, "copy_window src=0 dst=0 src_pitch=1 dst_pitch=1 rect_x=16385 rect_y=1", kRange,
                   {"copy_window", "rect_x", "14-bit", "max 0x4000"});
  expect_asm_ok(Gen::v7, "copy_window src=0 dst=0 src_pitch=1 dst_pitch=1 rect_x=16385 rect_y=1");
  expect_asm_error(Gen::v7, "copy_window src=0 dst=0 src_pitch=65537 dst_pitch=1 rect_x=1 rect_y=1", kRange,
                   {"copy_window", "src_pitch", "16-bit"});
  expect_asm_ok(Gen::v6, "copy_window src=0 dst=0 src_pitch=65537 dst_pitch=1 rect_x=1 rect_y=1");
  expect_asm_error(Gen::v6, "gcr control=0x80000", kRange, {"gcr", "control", "19-bit"});
  expect_asm_ok(Gen::v7, "gcr control=0x80000");
  expect_asm_error(Gen::v5, "gcr base=0x1000000000000", kRange, {"gcr", "base"});
  expect_asm_error(Gen::v4, "reg_write reg=0x40000 value=0", kRange, {"reg_write", "reg", "18-bit"});
  expect_asm_ok(Gen::v7, "reg_write reg=0x40000 value=0");
  expect_asm_error(Gen::v7, "reg_write reg=0x40000000 value=0", kRange, {"reg_write", "reg", "30-bit"});
  // A NOP count far too wide is an error, not a huge allocation.
  for (const char* t : {"nop count=0x10000000000", "nop count=0x8000000000000000", "nop count=0xffffffffffffffff"})
    expect_asm_error(Gen::v4, t, kRange, {"nop", "count", "14-bit"});
  std::vector<uint32_t> small(4);
  const FieldValue huge[] = {{Key::count, 1ull << 40}};
  Result<size_t> n = encode(Gen::v5, Pkt::nop, huge, small);
  EXPECT_FALSE(n.ok());
  EXPECT_LE(packet_dwords(Gen::v5, Pkt::nop, huge), 1u + 0x4000u);
}

TEST(Errors, BytesOverTheGenerationLimit) {
  // 22-bit generations: Mesa's 0x3FFF00 cap.
  for (Gen g : {Gen::v4, Gen::v4_4_2, Gen::v5}) {
    expect_asm_ok(g, "copy src=0 dst=0 bytes=0x3FFF00");
    expect_asm_error(g, "copy src=0 dst=0 bytes=0x3FFF01", kRange, {"copy", "bytes=0x3fff01", "limit", "0x3fff00", "split"});
    expect_asm_error(g, "copy src=0 dst=0 bytes=0x400000", kRange, {"copy", "bytes=0x400000", "limit"});
    // ROCr's default 0x3FFFE0 is above our cap.
    expect_asm_error(g, "copy src=0 dst=0 bytes=0x3FFFE0", kRange, {"copy", "limit"});
    expect_asm_error(g, "copy src=0 dst=0 bytes=0x400001", kRange, {"copy", "bytes", "22-bit"});
    expect_asm_error(g, "copy_bcst src=0 dst0=0 dst1=0 bytes=0x400000", kRange, {"copy_bcst", "bytes"});
  }
  expect_asm_error(Gen::v4_4_2, "swap a=0 b=0 bytes=0x400000", kRange, {"swap", "bytes", "limit"});
  expect_asm_ok(Gen::v4_4_2, "swap a=0 b=0 bytes=0x3FFF00");
  // 30-bit generations.
  for (Gen g : {Gen::v5_2, Gen::v6, Gen::v7}) {
    expect_asm_ok(g, "copy src=0 dst=0 bytes=0x400000");
    expect_asm_ok(g, "copy src=0 dst=0 bytes=0x3FFFFF00");
    expect_asm_error(g, "copy src=0 dst=0 bytes=0x3FFFFF01", kRange, {"copy", "limit", "0x3fffff00"});
    // DMA-Latte's 1<<30 pieces exceed the cap.
    expect_asm_error(g, "copy src=0 dst=0 bytes=0x40000000", kRange, {"copy", "bytes"});
    expect_asm_error(g, "copy src=0 dst=0 bytes=0x40000001", kRange, {"copy", "bytes", "30-bit"});
  }
  // Fills: 0x3FFFE0 on 4.x/5.x, 0x3FFFFFE0 on 6/7.
  for (Gen g : {Gen::v4, Gen::v4_4_2, Gen::v5, Gen::v5_2}) {
    expect_asm_ok(g, "fill dst=0 value=0 bytes=0x3FFFE0");
    expect_asm_error(g, "fill dst=0 value=0 bytes=0x3FFFE4", kRange, {"fill", "bytes", "limit", "0x3fffe0"});
    expect_asm_error(g, "fill8 dst=0 value=0 bytes=0x3FFFE1", kRange, {"fill8", "bytes", "limit"});
  }
  for (Gen g : {Gen::v6, Gen::v7}) {
    expect_asm_ok(g, "fill dst=0 value=0 bytes=0x3FFFFFE0");
    expect_asm_error(g, "fill dst=0 value=0 bytes=0x3FFFFFE4", kRange, {"fill", "limit", "0x3fffffe0"});
  }
}

TEST(Errors, MisalignedAddresses) {
  struct Case {
    const char* text;
    const char* key;
    const char* align;
  };
  const Case cases[] = {
      {"fence addr=0x1002 value=0", "addr=0x1002", "4-byte"},
      {"fence addr=0x1001 value=0", "addr=0x1001", "4-byte"},
      {"poll addr=0x1003 ref=0 mask=0 func=3", "addr=0x1003", "4-byte"},
      {"cond_exe addr=0x1002 ref=0 count=1", "addr=0x1002", "4-byte"},
      {"atomic_add64 addr=0x1004 value=1", "addr=0x1004", "8-byte"},
      {"atomic addr=0x1002 op=15", "addr=0x1002", "4-byte"},
      {"timestamp addr=0x1004", "addr=0x1004", "8-byte"},
      {"timestamp_local addr=0x1001", "addr=0x1001", "8-byte"},
      {"ib addr=0x1010 size=8", "addr=0x1010", "32-byte"},
      {"fill dst=0x1001 value=0 bytes=4", "dst=0x1001", "4-byte"},
      {"fill dst=0x1000 value=0 bytes=4095", "bytes=0xfff", "4-byte"},
      {"write dst=0x1002 data=1", "dst=0x1002", "4-byte"},
      {"copy_window src=0x1001 dst=0 src_pitch=1 dst_pitch=1 rect_x=1 rect_y=1", "src=0x1001", "4-byte"},
      {"semaphore addr=0x1004", "addr=0x1004", "8-byte"},
  };
  for (Gen g : kAllGens)
    for (const Case& c : cases) {
      const std::string_view t(c.text);
      const std::string op(t.substr(0, t.find(' ')));
      expect_asm_error(g, c.text, kBad, {op.c_str(), c.key, c.align, "aligned"});
    }
  for (Gen g : {Gen::v5, Gen::v5_2, Gen::v6, Gen::v7}) {
    expect_asm_error(g, "mem_incr addr=0x1004", kBad, {"mem_incr", "addr=0x1004", "8-byte"});
    expect_asm_error(g, "gcr base=0x1040", kBad, {"gcr", "base=0x1040", "128-byte"});
    expect_asm_error(g, "gcr_user limit=0x10", kBad, {"gcr_user", "limit=0x10", "128-byte"});
  }
  // Byte-granular addresses are fine where the engine takes them.
  for (Gen g : kAllGens) {
    expect_asm_ok(g, "copy src=0x1001 dst=0x2003 bytes=5");
    expect_asm_ok(g, "fill8 dst=0x1001 value=0 bytes=3");
    expect_asm_ok(g, "atomic addr=0x1004 op=15");
  }
}

TEST(Errors, PacketNotInGeneration) {
  for (Gen g : {Gen::v4, Gen::v4_4_2}) {
    expect_asm_error(g, "gcr control=0xC3A1", kBad, {"gcr does not exist on SDMA " , "5, 5.2, 6, 7"});
    expect_asm_error(g, "gcr_user control=0xC3C0", kBad, {"gcr_user does not exist"});
    expect_asm_error(g, "mem_incr addr=0x1000", kBad, {"mem_incr does not exist"});
  }
  for (Gen g : {Gen::v4, Gen::v5, Gen::v5_2, Gen::v6, Gen::v7})
    expect_asm_error(g, "swap a=0 b=0 bytes=4", kBad, {"swap does not exist", "4.4.2"});
  // The API says the same.
  const FieldValue f[] = {{Key::control, 1}};
  std::vector<uint32_t> out(8);
  Result<size_t> r = encode(Gen::v4, Pkt::gcr, f, out);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gcr does not exist on SDMA 4"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(packet_dwords(Gen::v6, Pkt::swap, {}), 0u);
}

TEST(Errors, DataRules) {
  for (Gen g : kAllGens) {
    expect_asm_error(g, "write dst=0x1000", kBad, {"write", "at least one data dword"});
    expect_asm_error(g, "nop count=2 data=1,2,3", kBad, {"nop", "count=2", "3 data dwords"});
    expect_asm_error(g, "nop count=0 data=1", kBad, {"nop", "count=0"});
    expect_asm_ok(g, "nop count=3 data=1,2,3");
  }
  const Gen g = Gen::v5_2;
  std::vector<uint32_t> out(64);
  // Data for a packet that takes none.
  const FieldValue fence[] = {{Key::addr, 0}, {Key::value, 0}};
  const uint32_t one[] = {1};
  Result<size_t> r = encode(g, Pkt::fence, fence, out, one);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("takes no data"), std::string::npos);
  // write's count is derived.
  const FieldValue wc[] = {{Key::dst, 0}, {Key::count, 0}};
  r = encode(g, Pkt::write, wc, out, one);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("count is set from the number of data dwords"), std::string::npos);
  // Too many data dwords for WRITE (count[19:0]) and NOP (count[29:16]).
  std::vector<uint32_t> big((1u << 20) + 1, 7u);
  std::vector<uint32_t> big_out(big.size() + 8);
  const FieldValue wd[] = {{Key::dst, 0}};
  r = encode(g, Pkt::write, wd, big_out, big);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), kRange);
  EXPECT_NE(r.status().message().find("exceed the limit"), std::string::npos) << r.status().message();
  big.resize(1u << 20);
  r = encode(g, Pkt::write, wd, big_out, big);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  std::vector<uint32_t> nop_data(0x4000, 1u);
  r = encode(g, Pkt::nop, {}, big_out, nop_data);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("14-bit count"), std::string::npos) << r.status().message();
  nop_data.resize(0x3FFF);
  r = encode(g, Pkt::nop, {}, big_out, nop_data);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
}

TEST(Errors, OptionalDwordAndReservedBits) {
  // META_CONFIG (SDMA 7 copy dword 7) exists only with dcc=1.
  expect_asm_error(Gen::v7, "copy src=0 dst=0 bytes=4 data_format=1", kBad,
                   {"copy", "data_format", "optional dword", "dcc=1"});
  expect_asm_ok(Gen::v7, "copy src=0 dst=0 bytes=4 dcc=1 data_format=1");
  for (Gen g : kAllGens) {
    expect_asm_error(g, "fence addr=0 value=0 rsvd0=0x1", kBad, {"fence", "rsvd0=0x1", "overlaps defined fields"});
    expect_asm_error(g, "fence addr=0 value=0 rsvd9=0x1", kBad, {"fence", "rsvd9", "outside the packet's 4 dwords"});
    expect_asm_error(g, "fence addr=0 value=0 rsvd16=0x1", kBad, {"fence", "bad reserved-bits key 'rsvd16'"});
    expect_asm_error(g, "fence addr=0 value=0 rsvdx=0x1", kBad, {"fence", "'rsvdx'"});
    expect_asm_error(g, "fence addr=0 value=0 rsvd0=0x100000000", kBad, {"fence", "'rsvd0'", "32-bit"});
    expect_asm_error(g, "write dst=0 data=1 rsvd4=0x1", kBad, {"write", "rsvd4", "outside"});
  }
  expect_asm_ok(Gen::v4, "fence addr=0 value=0 rsvd0=0x80000000");
  expect_asm_error(Gen::v7, "copy src=0 dst=0 bytes=4 rsvd7=0x80000000", kBad, {"copy", "rsvd7", "outside"});
  expect_asm_ok(Gen::v7, "copy src=0 dst=0 bytes=4 dcc=1 rsvd7=0x80000000");
}

TEST(Errors, OutputTooSmall) {
  const FieldValue f[] = {{Key::src, 0x1000}, {Key::dst, 0x2000}, {Key::bytes, 64}};
  std::vector<uint32_t> out(6, 0xEEEEEEEEu);
  Result<size_t> r = encode(Gen::v6, Pkt::copy, f, out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::resource_exhausted);
  EXPECT_NE(r.status().message().find("needs 7 dwords"), std::string::npos) << r.status().message();
  EXPECT_EQ(out, std::vector<uint32_t>(6, 0xEEEEEEEEu)) << "output written on failure";
}

TEST(Errors, AssembleNamesTheLine) {
  Result<std::vector<uint32_t>> r = assemble(Gen::v6, "nop\n# fine\ntrap ctx=1\nbogus x=1\nnop\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("line 4: unknown op 'bogus'", 0), 0u) << r.status().message();
  r = assemble(Gen::v6, "fence addr=0x1000 value=1\nfence addr=0x1001 value=1");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("line 2: fence", 0), 0u) << r.status().message();
  // Blank programs assemble to nothing.
  for (const char* t : {"", "\n\n", "   # only a comment\n"}) {
    r = assemble(Gen::v6, t);
    ASSERT_TRUE(r.ok()) << t;
    EXPECT_TRUE(r->empty());
  }
}

TEST(Errors, DecodeTruncated) {
  for (Gen g : kAllGens) {
    Result<Packet> p = decode(g, std::vector<uint32_t>{});
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("truncated"), std::string::npos);

    p = decode(g, std::vector<uint32_t>{0x00000001, 0x00000FFF, 0});
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("truncated copy packet: needs 7 dwords, only 3 left"),
              std::string::npos) << p.status().message();
    // NOP count beyond the buffer.
    p = decode(g, std::vector<uint32_t>{0x00050000, 0, 0});
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("truncated nop packet: needs 6 dwords, only 3 left"),
              std::string::npos) << p.status().message();
    // WRITE whose count promises more data than there is; and one cut before its count.
    p = decode(g, std::vector<uint32_t>{0x00000002, 0x1000, 0, 9, 1, 2});
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("truncated write packet: needs 14 dwords"), std::string::npos)
        << p.status().message();
    p = decode(g, std::vector<uint32_t>{0x00000002, 0x1000});
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("truncated write"), std::string::npos) << p.status().message();
  }
  // SDMA 7 copy with dcc=1 needs its 8th dword.
  Result<Packet> p = decode(Gen::v7, std::vector<uint32_t>{0x00080001, 0xFFF, 0, 0, 0, 0, 0});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("needs 8 dwords, only 7 left"), std::string::npos)
      << p.status().message();
  // The same dwords are a complete 7-dword copy on SDMA 6 (bit 19 = cpv).
  EXPECT_TRUE(decode(Gen::v6, std::vector<uint32_t>{0x00080001, 0xFFF, 0, 0, 0, 0, 0}).ok());
}

TEST(Errors, DecodeUnknownOpcodes) {
  struct Case {
    Gen g;
    uint32_t header;
    const char* needle;
  };
  const Case cases[] = {
      {Gen::v6, 0x000000FF, "unknown opcode 255 (header 0x000000ff) on SDMA 6"},
      {Gen::v4, 0x00000003, "unknown opcode 3"},
      {Gen::v4, 0x00000011, "unknown opcode 17"},            // GCR before SDMA 5
      {Gen::v4, 0x00000107, "opcode 7 sub-op 1"},            // MEM_INCR before SDMA 5
      {Gen::v6, 0x00000901, "opcode 1 sub-op 9"},            // SWAP off MI300
      {Gen::v5, 0x00000201, "opcode 1 sub-op 2"},            // COPY sub-op 2
      {Gen::v5, 0x4000000B, "opcode 11 sub-op 0"},           // fillsize 1
      {Gen::v5, 0x84000008, "opcode 8 sub-op 0"},            // mem_poll=1 with hdp_flush=1
      {Gen::v7, 0x88000008, "opcode 8 sub-op 0"},            // 7.x mode=2
      {Gen::v5_2, 0x00000305, "opcode 5 sub-op 3"},
  };
  for (const Case& c : cases) {
    const std::vector<uint32_t> in = {c.header, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    Result<Packet> p = decode(c.g, in);
    ASSERT_FALSE(p.ok()) << std::hex << c.header;
    EXPECT_EQ(p.status().code(), kBad);
    EXPECT_NE(p.status().message().find(c.needle), std::string::npos) << p.status().message();
    EXPECT_FALSE(packet_length(c.g, in).ok());
  }
}

TEST(Errors, DecodeStreamReportsTheOffset) {
  // nop(1) + copy(7) + fence(4) + bad opcode at dword 12 + more.
  std::vector<uint32_t> in = {0x00000000,
                              0x00000001, 0x00000FFF, 0, 0x1000, 0, 0x2000, 0,
                              0x00000005, 0x1000, 0, 1,
                              0x000000FE, 0, 0};
  for (Gen g : kAllGens) {
    StreamDecode s = decode_stream(g, in);
    ASSERT_FALSE(s.error.ok());
    EXPECT_EQ(s.error_offset, 12u);
    EXPECT_NE(s.error.message().find("unknown opcode 254"), std::string::npos);
    ASSERT_EQ(s.packets.size(), 3u);
    EXPECT_EQ(s.offsets, (std::vector<size_t>{0, 1, 8}));
  }
  // Truncated last packet.
  std::vector<uint32_t> cut = {0x00000000, 0x00000005, 0x1000, 0};
  StreamDecode s = decode_stream(Gen::v5, cut);
  ASSERT_FALSE(s.error.ok());
  EXPECT_EQ(s.error_offset, 1u);
  EXPECT_NE(s.error.message().find("truncated fence packet"), std::string::npos);
  // Empty stream: no packets, no error.
  s = decode_stream(Gen::v5, {});
  EXPECT_TRUE(s.error.ok());
  EXPECT_TRUE(s.packets.empty());
}

TEST(Errors, ParseDwordsBadToken) {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"00000001 xyz", "line 1: 'xyz' is not a 32-bit hex dword"},
      {"00000001\n123456789", "line 2: '123456789'"},
      {"1 2\n\n0x", "line 3: '0x'"},
      {"0xG", "'G'"},  // the 0x prefix is stripped before the message
      {"-1", "'-1'"},
      {"1,2", "'1,2'"},
  };
  for (const Case& c : cases) {
    Result<std::vector<uint32_t>> r = parse_dwords(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), kBad);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << c.text << ": " << r.status().message();
  }
  Result<std::vector<uint32_t>> ok = parse_dwords("  0xFFFFFFFF 1 # comment\n\n  deadbeef\n");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(*ok, (std::vector<uint32_t>{0xFFFFFFFFu, 1u, 0xDEADBEEFu}));
}

TEST(Errors, ParseU64) {
  uint64_t v = 0;
  EXPECT_TRUE(parse_u64("0", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_TRUE(parse_u64("0x10", &v));
  EXPECT_EQ(v, 16u);
  EXPECT_TRUE(parse_u64("0XfF", &v));
  EXPECT_EQ(v, 255u);
  EXPECT_TRUE(parse_u64("18446744073709551615", &v));
  EXPECT_EQ(v, ~0ull);
  EXPECT_TRUE(parse_u64("-1", &v, true));
  EXPECT_EQ(v, ~0ull);
  EXPECT_TRUE(parse_u64("-9223372036854775808", &v, true));
  EXPECT_EQ(v, 1ull << 63);
  for (const char* bad : {"", "-", "0x", "x1", "1 ", " 1", "+1", "1e3", "18446744073709551616",
                          "0x10000000000000000", "--1"})
    EXPECT_FALSE(parse_u64(bad, &v, true)) << "'" << bad << "'";
  EXPECT_FALSE(parse_u64("-1", &v, false));
  EXPECT_FALSE(parse_u64("-9223372036854775809", &v, true));
}

}  // namespace
}  // namespace conccl::sdma

namespace conccl {
namespace {

// Result::value() on an error is a caller bug: it says which error before
// it aborts, instead of std::bad_variant_access with no message.
TEST(ResultDeathTest, ValueOfAnErrorPrintsTheStatus) {
  Result<int> r = error(Code::not_found, "GPU 9 requested; the device has 8");
  EXPECT_FALSE(r.ok());
  EXPECT_DEATH((void)r.value(), "Result::value\\(\\) called on an error: .*GPU 9 requested; the device has 8");
  Result<int> good = 7;
  EXPECT_EQ(good.value(), 7);
}

}  // namespace
}  // namespace conccl
