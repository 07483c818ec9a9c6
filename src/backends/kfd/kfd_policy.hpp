// src/backends/kfd/kfd_policy.hpp - the KFD backend's layers below the device
// (internal): so that everything except the thin thunk layer is compiled and
// tested on any machine (see docs/hardware.md):
//  - sysfs:   read_sysfs() parses KFD's topology tree (nodes, SDMA engine
//             counts, io_links / p2p_links, recommended engine masks) from a
//             configurable root, so tests point it at fixture trees.
//  - policy:  pure decisions: which queue type and engine argument a KFD
//             version and thunk allow, which memory flags each use gets, how
//             thunk/kernel errors map to Status.
// No driver header is included here: the thunk's types stay in kfd_device.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "packets/generation.hpp"
#include "conccl/commands.hpp"
#include "conccl/kfd.hpp"
#include "conccl/status.hpp"
#include "conccl/topology.hpp"

namespace conccl::kfd {

// ---------------------------------------------------------------------------
// sysfs: KFD's topology exactly as the kernel lays it out
// (linux drivers/gpu/drm/amd/amdkfd/kfd_topology.c; the thunk reads the same
// files in libhsakmt/src/topology.c):
//   <root>/system_properties, <root>/generation_id
//   <root>/nodes/<n>/{gpu_id, name, properties}
//   <root>/nodes/<n>/mem_banks/<m>/properties
//   <root>/nodes/<n>/io_links/<m>/properties
//   <root>/nodes/<n>/p2p_links/<m>/properties      (kernel >= 5.19)
// Every properties file is "key value" lines with decimal values.

// io_link types (CRAT; hsakmttypes.h HSA_IOLINKTYPE).
inline constexpr uint32_t kLinkTypePcie = 2;
inline constexpr uint32_t kLinkTypeXgmi = 11;
// io_link flags (kfd_crat.h CRAT_IOLINK_FLAGS_*).
inline constexpr uint32_t kLinkFlagEnabled = 1u << 0;
inline constexpr uint32_t kLinkFlagNonCoherent = 1u << 1;
inline constexpr uint32_t kLinkFlagNoAtomics32 = 1u << 2;
inline constexpr uint32_t kLinkFlagNoAtomics64 = 1u << 3;
inline constexpr uint32_t kLinkFlagNoPeerToPeerDma = 1u << 4;

struct SysLink {
  std::string dir;  // "io_links" or "p2p_links"
  int index = 0;    // <m> in the path
  uint32_t type = 0;
  uint32_t node_from = 0, node_to = 0;  // sysfs node ids
  uint32_t weight = 0;
  uint32_t min_bandwidth = 0, max_bandwidth = 0;  // MB/s
  uint32_t flags = 0;
  // recommended_sdma_engine_id_mask: absent before KFD 1.17 (kernel ~6.12).
  std::optional<uint32_t> rec_sdma_eng_id_mask;
};

struct SysNode {
  int id = 0;           // <n>: the sysfs node id
  uint32_t gpu_id = 0;  // 0 for CPU nodes
  std::string name;     // contents of "name" ("" for CPUs on most kernels)
  std::map<std::string, uint64_t> props;  // every line of "properties"
  uint64_t vram_bytes = 0;                // sum of FB mem_banks (heap_type 1/2)
  std::vector<SysLink> io_links, p2p_links;

  uint64_t prop(const std::string& key, uint64_t fallback = 0) const {
    auto it = props.find(key);
    return it == props.end() ? fallback : it->second;
  }
  bool has(const std::string& key) const { return props.count(key) != 0; }
  // A GPU node: has SIMDs (what AMD DMA-Latte's gen_sdma_map_sysfs.py tests)
  // or a gfx target, and a non-zero gpu_id.
  bool is_gpu() const { return gpu_id != 0 && (prop("simd_count") > 0 || prop("gfx_target_version") > 0); }
};

struct SysTopology {
  std::string root;
  std::vector<SysNode> nodes;          // sorted by id
  std::vector<std::string> warnings;   // unparsable lines, unreadable files
  const SysNode* node(uint32_t id) const {
    for (const SysNode& n : nodes)
      if (n.id == static_cast<int>(id)) return &n;
    return nullptr;
  }
};

// Errors: Code::unavailable when root has no nodes/ directory (no KFD here);
// a malformed file becomes a warning and the node or link is skipped.
Result<SysTopology> read_sysfs(const std::string& root = kDefaultSysfsRoot);

// Whether this process can open /dev/dri/renderD<minor> (0 if yes, else the
// errno). The thunk hides GPU nodes whose render node fails with ENOENT or
// EPERM (libhsakmt topology.c topology_sysfs_check_node_supported), so the
// thunk's node ids skip them; build_topology() applies the same rule.
using RenderAccess = std::function<int(int drm_render_minor)>;
RenderAccess default_render_access(const std::string& dri_dir = kDefaultDriDir);
inline RenderAccess all_render_nodes_accessible() {
  return [](int) { return 0; };
}

// The context save/restore (CWSR) area libhsakmt allocates with every queue
// it creates as HSA_QUEUE_SDMA_BY_ENG_ID (ROCR-Runtime libhsakmt/src/queues.c
// handle_concrete_asic skips it only for SDMA and SDMA_XGMI queues; KFD does
// not use it for SDMA queues). Per queue the thunk allocates
// (ctx_save_restore_size + debug_memory_size) x num_xcc, page-aligned: VRAM
// (an SVM range prefetched to the GPU) where KFD has the SVM API, else GTT.
// ctx_save_restore_size is KFD's cwsr_size node property where the kernel
// publishes it (kfd_topology.c node_show), else computed from the node's
// properties with amdkfd kfd_queue.c kfd_queue_ctx_save_restore_size (the
// thunk's update_ctx_save_restore_size is the same formula):
//   cu    = simd_count / simd_per_cu / num_xcc
//   waves = gfx < 10.1 ? min(cu * 40, array_count / simd_arrays_per_engine * 512) : cu * 32
//   wg    = align4K(cu * (vgpr(gfx) + 16 KiB SGPR + LDS + 4 KiB HWREG))
//   ctl   = align4K(40-byte header + waves * (gfx < 10.1 ? 8 : 12) + 8)   (gfx10: <= 0x7000)
//   debug = align64(waves * 32)
// vgpr: 512 KiB on gfx908/90a/94x/950, 384 KiB on gfx1100/1101/1200/1201,
// else 256 KiB; LDS: lds_size_in_kb (64 KiB when absent).
struct CwsrEstimate {
  uint64_t bytes = 0;          // per queue, every XCC together; 0 = not known
  uint64_t per_xcc_bytes = 0;  // ctx_save_restore_size + debug_memory_size
  uint32_t xccs = 1;
  std::string source;          // how the figure was obtained, for the topology note
};
CwsrEstimate queue_cwsr_estimate(const SysNode& gpu);
// The figure reported on MI300X (gfx942 SPX: 8 XCCs), used only where sysfs
// lacks what the formula needs.
inline constexpr uint64_t kMi300xReportedCwsrBytes = 177ull << 20;

// One GPU as the KFD backend uses it.
struct GpuNode {
  int index = 0;           // ConCCL GPU index (Topology::gpus[index])
  int sysfs_node = 0;      // <n> in sysfs
  int thunk_node = 0;      // libhsakmt NodeId (sysfs order minus hidden nodes)
  uint32_t gpu_id = 0;     // KFD's gpu_id hash
  uint32_t gfx_target_version = 0;
  std::string gfx;         // "gfx942"
  sdma::Gen gen = sdma::Gen::v4;
  int num_sdma = 0;        // PCIe-optimised engines: ids 0 .. num_sdma-1
  int num_xgmi = 0;        // xGMI-optimised engines: ids num_sdma .. num_sdma+num_xgmi-1
  int queues_per_engine = 0;
  int drm_render_minor = 0;
  uint64_t hive_id = 0;
  uint64_t location_id = 0, domain = 0;
  uint16_t min_submit_bytes = 0;  // from the gfx target (gfx900/904/90c: 256)
  CwsrEstimate cwsr;              // what each by-engine-id queue costs beside its ring
  // The GPU's io_link to the CPU (the first one to a CPU node): its type and
  // CRAT flags. KFD marks links without PCIe AtomicOps NO_ATOMICS_32/64, and
  // ROCr then completes with FENCEs instead of ATOMICs; an xGMI CPU link
  // (MI300A, MI250X with Trento) needs no HDP flush.
  bool cpu_link_known = false;
  uint32_t cpu_link_type = 0;
  uint32_t cpu_link_flags = 0;
  bool cpu_link_xgmi() const { return cpu_link_known && cpu_link_type == kLinkTypeXgmi; }
  // 64-bit atomics from this GPU's engines reach system memory (unknown: yes,
  // as before; the link's flags say otherwise when KFD knows).
  bool host_atomics64() const { return !(cpu_link_flags & kLinkFlagNoAtomics64); }
  int engine_count() const { return num_sdma + num_xgmi; }
};

struct KfdTopology {
  Topology topology;             // backend "kfd"; notes explain skipped nodes and fallbacks
  std::vector<GpuNode> gpus;     // same order as topology.gpus
  int cpu_nodes = 0;
  const GpuNode* by_sysfs(int sysfs_node) const {
    for (const GpuNode& g : gpus)
      if (g.sysfs_node == sysfs_node) return &g;
    return nullptr;
  }
};

// GPU nodes in sysfs order become GPUs 0..N-1 (the order HIP enumerates
// them). A GPU whose gfx target has no SDMA packet generation here (gfx8 and
// older, unknown targets), whose render node this process cannot open, or
// that reports no SDMA engines is skipped with a note. Links to CPU nodes are
// not listed; a GPU pair reachable through both io_links and p2p_links keeps
// the lower weight. Where the kernel gives no recommended_sdma_engine_id_mask
// the recommendation is what the kernel computes outside its 8-GPU table
// (kfd_set_recommended_sdma_engines): every xGMI engine for an xGMI peer,
// every PCIe engine otherwise, and a note says so.
Result<KfdTopology> build_topology(const SysTopology& sys, const RenderAccess& access);

// ---------------------------------------------------------------------------
// policy: pure decisions, unit-tested on any machine.

// What the running system offers for queue creation.
struct Capabilities {
  uint32_t kfd_major = 0, kfd_minor = 0;  // hsaKmtGetVersion
  bool thunk_has_create_queue_ext = false;  // detected at configure time
};

enum class QueueMode : uint8_t {
  by_engine_id,     // HSA_QUEUE_SDMA_BY_ENG_ID: the queue lands on exactly the engine asked for
  kernel_chooses,   // HSA_QUEUE_SDMA / HSA_QUEUE_SDMA_XGMI: KFD picks the first free slot of the pool
};
const char* queue_mode_name(QueueMode m);  // "by-engine-id", "kernel-chooses"

struct QueueModeDecision {
  QueueMode mode = QueueMode::kernel_chooses;
  std::string reason;  // one sentence: why this mode, and how to get the other
};
QueueModeDecision decide_queue_mode(const Capabilities& caps);

// What each queue costs beside its ring in a queue mode: the thunk's CWSR
// area for by-engine-id queues, nothing for SDMA / SDMA_XGMI queues.
inline uint64_t per_queue_bytes(QueueMode mode, const CwsrEstimate& cwsr) {
  return mode == QueueMode::by_engine_id ? cwsr.bytes : 0;
}

// KFD 1.17 introduced SDMA_BY_ENG_ID (kfd_ioctl.h "1.17 - Add SDMA queue
// creation with target SDMA engine ID").
inline constexpr uint32_t kKfdMinorByEngineId = 17;

// Thunk queue types (hsakmttypes.h HSA_QUEUE_TYPE); checked against the real
// header in src/backends/kfd/kfd_device.cpp.
enum class ThunkQueueType : uint32_t { sdma = 2, sdma_xgmi = 5, sdma_by_eng_id = 6 };
const char* thunk_queue_type_name(ThunkQueueType t);

struct QueuePlan {
  ThunkQueueType type = ThunkQueueType::sdma;
  uint32_t sdma_engine_id = 0;  // argument of hsaKmtCreateQueueExt (0 otherwise)
  bool pinned = false;          // true: the engine is exactly `engine`
  std::string placement;        // human-readable: where the queue will land
};
// Errors: Code::invalid_argument when engine is outside 0..num_sdma+num_xgmi-1.
// `pin` narrows by_engine_id per GPU (Options::pin_engines says how).
Result<QueuePlan> plan_queue(QueueMode mode, const GpuNode& gpu, int engine, Options::Pin pin = Options::Pin::auto_);

// Ring sizes KFD accepts and the shared Queue needs: a power of two, at least
// 4 KiB (one page: each ring is its own GPUVM mapping of exactly its size).
Status check_ring_bytes(size_t bytes);

// HsaMemFlags as plain fields (bit order of hsakmttypes.h, 5.2.3 and newer
// agree on these bits; newer thunks only add bits after Uncached).
struct MemFlags {
  bool non_paged = false;
  uint8_t cache_policy = 0;  // HSA_CACHING_TYPE
  bool read_only = false;
  uint8_t page_size = 0;     // HSA_PAGE_SIZE_4KB
  bool host_access = false;
  bool no_substitute = false;
  bool execute_access = false;
  bool coarse_grain = false;
  bool no_numa_bind = false;
  bool uncached = false;
  uint32_t bits() const;  // HsaMemFlags::Value
  std::string describe() const;  // "HostAccess NonPaged ..."
};

// What a piece of memory is for; each gets its own flags (see policy.cpp for
// the reasons and their sources).
enum class MemUse : uint8_t {
  ring,           // an SDMA ring: host memory, fine-grained, GPU-uncached, executable
  host,           // MemKind::host buffers: signals, staging, results read by the CPU
  device,         // MemKind::device: VRAM, CPU-visible where the BAR allows
  device_hidden,  // VRAM retry without a CPU mapping (small-BAR systems)
};
const char* mem_use_name(MemUse u);
MemFlags mem_flags_for(MemUse use);

// How a fresh allocation is zeroed. KFD does not promise zeroed VRAM, and CPU
// stores through the BAR run at PCIe write-combining speed (a few GB/s) while
// an SDMA constant fill runs at VRAM speed without the CPU. So VRAM without a
// CPU mapping, and CPU-visible VRAM of kSdmaZeroMinBytes or more, is zeroed by
// a CONSTANT_FILL on the device's internal queue; smaller VRAM (where queue
// submission and the wait cost more than the stores) and host memory keep the
// memset. The threshold is a choice, not yet measured on hardware.
enum class ZeroBy : uint8_t { cpu, sdma };
inline constexpr size_t kSdmaZeroMinBytes = size_t(1) << 20;
ZeroBy zero_by(MemUse use, size_t bytes);
// The deadline for zeroing `bytes` with SDMA: 30 s plus 1 s per GiB (an
// engine slower than 1 GiB/s is broken, not slow).
std::chrono::milliseconds sdma_zero_timeout(size_t bytes);
// Which GPUs a buffer is mapped to at allocation: rings only to their own
// GPU (kfdtest BaseQueue); host memory to every GPU; VRAM to its owner and
// every GPU with a peer-DMA-capable link to it (so any engine can copy
// to/from it). Returns ConCCL GPU indices, owner first.
std::vector<int> map_targets(const KfdTopology& t, MemUse use, int owner);

// Thunk status codes (hsakmttypes.h HSAKMT_STATUS); checked against the real
// header in kfd_device.cpp.
enum class KmtStatus : int {
  success = 0,
  error = 1,
  driver_mismatch = 2,
  invalid_parameter = 3,
  invalid_handle = 4,
  invalid_node_unit = 5,
  no_memory = 6,
  buffer_too_small = 7,
  not_implemented = 10,
  not_supported = 11,
  unavailable = 12,
  out_of_resources = 13,
  kernel_io_channel_not_opened = 20,
  kernel_communication_error = 21,
  kernel_already_opened = 22,
  hsammu_unavailable = 23,
  wait_failure = 30,
  wait_timeout = 31,
  memory_already_registered = 35,
  memory_not_registered = 36,
  memory_alignment = 37,
};
const char* kmt_status_name(int status);

// Why /dev/kfd (or a render node) could not be opened, with the fix.
Status open_error(int err, const std::string& path);
// Checks that `path` can be opened read-write (what hsaKmtOpenKFD does first).
Status probe_device_node(const std::string& path = kDefaultDevicePath);
// Status for a failed thunk call other than queue creation. saved_errno is
// errno right after the call (the 5.2.3 thunk reports every ioctl failure as
// HSAKMT_STATUS_ERROR and leaves the reason in errno).
Status thunk_error(const std::string& call, int status, int saved_errno, const std::string& fix);
// Status for a failed hsaKmtCreateQueue[Ext]: KFD returns -ENOMEM when the
// engine's (or the pool's) queue slots are all taken, by any process.
Status queue_create_error(int status, int saved_errno, const GpuNode& gpu, int engine, const QueuePlan& plan);
// Status for hsaKmtOpenKFD / hsaKmtGetVersion outcomes.
Status open_kfd_error(int status, int saved_errno, const std::string& device_path);

// Thunk timeouts are whole milliseconds, 0 = poll, 0xFFFFFFFF = forever:
// the remaining time rounded up, at least 1 ms, at most max_ms.
uint32_t wait_slice_ms(std::chrono::nanoseconds remaining, uint32_t max_ms = 1000);

// The packets that wake a host sleeping on a KFD signal event once the
// engine gets there: FENCE(mailbox, id) when the event has a mailbox, then
// TRAP(id). KFD (kfd_events.c, reached from kfd_int_process_v9.c on an SDMA
// TRAP interrupt) looks the event up by the TRAP's context id and wakes it
// only if its slot in the events page (the "mailbox", HsaEvent
// EventData.HWData2) is marked signaled - the canonical tail of kfdtest,
// ROCr's BlitSdma and tinygrad. All or nothing.
Status record_wake(CommandBuffer& cb, uint32_t event_id, uint64_t mailbox_va);
// The packets that raise an interrupt signal of the hsa-runtime in the
// process (ROCr; rocr_wake.hpp) from an SDMA queue: an ATOMIC add of 1 to the
// amd_signal_t's value, then, where the signal has an event mailbox, the
// tail of record_wake (GCR writeback, FENCE(mailbox, id), TRAP(id)), which
// wakes a thread in hsa_signal_wait_scacquire as ROCr's own signal
// completion does (ROCR-Runtime core/runtime/interrupt_signal.cpp; linux
// amdkfd kfd_events.c). A signal without a mailbox (ROCr with interrupts off)
// gets the add alone. All or nothing.
Status record_wake_rocr(CommandBuffer& cb, uint64_t value_va, uint32_t event_id, uint64_t mailbox_va);


// Who owns the process's KFD events page (issue #14, defect 1).
struct ThunkSharing {
  bool hsa_runtime_loaded = false;     // libhsa-runtime64 is in the process
  bool hsa_runtime_private_thunk = false;  // ...and carries its own libhsakmt (no hsaKmt* of ours in it)
};
struct TrapDecision {
  bool trap_wakeups = true;
  std::string reason;  // one sentence for the topology notes: which thunk, why TRAPs are on or off
};
// Options::trap_wakeups (and CONCCL_KFD_TRAP, "" when unset) with what is loaded.
TrapDecision decide_trap(Options::Trap opt, const std::string& env, const ThunkSharing& t);
// A refused hsaKmtCreateEvent that means "another thunk copy owns the events
// page": KFD returns -EINVAL (kfd_events.c kfd_event_page_set), which 5.2.3
// reports as HSAKMT_STATUS_ERROR + errno EINVAL and newer thunks as
// HSAKMT_STATUS_INVALID_PARAMETER.
bool is_events_page_conflict(int status, int saved_errno);
inline constexpr const char* kTrapOffConflict =
    "TRAP wake-ups off: KFD refused this process's events page (\"Event page is already set\": another libhsakmt "
    "copy, e.g. the one inside ROCm >= 6.3's libhsa-runtime64, opened events first); waits poll with naps instead. "
    "Load ConCCL before HIP, or use a ROCm whose libhsa-runtime64 shares libhsakmt.so, to get them back";

// What an open KFD device decided, for tests and diagnostics.
class KfdInternals {
 public:
  virtual ~KfdInternals() = default;
  virtual const KfdTopology& kfd_topology() const = 0;
  virtual QueueModeDecision queue_mode() const = 0;
  virtual Capabilities capabilities() const = 0;
  virtual bool trap_wakeups() const = 0;
};
// Null for devices of other backends.
inline const KfdInternals* internals(const Device& d) { return dynamic_cast<const KfdInternals*>(&d); }

}  // namespace conccl::kfd
