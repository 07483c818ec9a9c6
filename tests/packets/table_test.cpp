// tests/packets/table_test.cpp - the layout table, the generation limits and
// the gfx map are consistent with each other and with the reference.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "packets/packet_test_util.hpp"

namespace conccl::sdma {
namespace {

int max_dwords(const PacketDef& d) {
  return d.dwords + (d.tail == Tail::ext_flag ? d.ext_dwords : 0);
}

TEST(Table, RowsNeverOverlap) {
  for (Gen g : kAllGens)
    for (int pi = 0; pi < kPktCount; ++pi) {
      const Layout* l = layout(static_cast<Pkt>(pi), g);
      if (!l) continue;
      const std::string where = std::string(l->def->name) + " SDMA " + std::string(gen_name(g));
      uint32_t used[16] = {0xFFFF};  // op[7:0], sub_op[15:8]
      auto claim = [&](const FieldRow& r) {
        for (const Bits& b : {r.lo_part, r.hi_part}) {
          if (!b.width) continue;
          ASSERT_LE(b.lo + b.width, 32) << where << " " << key_name(r.key);
          ASSERT_LT(b.dw, max_dwords(*l->def)) << where << " " << key_name(r.key);
          EXPECT_EQ(used[b.dw] & b.mask(), 0u)
              << where << ": " << key_name(r.key) << " overlaps bits 0x" << std::hex
              << (used[b.dw] & b.mask()) << " of dword " << int(b.dw);
          used[b.dw] |= b.mask();
        }
      };
      for (int i = 0; i < l->fixed_count; ++i) claim(*l->fixed_rows[i]);
      for (int i = 0; i < l->row_count; ++i) claim(*l->rows[i]);
      for (int dw = 0; dw < 16; ++dw)
        EXPECT_EQ(used[dw], l->defined_mask[dw]) << where << " dword " << dw;
    }
}

TEST(Table, RowsAreWellFormed) {
  for (const FieldRow& r : field_rows()) {
    EXPECT_GT(r.lo_part.width, 0) << key_name(r.key);
    EXPECT_NE(r.pkts, 0u);
    EXPECT_NE(r.gens, 0u);
    EXPECT_EQ(r.gens & ~kAllGenMask, 0u);
    EXPECT_LE(r.total_width(), 64);
    EXPECT_GE(r.align, 1);
    if (r.shift) {
      EXPECT_EQ(r.align, 1u << r.shift) << key_name(r.key);
    }
    if (r.key == Key::none) {
      // identify() reads identifying bits from the header only.
      EXPECT_EQ(r.lo_part.dw, 0);
      EXPECT_EQ(r.hi_part.width, 0);
      EXPECT_LT(uint64_t(r.fixed), 1ull << r.lo_part.width);
    }
    // Every row is used by some packet that exists on some generation it names.
    bool used = false;
    for (Gen g : kAllGens)
      for (int pi = 0; pi < kPktCount; ++pi)
        used |= (r.gens & gen_bit(g)) && (r.pkts & pkt_bit(static_cast<Pkt>(pi))) &&
                packet_exists(static_cast<Pkt>(pi), g);
    EXPECT_TRUE(used) << "dead row for key " << key_name(r.key);
  }
}

TEST(Table, OneRowPerKeyPerPacketAndGeneration) {
  for (Gen g : kAllGens)
    for (int pi = 0; pi < kPktCount; ++pi) {
      const Pkt p = static_cast<Pkt>(pi);
      if (!packet_exists(p, g)) continue;
      int count[kKeyCount] = {};
      for (const FieldRow& r : field_rows())
        if ((r.pkts & pkt_bit(p)) && (r.gens & gen_bit(g)) && r.key != Key::none)
          ++count[static_cast<int>(r.key)];
      for (int k = 1; k < kKeyCount; ++k)
        EXPECT_LE(count[k], 1) << packet_def(p).name << " SDMA " << gen_name(g) << " key "
                               << key_name(static_cast<Key>(k));
      const Layout* l = layout(p, g);
      EXPECT_LE(l->row_count, 48);
      EXPECT_LE(l->fixed_count, 4);
    }
}

TEST(Table, EveryPktHasOnePacketDef) {
  EXPECT_EQ(packet_defs().size(), static_cast<size_t>(kPktCount));
  std::set<std::string_view> names;
  for (int pi = 0; pi < kPktCount; ++pi) {
    const Pkt p = static_cast<Pkt>(pi);
    int n = 0;
    for (const PacketDef& d : packet_defs()) n += d.pkt == p;
    EXPECT_EQ(n, 1) << "Pkt " << pi;
    const PacketDef& d = packet_def(p);
    EXPECT_EQ(d.pkt, p);
    EXPECT_FALSE(d.name.empty());
    EXPECT_FALSE(d.summary.empty());
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    Pkt parsed{};
    ASSERT_TRUE(parse_pkt(d.name, &parsed));
    EXPECT_EQ(parsed, p);
    EXPECT_NE(d.gens, 0u);
    bool somewhere = false;
    for (Gen g : kAllGens) somewhere |= packet_exists(p, g);
    EXPECT_TRUE(somewhere) << d.name;
  }
  Pkt dummy{};
  EXPECT_FALSE(parse_pkt("copy2", &dummy));
  EXPECT_FALSE(parse_pkt("", &dummy));
  EXPECT_EQ(layout(Pkt::kCount, Gen::v4), nullptr);
}

TEST(Table, KeyNamesRoundTrip) {
  std::set<std::string_view> names;
  for (int k = 1; k < kKeyCount; ++k) {
    const Key key = static_cast<Key>(k);
    EXPECT_TRUE(names.insert(key_name(key)).second) << key_name(key);
    Key parsed{};
    ASSERT_TRUE(parse_key(key_name(key), &parsed)) << key_name(key);
    EXPECT_EQ(parsed, key);
  }
  Key dummy{};
  EXPECT_FALSE(parse_key("-", &dummy));
  EXPECT_FALSE(parse_key("rsvd0", &dummy));
  EXPECT_FALSE(parse_key("SRC", &dummy));
}

// Opcode and sub-op of every kind, from the SDMA_OP_*/SDMA_SUBOP_* values of
// Linux drivers/gpu/drm/amd/amdgpu/{vega10,navi10}_sdma_pkt_open.h and
// sdma_v6_0_0_pkt_open.h.
TEST(Table, OpcodesMatchTheReference) {
  struct Op {
    Pkt p;
    uint8_t op, sub;
  };
  const Op ops[] = {
      {Pkt::nop, 0, 0},        {Pkt::copy, 1, 0},          {Pkt::copy_bcst, 1, 0},
      {Pkt::copy_window, 1, 4}, {Pkt::swap, 1, 9},         {Pkt::fill, 11, 0},
      {Pkt::fill8, 11, 0},     {Pkt::write, 2, 0},         {Pkt::fence, 5, 0},
      {Pkt::trap, 6, 0},       {Pkt::poll, 8, 0},          {Pkt::hdp_flush, 8, 0},
      {Pkt::poll_reg, 8, 0},   {Pkt::atomic_add64, 10, 0}, {Pkt::atomic, 10, 0},
      {Pkt::timestamp, 13, 2}, {Pkt::timestamp_local, 13, 1}, {Pkt::timestamp_set, 13, 0},
      {Pkt::cond_exe, 9, 0},   {Pkt::ib, 4, 0},            {Pkt::semaphore, 7, 0},
      {Pkt::mem_incr, 7, 1},   {Pkt::gcr, 17, 0},          {Pkt::gcr_user, 17, 1},
      {Pkt::reg_write, 14, 0},
  };
  static_assert(std::size(ops) == kPktCount);
  for (const Op& o : ops) {
    EXPECT_EQ(packet_def(o.p).op, o.op) << packet_def(o.p).name;
    EXPECT_EQ(packet_def(o.p).sub_op, o.sub) << packet_def(o.p).name;
  }
}

// A minimal legal text for `p` on `g`: required keys only, smallest legal values.
std::string minimal_text(const Layout& l) {
  std::string t(l.def->name);
  for (int i = 0; i < l.row_count; ++i) {
    const FieldRow& r = *l.rows[i];
    if (!(r.flags & kRequired)) continue;
    uint64_t v = r.enc == Enc::minus_one ? r.align : 0;
    t += " " + std::string(key_name(r.key)) + "=" + std::to_string(v);
  }
  if (l.def->tail == Tail::data) t += " data=0";
  return t;
}

TEST(Table, KindsSharingAnOpcodeAreDistinguishable) {
  for (Gen g : kAllGens) {
    for (int pi = 0; pi < kPktCount; ++pi) {
      const Layout* l = layout(static_cast<Pkt>(pi), g);
      if (!l) continue;
      const std::string text = minimal_text(*l);
      Result<std::vector<uint32_t>> dw = assemble(g, text);
      ASSERT_TRUE(dw.ok()) << text << ": " << dw.status().to_string();
      Result<Packet> p = decode(g, *dw);
      ASSERT_TRUE(p.ok()) << text;
      EXPECT_EQ(p->pkt, l->def->pkt) << "SDMA " << gen_name(g) << ": '" << text << "' decodes as "
                                     << packet_def(p->pkt).name;
      EXPECT_TRUE(p->reserved.empty());
      // The same with every optional single-bit flag set.
      std::string flags = text;
      for (int i = 0; i < l->row_count; ++i) {
        const FieldRow& r = *l->rows[i];
        const int last = r.hi_part.width ? r.hi_part.dw : r.lo_part.dw;
        if (!(r.flags & kRequired) && r.total_width() == 1 && last < l->def->dwords)
          flags += " " + std::string(key_name(r.key)) + "=1";
      }
      dw = assemble(g, flags);
      ASSERT_TRUE(dw.ok()) << flags << ": " << dw.status().to_string();
      p = decode(g, *dw);
      ASSERT_TRUE(p.ok()) << flags;
      EXPECT_EQ(p->pkt, l->def->pkt) << "SDMA " << gen_name(g) << ": '" << flags << "'";
    }
    // Kinds that share op and sub-op: all but at most one carry identifying bits.
    for (int a = 0; a < kPktCount; ++a)
      for (int b = a + 1; b < kPktCount; ++b) {
        const Layout* la = layout(static_cast<Pkt>(a), g);
        const Layout* lb = layout(static_cast<Pkt>(b), g);
        if (!la || !lb || la->def->op != lb->def->op || la->def->sub_op != lb->def->sub_op) continue;
        EXPECT_TRUE(la->fixed_count > 0 || lb->fixed_count > 0)
            << la->def->name << " / " << lb->def->name << " on SDMA " << gen_name(g);
      }
  }
  // atomic with op 47 is atomic_add64 by definition (the generic form is for other TC_OPs).
  Result<std::vector<uint32_t>> dw = assemble(Gen::v6, "atomic addr=0x1000 op=47 value=5");
  ASSERT_TRUE(dw.ok());
  Result<Packet> p = decode(Gen::v6, *dw);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->pkt, Pkt::atomic_add64);
  EXPECT_EQ(p->get(Key::value), 5u);
}

TEST(Table, GfxMap) {
  struct Case {
    const char* gfx;
    const char* gen;
  };
  const Case cases[] = {
      {"gfx900", "4"},     {"gfx906", "4"},     {"gfx908", "4"},    {"gfx90a", "4.4"},
      {"gfx940", "4.4.2"}, {"gfx942", "4.4.2"}, {"gfx950", "4.4.2"}, {"gfx1010", "5"},
      {"gfx1012", "5"},    {"gfx1030", "5.2"},  {"gfx1036", "5.2"}, {"gfx1100", "6"},
      {"gfx1103", "6"},    {"gfx1151", "6"},    {"gfx1200", "7"},   {"gfx1201", "7"},
  };
  for (const Case& c : cases) {
    std::optional<GfxTarget> t = gfx_to_target(c.gfx);
    ASSERT_TRUE(t.has_value()) << c.gfx;
    EXPECT_EQ(gen_name(t->gen), c.gen) << c.gfx;
    EXPECT_EQ(t->gfx, c.gfx);
  }
  EXPECT_EQ(gfx_to_target("GFX942")->gfx, "gfx942");
  EXPECT_EQ(gfx_to_target("942")->gfx, "gfx942");
  EXPECT_EQ(gfx_to_target("gfx90A")->gfx, "gfx90a");
  EXPECT_EQ(gfx_to_target("gfx950")->sdma_ip, "4.4.5");
  EXPECT_EQ(gfx_to_target("gfx942")->sdma_ip, "4.4.2");
  for (const char* bad : {"gfx999", "", "gfx", "gfx9420", "sm_90", "gfx1300"})
    EXPECT_FALSE(gfx_to_target(bad).has_value()) << bad;
  // Every listed target maps back to itself.
  std::set<std::string_view> seen;
  for (const GfxTarget& t : gfx_targets()) {
    EXPECT_TRUE(seen.insert(t.gfx).second) << t.gfx;
    std::optional<GfxTarget> back = gfx_to_target(t.gfx);
    ASSERT_TRUE(back.has_value()) << t.gfx;
    EXPECT_EQ(back->gen, t.gen);
    EXPECT_FALSE(t.source.empty());
    EXPECT_FALSE(t.products.empty());
  }
}

TEST(Table, GfxTargetVersion) {
  struct Case {
    uint32_t v;
    const char* gfx;
  };
  const Case cases[] = {{90402, "gfx942"}, {90010, "gfx90a"}, {110000, "gfx1100"},
                        {90000, "gfx900"}, {90500, "gfx950"}, {100300, "gfx1030"},
                        {100100, "gfx1010"}, {110501, "gfx1151"}, {120001, "gfx1201"}};
  for (const Case& c : cases) {
    std::optional<GfxTarget> t = gfx_target_version_to_target(c.v);
    ASSERT_TRUE(t.has_value()) << c.v;
    EXPECT_EQ(t->gfx, c.gfx) << c.v;
  }
  EXPECT_EQ(gen_name(gfx_target_version_to_target(90402)->gen), "4.4.2");
  EXPECT_EQ(gen_name(gfx_target_version_to_target(90010)->gen), "4.4");
  EXPECT_EQ(gen_name(gfx_target_version_to_target(90008)->gen), "4");
  EXPECT_EQ(gen_name(gfx_target_version_to_target(110000)->gen), "6");
  for (uint32_t bad : {0u, 80001u, 91600u, 90016u, 999999u, 4294967295u})
    EXPECT_FALSE(gfx_target_version_to_target(bad).has_value()) << bad;
}

TEST(Table, GenerationNames) {
  EXPECT_EQ(gen_list(), "4, 4.4, 4.4.2, 5, 5.2, 6, 7");
  const char* canonical[] = {"4", "4.4", "4.4.2", "5", "5.2", "6", "7"};
  for (int i = 0; i < kGenCount; ++i) {
    EXPECT_EQ(gen_name(kAllGens[i]), canonical[i]);
    EXPECT_EQ(parse_gen(canonical[i]), kAllGens[i]);
  }
  struct Alias {
    const char* name;
    Gen g;
  };
  for (const Alias& a : {Alias{"4.0", Gen::v4}, Alias{"4.2", Gen::v4}, Alias{"4.4.0", Gen::v4_4},
                         Alias{"4.4.5", Gen::v4_4_2}, Alias{"5.0", Gen::v5}, Alias{"6.0", Gen::v6},
                         Alias{"6.1", Gen::v6}, Alias{"7.0", Gen::v7}})
    EXPECT_EQ(parse_gen(a.name), a.g) << a.name;
  for (const char* bad : {"", "3", "8", "4.3", "5.1", "v4", "gfx942"})
    EXPECT_FALSE(parse_gen(bad).has_value()) << bad;
}

TEST(Table, LimitsMatchTheLayout) {
  for (Gen g : kAllGens) {
    const Limits& lim = limits(g);
    const std::string where = "SDMA " + std::string(gen_name(g));
    // 4.4 (gfx90a): Linux sdma_v4_0.c sdma_v4_4_buffer_funcs, 1 << 30 per copy and fill.
    const bool wide = g == Gen::v4_4 || g == Gen::v5_2 || g == Gen::v6 || g == Gen::v7;
    // Mesa src/amd/common/sid.h (the last 255 bytes of a (1 << 22) - 1 count
    // are not copied): 0x3FFF00 on 22-bit generations, 0x3FFFFF00 on 30-bit ones.
    EXPECT_EQ(lim.copy_count_bits, wide ? 30 : 22) << where;
    EXPECT_EQ(lim.max_copy_bytes, wide ? 0x3FFFFF00u : 0x3FFF00u) << where;
    EXPECT_EQ(test::row_of(Pkt::copy, g, Key::bytes)->total_width(), lim.copy_count_bits) << where;
    EXPECT_LE(lim.max_copy_bytes - 1, (1ull << lim.copy_count_bits) - 1);
    EXPECT_EQ(lim.max_copy_bytes % 256, 0u);
    // Fill: count [21:0] on 4.x/5.x, [29:0] on 4.4.0 and 6/7; caps are dword multiples.
    const bool wide_fill = g == Gen::v4_4 || g == Gen::v6 || g == Gen::v7;
    EXPECT_EQ(lim.fill_count_bits, wide_fill ? 30 : 22) << where;
    EXPECT_EQ(lim.max_fill_bytes, wide_fill ? 0x3FFFFFE0u : 0x3FFFE0u) << where;
    // The lowering's pieces: the packet's limit, except 4.4 (gfx90a), where fills
    // split at ROCr's 0x3FFFE0 until a hardware run proves the 30-bit count.
    EXPECT_EQ(lim.fill_split_bytes, g == Gen::v4_4 ? 0x3FFFE0u : lim.max_fill_bytes) << where;
    for (Pkt p : {Pkt::fill, Pkt::fill8})
      EXPECT_EQ(test::row_of(p, g, Key::bytes)->total_width(), lim.fill_count_bits) << where;
    EXPECT_LE(lim.max_fill_bytes - 1, (1ull << lim.fill_count_bits) - 1);
    EXPECT_EQ(lim.max_fill_bytes % 4, 0u);
    // WRITE count[19:0] = n-1, NOP count[29:16].
    EXPECT_EQ(lim.max_write_dwords, 1u << test::row_of(Pkt::write, g, Key::count)->total_width());
    EXPECT_EQ(lim.max_nop_count, (1u << test::row_of(Pkt::nop, g, Key::count)->total_width()) - 1);
    EXPECT_EQ(lim.max_nop_count, 0x3FFFu);
    // Alignments agree with the rows the encoder checks.
    EXPECT_EQ(lim.fence_align, test::row_of(Pkt::fence, g, Key::addr)->align) << where;
    EXPECT_EQ(lim.fence_align, test::row_of(Pkt::poll, g, Key::addr)->align) << where;
    EXPECT_EQ(lim.fence_align, test::row_of(Pkt::cond_exe, g, Key::addr)->align) << where;
    EXPECT_EQ(lim.atomic64_align, test::row_of(Pkt::atomic_add64, g, Key::addr)->align) << where;
    EXPECT_EQ(lim.timestamp_align, test::row_of(Pkt::timestamp, g, Key::addr)->align) << where;
    EXPECT_EQ(lim.ib_align, test::row_of(Pkt::ib, g, Key::addr)->align) << where;
    EXPECT_EQ(lim.fence_align, 4u);
    EXPECT_EQ(lim.atomic64_align, 8u);
    EXPECT_EQ(lim.ib_align, 32u);
    EXPECT_EQ(lim.ring_base_align, 256u);
    // Feature flags agree with the packet set.
    EXPECT_EQ(lim.has_gcr, packet_exists(Pkt::gcr, g)) << where;
    EXPECT_EQ(lim.has_gcr, packet_exists(Pkt::gcr_user, g)) << where;
    EXPECT_EQ(lim.has_mem_incr, packet_exists(Pkt::mem_incr, g)) << where;
    EXPECT_EQ(lim.has_swap_linear, packet_exists(Pkt::swap, g)) << where;
    // FENCE MTYPE=UC (3) on 5.x, 6.x and 7.x (Linux sdma_v7_0.c and ROCr write it on 7.x
    // too); the header bits are the mtype field's.
    const bool has_mtype = g == Gen::v5 || g == Gen::v5_2 || g == Gen::v6 || g == Gen::v7;
    EXPECT_EQ(lim.fence_mtype_uc, has_mtype ? 0x00030000u : 0u) << where;
    if (has_mtype) {
      Result<std::vector<uint32_t>> dw = assemble(g, "fence addr=0 value=0 mtype=3");
      ASSERT_TRUE(dw.ok());
      EXPECT_EQ((*dw)[0] & 0xFFFF0000u, lim.fence_mtype_uc);
    } else {
      EXPECT_EQ(test::row_of(Pkt::fence, g, Key::mtype), nullptr) << where;
    }
  }
}

TEST(Table, DescribePacketsListsEveryKind) {
  for (Gen g : kAllGens) {
    const std::string d = describe_packets(g);
    for (const PacketDef& def : packet_defs()) {
      const bool listed = d.find("  " + std::string(def.name) + " ") != std::string::npos;
      EXPECT_EQ(listed, packet_exists(def.pkt, g)) << def.name << " on " << gen_name(g);
    }
  }
}

}  // namespace
}  // namespace conccl::sdma
