// packets/hopper_asm.cpp - the text form of Hopper pushbuffers: parsing and
// encoding lines (assemble), decoding and printing headers with their methods
// (disassemble), and the method help text, all from the method table.
#include "packets/hopper_asm.hpp"
#include "packets/sdma_asm.hpp"

#include <cctype>
#include <cstdio>

namespace conccl::hopper {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Decimal or 0x-hex, no sign: the SDMA text form's number syntax.
bool parse_num(std::string_view s, uint64_t* out) { return sdma::parse_u64(s, out); }

std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> out;
  s = trim(s);
  while (!s.empty()) {
    size_t e = 0;
    while (e < s.size() && !std::isspace(static_cast<unsigned char>(s[e]))) ++e;
    out.push_back(s.substr(0, e));
    s = trim(s.substr(e));
  }
  return out;
}

uint8_t default_subch(Cls c) { return c == Cls::copy ? kCopySubchannel : 0; }

std::string_view op_name(HdrOp op) {
  switch (op) {
    case HdrOp::inc: return "inc";
    case HdrOp::non_inc: return "noninc";
    case HdrOp::immd: return "immd";
    case HdrOp::one_inc: return "oneinc";
  }
  return "?";
}

}  // namespace

// ---- text form --------------------------------------------------------------

SubchMap SubchMap::defaults() {
  SubchMap m;
  m.cls[kCopySubchannel] = Cls::copy;
  return m;
}

namespace {

struct Item {
  const Method* m = nullptr;  // null: raw `mthd`
  uint16_t offset = 0;
  uint32_t data = 0;
};

Status parse_value(const Method* m, const Field* f, std::string_view key, std::string_view v, uint64_t* out) {
  if (f) {
    for (const EnumVal& e : f->values)
      if (iequal(e.name, v)) {
        *out = e.value;
        return Status();
      }
  }
  if (parse_num(v, out)) return Status();
  std::string names;
  if (f)
    for (const EnumVal& e : f->values) names += (names.empty() ? "" : ", ") + std::string(e.name);
  return error(Code::invalid_argument,
               (m ? qualified(*m) : std::string("mthd")) + ": value '" + std::string(v) + "' for '" +
                   std::string(key) + "' is not a number" + (names.empty() ? "" : " or one of: " + names));
}

// One method item: "copy.launch_dma a=b c=d" or "mthd offset=0x.. value=0x..".
Result<Item> parse_item(std::string_view text) {
  const std::vector<std::string_view> tok = split_ws(text);
  if (tok.empty()) return error(Code::invalid_argument, "empty method between ';'");
  Item it;
  if (iequal(tok[0], "mthd")) {
    bool have_off = false;
    for (size_t i = 1; i < tok.size(); ++i) {
      const size_t eq = tok[i].find('=');
      uint64_t v = 0;
      const std::string_view k = eq == std::string_view::npos ? tok[i] : tok[i].substr(0, eq);
      if (eq == std::string_view::npos || !parse_num(tok[i].substr(eq + 1), &v))
        return error(Code::invalid_argument, "mthd: expected offset=N or value=N, got '" + std::string(tok[i]) + "'");
      if (k == "offset") {
        if (v > 0x3FFC || (v & 3))
          return error(Code::out_of_range, "mthd offset=" + hex(v) + " must be a multiple of 4 below 0x4000");
        it.offset = static_cast<uint16_t>(v);
        have_off = true;
      } else if (k == "value") {
        if (v > 0xFFFFFFFFull) return error(Code::out_of_range, "mthd value=" + hex(v) + " exceeds 32 bits");
        it.data = static_cast<uint32_t>(v);
      } else {
        return error(Code::invalid_argument, "mthd: unknown key '" + std::string(k) + "' (offset, value)");
      }
    }
    if (!have_off) return error(Code::invalid_argument, "mthd needs offset=");
    return it;
  }
  it.m = find_method(tok[0]);
  if (!it.m) {
    std::string hint = tok[0].find('.') == std::string_view::npos
                           ? " (write class.method, e.g. copy.launch_dma or host.sem_execute)"
                           : " (see describe_methods / sdma-probe asm --gen hopper-ce --help)";
    return error(Code::invalid_argument, "unknown method '" + std::string(tok[0]) + "'" + hint);
  }
  it.offset = it.m->offset;
  std::vector<FieldValue> fv;
  uint32_t rsvd = 0;
  for (size_t i = 1; i < tok.size(); ++i) {
    const size_t eq = tok[i].find('=');
    if (eq == std::string_view::npos || eq == 0)
      return error(Code::invalid_argument, qualified(*it.m) + ": expected key=value, got '" + std::string(tok[i]) + "'");
    const std::string_view k = tok[i].substr(0, eq), v = tok[i].substr(eq + 1);
    if (k == "rsvd") {
      uint64_t r = 0;
      if (!parse_num(v, &r) || r > 0xFFFFFFFFull)
        return error(Code::invalid_argument, qualified(*it.m) + ": rsvd='" + std::string(v) + "' is not a 32-bit number");
      rsvd = static_cast<uint32_t>(r);
      continue;
    }
    int idx = -1;
    for (size_t j = 0; j < it.m->fields.size(); ++j)
      if (iequal(it.m->fields[j].name, k)) idx = static_cast<int>(j);
    if (idx < 0) {
      std::string keys;
      for (const Field& f : it.m->fields) keys += (keys.empty() ? "" : ", ") + std::string(f.name);
      return error(Code::invalid_argument, qualified(*it.m) + ": unknown key '" + std::string(k) + "' (keys: " + keys + ", rsvd)");
    }
    uint64_t val = 0;
    CONCCL_RETURN_IF_ERROR(parse_value(it.m, &it.m->fields[idx], k, v, &val));
    if (val > 0xFFFFFFFFull)
      return error(Code::out_of_range, qualified(*it.m) + ": " + std::string(k) + "=" + hex(val) + " exceeds 32 bits");
    fv.push_back({static_cast<uint8_t>(idx), static_cast<uint32_t>(val)});
  }
  Result<uint32_t> dw = encode_method(*it.m, fv, rsvd);
  if (!dw.ok()) return dw.status();
  it.data = *dw;
  return it;
}

std::string format_item(const Method* m, uint16_t offset, uint32_t data) {
  if (!m) return "mthd offset=" + hex(offset) + " value=" + hex(data);
  std::string s = qualified(*m);
  const DecodedMethod d = decode_method(*m, data);
  for (const FieldValue& fv : d.fields) {
    const Field& f = m->fields[fv.field];
    s += ' ';
    s += f.name;
    s += '=';
    std::string_view name;
    for (const EnumVal& e : f.values)
      if (e.value == fv.value) name = e.name;
    if (!name.empty()) s += name;
    else if (f.hex) s += hex(fv.value);
    else s += std::to_string(fv.value);
  }
  if (d.reserved) s += " rsvd=" + hex(d.reserved);
  return s;
}

const Method* method_for(const SubchMap& map, uint8_t subch, uint16_t offset) {
  if (offset < 0x100) return find_method(Cls::host, offset);
  if (map.cls[subch]) return find_method(*map.cls[subch], offset);
  return nullptr;
}

}  // namespace

Status assemble_line(std::string_view line, std::vector<uint32_t>* out, bool* produced) {
  if (produced) *produced = false;
  if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  line = trim(line);
  if (line.empty()) return Status();

  // Leading header tokens: [inc|noninc|oneinc|immd] [subch=N].
  HdrOp op = HdrOp::inc;
  int subch = -1;
  while (true) {
    const size_t sp = line.find_first_of(" \t");
    const std::string_view t = line.substr(0, sp);
    if (iequal(t, "inc")) op = HdrOp::inc;
    else if (iequal(t, "noninc")) op = HdrOp::non_inc;
    else if (iequal(t, "oneinc")) op = HdrOp::one_inc;
    else if (iequal(t, "immd")) op = HdrOp::immd;
    else if (t.size() > 6 && iequal(t.substr(0, 6), "subch=")) {
      uint64_t v = 0;
      if (!parse_num(t.substr(6), &v) || v >= kSubchannels)
        return error(Code::out_of_range, "subch='" + std::string(t.substr(6)) + "' is not 0..7");
      subch = static_cast<int>(v);
    } else break;
    if (sp == std::string_view::npos) return error(Code::invalid_argument, "header without a method");
    line = trim(line.substr(sp));
  }

  std::vector<Item> items;
  while (!line.empty()) {
    const size_t semi = line.find(';');
    Result<Item> it = parse_item(line.substr(0, semi));
    if (!it.ok()) return it.status();
    items.push_back(*it);
    line = semi == std::string_view::npos ? std::string_view() : trim(line.substr(semi + 1));
    if (semi != std::string_view::npos && line.empty())
      return error(Code::invalid_argument, "trailing ';' without a method");
  }
  const Item& first = items.front();
  if (subch < 0) subch = first.m ? default_subch(first.m->cls) : 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const uint16_t want = op == HdrOp::non_inc   ? first.offset
                          : op == HdrOp::one_inc ? static_cast<uint16_t>(first.offset + 4)
                                                 : static_cast<uint16_t>(first.offset + 4 * i);
    if (items[i].offset != want)
      return error(Code::invalid_argument,
                   "method " + std::to_string(i + 1) + " of this " + std::string(op_name(op)) + " header is at " +
                       hex(items[i].offset) + " but the header addresses " + hex(want) +
                       (op == HdrOp::inc ? " (inc: consecutive methods)" : ""));
    if (first.offset >= 0x100 && items[i].m && first.m && items[i].m->cls != first.m->cls)
      return error(Code::invalid_argument, "one header cannot mix host and copy class methods above 0x100");
  }
  Header h;
  h.op = op;
  h.subch = static_cast<uint8_t>(subch);
  h.method = first.offset;
  if (op == HdrOp::immd) {
    if (items.size() != 1) return error(Code::invalid_argument, "an immd header carries exactly one method");
    if (first.data > kMaxImmediate)
      return error(Code::out_of_range, "immd data " + hex(first.data) + " exceeds 13 bits (max 0x1fff)");
    h.count = static_cast<uint16_t>(first.data);
  } else {
    if (items.size() > kMaxHeaderCount)
      return error(Code::out_of_range, "more than 8191 methods in one header");
    h.count = static_cast<uint16_t>(items.size());
  }
  Result<uint32_t> hdr = encode_header(h);
  if (!hdr.ok()) return hdr.status();
  out->push_back(*hdr);
  if (op != HdrOp::immd)
    for (const Item& it : items) out->push_back(it.data);
  if (produced) *produced = true;
  return Status();
}

Result<std::vector<uint32_t>> assemble(std::string_view text) {
  std::vector<uint32_t> out;
  size_t line_no = 0;
  while (true) {
    ++line_no;
    const size_t nl = text.find('\n');
    Status st = assemble_line(text.substr(0, nl), &out);
    if (!st.ok()) return st.prefix("line " + std::to_string(line_no));
    if (nl == std::string_view::npos) break;
    text = text.substr(nl + 1);
  }
  return out;
}

Disassembly disassemble(std::span<const uint32_t> dw, SubchMap map) {
  Disassembly d;
  size_t pos = 0;
  while (pos < dw.size()) {
    Result<Header> h = decode_header(dw[pos]);
    if (!h.ok()) {
      d.error = h.status();
      d.error_offset = pos;
      return d;
    }
    const size_t n = h->op == HdrOp::immd ? 0 : h->count;
    if (pos + 1 + n > dw.size()) {
      d.error = error(Code::invalid_argument, "header " + hex(dw[pos]) + " announces " + std::to_string(n) +
                                                  " data dwords but only " + std::to_string(dw.size() - pos - 1) +
                                                  " follow (truncated pushbuffer)");
      d.error_offset = pos;
      return d;
    }
    if (h->op != HdrOp::immd && n == 0) {
      d.error = error(Code::invalid_argument, "header " + hex(dw[pos]) + " has count 0 (nothing to write)");
      d.error_offset = pos;
      return d;
    }
    std::string line;
    const Method* m0 = method_for(map, h->subch, h->method);
    if (h->op != HdrOp::inc) line += std::string(op_name(h->op)) + " ";
    if (h->subch != (m0 ? default_subch(m0->cls) : 0)) line += "subch=" + std::to_string(h->subch) + " ";
    const size_t items = h->op == HdrOp::immd ? 1 : n;
    for (size_t i = 0; i < items; ++i) {
      const uint16_t off = h->op == HdrOp::non_inc   ? h->method
                           : h->op == HdrOp::one_inc ? static_cast<uint16_t>(h->method + (i ? 4 : 0))
                           : h->op == HdrOp::immd    ? h->method
                                                     : static_cast<uint16_t>(h->method + 4 * i);
      const uint32_t data = h->op == HdrOp::immd ? h->count : dw[pos + 1 + i];
      const Method* m = off < 0x4000 ? method_for(map, h->subch, off) : nullptr;
      if (i) line += "; ";
      line += format_item(m, off, data);
      if (m && m->cls == Cls::host && m->offset == 0x000) {  // SET_OBJECT rebinds the subchannel
        const uint32_t cls = data & 0xFFFF;
        if (cls == (kHopperDmaCopyA & 0xFFFF)) map.cls[h->subch] = Cls::copy;
        else map.cls[h->subch].reset();
      }
    }
    d.lines.push_back(std::move(line));
    d.offsets.push_back(pos);
    pos += 1 + n;
  }
  return d;
}

std::string disassemble_text(std::span<const uint32_t> dw) {
  const Disassembly d = disassemble(dw);
  std::string out;
  for (const std::string& l : d.lines) out += l + "\n";
  if (!d.error.ok()) out += "# error at dword " + std::to_string(d.error_offset) + ": " + d.error.message() + "\n";
  return out;
}

std::string describe_methods() {
  std::string out =
      "  header: [inc|noninc|oneinc|immd] [subch=N] class.method key=value ...; class.method ...\n";
  for (const Method& m : methods()) {
    char off[16];
    std::snprintf(off, sizeof off, "0x%03x", m.offset);
    out += "  " + qualified(m) + " (" + off + ")";
    for (const Field& f : m.fields) {
      out += " " + std::string(f.name) + "[" + std::to_string(f.hi) + ":" + std::to_string(f.lo) + "]";
      if (!f.values.empty()) {
        out += "{";
        for (size_t i = 0; i < f.values.size(); ++i) out += (i ? "," : "") + std::string(f.values[i].name);
        out += "}";
      }
    }
    out += "\n      " + std::string(m.summary) + "\n";
  }
  return out;
}

}  // namespace conccl::hopper
