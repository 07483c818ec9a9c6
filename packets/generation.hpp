// packets/generation.hpp - SDMA packet generations, their limits, and the
// gfx target -> generation map.
//
// A generation is a packet format family, not a single IP version: every IP
// version listed under one generation encodes every packet identically.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace conccl::sdma {

enum class Gen : uint8_t {
  v4,      // "4":     SDMA 4.0-4.2, gfx9 (MI25, MI50/60, MI100)
  v4_4,    // "4.4":   SDMA 4.4.0, gfx90a (MI200): the 4.x packets, 30-bit copy/fill counts
  v4_4_2,  // "4.4.2": SDMA 4.4.2/4.4.5 (MI300 family, MI350)
  v5,      // "5":     SDMA 5.0, gfx101x (RDNA1)
  v5_2,    // "5.2":   SDMA 5.2, gfx103x (RDNA2): 30-bit copy count, cache policies
  v6,      // "6":     SDMA 6.x, gfx11 (RDNA3)
  v7,      // "7":     SDMA 7.0, gfx12 (RDNA4)
};
inline constexpr int kGenCount = 7;
inline constexpr Gen kAllGens[kGenCount] = {Gen::v4,   Gen::v4_4, Gen::v4_4_2, Gen::v5,
                                            Gen::v5_2, Gen::v6,   Gen::v7};

// Bit set of generations, used by the layout tables.
using GenMask = uint8_t;
constexpr GenMask gen_bit(Gen g) { return GenMask(1u << static_cast<unsigned>(g)); }
inline constexpr GenMask kAllGenMask = 0x7F;

std::string_view gen_name(Gen g);
// Accepts "4", "4.4", "4.4.2", "5", "5.2", "6", "7" (also "4.4.0" -> 4.4,
// "4.4.5" -> 4.4.2, "6.0"/"6.1" -> 6, "7.0" -> 7, "5.0" -> 5, "4.0"/"4.2" -> 4).
std::optional<Gen> parse_gen(std::string_view name);
// "4, 4.4, 4.4.2, 5, 5.2, 6, 7" for error messages.
std::string gen_list();

// Per-generation limits and rules a queue must respect. Sources are cited in
// generation.cpp next to the table.
struct Limits {
  uint8_t copy_count_bits;       // width of COPY_LINEAR count (bytes-1)
  uint64_t max_copy_bytes;       // largest COPY_LINEAR we emit (conservative)
  uint8_t fill_count_bits;       // width of CONSTANT_FILL count (bytes-1)
  uint64_t max_fill_bytes;       // largest CONSTANT_FILL the packet takes (multiple of 4): the assembler's limit
  uint64_t fill_split_bytes;     // largest CONSTANT_FILL the lowering emits (<= max_fill_bytes): fills split here
  uint32_t max_write_dwords;     // WRITE_UNTILED payload (count[19:0] = n-1)
  uint32_t max_nop_count;        // NOP body dwords (count[29:16])
  uint32_t fence_align;          // FENCE / POLL_REGMEM / COND_EXE address
  uint32_t atomic64_align;       // 64-bit ATOMIC address
  uint32_t timestamp_align;      // TIMESTAMP write address (field is addr[31:3])
  uint32_t ib_align;             // INDIRECT_BUFFER base
  uint32_t ring_base_align;      // ring base (RB_BASE is addr >> 8)
  uint32_t fence_mtype_uc;       // FENCE header bits to make the write uncached (0 on v4)
  bool has_gcr;                  // GCR_REQ/GCR_USER cache control packets (5+)
  bool user_hdp_flush;           // the firmware HDP flush a user queue may emit (ROCr hdp_flush_cmd)
  bool has_mem_incr;             // SEM sub-op MEM_INCR (5+)
  bool has_swap_linear;          // COPY sub-op 9 SWAP_LINEAR (only seen on MI300)
  bool double_poll;              // every memory POLL_REGMEM emitted twice (gfx9.0.x below gfx90a)
};

const Limits& limits(Gen g);

// gfx target -> SDMA generation.
struct GfxTarget {
  std::string_view gfx;        // "gfx942"
  Gen gen;
  std::string_view sdma_ip;    // IP version of the SDMA block, "4.4.2"
  std::string_view products;   // "MI300X, MI300A, MI325X"
  std::string_view source;     // where the fact comes from
  // Smallest submission the engine fetches correctly; shorter ones are
  // NOP-padded (0 = no minimum). ROCR-Runtime amd_blit_sdma.cpp: "Some GFX9
  // devices require a minimum of 64 DWORDS per ring buffer submission"
  // (gfx900, gfx904, gfx90c: min_submission_size_ = 256).
  uint16_t min_submit_bytes = 0;
};
std::span<const GfxTarget> gfx_targets();
// Accepts "gfx942", "GFX942", "942" and KFD's gfx_target_version (90402 = gfx942).
std::optional<GfxTarget> gfx_to_target(std::string_view gfx);
std::optional<GfxTarget> gfx_target_version_to_target(uint32_t kfd_gfx_target_version);

}  // namespace conccl::sdma
