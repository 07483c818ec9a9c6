// tests/backends/kfd/kfd_uapi_test.cpp - src/backends/kfd/kfd_uapi.hpp's mirrors
// against the kernel's own header (include/uapi/linux/kfd_ioctl.h, installed
// as <linux/kfd_ioctl.h>): sizes, offsets and ioctl numbers. All checks are
// static; the test case only reports that they compiled.
#include <gtest/gtest.h>
#include <linux/kfd_ioctl.h>

#include <cstddef>

#include "backends/kfd/kfd_uapi.hpp"

namespace {

namespace u = conccl::kfd::uapi;

static_assert(sizeof(u::ImportDmabufArgs) == sizeof(kfd_ioctl_import_dmabuf_args));
static_assert(offsetof(u::ImportDmabufArgs, va_addr) == offsetof(kfd_ioctl_import_dmabuf_args, va_addr));
static_assert(offsetof(u::ImportDmabufArgs, handle) == offsetof(kfd_ioctl_import_dmabuf_args, handle));
static_assert(offsetof(u::ImportDmabufArgs, gpu_id) == offsetof(kfd_ioctl_import_dmabuf_args, gpu_id));
static_assert(offsetof(u::ImportDmabufArgs, dmabuf_fd) == offsetof(kfd_ioctl_import_dmabuf_args, dmabuf_fd));

static_assert(sizeof(u::MapMemoryArgs) == sizeof(kfd_ioctl_map_memory_to_gpu_args));
static_assert(sizeof(u::MapMemoryArgs) == sizeof(kfd_ioctl_unmap_memory_from_gpu_args));
static_assert(offsetof(u::MapMemoryArgs, handle) == offsetof(kfd_ioctl_map_memory_to_gpu_args, handle));
static_assert(offsetof(u::MapMemoryArgs, device_ids_array_ptr) ==
              offsetof(kfd_ioctl_map_memory_to_gpu_args, device_ids_array_ptr));
static_assert(offsetof(u::MapMemoryArgs, n_devices) == offsetof(kfd_ioctl_map_memory_to_gpu_args, n_devices));
static_assert(offsetof(u::MapMemoryArgs, n_success) == offsetof(kfd_ioctl_map_memory_to_gpu_args, n_success));
static_assert(offsetof(u::MapMemoryArgs, n_success) == offsetof(kfd_ioctl_unmap_memory_from_gpu_args, n_success));

static_assert(sizeof(u::FreeMemoryArgs) == sizeof(kfd_ioctl_free_memory_of_gpu_args));

static_assert(u::kIocImportDmabuf == AMDKFD_IOC_IMPORT_DMABUF);
static_assert(u::kIocSmiEvents == AMDKFD_IOC_SMI_EVENTS);
static_assert(sizeof(u::SmiEventsArgs) == sizeof(kfd_ioctl_smi_events_args));
static_assert(offsetof(u::SmiEventsArgs, gpuid) == offsetof(kfd_ioctl_smi_events_args, gpuid));
static_assert(offsetof(u::SmiEventsArgs, anon_fd) == offsetof(kfd_ioctl_smi_events_args, anon_fd));
static_assert(u::kSmiEventVmFault == KFD_SMI_EVENT_VMFAULT && u::kSmiEventGpuPreReset == KFD_SMI_EVENT_GPU_PRE_RESET);
static_assert(u::smi_event_mask(u::kSmiEventVmFault) == KFD_SMI_EVENT_MASK_FROM_INDEX(KFD_SMI_EVENT_VMFAULT));
static_assert(u::smi_event_mask(u::kSmiEventGpuPreReset) == KFD_SMI_EVENT_MASK_FROM_INDEX(KFD_SMI_EVENT_GPU_PRE_RESET));
static_assert(u::kIocMapMemoryToGpu == AMDKFD_IOC_MAP_MEMORY_TO_GPU);
static_assert(u::kIocUnmapMemoryFromGpu == AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU);
static_assert(u::kIocFreeMemoryOfGpu == AMDKFD_IOC_FREE_MEMORY_OF_GPU);

TEST(KfdUapi, MirrorsMatchTheKernelHeader) { SUCCEED() << "checked at compile time"; }

}  // namespace
