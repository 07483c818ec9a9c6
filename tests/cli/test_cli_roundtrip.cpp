// tests/cli/test_cli_roundtrip.cpp - `sdma-probe dis | sdma-probe asm` gives
// back the same dwords for any dwords dis accepts, not only for what asm
// produced: packets of every kind with random bodies (misaligned addresses,
// sizes over ConCCL's per-packet caps, odd fill counts, reserved bits), on
// every SDMA generation, and random pushbuffers for hopper-ce.
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "packets/sdma_codec.hpp"
#include "probe_runner.hpp"

namespace {

using probe_test::Outcome;
using probe_test::probe;
namespace sdma = conccl::sdma;

std::string hex_words(const std::vector<uint32_t>& w) {
  std::string out;
  char buf[12];
  for (size_t i = 0; i < w.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%08x%c", w[i], (i % 8 == 7 || i + 1 == w.size()) ? '\n' : ' ');
    out += buf;
  }
  return out;
}

std::vector<uint32_t> parse_words(const std::string& text) {
  std::vector<uint32_t> out;
  std::istringstream in(text);
  std::string w;
  while (in >> w) out.push_back(static_cast<uint32_t>(std::stoul(w, nullptr, 16)));
  return out;
}

// A body dword: zero, small, 4- or 8-byte aligned, or random.
uint32_t body(std::mt19937_64& rng) {
  switch (rng() % 6) {
    case 0: return 0;
    case 1: return static_cast<uint32_t>(rng() % 16);
    case 2: return static_cast<uint32_t>(rng()) & ~0x3u;
    case 3: return (static_cast<uint32_t>(rng()) & ~0x7u) | 4u;  // 4- but not 8-byte aligned
    default: return static_cast<uint32_t>(rng());
  }
}

// `count` packets of random kinds, each a valid header (identifying bits
// set, other header bits random inside defined fields) and a random body of
// the length the header asks for.
std::vector<uint32_t> random_stream(sdma::Gen g, std::mt19937_64& rng, int count) {
  std::vector<const sdma::Layout*> kinds;
  for (const sdma::PacketDef& d : sdma::packet_defs())
    if (const sdma::Layout* l = sdma::layout(d.pkt, g)) kinds.push_back(l);
  std::vector<uint32_t> out;
  for (int made = 0; made < count;) {
    const sdma::Layout& l = *kinds[rng() % kinds.size()];
    uint32_t h = uint32_t(l.def->op) | (uint32_t(l.def->sub_op) << 8);
    h |= static_cast<uint32_t>(rng()) & l.defined_mask[0] & 0xFFFF0000u;
    if (rng() % 4 == 0) h |= static_cast<uint32_t>(rng()) & ~l.defined_mask[0];  // reserved header bits
    for (int i = 0; i < l.fixed_count; ++i) {
      const sdma::FieldRow& row = *l.fixed_rows[i];
      h = (h & ~row.lo_part.mask()) | (row.fixed << row.lo_part.lo);
    }
    if (l.def->tail == sdma::Tail::nop_body) h = (h & ~0x3FFF0000u) | (static_cast<uint32_t>(rng() % 4) << 16);
    std::vector<uint32_t> p = {h};
    while (p.size() < l.def->dwords) p.push_back(body(rng));
    if (l.def->tail == sdma::Tail::data && p.size() > 3) p[3] = (p[3] & ~0xFFFFFu) | static_cast<uint32_t>(rng() % 3);
    // Grow to the length the packet claims (write payloads, optional dwords).
    conccl::Result<size_t> n = sdma::packet_length(g, p);
    for (int guard = 0; !n.ok() && guard < 64; ++guard) {
      p.push_back(body(rng));
      n = sdma::packet_length(g, p);
    }
    if (!n.ok() || *n != p.size() || !sdma::decode(g, p).ok()) continue;
    out.insert(out.end(), p.begin(), p.end());
    ++made;
  }
  return out;
}

TEST(RoundTrip, DisThenAsmGivesTheSameDwordsOnEveryGeneration) {
  std::mt19937_64 rng(15);
  for (const char* gen : {"4", "4.4.2", "5", "5.2", "6", "7"}) {
    const sdma::Gen g = *sdma::parse_gen(gen);
    const std::vector<uint32_t> words = random_stream(g, rng, 3000);
    Outcome dis = probe({"dis", "--gen", gen}, hex_words(words), 60);
    ASSERT_EQ(dis.rc, 0) << gen << ": " << dis.err.substr(0, 2000);
    Outcome back = probe({"asm", "--gen", gen}, dis.out, 60);
    // Report the first packet that does not come back, with its text.
    if (back.rc != 0 || parse_words(back.out) != words) {
      std::istringstream lines(dis.out);
      std::string line;
      size_t off = 0;
      for (int shown = 0; std::getline(lines, line) && shown < 5;) {
        Outcome one = probe({"asm", "--gen", gen}, line + "\n");
        const std::vector<uint32_t> got = parse_words(one.out);
        const std::vector<uint32_t> want(words.begin() + static_cast<std::ptrdiff_t>(off),
                                         words.begin() + static_cast<std::ptrdiff_t>(std::min(words.size(), off + got.size())));
        if (one.rc != 0 || got != want) {
          ADD_FAILURE() << "SDMA " << gen << " at dword " << off << ": '" << line << "' -> rc " << one.rc << " "
                        << one.err << one.out;
          ++shown;
          if (one.rc != 0) break;  // offsets are lost after a refused line
        }
        off += got.size();
      }
      FAIL() << "SDMA " << gen << ": dis | asm differs";
    }
  }
}

TEST(RoundTrip, PacketsAsmRefusesComeBackExactly) {
  struct Case {
    const char* gen;
    const char* words;
    const char* text;  // what dis prints (a prefix)
  };
  for (const Case& c : std::vector<Case>{
           // ATOMIC op=47 at a 4- but not 8-byte aligned address: atomic, not atomic_add64.
           {"4.4.2", "5e00000a 00600004 00007f00 ffffffff ffffffff 00000000 00000000 00000000",
            "atomic addr=0x7f0000600004 value=0xffffffffffffffff op=47"},
           // A misaligned fence address and a dword fill counted as bytes-4: raw, with the reason.
           {"4", "00000005 00400001 00007f00 00000001",
            "raw data=0x00000005,0x00400001,0x00007f00,0x00000001  # fence addr=0x7f0000400001"},
           {"4", "8000000b 00200000 00007f00 deadbeef 00000ffc", "raw data=0x8000000b,"},
       }) {
    Outcome dis = probe({"dis", "--gen", c.gen}, c.words);
    EXPECT_EQ(dis.rc, 0) << dis.err;
    EXPECT_EQ(dis.out.rfind(c.text, 0), 0u) << dis.out;
    Outcome back = probe({"asm", "--gen", c.gen}, dis.out);
    EXPECT_EQ(back.rc, 0) << back.err;
    EXPECT_EQ(back.out, std::string(c.words) + "\n");
  }
  // raw is checked like any other line.
  Outcome bad = probe({"asm", "--gen", "4"}, "raw data=0x100000000\nraw\nraw data=1, 2\n");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("<stdin>:1: raw: data item '0x100000000' is not a 32-bit number"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("<stdin>:2: raw: expected data="), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("<stdin>:3: raw: expected data="), std::string::npos) << bad.err;
}

// Hopper CE pushbuffers: method headers (inc, noninc, oneinc with 1..4 data
// dwords; immd with 13-bit data) on random subchannels and methods.
TEST(RoundTrip, HopperCePushbuffers) {
  std::mt19937_64 rng(150);
  const uint32_t methods[] = {0x0, 0x8, 0x10, 0x40, 0x100, 0x104, 0x200, 0x300, 0x400, 0x401, 0x402, 0x403};
  std::vector<uint32_t> words;
  while (words.size() < 6000) {
    const uint32_t op = std::vector<uint32_t>{1, 3, 4, 5}[rng() % 4];
    const uint32_t count = op == 4 ? static_cast<uint32_t>(rng() % 0x2000) : 1 + static_cast<uint32_t>(rng() % 4);
    const uint32_t subch = rng() % 2 ? static_cast<uint32_t>(rng() % 8) : (rng() % 2 ? 0u : 4u);
    const uint32_t method = rng() % 3 ? methods[rng() % std::size(methods)] : static_cast<uint32_t>(rng() % 0x1000);
    words.push_back((op << 29) | (count << 16) | (subch << 13) | method);
    if (op != 4)
      for (uint32_t k = 0; k < count; ++k) words.push_back(rng() % 2 ? static_cast<uint32_t>(rng()) : static_cast<uint32_t>(rng() % 4));
  }
  Outcome dis = probe({"dis", "--gen", "hopper-ce"}, hex_words(words), 60);
  ASSERT_EQ(dis.rc, 0) << dis.err.substr(0, 2000);
  Outcome back = probe({"asm", "--gen", "hopper-ce"}, dis.out, 60);
  EXPECT_EQ(back.rc, 0) << back.err.substr(0, 2000);
  EXPECT_TRUE(parse_words(back.out) == words) << "hopper-ce: dis | asm differs";
}

}  // namespace
