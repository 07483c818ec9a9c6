// packets/generation.cpp - generation names, limits table and gfx map.
#include "packets/generation.hpp"

#include <array>
#include <cctype>
#include <charconv>

namespace conccl::sdma {

namespace {

struct GenName {
  std::string_view name;
  Gen gen;
};
// The first entry for each Gen is its canonical name.
constexpr GenName kGenNames[] = {
    {"4", Gen::v4},         {"4.4", Gen::v4_4},     {"4.4.2", Gen::v4_4_2},
    {"5", Gen::v5},         {"5.2", Gen::v5_2},     {"6", Gen::v6},
    {"7", Gen::v7},         {"4.0", Gen::v4},       {"4.2", Gen::v4},
    {"4.4.0", Gen::v4_4},
    {"4.4.5", Gen::v4_4_2}, {"5.0", Gen::v5},       {"6.0", Gen::v6},
    {"6.1", Gen::v6},       {"7.0", Gen::v7},
};

// Limits per generation. Sources:
//  - count widths: Linux vega10_sdma_pkt_open.h / navi10_sdma_pkt_open.h /
//    sdma_v6_0_0_pkt_open.h (COPY_LINEAR count[21:0] vs count[29:0]);
//    SDMA 4.4.0 (gfx90a) takes 30-bit COPY_LINEAR and CONSTANT_FILL counts:
//    Linux drivers/gpu/drm/amd/amdgpu/sdma_v4_0.c sdma_v4_0_set_buffer_funcs
//    picks sdma_v4_4_buffer_funcs (copy_max_bytes = fill_max_bytes = 1 << 30,
//    written as byte_count - 1 by sdma_v4_0_emit_copy_buffer/emit_fill_buffer)
//    for IP >= 4.4.0 and sdma_v4_0_buffer_funcs (1 << 22) below it; ROCR-Runtime
//    GpuAgent::CreateBlitSdma (amd_gpu_agent.cpp) likewise raises its copy size
//    override to 0x3fffffff for gfx90a. copy_bcst stays 22-bit there (no source).
//    PAL gfx10_merged_sdma_packets.h ("22 bits wide for all products but
//    GFX10.3+"); CONSTANT_FILL count [21:0] on 4.x/5.x, [29:0] on 6.x/7.x.
//  - max copy: Mesa src/amd/common/sid.h 0x3FFF00 (<5.2) / 0x3FFFFF00 (>=5.2),
//    the most conservative of Linux/ROCr/PAL/Mesa/tinygrad, and 256-B aligned.
//  - max fill: ROCr kMaxSingleFillSize 0x3FFFE0 on 22-bit generations, the
//    same rounding (32-B aligned) on 30-bit ones, except 4.4 (gfx90a): its
//    30-bit fill count rests on Linux sdma_v4_4_buffer_funcs (fill_max_bytes =
//    1 << 30, one 2025 patch), while ROCr still splits every fill at
//    CONSTANT_FILL::kMaxSize_ = 0x3fffe0 there (core/inc/sdma_registers.h). The
//    packet's limit (max_fill_bytes: the assembler's, so that `sdma-probe asm`
//    can still try a wide fill on a gfx90a) follows the 30-bit field; the
//    lowering splits at fill_split_bytes, ROCr's 0x3FFFE0, until a gfx90a run
//    shows the wider count works (sdma-probe selftest fills and checks 4 MiB +
//    36 bytes on every engine; docs/hardware.md, the day-one list).
//  - alignments: FENCE addr 4 B (Linux BUG_ON(addr & 3)); 64-bit atomics 8 B;
//    TIMESTAMP addr[31:3] field; IB base 32 B (Linux & 0xffffffe0); ring base
//    256 B (KFD mqd: RB_BASE = addr >> 8).
//  - FENCE MTYPE=3 (uncached) on 5.x, 6.x and 7.x: Linux sdma_v5_0.c,
//    sdma_v6_0.c and sdma_v7_0.c (*_ring_emit_fence: SDMA_PKT_FENCE_HEADER_MTYPE(0x3),
//    "Ucached(UC)"), ROCr amd_blit_sdma.cpp BuildFenceCommand (mtype = 3 for every
//    major >= 10, gfx12 included), Mesa; 4.x has no such field. PAL gfx12 marks the
//    bits reserved on 7.x; both AMD drivers set them, and a FENCE whose write stays
//    in GL2 would leave waits on it to time out, so 7.x sets them too.
//  - user-queue HDP flush (POLL_REGMEM op 8, dword 2 = 0x80000000, recognised
//    by the SDMA firmware): ROCR-Runtime src/core/runtime/amd_blit_sdma.cpp
//    emits it on gfx9 and newer except gfx101x (SDMA 5.0), whose firmware
//    lacks it (hdp_flush_support_); core/inc/sdma_registers.h SDMA_PKT_HDP_FLUSH.
//  - double poll: ROCr emits every dependency POLL_REGMEM twice on gfx9.0.x
//    other than gfx90a (rocr-runtime core/runtime/amd_blit_sdma.cpp
//    SubmitCommand: "Workaround for rare-issue on gfx908 where
//    SDMA_OP_POLL_REGMEM returns before polled memory is cleared", on major 9,
//    minor 0, stepping != 10). Those targets are exactly generation 4 here
//    (gfx900/904/906/908/90c); the lowering's wait_ge does the same there.
//  - SWAP_LINEAR (COPY sub-op 9): used on gfx942 by AMD DMA-Latte
//    (include/sdma_pkt_struct.h); not in the Linux headers, so only 4.4.2.
constexpr uint32_t kMtypeUc = 3u << 16;
constexpr Limits kLimits[kGenCount] = {
    // bits max_copy  fbits max_fill    fill split  write     nop     fen at8 ts ib  ring mtype    gcr    hdp    incr   swap   2poll
    {22, 0x3FFF00,   22, 0x3FFFE0,    0x3FFFE0,    1u << 20, 0x3FFF, 4, 8, 8, 32, 256, 0,        false, true,  false, false, true},  // 4
    {30, 0x3FFFFF00, 30, 0x3FFFFFE0,  0x3FFFE0,    1u << 20, 0x3FFF, 4, 8, 8, 32, 256, 0,        false, true,  false, false, false},  // 4.4
    {22, 0x3FFF00,   22, 0x3FFFE0,    0x3FFFE0,    1u << 20, 0x3FFF, 4, 8, 8, 32, 256, 0,        false, true,  false, true,  false},  // 4.4.2
    {22, 0x3FFF00,   22, 0x3FFFE0,    0x3FFFE0,    1u << 20, 0x3FFF, 4, 8, 8, 32, 256, kMtypeUc, true,  false, true,  false, false},  // 5
    {30, 0x3FFFFF00, 22, 0x3FFFE0,    0x3FFFE0,    1u << 20, 0x3FFF, 4, 8, 8, 32, 256, kMtypeUc, true,  true,  true,  false, false},  // 5.2
    {30, 0x3FFFFF00, 30, 0x3FFFFFE0,  0x3FFFFFE0,  1u << 20, 0x3FFF, 4, 8, 8, 32, 256, kMtypeUc, true,  true,  true,  false, false},  // 6
    {30, 0x3FFFFF00, 30, 0x3FFFFFE0,  0x3FFFFFE0,  1u << 20, 0x3FFF, 4, 8, 8, 32, 256, kMtypeUc, true,  true,  true,  false, false},  // 7
};

// gfx target -> SDMA IP. The SDMA IP version of each ASIC comes from IP
// discovery; Linux drivers/gpu/drm/amd/amdgpu/amdgpu_discovery.c
// (amdgpu_discovery_set_sdma_ip_blocks) maps each IP version to its
// sdma_v*_0.c file, and the gfx names come from the same file's GC versions
// (and ROCm's LLVM AMDGPUUsage target table).
constexpr GfxTarget kTargets[] = {
    {"gfx900", Gen::v4, "4.0.0", "Vega10, MI25", "linux drivers/gpu/drm/amd/amdgpu/sdma_v4_0.c (CHIP_VEGA10)", 256},
    {"gfx904", Gen::v4, "4.0.1", "Vega12", "linux drivers/gpu/drm/amd/amdgpu/sdma_v4_0.c (CHIP_VEGA12)", 256},
    {"gfx906", Gen::v4, "4.2.0", "Vega20, MI50, MI60", "linux drivers/gpu/drm/amd/amdgpu/sdma_v4_0.c (IP 4.2.0)"},
    {"gfx908", Gen::v4, "4.2.2", "Arcturus, MI100", "linux drivers/gpu/drm/amd/amdgpu/sdma_v4_0.c (IP 4.2.2)"},
    {"gfx90a", Gen::v4_4, "4.4.0", "Aldebaran, MI210, MI250, MI250X",
     "linux drivers/gpu/drm/amd/amdgpu/sdma_v4_0.c (IP 4.4.0: sdma_v4_4_buffer_funcs, 1 << 30 per copy/fill)"},
    {"gfx90c", Gen::v4, "4.1.2", "Renoir APU", "linux drivers/gpu/drm/amd/amdgpu/sdma_v4_0.c (IP 4.1.2)", 256},
    {"gfx940", Gen::v4_4_2, "4.4.2", "MI300 (early)", "linux drivers/gpu/drm/amd/amdgpu/sdma_v4_4_2.c (IP 4.4.2)"},
    {"gfx941", Gen::v4_4_2, "4.4.2", "MI300X (early)", "linux drivers/gpu/drm/amd/amdgpu/sdma_v4_4_2.c (IP 4.4.2)"},
    {"gfx942", Gen::v4_4_2, "4.4.2", "MI300X, MI300A, MI325X", "linux drivers/gpu/drm/amd/amdgpu/sdma_v4_4_2.c (IP 4.4.2)"},
    {"gfx950", Gen::v4_4_2, "4.4.5", "MI350X, MI355X", "linux drivers/gpu/drm/amd/amdgpu/sdma_v4_4_2.c (IP 4.4.5)"},
    {"gfx1010", Gen::v5, "5.0.0", "Navi10, RX 5700", "linux drivers/gpu/drm/amd/amdgpu/sdma_v5_0.c (IP 5.0.0)"},
    {"gfx1011", Gen::v5, "5.0.2", "Navi12", "linux drivers/gpu/drm/amd/amdgpu/sdma_v5_0.c (IP 5.0.2)"},
    {"gfx1012", Gen::v5, "5.0.5", "Navi14", "linux drivers/gpu/drm/amd/amdgpu/sdma_v5_0.c (IP 5.0.5)"},
    {"gfx1030", Gen::v5_2, "5.2.0", "Navi21, RX 6800/6900, W6800", "linux drivers/gpu/drm/amd/amdgpu/sdma_v5_2.c (IP 5.2.0)"},
    {"gfx1031", Gen::v5_2, "5.2.2", "Navi22", "linux drivers/gpu/drm/amd/amdgpu/sdma_v5_2.c (IP 5.2.2)"},
    {"gfx1032", Gen::v5_2, "5.2.4", "Navi23", "linux drivers/gpu/drm/amd/amdgpu/sdma_v5_2.c (IP 5.2.4)"},
    {"gfx1034", Gen::v5_2, "5.2.5", "Navi24", "linux drivers/gpu/drm/amd/amdgpu/sdma_v5_2.c (IP 5.2.5)"},
    {"gfx1035", Gen::v5_2, "5.2.3", "Rembrandt APU", "linux drivers/gpu/drm/amd/amdgpu/sdma_v5_2.c (IP 5.2.3)"},
    {"gfx1036", Gen::v5_2, "5.2.6", "Raphael APU", "linux drivers/gpu/drm/amd/amdgpu/sdma_v5_2.c (IP 5.2.6)"},
    {"gfx1100", Gen::v6, "6.0.0", "Navi31, RX 7900, W7900", "linux drivers/gpu/drm/amd/amdgpu/sdma_v6_0.c (IP 6.0.0)"},
    {"gfx1101", Gen::v6, "6.0.2", "Navi32", "linux drivers/gpu/drm/amd/amdgpu/sdma_v6_0.c (IP 6.0.2)"},
    {"gfx1102", Gen::v6, "6.0.3", "Navi33", "linux drivers/gpu/drm/amd/amdgpu/sdma_v6_0.c (IP 6.0.3)"},
    {"gfx1103", Gen::v6, "6.0.1", "Phoenix APU", "linux drivers/gpu/drm/amd/amdgpu/sdma_v6_0.c (IP 6.0.1)"},
    {"gfx1150", Gen::v6, "6.1.0", "Strix Point APU", "linux drivers/gpu/drm/amd/amdgpu/sdma_v6_0.c (IP 6.1.0)"},
    {"gfx1151", Gen::v6, "6.1.1", "Strix Halo APU", "linux drivers/gpu/drm/amd/amdgpu/sdma_v6_0.c (IP 6.1.1)"},
    {"gfx1200", Gen::v7, "7.0.0", "Navi44, RX 9060", "linux drivers/gpu/drm/amd/amdgpu/sdma_v7_0.c (IP 7.0.0)"},
    {"gfx1201", Gen::v7, "7.0.1", "Navi48, RX 9070, R9700", "linux drivers/gpu/drm/amd/amdgpu/sdma_v7_0.c (IP 7.0.1)"},
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string_view gen_name(Gen g) {
  for (const GenName& n : kGenNames)
    if (n.gen == g) return n.name;
  return "?";
}

std::optional<Gen> parse_gen(std::string_view name) {
  for (const GenName& n : kGenNames)
    if (n.name == name) return n.gen;
  return std::nullopt;
}

std::string gen_list() {
  std::string out;
  for (Gen g : kAllGens) {
    if (!out.empty()) out += ", ";
    out += gen_name(g);
  }
  return out;
}

const Limits& limits(Gen g) { return kLimits[static_cast<int>(g)]; }

std::span<const GfxTarget> gfx_targets() { return kTargets; }

std::optional<GfxTarget> gfx_to_target(std::string_view gfx) {
  std::string key = lower(gfx);
  if (key.rfind("gfx", 0) != 0) key = "gfx" + key;
  for (const GfxTarget& t : kTargets)
    if (t.gfx == key) return t;
  return std::nullopt;
}

// KFD's gfx_target_version is major*10000 + minor*100 + stepping with the
// stepping in decimal (gfx90a = 9.0.10 -> 90010; gfx1100 -> 110000), see
// linux drivers/gpu/drm/amd/amdkfd/kfd_topology.c and kfd_device.c.
std::optional<GfxTarget> gfx_target_version_to_target(uint32_t v) {
  const uint32_t major = v / 10000, minor = (v / 100) % 100, step = v % 100;
  static constexpr char kHex[] = "0123456789abcdef";
  if (step > 15 || minor > 15) return std::nullopt;
  std::string name = "gfx" + std::to_string(major) + kHex[minor] + kHex[step];
  return gfx_to_target(name);
}

}  // namespace conccl::sdma
