// packets/sdma_dis.hpp - disassembly that always assembles back.
//
// format_packet (sdma_asm.hpp) prints what a packet's fields decode to; the
// assembler is stricter than the hardware (aligned addresses, per-packet byte
// caps), so for dwords that did not come from asm that text may be refused.
// disassemble_exact picks a text that asm turns into exactly the original
// dwords: the packet itself, another kind that shares its opcode and takes
// the bits as they are, or, as a last resort, the `raw` pseudo-op with the
// decoded text and the reason asm refuses it in a comment.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "conccl/packets/sdma_codec.hpp"

namespace conccl::sdma {

// `words` are exactly the packet's dwords and `p` their decode.
std::string disassemble_exact(Gen g, std::span<const uint32_t> words, const Packet& p);

}  // namespace conccl::sdma
