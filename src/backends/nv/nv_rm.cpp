// src/backends/nv/nv_rm.cpp - RM/UVM call primitives, the VA window, memory.
//
// Memory recipe (open-gpu-kernel-modules nvos.h / cl0040.h; tinygrad
// ops_nv.py NVKIface.alloc / _gpu_map_to_cpu / _gpu_uvm_map):
//   device: NV01_MEMORY_LOCAL_USER (NV_MEMORY_ALLOCATION_PARAMS), optional CPU
//           mapping through NV_ESC_RM_MAP_MEMORY + mmap of a fresh /dev/nvidiaN
//           fd (write-combined);
//   host:   anonymous pages at our VA, registered with NV_ESC_RM_ALLOC_MEMORY as
//           NV01_MEMORY_SYSTEM_OS_DESCRIPTOR (CPU-cached, one VA for both);
//   GPU mapping: UVM_CREATE_EXTERNAL_RANGE, NV_ESC_RM_MAP_MEMORY_DMA at a fixed
//           offset, UVM_MAP_EXTERNAL_ALLOCATION - at the same VA.
// Every VA comes from one of two windows reserved with mmap(PROT_NONE,
// MAP_FIXED_NOREPLACE): the ring window below 2^40 (GP rings, pushbuffers) and
// the data window (everything else).
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include <fstream>
#include <sstream>

#include "backends/nv/nv_device.hpp"
#include "backends/nv/rm_abi.hpp"

namespace conccl::nv {

namespace {

// src/common/sdk/nvidia/inc/nvstatuscodes.h, codes 0x00..0x8B in order.
constexpr const char* kStatusNames[] = {
    "NV_OK", "NV_ERR_BROKEN_FB", "NV_ERR_BUFFER_TOO_SMALL", "NV_ERR_BUSY_RETRY",
    "NV_ERR_CALLBACK_NOT_SCHEDULED", "NV_ERR_CARD_NOT_PRESENT", "NV_ERR_CYCLE_DETECTED",
    "NV_ERR_DMA_IN_USE", "NV_ERR_DMA_MEM_NOT_LOCKED", "NV_ERR_DMA_MEM_NOT_UNLOCKED",
    "NV_ERR_DUAL_LINK_INUSE", "NV_ERR_ECC_ERROR", "NV_ERR_FIFO_BAD_ACCESS", "NV_ERR_FREQ_NOT_SUPPORTED",
    "NV_ERR_GPU_DMA_NOT_INITIALIZED", "NV_ERR_GPU_IS_LOST", "NV_ERR_GPU_IN_FULLCHIP_RESET",
    "NV_ERR_GPU_NOT_FULL_POWER", "NV_ERR_GPU_UUID_NOT_FOUND", "NV_ERR_HOT_SWITCH", "NV_ERR_I2C_ERROR",
    "NV_ERR_I2C_SPEED_TOO_HIGH", "NV_ERR_ILLEGAL_ACTION", "NV_ERR_IN_USE",
    "NV_ERR_INFLATE_COMPRESSED_DATA_FAILED", "NV_ERR_INSERT_DUPLICATE_NAME", "NV_ERR_INSUFFICIENT_RESOURCES",
    "NV_ERR_INSUFFICIENT_PERMISSIONS", "NV_ERR_INSUFFICIENT_POWER", "NV_ERR_INVALID_ACCESS_TYPE",
    "NV_ERR_INVALID_ADDRESS", "NV_ERR_INVALID_ARGUMENT", "NV_ERR_INVALID_BASE", "NV_ERR_INVALID_CHANNEL",
    "NV_ERR_INVALID_CLASS", "NV_ERR_INVALID_CLIENT", "NV_ERR_INVALID_COMMAND", "NV_ERR_INVALID_DATA",
    "NV_ERR_INVALID_DEVICE", "NV_ERR_INVALID_DMA_SPECIFIER", "NV_ERR_INVALID_EVENT", "NV_ERR_INVALID_FLAGS",
    "NV_ERR_INVALID_FUNCTION", "NV_ERR_INVALID_HEAP", "NV_ERR_INVALID_INDEX", "NV_ERR_INVALID_IRQ_LEVEL",
    "NV_ERR_INVALID_LIMIT", "NV_ERR_INVALID_LOCK_STATE", "NV_ERR_INVALID_METHOD", "NV_ERR_INVALID_OBJECT",
    "NV_ERR_INVALID_OBJECT_BUFFER", "NV_ERR_INVALID_OBJECT_HANDLE", "NV_ERR_INVALID_OBJECT_NEW",
    "NV_ERR_INVALID_OBJECT_OLD", "NV_ERR_INVALID_OBJECT_PARENT", "NV_ERR_INVALID_OFFSET",
    "NV_ERR_INVALID_OPERATION", "NV_ERR_INVALID_OWNER", "NV_ERR_INVALID_PARAM_STRUCT",
    "NV_ERR_INVALID_PARAMETER", "NV_ERR_INVALID_PATH", "NV_ERR_INVALID_POINTER", "NV_ERR_INVALID_REGISTRY_KEY",
    "NV_ERR_INVALID_REQUEST", "NV_ERR_INVALID_STATE", "NV_ERR_INVALID_STRING_LENGTH", "NV_ERR_INVALID_READ",
    "NV_ERR_INVALID_WRITE", "NV_ERR_INVALID_XLATE", "NV_ERR_IRQ_NOT_FIRING", "NV_ERR_IRQ_EDGE_TRIGGERED",
    "NV_ERR_MEMORY_TRAINING_FAILED", "NV_ERR_MISMATCHED_SLAVE", "NV_ERR_MISMATCHED_TARGET",
    "NV_ERR_MISSING_TABLE_ENTRY", "NV_ERR_MODULE_LOAD_FAILED", "NV_ERR_MORE_DATA_AVAILABLE",
    "NV_ERR_MORE_PROCESSING_REQUIRED", "NV_ERR_MULTIPLE_MEMORY_TYPES", "NV_ERR_NO_FREE_FIFOS",
    "NV_ERR_NO_INTR_PENDING", "NV_ERR_NO_MEMORY", "NV_ERR_NO_SUCH_DOMAIN", "NV_ERR_NO_VALID_PATH",
    "NV_ERR_NOT_COMPATIBLE", "NV_ERR_NOT_READY", "NV_ERR_NOT_SUPPORTED", "NV_ERR_OBJECT_NOT_FOUND",
    "NV_ERR_OBJECT_TYPE_MISMATCH", "NV_ERR_OPERATING_SYSTEM", "NV_ERR_OTHER_DEVICE_FOUND",
    "NV_ERR_OUT_OF_RANGE", "NV_ERR_OVERLAPPING_UVM_COMMIT", "NV_ERR_PAGE_TABLE_NOT_AVAIL",
    "NV_ERR_PID_NOT_FOUND", "NV_ERR_PROTECTION_FAULT", "NV_ERR_RC_ERROR", "NV_ERR_REJECTED_VBIOS",
    "NV_ERR_RESET_REQUIRED", "NV_ERR_STATE_IN_USE", "NV_ERR_SIGNAL_PENDING", "NV_ERR_TIMEOUT",
    "NV_ERR_TIMEOUT_RETRY", "NV_ERR_TOO_MANY_PRIMARIES", "NV_ERR_UVM_ADDRESS_IN_USE",
    "NV_ERR_MAX_SESSION_LIMIT_REACHED", "NV_ERR_LIB_RM_VERSION_MISMATCH", "NV_ERR_PRIV_SEC_VIOLATION",
    "NV_ERR_GPU_IN_DEBUG_MODE", "NV_ERR_FEATURE_NOT_ENABLED", "NV_ERR_RESOURCE_LOST", "NV_ERR_PMU_NOT_READY",
    "NV_ERR_FLCN_ERROR", "NV_ERR_FATAL_ERROR", "NV_ERR_MEMORY_ERROR", "NV_ERR_INVALID_LICENSE",
    "NV_ERR_NVLINK_INIT_ERROR", "NV_ERR_NVLINK_MINION_ERROR", "NV_ERR_NVLINK_CLOCK_ERROR",
    "NV_ERR_NVLINK_TRAINING_ERROR", "NV_ERR_NVLINK_CONFIGURATION_ERROR", "NV_ERR_RISCV_ERROR",
    "NV_ERR_FABRIC_MANAGER_NOT_PRESENT", "NV_ERR_ALREADY_SIGNALLED", "NV_ERR_QUEUE_TASK_SLOT_NOT_AVAILABLE",
    "NV_ERR_KEY_ROTATION_IN_PROGRESS", "NV_ERR_TEST_ONLY_CODE_NOT_ENABLED", "NV_ERR_SECURE_BOOT_FAILED",
    "NV_ERR_INSUFFICIENT_ZBC_ENTRY", "NV_ERR_NVLINK_FABRIC_NOT_READY", "NV_ERR_NVLINK_FABRIC_FAILURE",
    "NV_ERR_GPU_MEMORY_ONLINING_FAILURE", "NV_ERR_REDUCTION_MANAGER_NOT_AVAILABLE", "NV_ERR_THRESHOLD_CROSSED",
    "NV_ERR_RESOURCE_RETIREMENT_ERROR", "NV_ERR_FABRIC_STATE_OUT_OF_SYNC", "NV_ERR_BUFFER_FULL",
    "NV_ERR_BUFFER_EMPTY", "NV_ERR_MC_FLA_OFFSET_TABLE_FULL", "NV_ERR_DMA_XFER_FAILED"};
static_assert(sizeof(kStatusNames) / sizeof(kStatusNames[0]) == 0x8C, "NV_OK..NV_ERR_DMA_XFER_FAILED");

Code code_for(uint32_t rm_status) {
  switch (rm_status) {
    case 0x51: /* NV_ERR_NO_MEMORY */
    case 0x1A: /* NV_ERR_INSUFFICIENT_RESOURCES */
    case 0x4F: /* NV_ERR_NO_FREE_FIFOS */
      return Code::resource_exhausted;
    case 0x1B: /* NV_ERR_INSUFFICIENT_PERMISSIONS */
    case 0x56: /* NV_ERR_NOT_SUPPORTED */
    case 0x3A: /* NV_ERR_INVALID_PARAM_STRUCT: struct layout of another branch */
      return Code::unavailable;
    default:
      return Code::internal;
  }
}

Status errno_status(const char* what, int err) {
  return error(Code::unavailable, std::string(what) + " failed: " + std::strerror(err) +
                                      " (errno " + std::to_string(err) +
                                      "); the kernel refused the ioctl - is this the open NVIDIA module of "
                                      "branch 580, outside a sandbox that filters ioctls (gVisor)?");
}

constexpr uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

}  // namespace

std::string rm_status_name(uint32_t status) {
  if (status < 0x8C) return kStatusNames[status];
  if (status == 0xFFFF) return "NV_ERR_GENERIC";
  return "NV_STATUS_" + hex(status);
}

std::string rc_error_name(uint32_t info32) {
  switch (info32) {
    case 31: return "MMU fault (ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT, Xid 31)";
    case 32: return "PBDMA error (ROBUST_CHANNEL_PBDMA_ERROR, Xid 32)";
    case 39: case 40: case 41: case 70: case 71: case 72: case 75: case 76: case 77: case 85:
      return "copy engine error (ROBUST_CHANNEL_CEn_ERROR, Xid " + std::to_string(info32) + ")";
    case 43: return "channel reset (ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR, Xid 43)";
    case 45: return "preemptive removal (ROBUST_CHANNEL_PREEMPTIVE_REMOVAL, Xid 45)";
    default: return "RC error " + std::to_string(info32);
  }
}

void Gpu::log(const std::string& s) const {
  if (opt_.log) opt_.log(s);
}

// ---- primitives ---------------------------------------------------------------

Status Gpu::rm_alloc(uint32_t parent, uint32_t cls, void* params, uint32_t size, uint32_t* handle,
                        const char* what, uint32_t want_handle) {
  abi::Nvos21 p{};
  p.hRoot = h_client_;
  p.hObjectParent = parent;
  p.hObjectNew = want_handle;
  p.hClass = cls;
  p.pAllocParms = reinterpret_cast<uint64_t>(params);
  p.paramsSize = size;
  if (ioctl(fd_ctl_, abi::rm_ioctl(abi::kEscRmAlloc, sizeof p), &p) != 0)
    return errno_status((std::string("NV_ESC_RM_ALLOC ") + what).c_str(), errno);
  log("rm_alloc " + std::string(what) + " class=" + hex(cls) + " parent=" + hex(parent) + " -> " +
      (p.status ? rm_status_name(p.status) : "handle " + hex(p.hObjectNew)));
  if (p.status != 0)
    return error(code_for(p.status), std::string("RM alloc of ") + what + " (class " + hex(cls) + ", parent " +
                                         hex(parent) + ") failed: " + rm_status_name(p.status) + " (" +
                                         hex(p.status) + ")");
  *handle = p.hObjectNew;
  return Status();
}

Status Gpu::rm_control(uint32_t object, uint32_t cmd, void* params, uint32_t size, const char* what) {
  abi::Nvos54 p{};
  p.hClient = h_client_;
  p.hObject = object;
  p.cmd = cmd;
  p.params = reinterpret_cast<uint64_t>(params);
  p.paramsSize = size;
  if (ioctl(fd_ctl_, abi::rm_ioctl(abi::kEscRmControl, sizeof p), &p) != 0)
    return errno_status((std::string("NV_ESC_RM_CONTROL ") + what).c_str(), errno);
  log("rm_control " + std::string(what) + " cmd=" + hex(cmd) + " on " + hex(object) + " -> " +
      rm_status_name(p.status));
  if (p.status != 0)
    return error(code_for(p.status), std::string("RM control ") + what + " (" + hex(cmd) + ") on " + hex(object) +
                                         " failed: " + rm_status_name(p.status) + " (" + hex(p.status) + ")");
  return Status();
}

Status Gpu::rm_free(uint32_t parent, uint32_t object, const char* what) {
  if (!object || fd_ctl_ < 0) return Status();
  abi::Nvos00 p{};
  p.hRoot = h_client_;
  p.hObjectParent = parent;
  p.hObjectOld = object;
  if (ioctl(fd_ctl_, abi::rm_ioctl(abi::kEscRmFree, sizeof p), &p) != 0)
    return errno_status((std::string("NV_ESC_RM_FREE ") + what).c_str(), errno);
  log("rm_free " + std::string(what) + " " + hex(object) + " -> " + rm_status_name(p.status));
  if (p.status != 0)
    return error(code_for(p.status), std::string("RM free of ") + what + " " + hex(object) + " failed: " +
                                         rm_status_name(p.status));
  return Status();
}

Status Gpu::uvm_ioctl(int fd, unsigned long cmd, void* params, uint32_t* rm_status, const char* what) {
  if (ioctl(fd, cmd, params) != 0) return errno_status(what, errno);
  log(std::string(what) + " -> " + rm_status_name(*rm_status));
  if (*rm_status != 0)
    return error(code_for(*rm_status), std::string(what) + " failed: " + rm_status_name(*rm_status) + " (" +
                                           hex(*rm_status) + ")");
  return Status();
}

// ---- VA window ----------------------------------------------------------------

namespace {

// Free ranges of this process's address space below `limit`, from
// /proc/self/maps (sorted, non-overlapping), each [base, end).
std::vector<std::pair<uint64_t, uint64_t>> free_ranges_below(uint64_t limit) {
  std::vector<std::pair<uint64_t, uint64_t>> used;
  std::ifstream f("/proc/self/maps");
  std::string line;
  while (std::getline(f, line)) {
    uint64_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream in(line);
    in >> std::hex >> lo >> dash >> hi;
    if (dash == '-') used.push_back({lo, hi});
  }
  std::sort(used.begin(), used.end());
  std::vector<std::pair<uint64_t, uint64_t>> out;
  uint64_t at = 1ull << 21;  // keep the first 2 MiB (NULL page, vm.mmap_min_addr)
  for (const auto& [lo, hi] : used) {
    if (lo >= limit) break;
    if (lo > at) out.push_back({at, lo});
    at = std::max(at, hi);
  }
  if (at < limit) out.push_back({at, limit});
  return out;
}

bool reserve_at(uint64_t base, uint64_t bytes) {
  void* w = mmap(reinterpret_cast<void*>(base), bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (w == MAP_FAILED) return false;
  if (w != reinterpret_cast<void*>(base)) {  // kernels before 4.17 ignore MAP_FIXED_NOREPLACE
    munmap(w, bytes);
    return false;
  }
  return true;
}

}  // namespace

// The ring window must lie below 2^40: GP entries carry 40-bit pushbuffer
// addresses (clc86f.h NVC86F_GP_ENTRY1_GET_HI 7:0). Candidates: 64 GiB (the
// old fixed window, clear of where Linux places mappings), then the free
// ranges of /proc/self/maps below 1 TiB, highest first. An AddressSanitizer
// build maps [2 GiB, 2 TiB) as its shadow and shadow gap, so there only the
// range below 2 GiB is left - which is why the window is small and is not
// where the data lives. The data window goes where asked (va_base) or where
// the kernel puts it.
Status Gpu::reserve_windows() {
  constexpr uint64_t kAlign = 2ull << 20, kLimit = 1ull << 40;
  const uint64_t low = opt_.ring_window_bytes;
  std::vector<uint64_t> candidates = {0x10'0000'0000ull};
  std::vector<std::pair<uint64_t, uint64_t>> gaps = free_ranges_below(kLimit);
  for (auto it = gaps.rbegin(); it != gaps.rend(); ++it) {
    const uint64_t end = it->second & ~(kAlign - 1);
    if (end >= it->first + low && end - low >= round_up(it->first, kAlign)) candidates.push_back(end - low);
  }
  for (uint64_t base : candidates)
    if (base + low <= kLimit && reserve_at(base, low)) {
      low_base_ = base;
      low_size_ = low;
      break;
    }
  if (!low_base_) {
    std::string where;
    for (const auto& [a, b] : gaps) where += " [" + hex(a) + ", " + hex(b) + ")";
    return error(Code::resource_exhausted,
                 "no free " + std::to_string(low >> 20) + " MiB range below 1 TiB for the GP rings and pushbuffers "
                 "(GP entries carry 40-bit addresses); free ranges below 1 TiB:" + (where.empty() ? " none" : where) +
                 ". Lower nv::Options::ring_window_bytes, or run without AddressSanitizer's low shadow there");
  }
  free_low_ = {{low_base_, low_size_}};
  if (opt_.va_base) {
    if (!reserve_at(opt_.va_base, opt_.va_size))
      return error(Code::resource_exhausted, "cannot reserve the data window " + hex(opt_.va_base) + "+" +
                                                 hex(opt_.va_size) + ": " + std::strerror(errno) +
                                                 " (something is mapped there; choose another nv::Options::va_base, "
                                                 "or 0 to let the kernel place it)");
    data_base_ = opt_.va_base;
  } else {
    // Over-reserve by one alignment unit so the window can start 2 MiB aligned.
    void* w = mmap(nullptr, opt_.va_size + kAlign, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (w == MAP_FAILED)
      return error(Code::resource_exhausted, "cannot reserve a " + std::to_string(opt_.va_size >> 30) +
                                                 " GiB data window: " + std::strerror(errno) +
                                                 "; lower nv::Options::va_size");
    const uint64_t raw = reinterpret_cast<uint64_t>(w);
    data_base_ = round_up(raw, kAlign);
    if (data_base_ > raw) munmap(w, data_base_ - raw);
    munmap(reinterpret_cast<void*>(data_base_ + opt_.va_size), raw + kAlign - data_base_);
  }
  data_size_ = opt_.va_size;
  free_va_ = {{data_base_, data_size_}};
  log("VA windows: rings " + hex(low_base_) + "+" + hex(low_size_) + ", data " + hex(data_base_) + "+" + hex(data_size_));
  return Status();
}

Result<uint64_t> Gpu::reserve_va(size_t bytes, size_t align, bool low) {
  auto& list = low ? free_low_ : free_va_;
  for (size_t i = 0; i < list.size(); ++i) {
    auto [base, len] = list[i];
    const uint64_t start = round_up(base, align);
    if (start + bytes > base + len) continue;
    // Split the free range around [start, start+bytes).
    std::vector<std::pair<uint64_t, uint64_t>> repl;
    if (start > base) repl.push_back({base, start - base});
    if (start + bytes < base + len) repl.push_back({start + bytes, base + len - start - bytes});
    list.erase(list.begin() + static_cast<long>(i));
    list.insert(list.begin() + static_cast<long>(i), repl.begin(), repl.end());
    return start;
  }
  if (low)
    return error(Code::resource_exhausted, "no " + std::to_string(bytes) + "-byte hole left in the " +
                                               std::to_string(low_size_ >> 20) +
                                               " MiB ring window (GP rings and pushbuffers); destroy queues or raise "
                                               "nv::Options::ring_window_bytes");
  return error(Code::resource_exhausted, "no " + std::to_string(bytes) + "-byte hole left in the " +
                                             std::to_string(data_size_ >> 30) +
                                             " GiB VA window; free buffers or raise nv::Options::va_size");
}

void Gpu::release_va(uint64_t va, size_t bytes) {
  // Put the PROT_NONE reservation back (replaces any CPU mapping there).
  void* p = mmap(reinterpret_cast<void*>(va), bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) log("warning: could not re-reserve " + hex(va) + ": " + std::strerror(errno));
  auto& list = va >= low_base_ && va < low_base_ + low_size_ ? free_low_ : free_va_;
  list.push_back({va, bytes});
  std::sort(list.begin(), list.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& r : list) {
    if (!merged.empty() && merged.back().first + merged.back().second == r.first) merged.back().second += r.second;
    else merged.push_back(r);
  }
  list.swap(merged);
}

// ---- mappings -----------------------------------------------------------------

Status Gpu::map_cpu(uint32_t handle, uint64_t va, size_t bytes, bool sysmem, uint32_t flags) {
  // A fresh fd carries the mmap context: /dev/nvidiactl for system memory,
  // /dev/nvidia<minor> (registered with the ctl fd) for device memory.
  int mfd = -1;
  if (sysmem) {
    mfd = ::open("/dev/nvidiactl", O_RDWR | O_CLOEXEC);
    if (mfd < 0) return errno_status("open /dev/nvidiactl (mapping)", errno);
  } else {
    const std::string path = "/dev/nvidia" + std::to_string(info_.minor);
    mfd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (mfd < 0) return errno_status(("open " + path + " (mapping)").c_str(), errno);
    abi::RegisterFd r{fd_ctl_};
    if (ioctl(mfd, abi::rm_ioctl(abi::kEscRegisterFd, sizeof r), &r) != 0) {
      const int e = errno;
      ::close(mfd);
      return errno_status("NV_ESC_REGISTER_FD (mapping)", e);
    }
  }
  abi::Nvos33WithFd p{};
  p.hClient = h_client_;
  p.hDevice = h_device_;
  p.hMemory = handle;
  p.length = bytes;
  p.flags = flags;
  p.fd = mfd;
  if (ioctl(fd_ctl_, abi::rm_ioctl(abi::kEscRmMapMemory, sizeof p), &p) != 0) {
    const int e = errno;
    ::close(mfd);
    return errno_status("NV_ESC_RM_MAP_MEMORY", e);
  }
  log("rm_map_memory " + hex(handle) + " bytes=" + std::to_string(bytes) + " -> " + rm_status_name(p.status));
  if (p.status != 0) {
    ::close(mfd);
    return error(code_for(p.status), "CPU mapping (NV_ESC_RM_MAP_MEMORY) of " + hex(handle) + " failed: " +
                                         rm_status_name(p.status));
  }
  void* m = mmap(reinterpret_cast<void*>(va), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, mfd, 0);
  const int e = errno;
  ::close(mfd);
  if (m == MAP_FAILED) return errno_status("mmap of an RM memory object", e);
  return Status();
}

Status Gpu::map_gpu(uint32_t handle, uint64_t va, size_t bytes, uint32_t extra_flags) {
  abi::UvmCreateExternalRange r{};
  r.base = va;
  r.length = bytes;
  CONCCL_RETURN_IF_ERROR(uvm_ioctl(fd_uvm_, abi::kUvmCreateExternalRange, &r, &r.rmStatus,
                                   ("UVM_CREATE_EXTERNAL_RANGE " + hex(va) + "+" + hex(bytes)).c_str()));
  abi::Nvos46 d{};
  d.hClient = h_client_;
  d.hDevice = h_device_;
  d.hDma = h_virtmem_;
  d.hMemory = handle;
  d.length = bytes;
  d.flags = abi::kNvos46CacheSnoop | abi::kNvos46OffsetFixed | extra_flags;  // PAGE_SIZE_DEFAULT
  d.dmaOffset = va;
  if (ioctl(fd_ctl_, abi::rm_ioctl(abi::kEscRmMapMemoryDma, sizeof d), &d) != 0)
    return errno_status("NV_ESC_RM_MAP_MEMORY_DMA", errno);
  log("rm_map_memory_dma " + hex(handle) + " at " + hex(va) + " -> " + rm_status_name(d.status));
  if (d.status != 0) {
    // PAGE_SIZE_4KB is the form tinygrad's runtime/ops_nv.py uses; retry with it.
    d.status = 0;
    d.flags = abi::kNvos46CacheSnoop | abi::kNvos46OffsetFixed | abi::kNvos46PageSize4k | extra_flags;
    d.dmaOffset = va;
    if (ioctl(fd_ctl_, abi::rm_ioctl(abi::kEscRmMapMemoryDma, sizeof d), &d) != 0)
      return errno_status("NV_ESC_RM_MAP_MEMORY_DMA", errno);
    log("rm_map_memory_dma (4 KiB pages) " + hex(handle) + " -> " + rm_status_name(d.status));
  }
  if (d.status != 0)
    return error(code_for(d.status), "GPU mapping (NV_ESC_RM_MAP_MEMORY_DMA) of " + hex(handle) + " at " + hex(va) +
                                         " failed: " + rm_status_name(d.status));
  if (d.dmaOffset != va)
    return error(Code::internal, "RM mapped " + hex(handle) + " at " + hex(d.dmaOffset) + " instead of " + hex(va));
  auto m = std::make_unique<abi::UvmMapExternalAllocation>();
  std::memset(m.get(), 0, sizeof *m);
  m->base = va;
  m->length = bytes;
  std::memcpy(m->perGpuAttributes[0].gpuUuid, info_.uuid, 16);
  m->perGpuAttributes[0].gpuMappingType = abi::kUvmMappingReadWriteAtomic;
  m->gpuAttributesCount = 1;
  m->rmCtrlFd = fd_ctl_;
  m->hClient = h_client_;
  m->hMemory = handle;
  return uvm_ioctl(fd_uvm_, abi::kUvmMapExternalAllocation, m.get(), &m->rmStatus,
                   ("UVM_MAP_EXTERNAL_ALLOCATION " + hex(va)).c_str());
}

// ---- memory -------------------------------------------------------------------

Result<uint32_t> Gpu::register_host_pages(uint64_t va, size_t bytes) {
  abi::Nvos02WithFd p{};
  p.hRoot = h_client_;
  p.hObjectParent = h_device_;
  p.hObjectNew = next_handle_++;
  p.hClass = abi::kNv01MemorySystemOsDescriptor;
  p.flags = abi::kNvos02FlagsHost;
  p.pMemory = va;
  p.limit = bytes - 1;
  p.fd = -1;
  if (ioctl(fd_dev_, abi::rm_ioctl(abi::kEscRmAllocMemory, sizeof p), &p) != 0)
    return errno_status("NV_ESC_RM_ALLOC_MEMORY (OS descriptor)", errno);
  log("rm_alloc_memory os-descriptor " + hex(va) + "+" + hex(bytes) + " -> " + rm_status_name(p.status));
  if (p.status != 0)
    return error(code_for(p.status), "registering " + std::to_string(bytes) + " bytes of host memory at " + hex(va) +
                                         " (NV01_MEMORY_SYSTEM_OS_DESCRIPTOR) failed: " + rm_status_name(p.status));
  return p.hObjectNew;
}

Result<Allocation> Gpu::alloc(size_t bytes, Placement kind, bool cpu_map, bool low) {
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  if (bytes == 0) return error(Code::invalid_argument, "cannot allocate 0 bytes");
  if (bytes > SIZE_MAX - (2u << 20))  // round_up would wrap to 0
    return error(Code::resource_exhausted, "cannot allocate " + std::to_string(bytes) + " bytes: larger than any memory");
  Allocation b;
  b.kind = kind;
  if (kind == Placement::device) {
    const bool huge = bytes >= (8u << 20);
    const uint64_t page = huge ? (2u << 20) : 4096;
    b.size = round_up(bytes, page);
    // 2 MiB aligned, also in the ring window: GPU mappings of device memory
    // use large pages (a 4 KiB-aligned one fails: "can't alloc VA space for
    // mapping", NV_ERR_NO_MEMORY; UVM_CREATE_EXTERNAL_RANGE: address in use).
    Result<uint64_t> va = reserve_va(b.size, 2u << 20, low);
    if (!va.ok()) return va.status();
    b.va = *va;
    abi::MemoryAllocationParams p{};
    p.owner = h_client_;
    p.type = abi::kNvos32TypeImage;
    p.flags = abi::kAllocMapNotRequired | abi::kAllocMemoryHandleProvided | abi::kAllocAlignmentForce |
              abi::kAllocIgnoreBankPlacement | abi::kAllocPersistentVidmem;
    // Small CPU-visible buffers (rings, pushbuffers) contiguous, as tinygrad's gpfifo area.
    p.attr = (cpu_map && !huge ? abi::kAttrContiguous : abi::kAttrAllowNoncontiguous) |
             (huge ? abi::kAttrPageSizeHuge : 0u);
    p.attr2 = abi::kAttr2PreferNoZbc | abi::kAttr2GpuCacheable | (huge ? abi::kAttr2Huge2Mb : 0u);
    p.format = 6;
    p.size = b.size;
    p.alignment = page;
    p.limit = b.size - 1;
    Status st = rm_alloc(h_device_, abi::kNv01MemoryLocalUser, &p, sizeof p, &b.handle, "device memory");
    if (!st.ok()) {
      release_va(b.va, b.size);
      return st.prefix("allocating " + std::to_string(bytes) + " bytes of device memory");
    }
    if (cpu_map) {
      st = map_cpu(b.handle, b.va, b.size, false, abi::kNvos33CachingWriteCombined);
      if (st.ok()) b.host = reinterpret_cast<void*>(b.va);
    }
    if (st.ok()) st = map_gpu(b.handle, b.va, b.size);
    if (!st.ok()) {
      (void)rm_free(h_device_, b.handle, "device memory");
      release_va(b.va, b.size);
      return st;
    }
  } else {
    b.size = round_up(bytes, 4096);
    Result<uint64_t> va = reserve_va(b.size, b.size >= (2u << 20) ? (2u << 20) : 4096);
    if (!va.ok()) return va.status();
    b.va = *va;
    // A memfd, so that another process can map the same pages at the same
    // address (multi-process communicators: GenericDevice::share).
    b.fd = memfd_create("conccl-nv-host", MFD_CLOEXEC);
    if (b.fd < 0 || ftruncate(b.fd, static_cast<off_t>(b.size)) != 0) {
      const int e = errno;
      if (b.fd >= 0) ::close(b.fd);
      release_va(b.va, b.size);
      return error(Code::resource_exhausted, "memfd for " + std::to_string(b.size) + " bytes of host memory failed: " +
                                                 std::strerror(e));
    }
    void* m = mmap(reinterpret_cast<void*>(b.va), b.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, b.fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      ::close(b.fd);
      release_va(b.va, b.size);
      return error(Code::resource_exhausted, "mmap of " + std::to_string(b.size) + " bytes of host memory failed: " +
                                                 std::strerror(e));
    }
    b.host = m;
    Result<uint32_t> h = register_host_pages(b.va, b.size);
    if (!h.ok()) {
      ::close(b.fd);
      release_va(b.va, b.size);
      return h.status();
    }
    b.handle = *h;
    Status st = map_gpu(b.handle, b.va, b.size);
    if (!st.ok()) {
      (void)rm_free(h_device_, b.handle, "host memory");
      ::close(b.fd);
      release_va(b.va, b.size);
      return st;
    }
  }
  buffers_.push_back(b);
  return b;
}

Result<Allocation> Gpu::alloc_rm_sysmem(size_t bytes) {
  Allocation b;
  b.kind = Placement::host;
  b.size = round_up(bytes, 4096);
  Result<uint64_t> va = reserve_va(b.size, 4096);
  if (!va.ok()) return va.status();
  b.va = *va;
  abi::MemoryAllocationParams p{};
  p.owner = h_client_;
  p.type = abi::kNvos32TypeNotifier;
  p.flags = abi::kAllocMapNotRequired | abi::kAllocMemoryHandleProvided | abi::kAllocAlignmentForce |
            abi::kAllocIgnoreBankPlacement;
  p.attr = abi::kAttrAllowNoncontiguous | abi::kAttrLocationPci;
  p.attr2 = abi::kAttr2PreferNoZbc | abi::kAttr2GpuUncached;
  p.format = 6;
  p.size = b.size;
  p.alignment = 4096;
  p.limit = b.size - 1;
  Status st = rm_alloc(h_device_, abi::kNv01MemorySystem, &p, sizeof p, &b.handle, "system memory (notifier)");
  if (st.ok()) st = map_cpu(b.handle, b.va, b.size, true, 0);
  if (st.ok()) {
    b.host = reinterpret_cast<void*>(b.va);
    std::memset(b.host, 0, b.size);
    st = map_gpu(b.handle, b.va, b.size);
  }
  if (!st.ok()) {
    if (b.handle) (void)rm_free(h_device_, b.handle, "system memory");
    release_va(b.va, b.size);
    return st;
  }
  buffers_.push_back(b);
  return b;
}

Status Gpu::free(Allocation& b) {
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  auto it = std::find_if(buffers_.begin(), buffers_.end(),
                         [&](const Allocation& x) { return x.handle == b.handle && x.va == b.va; });
  if (it == buffers_.end())
    return error(Code::not_found, "buffer " + hex(b.va) + " (handle " + hex(b.handle) +
                                      ") was not allocated by this device or is already freed");
  abi::UvmFree f{};
  f.base = b.va;
  f.length = b.size;
  Status st = uvm_ioctl(fd_uvm_, abi::kUvmFree, &f, &f.rmStatus, ("UVM_FREE " + hex(b.va)).c_str());
  Status st2 = rm_free(b.parent ? b.parent : h_device_, b.handle, b.imported ? "imported memory" : "memory");
  if (!b.imported || it->windowed) release_va(b.va, b.size);
  if (it->fd >= 0) ::close(it->fd);
  buffers_.erase(it);
  b = Allocation{};
  return st.ok() ? st2 : st;
}

Result<Allocation> Gpu::import_fd(int fd, uint64_t va, size_t bytes) {
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  if ((va | bytes) & 0xFFF || bytes == 0)
    return error(Code::invalid_argument, "import at " + hex(va) + " of " + std::to_string(bytes) +
                                             " bytes: both must be non-zero multiples of 4 KiB (CUDA VMM granularity is 2 MiB)");
  abi::ExportObjectInfo info{};
  info.fd = fd;
  CONCCL_RETURN_IF_ERROR(rm_control(h_client_, abi::kCtrlGetExportObjectInfo, &info, sizeof info,
                                    "OS_UNIX_GET_EXPORT_OBJECT_INFO")
                             .prefix("fd " + std::to_string(fd) +
                                     " is not an RM export fd (use cuMemCreate with a POSIX fd handle type and "
                                     "cuMemExportToShareableHandle)"));
  if (info.maxObjects < 1)
    return error(Code::invalid_argument, "fd " + std::to_string(fd) + " exports no objects");
  // The fd names the device instance that owns the memory. Ours: a plain
  // import under our device. Another GPU's: under our handle of that GPU
  // (RM takes the memory's GPU from its parent device, so importing it under
  // ours would map the wrong memory), mapped with a peer PTE.
  uint32_t parent = h_device_, map_flags = 0;
  if (info.deviceInstance != info_.device_instance) {
    Result<Peer*> peer = peer_for_instance(info.deviceInstance);
    if (!peer.ok()) return peer.status().prefix("importing memory of device instance " + std::to_string(info.deviceInstance));
    parent = (*peer)->h_device;
    map_flags = abi::kNvos46P2pEnableNoSli;
  }
  abi::ImportObjectsFromFd imp{};
  imp.fd = fd;
  imp.hParent = parent;
  imp.objects[0] = next_handle_++;
  imp.numObjects = 1;
  imp.index = 0;
  CONCCL_RETURN_IF_ERROR(
      rm_control(h_client_, abi::kCtrlImportObjectsFromFd, &imp, sizeof imp, "OS_UNIX_IMPORT_OBJECTS_FROM_FD"));
  Allocation b;
  b.va = va;
  b.size = bytes;
  b.kind = Placement::device;
  b.handle = imp.objects[0];
  b.parent = parent == h_device_ ? 0 : parent;
  b.imported = true;
  Status st = map_gpu(b.handle, va, bytes, map_flags);
  if (!st.ok()) {
    (void)rm_free(parent, b.handle, "imported memory");
    return st.prefix("mapping the imported allocation at " + hex(va));
  }
  buffers_.push_back(b);
  return b;
}

Result<uint64_t> Gpu::alloc_slot() {
  if (!slots_.host) return error(Code::unavailable, "the nv device is closed");
  if (next_slot_ + hopper::kSemaphoreSlotBytes > slots_.size)
    return error(Code::resource_exhausted, "all " + std::to_string(slots_.size / 16) + " semaphore slots are in use");
  const uint64_t va = slots_.va + next_slot_;
  next_slot_ += hopper::kSemaphoreSlotBytes;
  return va;
}

volatile uint64_t* Gpu::slot_host(uint64_t va) {
  if (va < slots_.va || va + 16 > slots_.va + slots_.size) return nullptr;
  return reinterpret_cast<volatile uint64_t*>(va);
}

}  // namespace conccl::nv
