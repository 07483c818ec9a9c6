// src/backends/emu/execute_hopper.cpp - what Hopper copy-engine and host
// methods do to emulated memory, one method write at a time.
//
// Method offsets and fields: open-gpu-doc classes/dma-copy/clc8b5.h
// (HOPPER_DMA_COPY_A) and open-gpu-kernel-modules
// src/common/sdk/nvidia/inc/class/clc86f.h / clc56f.h (host methods), as
// tabled in packets/hopper_layout_table.cpp. Semaphore rules from open-gpu-doc
// manuals/ampere/ga100/dev_pbdma.ref.txt (SEM_EXECUTE): 64-bit operations
// need 8-byte aligned addresses and timestamps 16-byte ones; a 64-bit
// reduction may only be an unsigned IADD (signed IADD and 64-bit INC/DEC trap
// on hardware, so they fault here too). Every address goes through
// Node::translate: an address outside every arena is an MMU fault, which on
// hardware kills the channel (an RC error), never an access to host memory.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "backends/emu/node.hpp"
#include "packets/hopper_ce.hpp"

namespace conccl::emu {

namespace {

std::string method_name(hopper::Cls cls, uint16_t mthd) {
  const hopper::Method* m = hopper::find_method(cls, mthd);
  return std::string(hopper::cls_name(cls)) + "." + (m ? std::string(m->name) : "method " + hex(mthd));
}

template <typename T>
T* mem(MethodContext& ctx, uint64_t va, uint64_t bytes, const char* what, std::string* err) {
  void* p = ctx.node->translate(va, bytes);
  if (!p)
    *err = std::string("MMU fault: ") + what + " [" + hex(va) + ", +" + std::to_string(bytes) +
           ") is outside every mapping of the emulated node (on hardware: RC error, the channel is dead)";
  return static_cast<T*>(p);
}

// Writes a semaphore payload (32 or 64 bit) and, with a timestamp, the time at +8.
ExecOutcome sem_write(MethodContext& ctx, uint64_t addr, uint64_t value, bool two_word, bool timestamp,
                      const char* what) {
  std::string err;
  if (addr & (timestamp ? 15 : two_word ? 7 : 3))
    return exec_fault(std::string(what) + ": address " + hex(addr) + " must be " + (timestamp ? "16" : two_word ? "8" : "4") +
                 "-byte aligned");
  void* p = mem<void>(ctx, addr, timestamp ? 16 : two_word ? 8 : 4, what, &err);
  if (!p) return exec_fault(err);
  ExecOutcome out;
  if (ctx.drop_completion) {
    out.dropped = true;
    return out;
  }
  if (timestamp) std::atomic_ref<uint64_t>(static_cast<uint64_t*>(p)[1]).store(engine_now_ns(), std::memory_order_release);
  if (two_word) std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(p)).store(value, std::memory_order_release);
  else std::atomic_ref<uint32_t>(*static_cast<uint32_t*>(p)).store(static_cast<uint32_t>(value), std::memory_order_release);
  out.wrote_memory = true;
  return out;
}

template <typename T>
bool reduce(uint32_t op, bool is_unsigned, T* p, T operand) {
  std::atomic_ref<T> a(*p);
  using S = std::make_signed_t<T>;
  T old = a.load(std::memory_order_acquire);
  for (;;) {
    T next;
    switch (op) {
      case 0: next = is_unsigned ? std::min(old, operand) : T(std::min(S(old), S(operand))); break;  // IMIN
      case 1: next = is_unsigned ? std::max(old, operand) : T(std::max(S(old), S(operand))); break;  // IMAX
      case 2: next = old ^ operand; break;                                                          // IXOR
      case 3: next = old & operand; break;                                                          // IAND
      case 4: next = old | operand; break;                                                          // IOR
      case 5: next = old + operand; break;                                                          // IADD
      case 6: next = old >= operand ? 0 : old + 1; break;                                           // INC (wrapping)
      case 7: next = (old == 0 || old > operand) ? operand : old - 1; break;                        // DEC (wrapping)
      default: return false;
    }
    if (a.compare_exchange_weak(old, next, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
  }
}

// A checked reduction (op `red`, 4 or 8 bytes) at addr, then the time at
// addr+8 with `timestamp`: what the host's SEM_EXECUTE REDUCTION and the copy
// engine's LAUNCH_DMA semaphore reduction both do once their fields passed.
ExecOutcome apply_reduction(MethodContext& ctx, uint64_t addr, uint64_t operand, bool is64, uint32_t red,
                            bool is_unsigned, bool timestamp, const char* what) {
  std::string err;
  void* p = mem<void>(ctx, addr, is64 ? 8 : 4, what, &err);
  if (!p) return exec_fault(err);
  ExecOutcome out;
  if (ctx.drop_completion) {
    out.dropped = true;
    return out;
  }
  if (is64) reduce<uint64_t>(red, is_unsigned, static_cast<uint64_t*>(p), operand);
  else reduce<uint32_t>(red, is_unsigned, static_cast<uint32_t*>(p), uint32_t(operand));
  if (timestamp) {
    if (uint64_t* t = mem<uint64_t>(ctx, addr + 8, 8, "semaphore timestamp", &err))
      std::atomic_ref<uint64_t>(*t).store(engine_now_ns(), std::memory_order_release);
    else return exec_fault(err);
  }
  out.wrote_memory = true;
  return out;
}

ExecOutcome sem_execute(MethodContext& ctx, uint32_t data) {
  EmuChannel& c = *ctx.ch;
  const uint64_t addr = (uint64_t(c.host.addr_hi & 0x1FFFFFF) << 32) | (c.host.addr_lo & ~3u);
  const uint64_t payload = (uint64_t(c.host.payload_hi) << 32) | c.host.payload_lo;
  const uint32_t op = data & 7;
  const bool is64 = (data >> 24) & 1, ts = (data >> 25) & 1;
  // ACQUIRE_SWITCH_TSG (bit 12, set by the vocabulary's waits) only tells the
  // PBDMA to switch to another TSG while the acquire fails; the emulator has
  // no TSGs (a blocked channel already lets the others run), so it is accepted
  // and ignored.
  std::string err;
  if (is64 && (addr & 7)) return exec_fault("sem_execute: a 64-bit semaphore at " + hex(addr) + " must be 8-byte aligned");
  switch (op) {
    case 0:    // ACQUIRE: == payload
    case 2:    // ACQ_STRICT_GEQ: unsigned >=
    case 3: {  // ACQ_CIRC_GEQ: (signed)(value - payload) >= 0
      const void* p = mem<const void>(ctx, addr, is64 ? 8 : 4, "semaphore acquire", &err);
      if (!p) return exec_fault(err);
      const uint64_t v = is64 ? std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(const_cast<void*>(p))).load(std::memory_order_acquire)
                              : std::atomic_ref<uint32_t>(*static_cast<uint32_t*>(const_cast<void*>(p))).load(std::memory_order_acquire);
      const uint64_t want = is64 ? payload : uint32_t(payload);
      bool ok;
      if (op == 0) ok = v == want;
      else if (op == 2) ok = v >= want;
      else ok = is64 ? int64_t(v - want) >= 0 : int32_t(uint32_t(v) - uint32_t(want)) >= 0;
      ExecOutcome out;
      if (ok) return out;
      out.result = ExecResult::blocked;
      out.wait.addr = addr;
      out.wait.target = want;
      out.wait.seen = v;
      out.wait.mask = is64 ? ~0ull : 0xFFFFFFFFull;
      // ACQUIRE waits for ==; ACQ_STRICT_GEQ for >=, and ACQ_CIRC_GEQ for >=
      // modulo wrap-around, which the status shows as >=.
      out.wait.compare = op == 0 ? EngineStatus::Compare::eq : EngineStatus::Compare::ge;
      out.wait.bits = is64 ? 64 : 32;
      out.wait.command = "semaphore acquire";
      return out;
    }
    case 1:  // RELEASE
      return sem_write(ctx, addr, payload, is64, ts, "semaphore release");
    case 6: {  // REDUCTION
      const uint32_t red = (data >> 27) & 0xF;
      const bool is_unsigned = (data >> 31) & 1;
      if (is64 && red == 5 && !is_unsigned)
        return exec_fault("sem_execute: a signed 64-bit IADD reduction is unsupported (it raises an interrupt on "
                     "hardware: dev_pbdma.ref.txt); use reduction_format=unsigned");
      if (is64 && (red == 6 || red == 7)) return exec_fault("sem_execute: 64-bit INC/DEC reductions are not supported");
      if (red > 7) return exec_fault("sem_execute: reduction " + std::to_string(red) + " is not defined");
      if (ts && (addr & 15))
        return exec_fault("sem_execute: a release with timestamp needs a 16-byte aligned address");
      return apply_reduction(ctx, addr, payload, is64, red, is_unsigned, ts, "semaphore reduction");
    }
    default:
      return exec_fault("sem_execute: operation " + std::to_string(op) + " (acq_and/acq_nor) is not emulated");
  }
}

// The copy engine's own semaphore reduction (LAUNCH_DMA
// SEMAPHORE_REDUCTION_ENABLE, SEMAPHORE_REDUCTION 17:14, _SIGN 18:18): the
// integer operations as the host's. The same rules as SEM_EXECUTE's for 64
// bits (unsigned IADD only, no INC/DEC); the float forms are not emulated.
ExecOutcome ce_reduce(MethodContext& ctx, uint64_t addr, uint64_t operand, bool two_word, bool timestamp, uint32_t d) {
  const uint32_t red = (d >> 14) & 0xF;
  const bool is_unsigned = (d >> 18) & 1;
  if (red > 7) return exec_fault("launch_dma: semaphore reduction " + std::to_string(red) + " (float) is not emulated");
  if (two_word && red == 5 && !is_unsigned)
    return exec_fault("launch_dma: a signed two-word IADD semaphore reduction is not supported; use "
                      "semaphore_reduction_sign=unsigned");
  if (two_word && (red == 6 || red == 7))
    return exec_fault("launch_dma: two-word INC/DEC semaphore reductions are not supported");
  if (addr & (timestamp ? 15 : two_word ? 7 : 3))
    return exec_fault("launch_dma semaphore reduction: address " + hex(addr) + " is not aligned to its payload");
  return apply_reduction(ctx, addr, operand, two_word, red, is_unsigned, timestamp, "launch_dma semaphore reduction");
}

ExecOutcome launch_dma(MethodContext& ctx, uint32_t d) {
  EmuChannel& c = *ctx.ch;
  const uint32_t transfer = d & 3, sem_type = (d >> 3) & 3, intr = (d >> 5) & 3;
  const bool src_pitch = (d >> 7) & 1, dst_pitch = (d >> 8) & 1, multi_line = (d >> 9) & 1, remap = (d >> 10) & 1;
  const bool src_phys = (d >> 12) & 1, dst_phys = (d >> 13) & 1, reduction = (d >> 19) & 1, two_word = (d >> 27) & 1;
  std::string err;
  ExecOutcome out;
  if (transfer == 3) return exec_fault("launch_dma: data_transfer_type 3 is reserved");
  if (transfer) {
    if (!src_pitch || !dst_pitch) return exec_fault("launch_dma: block-linear layouts are not emulated (use pitch)");
    if (multi_line) return exec_fault("launch_dma: multi-line transfers are not emulated (one line of line_length_in bytes)");
    if (src_phys || dst_phys) return exec_fault("launch_dma: physical addressing is not emulated (use virtual)");
    const uint64_t dst = (uint64_t(c.ce.out_upper & 0x1FFFFFF) << 32) | c.ce.out_lower;
    const uint64_t len = c.ce.line_length_in;
    if (remap) {
      // The fill form: NUM_DST_COMPONENTS = ONE, DST_X = CONST_A/CONST_B,
      // COMPONENT_SIZE bytes per element, line_length_in elements.
      const uint32_t rc = c.ce.remap_components;
      const uint32_t dst_x = rc & 7, comp = ((rc >> 16) & 3) + 1, ndst = ((rc >> 24) & 3) + 1;
      if (ndst != 1 || (dst_x != 4 && dst_x != 5))
        return exec_fault("launch_dma: only the fill form of the remap unit is emulated (one destination component from "
                     "const_a or const_b)");
      const uint32_t v = dst_x == 4 ? c.ce.remap_a : c.ce.remap_b;
      uint8_t* p = mem<uint8_t>(ctx, dst, len * comp, "fill destination", &err);
      if (!p) return exec_fault(err);
      if (comp == 4 && (dst & 3) == 0) {
        // Dword stores are single-copy atomic on the hardware (a semaphore
        // word filled while a channel acquires on it).
        for (uint64_t i = 0; i < len; ++i)
          std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(p + i * 4)).store(v, std::memory_order_release);
      } else {
        for (uint64_t i = 0; i < len; ++i) std::memcpy(p + i * comp, &v, comp);
      }
      out.bytes = len * comp;
    } else {
      const uint64_t src = (uint64_t(c.ce.in_upper & 0x1FFFFFF) << 32) | c.ce.in_lower;
      const uint8_t* s = mem<const uint8_t>(ctx, src, len, "copy source", &err);
      if (!s) return exec_fault(err);
      uint8_t* p = mem<uint8_t>(ctx, dst, len, "copy destination", &err);
      if (!p) return exec_fault(err);
      std::memmove(p, s, len);
      out.bytes = len;
    }
    out.wrote_memory = true;
  }
  if (sem_type == 3) return exec_fault("launch_dma: conditional-interrupt semaphores are not emulated");
  if (reduction && !sem_type)
    return exec_fault("launch_dma: semaphore_reduction_enable without a semaphore_type: nothing to reduce into");
  if (sem_type) {
    const uint64_t addr = (uint64_t(c.ce.sem_a & 0x1FFFFFF) << 32) | c.ce.sem_b;
    const uint64_t value = two_word ? (uint64_t(c.ce.payload_upper) << 32) | c.ce.payload : c.ce.payload;
    ExecOutcome s = reduction ? ce_reduce(ctx, addr, value, two_word, sem_type == 2, d)
                              : sem_write(ctx, addr, value, two_word, sem_type == 2, "launch_dma semaphore release");
    if (s.result == ExecResult::fault) return s;
    out.wrote_memory |= s.wrote_memory;
    out.dropped = s.dropped;
  }
  if (intr) c.event.raise(0);
  return out;
}

}  // namespace

bool method_is_completion(const EmuChannel& c, uint8_t subch, uint16_t mthd, uint32_t data) {
  if (mthd == 0x06C) return (data & 7) == 1 || (data & 7) == 6;  // SEM_EXECUTE release / reduction
  return mthd == 0x300 && c.subch_class[subch & 7] == hopper::kHopperDmaCopyA && ((data >> 3) & 3) != 0;
}

ExecOutcome execute_method(MethodContext& ctx, uint8_t subch, uint16_t mthd, uint32_t data) {
  EmuChannel& c = *ctx.ch;
  ExecOutcome out;
  if (mthd < 0x100) {  // host methods, on every subchannel
    switch (mthd) {
      case 0x000:  // SET_OBJECT
        if ((data & 0xFFFF) != hopper::kHopperDmaCopyA)
          return exec_fault("set_object: class " + hex(data & 0xFFFF) + " is not emulated (only HOPPER_DMA_COPY_A, 0xc8b5)");
        c.subch_class[subch & 7] = data & 0xFFFF;
        return out;
      case 0x008:  // NOP
      case 0x078:  // WFI: methods run in order here
        return out;
      case 0x020:  // NON_STALL_INTERRUPT
        c.event.raise(data);
        return out;
      case 0x05C: c.host.addr_lo = data; return out;
      case 0x060: c.host.addr_hi = data; return out;
      case 0x064: c.host.payload_lo = data; return out;
      case 0x068: c.host.payload_hi = data; return out;
      case 0x06C: return sem_execute(ctx, data);
      default:
        return exec_fault(method_name(hopper::Cls::host, mthd) + " is not emulated");
    }
  }
  if (c.subch_class[subch & 7] == 0)
    return exec_fault("method " + hex(mthd) + " on subchannel " + std::to_string(subch) +
                 ", which has no object bound: SET_OBJECT(HOPPER_DMA_COPY_A) first");
  switch (mthd) {
    case 0x100: return out;  // NOP
    case 0x240: c.ce.sem_a = data; return out;
    case 0x244: c.ce.sem_b = data; return out;
    case 0x248: c.ce.payload = data; return out;
    case 0x24C: c.ce.payload_upper = data; return out;
    case 0x300: return launch_dma(ctx, data);
    case 0x400: c.ce.in_upper = data; return out;
    case 0x404: c.ce.in_lower = data; return out;
    case 0x408: c.ce.out_upper = data; return out;
    case 0x40C: c.ce.out_lower = data; return out;
    case 0x410: c.ce.pitch_in = data; return out;
    case 0x414: c.ce.pitch_out = data; return out;
    case 0x418: c.ce.line_length_in = data; return out;
    case 0x41C: c.ce.line_count = data; return out;
    case 0x700: c.ce.remap_a = data; return out;
    case 0x704: c.ce.remap_b = data; return out;
    case 0x708: c.ce.remap_components = data; return out;
    default:
      return exec_fault(method_name(hopper::Cls::copy, mthd) + " is not emulated");
  }
}

}  // namespace conccl::emu
