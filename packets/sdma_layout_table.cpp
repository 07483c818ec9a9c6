// packets/sdma_layout_table.cpp - every SDMA packet, every generation, once.
//
// Bit positions are interface facts from the public headers:
//   4.x, 4.4.2: linux drivers/gpu/drm/amd/amdgpu/vega10_sdma_pkt_open.h
//   5.0, 5.2:   linux drivers/gpu/drm/amd/amdgpu/navi10_sdma_pkt_open.h
//               (+ PAL src/core/hw/gfxip/sdma/gfx10/gfx10_merged_sdma_packets.h
//                for the 5.2 "gfx103Plus" fields)
//   6.x:        linux drivers/gpu/drm/amd/amdgpu/sdma_v6_0_0_pkt_open.h
//   7.x:        PAL src/core/hw/gfxip/sdma/gfx12/gfx12_merged_sdma_packets.h
//               (Linux reuses the 6.0 header for 7.0; PAL is the authority)
// cited per field next to the rows.
// Where sources disagree (§6 there) the choice is noted on the row.
#include <array>
#include <mutex>

#include "packets/sdma_layout.hpp"

namespace conccl::sdma {

namespace {

// Generation sets used below.
constexpr GenMask G4 = gen_bit(Gen::v4), G44 = gen_bit(Gen::v4_4), G442 = gen_bit(Gen::v4_4_2),
                  G5 = gen_bit(Gen::v5), G52 = gen_bit(Gen::v5_2), G6 = gen_bit(Gen::v6), G7 = gen_bit(Gen::v7);
constexpr GenMask V4x = G4 | G44 | G442;      // vega10 header
constexpr GenMask V5x = G5 | G52;             // navi10 header
constexpr GenMask UpTo6 = V4x | V5x | G6;     // the three Linux headers
constexpr GenMask From5 = V5x | G6 | G7;
constexpr GenMask All = kAllGenMask;

// Packet sets.
constexpr PktMask P(Pkt p) { return pkt_bit(p); }
constexpr PktMask Copies = P(Pkt::copy) | P(Pkt::copy_bcst);
constexpr PktMask Fills = P(Pkt::fill) | P(Pkt::fill8);
constexpr PktMask Polls = P(Pkt::poll) | P(Pkt::hdp_flush) | P(Pkt::poll_reg);
constexpr PktMask Atomics = P(Pkt::atomic_add64) | P(Pkt::atomic);
constexpr PktMask TsGet = P(Pkt::timestamp) | P(Pkt::timestamp_local);
constexpr PktMask Gcrs = P(Pkt::gcr) | P(Pkt::gcr_user);

constexpr Bits B(uint8_t dw, uint8_t hi, uint8_t lo) { return Bits{dw, lo, uint8_t(hi - lo + 1)}; }

// A field in one bit range.
constexpr FieldRow F(PktMask p, Key k, GenMask g, Bits b, uint8_t flags = 0, Enc e = Enc::raw,
                     uint8_t align = 1) {
  return FieldRow{p, k, g, b, Bits{}, 0, e, flags, align, 0};
}
// A count field stored minus one (bytes, pitches, sizes).
constexpr FieldRow M1(PktMask p, Key k, GenMask g, Bits b, uint8_t flags = 0, uint8_t align = 1) {
  return FieldRow{p, k, g, b, Bits{}, 0, Enc::minus_one, flags, align, 0};
}
// A 64-bit value in dwords dw (low) and dw+1 (high).
constexpr FieldRow Q(PktMask p, Key k, GenMask g, uint8_t dw, uint8_t flags = kHex,
                     uint8_t align = 1, Enc e = Enc::raw) {
  return FieldRow{p, k, g, Bits{dw, 0, 32}, Bits{uint8_t(dw + 1), 0, 32}, 0, e, flags, align, 0};
}
// A 64-bit address whose low `shift` bits are not stored (field addr[31:shift]).
constexpr FieldRow QS(PktMask p, Key k, GenMask g, uint8_t dw, uint8_t shift, uint8_t flags) {
  return FieldRow{p, k, g, Bits{dw, shift, uint8_t(32 - shift)}, Bits{uint8_t(dw + 1), 0, 32},
                  shift, Enc::raw, flags, uint8_t(1u << shift), 0};
}
// A value split over two bit ranges, low bits first, with `shift` low bits dropped.
constexpr FieldRow S2(PktMask p, Key k, GenMask g, Bits lo, Bits hi, uint8_t shift, uint8_t flags) {
  return FieldRow{p, k, g, lo, hi, shift, Enc::raw, flags, uint8_t(1u << shift), 0};
}
// Identifying bits with a fixed value.
constexpr FieldRow X(PktMask p, GenMask g, Bits b, uint32_t value) {
  return FieldRow{p, Key::none, g, b, Bits{}, 0, Enc::raw, 0, 1, value};
}

constexpr uint8_t R = kRequired;
constexpr uint8_t H = kHex;
constexpr uint8_t RH = kRequired | kHex;

constexpr PacketDef kDefs[] = {
    // pkt              name              op  sub gens   dw  tail             ext_key    ext
    {Pkt::nop, "nop", 0, 0, All, 1, Tail::nop_body, Key::none, 0,
     "NOP; count = body dwords after the header (variable length since SDMA 4)"},
    {Pkt::copy_bcst, "copy_bcst", 1, 0, All, 9, Tail::fixed, Key::none, 0,
     "COPY_LINEAR with broadcast[27]=1: one source to two destinations"},
    {Pkt::copy, "copy", 1, 0, All, 7, Tail::ext_flag, Key::dcc, 1,
     "COPY_LINEAR: bytes = count+1; on 7.x dcc=1 adds META_CONFIG dword 7"},
    {Pkt::copy_window, "copy_window", 1, 4, All, 13, Tail::fixed, Key::none, 0,
     "COPY_LINEAR_SUB_WINDOW: 3D rectangle; x/pitch in elements of 1<<elementsize bytes"},
    {Pkt::swap, "swap", 1, 9, G442, 7, Tail::fixed, Key::none, 0,
     "SWAP_LINEAR: exchange bytes between a and b (MI300, per AMD DMA-Latte)"},
    {Pkt::fill, "fill", 11, 0, All, 5, Tail::fixed, Key::none, 0,
     "CONSTANT_FILL, fillsize=2: 32-bit value, bytes multiple of 4"},
    {Pkt::fill8, "fill8", 11, 0, All, 5, Tail::fixed, Key::none, 0,
     "CONSTANT_FILL, fillsize=0: byte fill with value[7:0]"},
    {Pkt::write, "write", 2, 0, All, 4, Tail::data, Key::none, 0,
     "WRITE_UNTILED: data dwords to dst (count = n-1)"},
    {Pkt::fence, "fence", 5, 0, All, 4, Tail::fixed, Key::none, 0,
     "FENCE: write 32-bit value to addr after prior work"},
    {Pkt::trap, "trap", 6, 0, All, 2, Tail::fixed, Key::none, 0,
     "TRAP: raise the queue's interrupt with context ctx"},
    {Pkt::poll, "poll", 8, 0, All, 6, Tail::fixed, Key::none, 0,
     "POLL_REGMEM, memory form: wait until (mem & mask) func ref"},
    {Pkt::hdp_flush, "hdp_flush", 8, 0, All, 6, Tail::fixed, Key::none, 0,
     "POLL_REGMEM, HDP-flush form: write req register, poll done register"},
    {Pkt::poll_reg, "poll_reg", 8, 0, All, 6, Tail::fixed, Key::none, 0,
     "POLL_REGMEM, register form (ROCr's firmware HDP flush is poll_reg req=0x80000000)"},
    {Pkt::atomic_add64, "atomic_add64", 10, 0, All, 8, Tail::fixed, Key::none, 0,
     "ATOMIC TC_OP_ATOMIC_ADD_RTN_64 (47): *addr += value (64-bit)"},
    {Pkt::atomic, "atomic", 10, 0, All, 8, Tail::fixed, Key::none, 0,
     "ATOMIC with any TC_OP opcode op; value = src data, cmp = compare data"},
    {Pkt::timestamp, "timestamp", 13, 2, All, 3, Tail::fixed, Key::none, 0,
     "TIMESTAMP GET_GLOBAL: write the 64-bit global timestamp to addr"},
    {Pkt::timestamp_local, "timestamp_local", 13, 1, All, 3, Tail::fixed, Key::none, 0,
     "TIMESTAMP GET: write the engine-local 64-bit timestamp to addr"},
    {Pkt::timestamp_set, "timestamp_set", 13, 0, All, 3, Tail::fixed, Key::none, 0,
     "TIMESTAMP SET: load the local timestamp counter with value"},
    {Pkt::cond_exe, "cond_exe", 9, 0, All, 5, Tail::fixed, Key::none, 0,
     "COND_EXE: execute the next count dwords only if *addr == ref"},
    {Pkt::ib, "ib", 4, 0, All, 6, Tail::fixed, Key::none, 0,
     "INDIRECT_BUFFER: run size dwords at addr (32-B aligned, end on an 8-dword boundary)"},
    {Pkt::semaphore, "semaphore", 7, 0, All, 3, Tail::fixed, Key::none, 0,
     "SEMAPHORE (legacy)"},
    {Pkt::mem_incr, "mem_incr", 7, 1, From5, 3, Tail::fixed, Key::none, 0,
     "MEM_INCR: 64-bit *addr += 1 (addr 8-B aligned)"},
    {Pkt::gcr, "gcr", 17, 0, From5, 5, Tail::fixed, Key::none, 0,
     "GCR_REQ: cache flush/invalidate (kernel form, with vmid)"},
    {Pkt::gcr_user, "gcr_user", 17, 1, From5, 5, Tail::fixed, Key::none, 0,
     "GCR_USER: cache flush/invalidate from a user queue (ROCr BlitSdmaV5)"},
    {Pkt::reg_write, "reg_write", 14, 0, All, 3, Tail::fixed, Key::none, 0,
     "SRBM_WRITE (<=6) / REGISTER_WRITE (7): reg = register dword offset"},
};

constexpr FieldRow kRows[] = {
    // ---- NOP (all headers: count[29:16]) ----
    F(P(Pkt::nop), Key::count, All, B(0, 29, 16)),

    // ---- COPY_LINEAR and its broadcast form ----
    X(P(Pkt::copy), All, B(0, 27, 27), 0),
    X(P(Pkt::copy_bcst), All, B(0, 27, 27), 1),
    F(Copies, Key::encrypt, UpTo6, B(0, 16, 16)),   // PAL-12 has no encrypt bit
    F(Copies, Key::tmz, All, B(0, 18, 18)),
    F(P(Pkt::copy), Key::cpv, G52 | G6, B(0, 19, 19)),
    F(P(Pkt::copy_bcst), Key::cpv, G6, B(0, 19, 19)),
    F(P(Pkt::copy), Key::dcc, G7, B(0, 19, 19)),   // 7.x: dcc=1 adds dword 7
    F(P(Pkt::copy), Key::backwards, From5, B(0, 25, 25)),
    // 4.4.0 (gfx90a) takes count[29:0]: Linux sdma_v4_0.c sdma_v4_4_buffer_funcs
    // (copy_max_bytes 1 << 30, count = byte_count - 1); see packets/generation.cpp.
    M1(P(Pkt::copy), Key::bytes, G4 | G442 | G5, B(1, 21, 0), R),
    M1(P(Pkt::copy), Key::bytes, G44 | G52 | G6 | G7, B(1, 29, 0), R),
    M1(P(Pkt::copy_bcst), Key::bytes, V4x | V5x, B(1, 21, 0), R),
    M1(P(Pkt::copy_bcst), Key::bytes, G6 | G7, B(1, 29, 0), R),
    F(P(Pkt::copy), Key::dst_sw, UpTo6, B(2, 17, 16)),
    F(P(Pkt::copy), Key::src_sw, UpTo6, B(2, 25, 24)),
    F(P(Pkt::copy), Key::dst_cache_policy, G52 | G6, B(2, 20, 18)),
    F(P(Pkt::copy), Key::src_cache_policy, G52 | G6, B(2, 28, 26)),
    F(P(Pkt::copy), Key::dst_mall_policy, G7, B(2, 21, 20)),
    F(P(Pkt::copy), Key::src_mall_policy, G7, B(2, 29, 28)),
    Q(Copies, Key::src, All, 3, RH),
    Q(P(Pkt::copy), Key::dst, All, 5, RH),
    // COPY 7.x META_CONFIG (dword 7, present only when dcc=1)
    F(P(Pkt::copy), Key::data_format, G7, B(7, 5, 0)),
    F(P(Pkt::copy), Key::number_type, G7, B(7, 11, 9)),
    F(P(Pkt::copy), Key::read_cm, G7, B(7, 17, 16)),
    F(P(Pkt::copy), Key::write_cm, G7, B(7, 19, 18)),
    F(P(Pkt::copy), Key::max_comp, G7, B(7, 25, 24)),
    F(P(Pkt::copy), Key::max_uncomp, G7, B(7, 26, 26)),
    // broadcast: the headers' dst1/dst2 are our dst0/dst1
    F(P(Pkt::copy_bcst), Key::dst1_sw, UpTo6, B(2, 9, 8)),
    F(P(Pkt::copy_bcst), Key::dst0_sw, UpTo6, B(2, 17, 16)),
    F(P(Pkt::copy_bcst), Key::src_sw, UpTo6, B(2, 25, 24)),
    F(P(Pkt::copy_bcst), Key::dst1_cache_policy, G6, B(2, 12, 10)),
    F(P(Pkt::copy_bcst), Key::dst0_cache_policy, G6, B(2, 20, 18)),
    F(P(Pkt::copy_bcst), Key::src_cache_policy, G6, B(2, 28, 26)),
    F(P(Pkt::copy_bcst), Key::dst1_mall_policy, G7, B(2, 13, 12)),
    F(P(Pkt::copy_bcst), Key::dst0_mall_policy, G7, B(2, 21, 20)),
    F(P(Pkt::copy_bcst), Key::src_mall_policy, G7, B(2, 29, 28)),
    Q(P(Pkt::copy_bcst), Key::dst0, All, 5, RH),
    Q(P(Pkt::copy_bcst), Key::dst1, All, 7, RH),

    // ---- COPY_LINEAR_SUB_WINDOW (7.x layout from PAL-12 / ROCr GFX12) ----
    F(P(Pkt::copy_window), Key::tmz, All, B(0, 18, 18)),
    F(P(Pkt::copy_window), Key::cpv, G6, B(0, 19, 19)),
    F(P(Pkt::copy_window), Key::elementsize, All, B(0, 31, 29)),
    Q(P(Pkt::copy_window), Key::src, All, 1, RH, 4),
    F(P(Pkt::copy_window), Key::src_x, UpTo6, B(3, 13, 0)),
    F(P(Pkt::copy_window), Key::src_y, UpTo6, B(3, 29, 16)),
    F(P(Pkt::copy_window), Key::src_x, G7, B(3, 15, 0)),
    F(P(Pkt::copy_window), Key::src_y, G7, B(3, 31, 16)),
    F(P(Pkt::copy_window), Key::src_z, V4x, B(4, 10, 0)),
    F(P(Pkt::copy_window), Key::src_z, V5x | G6, B(4, 12, 0)),
    F(P(Pkt::copy_window), Key::src_z, G7, B(4, 13, 0)),
    M1(P(Pkt::copy_window), Key::src_pitch, UpTo6, B(4, 31, 13), R),
    M1(P(Pkt::copy_window), Key::src_pitch, G7, B(4, 31, 16), R),
    M1(P(Pkt::copy_window), Key::src_slice_pitch, UpTo6, B(5, 27, 0)),
    M1(P(Pkt::copy_window), Key::src_slice_pitch, G7, B(5, 31, 0)),
    Q(P(Pkt::copy_window), Key::dst, All, 6, RH, 4),
    F(P(Pkt::copy_window), Key::dst_x, UpTo6, B(8, 13, 0)),
    F(P(Pkt::copy_window), Key::dst_y, UpTo6, B(8, 29, 16)),
    F(P(Pkt::copy_window), Key::dst_x, G7, B(8, 15, 0)),
    F(P(Pkt::copy_window), Key::dst_y, G7, B(8, 31, 16)),
    F(P(Pkt::copy_window), Key::dst_z, V4x, B(9, 10, 0)),
    F(P(Pkt::copy_window), Key::dst_z, V5x | G6, B(9, 12, 0)),
    F(P(Pkt::copy_window), Key::dst_z, G7, B(9, 13, 0)),
    M1(P(Pkt::copy_window), Key::dst_pitch, UpTo6, B(9, 31, 13), R),
    M1(P(Pkt::copy_window), Key::dst_pitch, G7, B(9, 31, 16), R),
    M1(P(Pkt::copy_window), Key::dst_slice_pitch, UpTo6, B(10, 27, 0)),
    M1(P(Pkt::copy_window), Key::dst_slice_pitch, G7, B(10, 31, 0)),
    M1(P(Pkt::copy_window), Key::rect_x, UpTo6, B(11, 13, 0), R),
    M1(P(Pkt::copy_window), Key::rect_y, UpTo6, B(11, 29, 16), R),
    M1(P(Pkt::copy_window), Key::rect_x, G7, B(11, 15, 0), R),
    M1(P(Pkt::copy_window), Key::rect_y, G7, B(11, 31, 16), R),
    M1(P(Pkt::copy_window), Key::rect_z, V4x, B(12, 10, 0)),
    M1(P(Pkt::copy_window), Key::rect_z, V5x | G6, B(12, 12, 0)),
    M1(P(Pkt::copy_window), Key::rect_z, G7, B(12, 13, 0)),
    F(P(Pkt::copy_window), Key::dst_sw, UpTo6, B(12, 17, 16)),
    F(P(Pkt::copy_window), Key::src_sw, UpTo6, B(12, 25, 24)),
    F(P(Pkt::copy_window), Key::dst_cache_policy, G6, B(12, 20, 18)),
    F(P(Pkt::copy_window), Key::src_cache_policy, G6, B(12, 28, 26)),
    F(P(Pkt::copy_window), Key::dst_mall_policy, G7, B(12, 21, 20)),
    F(P(Pkt::copy_window), Key::src_mall_policy, G7, B(12, 29, 28)),

    // ---- SWAP_LINEAR (DMA-Latte include/sdma_pkt_struct.h; MI300 only) ----
    // count[29:0] per AMDResearch/AMD-DMA-Latte include/sdma_pkt_struct.h; encode still caps bytes
    // at limits().max_copy_bytes.
    M1(P(Pkt::swap), Key::bytes, G442, B(1, 29, 0), R),
    Q(P(Pkt::swap), Key::a, G442, 3, RH),
    Q(P(Pkt::swap), Key::b, G442, 5, RH),

    // ---- CONSTANT_FILL ----
    X(P(Pkt::fill), All, B(0, 31, 30), 2),  // fillsize 2 = dword fill
    X(P(Pkt::fill8), All, B(0, 31, 30), 0), // fillsize 0 = byte fill
    F(Fills, Key::sw, UpTo6, B(0, 17, 16)),
    F(Fills, Key::cache_policy, G6, B(0, 26, 24)),
    F(Fills, Key::cpv, G6, B(0, 28, 28)),
    F(Fills, Key::nopte_comp, G7, B(0, 16, 16)),  // newer Linux names it COMPRESS
    F(Fills, Key::sys, G7, B(0, 20, 20)),
    F(Fills, Key::snp, G7, B(0, 22, 22)),
    F(Fills, Key::gpa, G7, B(0, 23, 23)),
    F(Fills, Key::mall_policy, G7, B(0, 27, 26)),
    Q(P(Pkt::fill), Key::dst, All, 1, RH, 4),
    Q(P(Pkt::fill8), Key::dst, All, 1, RH),
    F(Fills, Key::value, All, B(3, 31, 0), RH),
    // count is bytes-1 even for dword fills (Mesa: "Must be programmed in bytes")
    // 4.4.0: count[29:0] (Linux sdma_v4_4_buffer_funcs fill_max_bytes 1 << 30)
    M1(P(Pkt::fill), Key::bytes, G4 | G442 | V5x, B(4, 21, 0), R, 4),
    M1(P(Pkt::fill), Key::bytes, G44 | G6 | G7, B(4, 29, 0), R, 4),
    M1(P(Pkt::fill8), Key::bytes, G4 | G442 | V5x, B(4, 21, 0), R),
    M1(P(Pkt::fill8), Key::bytes, G44 | G6 | G7, B(4, 29, 0), R),

    // ---- WRITE_UNTILED ----
    F(P(Pkt::write), Key::encrypt, UpTo6, B(0, 16, 16)),
    F(P(Pkt::write), Key::nopte_comp, G7, B(0, 16, 16)),
    F(P(Pkt::write), Key::tmz, All, B(0, 18, 18)),
    F(P(Pkt::write), Key::cpv, G6, B(0, 28, 28)),
    Q(P(Pkt::write), Key::dst, All, 1, RH, 4),
    F(P(Pkt::write), Key::count, All, B(3, 19, 0)),  // = data dwords - 1, set by the encoder
    F(P(Pkt::write), Key::sw, UpTo6, B(3, 25, 24)),
    F(P(Pkt::write), Key::cache_policy, G6, B(3, 28, 26)),
    F(P(Pkt::write), Key::sys, G7, B(3, 20, 20)),
    F(P(Pkt::write), Key::snp, G7, B(3, 22, 22)),
    F(P(Pkt::write), Key::gpa, G7, B(3, 23, 23)),
    F(P(Pkt::write), Key::mall_policy, G7, B(3, 29, 28)),

    // ---- FENCE ----
    // 7.x: PAL-12 marks [18:16] reserved; Linux sdma_v7_0.c sdma_v7_0_ring_emit_fence
    // (through the 6.0 header's SDMA_PKT_FENCE_HEADER_MTYPE) and ROCr BuildFenceCommand
    // write MTYPE 3 there, as on 5.x/6.x (packets/generation.cpp).
    F(P(Pkt::fence), Key::mtype, From5, B(0, 18, 16)),
    F(P(Pkt::fence), Key::gcc, V5x | G6, B(0, 19, 19)),
    F(P(Pkt::fence), Key::sys, From5, B(0, 20, 20)),
    F(P(Pkt::fence), Key::snp, From5, B(0, 22, 22)),
    F(P(Pkt::fence), Key::gpa, From5, B(0, 23, 23)),
    F(P(Pkt::fence), Key::l2_policy, V5x | G6, B(0, 25, 24)),
    F(P(Pkt::fence), Key::llc_policy, G52 | G6, B(0, 26, 26)),
    F(P(Pkt::fence), Key::cpv, G52 | G6, B(0, 28, 28)),
    F(P(Pkt::fence), Key::mall_policy, G7, B(0, 27, 26)),
    Q(P(Pkt::fence), Key::addr, All, 1, RH, 4),
    F(P(Pkt::fence), Key::value, All, B(3, 31, 0), RH),

    // ---- TRAP ----
    F(P(Pkt::trap), Key::ctx, UpTo6, B(1, 27, 0), H),
    F(P(Pkt::trap), Key::ctx, G7, B(1, 31, 0), H),

    // ---- POLL_REGMEM: memory, HDP-flush and register forms ----
    X(P(Pkt::poll), All, B(0, 31, 31), 1),  // mem_poll
    X(P(Pkt::hdp_flush) | P(Pkt::poll_reg), All, B(0, 31, 31), 0),
    X(P(Pkt::poll) | P(Pkt::poll_reg), UpTo6, B(0, 26, 26), 0),  // hdp_flush bit
    X(P(Pkt::hdp_flush), UpTo6, B(0, 26, 26), 1),
    X(P(Pkt::poll) | P(Pkt::poll_reg), G7, B(0, 27, 26), 0),  // 7.x mode
    X(P(Pkt::hdp_flush), G7, B(0, 27, 26), 1),
    F(P(Pkt::poll), Key::func, All, B(0, 30, 28), R),
    F(P(Pkt::hdp_flush) | P(Pkt::poll_reg), Key::func, All, B(0, 30, 28)),
    F(Polls, Key::cache_policy, G52 | G6, B(0, 22, 20)),
    F(Polls, Key::cpv, G52 | G6, B(0, 24, 24)),
    F(Polls, Key::mall_policy, G7, B(0, 23, 22)),
    Q(P(Pkt::poll), Key::addr, All, 1, RH, 4),
    F(P(Pkt::hdp_flush), Key::done, All, B(1, 31, 0), RH),  // register byte address
    F(P(Pkt::hdp_flush), Key::req, All, B(2, 31, 0), RH),
    F(P(Pkt::poll_reg), Key::reg, All, B(1, 31, 0), H),
    F(P(Pkt::poll_reg), Key::req, All, B(2, 31, 0), H),
    F(P(Pkt::poll), Key::ref, All, B(3, 31, 0), RH),
    F(P(Pkt::poll), Key::mask, All, B(4, 31, 0), RH),
    F(P(Pkt::hdp_flush) | P(Pkt::poll_reg), Key::ref, All, B(3, 31, 0), H),
    F(P(Pkt::hdp_flush) | P(Pkt::poll_reg), Key::mask, All, B(4, 31, 0), H),
    F(Polls, Key::interval, All, B(5, 15, 0)),
    F(Polls, Key::retry, All, B(5, 27, 16)),  // 0xfff = retry forever

    // ---- ATOMIC (op codes: TC_OP table, soc21_enum.h) ----
    X(P(Pkt::atomic_add64), All, B(0, 31, 25), 47),
    F(P(Pkt::atomic), Key::op, All, B(0, 31, 25), R),
    F(Atomics, Key::loop, All, B(0, 16, 16)),
    F(Atomics, Key::tmz, All, B(0, 18, 18)),
    F(Atomics, Key::cache_policy, G6, B(0, 22, 20)),
    F(Atomics, Key::cpv, G6, B(0, 24, 24)),
    F(Atomics, Key::mall_policy, G7, B(0, 23, 22)),
    Q(P(Pkt::atomic_add64), Key::addr, All, 1, RH, 8),
    Q(P(Pkt::atomic), Key::addr, All, 1, RH, 4),
    Q(P(Pkt::atomic_add64), Key::value, All, 3, RH, 1, Enc::signed64),
    Q(P(Pkt::atomic), Key::value, All, 3, H, 1, Enc::signed64),
    Q(P(Pkt::atomic), Key::cmp, All, 5, H, 1, Enc::signed64),
    F(Atomics, Key::loop_interval, All, B(7, 12, 0)),

    // ---- TIMESTAMP ----
    QS(TsGet, Key::addr, All, 1, 3, RH),  // write_addr_31_3
    F(TsGet, Key::l2_policy, G6, B(0, 25, 24)),
    F(TsGet, Key::llc_policy, G6, B(0, 26, 26)),
    F(TsGet, Key::cpv, G6, B(0, 28, 28)),
    F(TsGet, Key::mall_policy, G7, B(0, 27, 26)),
    Q(P(Pkt::timestamp_set), Key::value, All, 1, RH),

    // ---- COND_EXE ----
    F(P(Pkt::cond_exe), Key::cache_policy, G6, B(0, 26, 24)),
    F(P(Pkt::cond_exe), Key::cpv, G6, B(0, 28, 28)),
    F(P(Pkt::cond_exe), Key::mall_policy, G7, B(0, 27, 26)),
    Q(P(Pkt::cond_exe), Key::addr, All, 1, RH, 4),
    F(P(Pkt::cond_exe), Key::ref, All, B(3, 31, 0), RH),
    F(P(Pkt::cond_exe), Key::count, All, B(4, 13, 0), R),

    // ---- INDIRECT_BUFFER ----
    F(P(Pkt::ib), Key::vmid, All, B(0, 19, 16)),
    Q(P(Pkt::ib), Key::addr, All, 1, RH, 32),
    F(P(Pkt::ib), Key::size, All, B(3, 19, 0), R),
    Q(P(Pkt::ib), Key::csa, All, 4, H),

    // ---- SEMAPHORE / MEM_INCR ----
    F(P(Pkt::semaphore), Key::write_one, All, B(0, 29, 29)),
    F(P(Pkt::semaphore), Key::signal, All, B(0, 30, 30)),
    F(P(Pkt::semaphore), Key::mailbox, All, B(0, 31, 31)),
    Q(P(Pkt::semaphore), Key::addr, All, 1, RH, 8),
    F(P(Pkt::mem_incr), Key::l2_policy, G52 | G6, B(0, 25, 24)),
    F(P(Pkt::mem_incr), Key::llc_policy, G52 | G6, B(0, 26, 26)),
    F(P(Pkt::mem_incr), Key::cpv, G52 | G6, B(0, 28, 28)),
    F(P(Pkt::mem_incr), Key::mall_policy, G7, B(0, 27, 26)),
    QS(P(Pkt::mem_incr), Key::addr, From5, 1, 3, RH),

    // ---- GCR_REQ / GCR_USER ----
    S2(Gcrs, Key::base, From5, B(1, 31, 7), B(2, 15, 0), 7, H),
    S2(Gcrs, Key::control, V5x | G6, B(2, 31, 16), B(3, 2, 0), 0, H),
    S2(Gcrs, Key::control, G7, B(2, 31, 16), B(3, 3, 0), 0, H),
    S2(Gcrs, Key::limit, From5, B(3, 31, 7), B(4, 15, 0), 7, H),
    F(P(Pkt::gcr), Key::vmid, From5, B(4, 27, 24)),

    // ---- SRBM_WRITE / REGISTER_WRITE ----
    F(P(Pkt::reg_write), Key::byte_en, UpTo6, B(0, 31, 28), H),
    F(P(Pkt::reg_write), Key::reg, UpTo6, B(1, 17, 0), RH),
    F(P(Pkt::reg_write), Key::apertureid, V5x | G6, B(1, 31, 20), H),
    F(P(Pkt::reg_write), Key::reg, G7, B(1, 31, 2), RH),  // 7.x: byte address = reg << 2
    F(P(Pkt::reg_write), Key::value, All, B(2, 31, 0), RH),
};

constexpr std::string_view kKeyNames[kKeyCount] = {
    "-", "src", "dst", "dst0", "dst1", "a", "b", "addr", "bytes", "value", "cmp", "data",
    "count", "ref", "mask", "func", "interval", "retry", "ctx", "op", "size", "csa", "vmid",
    "base", "limit", "control", "reg", "byte_en", "done", "req",
    "encrypt", "tmz", "cpv", "dcc", "backwards", "loop", "loop_interval", "priv",
    "sw", "src_sw", "dst_sw", "dst0_sw", "dst1_sw",
    "cache_policy", "src_cache_policy", "dst_cache_policy", "dst0_cache_policy", "dst1_cache_policy",
    "mall_policy", "src_mall_policy", "dst_mall_policy", "dst0_mall_policy", "dst1_mall_policy",
    "l2_policy", "llc_policy", "mtype", "gcc", "sys", "snp", "gpa", "nopte_comp",
    "data_format", "number_type", "read_cm", "write_cm", "max_comp", "max_uncomp",
    "elementsize", "src_x", "src_y", "src_z", "src_pitch", "src_slice_pitch",
    "dst_x", "dst_y", "dst_z", "dst_pitch", "dst_slice_pitch", "rect_x", "rect_y", "rect_z",
    "write_one", "signal", "mailbox", "apertureid",
};

// Layouts resolved once: [pkt][gen].
struct Resolved {
  std::array<std::array<Layout, kGenCount>, kPktCount> layouts{};
  std::array<std::array<bool, kGenCount>, kPktCount> present{};
};

const Resolved& resolved() {
  static const Resolved r = [] {
    Resolved out;
    for (const PacketDef& def : kDefs) {
      for (Gen g : kAllGens) {
        if (!(def.gens & gen_bit(g))) continue;
        const int pi = static_cast<int>(def.pkt), gi = static_cast<int>(g);
        Layout& l = out.layouts[pi][gi];
        out.present[pi][gi] = true;
        l.def = &def;
        l.gen = g;
        l.defined_mask[0] = 0xFFFF;  // op, sub_op
        for (const FieldRow& row : kRows) {
          if (!(row.pkts & pkt_bit(def.pkt)) || !(row.gens & gen_bit(g))) continue;
          for (const Bits& b : {row.lo_part, row.hi_part})
            if (b.width) l.defined_mask[b.dw] |= b.mask();
          if (row.key == Key::none) {
            l.fixed_rows[l.fixed_count++] = &row;
          } else {
            const int k = static_cast<int>(row.key);
            l.by_key[k] = &row;
            l.rows[l.row_count++] = &row;
            if (row.flags & kRequired) l.required[k / 64] |= 1ull << (k % 64);
          }
        }
      }
    }
    return out;
  }();
  return r;
}

}  // namespace

std::string_view key_name(Key k) { return kKeyNames[static_cast<int>(k)]; }

bool parse_key(std::string_view name, Key* out) {
  for (int i = 1; i < kKeyCount; ++i)
    if (kKeyNames[i] == name) {
      *out = static_cast<Key>(i);
      return true;
    }
  return false;
}

std::span<const PacketDef> packet_defs() { return kDefs; }

const PacketDef& packet_def(Pkt p) {
  for (const PacketDef& d : kDefs)
    if (d.pkt == p) return d;
  return kDefs[0];  // unreachable: every Pkt has a def (checked by a test)
}

std::span<const FieldRow> field_rows() { return kRows; }

bool packet_exists(Pkt p, Gen g) {
  return resolved().present[static_cast<int>(p)][static_cast<int>(g)];
}

bool parse_pkt(std::string_view name, Pkt* out) {
  for (const PacketDef& d : kDefs)
    if (d.name == name) {
      *out = d.pkt;
      return true;
    }
  return false;
}

const Layout* layout(Pkt p, Gen g) {
  if (static_cast<int>(p) >= kPktCount) return nullptr;
  const Resolved& r = resolved();
  const int pi = static_cast<int>(p), gi = static_cast<int>(g);
  return r.present[pi][gi] ? &r.layouts[pi][gi] : nullptr;
}

}  // namespace conccl::sdma
