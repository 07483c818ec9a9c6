// tests/packets/roundtrip_test.cpp - random legal packets survive every path.
//
// For every packet kind on every generation, random legal field values are
// drawn from the layout rows themselves (width, shift, alignment, minus-one
// encoding, the generation's limits), then:
//   fields -> encode -> decode -> same fields -> encode -> same dwords
//   decode -> format_packet -> parse_line/assemble -> same dwords
// Seeded, so a failure is reproducible; the seed and the text are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "packets/packet_test_util.hpp"

namespace conccl::sdma {
namespace {

using test::hex_dwords;

constexpr int kItersPerPacket = 150;

uint64_t low_mask(unsigned width) { return width >= 64 ? ~0ull : (1ull << width) - 1; }

class Random {
 public:
  explicit Random(uint64_t seed) : rng_(seed) {}
  uint64_t bits() { return rng_(); }
  uint64_t below(uint64_t n) { return n ? rng_() % n : 0; }
  bool chance(int one_in) { return below(static_cast<uint64_t>(one_in)) == 0; }

  // A raw field value of `width` bits, biased towards the edges.
  uint64_t raw(unsigned width) {
    const uint64_t m = low_mask(width);
    switch (below(6)) {
      case 0: return 0;
      case 1: return m;
      case 2: return below(4) & m;
      default: return bits() & m;
    }
  }

 private:
  std::mt19937_64 rng_;
};

// A random legal user value for `row` of packet `p` on `g`.
uint64_t random_value(Random& r, Pkt p, Gen g, const FieldRow& row) {
  const unsigned width = row.total_width();
  uint64_t v = 0;
  if (row.enc == Enc::signed64 || width >= 64) {
    v = r.chance(4) ? static_cast<uint64_t>(-static_cast<int64_t>(r.below(1000))) : r.bits();
  } else {
    const uint64_t raw = r.raw(width);
    v = row.enc == Enc::minus_one ? raw + 1 : raw << row.shift;
  }
  if (row.key == Key::bytes) {
    const uint64_t lim = test::bytes_limit(p, g);
    if (v > lim) v = r.chance(2) ? lim : 1 + r.below(lim);
  }
  if (row.align > 1) {
    v -= v % row.align;
    if (v == 0 && row.enc == Enc::minus_one) v = row.align;
  }
  if (p == Pkt::atomic && row.key == Key::op && v == 47) v = 46;  // 47 is atomic_add64's identity
  return v;
}

struct Built {
  Packet packet;
  std::string what;
};

Built random_packet(Random& r, Pkt p, Gen g) {
  const Layout& l = *layout(p, g);
  const PacketDef& def = *l.def;
  Built b;
  b.packet.pkt = p;

  bool ext = false;
  if (def.tail == Tail::ext_flag && l.by_key[static_cast<int>(def.ext_key)]) ext = r.chance(2);
  for (int i = 0; i < l.row_count; ++i) {
    const FieldRow& row = *l.rows[i];
    if (def.tail == Tail::data && row.key == Key::count) continue;  // derived from data
    if (def.tail == Tail::nop_body && row.key == Key::count) continue;  // below
    if (def.tail == Tail::ext_flag && row.key == def.ext_key) {
      if (ext) b.packet.fields.push_back({row.key, 1});
      continue;
    }
    const int last = row.hi_part.width ? row.hi_part.dw : row.lo_part.dw;
    if (last >= def.dwords && !ext) continue;  // optional dword absent
    if (!(row.flags & kRequired) && r.chance(2)) continue;
    b.packet.fields.push_back({row.key, random_value(r, p, g, row)});
  }
  if (def.tail == Tail::data) {
    const size_t n = r.chance(20) ? 1 + r.below(2000) : 1 + r.below(8);
    for (size_t i = 0; i < n; ++i) b.packet.data.push_back(static_cast<uint32_t>(r.bits()));
  } else if (def.tail == Tail::nop_body) {
    switch (r.below(4)) {
      case 0: break;  // plain 1-dword NOP
      case 1: b.packet.fields.push_back({Key::count, r.chance(10) ? limits(g).max_nop_count : r.below(64)}); break;
      case 2:
      case 3: {
        const size_t n = 1 + r.below(16);
        for (size_t i = 0; i < n; ++i) b.packet.data.push_back(static_cast<uint32_t>(r.bits()));
        if (r.chance(2)) b.packet.fields.push_back({Key::count, n});
        break;
      }
    }
  }
  std::shuffle(b.packet.fields.begin(), b.packet.fields.end(), std::mt19937_64(r.bits()));

  // Reserved bits outside every defined field, sometimes.
  if (r.chance(4)) {
    const size_t len = def.tail == Tail::ext_flag ? def.dwords + (ext ? def.ext_dwords : 0)
                                                  : def.dwords;
    const uint8_t dw = static_cast<uint8_t>(r.below(len));
    const uint32_t bits = static_cast<uint32_t>(r.bits()) & ~l.defined_mask[dw];
    if (bits) b.packet.reserved.push_back({dw, bits});
  }
  return b;
}

std::string describe(Gen g, const Packet& p) {
  return "SDMA " + std::string(gen_name(g)) + ": " + format_packet(p);
}

void round_trip(Random& r, Pkt p, Gen g) {
  Built b = random_packet(r, p, g);
  const std::string what = describe(g, b.packet);

  Result<std::vector<uint32_t>> enc = encode(g, b.packet);
  ASSERT_TRUE(enc.ok()) << what << ": " << enc.status().to_string();
  const std::vector<uint32_t>& dw = *enc;
  ASSERT_EQ(packet_dwords(g, p, b.packet.fields, b.packet.data.size()), dw.size()) << what;

  // The span encoder: exact-size buffer; one dword short is refused, untouched.
  {
    std::vector<uint32_t> out(dw.size());
    Result<size_t> n = encode(g, p, b.packet.fields, out, b.packet.data, b.packet.reserved);
    ASSERT_TRUE(n.ok()) << what;
    ASSERT_EQ(*n, dw.size()) << what;
    EXPECT_EQ(out, dw) << what;
    std::vector<uint32_t> shorter(dw.size() - 1, 0x5A5A5A5Au);
    Result<size_t> s = encode(g, p, b.packet.fields, shorter, b.packet.data, b.packet.reserved);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_EQ(shorter, std::vector<uint32_t>(dw.size() - 1, 0x5A5A5A5Au)) << what;
  }

  // decode: same kind, length, fields and reserved bits, even with more input after it.
  std::vector<uint32_t> padded = dw;
  for (int i = 0; i < 3; ++i) padded.push_back(static_cast<uint32_t>(r.bits()));
  Result<Packet> dec = decode(g, padded);
  ASSERT_TRUE(dec.ok()) << what << ": " << dec.status().to_string() << "\n" << hex_dwords(dw);
  ASSERT_EQ(dec->pkt, p) << what << " decoded as " << packet_def(dec->pkt).name;
  ASSERT_EQ(dec->dwords, dw.size()) << what;
  Result<size_t> len = packet_length(g, padded);
  ASSERT_TRUE(len.ok()) << what;
  EXPECT_EQ(*len, dw.size()) << what;
  test::expect_same_fields(g, b.packet, *dec, what);
  std::vector<Reserved> want_rsvd = b.packet.reserved;
  ASSERT_EQ(dec->reserved.size(), want_rsvd.size()) << what;
  for (size_t i = 0; i < want_rsvd.size(); ++i) {
    EXPECT_EQ(dec->reserved[i].dw, want_rsvd[i].dw) << what;
    EXPECT_EQ(dec->reserved[i].bits, want_rsvd[i].bits) << what;
  }

  // decode -> encode
  Result<std::vector<uint32_t>> again = encode(g, *dec);
  ASSERT_TRUE(again.ok()) << what << ": " << again.status().to_string();
  EXPECT_EQ(hex_dwords(*again), hex_dwords(dw)) << what;

  // decode -> text -> parse_line / assemble
  const std::string text = format_packet(*dec);
  Result<std::optional<Packet>> parsed = parse_line(g, text);
  ASSERT_TRUE(parsed.ok() && parsed->has_value()) << text << ": " << parsed.status().to_string();
  Result<std::vector<uint32_t>> from_parsed = encode(g, **parsed);
  ASSERT_TRUE(from_parsed.ok()) << text << ": " << from_parsed.status().to_string();
  EXPECT_EQ(hex_dwords(*from_parsed), hex_dwords(dw)) << text;
  Result<std::vector<uint32_t>> assembled = assemble(g, text);
  ASSERT_TRUE(assembled.ok()) << text << ": " << assembled.status().to_string();
  EXPECT_EQ(hex_dwords(*assembled), hex_dwords(dw)) << text;
  EXPECT_EQ(format_packet(**parsed), text) << "format is not canonical";
}

class RoundTrip : public ::testing::TestWithParam<Gen> {};

TEST_P(RoundTrip, RandomLegalPackets) {
  const Gen g = GetParam();
  for (int pi = 0; pi < kPktCount; ++pi) {
    const Pkt p = static_cast<Pkt>(pi);
    if (!packet_exists(p, g)) continue;
    const uint64_t seed = 0xC0CC1ull * 1000003u + static_cast<uint64_t>(g) * 131u + pi;
    Random r(seed);
    for (int i = 0; i < kItersPerPacket; ++i) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " iteration " + std::to_string(i) + " " +
                   std::string(packet_def(p).name));
      round_trip(r, p, g);
      if (HasFatalFailure()) return;
    }
  }
}

// Many packets in one stream: decode_stream splits them at the right offsets.
TEST_P(RoundTrip, RandomStreams) {
  const Gen g = GetParam();
  Random r(0x5EED0000u + static_cast<uint64_t>(g));
  std::vector<Pkt> kinds;
  for (int pi = 0; pi < kPktCount; ++pi)
    if (packet_exists(static_cast<Pkt>(pi), g)) kinds.push_back(static_cast<Pkt>(pi));
  for (int iter = 0; iter < 100; ++iter) {
    std::vector<uint32_t> stream;
    std::vector<size_t> offsets;
    std::vector<Pkt> want;
    std::string program;
    const int n = 1 + static_cast<int>(r.below(12));
    for (int i = 0; i < n; ++i) {
      const Pkt p = kinds[r.below(kinds.size())];
      Built b = random_packet(r, p, g);
      Result<std::vector<uint32_t>> dw = encode(g, b.packet);
      ASSERT_TRUE(dw.ok()) << describe(g, b.packet);
      offsets.push_back(stream.size());
      want.push_back(p);
      stream.insert(stream.end(), dw->begin(), dw->end());
      program += format_packet(b.packet) + "\n";
    }
    StreamDecode s = decode_stream(g, stream);
    ASSERT_TRUE(s.error.ok()) << s.error.to_string() << "\n" << program;
    ASSERT_EQ(s.offsets, offsets) << program;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(s.packets[i].pkt, want[i]);
    // The whole program assembles to the same stream.
    Result<std::vector<uint32_t>> assembled = assemble(g, program);
    ASSERT_TRUE(assembled.ok()) << assembled.status().to_string() << "\n" << program;
    EXPECT_EQ(*assembled, stream) << program;
  }
}

// asm takes conccl::PollFunc's names for a poll's func, and they mean what
// the numbers mean; anything else names the choices.
TEST_P(RoundTrip, PollFuncByName) {
  const char* names[] = {"always", "lt", "le", "eq", "ne", "ge", "gt"};
  for (int f = 0; f < 7; ++f) {
    const std::string base = "poll addr=0x1000 ref=7 mask=0xffffffff func=";
    Result<std::vector<uint32_t>> by_name = assemble(GetParam(), base + names[f]);
    Result<std::vector<uint32_t>> by_number = assemble(GetParam(), base + std::to_string(f));
    ASSERT_TRUE(by_name.ok()) << names[f] << ": " << by_name.status().message();
    ASSERT_TRUE(by_number.ok()) << by_number.status().message();
    EXPECT_EQ(*by_name, *by_number) << names[f];
  }
  Result<std::vector<uint32_t>> bad = assemble(GetParam(), "poll addr=0x1000 ref=7 mask=0xffffffff func=ge2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("always, lt, le, eq, ne, ge, gt"), std::string::npos) << bad.status().message();
}

INSTANTIATE_TEST_SUITE_P(AllGenerations, RoundTrip, ::testing::ValuesIn(kAllGens), test::gen_param_name);

}  // namespace
}  // namespace conccl::sdma
