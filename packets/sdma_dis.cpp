// packets/sdma_dis.cpp - disassembly that always assembles back.
#include "packets/sdma_dis.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "packets/sdma_asm.hpp"

namespace conccl::sdma {

namespace {

// True when `text` assembles to exactly `words`; otherwise *why says why not.
bool assembles_to(Gen g, const std::string& text, std::span<const uint32_t> words, Status* why) {
  std::vector<uint32_t> again;
  Status st = assemble_line(g, text, &again);
  if (!st.ok()) {
    *why = st;
    return false;
  }
  if (again.size() != words.size() || !std::equal(again.begin(), again.end(), words.begin())) {
    *why = error(Code::internal, "it assembles to other dwords");
    return false;
  }
  return true;
}

}  // namespace

std::string disassemble_exact(Gen g, std::span<const uint32_t> words, const Packet& p) {
  const std::string text = format_packet(p);
  Status why;
  if (assembles_to(g, text, words, &why)) return text;
  // A kind that shares the opcode may hold these bits as they are (ATOMIC
  // op=47 at a 4- but not 8-byte aligned address: atomic, not atomic_add64).
  const PacketDef& def = packet_def(p.pkt);
  for (const PacketDef& other : packet_defs()) {
    if (other.pkt == p.pkt || other.op != def.op) continue;
    Result<Packet> q = decode_as(g, other.pkt, words);
    if (!q.ok() || q->dwords != words.size()) continue;
    const std::string alt = format_packet(*q);
    Status ignored;
    if (assembles_to(g, alt, words, &ignored)) return alt;
  }
  std::string raw = "raw data=";
  char buf[16];
  for (size_t i = 0; i < words.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s0x%08x", i ? "," : "", words[i]);
    raw += buf;
  }
  return raw + "  # " + text + "  (asm refuses it: " + why.message() + ")";
}

}  // namespace conccl::sdma
