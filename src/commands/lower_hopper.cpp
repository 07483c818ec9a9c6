// src/commands/lower_hopper.cpp - the vocabulary as NVIDIA Hopper copy-engine
// (HOPPER_DMA_COPY_A, clc8b5.h) and host (HOPPER_CHANNEL_GPFIFO_A, clc86f.h /
// clc56f.h) methods, encoded by packets/hopper_ce's emitters.
//
// Signals (16 bytes): a native 64-bit value at +0; +8 stays unused, because
// every write to a signal is a release without timestamp or a reduction, so
// nothing lands there (a WITH_TIMESTAMP release would put the time at +8).
//   add:  host SEM_EXECUTE REDUCTION IADD, unsigned, 64-bit, RELEASE_WFI - the
//         only 64-bit add a public manual documents (GA100 dev_pbdma.ref.txt:
//         64-bit IADD unsigned only; WFI waits for the engine to be idle and a
//         SYSMEMBAR orders the copies' writes first). An add that directly
//         follows such an add leaves the WFI out: nothing ran since. The copy
//         engine's own LAUNCH_DMA reduction (two-word, unsigned IADD) is in no
//         public manual; on an H100 it carries, sums adds from every engine
//         and lands after the data (test_nv_backend NvHw.CopyEngine*), and
//         copy_add uses it; signal_add uses it only with CONCCL_NV_CE_ADD=1.
//   set:  CE LAUNCH_DMA semaphore release, two-word payload, FLUSH (ordered
//         after the copies before it, as the UVM driver's releases are).
//   wait: host SEM_EXECUTE ACQ_CIRC_GEQ, 64-bit: the channel stalls until
//         (int64)(value - target) >= 0, i.e. value >= target for any counter
//         within 2^63 of its target (the form proven on the H200, run 9).
//         ACQUIRE_SWITCH_TSG is set: when the acquire fails the PBDMA switches
//         to another TSG rather than keeping this one resident and retrying
//         until its timeslice (~2 ms) expires, so a wait on a signal that
//         another process's channel sharing the copy engine will release does
//         not idle the engine for a timeslice.
// Timestamps: a release with timestamp into a 16-byte slot (payload 0 at +0,
// GPU ns at +8: Caps::timestamp_offset = 8).
#include <algorithm>
#include <string>

#include "packets/hopper_ce.hpp"
#include "commands/lowering.hpp"
#include "util/env.hpp"

namespace conccl::lower {

namespace {

using namespace conccl::hopper;

// Appends one command of `n` dwords written by `put`.
template <typename Put>
Status emit(CommandBuffer& cb, size_t n, Put&& put) {
  const size_t at = cb.size_dwords();
  uint32_t* p = Writer::grow(cb, n);
  if (!p) return Writer::full(cb, n);
  put(p);
  Writer::mark(cb, at);
  return Status();
}

// A copy's pieces. The first waits for earlier work (an acquire before it)
// unless the caller says the copy is independent of it; later pieces may
// overlap. With `add` (copy_add) the last piece adds add->delta at add->va
// as it ends (its LAUNCH_DMA's semaphore reduction: IADD, unsigned,
// two-word, after its writes are flushed); a copy of several pieces then
// makes that piece NON_PIPELINED, so the add also follows the others' writes.
struct PieceAdd {
  uint64_t va, delta;
};
Status copy_pieces(CommandBuffer& cb, uint64_t dst, uint64_t src, uint64_t bytes, bool alongside,
                   const PieceAdd* add) {
  CONCCL_RETURN_IF_ERROR(check_va("copy source", src, bytes));
  CONCCL_RETURN_IF_ERROR(check_va("copy destination", dst, bytes));
  if (add) CONCCL_RETURN_IF_ERROR(check_va("signal", add->va, 8));
  return for_each_piece(bytes, kMaxCopyBytes, [&](uint64_t off, uint64_t len) {
    const bool last = off + len == bytes;
    if (!add || !last)
      return emit(cb, kCopyPieceDwords,
                  [&](uint32_t* p) { put_copy_piece(p, dst + off, src + off, len, alongside || off != 0); });
    const bool pipelined = off == 0 && alongside;  // a later last piece waits for the others
    return emit(cb, kCopyAddDwords, [&](uint32_t* p) {
      put_copy_piece_add(p, dst + off, src + off, len, pipelined, add->va, add->delta);
    });
  });
}

Status copy(CommandBuffer& cb, uint64_t dst, uint64_t src, uint64_t bytes, bool alongside) {
  return copy_pieces(cb, dst, src, bytes, alongside, nullptr);
}

Status copy_add(CommandBuffer& cb, uint64_t dst, uint64_t src, uint64_t bytes, bool alongside, uint64_t va,
                uint64_t delta) {
  const PieceAdd add{va, delta};
  return copy_pieces(cb, dst, src, bytes, alongside, &add);
}

Status no_cap(CommandBuffer&, const char* what) {
  return error(Code::invalid_argument, std::string(what) + " does not exist on Hopper copy engines");
}
Status copy_bcst(CommandBuffer& cb, uint64_t, uint64_t, uint64_t, uint64_t) { return no_cap(cb, "a broadcast copy"); }
Status swap(CommandBuffer& cb, uint64_t, uint64_t, uint64_t) { return no_cap(cb, "an in-place swap"); }

Status fill(CommandBuffer& cb, uint64_t dst, uint32_t value, uint64_t bytes) {
  CONCCL_RETURN_IF_ERROR(check_va("fill destination", dst, bytes));
  CONCCL_RETURN_IF_ERROR(emit(cb, kFillSetupDwords, [&](uint32_t* p) { put_fill_setup(p, value); }));
  return for_each_piece(bytes, kMaxFillBytes, [&](uint64_t off, uint64_t len) {
    return emit(cb, kFillPieceDwords, [&](uint32_t* p) { put_fill_piece(p, dst + off, len, off != 0); });
  });
}

// Whether the commands just before the end are host semaphore reductions,
// the first of them with RELEASE_WFI: then the engine has had no work since
// that wait for idle and its SYSMEMBAR, and another add needs neither. A run
// of arrivals after a list's copies (PlanBuilder records them together) then
// waits for the engine once instead of once per add.
bool after_waited_reductions(const CommandBuffer& cb) {
  const std::span<const uint32_t> starts = cb.packet_starts();
  const std::span<const uint32_t> dw = cb.dwords();
  size_t end = dw.size();
  for (size_t i = starts.size(); i-- > 0;) {
    const size_t at = starts[i];
    if (end - at != kHostSemDwords || dw[at] != kHostSemHeader) return false;
    const uint32_t exec = dw[at + kHostSemDwords - 1];
    if ((exec & kSemOperationMask) != kSemOpReduction) return false;
    if (exec & kSemReleaseWfi) return true;
    end = at;
  }
  return false;
}

// CONCCL_NV_CE_ADD=1 (a diagnostic, read once): signal_add as the copy
// engine's own semaphore reduction after earlier work (LAUNCH_DMA with no
// transfer, FLUSH) instead of the host's SEM_EXECUTE with RELEASE_WFI; for
// measuring what the wait for idle costs (docs/collectives.md).
bool ce_add() {
  static const bool on = util::env_is("CONCCL_NV_CE_ADD", "1");
  return on;
}

Status signal_add(CommandBuffer& cb, uint64_t va, uint64_t delta) {
  CONCCL_RETURN_IF_ERROR(check_va("signal", va, 8));
  if (ce_add()) return emit(cb, kReleaseDwords, [&](uint32_t* p) { put_release_add(p, va, delta); });
  const uint32_t exec = after_waited_reductions(cb) ? kSemExecuteAdd64 & ~kSemReleaseWfi : kSemExecuteAdd64;
  return emit(cb, kHostSemDwords, [&](uint32_t* p) { put_host_semaphore(p, va, delta, exec); });
}

Status signal_set(CommandBuffer& cb, uint64_t va, uint64_t v) {
  CONCCL_RETURN_IF_ERROR(check_va("signal", va, 8));
  return emit(cb, kReleaseDwords, [&](uint32_t* p) { put_release(p, va, v, false, false); });
}

// CONCCL_NV_ACQUIRE_SWITCH_TSG=0 leaves the bit out: a diagnostic that shows
// what it is for (docs/nv-backend.md), read once.
uint32_t switch_tsg_bit() {
  static const uint32_t bit = util::env_is("CONCCL_NV_ACQUIRE_SWITCH_TSG", "0") ? 0u : kSemAcquireSwitchTsg;
  return bit;
}

Status wait_ge(CommandBuffer& cb, uint64_t va, uint64_t v, bool hold) {
  CONCCL_RETURN_IF_ERROR(check_va("signal", va, 8));
  return emit(cb, kHostSemDwords, [&](uint32_t* p) {
    put_host_semaphore(p, va, v, uint32_t(Acquire::circ_geq) | (hold ? 0u : switch_tsg_bit()) | kSemPayload64);
  });
}

Status timestamp(CommandBuffer& cb, uint64_t slot) {
  CONCCL_RETURN_IF_ERROR(check_va("timestamp slot", slot, kSemaphoreSlotBytes));
  return emit(cb, kReleaseDwords, [&](uint32_t* p) { put_release(p, slot, 0, true, false); });
}

Status raw(CommandBuffer& cb, std::span<const uint32_t> dw) {
  Disassembly d = disassemble(dw);
  if (!d.error.ok())
    return error(Code::invalid_argument, "raw methods: at dword " + std::to_string(d.error_offset) + ": " +
                                             d.error.message());
  for (size_t i = 0; i < d.offsets.size(); ++i) {
    const size_t end = i + 1 < d.offsets.size() ? d.offsets[i + 1] : dw.size();
    CONCCL_RETURN_IF_ERROR(append(cb, dw.data() + d.offsets[i], end - d.offsets[i]));
  }
  return Status();
}

std::string disassemble_cb(const CommandBuffer& cb) { return disassemble_text(cb.dwords()); }

Caps make_caps() {
  Caps c;
  c.max_copy_bytes = kMaxCopyBytes;
  c.max_fill_bytes = kMaxFillBytes;
  c.broadcast_copy = false;
  c.swap = false;
  c.atomic64 = true;          // host semaphore reduction, 64-bit unsigned IADD
  c.copy_add = true;          // LAUNCH_DMA semaphore reduction, two-word unsigned IADD
  c.interrupt_wakeup = true;  // NON_STALL_INTERRUPT
  c.signal_twin = false;
  c.store_beats_add = true;   // docs/perf/h200-collectives.md, runs 61-62
  c.timestamp_offset = 8;
  c.signal_align = 8;
  c.timestamp_align = kSemaphoreSlotBytes;
  return c;
}

}  // namespace

const Ops& hopper_ops() {
  static const Ops ops{copy,     copy_bcst, swap,      fill, signal_add, copy_add,
                       signal_set, wait_ge, timestamp, raw,  disassemble_cb};
  return ops;
}

const Caps& hopper_caps() {
  static const Caps c = make_caps();
  return c;
}

}  // namespace conccl::lower
