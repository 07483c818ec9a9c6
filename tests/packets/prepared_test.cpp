// tests/packets/prepared_test.cpp - PreparedPacket (the hot packets' encoder
// resolved once) writes exactly what the generic encoder writes, and refuses
// exactly what it refuses, on every generation.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "packets/generation.hpp"
#include "packets/sdma_codec.hpp"

namespace conccl::sdma {
namespace {

TEST(PreparedPacket, MatchesTheGenericEncoder) {
  std::mt19937_64 rng(0x9E37);
  for (Gen g : kAllGens) {
    SCOPED_TRACE(std::string(gen_name(g)));
    const Key ck[] = {Key::src, Key::dst, Key::bytes};
    const Key ak[] = {Key::addr, Key::value};
    Result<PreparedPacket> copy = PreparedPacket::make(g, Pkt::copy, ck);
    Result<PreparedPacket> add = PreparedPacket::make(g, Pkt::atomic_add64, ak);
    ASSERT_TRUE(copy.ok()) << copy.status().to_string();
    ASSERT_TRUE(add.ok()) << add.status().to_string();
    const uint64_t max = limits(g).max_copy_bytes;
    int refused = 0;
    for (int i = 0; i < 4000; ++i) {
      // Mostly legal values, some past a limit or misaligned.
      uint64_t src = rng() & ((1ull << 57) - 1), dst = rng() & ((1ull << 57) - 1);
      uint64_t bytes = 1 + rng() % (i % 5 == 0 ? max * 2 : max);
      if (i % 7 == 0) src = rng();  // may exceed the address field
      std::vector<uint32_t> fast(copy->dwords() + 2, 0xDEADBEEF), slow(copy->dwords() + 2, 0);
      const uint64_t v[] = {src, dst, bytes};
      const bool ok = copy->put(fast.data(), v);
      const FieldValue f[] = {{Key::src, src}, {Key::dst, dst}, {Key::bytes, bytes}};
      Result<size_t> n = encode(g, Pkt::copy, f, slow);
      ASSERT_EQ(ok, n.ok()) << "src " << hex(src) << " bytes " << bytes << ": " << n.status().to_string();
      if (!ok) {
        ++refused;
        continue;
      }
      ASSERT_EQ(*n, copy->dwords());
      for (size_t k = 0; k < *n; ++k) ASSERT_EQ(fast[k], slow[k]) << "dword " << k;
      EXPECT_EQ(fast[*n], 0xDEADBEEFu) << "writes nothing past the packet";

      const uint64_t addr = (rng() & ((1ull << 48) - 1)) & ~uint64_t(i % 11 == 0 ? 0 : 7);
      const uint64_t val = rng();
      std::vector<uint32_t> fa(add->dwords()), sa(add->dwords());
      const uint64_t av[] = {addr, val};
      const FieldValue af[] = {{Key::addr, addr}, {Key::value, val}};
      Result<size_t> an = encode(g, Pkt::atomic_add64, af, sa);
      ASSERT_EQ(add->put(fa.data(), av), an.ok()) << hex(addr);
      if (an.ok()) {
        EXPECT_EQ(fa, sa);
      }
    }
    EXPECT_GT(refused, 100) << "the refusals were exercised";
  }
}

TEST(PreparedPacket, RefusesWhatItCannotPrepare) {
  const Key ck[] = {Key::src, Key::dst};  // bytes is required
  EXPECT_EQ(PreparedPacket::make(Gen::v4_4_2, Pkt::copy, ck).status().code(), Code::invalid_argument);
  const Key wk[] = {Key::dst};
  EXPECT_EQ(PreparedPacket::make(Gen::v4_4_2, Pkt::write, wk).status().code(), Code::invalid_argument) << "variable length";
  const Key sk[] = {Key::a, Key::b, Key::bytes};
  EXPECT_EQ(PreparedPacket::make(Gen::v5, Pkt::swap, sk).status().code(), Code::invalid_argument) << "no swap on 5";
  const Key bad[] = {Key::ctx};
  EXPECT_EQ(PreparedPacket::make(Gen::v4, Pkt::copy, bad).status().code(), Code::invalid_argument);
  PreparedPacket empty;
  uint32_t out[8];
  const uint64_t v[] = {1};
  EXPECT_FALSE(empty.put(out, v));
}

}  // namespace
}  // namespace conccl::sdma
