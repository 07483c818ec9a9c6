// packets/sdma_codec.cpp - the generic encoder/decoder driven by the layout rows.
#include "packets/sdma_codec.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace conccl::sdma {

namespace {

std::string where(const Layout& l) {
  return std::string(l.def->name) + " (SDMA " + std::string(gen_name(l.gen)) + ")";
}

constexpr uint64_t low_mask(unsigned width) { return width >= 64 ? ~0ull : (1ull << width) - 1; }

void put_bits(uint32_t* out, const Bits& b, uint64_t v) {
  out[b.dw] |= static_cast<uint32_t>((v & low_mask(b.width)) << b.lo);
}

uint64_t get_bits(const uint32_t* in, const Bits& b) {
  return (static_cast<uint64_t>(in[b.dw]) >> b.lo) & low_mask(b.width);
}

void put_row(uint32_t* out, const FieldRow& row, uint64_t raw) {
  put_bits(out, row.lo_part, raw);
  if (row.hi_part.width) put_bits(out, row.hi_part, raw >> row.lo_part.width);
}

uint64_t get_row(const uint32_t* in, const FieldRow& row) {
  uint64_t raw = get_bits(in, row.lo_part);
  if (row.hi_part.width) raw |= get_bits(in, row.hi_part) << row.lo_part.width;
  return raw;
}

// The largest dword index a row touches.
int last_dw(const FieldRow& row) {
  return row.hi_part.width ? row.hi_part.dw : row.lo_part.dw;
}

bool is_derived(const Layout& l, const FieldRow& row) {
  return l.def->tail == Tail::data && row.key == Key::count;
}

// Turns a user value into the bits stored, checking that it is legal.
Status to_raw(const Layout& l, const FieldRow& row, uint64_t value, uint64_t* raw) {
  const std::string name(key_name(row.key));
  if (row.align > 1 && value % row.align != 0)
    return error(Code::invalid_argument,
                 where(l) + ": " + name + "=" + hex(value) + " is not " +
                     std::to_string(row.align) + "-byte aligned; align it to " +
                     std::to_string(row.align) + " bytes");
  uint64_t v = value;
  if (row.enc == Enc::minus_one) {
    if (v == 0)
      return error(Code::out_of_range, where(l) + ": " + name + " must be at least 1");
    v -= 1;
  }
  v >>= row.shift;
  const unsigned width = row.total_width();
  if (row.enc != Enc::signed64 && width < 64 && (v >> width) != 0) {
    const uint64_t max_user = ((low_mask(width) << row.shift) + (row.enc == Enc::minus_one ? 1 : 0));
    return error(Code::out_of_range, where(l) + ": " + name + "=" + hex(value) +
                                         " does not fit its " + std::to_string(width) +
                                         "-bit field (max " + hex(max_user) + ")");
  }
  *raw = v;
  return Status();
}

// Generation limits that are stricter than the field width.
Status check_limit(const Layout& l, Key key, uint64_t value) {
  if (key != Key::bytes) return Status();
  const Limits& lim = limits(l.gen);
  uint64_t max = 0;
  switch (l.def->pkt) {
    case Pkt::copy:
    case Pkt::copy_bcst:
    case Pkt::swap: max = lim.max_copy_bytes; break;
    case Pkt::fill:
    case Pkt::fill8: max = lim.max_fill_bytes; break;
    default: return Status();
  }
  if (value > max)
    return error(Code::out_of_range,
                 where(l) + ": bytes=" + hex(value) + " exceeds the generation's limit of " +
                     hex(max) + " bytes per packet; split it (conccl::sdma::split_copy)");
  return Status();
}

// The same checks as to_raw/check_limit without building messages.
inline bool raw_ok(const FieldRow& row, uint64_t value, uint64_t* raw) {
  if (row.align > 1 && value % row.align != 0) return false;
  uint64_t v = value;
  if (row.enc == Enc::minus_one) {
    if (v == 0) return false;
    v -= 1;
  }
  v >>= row.shift;
  const unsigned width = row.total_width();
  if (row.enc != Enc::signed64 && width < 64 && (v >> width) != 0) return false;
  *raw = v;
  return true;
}

inline bool limit_ok(const Layout& l, uint64_t value) {
  switch (l.def->pkt) {
    case Pkt::copy:
    case Pkt::copy_bcst:
    case Pkt::swap: return value <= limits(l.gen).max_copy_bytes;
    case Pkt::fill:
    case Pkt::fill8: return value <= limits(l.gen).max_fill_bytes;
    default: return true;
  }
}

// Length when the fields are known; -1 when inconsistent (reported by encode).
size_t base_length(const Layout& l, std::span<const FieldValue> fields, size_t data_dwords) {
  size_t n = l.def->dwords;
  switch (l.def->tail) {
    case Tail::fixed: break;
    case Tail::nop_body: {
      uint64_t count = data_dwords;
      for (const FieldValue& f : fields)
        if (f.key == Key::count) count = f.value;
      // A count too wide for the field is refused by encode; bound the length
      // so that callers sizing a buffer from it do not allocate gigabytes.
      const uint64_t cap = uint64_t(limits(l.gen).max_nop_count) + 1;
      n += count < cap ? count : cap;
      break;
    }
    case Tail::data: n += data_dwords; break;
    case Tail::ext_flag:
      for (const FieldValue& f : fields)
        if (f.key == l.def->ext_key && f.value != 0) n += l.def->ext_dwords;
      break;
  }
  return n;
}

const Layout* find_layout(Gen g, Pkt p, Status* st) {
  const Layout* l = layout(p, g);
  if (!l) {
    std::string avail;
    for (Gen h : kAllGens)
      if (packet_exists(p, h)) avail += (avail.empty() ? "" : ", ") + std::string(gen_name(h));
    *st = error(Code::invalid_argument, std::string(packet_def(p).name) +
                                            " does not exist on SDMA " +
                                            std::string(gen_name(g)) + " (it exists on " +
                                            avail + ")");
  }
  return l;
}

}  // namespace

Result<PreparedPacket> PreparedPacket::make(Gen g, Pkt p, std::span<const Key> keys) {
  Status st;
  const Layout* l = find_layout(g, p, &st);
  if (!l) return st;
  // Fixed length: no tail, or an optional tail whose flag is not prepared.
  bool fixed = l->def->tail == Tail::fixed;
  if (l->def->tail == Tail::ext_flag) fixed = std::find(keys.begin(), keys.end(), l->def->ext_key) == keys.end();
  if (!fixed || l->def->dwords > 16)
    return error(Code::invalid_argument, where(*l) + ": only fixed-length packets of at most 16 dwords are prepared");
  if (keys.size() > 4) return error(Code::invalid_argument, where(*l) + ": at most 4 prepared keys");
  PreparedPacket pp;
  pp.layout_ = l;
  pp.dwords_ = l->def->dwords;
  uint64_t given[2] = {0, 0};
  for (const Key k : keys) {
    const int ki = static_cast<int>(k);
    const FieldRow* row = (ki > 0 && ki < kKeyCount) ? l->by_key[ki] : nullptr;
    if (!row) return error(Code::invalid_argument, where(*l) + " has no field '" + std::string(key_name(k)) + "'");
    if (k == Key::bytes) pp.bytes_index_ = pp.count_;
    pp.rows_[pp.count_++] = row;
    given[ki / 64] |= 1ull << (ki % 64);
  }
  if ((given[0] & l->required[0]) != l->required[0] || (given[1] & l->required[1]) != l->required[1])
    return error(Code::invalid_argument, where(*l) + ": the prepared keys leave a required field out");
  pp.template_[0] = uint32_t(l->def->op) | (uint32_t(l->def->sub_op) << 8);
  for (int i = 0; i < l->fixed_count; ++i) put_row(pp.template_, *l->fixed_rows[i], l->fixed_rows[i]->fixed);
  return pp;
}

bool PreparedPacket::put(uint32_t* out, std::span<const uint64_t> values) const {
  if (!layout_ || values.size() != static_cast<size_t>(count_)) return false;
  if (bytes_index_ >= 0 && !limit_ok(*layout_, values[static_cast<size_t>(bytes_index_)])) return false;
  uint64_t raw[4];
  for (int i = 0; i < count_; ++i)
    if (!raw_ok(*rows_[i], values[static_cast<size_t>(i)], &raw[i])) return false;
  std::memcpy(out, template_, dwords_ * 4);
  for (int i = 0; i < count_; ++i) put_row(out, *rows_[i], raw[i]);
  return true;
}

uint64_t Packet::get(Key k) const {
  for (const FieldValue& f : fields)
    if (f.key == k) return f.value;
  return 0;
}

size_t packet_dwords(Gen g, Pkt p, std::span<const FieldValue> fields, size_t data_dwords) {
  const Layout* l = layout(p, g);
  return l ? base_length(*l, fields, data_dwords) : 0;
}

Result<size_t> encode(Gen g, Pkt p, std::span<const FieldValue> fields, std::span<uint32_t> out,
                      std::span<const uint32_t> data, std::span<const Reserved> reserved) {
  const Layout* lp = layout(p, g);
  if (!lp) {
    Status st;
    find_layout(g, p, &st);
    return st;
  }
  const Layout& l = *lp;
  const PacketDef& def = *l.def;

  // Tail rules first: they decide the length.
  if (def.tail == Tail::data) {
    if (data.empty())
      return error(Code::invalid_argument, where(l) + ": needs at least one data dword");
    if (data.size() > limits(g).max_write_dwords)
      return error(Code::out_of_range, where(l) + ": " + std::to_string(data.size()) +
                                           " data dwords exceed the limit of " +
                                           std::to_string(limits(g).max_write_dwords));
  } else if (def.tail == Tail::nop_body) {
    for (const FieldValue& f : fields)
      if (f.key == Key::count && !data.empty() && f.value != data.size())
        return error(Code::invalid_argument,
                     where(l) + ": count=" + std::to_string(f.value) + " but " +
                         std::to_string(data.size()) + " data dwords given; give one or make them agree");
  } else if (!data.empty()) {
    return error(Code::invalid_argument, where(l) + ": takes no data dwords");
  }

  const size_t n = base_length(l, fields, data.size());
  if (n > out.size())
    return error(Code::resource_exhausted, where(l) + ": needs " + std::to_string(n) +
                                               " dwords, only " + std::to_string(out.size()) +
                                               " available in the output");
  uint32_t* dw = out.data();
  std::memset(dw, 0, n * sizeof(uint32_t));
  dw[0] = uint32_t(def.op) | (uint32_t(def.sub_op) << 8);
  for (int i = 0; i < l.fixed_count; ++i) put_row(dw, *l.fixed_rows[i], l.fixed_rows[i]->fixed);

  const bool ext_active = n > def.dwords && def.tail == Tail::ext_flag;
  uint64_t given[2] = {0, 0};
  for (const FieldValue& f : fields) {
    const int ki = static_cast<int>(f.key);
    const FieldRow* row = (ki > 0 && ki < kKeyCount) ? l.by_key[ki] : nullptr;
    if (!row) {
      const std::string kn = (ki >= 0 && ki < kKeyCount) ? std::string(key_name(f.key)) : "?";
      return error(Code::invalid_argument,
                   where(l) + " has no field '" + kn + "'");
    }
    if (is_derived(l, *row))
      return error(Code::invalid_argument,
                   where(l) + ": count is set from the number of data dwords; omit it");
    if (last_dw(*row) >= def.dwords && def.tail == Tail::ext_flag && !ext_active)
      return error(Code::invalid_argument, where(l) + ": " + std::string(key_name(f.key)) +
                                               " lives in an optional dword that needs " +
                                               std::string(key_name(def.ext_key)) + "=1");
    uint64_t raw = 0;
    // Fast check inline; the error text is built only when it fails.
    if (!raw_ok(*row, f.value, &raw) || (f.key == Key::bytes && !limit_ok(l, f.value))) {
      CONCCL_RETURN_IF_ERROR(to_raw(l, *row, f.value, &raw));
      CONCCL_RETURN_IF_ERROR(check_limit(l, f.key, f.value));
    }
    put_row(dw, *row, raw);
    given[ki / 64] |= 1ull << (ki % 64);
  }
  // Required fields.
  if ((given[0] & l.required[0]) != l.required[0] || (given[1] & l.required[1]) != l.required[1]) {
    for (int i = 0; i < l.row_count; ++i) {
      const int k = static_cast<int>(l.rows[i]->key);
      if ((l.required[k / 64] >> (k % 64) & 1) && !(given[k / 64] >> (k % 64) & 1))
        return error(Code::invalid_argument, where(l) + ": missing required field '" +
                                                 std::string(key_name(l.rows[i]->key)) + "'");
    }
  }

  if (def.tail == Tail::data) {
    put_row(dw, *l.by_key[static_cast<int>(Key::count)], data.size() - 1);
    std::memcpy(dw + def.dwords, data.data(), data.size() * sizeof(uint32_t));
  } else if (def.tail == Tail::nop_body) {
    const size_t body = n - def.dwords;
    if (body > limits(g).max_nop_count)
      return error(Code::out_of_range, where(l) + ": count=" + std::to_string(body) +
                                           " exceeds the 14-bit count (max " +
                                           std::to_string(limits(g).max_nop_count) + ")");
    put_row(dw, *l.by_key[static_cast<int>(Key::count)], body);
    if (!data.empty()) std::memcpy(dw + def.dwords, data.data(), data.size() * sizeof(uint32_t));
  }

  for (const Reserved& r : reserved) {
    const size_t fixed_len = def.tail == Tail::ext_flag ? n : def.dwords;
    if (r.dw >= fixed_len)
      return error(Code::invalid_argument, where(l) + ": rsvd" + std::to_string(r.dw) +
                                               " is outside the packet's " +
                                               std::to_string(fixed_len) + " dwords");
    if (r.bits & l.defined_mask[r.dw])
      return error(Code::invalid_argument,
                   where(l) + ": rsvd" + std::to_string(r.dw) + "=" + hex(r.bits) +
                       " overlaps defined fields (mask " + hex(l.defined_mask[r.dw]) + ")");
    dw[r.dw] |= r.bits;
  }
  return n;
}

Result<std::vector<uint32_t>> encode(Gen g, const Packet& packet) {
  std::vector<uint32_t> out(packet_dwords(g, packet.pkt, packet.fields, packet.data.size()) + 1);
  Result<size_t> n = encode(g, packet.pkt, packet.fields, out, packet.data, packet.reserved);
  if (!n.ok()) return n.status();
  out.resize(*n);
  return out;
}

namespace {

// Finds the packet kind at in[0] and its length; the core of decode. With
// `only` other than Pkt::kCount, only that kind is considered.
Status identify(Gen g, std::span<const uint32_t> in, const Layout** out_layout, size_t* out_len,
                Pkt only = Pkt::kCount) {
  if (in.empty()) return error(Code::invalid_argument, "truncated: no header dword");
  const uint32_t h = in[0];
  const uint32_t op = h & 0xFF, sub = (h >> 8) & 0xFF;
  bool op_known = false;
  const Layout* found = nullptr;
  for (const PacketDef& def : packet_defs()) {
    if (def.op != op || (only != Pkt::kCount && def.pkt != only)) continue;
    const Layout* l = layout(def.pkt, g);
    if (!l) continue;
    op_known = true;
    if (def.sub_op != sub) continue;
    bool match = true;
    for (int i = 0; i < l->fixed_count && match; ++i) {
      const FieldRow& row = *l->fixed_rows[i];
      match = get_row(in.data(), row) == row.fixed;  // fixed rows are all in dw0
    }
    if (match) {
      found = l;
      break;
    }
  }
  char buf[160];
  if (!found) {
    if (!op_known)
      std::snprintf(buf, sizeof buf, "unknown opcode %u (header 0x%08x) on SDMA %s", op, h,
                    std::string(gen_name(g)).c_str());
    else
      std::snprintf(buf, sizeof buf,
                    "opcode %u sub-op %u (header 0x%08x) is not a packet ConCCL knows on SDMA %s",
                    op, sub, h, std::string(gen_name(g)).c_str());
    return error(Code::invalid_argument, buf);
  }
  const PacketDef& def = *found->def;
  size_t n = def.dwords;
  switch (def.tail) {
    case Tail::fixed: break;
    case Tail::nop_body: n += get_row(in.data(), *found->by_key[static_cast<int>(Key::count)]); break;
    case Tail::data:
      if (in.size() < def.dwords) break;  // reported as truncated below
      n += get_row(in.data(), *found->by_key[static_cast<int>(Key::count)]) + 1;
      break;
    case Tail::ext_flag: {
      const FieldRow* flag = found->by_key[static_cast<int>(def.ext_key)];
      if (flag && last_dw(*flag) < static_cast<int>(in.size()) && get_row(in.data(), *flag) != 0)
        n += def.ext_dwords;
      break;
    }
  }
  if (in.size() < n) {
    std::snprintf(buf, sizeof buf, "truncated %s packet: needs %zu dwords, only %zu left",
                  std::string(def.name).c_str(), n, in.size());
    return error(Code::invalid_argument, buf);
  }
  *out_layout = found;
  *out_len = n;
  return Status();
}

}  // namespace

Result<size_t> packet_length(Gen g, std::span<const uint32_t> in) {
  const Layout* l = nullptr;
  size_t n = 0;
  Status st = identify(g, in, &l, &n);
  if (!st.ok()) return st;
  return n;
}

namespace {

Result<Packet> decode_impl(Gen g, std::span<const uint32_t> in, Pkt only) {
  const Layout* lp = nullptr;
  size_t n = 0;
  Status st = identify(g, in, &lp, &n, only);
  if (!st.ok()) return st;
  const Layout& l = *lp;
  const PacketDef& def = *l.def;
  const size_t fixed_len = def.tail == Tail::ext_flag ? n : def.dwords;

  Packet p;
  p.pkt = def.pkt;
  p.dwords = n;
  for (int i = 0; i < l.row_count; ++i) {
    const FieldRow& row = *l.rows[i];
    if (is_derived(l, row)) continue;
    if (last_dw(row) >= static_cast<int>(fixed_len)) continue;  // optional dword absent
    uint64_t v = get_row(in.data(), row) << row.shift;
    if (row.enc == Enc::minus_one) v += 1;
    p.fields.push_back({row.key, v});
  }
  if (def.tail == Tail::data || def.tail == Tail::nop_body)
    p.data.assign(in.begin() + def.dwords, in.begin() + static_cast<std::ptrdiff_t>(n));
  for (size_t i = 0; i < fixed_len; ++i) {
    const uint32_t extra = in[i] & ~l.defined_mask[i];
    if (extra) p.reserved.push_back({static_cast<uint8_t>(i), extra});
  }
  return p;
}

}  // namespace

Result<Packet> decode(Gen g, std::span<const uint32_t> in) { return decode_impl(g, in, Pkt::kCount); }

Result<Packet> decode_as(Gen g, Pkt kind, std::span<const uint32_t> in) {
  if (kind == Pkt::kCount) return error(Code::invalid_argument, "decode_as: no packet kind given");
  return decode_impl(g, in, kind);
}

StreamDecode decode_stream(Gen g, std::span<const uint32_t> in) {
  StreamDecode out;
  size_t off = 0;
  while (off < in.size()) {
    Result<Packet> p = decode(g, in.subspan(off));
    if (!p.ok()) {
      out.error = p.status();
      out.error_offset = off;
      break;
    }
    const size_t n = p->dwords;
    out.offsets.push_back(off);
    out.packets.push_back(std::move(p).value());
    off += n;
  }
  return out;
}

}  // namespace conccl::sdma
