// src/backends/kfd/kfd_uapi.hpp - the few KFD ioctls ConCCL issues itself
// (the shared memory, kfd_share_sys.cpp; the SMI fault watch, kfd_smi.cpp),
// mirrored from include/uapi/linux/kfd_ioctl.h.
//
// Why mirrors: that header includes <drm/drm.h>, which Debian 12 does not
// install where the header expects it (linux-libc-dev ships linux/, libdrm-dev
// puts drm.h under libdrm/), so it cannot be included as it stands; libhsakmt
// carries its own copy for the same reason. The layouts are stable kernel
// ABI; tests/backends/kfd/kfd_uapi_test.cpp checks every size, offset and ioctl
// number below against the real header.
#pragma once

#include <sys/ioctl.h>

#include <cstddef>
#include <cstdint>

namespace conccl::kfd::uapi {

inline constexpr char kIoctlBase = 'K';  // AMDKFD_IOCTL_BASE

// struct kfd_ioctl_import_dmabuf_args
struct ImportDmabufArgs {
  uint64_t va_addr;    // to KFD: where the buffer goes in this process's GPUVM
  uint64_t handle;     // from KFD
  uint32_t gpu_id;     // to KFD
  uint32_t dmabuf_fd;  // to KFD
};
// struct kfd_ioctl_map_memory_to_gpu_args and _unmap_memory_from_gpu_args
struct MapMemoryArgs {
  uint64_t handle;                // to KFD
  uint64_t device_ids_array_ptr;  // to KFD: uint32_t gpu_ids[n_devices]
  uint32_t n_devices;             // to KFD
  uint32_t n_success;             // to/from KFD: devices done, from the first
};
// struct kfd_ioctl_free_memory_of_gpu_args
struct FreeMemoryArgs {
  uint64_t handle;  // to KFD
};

// struct kfd_ioctl_smi_events_args: an event file for one GPU of this process.
struct SmiEventsArgs {
  uint32_t gpuid;    // to KFD
  uint32_t anon_fd;  // from KFD: read() gives "<event hex> <text>\n" lines
};
// enum kfd_smi_event; KFD_SMI_EVENT_MASK_FROM_INDEX(i) is 1 << (i - 1).
inline constexpr unsigned kSmiEventVmFault = 1;
inline constexpr unsigned kSmiEventGpuPreReset = 3;
constexpr uint64_t smi_event_mask(unsigned event) { return uint64_t{1} << (event - 1); }

static_assert(sizeof(ImportDmabufArgs) == 24 && sizeof(MapMemoryArgs) == 24 && sizeof(FreeMemoryArgs) == 8 &&
              sizeof(SmiEventsArgs) == 8);

inline constexpr unsigned long kIocFreeMemoryOfGpu = _IOW(kIoctlBase, 0x17, FreeMemoryArgs);
inline constexpr unsigned long kIocMapMemoryToGpu = _IOWR(kIoctlBase, 0x18, MapMemoryArgs);
inline constexpr unsigned long kIocUnmapMemoryFromGpu = _IOWR(kIoctlBase, 0x19, MapMemoryArgs);
inline constexpr unsigned long kIocImportDmabuf = _IOWR(kIoctlBase, 0x1D, ImportDmabufArgs);
inline constexpr unsigned long kIocSmiEvents = _IOWR(kIoctlBase, 0x1F, SmiEventsArgs);

}  // namespace conccl::kfd::uapi
