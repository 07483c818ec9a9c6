// conccl/kfd.hpp - the KFD backend: real SDMA queues on AMD GPUs through
// /dev/kfd and libhsakmt (the ROCm thunk): its options, the device with what
// KFD adds to conccl::Device (registering and importing memory), and open().
// open_device({.backend = "kfd"}) gives the same device.
//
// The backend's own layers (sysfs topology parser, queue-mode and memory
// policy, the thunk layer) are internal: src/backends/kfd/kfd_policy.hpp and
// docs/hardware.md. No driver header is included here.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "conccl/commands.hpp"
#include "conccl/device.hpp"
#include "conccl/status.hpp"
#include "conccl/topology.hpp"

namespace conccl::kfd {

inline constexpr const char* kDefaultSysfsRoot = "/sys/devices/virtual/kfd/kfd/topology";
inline constexpr const char* kDefaultDevicePath = "/dev/kfd";
inline constexpr const char* kDefaultDriDir = "/dev/dri";

// ---------------------------------------------------------------------------
// device

class ShareSys;   // internal (src/backends/kfd/kfd_share.hpp)
class SmiEvents;  // internal (src/backends/kfd/kfd_smi.hpp)

struct Options {
  std::string sysfs_root = kDefaultSysfsRoot;  // KFD topology to read (tests: a fixture tree)
  // Checked for access before libhsakmt runs, for a precise error; the thunk
  // itself always opens /dev/kfd.
  std::string device_path = kDefaultDevicePath;
  std::string dri_dir = kDefaultDriDir;  // where renderD<minor> nodes are checked
  // Fail open() with Code::unavailable unless queues can be pinned to
  // engines (KFD >= 1.17 and a thunk with hsaKmtCreateQueueExt).
  bool require_engine_ids = false;
  // KFD events: TRAP wake-ups (a KFD signal event per queue) and the report
  // of GPU memory faults (one memory event). KFD accepts one events page per
  // process, set at the first event of any type (linux amdkfd kfd_events.c:
  // "Event page is already set"; libhsakmt events.c hsaKmtCreateEvent), so
  // two libhsakmt copies in one process (ROCm >= 6.3 links a private one into
  // libhsa-runtime64) cannot both have events, whichever opens first.
  // auto: events only where they cannot take HIP's: a libhsa-runtime64 that
  // shares this libhsakmt is loaded (one page for both). Otherwise none: a HIP
  // initialised later in the process would find the page taken and hang in
  // its waits; waits poll with naps, or, where a libhsa-runtime64 is already
  // loaded in the process, sleep on its interrupt signals (one ROCr signal
  // per queue raised by the engine; CONCCL_KFD_ROCR_WAKE=0 turns that off;
  // docs/hardware.md), and faults show as timeouts with the hang diagnosis.
  // on: the process never loads HIP/ROCr (the one configuration where
  // ConCCL's events are safe): TRAP wake-ups and fault reports.
  // CONCCL_KFD_TRAP=0/1 overrides auto. Without events, GPU memory faults
  // and resets are still reported (Code::device_fault), through KFD's SMI
  // event files, which take no events page (they name the process, not the
  // faulting address).
  enum class Trap : uint8_t { auto_, on, off };
  Trap trap_wakeups = Trap::auto_;
  // Pinning queues to engines (HSA_QUEUE_SDMA_BY_ENG_ID, where KFD and the
  // thunk have it). Each pinned queue costs the thunk a CWSR area (tens of MiB
  // of VRAM on RDNA) and an EOP buffer. auto: as ROCr decides
  // (rocr-runtime core/runtime/amd_gpu_agent.cpp, where it picks rec_eng):
  // pinned on GPUs with xGMI engines (MI200, MI300), not on GPUs without them
  // (Radeon/RDNA: "resources are limited"), where KFD places each queue on the
  // next free engine of its pool. on: pinned wherever KFD allows (exact engine
  // placement on RDNA too, at that memory cost). off: never. gfx9 below gfx90a
  // is never pinned (ROCr saw "strange behavior" there). require_engine_ids
  // with auto means on.
  enum class Pin : uint8_t { auto_, on, off };
  Pin pin_engines = Pin::auto_;
  // DeviceOptions::process_slot (0..15, -1: none): this process's memory
  // then lives in the slot's address window and can be shared with other
  // processes, which map it at the same address (docs/multiprocess.md).
  int process_slot = -1;
  // Tests: the system calls behind shared memory (null: the real ones).
  std::shared_ptr<ShareSys> share_sys;
  // Tests: where the SMI fault watch gets its event files (null: /dev/kfd).
  std::shared_ptr<SmiEvents> smi_events;
};

class KfdDevice : public Device {
 public:
  // Makes existing host memory reachable by every GPU's engines
  // (hsaKmtRegisterMemoryToNodes + hsaKmtMapMemoryToGPUNodes). The pages
  // around [ptr, ptr+bytes) are registered; a page can belong to only one
  // registration. free() deregisters.
  virtual Result<Buffer> register_host(void* ptr, size_t bytes) = 0;
  // Uses memory allocated by HIP/HSA in this process (hsaKmtQueryPointerInfo)
  // and maps it to `gpus` too (none: leave its mappings as they are). free()
  // forgets it without freeing or unmapping it.
  virtual Result<Buffer> import(const void* ptr, size_t bytes, std::span<const int> gpus = {}) = 0;
  // Adds GPU mappings to a buffer from alloc/register_host/import.
  virtual Status map_to(const Buffer& buffer, std::span<const int> gpus) = 0;
};

// Opens the KFD backend. Errors name the cause and the fix: Code::unavailable
// (built without libhsakmt, no /dev/kfd, no permission, unsupported KFD),
// Code::not_found (no usable AMD GPU).
Result<std::unique_ptr<KfdDevice>> open(const Options& options = {});

// How this build talks to the thunk: "libhsakmt (<hsakmt.h>, no
// hsaKmtCreateQueueExt)" or "not built with libhsakmt".
std::string build_description();
bool built_with_libhsakmt();

}  // namespace conccl::kfd
