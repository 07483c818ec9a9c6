// packets/hopper_layout.hpp - the one description of every Hopper method:
// class ids, the method header format, and the table of host and copy
// methods (offsets, fields, value names) with the codec for one data dword.
//
// An NVIDIA channel executes a pushbuffer: a stream of method headers, each
// followed by data dwords that are written to methods (32-bit registers) of
// the object bound to a subchannel. Host (PBDMA) methods, at offsets below
// 0x100, work on every subchannel; the copy class HOPPER_DMA_COPY_A (0xC8B5)
// sits on subchannel 4 by convention. The PBDMA finds pushbuffer segments
// through GPFIFO entries (two dwords each) in the channel's GP ring.
//
// As for SDMA (packets/sdma_layout.hpp), every method is one row of a table
// (hopper_layout_table.cpp): its class, byte offset, name, and fields with
// bit ranges and named values. The encoder, decoder, assembler and
// disassembler all work from those rows. Sources, cited next to the table:
//   open-gpu-doc classes/dma-copy/clc8b5.h         (HOPPER_DMA_COPY_A)
//   open-gpu-kernel-modules src/common/sdk/nvidia/inc/class/clc86f.h, clc56f.h
//                                                  (host methods, GP entries,
//                                                   method header formats)
#pragma once

#include <cstdint>
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

// Largest byte count one LAUNCH_DMA moves here: LINE_LENGTH_IN is 32 bits
// (clc8b5.h), and tinygrad's runtime/ops_nv.py copies in pieces of at most
// 2 GiB, as we do.
inline constexpr uint64_t kMaxCopyBytes = 1ull << 31;
// Fills use the remap unit with 4-byte components: LINE_LENGTH_IN counts
// 4-byte elements; pieces of at most 2^31 bytes.
inline constexpr uint64_t kMaxFillBytes = 1ull << 31;
// Copy/semaphore addresses are 57 bits (OFFSET_*_UPPER 24:0, SET_SEMAPHORE_A 24:0).
inline constexpr uint64_t kMaxVirtualAddress = (1ull << 57) - 1;

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
// "copy.launch_dma": a method's class and name, as the text form and the
// error messages write it.
std::string qualified(const Method& m);
// ASCII case-insensitive equality (class, method and value names).
bool iequal(std::string_view a, std::string_view b);

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

}  // namespace conccl::hopper
