// packets/sdma_asm.cpp - assembler and disassembler over the layout table.
#include "packets/sdma_asm.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cinttypes>
#include <cstdio>

namespace conccl::sdma {

namespace {

// POLL_REGMEM's FUNCTION field by name, as conccl::PollFunc spells it
// (include/conccl/commands.hpp): always=0, lt=1, le=2, eq=3, ne=4, ge=5, gt=6.
bool poll_func_value(std::string_view v, uint64_t* out) {
  static constexpr std::string_view kNames[] = {"always", "lt", "le", "eq", "ne", "ge", "gt"};
  for (uint64_t i = 0; i < std::size(kNames); ++i)
    if (v == kNames[i]) {
      *out = i;
      return true;
    }
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string known_ops(Gen g) {
  std::string out;
  for (const PacketDef& d : packet_defs())
    if (packet_exists(d.pkt, g)) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

std::string known_keys(const Layout& l) {
  std::string out;
  for (int i = 0; i < l.row_count; ++i) {
    if (l.def->tail == Tail::data && l.rows[i]->key == Key::count) continue;
    out += (out.empty() ? "" : ", ") + std::string(key_name(l.rows[i]->key));
  }
  if (l.def->tail == Tail::data || l.def->tail == Tail::nop_body) out += ", data";
  return out;
}

}  // namespace

bool parse_u64(std::string_view s, uint64_t* out, bool allow_negative) {
  if (s.empty()) return false;
  bool neg = false;
  if (s.front() == '-') {
    if (!allow_negative) return false;
    neg = true;
    s.remove_prefix(1);
  }
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  if (s.empty()) return false;
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || ptr != s.data() + s.size()) return false;
  if (neg) {
    if (v > (1ull << 63)) return false;
    v = ~v + 1;
  }
  *out = v;
  return true;
}

Result<std::optional<Packet>> parse_line(Gen g, std::string_view line) {
  if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  line = trim(line);
  if (line.empty()) return std::optional<Packet>();

  // Split into whitespace-separated tokens.
  std::vector<std::string_view> tok;
  while (!line.empty()) {
    size_t end = 0;
    while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
    tok.push_back(line.substr(0, end));
    line = trim(line.substr(end));
  }

  Packet p;
  if (!parse_pkt(tok[0], &p.pkt))
    return error(Code::invalid_argument,
                 "unknown op '" + std::string(tok[0]) + "' (ops on SDMA " +
                     std::string(gen_name(g)) + ": " + known_ops(g) + ")");
  const Layout* l = layout(p.pkt, g);
  const std::string op(tok[0]);
  if (!l) {
    std::string avail;
    for (Gen h : kAllGens)
      if (packet_exists(p.pkt, h)) avail += (avail.empty() ? "" : ", ") + std::string(gen_name(h));
    return error(Code::invalid_argument, op + " does not exist on SDMA " +
                                             std::string(gen_name(g)) + " (only on " + avail + ")");
  }
  const bool takes_data = l->def->tail == Tail::data || l->def->tail == Tail::nop_body;

  for (size_t i = 1; i < tok.size(); ++i) {
    const size_t eq = tok[i].find('=');
    if (eq == std::string_view::npos || eq == 0)
      return error(Code::invalid_argument,
                   op + ": expected key=value, got '" + std::string(tok[i]) + "'");
    const std::string_view k = tok[i].substr(0, eq), v = tok[i].substr(eq + 1);
    const std::string ks(k);

    if (k == "data" && takes_data) {
      if (!p.data.empty()) return error(Code::invalid_argument, op + ": key 'data' given twice");
      std::string_view rest = v;
      while (true) {
        const size_t comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        uint64_t d = 0;
        if (!parse_u64(item, &d) || d > 0xFFFFFFFFull)
          return error(Code::invalid_argument,
                       op + ": data item '" + std::string(item) + "' is not a 32-bit number");
        p.data.push_back(static_cast<uint32_t>(d));
        if (comma == std::string_view::npos) break;
        rest = rest.substr(comma + 1);
      }
      continue;
    }
    if (k.size() > 4 && k.substr(0, 4) == "rsvd") {
      uint64_t dw = 0, bits = 0;
      if (!parse_u64(k.substr(4), &dw) || dw > 15)
        return error(Code::invalid_argument, op + ": bad reserved-bits key '" + ks + "'");
      if (!parse_u64(v, &bits) || bits > 0xFFFFFFFFull)
        return error(Code::invalid_argument,
                     op + ": value '" + std::string(v) + "' for key '" + ks + "' is not a 32-bit number");
      p.reserved.push_back({static_cast<uint8_t>(dw), static_cast<uint32_t>(bits)});
      continue;
    }
    Key key{};
    const FieldRow* row = parse_key(k, &key) ? l->by_key[static_cast<int>(key)] : nullptr;
    if (!row || (l->def->tail == Tail::data && key == Key::count))
      return error(Code::invalid_argument, op + ": unknown key '" + ks + "' on SDMA " +
                                               std::string(gen_name(g)) + " (keys: " +
                                               known_keys(*l) + ")");
    for (const FieldValue& f : p.fields)
      if (f.key == key) return error(Code::invalid_argument, op + ": key '" + ks + "' given twice");
    uint64_t value = 0;
    if (key == Key::func && poll_func_value(v, &value)) {
      // func=eq etc.: the names of conccl::PollFunc (include/conccl/commands.hpp)
    } else if (!parse_u64(v, &value, row->enc == Enc::signed64)) {
      return error(Code::invalid_argument,
                   op + ": value '" + std::string(v) + "' for key '" + ks + "' is not a number (use decimal or 0x-hex" +
                       (key == Key::func ? ", or always, lt, le, eq, ne, ge, gt)" : ")"));
    }
    p.fields.push_back({key, value});
  }
  return std::optional<Packet>(std::move(p));
}

namespace {

// `raw data=W,W,...`: the dwords as given, unchecked (what `dis` prints for a
// packet the assembler would refuse). `rest` follows the op.
Status assemble_raw(std::string_view rest, std::vector<uint32_t>* out) {
  rest = trim(rest);
  if (rest.substr(0, 5) != "data=" || rest.find_first_of(" \t") != std::string_view::npos)
    return error(Code::invalid_argument, "raw: expected data=DWORD,DWORD,... (one key, no spaces)");
  std::vector<uint32_t> words;
  std::string_view list = rest.substr(5);
  while (true) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    uint64_t d = 0;
    if (!parse_u64(item, &d) || d > 0xFFFFFFFFull)
      return error(Code::invalid_argument, "raw: data item '" + std::string(item) + "' is not a 32-bit number");
    words.push_back(static_cast<uint32_t>(d));
    if (comma == std::string_view::npos) break;
    list = list.substr(comma + 1);
  }
  out->insert(out->end(), words.begin(), words.end());
  return Status();
}

}  // namespace

Status assemble_line(Gen g, std::string_view line, std::vector<uint32_t>* out, bool* produced) {
  if (produced) *produced = false;
  const std::string_view code = trim(line.substr(0, line.find('#')));
  if (code.substr(0, 3) == "raw" && (code.size() == 3 || std::isspace(static_cast<unsigned char>(code[3])))) {
    CONCCL_RETURN_IF_ERROR(assemble_raw(code.substr(3), out));
    if (produced) *produced = true;
    return Status();
  }
  Result<std::optional<Packet>> parsed = parse_line(g, line);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->has_value()) return Status();
  Result<std::vector<uint32_t>> dw = encode(g, **parsed);
  if (!dw.ok()) return dw.status();
  out->insert(out->end(), dw->begin(), dw->end());
  if (produced) *produced = true;
  return Status();
}

Result<std::vector<uint32_t>> assemble(Gen g, std::string_view text) {
  std::vector<uint32_t> out;
  size_t line_no = 0;
  while (!text.empty() || line_no == 0) {
    ++line_no;
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    Status st = assemble_line(g, line, &out);
    if (!st.ok()) return st.prefix("line " + std::to_string(line_no));
    if (text.empty()) break;
  }
  return out;
}

std::string format_packet(const Packet& p) {
  std::string out(packet_def(p.pkt).name);
  const PacketDef& def = packet_def(p.pkt);
  bool data_nonzero = false;
  for (uint32_t d : p.data) data_nonzero |= d != 0;
  // Print in Key order (src, dst, ..., bytes, value, ...), the order the
  // assembler's documentation lists keys in.
  std::vector<FieldValue> fields = p.fields;
  std::sort(fields.begin(), fields.end(),
            [](const FieldValue& a, const FieldValue& b) { return a.key < b.key; });
  for (const FieldValue& f : fields) {
    // Which row? Flags are the same for a key across generations of a packet.
    const FieldRow* row = nullptr;
    for (const FieldRow& r : field_rows())
      if ((r.pkts & pkt_bit(p.pkt)) && r.key == f.key) {
        row = &r;
        break;
      }
    const bool required = row && (row->flags & kRequired);
    const uint64_t unset = (row && row->enc == Enc::minus_one) ? 1 : 0;  // encoded zero
    if (!required && f.value == unset) continue;
    if (def.tail == Tail::nop_body && f.key == Key::count && data_nonzero) continue;
    out += ' ';
    out += key_name(f.key);
    out += '=';
    out += (row && (row->flags & kHex)) ? hex(f.value) : std::to_string(f.value);
  }
  if (def.tail == Tail::data || (def.tail == Tail::nop_body && data_nonzero)) {
    out += " data=";
    for (size_t i = 0; i < p.data.size(); ++i) out += (i ? "," : "") + hex(p.data[i]);
  }
  for (const Reserved& r : p.reserved) out += " rsvd" + std::to_string(r.dw) + "=" + hex(r.bits);
  return out;
}

std::string format_dwords(std::span<const uint32_t> dw) {
  std::string out;
  out.reserve(dw.size() * 9);
  char buf[12];
  for (size_t i = 0; i < dw.size(); ++i) {
    std::snprintf(buf, sizeof buf, i ? " %08x" : "%08x", dw[i]);
    out += buf;
  }
  return out;
}

Result<std::vector<uint32_t>> parse_dwords(std::string_view text) {
  std::vector<uint32_t> out;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    while (!line.empty()) {
      size_t end = 0;
      while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
      std::string_view w = line.substr(0, end);
      line = trim(line.substr(end));
      if (w.size() > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'X')) w.remove_prefix(2);
      uint32_t v = 0;
      auto [ptr, ec] = std::from_chars(w.data(), w.data() + w.size(), v, 16);
      if (w.empty() || w.size() > 8 || ec != std::errc() || ptr != w.data() + w.size())
        return error(Code::invalid_argument, "line " + std::to_string(line_no) + ": '" +
                                                 std::string(w) + "' is not a 32-bit hex dword");
      out.push_back(v);
    }
  }
  return out;
}

std::string describe_packets(Gen g) {
  std::string out;
  for (const PacketDef& d : packet_defs()) {
    const Layout* l = layout(d.pkt, g);
    if (!l) continue;
    out += "  " + std::string(d.name);
    for (int i = 0; i < l->row_count; ++i) {
      const FieldRow& r = *l->rows[i];
      if (d.tail == Tail::data && r.key == Key::count) continue;
      out += ' ';
      out += (r.flags & kRequired) ? std::string(key_name(r.key)) : "[" + std::string(key_name(r.key)) + "]";
    }
    if (d.tail == Tail::data) out += " data";
    if (d.tail == Tail::nop_body) out += " [data]";
    out += "\n      " + std::string(d.summary) + "\n";
  }
  out += "  raw data\n      dwords as given, unchecked (dis prints it for a packet that asm would refuse)\n";
  return out;
}

}  // namespace conccl::sdma
