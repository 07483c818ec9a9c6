// tests/packets/packet_test_util.hpp - helpers shared by the packet-layer tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "packets/generation.hpp"
#include "packets/sdma_asm.hpp"
#include "packets/sdma_codec.hpp"
#include "packets/sdma_layout.hpp"

namespace conccl::sdma::test {

inline Gen gen_of(std::string_view name) {
  std::optional<Gen> g = parse_gen(name);
  if (!g) ADD_FAILURE() << "unknown generation '" << name << "'";
  return g.value_or(Gen::v4);
}

inline std::string gen_str(Gen g) { return std::string(gen_name(g)); }

// The name of a test parameterized by generation: "sdma4_4_2" for 4.4.2.
inline std::string gen_param_name(const ::testing::TestParamInfo<Gen>& info) {
  std::string n = "sdma" + gen_str(info.param);
  std::replace(n.begin(), n.end(), '.', '_');
  return n;
}

inline std::string hex_dwords(const std::vector<uint32_t>& v) { return format_dwords(v); }

// The largest `bytes` a packet accepts on a generation (limits stricter than the field).
inline uint64_t bytes_limit(Pkt p, Gen g) {
  switch (p) {
    case Pkt::copy:
    case Pkt::copy_bcst:
    case Pkt::swap: return limits(g).max_copy_bytes;
    case Pkt::fill:
    case Pkt::fill8: return limits(g).max_fill_bytes;
    default: return ~0ull;
  }
}

// The value a field decodes to when it was not given (all bits zero).
inline uint64_t unset_value(const FieldRow& row) { return row.enc == Enc::minus_one ? 1 : 0; }

// The row of `k` in packet `p` on `g`, or null.
inline const FieldRow* row_of(Pkt p, Gen g, Key k) {
  const Layout* l = layout(p, g);
  return l ? l->by_key[static_cast<int>(k)] : nullptr;
}

// Checks that `decoded` carries exactly the fields of `given`: every given
// field with its value, every other field of the layout at its unset value.
inline void expect_same_fields(Gen g, const Packet& given, const Packet& decoded,
                               const std::string& what) {
  ASSERT_EQ(given.pkt, decoded.pkt) << what;
  const Layout* l = layout(given.pkt, g);
  ASSERT_NE(l, nullptr) << what;
  for (const FieldValue& f : given.fields) {
    bool found = false;
    for (const FieldValue& d : decoded.fields)
      if (d.key == f.key) {
        found = true;
        EXPECT_EQ(d.value, f.value) << what << ": key " << key_name(f.key);
      }
    EXPECT_TRUE(found) << what << ": key " << key_name(f.key) << " missing after decode";
  }
  for (const FieldValue& d : decoded.fields) {
    bool was_given = false;
    for (const FieldValue& f : given.fields) was_given |= f.key == d.key;
    if (was_given) continue;
    const FieldRow* row = l->by_key[static_cast<int>(d.key)];
    ASSERT_NE(row, nullptr) << what << ": decoded key " << key_name(d.key) << " has no row";
    if (l->def->tail == Tail::nop_body && d.key == Key::count) {
      EXPECT_EQ(d.value, given.data.size()) << what << ": nop count";
      continue;
    }
    EXPECT_EQ(d.value, unset_value(*row)) << what << ": key " << key_name(d.key)
                                          << " was not given but decodes non-zero";
  }
  if (l->def->tail == Tail::nop_body && given.data.empty()) {
    // "nop count=N": the body is N zero dwords.
    EXPECT_EQ(decoded.data, std::vector<uint32_t>(decoded.data.size(), 0u)) << what;
    EXPECT_EQ(decoded.data.size(), given.get(Key::count)) << what;
  } else {
    EXPECT_EQ(decoded.data, given.data) << what;
  }
}

}  // namespace conccl::sdma::test
