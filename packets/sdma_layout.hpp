// packets/sdma_layout.hpp - the one description of every SDMA packet.
//
// Each packet is a list of field rows (sdma_layout_table.cpp). A row says
// where a field's bits live (one or two dword/bit ranges), how a value is
// encoded (raw, minus-one, low bits dropped), and for which generations the
// row holds. The encoder, decoder, assembler and disassembler all work from
// these rows, so a layout is written exactly once.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "conccl/packets/generation.hpp"

namespace conccl::sdma {

// Packet kinds, as named in the assembler. Several kinds may share one
// hardware opcode (copy/copy_bcst, poll/hdp_flush/poll_reg, atomic/atomic_add64):
// identifying bits tell them apart.
enum class Pkt : uint8_t {
  nop,
  copy,
  copy_bcst,
  copy_window,
  swap,
  fill,
  fill8,
  write,
  fence,
  trap,
  poll,
  hdp_flush,
  poll_reg,
  atomic_add64,
  atomic,
  timestamp,
  timestamp_local,
  timestamp_set,
  cond_exe,
  ib,
  semaphore,
  mem_incr,
  gcr,
  gcr_user,
  reg_write,
  kCount,
};
inline constexpr int kPktCount = static_cast<int>(Pkt::kCount);

// Field names, as keys of the assembler.
enum class Key : uint8_t {
  none,  // a fixed identifying bit range, not settable
  src, dst, dst0, dst1, a, b, addr, bytes, value, cmp, data, count, ref, mask,
  func, interval, retry, ctx, op, size, csa, vmid, base, limit, control, reg,
  byte_en, done, req,
  encrypt, tmz, cpv, dcc, backwards, loop, loop_interval, priv,
  sw, src_sw, dst_sw, dst0_sw, dst1_sw,
  cache_policy, src_cache_policy, dst_cache_policy, dst0_cache_policy, dst1_cache_policy,
  mall_policy, src_mall_policy, dst_mall_policy, dst0_mall_policy, dst1_mall_policy,
  l2_policy, llc_policy, mtype, gcc, sys, snp, gpa, nopte_comp,
  data_format, number_type, read_cm, write_cm, max_comp, max_uncomp,
  elementsize, src_x, src_y, src_z, src_pitch, src_slice_pitch,
  dst_x, dst_y, dst_z, dst_pitch, dst_slice_pitch, rect_x, rect_y, rect_z,
  write_one, signal, mailbox, apertureid,
  kCount,
};
inline constexpr int kKeyCount = static_cast<int>(Key::kCount);

std::string_view key_name(Key k);
bool parse_key(std::string_view name, Key* out);

// A contiguous bit range inside one dword.
struct Bits {
  uint8_t dw = 0;     // dword index from the header (dw0)
  uint8_t lo = 0;     // lowest bit
  uint8_t width = 0;  // 0 = unused part
  constexpr uint32_t mask() const { return width >= 32 ? 0xFFFFFFFFu : ((1u << width) - 1u) << lo; }
};

enum class Enc : uint8_t {
  raw,        // stored as given
  minus_one,  // stored as value - 1 (byte counts, pitches, rect sizes)
  signed64,   // 64-bit two's complement; the assembler accepts negative values
};

enum FieldFlag : uint8_t {
  kRequired = 1,  // the assembler demands it; the disassembler always prints it
  kHex = 2,       // printed in hex (addresses, data)
};

// Set of packet kinds: rows shared by related packets are written once.
using PktMask = uint32_t;
constexpr PktMask pkt_bit(Pkt p) { return PktMask(1u) << static_cast<unsigned>(p); }

// One row of the layout table.
struct FieldRow {
  PktMask pkts;
  Key key;          // Key::none: identifying bits with value `fixed`
  GenMask gens;
  Bits lo_part;     // value bits [lo_part.width-1 : 0] after `shift`
  Bits hi_part;     // the next value bits, if any (width 0 = none)
  uint8_t shift;    // low value bits that are not stored and must be zero
  Enc enc;
  uint8_t flags;
  uint8_t align;    // value must be a multiple of this (1 = any); addresses
  uint32_t fixed;   // for Key::none
  constexpr uint8_t total_width() const { return uint8_t(lo_part.width + hi_part.width); }
};

// How a packet's length is determined.
enum class Tail : uint8_t {
  fixed,      // `dwords` always
  nop_body,   // dwords + count (NOP count[29:16] body dwords)
  data,       // dwords + count + 1 (WRITE count[19:0] = n-1 payload dwords)
  ext_flag,   // dwords + ext_dwords when the `ext_key` field is non-zero
};

struct PacketDef {
  Pkt pkt;
  std::string_view name;
  uint8_t op;
  uint8_t sub_op;
  GenMask gens;
  uint8_t dwords;     // length without tail
  Tail tail;
  Key ext_key;        // Tail::ext_flag: the field that adds ext_dwords
  uint8_t ext_dwords;
  std::string_view summary;
};

std::span<const PacketDef> packet_defs();
const PacketDef& packet_def(Pkt p);
std::span<const FieldRow> field_rows();
bool packet_exists(Pkt p, Gen g);
bool parse_pkt(std::string_view name, Pkt* out);

// A packet's layout for one generation: its rows, resolved once.
struct Layout {
  const PacketDef* def = nullptr;
  Gen gen{};
  const FieldRow* by_key[kKeyCount] = {};  // null when the key is not in this packet/gen
  const FieldRow* fixed_rows[4] = {};      // identifying bits besides op/sub_op
  int fixed_count = 0;
  const FieldRow* rows[48] = {};           // every settable row, table order
  int row_count = 0;
  uint32_t defined_mask[16] = {};          // bits covered per dword
  uint64_t required[2] = {};               // bit per Key that must be given
};
static_assert(kKeyCount <= 128, "Layout::required holds 128 keys");

// Null when the packet does not exist in that generation.
const Layout* layout(Pkt p, Gen g);

}  // namespace conccl::sdma
