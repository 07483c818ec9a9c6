// packets/hopper_ce.hpp - NVIDIA Hopper copy-engine pushbuffers ("hopper-ce").
//
// An NVIDIA channel executes a pushbuffer: a stream of method headers, each
// followed by data dwords that are written to methods (32-bit registers) of
// the object bound to a subchannel. Host (PBDMA) methods, at offsets below
// 0x100, work on every subchannel; the copy class HOPPER_DMA_COPY_A (0xC8B5)
// sits on subchannel 4 by convention. The PBDMA finds pushbuffer segments
// through GPFIFO entries (two dwords each) in the channel's GP ring.
//
// As for SDMA (packets/sdma_layout.hpp), every method is one row of a table
// (hopper_ce.cpp): its class, byte offset, name, and fields with bit ranges
// and named values. The encoder, decoder, assembler and disassembler all work
// from those rows. Sources, cited next to the table:
//   open-gpu-doc classes/dma-copy/clc8b5.h         (HOPPER_DMA_COPY_A)
//   open-gpu-kernel-modules src/common/sdk/nvidia/inc/class/clc86f.h, clc56f.h
//                                                  (host methods, GP entries,
//                                                   method header formats)
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

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "conccl/status.hpp"

namespace conccl::hopper {

// The generation name the CLI uses for this format.
inline constexpr std::string_view kGenName = "hopper-ce";

// Class ids (open-gpu-kernel-modules src/common/sdk/nvidia/inc/class/*.h).
inline constexpr uint32_t kHopperDmaCopyA = 0xC8B5;        // clc8b5.h HOPPER_DMA_COPY_A
inline constexpr uint32_t kHopperChannelGpfifoA = 0xC86F;  // clc86f.h HOPPER_CHANNEL_GPFIFO_A
inline constexpr uint32_t kAmpereChannelGpfifoA = 0xC56F;  // clc56f.h AMPERE_CHANNEL_GPFIFO_A
inline constexpr uint32_t kHopperUsermodeA = 0xC661;       // clc661.h HOPPER_USERMODE_A
inline constexpr uint8_t kCopySubchannel = 4;              // tinygrad, UVM: CE on subchannel 4
inline constexpr uint8_t kSubchannels = 8;                 // clc56f.h NVC56F_NUMBER_OF_SUBCHANNELS

// Method header (clc56f.h NVC56F_DMA_*): SEC_OP 31:29, COUNT (or immediate
// data) 28:16, SUBCHANNEL 15:13, ADDRESS (method offset / 4) 11:0.
enum class HdrOp : uint8_t {
  inc = 1,      // NVC56F_DMA_SEC_OP_INC_METHOD: data[i] -> method + 4*i
  non_inc = 3,  // NVC56F_DMA_SEC_OP_NON_INC_METHOD: every data dword -> method
  immd = 4,     // NVC56F_DMA_SEC_OP_IMMD_DATA_METHOD: 13-bit data in the header
  one_inc = 5,  // NVC56F_DMA_SEC_OP_ONE_INC: data[0] -> method, rest -> method + 4
};
inline constexpr uint32_t kMaxHeaderCount = 0x1FFF;  // COUNT 28:16
inline constexpr uint32_t kMaxImmediate = 0x1FFF;    // IMMD_DATA 28:16

struct Header {
  HdrOp op = HdrOp::inc;
  uint8_t subch = 0;
  uint16_t method = 0;  // byte offset (multiple of 4, < 0x4000)
  uint16_t count = 0;   // data dwords that follow; for immd: the immediate data
  bool operator==(const Header&) const = default;
};

// `(sec_op << 29) | (count << 16) | (subch << 13) | (method >> 2)`; for inc
// that is the usual `(2 << 28) | ...`. Errors name the field out of range.
Result<uint32_t> encode_header(const Header& h);
constexpr uint32_t inc_header(uint8_t subch, uint16_t method, uint16_t count) {
  return (2u << 28) | (uint32_t(count) << 16) | (uint32_t(subch) << 13) | (uint32_t(method) >> 2);
}
// Errors for opcodes this decoder does not implement (grp0/grp2 subdevice
// masks, END_PB_SEGMENT, reserved).
Result<Header> decode_header(uint32_t dw);

// ---- method table -----------------------------------------------------------

enum class Cls : uint8_t { host, copy };
std::string_view cls_name(Cls c);  // "host", "copy"

struct EnumVal {
  std::string_view name;
  uint32_t value;
};

struct Field {
  std::string_view name;
  uint8_t hi, lo;                  // bit range in the data dword
  std::span<const EnumVal> values;  // named values (may be empty)
  bool hex = false;                 // printed in hex
  bool in_place = false;            // value is the dword's bits in place (an address
                                    // with its low bits zero), not shifted down
  constexpr uint32_t width() const { return uint32_t(hi - lo + 1); }
  constexpr uint32_t mask() const {
    return width() >= 32 ? 0xFFFFFFFFu : ((1u << width()) - 1u) << lo;
  }
};

struct Method {
  Cls cls;
  uint16_t offset;
  std::string_view name;  // lower case, e.g. "launch_dma"
  std::span<const Field> fields;
  std::string_view summary;
  uint32_t defined_mask() const;
};

std::span<const Method> methods();
const Method* find_method(Cls cls, uint16_t offset);
// "copy.launch_dma", "host.sem_execute" (case-insensitive).
const Method* find_method(std::string_view qualified_name);

struct FieldValue {
  uint8_t field;  // index into Method::fields
  uint32_t value;
};

// Encodes one data dword. Checks every value against its field's width.
Result<uint32_t> encode_method(const Method& m, std::span<const FieldValue> fields,
                               uint32_t reserved = 0);
struct DecodedMethod {
  std::vector<FieldValue> fields;  // only non-zero fields, in table order
  uint32_t reserved = 0;           // bits no field covers
};
DecodedMethod decode_method(const Method& m, uint32_t data);

// ---- GPFIFO entries ---------------------------------------------------------
// clc86f.h NVC86F_GP_ENTRY0_GET 31:2, NVC86F_GP_ENTRY1_GET_HI 7:0 (address
// bits 39:32), _LEVEL 9:9, _LENGTH 30:10 (dwords), _SYNC 31:31; ENTRY0_FETCH 0:0.
// Pushbuffer addresses are therefore limited to 40 bits.
struct GpEntry {
  uint64_t addr = 0;      // pushbuffer segment GPU VA, 4-byte aligned, < 2^40
  uint32_t dwords = 0;    // segment length, < 2^21
  bool subroutine = true; // LEVEL (tinygrad uses SUBROUTINE)
  bool sync_wait = false; // SYNC
  bool conditional_fetch = false;
  bool operator==(const GpEntry&) const = default;
};
inline constexpr uint64_t kMaxPushbufferAddress = (1ull << 40) - 1;
inline constexpr uint32_t kMaxSegmentDwords = (1u << 21) - 1;
Result<uint64_t> encode_gp_entry(const GpEntry& e);
GpEntry decode_gp_entry(uint64_t raw);
std::string format_gp_entry(const GpEntry& e);

// ---- command list: the copy-engine vocabulary --------------------------------
//
// The same vocabulary as the SDMA CommandBuffer (packets only, no device):
// copy, fill, signal (64-bit release with timestamp), wait (64-bit >=),
// timestamp. Every command appends whole method headers or nothing.

// Largest byte count one LAUNCH_DMA moves here: LINE_LENGTH_IN is 32 bits
// (clc8b5.h), and tinygrad's runtime/ops_nv.py copies in pieces of at most
// 2 GiB, as we do.
inline constexpr uint64_t kMaxCopyBytes = 1ull << 31;
// Fills use the remap unit with 4-byte components: LINE_LENGTH_IN counts
// 4-byte elements; pieces of at most 2^31 bytes.
inline constexpr uint64_t kMaxFillBytes = 1ull << 31;
// Copy/semaphore addresses are 57 bits (OFFSET_*_UPPER 24:0, SET_SEMAPHORE_A 24:0).
inline constexpr uint64_t kMaxVirtualAddress = (1ull << 57) - 1;
// ok, or Code::out_of_range naming `what` when [va, va+bytes) leaves the
// copy engine's 57-bit address space.
Status check_va(const char* what, uint64_t va, uint64_t bytes);
// The CE writes payload at +0 and the timestamp at +8 of a 16-byte slot.
inline constexpr uint32_t kSemaphoreSlotBytes = 16;

// Semaphore acquire compare (clc56f.h NVC56F_SEM_EXECUTE_OPERATION_*).
enum class Acquire : uint8_t { circ_geq = 3, strict_geq = 2, eq = 0 };

// ---- emitters: pure functions from fields to dwords ------------------------
//
// Each writes one command's method headers into `out` (room for the count the
// matching constant gives) and returns the dwords written. The vocabulary's
// Hopper lowering (src/commands/lower_hopper.cpp) and the Hopper encoder
// (src/commands/hopper_methods.cpp) both use them, so an encoding is written
// once. Arguments are not checked here (the lowering and the encoder check
// them).

// LAUNCH_DMA bits (clc8b5.h NVC8B5_LAUNCH_DMA_*).
inline constexpr uint32_t kLdTransferPipelined = 1u << 0;     // DATA_TRANSFER_TYPE 1:0 = PIPELINED
inline constexpr uint32_t kLdTransferNonPipelined = 2u << 0;  // = NON_PIPELINED
inline constexpr uint32_t kLdFlush = 1u << 2;                 // FLUSH_ENABLE 2:2 (FLUSH_TYPE 25:25 = SYS)
inline constexpr uint32_t kLdSemNoTs = 1u << 3;               // SEMAPHORE_TYPE 4:3 = RELEASE_..._NO_TIMESTAMP
inline constexpr uint32_t kLdSemWithTs = 2u << 3;             // = RELEASE_..._WITH_TIMESTAMP
inline constexpr uint32_t kLdIntrNonBlocking = 2u << 5;       // INTERRUPT_TYPE 6:5 = NON_BLOCKING (clc7b5.h)
inline constexpr uint32_t kLdSrcPitch = 1u << 7;              // SRC_MEMORY_LAYOUT 7:7 = PITCH
inline constexpr uint32_t kLdDstPitch = 1u << 8;              // DST_MEMORY_LAYOUT 8:8 = PITCH
inline constexpr uint32_t kLdRemap = 1u << 10;                // REMAP_ENABLE 10:10
inline constexpr uint32_t kLdTwoWord = 1u << 27;              // SEMAPHORE_PAYLOAD_SIZE 27:27 = TWO_WORD

// Host SEM_EXECUTE (clc56f.h NVC56F_SEM_EXECUTE_*; clc86f.h keeps the bits).
inline constexpr uint32_t kSemOperationMask = 7;      // OPERATION 2:0
inline constexpr uint32_t kSemOpRelease = 1;
inline constexpr uint32_t kSemOpReduction = 6;
// ACQUIRE_SWITCH_TSG 12:12 = EN (clc86f.h NVC86F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG):
// when an acquire fails, the PBDMA switches to another TSG instead of keeping
// this one resident and retrying until its timeslice expires.
inline constexpr uint32_t kSemAcquireSwitchTsg = 1u << 12;
inline constexpr uint32_t kSemReleaseWfi = 1u << 20;  // RELEASE_WFI_EN: after the engine is idle + SYSMEMBAR
inline constexpr uint32_t kSemPayload64 = 1u << 24;   // PAYLOAD_SIZE_64BIT
inline constexpr uint32_t kSemReduceIadd = 5u << 27;  // REDUCTION 30:27 = IADD
inline constexpr uint32_t kSemReduceUnsigned = 1u << 31;  // REDUCTION_FORMAT = UNSIGNED
// 64-bit unsigned IADD, after everything before it completed. GA100's host
// manual (open-gpu-doc manuals/ampere/ga100/dev_pbdma.ref.txt, SEM_EXECUTE)
// allows 64-bit IADD only unsigned (signed traps; 64-bit INC/DEC are
// unsupported), performed by L2; RELEASE_WFI waits until the engine is idle
// and issues a SYSMEMBAR before the update.
inline constexpr uint32_t kSemExecuteAdd64 =
    kSemOpReduction | kSemReleaseWfi | kSemPayload64 | kSemReduceIadd | kSemReduceUnsigned;
inline constexpr uint32_t kSemExecuteRelease64 = kSemOpRelease | kSemReleaseWfi | kSemPayload64;

inline constexpr size_t kCopyPieceDwords = 9;  // OFFSET_IN/OUT (1+4), LINE_LENGTH_IN (2), LAUNCH_DMA (2)
inline constexpr size_t kFillSetupDwords = 3;  // SET_REMAP_CONST_B + SET_REMAP_COMPONENTS (1+2)
inline constexpr size_t kFillPieceDwords = 7;  // OFFSET_OUT (1+2), LINE_LENGTH_IN (2), LAUNCH_DMA (2)
inline constexpr size_t kReleaseDwords = 7;    // SET_SEMAPHORE_A/B/PAYLOAD/PAYLOAD_UPPER (1+4), LAUNCH_DMA (2)
inline constexpr size_t kHostSemDwords = 6;    // SEM_ADDR_LO .. SEM_EXECUTE (1+5)
// The header of those five methods, incrementing from SEM_ADDR_LO (0x05C).
inline constexpr uint32_t kHostSemHeader = inc_header(0, 0x05C, 5);
inline constexpr size_t kInterruptDwords = 4;  // WFI (2), NON_STALL_INTERRUPT (2)
inline constexpr size_t kSetObjectDwords = 2;  // SET_OBJECT (1+1)

// One LAUNCH_DMA copy piece (len <= kMaxCopyBytes). The first piece of a
// copy is NON_PIPELINED (waits for earlier work), later ones PIPELINED.
size_t put_copy_piece(uint32_t* out, uint64_t dst, uint64_t src, uint64_t len, bool pipelined);
// Remap-unit setup for a 32-bit fill of `value`, then pieces of <= kMaxFillBytes.
size_t put_fill_setup(uint32_t* out, uint32_t value);
size_t put_fill_piece(uint32_t* out, uint64_t dst, uint64_t len, bool pipelined);
// CE semaphore release after earlier work (FLUSH): 64-bit value at addr, and
// with `timestamp` the GPU ns time at addr+8; `interrupt` adds a non-stall
// interrupt once it is written.
size_t put_release(uint32_t* out, uint64_t addr, uint64_t value, bool timestamp, bool interrupt);
// Host semaphore method: SEM_ADDR_LO/HI, SEM_PAYLOAD_LO/HI, SEM_EXECUTE = execute.
size_t put_host_semaphore(uint32_t* out, uint64_t addr, uint64_t payload, uint32_t execute);
// Host WFI then NON_STALL_INTERRUPT: the interrupt follows everything before it.
size_t put_interrupt(uint32_t* out);
// SET_OBJECT(cls) on the copy subchannel: a channel's first submission.
size_t put_set_object(uint32_t* out, uint32_t cls = kHopperDmaCopyA);

// Number of LAUNCH_DMA pieces a copy of `bytes` is cut into.
inline uint64_t copy_pieces(uint64_t bytes) { return (bytes + kMaxCopyBytes - 1) / kMaxCopyBytes; }

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
