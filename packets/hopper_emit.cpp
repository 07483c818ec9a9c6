// packets/hopper_emit.cpp - GPFIFO entries and the emitters that write each
// copy-engine command's method headers.
//
// Method offsets and bits from NVIDIA/open-gpu-doc classes/dma-copy/clc8b5.h
// (copy methods) and open-gpu-kernel-modules
// src/common/sdk/nvidia/inc/class/clc86f.h, clc56f.h (host methods, GP entries).
// Usage facts (which fields a copy/fill/release sets) from the UVM driver's
// Hopper CE HAL, kernel-open/nvidia-uvm/uvm_hopper_ce.c, as summarised in
// and tinygrad runtime/ops_nv.py.
#include "packets/hopper_emit.hpp"

namespace conccl::hopper {

// ---- GP entries -------------------------------------------------------------

Result<uint64_t> encode_gp_entry(const GpEntry& e) {
  if (e.addr & 3) return error(Code::invalid_argument, "GP entry address " + hex(e.addr) + " is not 4-byte aligned");
  if (e.addr > kMaxPushbufferAddress)
    return error(Code::out_of_range, "GP entry address " + hex(e.addr) +
                                         " exceeds 40 bits (GET 31:2 + GET_HI 7:0); keep pushbuffers below 1 TiB");
  if (e.dwords > kMaxSegmentDwords)
    return error(Code::out_of_range, "GP entry length " + std::to_string(e.dwords) +
                                         " dwords exceeds LENGTH 30:10 (max 2097151)");
  const uint32_t e0 = static_cast<uint32_t>(e.addr & 0xFFFFFFFCu) | (e.conditional_fetch ? 1u : 0u);
  const uint32_t e1 = static_cast<uint32_t>((e.addr >> 32) & 0xFF) | (e.subroutine ? 1u << 9 : 0u) |
                      (e.dwords << 10) | (e.sync_wait ? 1u << 31 : 0u);
  return (uint64_t(e1) << 32) | e0;
}

GpEntry decode_gp_entry(uint64_t raw) {
  const uint32_t e0 = static_cast<uint32_t>(raw), e1 = static_cast<uint32_t>(raw >> 32);
  GpEntry e;
  e.addr = (uint64_t(e1 & 0xFF) << 32) | (e0 & 0xFFFFFFFCu);
  e.conditional_fetch = e0 & 1;
  e.subroutine = (e1 >> 9) & 1;
  e.dwords = (e1 >> 10) & 0x1FFFFF;
  e.sync_wait = (e1 >> 31) & 1;
  return e;
}

std::string format_gp_entry(const GpEntry& e) {
  std::string s = "gp addr=" + hex(e.addr) + " dwords=" + std::to_string(e.dwords);
  s += e.subroutine ? " level=subroutine" : " level=main";
  if (e.sync_wait) s += " sync=wait";
  if (e.conditional_fetch) s += " fetch=conditional";
  return s;
}

Status check_va(const char* what, uint64_t va, uint64_t bytes) {
  if (va > kMaxVirtualAddress || bytes > kMaxVirtualAddress - va + 1)
    return error(Code::out_of_range, std::string(what) + " range " + hex(va) + "+" + std::to_string(bytes) +
                                         " exceeds the copy engine's 57-bit address space");
  return Status();
}

namespace {
uint32_t lo32(uint64_t v) { return static_cast<uint32_t>(v); }
uint32_t hi32(uint64_t v) { return static_cast<uint32_t>(v >> 32); }
}  // namespace

// ---- emitters ------------------------------------------------------------------

size_t put_copy_piece(uint32_t* o, uint64_t dst, uint64_t src, uint64_t len, bool pipelined) {
  o[0] = inc_header(kCopySubchannel, 0x400, 4);  // OFFSET_IN_UPPER, _LOWER, OFFSET_OUT_UPPER, _LOWER
  o[1] = hi32(src);
  o[2] = lo32(src);
  o[3] = hi32(dst);
  o[4] = lo32(dst);
  o[5] = inc_header(kCopySubchannel, 0x418, 1);  // LINE_LENGTH_IN
  o[6] = lo32(len);
  o[7] = inc_header(kCopySubchannel, 0x300, 1);  // LAUNCH_DMA
  o[8] = (pipelined ? kLdTransferPipelined : kLdTransferNonPipelined) | kLdSrcPitch | kLdDstPitch;
  return kCopyPieceDwords;
}

size_t put_copy_piece_add(uint32_t* o, uint64_t dst, uint64_t src, uint64_t len, bool pipelined, uint64_t sem,
                          uint64_t delta) {
  o[0] = inc_header(kCopySubchannel, 0x240, 4);  // SET_SEMAPHORE_A, _B, _PAYLOAD, _PAYLOAD_UPPER
  o[1] = hi32(sem);
  o[2] = lo32(sem);
  o[3] = lo32(delta);
  o[4] = hi32(delta);
  put_copy_piece(o + 5, dst, src, len, pipelined);
  o[5 + kCopyPieceDwords - 1] |= kLdFlush | kLdSemNoTs | kLdTwoWord | kLdSemReduce | kLdSemIadd | kLdSemUnsigned;
  return kCopyAddDwords;
}

size_t put_fill_setup(uint32_t* o, uint32_t value) {
  // SET_REMAP_CONST_B = value; SET_REMAP_COMPONENTS: DST_X = CONST_B (5),
  // COMPONENT_SIZE = FOUR (3) at 17:16, NUM_DST_COMPONENTS = ONE (0).
  o[0] = inc_header(kCopySubchannel, 0x704, 2);
  o[1] = value;
  o[2] = (3u << 16) | 5u;
  return kFillSetupDwords;
}

size_t put_fill_piece(uint32_t* o, uint64_t dst, uint64_t len, bool pipelined) {
  o[0] = inc_header(kCopySubchannel, 0x408, 2);  // OFFSET_OUT_UPPER, _LOWER
  o[1] = hi32(dst);
  o[2] = lo32(dst);
  o[3] = inc_header(kCopySubchannel, 0x418, 1);  // LINE_LENGTH_IN: 4-byte components
  o[4] = lo32(len / 4);
  o[5] = inc_header(kCopySubchannel, 0x300, 1);
  o[6] = (pipelined ? kLdTransferPipelined : kLdTransferNonPipelined) | kLdSrcPitch | kLdDstPitch | kLdRemap;
  return kFillPieceDwords;
}

size_t put_release(uint32_t* o, uint64_t addr, uint64_t value, bool timestamp, bool interrupt) {
  o[0] = inc_header(kCopySubchannel, 0x240, 4);  // SET_SEMAPHORE_A, _B, _PAYLOAD, _PAYLOAD_UPPER
  o[1] = hi32(addr);
  o[2] = lo32(addr);
  o[3] = lo32(value);
  o[4] = hi32(value);
  o[5] = inc_header(kCopySubchannel, 0x300, 1);  // 0x08000014 with timestamp, 0x0800000C without
  o[6] = kLdFlush | (timestamp ? kLdSemWithTs : kLdSemNoTs) | kLdTwoWord | (interrupt ? kLdIntrNonBlocking : 0u);
  return kReleaseDwords;
}

size_t put_release_add(uint32_t* o, uint64_t addr, uint64_t delta) {
  put_release(o, addr, delta, false, false);
  o[kReleaseDwords - 1] |= kLdSemReduce | kLdSemIadd | kLdSemUnsigned;
  return kReleaseDwords;
}

size_t put_host_semaphore(uint32_t* o, uint64_t addr, uint64_t payload, uint32_t execute) {
  o[0] = kHostSemHeader;  // SEM_ADDR_LO, SEM_ADDR_HI, SEM_PAYLOAD_LO, SEM_PAYLOAD_HI, SEM_EXECUTE
  o[1] = lo32(addr);
  o[2] = hi32(addr);
  o[3] = lo32(payload);
  o[4] = hi32(payload);
  o[5] = execute;
  return kHostSemDwords;
}

size_t put_set_object(uint32_t* o, uint32_t cls) {
  o[0] = inc_header(kCopySubchannel, 0x000, 1);  // SET_OBJECT
  o[1] = cls & 0xFFFF;
  return kSetObjectDwords;
}

size_t put_interrupt(uint32_t* o) {
  o[0] = inc_header(0, 0x078, 1);  // WFI, scope CURRENT_SCG_TYPE
  o[1] = 0;
  o[2] = inc_header(0, 0x020, 1);  // NON_STALL_INTERRUPT
  o[3] = 0;
  return kInterruptDwords;
}

}  // namespace conccl::hopper
