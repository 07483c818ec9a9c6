// packets/hopper_ce.cpp - the Hopper copy-engine method table, its codec,
// the command list and the text form.
//
// Method offsets, bit ranges and value names are interface facts from:
//   copy methods: NVIDIA/open-gpu-doc classes/dma-copy/clc8b5.h (HOPPER_DMA_COPY_A)
//   host methods: NVIDIA/open-gpu-kernel-modules (580 branch)
//                 src/common/sdk/nvidia/inc/class/clc86f.h (HOPPER_CHANNEL_GPFIFO_A)
//                 and clc56f.h (AMPERE_CHANNEL_GPFIFO_A; same offsets, fuller
//                 value lists for SEM_EXECUTE and the NVC56F_DMA_* header formats)
// Usage facts (which fields a copy/fill/release sets) from the UVM driver's
// Hopper CE HAL, kernel-open/nvidia-uvm/uvm_hopper_ce.c, as summarised in
// and tinygrad runtime/ops_nv.py.
#include "packets/hopper_ce.hpp"
#include "packets/sdma_asm.hpp"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>

namespace conccl::hopper {

namespace {

// ---- value-name lists -----------------------------------------------------
constexpr EnumVal kFalseTrue[] = {{"false", 0}, {"true", 1}};
constexpr EnumVal kSetObjectEngine[] = {{"sw", 0x1F}};
constexpr EnumVal kSemOperation[] = {  // clc56f.h NVC56F_SEM_EXECUTE_OPERATION_*
    {"acquire", 0},      {"release", 1}, {"acq_strict_geq", 2}, {"acq_circ_geq", 3},
    {"acq_and", 4},      {"acq_nor", 5}, {"reduction", 6}};
constexpr EnumVal kPayloadSize[] = {{"32bit", 0}, {"64bit", 1}};
constexpr EnumVal kHostReduction[] = {  // NVC56F_SEM_EXECUTE_REDUCTION_*
    {"imin", 0}, {"imax", 1}, {"ixor", 2}, {"iand", 3}, {"ior", 4}, {"iadd", 5}, {"inc", 6}, {"dec", 7}};
constexpr EnumVal kSignedness[] = {{"signed", 0}, {"unsigned", 1}};
constexpr EnumVal kWfiScope[] = {{"current_scg_type", 0}, {"all", 1}};
constexpr EnumVal kMemOpD[] = {  // clc86f.h NVC86F_MEM_OP_D_OPERATION_*
    {"membar", 5},          {"mmu_tlb_invalidate", 9},     {"mmu_tlb_invalidate_targeted", 0xA},
    {"mmu_operation", 0xB}, {"l2_peermem_invalidate", 0xD}, {"l2_sysmem_invalidate", 0xE},
    {"l2_clean_comptags", 0xF}, {"l2_flush_dirty", 0x10},  {"l2_wait_for_sys_pending_reads", 0x15},
    {"access_counter_clr", 0x16}};
constexpr EnumVal kFenceType[] = {{"monitored_fence", 0}, {"monitored_fence_ext", 1}};
constexpr EnumVal kRenderMode[] = {{"false", 0}, {"true", 1}, {"conditional", 2},
                                   {"render_if_equal", 3}, {"render_if_not_equal", 4}};
constexpr EnumVal kPhysTarget[] = {{"local_fb", 0}, {"coherent_sysmem", 1},
                                   {"noncoherent_sysmem", 2}, {"peermem", 3}};
constexpr EnumVal kTransferType[] = {{"none", 0}, {"pipelined", 1}, {"non_pipelined", 2}};
constexpr EnumVal kCeSemType[] = {  // NVC8B5_LAUNCH_DMA_SEMAPHORE_TYPE_*
    {"none", 0}, {"release_semaphore_no_timestamp", 1}, {"release_semaphore_with_timestamp", 2},
    {"release_conditional_intr_semaphore", 3}};
constexpr EnumVal kInterruptType[] = {{"none", 0}, {"blocking", 1}, {"non_blocking", 2}};
constexpr EnumVal kLayout[] = {{"blocklinear", 0}, {"pitch", 1}};
constexpr EnumVal kAddrType[] = {{"virtual", 0}, {"physical", 1}};
constexpr EnumVal kCeReduction[] = {  // NVC8B5_LAUNCH_DMA_SEMAPHORE_REDUCTION_*
    {"imin", 0}, {"imax", 1}, {"ixor", 2}, {"iand", 3}, {"ior", 4}, {"iadd", 5}, {"inc", 6},
    {"dec", 7},  {"fadd", 0xA}, {"fmin", 0xB}, {"fmax", 0xC}};
constexpr EnumVal kCopyType[] = {{"default", 0}, {"secure", 1}, {"nonprot2nonprot", 2}};
constexpr EnumVal kFlushType[] = {{"sys", 0}, {"gl", 1}};
constexpr EnumVal kSemPayload[] = {{"one_word", 0}, {"two_word", 1}};
constexpr EnumVal kSecureMode[] = {{"encrypt", 0}, {"decrypt", 1}};
constexpr EnumVal kRemapSrc[] = {{"src_x", 0},   {"src_y", 1},   {"src_z", 2},   {"src_w", 3},
                                 {"const_a", 4}, {"const_b", 5}, {"no_write", 6}};
constexpr EnumVal kOneToFour[] = {{"one", 0}, {"two", 1}, {"three", 2}, {"four", 3}};

constexpr Field F(std::string_view n, uint8_t hi, uint8_t lo) { return Field{n, hi, lo, {}, false, false}; }
constexpr Field FH(std::string_view n, uint8_t hi, uint8_t lo) { return Field{n, hi, lo, {}, true, false}; }
constexpr Field FE(std::string_view n, uint8_t hi, uint8_t lo, std::span<const EnumVal> v) {
  return Field{n, hi, lo, v, false, false};
}

// ---- host methods (clc86f.h / clc56f.h) ------------------------------------
constexpr Field kSetObject[] = {FH("nvclass", 15, 0), FE("engine", 20, 16, kSetObjectEngine)};
constexpr Field kHandle[] = {FH("handle", 31, 0)};
constexpr Field kValue32[] = {FH("value", 31, 0)};
constexpr Field kMemOpDFields[] = {FH("pdb_addr_hi", 26, 0), FE("operation", 31, 27, kMemOpD)};
// SEM_ADDR_LO OFFSET 31:2 is written in place: addr=<byte address, 4-aligned>.
constexpr Field kSemAddrLo[] = {Field{"addr", 31, 2, {}, true, true}};
constexpr Field kSemAddrHi[] = {FH("addr_hi", 24, 0)};  // clc86f.h: 24:0 (clc56f.h: 7:0)
constexpr Field kPayload[] = {FH("payload", 31, 0)};
// ACQUIRE_SWITCH_TSG 12:12 (clc86f.h NVC86F_SEM_EXECUTE_ACQUIRE_SWITCH_TSG,
// _EN 1): a failing acquire switches to another TSG; printed acquire_switch_tsg=1.
constexpr Field kSemExecute[] = {
    FE("operation", 2, 0, kSemOperation),   F("acquire_switch_tsg", 12, 12),
    F("release_wfi", 20, 20),               FE("payload_size", 24, 24, kPayloadSize),
    F("release_timestamp", 25, 25),         FE("reduction", 30, 27, kHostReduction),
    FE("reduction_format", 31, 31, kSignedness)};
constexpr Field kWfi[] = {FE("scope", 0, 0, kWfiScope)};

// ---- copy methods (clc8b5.h) -----------------------------------------------
constexpr Field kParameter[] = {FH("parameter", 31, 0)};
constexpr Field kV[] = {FH("v", 31, 0)};
constexpr Field kFenceTypeF[] = {FE("type", 0, 0, kFenceType)};
constexpr Field kUpper[] = {FH("upper", 24, 0)};
constexpr Field kLower[] = {FH("lower", 31, 0)};
constexpr Field kRenderC[] = {FE("mode", 2, 0, kRenderMode)};
constexpr Field kPhysMode[] = {FE("target", 1, 0, kPhysTarget), F("basic_kind", 5, 2),
                               F("peer_id", 8, 6), F("fla", 9, 9)};
constexpr Field kLaunchDma[] = {
    FE("data_transfer_type", 1, 0, kTransferType),
    FE("flush_enable", 2, 2, kFalseTrue),
    FE("semaphore_type", 4, 3, kCeSemType),
    FE("interrupt_type", 6, 5, kInterruptType),
    FE("src_memory_layout", 7, 7, kLayout),
    FE("dst_memory_layout", 8, 8, kLayout),
    FE("multi_line_enable", 9, 9, kFalseTrue),
    FE("remap_enable", 10, 10, kFalseTrue),
    FE("force_rmwdisable", 11, 11, kFalseTrue),
    FE("src_type", 12, 12, kAddrType),
    FE("dst_type", 13, 13, kAddrType),
    FE("semaphore_reduction", 17, 14, kCeReduction),
    FE("semaphore_reduction_sign", 18, 18, kSignedness),
    FE("semaphore_reduction_enable", 19, 19, kFalseTrue),
    FE("copy_type", 21, 20, kCopyType),
    F("vprmode", 22, 22),
    FE("memory_scrub_enable", 23, 23, kFalseTrue),
    F("reserved_start_of_copy", 24, 24),
    FE("flush_type", 25, 25, kFlushType),
    FE("disable_plc", 26, 26, kFalseTrue),
    FE("semaphore_payload_size", 27, 27, kSemPayload),
    F("reserved_err_code", 31, 28)};
constexpr Field kCountValue[] = {F("value", 31, 0)};
constexpr Field kSecureModeF[] = {FE("mode", 0, 0, kSecureMode)};
constexpr Field kScrubParams[] = {FE("discardable", 0, 0, kFalseTrue)};
constexpr Field kRemapComponents[] = {
    FE("dst_x", 2, 0, kRemapSrc),  FE("dst_y", 6, 4, kRemapSrc),
    FE("dst_z", 10, 8, kRemapSrc), FE("dst_w", 14, 12, kRemapSrc),
    FE("component_size", 17, 16, kOneToFour), FE("num_src_components", 21, 20, kOneToFour),
    FE("num_dst_components", 25, 24, kOneToFour)};

constexpr Cls H = Cls::host;
constexpr Cls C = Cls::copy;

constexpr Method kMethods[] = {
    // cls off    name                       fields       summary
    {H, 0x000, "set_object", kSetObject, "bind a class (nvclass) to this subchannel"},
    {H, 0x004, "illegal", kHandle, "raise an illegal-method error"},
    {H, 0x008, "nop", kHandle, "no operation"},
    {H, 0x020, "non_stall_interrupt", kHandle, "raise a non-stalling interrupt"},
    {H, 0x028, "mem_op_a", kValue32, "memory operation argument A"},
    {H, 0x02C, "mem_op_b", kValue32, "memory operation argument B"},
    {H, 0x030, "mem_op_c", kValue32, "memory operation argument C (membar type 2:0 ...)"},
    {H, 0x034, "mem_op_d", kMemOpDFields, "memory operation: membar, TLB invalidate, L2 flush"},
    {H, 0x05C, "sem_addr_lo", kSemAddrLo, "semaphore address bits 31:2"},
    {H, 0x060, "sem_addr_hi", kSemAddrHi, "semaphore address bits 56:32"},
    {H, 0x064, "sem_payload_lo", kPayload, "semaphore payload bits 31:0"},
    {H, 0x068, "sem_payload_hi", kPayload, "semaphore payload bits 63:32"},
    {H, 0x06C, "sem_execute", kSemExecute, "acquire (wait) / release / reduce the semaphore"},
    {H, 0x078, "wfi", kWfi, "wait for idle"},
    {C, 0x100, "nop", kParameter, "no operation"},
    {C, 0x140, "pm_trigger", kV, "performance-monitor trigger"},
    {C, 0x21C, "set_monitored_fence_type", kFenceTypeF, "monitored fence type"},
    {C, 0x220, "set_monitored_fence_signal_addr_base_upper", kUpper, "monitored fence address 56:32"},
    {C, 0x224, "set_monitored_fence_signal_addr_base_lower", kLower, "monitored fence address 31:0"},
    {C, 0x240, "set_semaphore_a", kUpper, "semaphore address bits 56:32"},
    {C, 0x244, "set_semaphore_b", kLower, "semaphore address bits 31:0"},
    {C, 0x248, "set_semaphore_payload", kPayload, "semaphore payload bits 31:0"},
    {C, 0x24C, "set_semaphore_payload_upper", kPayload, "semaphore payload bits 63:32 (two-word)"},
    {C, 0x254, "set_render_enable_a", kUpper, "render-enable address 56:32"},
    {C, 0x258, "set_render_enable_b", kLower, "render-enable address 31:0"},
    {C, 0x25C, "set_render_enable_c", kRenderC, "render-enable mode"},
    {C, 0x260, "set_src_phys_mode", kPhysMode, "aperture of a physical source"},
    {C, 0x264, "set_dst_phys_mode", kPhysMode, "aperture of a physical destination"},
    {C, 0x300, "launch_dma", kLaunchDma, "start the transfer and/or semaphore operation"},
    {C, 0x400, "offset_in_upper", kUpper, "source address bits 56:32"},
    {C, 0x404, "offset_in_lower", kValue32, "source address bits 31:0"},
    {C, 0x408, "offset_out_upper", kUpper, "destination address bits 56:32"},
    {C, 0x40C, "offset_out_lower", kValue32, "destination address bits 31:0"},
    {C, 0x410, "pitch_in", kCountValue, "source pitch (bytes per line)"},
    {C, 0x414, "pitch_out", kCountValue, "destination pitch (bytes per line)"},
    {C, 0x418, "line_length_in", kCountValue, "bytes per line (elements when remapping)"},
    {C, 0x41C, "line_count", kCountValue, "lines (multi-line transfers)"},
    {C, 0x500, "set_secure_copy_mode", kSecureModeF, "secure-copy direction"},
    {C, 0x6FC, "set_memory_scrub_parameters", kScrubParams, "memory scrub parameters"},
    {C, 0x700, "set_remap_const_a", kV, "remap constant A"},
    {C, 0x704, "set_remap_const_b", kV, "remap constant B"},
    {C, 0x708, "set_remap_components", kRemapComponents, "remap: per-component source, sizes"},
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

// Decimal or 0x-hex, no sign: the SDMA text form's number syntax.
bool parse_num(std::string_view s, uint64_t* out) { return sdma::parse_u64(s, out); }

std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> out;
  s = trim(s);
  while (!s.empty()) {
    size_t e = 0;
    while (e < s.size() && !std::isspace(static_cast<unsigned char>(s[e]))) ++e;
    out.push_back(s.substr(0, e));
    s = trim(s.substr(e));
  }
  return out;
}

std::string qualified(const Method& m) { return std::string(cls_name(m.cls)) + "." + std::string(m.name); }

uint8_t default_subch(Cls c) { return c == Cls::copy ? kCopySubchannel : 0; }

std::string_view op_name(HdrOp op) {
  switch (op) {
    case HdrOp::inc: return "inc";
    case HdrOp::non_inc: return "noninc";
    case HdrOp::immd: return "immd";
    case HdrOp::one_inc: return "oneinc";
  }
  return "?";
}

}  // namespace

// ---- header -----------------------------------------------------------------

Result<uint32_t> encode_header(const Header& h) {
  if (h.subch >= kSubchannels)
    return error(Code::out_of_range, "subchannel " + std::to_string(h.subch) + " is not 0..7");
  if ((h.method & 3) || h.method > 0x3FFC)
    return error(Code::out_of_range, "method offset " + hex(h.method) +
                                         " must be a multiple of 4 below 0x4000 (ADDRESS 11:0 holds offset/4)");
  if (h.count > kMaxHeaderCount)
    return error(Code::out_of_range, std::string(h.op == HdrOp::immd ? "immediate data " : "count ") +
                                         std::to_string(h.count) + " exceeds 13 bits (max 8191)");
  switch (h.op) {
    case HdrOp::inc:
    case HdrOp::non_inc:
    case HdrOp::immd:
    case HdrOp::one_inc:
      break;
    default:
      return error(Code::invalid_argument, "unknown header op");
  }
  return (uint32_t(h.op) << 29) | (uint32_t(h.count) << 16) | (uint32_t(h.subch) << 13) |
         (uint32_t(h.method) >> 2);
}

Result<Header> decode_header(uint32_t dw) {
  const uint32_t sec = dw >> 29;
  Header h;
  h.count = static_cast<uint16_t>((dw >> 16) & 0x1FFF);
  h.subch = static_cast<uint8_t>((dw >> 13) & 7);
  h.method = static_cast<uint16_t>((dw & 0xFFF) << 2);
  switch (sec) {
    case 1: h.op = HdrOp::inc; break;
    case 3: h.op = HdrOp::non_inc; break;
    case 4: h.op = HdrOp::immd; break;
    case 5: h.op = HdrOp::one_inc; break;
    default:
      return error(Code::invalid_argument,
                   "method header " + hex(dw) + " has SEC_OP " + std::to_string(sec) +
                       (sec == 7 ? " (END_PB_SEGMENT)" : sec == 0 || sec == 2 ? " (subdevice-mask group)" : " (reserved)") +
                       ", which this decoder does not handle (expected 1 inc, 3 noninc, 4 immd, 5 oneinc)");
  }
  if (dw & 0x1000)  // bit 12 is not part of ADDRESS 11:0
    return error(Code::invalid_argument, "method header " + hex(dw) + " sets bit 12, outside ADDRESS 11:0");
  return h;
}

// ---- table ------------------------------------------------------------------

std::string_view cls_name(Cls c) { return c == Cls::host ? "host" : "copy"; }

uint32_t Method::defined_mask() const {
  uint32_t m = 0;
  for (const Field& f : fields) m |= f.mask();
  return m;
}

std::span<const Method> methods() { return kMethods; }

const Method* find_method(Cls cls, uint16_t offset) {
  for (const Method& m : kMethods)
    if (m.cls == cls && m.offset == offset) return &m;
  return nullptr;
}

const Method* find_method(std::string_view qualified_name) {
  const size_t dot = qualified_name.find('.');
  if (dot == std::string_view::npos) return nullptr;
  const std::string_view c = qualified_name.substr(0, dot), n = qualified_name.substr(dot + 1);
  Cls cls;
  if (iequal(c, "host")) cls = Cls::host;
  else if (iequal(c, "copy")) cls = Cls::copy;
  else return nullptr;
  for (const Method& m : kMethods)
    if (m.cls == cls && iequal(m.name, n)) return &m;
  return nullptr;
}

Result<uint32_t> encode_method(const Method& m, std::span<const FieldValue> fields, uint32_t reserved) {
  uint32_t dw = 0;
  uint32_t seen = 0;
  for (const FieldValue& fv : fields) {
    if (fv.field >= m.fields.size())
      return error(Code::internal, "field index out of range for " + qualified(m));
    const Field& f = m.fields[fv.field];
    const std::string where = qualified(m) + " " + std::string(f.name);
    if (seen & (1u << fv.field)) return error(Code::invalid_argument, where + " given twice");
    seen |= 1u << fv.field;
    uint32_t bits = 0;
    if (f.in_place) {  // a byte address whose low bits must be zero
      if (fv.value & ~f.mask()) return error(Code::invalid_argument, where + "=" + hex(fv.value) + " has bits outside " + std::to_string(f.hi) + ":" + std::to_string(f.lo) + " (must be aligned)");
      bits = fv.value;
    } else {
      if (f.width() < 32 && (uint64_t(fv.value) >> f.width()) != 0)
        return error(Code::out_of_range, where + "=" + hex(fv.value) + " does not fit " +
                                             std::to_string(f.width()) + " bits (" + std::to_string(f.hi) +
                                             ":" + std::to_string(f.lo) + ")");
      bits = fv.value << f.lo;
    }
    dw |= bits & f.mask();
  }
  if (reserved & m.defined_mask())
    return error(Code::invalid_argument, qualified(m) + " rsvd=" + hex(reserved) +
                                             " overlaps defined fields (mask " + hex(m.defined_mask()) + ")");
  return dw | reserved;
}

DecodedMethod decode_method(const Method& m, uint32_t data) {
  DecodedMethod d;
  for (size_t i = 0; i < m.fields.size(); ++i) {
    const Field& f = m.fields[i];
    uint32_t v = (data & f.mask());
    if (!f.in_place) v >>= f.lo;
    if (v) d.fields.push_back({static_cast<uint8_t>(i), v});
  }
  d.reserved = data & ~m.defined_mask();
  return d;
}

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

// ---- text form --------------------------------------------------------------

SubchMap SubchMap::defaults() {
  SubchMap m;
  m.cls[kCopySubchannel] = Cls::copy;
  return m;
}

namespace {

struct Item {
  const Method* m = nullptr;  // null: raw `mthd`
  uint16_t offset = 0;
  uint32_t data = 0;
};

Status parse_value(const Method* m, const Field* f, std::string_view key, std::string_view v, uint64_t* out) {
  if (f) {
    for (const EnumVal& e : f->values)
      if (iequal(e.name, v)) {
        *out = e.value;
        return Status();
      }
  }
  if (parse_num(v, out)) return Status();
  std::string names;
  if (f)
    for (const EnumVal& e : f->values) names += (names.empty() ? "" : ", ") + std::string(e.name);
  return error(Code::invalid_argument,
               (m ? qualified(*m) : std::string("mthd")) + ": value '" + std::string(v) + "' for '" +
                   std::string(key) + "' is not a number" + (names.empty() ? "" : " or one of: " + names));
}

// One method item: "copy.launch_dma a=b c=d" or "mthd offset=0x.. value=0x..".
Result<Item> parse_item(std::string_view text) {
  const std::vector<std::string_view> tok = split_ws(text);
  if (tok.empty()) return error(Code::invalid_argument, "empty method between ';'");
  Item it;
  if (iequal(tok[0], "mthd")) {
    bool have_off = false;
    for (size_t i = 1; i < tok.size(); ++i) {
      const size_t eq = tok[i].find('=');
      uint64_t v = 0;
      const std::string_view k = eq == std::string_view::npos ? tok[i] : tok[i].substr(0, eq);
      if (eq == std::string_view::npos || !parse_num(tok[i].substr(eq + 1), &v))
        return error(Code::invalid_argument, "mthd: expected offset=N or value=N, got '" + std::string(tok[i]) + "'");
      if (k == "offset") {
        if (v > 0x3FFC || (v & 3))
          return error(Code::out_of_range, "mthd offset=" + hex(v) + " must be a multiple of 4 below 0x4000");
        it.offset = static_cast<uint16_t>(v);
        have_off = true;
      } else if (k == "value") {
        if (v > 0xFFFFFFFFull) return error(Code::out_of_range, "mthd value=" + hex(v) + " exceeds 32 bits");
        it.data = static_cast<uint32_t>(v);
      } else {
        return error(Code::invalid_argument, "mthd: unknown key '" + std::string(k) + "' (offset, value)");
      }
    }
    if (!have_off) return error(Code::invalid_argument, "mthd needs offset=");
    return it;
  }
  it.m = find_method(tok[0]);
  if (!it.m) {
    std::string hint = tok[0].find('.') == std::string_view::npos
                           ? " (write class.method, e.g. copy.launch_dma or host.sem_execute)"
                           : " (see describe_methods / sdma-probe asm --gen hopper-ce --help)";
    return error(Code::invalid_argument, "unknown method '" + std::string(tok[0]) + "'" + hint);
  }
  it.offset = it.m->offset;
  std::vector<FieldValue> fv;
  uint32_t rsvd = 0;
  for (size_t i = 1; i < tok.size(); ++i) {
    const size_t eq = tok[i].find('=');
    if (eq == std::string_view::npos || eq == 0)
      return error(Code::invalid_argument, qualified(*it.m) + ": expected key=value, got '" + std::string(tok[i]) + "'");
    const std::string_view k = tok[i].substr(0, eq), v = tok[i].substr(eq + 1);
    if (k == "rsvd") {
      uint64_t r = 0;
      if (!parse_num(v, &r) || r > 0xFFFFFFFFull)
        return error(Code::invalid_argument, qualified(*it.m) + ": rsvd='" + std::string(v) + "' is not a 32-bit number");
      rsvd = static_cast<uint32_t>(r);
      continue;
    }
    int idx = -1;
    for (size_t j = 0; j < it.m->fields.size(); ++j)
      if (iequal(it.m->fields[j].name, k)) idx = static_cast<int>(j);
    if (idx < 0) {
      std::string keys;
      for (const Field& f : it.m->fields) keys += (keys.empty() ? "" : ", ") + std::string(f.name);
      return error(Code::invalid_argument, qualified(*it.m) + ": unknown key '" + std::string(k) + "' (keys: " + keys + ", rsvd)");
    }
    uint64_t val = 0;
    CONCCL_RETURN_IF_ERROR(parse_value(it.m, &it.m->fields[idx], k, v, &val));
    if (val > 0xFFFFFFFFull)
      return error(Code::out_of_range, qualified(*it.m) + ": " + std::string(k) + "=" + hex(val) + " exceeds 32 bits");
    fv.push_back({static_cast<uint8_t>(idx), static_cast<uint32_t>(val)});
  }
  Result<uint32_t> dw = encode_method(*it.m, fv, rsvd);
  if (!dw.ok()) return dw.status();
  it.data = *dw;
  return it;
}

std::string format_item(const Method* m, uint16_t offset, uint32_t data) {
  if (!m) return "mthd offset=" + hex(offset) + " value=" + hex(data);
  std::string s = qualified(*m);
  const DecodedMethod d = decode_method(*m, data);
  for (const FieldValue& fv : d.fields) {
    const Field& f = m->fields[fv.field];
    s += ' ';
    s += f.name;
    s += '=';
    std::string_view name;
    for (const EnumVal& e : f.values)
      if (e.value == fv.value) name = e.name;
    if (!name.empty()) s += name;
    else if (f.hex) s += hex(fv.value);
    else s += std::to_string(fv.value);
  }
  if (d.reserved) s += " rsvd=" + hex(d.reserved);
  return s;
}

const Method* method_for(const SubchMap& map, uint8_t subch, uint16_t offset) {
  if (offset < 0x100) return find_method(Cls::host, offset);
  if (map.cls[subch]) return find_method(*map.cls[subch], offset);
  return nullptr;
}

}  // namespace

Status assemble_line(std::string_view line, std::vector<uint32_t>* out, bool* produced) {
  if (produced) *produced = false;
  if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  line = trim(line);
  if (line.empty()) return Status();

  // Leading header tokens: [inc|noninc|oneinc|immd] [subch=N].
  HdrOp op = HdrOp::inc;
  int subch = -1;
  while (true) {
    const size_t sp = line.find_first_of(" \t");
    const std::string_view t = line.substr(0, sp);
    if (iequal(t, "inc")) op = HdrOp::inc;
    else if (iequal(t, "noninc")) op = HdrOp::non_inc;
    else if (iequal(t, "oneinc")) op = HdrOp::one_inc;
    else if (iequal(t, "immd")) op = HdrOp::immd;
    else if (t.size() > 6 && iequal(t.substr(0, 6), "subch=")) {
      uint64_t v = 0;
      if (!parse_num(t.substr(6), &v) || v >= kSubchannels)
        return error(Code::out_of_range, "subch='" + std::string(t.substr(6)) + "' is not 0..7");
      subch = static_cast<int>(v);
    } else break;
    if (sp == std::string_view::npos) return error(Code::invalid_argument, "header without a method");
    line = trim(line.substr(sp));
  }

  std::vector<Item> items;
  while (!line.empty()) {
    const size_t semi = line.find(';');
    Result<Item> it = parse_item(line.substr(0, semi));
    if (!it.ok()) return it.status();
    items.push_back(*it);
    line = semi == std::string_view::npos ? std::string_view() : trim(line.substr(semi + 1));
    if (semi != std::string_view::npos && line.empty())
      return error(Code::invalid_argument, "trailing ';' without a method");
  }
  const Item& first = items.front();
  if (subch < 0) subch = first.m ? default_subch(first.m->cls) : 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const uint16_t want = op == HdrOp::non_inc   ? first.offset
                          : op == HdrOp::one_inc ? static_cast<uint16_t>(first.offset + 4)
                                                 : static_cast<uint16_t>(first.offset + 4 * i);
    if (items[i].offset != want)
      return error(Code::invalid_argument,
                   "method " + std::to_string(i + 1) + " of this " + std::string(op_name(op)) + " header is at " +
                       hex(items[i].offset) + " but the header addresses " + hex(want) +
                       (op == HdrOp::inc ? " (inc: consecutive methods)" : ""));
    if (first.offset >= 0x100 && items[i].m && first.m && items[i].m->cls != first.m->cls)
      return error(Code::invalid_argument, "one header cannot mix host and copy class methods above 0x100");
  }
  Header h;
  h.op = op;
  h.subch = static_cast<uint8_t>(subch);
  h.method = first.offset;
  if (op == HdrOp::immd) {
    if (items.size() != 1) return error(Code::invalid_argument, "an immd header carries exactly one method");
    if (first.data > kMaxImmediate)
      return error(Code::out_of_range, "immd data " + hex(first.data) + " exceeds 13 bits (max 0x1fff)");
    h.count = static_cast<uint16_t>(first.data);
  } else {
    if (items.size() > kMaxHeaderCount)
      return error(Code::out_of_range, "more than 8191 methods in one header");
    h.count = static_cast<uint16_t>(items.size());
  }
  Result<uint32_t> hdr = encode_header(h);
  if (!hdr.ok()) return hdr.status();
  out->push_back(*hdr);
  if (op != HdrOp::immd)
    for (const Item& it : items) out->push_back(it.data);
  if (produced) *produced = true;
  return Status();
}

Result<std::vector<uint32_t>> assemble(std::string_view text) {
  std::vector<uint32_t> out;
  size_t line_no = 0;
  while (true) {
    ++line_no;
    const size_t nl = text.find('\n');
    Status st = assemble_line(text.substr(0, nl), &out);
    if (!st.ok()) return st.prefix("line " + std::to_string(line_no));
    if (nl == std::string_view::npos) break;
    text = text.substr(nl + 1);
  }
  return out;
}

Disassembly disassemble(std::span<const uint32_t> dw, SubchMap map) {
  Disassembly d;
  size_t pos = 0;
  while (pos < dw.size()) {
    Result<Header> h = decode_header(dw[pos]);
    if (!h.ok()) {
      d.error = h.status();
      d.error_offset = pos;
      return d;
    }
    const size_t n = h->op == HdrOp::immd ? 0 : h->count;
    if (pos + 1 + n > dw.size()) {
      d.error = error(Code::invalid_argument, "header " + hex(dw[pos]) + " announces " + std::to_string(n) +
                                                  " data dwords but only " + std::to_string(dw.size() - pos - 1) +
                                                  " follow (truncated pushbuffer)");
      d.error_offset = pos;
      return d;
    }
    if (h->op != HdrOp::immd && n == 0) {
      d.error = error(Code::invalid_argument, "header " + hex(dw[pos]) + " has count 0 (nothing to write)");
      d.error_offset = pos;
      return d;
    }
    std::string line;
    const Method* m0 = method_for(map, h->subch, h->method);
    if (h->op != HdrOp::inc) line += std::string(op_name(h->op)) + " ";
    if (h->subch != (m0 ? default_subch(m0->cls) : 0)) line += "subch=" + std::to_string(h->subch) + " ";
    const size_t items = h->op == HdrOp::immd ? 1 : n;
    for (size_t i = 0; i < items; ++i) {
      const uint16_t off = h->op == HdrOp::non_inc   ? h->method
                           : h->op == HdrOp::one_inc ? static_cast<uint16_t>(h->method + (i ? 4 : 0))
                           : h->op == HdrOp::immd    ? h->method
                                                     : static_cast<uint16_t>(h->method + 4 * i);
      const uint32_t data = h->op == HdrOp::immd ? h->count : dw[pos + 1 + i];
      const Method* m = off < 0x4000 ? method_for(map, h->subch, off) : nullptr;
      if (i) line += "; ";
      line += format_item(m, off, data);
      if (m && m->cls == Cls::host && m->offset == 0x000) {  // SET_OBJECT rebinds the subchannel
        const uint32_t cls = data & 0xFFFF;
        if (cls == (kHopperDmaCopyA & 0xFFFF)) map.cls[h->subch] = Cls::copy;
        else map.cls[h->subch].reset();
      }
    }
    d.lines.push_back(std::move(line));
    d.offsets.push_back(pos);
    pos += 1 + n;
  }
  return d;
}

std::string disassemble_text(std::span<const uint32_t> dw) {
  const Disassembly d = disassemble(dw);
  std::string out;
  for (const std::string& l : d.lines) out += l + "\n";
  if (!d.error.ok()) out += "# error at dword " + std::to_string(d.error_offset) + ": " + d.error.message() + "\n";
  return out;
}

std::string describe_methods() {
  std::string out =
      "  header: [inc|noninc|oneinc|immd] [subch=N] class.method key=value ...; class.method ...\n";
  for (const Method& m : kMethods) {
    char off[16];
    std::snprintf(off, sizeof off, "0x%03x", m.offset);
    out += "  " + qualified(m) + " (" + off + ")";
    for (const Field& f : m.fields) {
      out += " " + std::string(f.name) + "[" + std::to_string(f.hi) + ":" + std::to_string(f.lo) + "]";
      if (!f.values.empty()) {
        out += "{";
        for (size_t i = 0; i < f.values.size(); ++i) out += (i ? "," : "") + std::string(f.values[i].name);
        out += "}";
      }
    }
    out += "\n      " + std::string(m.summary) + "\n";
  }
  return out;
}

}  // namespace conccl::hopper
