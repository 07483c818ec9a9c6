// packets/sdma_codec.hpp - encode and decode SDMA packets from the layout table.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "conccl/status.hpp"
#include "conccl/packets/sdma_layout.hpp"

namespace conccl::sdma {

struct FieldValue {
  Key key;
  uint64_t value;  // user units: bytes, not bytes-1; addresses in full
};

// Bits outside every defined field, kept so that decode -> encode is exact.
struct Reserved {
  uint8_t dw;
  uint32_t bits;
};

// A packet as fields; what decode returns and the assembler builds.
struct Packet {
  Pkt pkt = Pkt::nop;
  std::vector<FieldValue> fields;  // layout order after decode
  std::vector<uint32_t> data;      // WRITE payload, NOP body
  std::vector<Reserved> reserved;
  size_t dwords = 0;               // encoded length (set by decode)

  // The value of `k`, or 0 when absent.
  uint64_t get(Key k) const;
};

// Encodes one packet into `out` (which must hold max_packet_dwords(...) or the
// exact length) and returns the number of dwords written. Every value is
// checked: field width, alignment, the generation's limits, fields that do not
// exist in this generation. Fields not given are zero.
Result<size_t> encode(Gen g, Pkt p, std::span<const FieldValue> fields,
                      std::span<uint32_t> out, std::span<const uint32_t> data = {},
                      std::span<const Reserved> reserved = {});
Result<std::vector<uint32_t>> encode(Gen g, const Packet& packet);

// A packet's encoder resolved once for a fixed list of keys - for the hot
// packets (COPY_LINEAR, ATOMIC): the packet's template (header and
// identifying bits) and each key's row are looked up when it is made, so
// put() only checks and places the values. Fixed-length packets only (an
// optional tail stays off); the
// checks are encode()'s, and put() returns false where encode() would fail
// (call encode() with the same values for the error message).
class PreparedPacket {
 public:
  static Result<PreparedPacket> make(Gen g, Pkt p, std::span<const Key> keys);
  PreparedPacket() = default;
  size_t dwords() const { return dwords_; }
  // `values` in the order of `keys`; `out` has dwords() room.
  bool put(uint32_t* out, std::span<const uint64_t> values) const;

 private:
  const Layout* layout_ = nullptr;
  const FieldRow* rows_[4] = {};
  int count_ = 0;
  int bytes_index_ = -1;  // which value is Key::bytes (checked against the generation's limit)
  size_t dwords_ = 0;
  uint32_t template_[16] = {};
};

// Length in dwords the packet will have (for reserving ring space).
size_t packet_dwords(Gen g, Pkt p, std::span<const FieldValue> fields, size_t data_dwords = 0);

// Decodes the packet at in[0]. Never reads past `in`. Errors say what is
// wrong (unknown opcode, truncated); offsets are added by decode_stream.
Result<Packet> decode(Gen g, std::span<const uint32_t> in);

// Decodes the packet at in[0] as `kind`, which must match its header (a kind
// that shares its opcode with others: atomic vs atomic_add64, poll vs
// hdp_flush); an error like decode's when it does not.
Result<Packet> decode_as(Gen g, Pkt kind, std::span<const uint32_t> in);

// Length of the packet at in[0] without decoding its fields (used by engines
// to skip and by hang diagnosis); error like decode.
Result<size_t> packet_length(Gen g, std::span<const uint32_t> in);

struct StreamDecode {
  std::vector<Packet> packets;
  std::vector<size_t> offsets;  // dword offset of each packet
  Status error;                 // ok, or the first undecodable packet
  size_t error_offset = 0;      // dword offset of that packet
};
StreamDecode decode_stream(Gen g, std::span<const uint32_t> in);

}  // namespace conccl::sdma
