// packets/hopper_layout_table.cpp - every Hopper host and copy method, once:
// the table, the method header codec, and the data-dword codec that works
// from the table's rows.
//
// Method offsets, bit ranges and value names are interface facts from:
//   copy methods: NVIDIA/open-gpu-doc classes/dma-copy/clc8b5.h (HOPPER_DMA_COPY_A)
//   host methods: NVIDIA/open-gpu-kernel-modules (580 branch)
//                 src/common/sdk/nvidia/inc/class/clc86f.h (HOPPER_CHANNEL_GPFIFO_A)
//                 and clc56f.h (AMPERE_CHANNEL_GPFIFO_A; same offsets, fuller
//                 value lists for SEM_EXECUTE and the NVC56F_DMA_* header formats)
#include "packets/hopper_layout.hpp"

#include <cctype>

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

}  // namespace

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string qualified(const Method& m) { return std::string(cls_name(m.cls)) + "." + std::string(m.name); }

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

}  // namespace conccl::hopper
