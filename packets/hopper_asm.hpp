// packets/hopper_asm.hpp - the text form of Hopper pushbuffers: assembling
// lines into dwords and disassembling dwords into lines, from the method
// table (hopper_layout.hpp).
//
// Text form (sdma-probe asm/dis --gen hopper-ce): one line per method header,
// its methods separated by ';':
//   copy.offset_in_upper upper=0x0; copy.offset_in_lower value=0x1000
//   noninc subch=2 copy.nop parameter=5
//   immd host.nop handle=3
// An optional leading op (inc - the default - noninc, oneinc, immd) and
// subch=N (default: 0 for host methods, 4 for copy methods) describe the
// header. The methods after the first must follow the header's addressing:
// the next offsets for inc, the same method for noninc, first then the next
// for oneinc. Field values are numbers (decimal or 0x-hex) or value names
// (data_transfer_type=non_pipelined); rsvd=0x... keeps bits that no field
// covers, so that assemble(disassemble(x)) == x. A method of a class not
// bound to the subchannel is written `mthd offset=0x... value=0x...`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "conccl/status.hpp"
#include "conccl/packets/hopper_layout.hpp"

namespace conccl::hopper {

// ---- text form --------------------------------------------------------------

// Which class each subchannel holds, for decoding methods >= 0x100.
struct SubchMap {
  std::optional<Cls> cls[kSubchannels];
  static SubchMap defaults();  // subchannel 4 = copy
};

// Parses and encodes one line (a header with its methods); appends its dwords
// to `out`. *produced = false for a blank or comment-only line.
Status assemble_line(std::string_view line, std::vector<uint32_t>* out, bool* produced = nullptr);
// Many lines; stops at the first bad one ("line N: ...").
Result<std::vector<uint32_t>> assemble(std::string_view text);

struct Disassembly {
  std::vector<std::string> lines;  // one per header
  std::vector<size_t> offsets;     // dword offset of each header
  Status error;                    // ok, or what stopped decoding
  size_t error_offset = 0;
};
// Decodes a pushbuffer. SET_OBJECT methods update the subchannel map.
Disassembly disassemble(std::span<const uint32_t> dw, SubchMap map = SubchMap::defaults());
// All lines of disassemble() joined with '\n' (and a trailing '\n').
std::string disassemble_text(std::span<const uint32_t> dw);

// Help text: every method and its fields.
std::string describe_methods();

}  // namespace conccl::hopper
