// src/backends/emu/execute.cpp - what each SDMA packet does to emulated memory.
//
// Every address goes through Node::translate; an address outside every arena
// is a page fault (the engine halts), never an access to host memory.
#include <algorithm>
#include <atomic>
#include <type_traits>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "backends/emu/node.hpp"

namespace conccl::emu {

using sdma::Key;
using sdma::Pkt;

namespace {

// Translates or explains the page fault.
template <typename T = uint8_t>
T* mem(ExecContext& ctx, uint64_t va, uint64_t bytes, const char* what, std::string* err) {
  void* p = ctx.node->translate(va, bytes);
  if (!p) *err = std::string("page fault: ") + what + " [" + hex(va) + ", +" + std::to_string(bytes) +
                 ") is outside every mapping of the emulated node";
  return static_cast<T*>(p);
}

bool compare(uint32_t func, uint32_t v, uint32_t ref) {
  switch (func) {
    case 0: return true;
    case 1: return v < ref;
    case 2: return v <= ref;
    case 3: return v == ref;
    case 4: return v != ref;
    case 5: return v >= ref;
    case 6: return v > ref;
    default: return false;
  }
}

// POLL_REGMEM's function code (0..6: always, <, <=, ==, !=, >=, >) as the
// engine status' generic compare.
EngineStatus::Compare compare_of(uint32_t func) {
  using C = EngineStatus::Compare;
  switch (func) {
    case 0: return C::always;
    case 1: return C::lt;
    case 2: return C::le;
    case 3: return C::eq;
    case 4: return C::ne;
    case 5: return C::ge;
    default: return C::gt;  // 6 (7 is reserved and faults before a wait)
  }
}

// ATOMIC op = TC_OP: bits[4:0] operation, bit 5 = 64-bit, bit 6 = no return
// (tinygrad extra/hip_gpu_driver/soc21_enum.h; Linux sdma_v4_4_2.c sdma_v4_4_2_ring_emit_* uses).
template <typename T>
bool atomic_apply(uint32_t opx, T* p, T src, T cmp) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_acquire);
  using S = std::make_signed_t<T>;
  for (;;) {
    T next;
    switch (opx) {
      case 7: next = src; break;                                   // SWAP
      case 8: if (old != cmp) return true; next = src; break;      // CMPSWAP
      case 15: next = old + src; break;                            // ADD
      case 16: next = old - src; break;                            // SUB
      case 17: next = static_cast<S>(old) < static_cast<S>(src) ? old : src; break;  // SMIN
      case 18: next = old < src ? old : src; break;                // UMIN
      case 19: next = static_cast<S>(old) > static_cast<S>(src) ? old : src; break;  // SMAX
      case 20: next = old > src ? old : src; break;                // UMAX
      case 21: next = old & src; break;                            // AND
      case 22: next = old | src; break;                            // OR
      case 23: next = old ^ src; break;                            // XOR
      case 24: next = old >= src ? 0 : old + 1; break;             // INC (wrapping)
      case 25: next = (old == 0 || old > src) ? src : old - 1; break;  // DEC (wrapping)
      default: return false;
    }
    if (a.compare_exchange_weak(old, next, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
  }
}

ExecOutcome exec_ib(ExecContext& ctx, sdma::Gen gen, uint64_t va, uint64_t dwords);

// One function per packet family, called by execute_packet's switch.

// COPY_LINEAR and its broadcast form: one source, one or two destinations.
ExecOutcome exec_copy(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  const uint64_t n = p.get(Key::bytes);
  const uint8_t* src = mem(ctx, p.get(Key::src), n, "copy source", &err);
  if (!src) return exec_fault(err);
  const bool bcst = p.pkt == Pkt::copy_bcst;
  uint8_t* d0 = mem(ctx, p.get(bcst ? Key::dst0 : Key::dst), n, "copy destination", &err);
  if (!d0) return exec_fault(err);
  uint8_t* d1 = nullptr;
  if (bcst && !(d1 = mem(ctx, p.get(Key::dst1), n, "broadcast second destination", &err))) return exec_fault(err);
  std::memmove(d0, src, n);
  if (d1) std::memmove(d1, src, n);
  out.bytes = bcst ? 2 * n : n;
  out.wrote_memory = true;
  return out;
}

// SWAP_LINEAR: two ranges exchanged.
ExecOutcome exec_swap(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  const uint64_t n = p.get(Key::bytes);
  uint8_t* a = mem(ctx, p.get(Key::a), n, "swap a", &err);
  if (!a) return exec_fault(err);
  uint8_t* b = mem(ctx, p.get(Key::b), n, "swap b", &err);
  if (!b) return exec_fault(err);
  std::swap_ranges(a, a + n, b);
  out.bytes = 2 * n;
  out.wrote_memory = true;
  return out;
}

// COPY_LINEAR_SUBWIN: a 3-D rectangle, row by row.
ExecOutcome exec_copy_window(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  const uint64_t es = uint64_t(1) << p.get(Key::elementsize);
  if (p.get(Key::elementsize) > 4) return exec_fault("copy_window: elementsize > 4 is reserved");
  const uint64_t rx = p.get(Key::rect_x) * es, ry = p.get(Key::rect_y), rz = p.get(Key::rect_z);
  const uint64_t sp = p.get(Key::src_pitch) * es, dp = p.get(Key::dst_pitch) * es;
  const uint64_t ss = p.get(Key::src_slice_pitch) * es, ds = p.get(Key::dst_slice_pitch) * es;
  for (uint64_t z = 0; z < rz; ++z)
    for (uint64_t y = 0; y < ry; ++y) {
      const uint64_t so = (p.get(Key::src_z) + z) * ss + (p.get(Key::src_y) + y) * sp + p.get(Key::src_x) * es;
      const uint64_t dof = (p.get(Key::dst_z) + z) * ds + (p.get(Key::dst_y) + y) * dp + p.get(Key::dst_x) * es;
      const uint8_t* s = mem(ctx, p.get(Key::src) + so, rx, "copy_window source row", &err);
      if (!s) return exec_fault(err);
      uint8_t* d = mem(ctx, p.get(Key::dst) + dof, rx, "copy_window destination row", &err);
      if (!d) return exec_fault(err);
      std::memmove(d, s, rx);
    }
  out.bytes = rx * ry * rz;
  out.wrote_memory = true;
  return out;
}

// CONSTANT_FILL of dwords or bytes.
ExecOutcome exec_fill(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  const uint64_t n = p.get(Key::bytes);
  uint8_t* d = mem(ctx, p.get(Key::dst), n, "fill destination", &err);
  if (!d) return exec_fault(err);
  const uint32_t v = static_cast<uint32_t>(p.get(Key::value));
  if (p.pkt == Pkt::fill8) {
    std::memset(d, static_cast<int>(v & 0xFF), n);
  } else {
    if ((p.get(Key::dst) | n) & 3) return exec_fault("fill: dword fill needs 4-byte aligned dst and size");
    // Dword stores are single-copy atomic on the hardware: another
    // engine or the host polling a word being filled (a signal released
    // by a fill) sees the old or the new value, never a mix.
    for (uint64_t i = 0; i < n; i += 4)
      std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(d + i)).store(v, std::memory_order_release);
  }
  out.bytes = n;
  out.wrote_memory = true;
  return out;
}

// WRITE_UNTILED: the packet's own dwords.
ExecOutcome exec_write(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  const uint64_t n = p.data.size() * 4;
  uint8_t* d = mem(ctx, p.get(Key::dst), n, "write destination", &err);
  if (!d) return exec_fault(err);
  std::memcpy(d, p.data.data(), n);
  out.wrote_memory = true;
  return out;
}

// FENCE: a 32-bit store after the work before it (dropped when injected).
ExecOutcome exec_fence(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  uint32_t* d = mem<uint32_t>(ctx, p.get(Key::addr), 4, "fence address", &err);
  if (!d) return exec_fault(err);
  if (p.get(Key::addr) & 3) return exec_fault("fence: address " + hex(p.get(Key::addr)) + " not 4-byte aligned");
  if (ctx.drop_completion) {
    out.dropped = true;
    return out;
  }
  std::atomic_ref<uint32_t>(*d).store(static_cast<uint32_t>(p.get(Key::value)), std::memory_order_release);
  out.wrote_memory = true;
  return out;
}

// ATOMIC (and the 64-bit add form) by its TC_OP.
ExecOutcome exec_atomic(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  const uint32_t op = p.pkt == Pkt::atomic_add64 ? 47 : static_cast<uint32_t>(p.get(Key::op));
  const bool is64 = op & 0x20;
  const uint64_t addr = p.get(Key::addr);
  if (addr & (is64 ? 7 : 3)) return exec_fault("atomic: address " + hex(addr) + " misaligned");
  void* d = mem(ctx, addr, is64 ? 8 : 4, "atomic address", &err);
  if (!d) return exec_fault(err);
  if (ctx.drop_completion) {
    out.dropped = true;
    return out;
  }
  const bool ok = is64 ? atomic_apply<uint64_t>(op & 0x1F, static_cast<uint64_t*>(d), p.get(Key::value), p.get(Key::cmp))
                       : atomic_apply<uint32_t>(op & 0x1F, static_cast<uint32_t*>(d),
                                                static_cast<uint32_t>(p.get(Key::value)),
                                                static_cast<uint32_t>(p.get(Key::cmp)));
  if (!ok) return exec_fault("atomic: TC_OP " + std::to_string(op) + " is not emulated");
  out.wrote_memory = true;
  return out;
}

// MEM_INCR: a 64-bit increment.
ExecOutcome exec_mem_incr(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  uint64_t* d = mem<uint64_t>(ctx, p.get(Key::addr), 8, "mem_incr address", &err);
  if (!d) return exec_fault(err);
  if (ctx.drop_completion) {
    out.dropped = true;
    return out;
  }
  std::atomic_ref<uint64_t>(*d).fetch_add(1, std::memory_order_acq_rel);
  out.wrote_memory = true;
  return out;
}

// POLL_REGMEM on memory: passes, or blocks the engine with what it waits for.
ExecOutcome exec_poll(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  const uint64_t addr = p.get(Key::addr);
  if (addr & 3) return exec_fault("poll: address " + hex(addr) + " not 4-byte aligned");
  uint32_t* s = mem<uint32_t>(ctx, addr, 4, "poll address", &err);
  if (!s) return exec_fault(err);
  const uint32_t func = static_cast<uint32_t>(p.get(Key::func));
  if (func == 7) return exec_fault("poll: compare function 7 is reserved");
  const uint32_t v = std::atomic_ref<uint32_t>(*s).load(std::memory_order_acquire);
  const uint32_t mask = static_cast<uint32_t>(p.get(Key::mask)), ref = static_cast<uint32_t>(p.get(Key::ref));
  if (compare(func, v & mask, ref)) return out;
  out.result = ExecResult::blocked;
  out.wait.addr = addr;
  out.wait.target = ref;
  out.wait.seen = v;
  out.wait.mask = mask;
  out.wait.compare = compare_of(func);
  out.wait.bits = 32;
  out.wait.command = "POLL_REGMEM";
  return out;
}

// COND_EXE: skip `count` dwords unless the word equals ref.
ExecOutcome exec_cond_exe(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  uint32_t* s = mem<uint32_t>(ctx, p.get(Key::addr), 4, "cond_exe address", &err);
  if (!s) return exec_fault(err);
  const uint32_t v = std::atomic_ref<uint32_t>(*s).load(std::memory_order_acquire);
  if (v != static_cast<uint32_t>(p.get(Key::ref))) out.skip_dwords = p.get(Key::count);
  return out;
}

// TIMESTAMP: the engine clock as a 64-bit value.
ExecOutcome exec_timestamp(ExecContext& ctx, const sdma::Packet& p) {
  std::string err;
  ExecOutcome out;
  uint64_t* d = mem<uint64_t>(ctx, p.get(Key::addr), 8, "timestamp address", &err);
  if (!d) return exec_fault(err);
  std::atomic_ref<uint64_t>(*d).store(engine_now_ns(), std::memory_order_release);
  out.wrote_memory = true;
  return out;
}

}  // namespace

ExecOutcome execute_packet(ExecContext& ctx, sdma::Gen gen, const sdma::Packet& p) {
  ExecOutcome out;
  switch (p.pkt) {
    case Pkt::nop:
    case Pkt::gcr:
    case Pkt::gcr_user:
    case Pkt::hdp_flush:  // caches are coherent in the emulator
    case Pkt::poll_reg:   // no registers: ROCr's firmware HDP flush is a poll_reg
    case Pkt::timestamp_set:
      return out;

    case Pkt::copy:
    case Pkt::copy_bcst:
      return exec_copy(ctx, p);

    case Pkt::swap:
      return exec_swap(ctx, p);

    case Pkt::copy_window:
      return exec_copy_window(ctx, p);

    case Pkt::fill:
    case Pkt::fill8:
      return exec_fill(ctx, p);

    case Pkt::write:
      return exec_write(ctx, p);

    case Pkt::fence:
      return exec_fence(ctx, p);

    case Pkt::atomic:
    case Pkt::atomic_add64:
      return exec_atomic(ctx, p);

    case Pkt::mem_incr:
      return exec_mem_incr(ctx, p);

    case Pkt::poll:
      return exec_poll(ctx, p);

    case Pkt::cond_exe:
      return exec_cond_exe(ctx, p);

    case Pkt::timestamp:
    case Pkt::timestamp_local:
      return exec_timestamp(ctx, p);

    case Pkt::trap:
      ctx.queue->event.raise(static_cast<uint32_t>(p.get(Key::ctx)));
      return out;

    case Pkt::ib:
      if (ctx.ib_depth > 0) return exec_fault("ib: an indirect buffer may not chain another");
      return exec_ib(ctx, gen, p.get(Key::addr), p.get(Key::size));

    case Pkt::semaphore:
      return exec_fault("semaphore: the legacy SEMAPHORE packet is not emulated");
    case Pkt::reg_write:
      return exec_fault("reg_write: register writes are privileged (kernel rings only) and not emulated");
    case Pkt::kCount:
      break;
  }
  return exec_fault("packet kind not emulated");
}

namespace {

ExecOutcome exec_ib(ExecContext& ctx, sdma::Gen gen, uint64_t va, uint64_t dwords) {
  std::string err;
  const uint32_t* ib = mem<const uint32_t>(ctx, va, dwords * 4, "indirect buffer", &err);
  if (!ib) return exec_fault(err);
  ExecOutcome total;
  ExecContext inner = ctx;
  inner.ib_depth = ctx.ib_depth + 1;
  uint64_t pos = 0;
  while (pos < dwords) {
    Result<sdma::Packet> p = sdma::decode(gen, std::span<const uint32_t>(ib + pos, dwords - pos));
    if (!p.ok()) return exec_fault("in indirect buffer " + hex(va) + " at dword " + std::to_string(pos) + ": " + p.status().message());
    ExecOutcome o = execute_packet(inner, gen, *p);
    if (o.result == ExecResult::fault)
      return exec_fault("in indirect buffer " + hex(va) + " at dword " + std::to_string(pos) + ": " + o.fault);
    if (o.result == ExecResult::blocked)
      return exec_fault("in indirect buffer " + hex(va) + ": the emulator does not run polls inside indirect buffers; put the poll in the ring");
    total.bytes += o.bytes;
    total.wrote_memory |= o.wrote_memory;
    pos += p->dwords + o.skip_dwords;
  }
  return total;
}

}  // namespace

}  // namespace conccl::emu
