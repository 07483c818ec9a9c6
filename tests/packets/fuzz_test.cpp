// tests/packets/fuzz_test.cpp - the decoder on arbitrary dwords.
//
// decode_stream / decode / packet_length are fed random buffers (0..64
// dwords) whose headers are random, or plausible (a real op/sub_op with random
// other bits), or clean (a real packet kind's identifying bits, other header
// bits only inside defined fields). Each buffer is an exact-size heap
// allocation, so the ASan build catches any read past it. Properties:
//  - nothing crashes; packet_length and decode agree;
//  - a decoded packet never claims more dwords than were left;
//  - decode_stream's offsets tile the input up to the error offset, and the
//    error (with its offset) is what decode says at that offset;
//  - a packet that decodes re-encodes to the same dwords, both from its fields
//    and through format_packet -> assemble, reserved bits included; unless a
//    decoded value breaks an encoder rule that no dword bit can carry (an
//    address misaligned for its packet, bytes over the generation's cap, a
//    dword-fill count that is not 4k-1): then encode must refuse it, naming
//    the key. decode stays faithful to the dwords; the assembler stays strict.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "packets/packet_test_util.hpp"

namespace conccl::sdma {
namespace {

using test::hex_dwords;

constexpr int kBuffersPerGen = 6000;

enum class HeaderMode { random, plausible, clean };

struct Fuzzer {
  explicit Fuzzer(Gen gen, uint64_t seed) : g(gen), rng(seed) {
    for (const PacketDef& d : packet_defs())
      if (packet_exists(d.pkt, g)) kinds.push_back(d.pkt);
  }

  uint32_t u32() { return static_cast<uint32_t>(rng()); }
  uint64_t below(uint64_t n) { return rng() % n; }

  // A header dword in one of three modes; *kind is the packet it was built
  // for (null for random headers).
  uint32_t header(HeaderMode mode, const Layout** kind) {
    const uint32_t r = u32();
    *kind = nullptr;
    if (mode == HeaderMode::random) return r;
    const Layout& l = *layout(kinds[below(kinds.size())], g);
    *kind = &l;
    uint32_t h = uint32_t(l.def->op) | (uint32_t(l.def->sub_op) << 8);
    if (mode == HeaderMode::plausible) return h | (r & 0xFFFF0000u);
    h |= r & l.defined_mask[0] & 0xFFFF0000u;
    for (int i = 0; i < l.fixed_count; ++i) {
      const FieldRow& row = *l.fixed_rows[i];
      h = (h & ~row.lo_part.mask()) | (row.fixed << row.lo_part.lo);
    }
    // Keep NOP lengths mostly inside the buffer.
    if (l.def->tail == Tail::nop_body) h = (h & ~0x3FFF0000u) | (static_cast<uint32_t>(below(8)) << 16);
    return h;
  }

  // A body dword: zero, small (lengths, counts), aligned (addresses), or random.
  uint32_t body() {
    switch (below(5)) {
      case 0: return 0;
      case 1: return static_cast<uint32_t>(below(16));
      case 2: return u32() & ~0x7Fu;
      default: return u32();
    }
  }

  // An exact-size heap buffer of 0..64 dwords with packet-like content.
  std::unique_ptr<uint32_t[]> buffer(size_t* n_out) {
    const size_t n = below(65);
    std::unique_ptr<uint32_t[]> buf(new uint32_t[n]);
    const HeaderMode mode = static_cast<HeaderMode>(below(3));
    size_t i = 0;
    while (i < n) {
      const Layout* kind = nullptr;
      buf[i++] = header(mode, &kind);
      size_t body_len = below(14);
      // Clean headers mostly get a body of the right length, so that streams
      // of several packets decode.
      if (mode == HeaderMode::clean && below(4) != 0) body_len = kind->def->dwords - 1u;
      for (size_t k = 0; k < body_len && i < n; ++k) {
        uint32_t v = body();
        // A clean WRITE gets a small count and that many data dwords.
        if (mode == HeaderMode::clean && kind->def->tail == Tail::data && k == 2) {
          v = (v & kind->defined_mask[3] & ~0xFFFFFu) | static_cast<uint32_t>(below(3));
          body_len += v & 0xFFFFFu;
          body_len += 1;
        }
        buf[i++] = v;
      }
    }
    *n_out = n;
    return buf;
  }

  Gen g;
  std::mt19937_64 rng;
  std::vector<Pkt> kinds;
};

struct Stats {
  size_t buffers = 0, packets = 0, reencoded = 0, refused = 0, errors = 0;
  std::map<std::string, size_t> refused_by;  // "fence addr" -> count
};

// The key whose decoded value the encoder must refuse (alignment or the
// generation's bytes cap), or Key::none when the packet must re-encode.
Key refused_key(Gen g, const Packet& p) {
  const Layout& l = *layout(p.pkt, g);
  for (const FieldValue& f : p.fields) {
    const FieldRow& row = *l.by_key[static_cast<int>(f.key)];
    if (row.align > 1 && f.value % row.align != 0) return f.key;
    if (f.key == Key::bytes && f.value > test::bytes_limit(p.pkt, g)) return f.key;
  }
  return Key::none;
}

void check_buffer(Gen g, std::span<const uint32_t> in, Stats* st) {
  ++st->buffers;
  StreamDecode s = decode_stream(g, in);
  ASSERT_EQ(s.packets.size(), s.offsets.size());
  size_t off = 0;
  for (size_t i = 0; i < s.packets.size(); ++i) {
    const Packet& p = s.packets[i];
    ASSERT_EQ(s.offsets[i], off);
    ASSERT_GE(p.dwords, 1u);
    ASSERT_LE(p.dwords, in.size() - off) << "packet claims more dwords than remain";
    const std::span<const uint32_t> rest = in.subspan(off);
    const std::span<const uint32_t> mine = rest.first(p.dwords);

    Result<size_t> len = packet_length(g, rest);
    ASSERT_TRUE(len.ok());
    ASSERT_EQ(*len, p.dwords);
    // A packet decodes from exactly its own dwords, too.
    Result<Packet> alone = decode(g, mine);
    ASSERT_TRUE(alone.ok()) << alone.status().to_string();
    ASSERT_EQ(alone->dwords, p.dwords);

    const std::vector<uint32_t> want(mine.begin(), mine.end());
    const std::string text = format_packet(p);
    off += p.dwords;
    ++st->packets;
    if (const Key bad = refused_key(g, p); bad != Key::none) {
      Result<std::vector<uint32_t>> enc = encode(g, p);
      ASSERT_FALSE(enc.ok()) << text;
      Result<std::vector<uint32_t>> assembled = assemble(g, text);
      ASSERT_FALSE(assembled.ok()) << text;
      const std::string m = assembled.status().message();
      EXPECT_NE(m.find(std::string(key_name(bad)) + "="), std::string::npos) << m;
      EXPECT_TRUE(m.find("aligned") != std::string::npos || m.find("limit") != std::string::npos)
          << m;
      ++st->refused;
      ++st->refused_by[std::string(packet_def(p.pkt).name) + " " + std::string(key_name(bad))];
      continue;
    }
    // Re-encode from fields.
    Result<std::vector<uint32_t>> enc = encode(g, p);
    ASSERT_TRUE(enc.ok()) << "SDMA " << gen_name(g) << ": " << hex_dwords(want) << " -> '" << text
                          << "': " << enc.status().to_string();
    ASSERT_EQ(hex_dwords(*enc), hex_dwords(want)) << text;
    // ... and through the text form.
    Result<std::vector<uint32_t>> assembled = assemble(g, text);
    ASSERT_TRUE(assembled.ok()) << "SDMA " << gen_name(g) << ": " << hex_dwords(want) << " -> '"
                                << text << "': " << assembled.status().to_string();
    ASSERT_EQ(hex_dwords(*assembled), hex_dwords(want)) << text;
    ++st->reencoded;
  }
  if (s.error.ok()) {
    ASSERT_EQ(off, in.size()) << "stream ended early without an error";
    return;
  }
  ++st->errors;
  ASSERT_EQ(s.error_offset, off) << "error offset is not where decoding stopped";
  ASSERT_LT(s.error_offset, in.size());
  ASSERT_FALSE(s.error.message().empty());
  // The error is decode's error at that offset; packet_length agrees.
  Result<Packet> at = decode(g, in.subspan(s.error_offset));
  ASSERT_FALSE(at.ok());
  EXPECT_EQ(at.status().message(), s.error.message());
  EXPECT_FALSE(packet_length(g, in.subspan(s.error_offset)).ok());
  const std::string& m = s.error.message();
  EXPECT_TRUE(m.find("truncated") != std::string::npos || m.find("opcode") != std::string::npos)
      << m;
}

class Fuzz : public ::testing::TestWithParam<Gen> {};

TEST_P(Fuzz, DecodeStreamOnRandomBuffers) {
  const Gen g = GetParam();
  Fuzzer f(g, 0xF022ull + static_cast<uint64_t>(g));
  Stats st;
  for (int i = 0; i < kBuffersPerGen; ++i) {
    size_t n = 0;
    std::unique_ptr<uint32_t[]> buf = f.buffer(&n);
    check_buffer(g, std::span<const uint32_t>(buf.get(), n), &st);
    if (HasFatalFailure()) {
      ADD_FAILURE() << "buffer " << i << ": "
                    << hex_dwords(std::vector<uint32_t>(buf.get(), buf.get() + n));
      return;
    }
  }
  // The generator must reach both outcomes often, or the test proves little.
  EXPECT_GT(st.reencoded, 1000u);
  EXPECT_GT(st.refused, 100u);
  EXPECT_GT(st.errors, 1000u);
  std::printf("SDMA %s: %zu buffers, %zu packets (%zu re-encoded, %zu refused), %zu errors\n",
              std::string(gen_name(g)).c_str(), st.buffers, st.packets, st.reencoded, st.refused,
              st.errors);
  std::string why;
  for (const auto& [k, n] : st.refused_by) why += " " + k + ":" + std::to_string(n);
  std::printf("  refused:%s\n", why.c_str());
  RecordProperty("packets", static_cast<int>(st.packets));
}

// Every prefix of every packet kind's encoding is a clean truncation error.
TEST_P(Fuzz, EveryPrefixIsTruncated) {
  const Gen g = GetParam();
  for (const PacketDef& d : packet_defs()) {
    const Layout* l = layout(d.pkt, g);
    if (!l) continue;
    // Largest form: write with 3 data dwords, nop with 5, copy with dcc on 7.
    std::string text = std::string(d.name);
    for (int i = 0; i < l->row_count; ++i)
      if (l->rows[i]->flags & kRequired) {
        const FieldRow& r = *l->rows[i];
        uint64_t v = r.enc == Enc::minus_one ? r.align : 0;
        if (r.key == Key::bytes) v = 4;
        text += " " + std::string(key_name(r.key)) + "=" + std::to_string(v);
      }
    if (d.tail == Tail::data || d.tail == Tail::nop_body) text += " data=1,2,3,4,5";
    if (d.tail == Tail::ext_flag && l->by_key[static_cast<int>(d.ext_key)])
      text += " " + std::string(key_name(d.ext_key)) + "=1";
    Result<std::vector<uint32_t>> full = assemble(g, text);
    ASSERT_TRUE(full.ok()) << text << ": " << full.status().to_string();
    for (size_t n = 0; n < full->size(); ++n) {
      std::unique_ptr<uint32_t[]> buf(new uint32_t[n]);
      std::copy(full->begin(), full->begin() + static_cast<std::ptrdiff_t>(n), buf.get());
      const std::span<const uint32_t> in(buf.get(), n);
      Result<Packet> p = decode(g, in);
      ASSERT_FALSE(p.ok()) << text << " prefix " << n;
      EXPECT_NE(p.status().message().find("truncated"), std::string::npos)
          << p.status().message();
      EXPECT_FALSE(packet_length(g, in).ok());
      StreamDecode s = decode_stream(g, in);
      EXPECT_TRUE(s.packets.empty());
      EXPECT_EQ(s.error.ok(), n == 0) << "an empty stream is not an error";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllGenerations, Fuzz, ::testing::ValuesIn(kAllGens), test::gen_param_name);

}  // namespace
}  // namespace conccl::sdma
