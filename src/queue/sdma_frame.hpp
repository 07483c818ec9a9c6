// src/queue/sdma_frame.hpp - what wraps every SDMA submission.
//
// ROCr's BlitSdma (ROCR-Runtime src/core/runtime/amd_blit_sdma.cpp,
// SubmitCommand) puts the same packets around every piece of work it submits:
//   [HDP flush] [GCR invalidate + write-back] work [GCR write-back] ... completion
// and judges completion only by a value the engine writes (an ATOMIC or a
// FENCE), never by the read pointer: the engine's rptr write-back reports what
// it has *fetched*, and copies may still be in flight after it moves.
//
// The frame here is that wrapper, decided once per queue:
//  - the firmware HDP flush (POLL_REGMEM, dword 2 = 0x80000000) where the
//    generation's firmware has it and the GPU reaches the CPU over PCIe
//    (not over xGMI, where the CPU's writes are coherent with the GPU's
//    caches) - without it, data the CPU wrote through the BAR can still sit
//    in the HDP write cache when the engine reads it;
//  - GCR_USER invalidate/write-back (control 0xC3C0) before and write-back
//    (0x8040) after on SDMA 5.x and newer, whose engines go through GL2;
//  - a NOP that pads short submissions to the GPU's minimum (gfx900/904/90c:
//    256 bytes, ROCr min_submission_size_);
//  - last, the queue's sequence FENCE: the low 32 bits of the submission's
//    end ticket, written to the queue's completion word. Queue::completed()
//    reads that word, so "done" means the engine wrote it after the work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "conccl/status.hpp"
#include "packets/generation.hpp"

namespace conccl {

// ROCR-Runtime src/core/runtime/amd_blit_sdma.cpp BuildGCRCommand (BlitSdmaV5,
// gfx10/11/12): before the work GL2_INV|GL2_WB|GLK_INV|GLK_WB|GL1_INV|GLV_INV
// (control 0xC3C0), after it GL2_WB|GLK_WB (0x8040); GL2_RANGE 0 = the whole
// cache, so base and limit stay 0. Bit names: linux
// drivers/gpu/drm/amd/amdgpu/navi10_sdma_pkt_open.h SDMA_GCR_*. Used by the
// frame and, inside a list, by the SDMA lowering (src/commands/lower_sdma.cpp).
inline constexpr uint64_t kGcrInvalidate = 0xC3C0;
inline constexpr uint64_t kGcrWriteBack = 0x8040;
// The firmware HDP flush: POLL_REGMEM in register form with dword 2 =
// 0x80000000 (ROCR-Runtime core/inc/sdma_registers.h SDMA_PKT_HDP_FLUSH, "gfx9
// sDMA microcode introducing SDMA_PKT_HDP_FLUSH" 0x1A5). The firmware does the
// flush; no NBIO register offsets are needed, unlike the kernel's form
// (linux sdma_v4_0.c sdma_v4_0_ring_emit_hdp_flush).
inline constexpr uint64_t kHdpFlushReq = 0x80000000;

struct FramePolicy {
  bool hdp_flush = false;         // firmware HDP flush before the work
  bool gcr = false;               // GCR_USER invalidate before, write-back after
  uint32_t min_submit_bytes = 0;  // NOP-pad shorter submissions (0 = none)
};

// The policy for a queue on a generation. cpu_link_xgmi: the GPU's link to
// the CPU is xGMI (MI300A, MI250X with Trento), where ROCr skips the flush.
FramePolicy frame_policy(sdma::Gen gen, bool cpu_link_xgmi, uint32_t min_submit_bytes = 0);

// "hdp-flush gcr min-submit=256" / "none": for notes and diagnosis.
std::string describe(const FramePolicy& p);

struct SubmitFrame {
  FramePolicy policy;
  std::vector<std::vector<uint32_t>> prologue;  // whole packets, in order
  std::vector<std::vector<uint32_t>> epilogue;
  std::vector<uint32_t> fence;                  // FENCE(done_va, 0); dword kFenceValueDword is patched
  static constexpr size_t kFenceValueDword = 3;
  uint64_t prologue_bytes() const;
  uint64_t epilogue_bytes() const;  // without the fence
  // The most a submission grows by: prologue, epilogue, minimum-size pad, fence.
  uint64_t overhead_bytes() const;
};

// Errors: Code::invalid_argument when done_va is not 4-byte aligned.
Result<SubmitFrame> make_frame(sdma::Gen gen, const FramePolicy& policy, uint64_t done_va);

}  // namespace conccl
