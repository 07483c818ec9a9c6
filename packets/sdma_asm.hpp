// packets/sdma_asm.hpp - the text form of SDMA packets (sdma-probe asm/dis).
//
// One packet per line: `OP key=value ...`; values decimal or 0x-hex (negative
// decimal for 64-bit two's-complement fields); `data=` takes comma-separated
// dwords; `rsvdN=` sets bits of dword N outside every defined field (the
// disassembler prints it so that asm(dis(x)) == x); `#` starts a comment.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "conccl/status.hpp"
#include "conccl/packets/sdma_codec.hpp"

namespace conccl::sdma {

// Parses one line. An empty or comment-only line gives std::nullopt.
// Errors name the op or key at fault; callers add the line number.
Result<std::optional<Packet>> parse_line(Gen g, std::string_view line);

// Parses and encodes one line; appends its dwords to `out`.
// Returns false in *produced for blank lines. Besides the packets, the
// pseudo-op `raw data=W,W,...` emits its dwords unchecked (the disassembler's
// form for a packet that the assembler's checks would refuse, sdma_dis.hpp).
Status assemble_line(Gen g, std::string_view line, std::vector<uint32_t>* out,
                     bool* produced = nullptr);

// Assembles many lines; stops at the first bad one ("line N: ...").
Result<std::vector<uint32_t>> assemble(Gen g, std::string_view text);

// "copy src=0x1000 dst=0x2000 bytes=4096": every required field and every
// non-zero optional one, in layout order.
std::string format_packet(const Packet& p);

// "00000001 00000fff ..." - 8 lowercase hex digits, single spaces.
std::string format_dwords(std::span<const uint32_t> dw);

// Parses dwords separated by whitespace (optional 0x prefixes); `#` comments.
Result<std::vector<uint32_t>> parse_dwords(std::string_view text);

// Parses a number: decimal, 0x-hex, or (allow_negative) a negative decimal
// giving its 64-bit two's complement.
bool parse_u64(std::string_view s, uint64_t* out, bool allow_negative = false);

// Help text: every packet and its keys for one generation.
std::string describe_packets(Gen g);

}  // namespace conccl::sdma
