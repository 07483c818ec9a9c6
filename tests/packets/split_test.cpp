// tests/packets/split_test.cpp - splitting copies of any size into legal
// COPY_LINEAR packets (packets/copy_split.hpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "packets/copy_split.hpp"
#include "packets/packet_test_util.hpp"

namespace conccl::sdma {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::string describe(Gen g, uint64_t src, uint64_t dst, uint64_t bytes) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "SDMA %s src=0x%llx dst=0x%llx bytes=0x%llx",
                std::string(gen_name(g)).c_str(), static_cast<unsigned long long>(src),
                static_cast<unsigned long long>(dst), static_cast<unsigned long long>(bytes));
  return buf;
}

// Checks every rule of split_copy for one request; encodes up to
// `encode_limit` pieces (all of them for small splits).
void check_split(Gen g, uint64_t src, uint64_t dst, uint64_t bytes, size_t encode_limit = 4096) {
  const std::string what = describe(g, src, dst, bytes);
  const uint64_t max = limits(g).max_copy_bytes;
  const std::vector<CopyChunk> pieces = split_copy(g, src, dst, bytes);
  ASSERT_EQ(copy_packet_count(g, src, dst, bytes), pieces.size()) << what;
  if (bytes == 0) {
    EXPECT_TRUE(pieces.empty()) << what;
    return;
  }
  ASSERT_FALSE(pieces.empty()) << what;

  // Cover [0, bytes) exactly, in order, src and dst advancing together.
  uint64_t off = 0;
  for (const CopyChunk& c : pieces) {
    ASSERT_EQ(c.src, src + off) << what;
    ASSERT_EQ(c.dst, dst + off) << what;
    ASSERT_GE(c.bytes, 1u) << what;
    ASSERT_LE(c.bytes, max) << what;
    off += c.bytes;
  }
  ASSERT_EQ(off, bytes) << what;

  // Body + tail: with src and dst dword aligned and a size that is not a dword
  // multiple (and more than one dword), the 1-3 byte tail is its own packet and
  // every other piece is a dword multiple. Otherwise the split is greedy.
  const bool aligned = ((src | dst) & 3) == 0;
  const bool tail = aligned && bytes > 4 && (bytes & 3) != 0;
  const uint64_t body = tail ? bytes & ~uint64_t(3) : bytes;
  const size_t body_pieces = static_cast<size_t>((body + max - 1) / max);
  ASSERT_EQ(pieces.size(), body_pieces + (tail ? 1 : 0)) << what;
  for (size_t i = 0; i + 1 < body_pieces; ++i) ASSERT_EQ(pieces[i].bytes, max) << what << " piece " << i;
  if (tail) {
    EXPECT_EQ(pieces.back().bytes, bytes & 3) << what;
    for (size_t i = 0; i + 1 < pieces.size(); ++i) EXPECT_EQ(pieces[i].bytes % 4, 0u) << what;
  }

  // Each piece encodes as a legal copy; the encoded stream decodes back to the pieces.
  std::vector<uint32_t> stream;
  std::vector<size_t> picked;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (pieces.size() <= encode_limit || i < encode_limit / 2 || i + encode_limit / 2 >= pieces.size())
      picked.push_back(i);
  for (size_t i : picked) {
    const CopyChunk& c = pieces[i];
    const FieldValue f[] = {{Key::src, c.src}, {Key::dst, c.dst}, {Key::bytes, c.bytes}};
    uint32_t dw[8];
    Result<size_t> n = encode(g, Pkt::copy, f, dw);
    ASSERT_TRUE(n.ok()) << what << " piece " << i << ": " << n.status().to_string();
    ASSERT_EQ(*n, 7u);
    stream.insert(stream.end(), dw, dw + 7);
  }
  StreamDecode s = decode_stream(g, stream);
  ASSERT_TRUE(s.error.ok()) << what;
  ASSERT_EQ(s.packets.size(), picked.size());
  for (size_t k = 0; k < picked.size(); ++k) {
    const CopyChunk& c = pieces[picked[k]];
    EXPECT_EQ(s.packets[k].get(Key::src), c.src);
    EXPECT_EQ(s.packets[k].get(Key::dst), c.dst);
    EXPECT_EQ(s.packets[k].get(Key::bytes), c.bytes);
  }
}

struct Addr {
  uint64_t src, dst;
};
constexpr Addr kAddrs[] = {
    {0x00007F0000001000, 0x00007F0000200000},  // both page aligned
    {0x00007F0000001004, 0x00007F0000200008},  // dword aligned
    {0x00007F0000001001, 0x00007F0000200000},  // src unaligned
    {0x00007F0000001000, 0x00007F0000200002},  // dst unaligned
    {0x00007F0000001003, 0x00007F0000200003},  // both unaligned, same phase
    {0, 0},
};

TEST(Split, SizesAroundEveryEdge) {
  for (Gen g : kAllGens) {
    const uint64_t max = limits(g).max_copy_bytes;
    const uint64_t sizes[] = {0,       1,       2,       3,           4,       5,       7,
                              8,       4095,    4096,    4097,        max - 4, max - 1, max,
                              max + 1, max + 3, max + 4, max + 5,     2 * max, 2 * max + 1,
                              9 * kMiB, (1ull << 30) + 4096, (1ull << 30) + 4097,
                              (1ull << 32) + 3};
    for (const Addr& a : kAddrs)
      for (uint64_t s : sizes) check_split(g, a.src, a.dst, s);
  }
}

TEST(Split, ExplicitPieces) {
  using V = std::vector<uint64_t>;
  auto sizes = [](Gen g, uint64_t src, uint64_t dst, uint64_t bytes) {
    V out;
    for (const CopyChunk& c : split_copy(g, src, dst, bytes)) out.push_back(c.bytes);
    return out;
  };
  const uint64_t A = 0x1000, B = 0x2000, U = 0x1001;
  for (Gen g : kAllGens) {
    const uint64_t max = limits(g).max_copy_bytes;
    EXPECT_EQ(sizes(g, A, B, 0), V{});
    EXPECT_EQ(sizes(g, A, B, 1), V{1});
    EXPECT_EQ(sizes(g, A, B, 3), V{3});
    EXPECT_EQ(sizes(g, A, B, 4), V{4});
    EXPECT_EQ(sizes(g, A, B, 5), (V{4, 1}));
    EXPECT_EQ(sizes(g, U, B, 5), V{5});
    EXPECT_EQ(sizes(g, A, U, 5), V{5});
    EXPECT_EQ(sizes(g, A, B, 4099), (V{4096, 3}));
    EXPECT_EQ(sizes(g, A, B, max - 1), (V{max - 4, 3}));
    EXPECT_EQ(sizes(g, U, B, max - 1), V{max - 1});
    EXPECT_EQ(sizes(g, A, B, max), V{max});
    EXPECT_EQ(sizes(g, A, B, max + 1), (V{max, 1}));
    EXPECT_EQ(sizes(g, U, U, max + 1), (V{max, 1}));
    EXPECT_EQ(sizes(g, A, B, max + 5), (V{max, 4, 1}));
    EXPECT_EQ(sizes(g, U, B, max + 5), (V{max, 5}));
  }
  // 9 MiB: 0x3FFF00 x2 + 0x100200 on 22-bit generations; one packet on 30-bit ones.
  for (Gen g : {Gen::v4, Gen::v4_4_2, Gen::v5})
    EXPECT_EQ(sizes(g, A, B, 9 * kMiB), (V{0x3FFF00, 0x3FFF00, 0x100200}));
  for (Gen g : {Gen::v5_2, Gen::v6, Gen::v7}) {
    EXPECT_EQ(sizes(g, A, B, 9 * kMiB), V{9 * kMiB});
    // 2^30 + 4096 (DMA-Latte's example): 0x3FFFFF00 + 0x1100.
    EXPECT_EQ(sizes(g, A, B, (1ull << 30) + 4096), (V{0x3FFFFF00, 0x1100}));
    EXPECT_EQ(sizes(g, A, B, (1ull << 30) + 4097), (V{0x3FFFFF00, 0x1100, 1}));
  }
  // 2^30 + 4096 on 22-bit generations: 256 x 0x3FFF00 + 0x11000.
  const std::vector<CopyChunk> p = split_copy(Gen::v4_4_2, A, B, (1ull << 30) + 4096);
  ASSERT_EQ(p.size(), 257u);
  EXPECT_EQ(p.back().bytes, 0x11000u);
  EXPECT_EQ(p.back().src, A + 256 * 0x3FFF00ull);
}

TEST(Split, HugeCopies) {
  // 1 TiB + 3 on a 30-bit generation: 1025 body packets + a 3-byte tail.
  check_split(Gen::v7, 0x100000000000, 0x200000000000, (1ull << 40) + 3, 64);
  EXPECT_EQ(copy_packet_count(Gen::v7, 0x100000000000, 0x200000000000, (1ull << 40) + 3), 1026u);
  // 64 GiB on a 22-bit generation: ceil(2^36 / 0x3FFF00) = 16386 packets.
  check_split(Gen::v4, 0x100000000000, 0x200000000000, 64ull << 30, 64);
  EXPECT_EQ(copy_packet_count(Gen::v4, 0, 0, 64ull << 30), 16386u);
  // 256 TiB: only counted.
  EXPECT_EQ(copy_packet_count(Gen::v6, 0, 0, 1ull << 48), 262145u);
  EXPECT_EQ(copy_packet_count(Gen::v6, 1, 0, 1ull << 48), 262145u);
}

TEST(Split, ForEachMatchesSplit) {
  for (Gen g : kAllGens) {
    std::vector<CopyChunk> seen;
    const size_t n = for_each_copy_chunk(g, 0x1000, 0x9000, 3 * limits(g).max_copy_bytes + 7,
                                         [&](const CopyChunk& c) { seen.push_back(c); });
    EXPECT_EQ(n, seen.size());
    EXPECT_EQ(seen, split_copy(g, 0x1000, 0x9000, 3 * limits(g).max_copy_bytes + 7));
    EXPECT_EQ(n, 5u);  // 3 x max, 4, 3
  }
}

}  // namespace
}  // namespace conccl::sdma
