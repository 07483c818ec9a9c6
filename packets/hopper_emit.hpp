// packets/hopper_emit.hpp - the Hopper copy-engine commands as dwords: GPFIFO
// entries, and the emitters that write each vocabulary command's method
// headers (copy, fill, release, host semaphore, interrupt, SET_OBJECT) with
// the LAUNCH_DMA and SEM_EXECUTE bits they use (clc8b5.h, clc86f.h, clc56f.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "conccl/status.hpp"
#include "conccl/packets/hopper_layout.hpp"

namespace conccl::hopper {

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
inline constexpr uint32_t kLdSemIadd = 5u << 14;              // SEMAPHORE_REDUCTION 17:14 = IADD
inline constexpr uint32_t kLdSemUnsigned = 1u << 18;          // SEMAPHORE_REDUCTION_SIGN 18:18 = UNSIGNED
inline constexpr uint32_t kLdSemReduce = 1u << 19;            // SEMAPHORE_REDUCTION_ENABLE 19:19

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
// SET_SEMAPHORE_A/B/PAYLOAD/PAYLOAD_UPPER (1+4) before a copy piece whose LAUNCH_DMA adds.
inline constexpr size_t kCopyAddDwords = 5 + kCopyPieceDwords;
inline constexpr size_t kReleaseDwords = 7;    // SET_SEMAPHORE_A/B/PAYLOAD/PAYLOAD_UPPER (1+4), LAUNCH_DMA (2)
inline constexpr size_t kHostSemDwords = 6;    // SEM_ADDR_LO .. SEM_EXECUTE (1+5)
// The header of those five methods, incrementing from SEM_ADDR_LO (0x05C).
inline constexpr uint32_t kHostSemHeader = inc_header(0, 0x05C, 5);
inline constexpr size_t kInterruptDwords = 4;  // WFI (2), NON_STALL_INTERRUPT (2)
inline constexpr size_t kSetObjectDwords = 2;  // SET_OBJECT (1+1)

// One LAUNCH_DMA copy piece (len <= kMaxCopyBytes). The first piece of a
// copy is NON_PIPELINED (waits for earlier work), later ones PIPELINED.
size_t put_copy_piece(uint32_t* out, uint64_t dst, uint64_t src, uint64_t len, bool pipelined);
// A copy piece whose LAUNCH_DMA then adds `delta` to the 64-bit value at
// `sem` (the copy engine's own semaphore reduction: IADD, unsigned, two-word
// payload, after the piece's writes are flushed), kCopyAddDwords.
size_t put_copy_piece_add(uint32_t* out, uint64_t dst, uint64_t src, uint64_t len, bool pipelined, uint64_t sem,
                          uint64_t delta);
// Remap-unit setup for a 32-bit fill of `value`, then pieces of <= kMaxFillBytes.
size_t put_fill_setup(uint32_t* out, uint32_t value);
size_t put_fill_piece(uint32_t* out, uint64_t dst, uint64_t len, bool pipelined);
// CE semaphore release after earlier work (FLUSH): 64-bit value at addr, and
// with `timestamp` the GPU ns time at addr+8; `interrupt` adds a non-stall
// interrupt once it is written.
size_t put_release(uint32_t* out, uint64_t addr, uint64_t value, bool timestamp, bool interrupt);
// CE semaphore reduction after earlier work (FLUSH), no transfer: adds the
// 64-bit `delta` at addr (IADD, unsigned, two-word), kReleaseDwords.
size_t put_release_add(uint32_t* out, uint64_t addr, uint64_t delta);
// Host semaphore method: SEM_ADDR_LO/HI, SEM_PAYLOAD_LO/HI, SEM_EXECUTE = execute.
size_t put_host_semaphore(uint32_t* out, uint64_t addr, uint64_t payload, uint32_t execute);
// Host WFI then NON_STALL_INTERRUPT: the interrupt follows everything before it.
size_t put_interrupt(uint32_t* out);
// SET_OBJECT(cls) on the copy subchannel: a channel's first submission.
size_t put_set_object(uint32_t* out, uint32_t cls = kHopperDmaCopyA);

// Number of LAUNCH_DMA pieces a copy of `bytes` is cut into.
inline uint64_t copy_pieces(uint64_t bytes) { return (bytes + kMaxCopyBytes - 1) / kMaxCopyBytes; }

}  // namespace conccl::hopper
