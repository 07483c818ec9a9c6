// src/backends/nv/rm_abi.hpp - the project's own minimal definitions of the
// NVIDIA Resource Manager (RM) and UVM kernel interfaces the nv backend uses.
//
// Interface facts (struct layouts, constants, ioctl numbers) of the open
// kernel module, 580 branch (NVIDIA/open-gpu-kernel-modules tag 580.142; the
// layouts were confirmed against the 580.159.04 module, see
// NVIDIA/open-gpu-kernel-modules). Each definition cites its upstream
// header; sizes and offsets are pinned by static_asserts. Only the fields this
// backend uses are named; the rest is padding of the right size. The backend
// refuses any driver branch other than 580 (nv_device.cpp), because these
// layouts change between branches.
#pragma once

#include <cstddef>
#include <cstdint>

namespace conccl::nv::abi {

using NvHandle = uint32_t;

// ---- ioctl numbers ----------------------------------------------------------
// kernel-open/common/inc/nv-ioctl-numbers.h: NV_IOCTL_MAGIC 'F', NV_IOCTL_BASE 200.
inline constexpr uint32_t kIoctlMagic = 'F';
inline constexpr uint32_t kEscCardInfo = 200 + 0;         // NV_ESC_CARD_INFO
inline constexpr uint32_t kEscRegisterFd = 200 + 1;       // NV_ESC_REGISTER_FD
inline constexpr uint32_t kEscCheckVersionStr = 200 + 10; // NV_ESC_CHECK_VERSION_STR
inline constexpr uint32_t kEscAllocOsEvent = 200 + 6;    // NV_ESC_ALLOC_OS_EVENT
inline constexpr uint32_t kEscFreeOsEvent = 200 + 7;     // NV_ESC_FREE_OS_EVENT
// src/nvidia/arch/nvalloc/unix/include/nv_escape.h
inline constexpr uint32_t kEscRmAllocMemory = 0x27;   // NV_ESC_RM_ALLOC_MEMORY
inline constexpr uint32_t kEscRmFree = 0x29;          // NV_ESC_RM_FREE
inline constexpr uint32_t kEscRmControl = 0x2A;       // NV_ESC_RM_CONTROL
inline constexpr uint32_t kEscRmAlloc = 0x2B;         // NV_ESC_RM_ALLOC
inline constexpr uint32_t kEscRmMapMemory = 0x4E;     // NV_ESC_RM_MAP_MEMORY
inline constexpr uint32_t kEscRmUnmapMemory = 0x4F;   // NV_ESC_RM_UNMAP_MEMORY
inline constexpr uint32_t kEscRmMapMemoryDma = 0x57;  // NV_ESC_RM_MAP_MEMORY_DMA
inline constexpr uint32_t kEscRmUnmapMemoryDma = 0x58;// NV_ESC_RM_UNMAP_MEMORY_DMA

// _IOWR('F', nr, size) as the kernel decodes it (kernel-open/nvidia/nv.c
// nvidia_ioctl: _IOC_NR, _IOC_SIZE): dir 3 << 30, size 29:16 (14 bits).
constexpr unsigned long rm_ioctl(uint32_t nr, size_t size) {
  return (3ul << 30) | ((static_cast<unsigned long>(size) & 0x3FFF) << 16) | (kIoctlMagic << 8) | nr;
}

// kernel-open/nvidia-uvm/uvm_linux_ioctl.h, uvm_ioctl.h (UVM_IOCTL_BASE(i) = i on Linux)
inline constexpr unsigned long kUvmInitialize = 0x30000001;  // UVM_INITIALIZE
inline constexpr unsigned long kUvmDeinitialize = 0x30000002;
inline constexpr unsigned long kUvmRegisterGpuVaspace = 25;     // UVM_REGISTER_GPU_VASPACE
inline constexpr unsigned long kUvmUnregisterGpuVaspace = 26;   // UVM_UNREGISTER_GPU_VASPACE
inline constexpr unsigned long kUvmRegisterChannel = 27;        // UVM_REGISTER_CHANNEL
inline constexpr unsigned long kUvmEnablePeerAccess = 29;       // UVM_ENABLE_PEER_ACCESS
inline constexpr unsigned long kUvmDisablePeerAccess = 30;      // UVM_DISABLE_PEER_ACCESS
inline constexpr unsigned long kUvmUnregisterChannel = 28;      // UVM_UNREGISTER_CHANNEL
inline constexpr unsigned long kUvmMapExternalAllocation = 33;  // UVM_MAP_EXTERNAL_ALLOCATION
inline constexpr unsigned long kUvmFree = 34;                   // UVM_FREE
inline constexpr unsigned long kUvmRegisterGpu = 37;            // UVM_REGISTER_GPU
inline constexpr unsigned long kUvmUnregisterGpu = 38;          // UVM_UNREGISTER_GPU
inline constexpr unsigned long kUvmCreateExternalRange = 73;    // UVM_CREATE_EXTERNAL_RANGE
inline constexpr unsigned long kUvmMmInitialize = 75;           // UVM_MM_INITIALIZE

// ---- classes ----------------------------------------------------------------
// src/common/sdk/nvidia/inc/class/*.h
inline constexpr uint32_t kNv01RootClient = 0x41;           // nvos.h NV01_ROOT_CLIENT
inline constexpr uint32_t kNv01MemorySystem = 0x3E;         // cl003e.h NV01_MEMORY_SYSTEM
inline constexpr uint32_t kNv01MemoryLocalUser = 0x40;      // cl0040.h NV01_MEMORY_LOCAL_USER (NV1_MEMORY_USER)
inline constexpr uint32_t kNv01MemoryVirtual = 0x70;        // cl0070.h NV01_MEMORY_VIRTUAL
inline constexpr uint32_t kNv01MemorySystemOsDescriptor = 0x71;  // cl0071.h
inline constexpr uint32_t kNv01Device0 = 0x80;              // cl0080.h NV01_DEVICE_0
inline constexpr uint32_t kNv20Subdevice0 = 0x2080;         // cl2080.h NV20_SUBDEVICE_0
inline constexpr uint32_t kFermiVaspaceA = 0x90F1;          // cl90f1.h FERMI_VASPACE_A
inline constexpr uint32_t kKeplerChannelGroupA = 0xA06C;    // cla06c.h KEPLER_CHANNEL_GROUP_A

// cl2080_notification.h: NV2080_ENGINE_TYPE_COPY0 = 9, COPY(i) = 9 + i for i < 10,
// NV2080_ENGINE_TYPE_COPY10 = 0x34 (+ i - 10 above).
constexpr uint32_t engine_type_copy(int i) { return i < 10 ? 9u + i : 0x34u + (i - 10); }

// ---- RM escapes -------------------------------------------------------------
// nvos.h NVOS21_PARAMETERS (NV_ESC_RM_ALLOC)
struct Nvos21 {
  NvHandle hRoot, hObjectParent, hObjectNew;
  uint32_t hClass;
  uint64_t pAllocParms;
  uint32_t paramsSize;
  uint32_t status;
};
static_assert(sizeof(Nvos21) == 32 && offsetof(Nvos21, pAllocParms) == 16 && offsetof(Nvos21, status) == 28);

// nvos.h NVOS54_PARAMETERS (NV_ESC_RM_CONTROL)
struct Nvos54 {
  NvHandle hClient, hObject;
  uint32_t cmd, flags;
  uint64_t params;
  uint32_t paramsSize;
  uint32_t status;
};
static_assert(sizeof(Nvos54) == 32 && offsetof(Nvos54, params) == 16 && offsetof(Nvos54, status) == 28);

// nvos.h NVOS00_PARAMETERS (NV_ESC_RM_FREE)
struct Nvos00 {
  NvHandle hRoot, hObjectParent, hObjectOld;
  uint32_t status;
};
static_assert(sizeof(Nvos00) == 16);

// nvos.h NVOS02_PARAMETERS + nv-unix-nvos-params-wrappers.h
// nv_ioctl_nvos02_parameters_with_fd (NV_ESC_RM_ALLOC_MEMORY)
struct Nvos02WithFd {
  NvHandle hRoot, hObjectParent, hObjectNew;
  uint32_t hClass, flags;
  uint32_t pad0;
  uint64_t pMemory, limit;
  uint32_t status;
  uint32_t pad1;
  int32_t fd;
  uint32_t pad2;
};
static_assert(sizeof(Nvos02WithFd) == 56 && offsetof(Nvos02WithFd, pMemory) == 24 &&
              offsetof(Nvos02WithFd, limit) == 32 && offsetof(Nvos02WithFd, status) == 40 &&
              offsetof(Nvos02WithFd, fd) == 48);
// nvos.h NVOS02_FLAGS_PHYSICALITY 7:4 (NONCONTIGUOUS 1), _COHERENCY 15:12 (CACHED 1),
// _MAPPING 31:30 (NO_MAP 1)
inline constexpr uint32_t kNvos02FlagsHost = (1u << 4) | (1u << 12) | (1u << 30);

// nvos.h NVOS33_PARAMETERS + nv_ioctl_nvos33_parameters_with_fd (NV_ESC_RM_MAP_MEMORY)
struct Nvos33WithFd {
  NvHandle hClient, hDevice, hMemory;
  uint32_t pad0;
  uint64_t offset, length, pLinearAddress;
  uint32_t status, flags;
  int32_t fd;
  uint32_t pad1;
};
static_assert(sizeof(Nvos33WithFd) == 56 && offsetof(Nvos33WithFd, offset) == 16 &&
              offsetof(Nvos33WithFd, pLinearAddress) == 32 && offsetof(Nvos33WithFd, status) == 40 &&
              offsetof(Nvos33WithFd, flags) == 44 && offsetof(Nvos33WithFd, fd) == 48);
// nvos.h NVOS33_FLAGS_CACHING_TYPE 25:23, _WRITECOMBINED 2
inline constexpr uint32_t kNvos33CachingWriteCombined = 2u << 23;

// nvos.h NVOS46_PARAMETERS (NV_ESC_RM_MAP_MEMORY_DMA)
struct Nvos46 {
  NvHandle hClient, hDevice, hDma, hMemory;
  uint64_t offset, length;
  uint32_t flags, flags2, kindOverride;
  uint32_t pad0;
  uint64_t dmaOffset;
  uint32_t status;
  uint32_t pad1;
};
static_assert(sizeof(Nvos46) == 64 && offsetof(Nvos46, flags) == 32 && offsetof(Nvos46, dmaOffset) == 48 &&
              offsetof(Nvos46, status) == 56);
// nvos.h NVOS46_FLAGS_CACHE_SNOOP 4:4, _PAGE_SIZE 11:8 (DEFAULT 0, 4KB 1, HUGE 4),
// _DMA_OFFSET_FIXED 15:15
inline constexpr uint32_t kNvos46CacheSnoop = 1u << 4;
inline constexpr uint32_t kNvos46PageSize4k = 1u << 8;
inline constexpr uint32_t kNvos46OffsetFixed = 1u << 15;
// nvos.h NVOS46_FLAGS_P2P_ENABLE 21:20, _NOSLI 2: the memory belongs to
// another GPU (hMemory's parent device); RM writes a peer-aperture PTE with
// the peer id of the NV50_P2P object between the two GPUs. Without it RM
// would take the memory as the mapping GPU's own.
inline constexpr uint32_t kNvos46P2pEnableNoSli = 2u << 20;

// nvos.h NVOS47_PARAMETERS (NV_ESC_RM_UNMAP_MEMORY_DMA)
struct Nvos47 {
  NvHandle hClient, hDevice, hDma, hMemory;
  uint32_t flags;
  uint32_t pad0;
  uint64_t dmaOffset, size;
  uint32_t status;
  uint32_t pad1;
};
static_assert(sizeof(Nvos47) == 48 && offsetof(Nvos47, dmaOffset) == 24 && offsetof(Nvos47, status) == 40);

// ---- allocation parameters --------------------------------------------------
// nvos.h NV_MEMORY_ALLOCATION_PARAMS (NV01_MEMORY_SYSTEM, NV01_MEMORY_LOCAL_USER)
struct MemoryAllocationParams {
  uint32_t owner, type, flags, width, height;
  int32_t pitch;
  uint32_t attr, attr2, format, comprCovg, zcullCovg;
  uint32_t pad0;
  uint64_t rangeLo, rangeHi, size, alignment, offset, limit, address;
  uint32_t ctagOffset;
  NvHandle hVASpace;
  uint32_t internalflags, tag;
  int32_t numaNode;
  uint32_t pad1;
};
static_assert(sizeof(MemoryAllocationParams) == 128 && offsetof(MemoryAllocationParams, rangeLo) == 48 &&
              offsetof(MemoryAllocationParams, size) == 64 && offsetof(MemoryAllocationParams, limit) == 88 &&
              offsetof(MemoryAllocationParams, hVASpace) == 108 && offsetof(MemoryAllocationParams, numaNode) == 120);
// nvos.h NVOS32_TYPE_IMAGE 0, _NOTIFIER 13
inline constexpr uint32_t kNvos32TypeImage = 0;
inline constexpr uint32_t kNvos32TypeNotifier = 13;
// nvos.h NVOS32_ALLOC_FLAGS_*
inline constexpr uint32_t kAllocIgnoreBankPlacement = 0x00000001;
inline constexpr uint32_t kAllocAlignmentForce = 0x00000100;
inline constexpr uint32_t kAllocMemoryHandleProvided = 0x00004000;
inline constexpr uint32_t kAllocMapNotRequired = 0x00008000;
inline constexpr uint32_t kAllocPersistentVidmem = 0x00010000;
// nvos.h NVOS32_ATTR_PAGE_SIZE 24:23 (HUGE 3), _LOCATION 26:25 (PCI 1),
// _PHYSICALITY 28:27 (CONTIGUOUS 2, ALLOW_NONCONTIGUOUS 3), _COHERENCY 31:29 (CACHED 1)
inline constexpr uint32_t kAttrPageSizeHuge = 3u << 23;
inline constexpr uint32_t kAttrLocationPci = 1u << 25;
inline constexpr uint32_t kAttrContiguous = 2u << 27;
inline constexpr uint32_t kAttrAllowNoncontiguous = 3u << 27;
// NVOS32_ATTR2_ZBC 1:0 (PREFER_NO_ZBC 1), _GPU_CACHEABLE 3:2 (YES 1, NO 2),
// _PAGE_SIZE_HUGE 21:20 (2MB 1)
inline constexpr uint32_t kAttr2PreferNoZbc = 1u;
inline constexpr uint32_t kAttr2GpuCacheable = 1u << 2;
inline constexpr uint32_t kAttr2GpuUncached = 2u << 2;
inline constexpr uint32_t kAttr2Huge2Mb = 1u << 20;

// cl0070.h NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS
struct MemoryVirtualParams {
  uint64_t offset, limit;
  NvHandle hVASpace;
  uint32_t pad0;
};
static_assert(sizeof(MemoryVirtualParams) == 24);

// nvos.h NV_VASPACE_ALLOCATION_PARAMETERS
struct VaspaceParams {
  uint32_t index, flags;
  uint64_t vaSize, vaStartInternal, vaLimitInternal;
  uint32_t bigPageSize;
  uint32_t pad0;
  uint64_t vaBase;
  uint32_t pasid;
  uint32_t pad1;
};
static_assert(sizeof(VaspaceParams) == 56 && offsetof(VaspaceParams, vaBase) == 40 &&
              offsetof(VaspaceParams, bigPageSize) == 32);
// nvos.h NV_VASPACE_ALLOCATION_FLAGS_IS_EXTERNALLY_OWNED BIT(3), _ENABLE_PAGE_FAULTING BIT(6)
inline constexpr uint32_t kVaspaceExternallyOwned = 1u << 3;
inline constexpr uint32_t kVaspaceEnablePageFaulting = 1u << 6;

// cl0080.h NV0080_ALLOC_PARAMETERS
struct DeviceAllocParams {
  uint32_t deviceId;
  NvHandle hClientShare, hTargetClient, hTargetDevice;
  uint32_t flags;
  uint32_t pad0;
  uint64_t vaSpaceSize, vaStartInternal, vaLimitInternal;
  uint32_t vaMode;
  uint32_t pad1;
};
static_assert(sizeof(DeviceAllocParams) == 56 && offsetof(DeviceAllocParams, vaSpaceSize) == 24 &&
              offsetof(DeviceAllocParams, vaMode) == 48);
// nvos.h NV_DEVICE_ALLOCATION_VAMODE_OPTIONAL_MULTIPLE_VASPACES
inline constexpr uint32_t kVamodeOptionalMultiple = 0;

// cl2080.h NV2080_ALLOC_PARAMETERS
struct SubdeviceAllocParams {
  uint32_t subDeviceId;
};
static_assert(sizeof(SubdeviceAllocParams) == 4);

// nvos.h NV_HOPPER_USERMODE_A_PARAMS
struct HopperUsermodeParams {
  uint8_t bBar1Mapping, bPriv;
};
static_assert(sizeof(HopperUsermodeParams) == 2);

// nvos.h NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS
struct ChannelGroupParams {
  NvHandle hObjectError, hObjectEccError, hVASpace;
  uint32_t engineType;
  uint8_t bIsCallingContextVgpuPlugin;
  uint8_t pad0[3];
};
static_assert(sizeof(ChannelGroupParams) == 20 && offsetof(ChannelGroupParams, engineType) == 12);

// alloc/alloc_channel.h NV_MEMORY_DESC_PARAMS, NV_CHANNEL_ALLOC_PARAMS
// (NV_MAX_SUBDEVICES 8, nvlimits.h)
struct MemoryDescParams {
  uint64_t base, size;
  uint32_t addressSpace, cacheAttrib;
};
static_assert(sizeof(MemoryDescParams) == 24);
struct ChannelAllocParams {
  NvHandle hObjectError, hObjectBuffer;
  uint64_t gpFifoOffset;
  uint32_t gpFifoEntries, flags;
  NvHandle hContextShare, hVASpace;
  NvHandle hUserdMemory[8];
  uint64_t userdOffset[8];
  uint32_t engineType, cid, subDeviceId;
  NvHandle hObjectEccError;
  MemoryDescParams instanceMem, userdMem, ramfcMem, mthdbufMem;
  NvHandle hPhysChannelGroup;
  uint32_t internalFlags;
  MemoryDescParams errorNotifierMem, eccErrorNotifierMem;
  uint32_t ProcessID, SubProcessID;
  uint32_t encryptIv[3], decryptIv[3], hmacNonce[8];
  uint32_t tpcConfigID;
  uint32_t pad0;
};
static_assert(sizeof(ChannelAllocParams) == 368 && offsetof(ChannelAllocParams, gpFifoOffset) == 8 &&
              offsetof(ChannelAllocParams, hUserdMemory) == 32 && offsetof(ChannelAllocParams, userdOffset) == 64 &&
              offsetof(ChannelAllocParams, engineType) == 128 && offsetof(ChannelAllocParams, instanceMem) == 144 &&
              offsetof(ChannelAllocParams, hPhysChannelGroup) == 240 &&
              offsetof(ChannelAllocParams, errorNotifierMem) == 248 && offsetof(ChannelAllocParams, ProcessID) == 296 &&
              offsetof(ChannelAllocParams, encryptIv) == 304 && offsetof(ChannelAllocParams, tpcConfigID) == 360);

// class/clb0b5sw.h NVB0B5_ALLOCATION_PARAMETERS (VERSION_1 = 1)
struct CopyAllocParams {
  uint32_t version, engineType;
};
static_assert(sizeof(CopyAllocParams) == 8);

// nvgputypes.h NvNotification; nvos.h NV_CHANNELGPFIFO_NOTIFICATION_TYPE_ERROR 0,
// _WORK_SUBMIT_TOKEN 1, __SIZE_1 3
struct Notification {
  uint32_t timestamp_ns[2];
  uint32_t info32;
  uint16_t info16;
  uint16_t status;
};
static_assert(sizeof(Notification) == 16);
inline constexpr int kNotificationEntries = 3;

// clc86f.h Nvc86fControl (USERD): GPGet @0x88, GPPut @0x8c.
inline constexpr uint32_t kUserdGpGet = 0x88;
inline constexpr uint32_t kUserdGpPut = 0x8C;
// clc361.h NVC361_NOTIFY_CHANNEL_PENDING: the usermode doorbell.
inline constexpr uint32_t kUsermodeDoorbell = 0x90;
inline constexpr size_t kUsermodeMapBytes = 0x10000;

// ---- controls ---------------------------------------------------------------
// ctrl0000system.h NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2 (0x13e)
inline constexpr uint32_t kCtrlGetBuildVersionV2 = 0x13E;
struct BuildVersionV2 {
  char driverVersionBuffer[256], versionBuffer[256], driverBranch[256], titleBuffer[256];
  uint32_t changelistNumber, officialChangelistNumber;
};
static_assert(sizeof(BuildVersionV2) == 1032);

// ctrl0000gpu.h NV0000_CTRL_CMD_GPU_GET_ID_INFO_V2 (0x205)
inline constexpr uint32_t kCtrlGpuGetIdInfoV2 = 0x205;
struct GpuIdInfoV2 {
  uint32_t gpuId, gpuFlags, deviceInstance, subDeviceInstance, sliStatus, boardId, gpuInstance;
  int32_t numaId;
};
static_assert(sizeof(GpuIdInfoV2) == 32);

// ctrl0080gpu.h NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2 (0x800292), MAX_SIZE 200
inline constexpr uint32_t kCtrlGetClasslistV2 = 0x800292;
struct ClasslistV2 {
  uint32_t numClasses;
  uint32_t classList[200];
};
static_assert(sizeof(ClasslistV2) == 804);

// ctrl2080gpu.h NV2080_CTRL_CMD_GPU_GET_GID_INFO (0x2080014a); FLAGS_FORMAT_BINARY 2
inline constexpr uint32_t kCtrlGetGidInfo = 0x2080014A;
struct GidInfo {
  uint32_t index, flags, length;
  uint8_t data[256];
};
static_assert(sizeof(GidInfo) == 268);

// ctrl2080ce.h NV2080_CTRL_CMD_CE_GET_CE_PCE_MASK (0x20802a02), _GET_CAPS_V2
// (0x20802a03, CAPS_TBL_SIZE 2), _GET_ALL_CAPS (0x20802a0a, MAX_CES 64)
inline constexpr uint32_t kCtrlCeGetPceMask = 0x20802A02;
inline constexpr uint32_t kCtrlCeGetCapsV2 = 0x20802A03;
inline constexpr uint32_t kCtrlCeGetAllCaps = 0x20802A0A;
struct CePceMask {
  uint32_t ceEngineType, pceMask;
};
static_assert(sizeof(CePceMask) == 8);
struct CeCapsV2 {
  uint32_t ceEngineType;
  uint8_t capsTbl[2];
  uint8_t pad0[2];
};
static_assert(sizeof(CeCapsV2) == 8);
struct CeAllCaps {
  uint8_t capsTbl[64][2];
  uint64_t present;
};
static_assert(sizeof(CeAllCaps) == 136 && offsetof(CeAllCaps, present) == 128);
// ctrl2080ce.h NV2080_CTRL_CE_CAPS_CE_GRCE 0:0x01, _SHARED 0:0x02,
// _SUPPORTS_NONPIPELINED_BL 1:0x01, _SUPPORTS_PIPELINED_BL 1:0x02
inline constexpr uint8_t kCeCapGrce = 0x01;
inline constexpr uint8_t kCeCapShared = 0x02;

// ctrlc36f.h NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN (0xc36f0108)
inline constexpr uint32_t kCtrlGetWorkSubmitToken = 0xC36F0108;
struct WorkSubmitToken {
  uint32_t workSubmitToken;
};
// ctrla06c.h NVA06C_CTRL_CMD_GPFIFO_SCHEDULE (0xa06c0101),
// ctrla06fgpfifo.h NVA06F_CTRL_CMD_GPFIFO_SCHEDULE (0xa06f0103), NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS
inline constexpr uint32_t kCtrlGroupSchedule = 0xA06C0101;
inline constexpr uint32_t kCtrlChannelSchedule = 0xA06F0103;
struct ScheduleParams {
  uint8_t bEnable, bSkipSubmit, bSkipEnable;
};
static_assert(sizeof(ScheduleParams) == 3);

// ctrl0000unix.h NV0000_CTRL_CMD_OS_UNIX_GET_EXPORT_OBJECT_INFO (0x3d08),
// _IMPORT_OBJECTS_FROM_FD (0x3d0c); layouts per that header in
// NVIDIA/open-gpu-kernel-modules (src/common/sdk/nvidia/inc/ctrl/ctrl0000/,
// 580 branch), as the driver accepted them on the H200
inline constexpr uint32_t kCtrlGetExportObjectInfo = 0x3D08;
inline constexpr uint32_t kCtrlImportObjectsFromFd = 0x3D0C;
struct ExportObjectInfo {
  int32_t fd;
  uint32_t deviceInstance, gpuInstanceId;
  uint16_t maxObjects;
  uint8_t metadata[64];
  uint8_t pad0[2];
};
static_assert(sizeof(ExportObjectInfo) == 80 && offsetof(ExportObjectInfo, maxObjects) == 12 &&
              offsetof(ExportObjectInfo, metadata) == 14);
struct ImportObjectsFromFd {
  int32_t fd;
  NvHandle hParent;
  NvHandle objects[128];
  uint8_t objectTypes[128];
  uint16_t numObjects, index;
};
static_assert(sizeof(ImportObjectsFromFd) == 652 && offsetof(ImportObjectsFromFd, objects) == 8 &&
              offsetof(ImportObjectsFromFd, objectTypes) == 520 && offsetof(ImportObjectsFromFd, numObjects) == 648);

// ctrl0000unix.h NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECTS_TO_FD (0x3d0b): `fd`
// is a /dev/nvidiactl fd the caller opened and has exported nothing on yet
// (the kernel never creates one); one call with maxObjects >= 1 initialises
// it and exports. hDevice: the device the objects belong to. The fd holds a
// reference to the memory until it is closed.
inline constexpr uint32_t kCtrlExportObjectsToFd = 0x3D0B;
struct ExportObjectsToFd {
  int32_t fd;
  NvHandle hDevice;
  uint16_t maxObjects;
  uint8_t metadata[64];
  uint8_t pad0[2];
  NvHandle objects[512];
  uint16_t numObjects, index;
};
static_assert(sizeof(ExportObjectsToFd) == 2128 && offsetof(ExportObjectsToFd, metadata) == 10 &&
              offsetof(ExportObjectsToFd, objects) == 76 && offsetof(ExportObjectsToFd, numObjects) == 2124);

// ctrl0000gpu.h NV0000_CTRL_CMD_GPU_GET_ATTACHED_IDS (0x201): gpuIds[32],
// ended by NV0000_CTRL_GPU_INVALID_ID (0xffffffff).
inline constexpr uint32_t kCtrlGpuGetAttachedIds = 0x201;
inline constexpr uint32_t kInvalidGpuId = 0xFFFFFFFFu;
struct AttachedIds {
  uint32_t gpuIds[32];
};

// ctrl0000system.h NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2 (0x12b): what two
// (or more) GPUs can do to each other's memory. p2pCaps bits
// (NV0000_CTRL_SYSTEM_GET_P2P_CAPS_*): 0 WRITES, 1 READS, 3 NVLINK,
// 4 ATOMICS, 5 LOOPBACK, 6 PCI, 12 C2C, 13 PCI_BAR1. p2pCapsStatus is
// indexed READ 0, WRITE 1, NVLINK 2, ...; 0 is OK, 1 chipset, 2 GPU,
// 3 IOH topology not supported, 4 disabled by regkey, 5 not supported.
inline constexpr uint32_t kCtrlSystemGetP2pCapsV2 = 0x12B;
inline constexpr uint32_t kP2pWrites = 1u << 0, kP2pReads = 1u << 1, kP2pNvlink = 1u << 3, kP2pAtomics = 1u << 4,
                          kP2pPci = 1u << 6, kP2pC2c = 1u << 12, kP2pPciBar1 = 1u << 13;
struct P2pCapsV2 {
  uint32_t gpuIds[32];
  uint32_t gpuCount, p2pCaps, p2pOptimalReadCEs, p2pOptimalWriteCEs;
  uint8_t p2pCapsStatus[9];
  uint8_t pad0[3];
  uint32_t busPeerIds[32 * 32];
  uint32_t busEgmPeerIds[32 * 32];
};
static_assert(sizeof(P2pCapsV2) == 8348 && offsetof(P2pCapsV2, p2pCapsStatus) == 144 &&
              offsetof(P2pCapsV2, busPeerIds) == 156);

// cl503b.h NV50_P2P: the peer mapping between two GPUs' subdevices, both in
// the calling client; allocated under the client itself. Peer-id masks 0:
// RM picks the ids. Mappings with P2P_ENABLE need it alive.
inline constexpr uint32_t kNv50P2p = 0x503B;
struct P2pAllocParams {
  NvHandle hSubDevice, hPeerSubDevice;
  uint32_t subDevicePeerIdMask, peerSubDevicePeerIdMask;
  uint64_t mailboxBar1Addr;
  uint32_t mailboxTotalSize, flags;
  uint32_t subDeviceEgmPeerIdMask, peerSubDeviceEgmPeerIdMask;
  uint64_t l2pDmaAddress, l2pDmaSize, p2lDmaAddress, p2lDmaSize;
};
static_assert(sizeof(P2pAllocParams) == 72 && offsetof(P2pAllocParams, mailboxBar1Addr) == 16 &&
              offsetof(P2pAllocParams, l2pDmaAddress) == 40);

// ctrl2080gpu.h NV2080_CTRL_CMD_GPU_GET_NAME_STRING (0x20800110),
// NV2080_GPU_MAX_NAME_STRING_LENGTH 0x40, _FLAGS_TYPE_ASCII 0; the name is a
// union of NvU8 ascii[64] / NvU16 unicode[64].
inline constexpr uint32_t kCtrlGpuGetNameString = 0x20800110;
struct GpuNameString {
  uint32_t gpuNameStringFlags;
  uint8_t name[128];  // ascii[64] (unicode[64] shares the space)
};
static_assert(sizeof(GpuNameString) == 132 && offsetof(GpuNameString, name) == 4);

// ctrl2080fb.h NV2080_CTRL_CMD_FB_GET_INFO (0x20801301): the pointer form
// {NvU32 fbInfoListSize; NvP64 fbInfoList (8-aligned)} of NV2080_CTRL_FB_INFO
// {index, data} entries - its size does not depend on the branch's
// NV2080_CTRL_FB_INFO_MAX_LIST_SIZE, unlike _V2. _INDEX_TOTAL_RAM_SIZE 8 (KiB).
inline constexpr uint32_t kCtrlFbGetInfo = 0x20801301;
inline constexpr uint32_t kFbInfoTotalRamSize = 8;
struct InfoEntry {
  uint32_t index, data;
};
struct InfoListParams {
  uint32_t listSize;
  uint32_t pad0;
  uint64_t list;  // pointer to InfoEntry[listSize]
};
static_assert(sizeof(InfoListParams) == 16 && offsetof(InfoListParams, list) == 8);

// ctrl0041.h NV0041_CTRL_CMD_GET_SURFACE_INFO (0x410110) on a memory handle:
// the same list form; NV0041_CTRL_SURFACE_INFO_INDEX_PHYS_SIZE_LO 2, _HI 3
// (it answers for imported CUDA allocations too, as measured on the H200:
// docs/nv-backend.md).
inline constexpr uint32_t kCtrlGetSurfaceInfo = 0x410110;
inline constexpr uint32_t kSurfaceInfoPhysSizeLo = 2;
inline constexpr uint32_t kSurfaceInfoPhysSizeHi = 3;

// ---- nv-ioctl.h -------------------------------------------------------------
// nv_ioctl_card_info_t (with nv_pci_info_t)
struct CardInfo {
  uint8_t valid;
  uint8_t pad0[3];
  uint32_t domain;
  uint8_t bus, slot, function, pad1;
  uint16_t vendor_id, device_id;
  uint32_t gpu_id;
  uint16_t interrupt_line;
  uint8_t pad2[2];
  uint64_t reg_address, reg_size, fb_address, fb_size;
  uint32_t minor_number;
  uint8_t dev_name[10];
  uint8_t pad3[2];
};
static_assert(sizeof(CardInfo) == 72 && offsetof(CardInfo, gpu_id) == 16 && offsetof(CardInfo, reg_address) == 24 &&
              offsetof(CardInfo, fb_size) == 48 && offsetof(CardInfo, minor_number) == 56);
inline constexpr int kMaxCards = 32;  // nvlimits.h NV_MAX_DEVICES

// nv_ioctl_register_fd_t
struct RegisterFd {
  int32_t ctl_fd;
};

// ---- UVM (uvm_ioctl.h, uvm_linux_ioctl.h, uvm_types.h) ------------------------
struct UvmInitialize {
  uint64_t flags;
  uint32_t rmStatus;
  uint32_t pad0;
};
static_assert(sizeof(UvmInitialize) == 16);
struct UvmMmInitialize {
  int32_t uvmFd;
  uint32_t rmStatus;
};
static_assert(sizeof(UvmMmInitialize) == 8);
struct UvmRegisterGpu {
  uint8_t gpu_uuid[16];
  uint8_t numaEnabled;
  uint8_t pad0[3];
  int32_t numaNodeId, rmCtrlFd;
  NvHandle hClient, hSmcPartRef;
  uint32_t rmStatus;
};
static_assert(sizeof(UvmRegisterGpu) == 40 && offsetof(UvmRegisterGpu, rmCtrlFd) == 24 &&
              offsetof(UvmRegisterGpu, rmStatus) == 36);
struct UvmUnregisterGpu {
  uint8_t gpu_uuid[16];
  uint32_t rmStatus;
};
static_assert(sizeof(UvmUnregisterGpu) == 20);
// uvm_ioctl.h UVM_ENABLE_PEER_ACCESS / UVM_DISABLE_PEER_ACCESS: both GPUs
// registered in the UVM va space first; needed before UVM maps memory one
// GPU owns for the other (uvm_map_external.c checks peer access).
struct UvmPeerAccess {
  uint8_t gpuUuidA[16], gpuUuidB[16];
  uint32_t rmStatus;
};
static_assert(sizeof(UvmPeerAccess) == 36);
struct UvmRegisterGpuVaspace {
  uint8_t gpuUuid[16];
  int32_t rmCtrlFd;
  NvHandle hClient, hVaSpace;
  uint32_t rmStatus;
};
static_assert(sizeof(UvmRegisterGpuVaspace) == 32 && offsetof(UvmRegisterGpuVaspace, hVaSpace) == 24);
struct UvmUnregisterGpuVaspace {
  uint8_t gpuUuid[16];
  uint32_t rmStatus;
};
static_assert(sizeof(UvmUnregisterGpuVaspace) == 20);
// UVM_REGISTER_CHANNEL_PARAMS / UVM_UNREGISTER_CHANNEL_PARAMS. A channel must be
// registered for UVM to hand its non-replayable (CE) MMU faults to RM, which then
// recovers the channel and writes the error notifier; faults of unregistered
// channels are dropped (uvm_gpu_non_replayable_faults.c) and the channel stalls.
struct UvmRegisterChannel {
  uint8_t gpuUuid[16];
  int32_t rmCtrlFd;
  NvHandle hClient, hChannel;
  uint32_t pad0;
  uint64_t base, length;
  uint32_t rmStatus;
  uint32_t pad1;
};
static_assert(sizeof(UvmRegisterChannel) == 56 && offsetof(UvmRegisterChannel, base) == 32 &&
              offsetof(UvmRegisterChannel, rmStatus) == 48);
struct UvmUnregisterChannel {
  uint8_t gpuUuid[16];
  NvHandle hClient, hChannel;
  uint32_t rmStatus;
};
static_assert(sizeof(UvmUnregisterChannel) == 28 && offsetof(UvmUnregisterChannel, rmStatus) == 24);

struct UvmCreateExternalRange {
  uint64_t base, length;
  uint32_t rmStatus;
  uint32_t pad0;
};
static_assert(sizeof(UvmCreateExternalRange) == 24);
// UvmGpuMappingAttributes; UVM_MAX_GPUS = NV_MAX_DEVICES(32) * 8 = 256
struct UvmGpuMappingAttributes {
  uint8_t gpuUuid[16];
  uint32_t gpuMappingType, gpuCachingType, gpuFormatType, gpuElementBits, gpuCompressionType;
};
static_assert(sizeof(UvmGpuMappingAttributes) == 36);
struct UvmMapExternalAllocation {
  uint64_t base, length, offset;
  UvmGpuMappingAttributes perGpuAttributes[256];
  uint64_t gpuAttributesCount;
  int32_t rmCtrlFd;
  NvHandle hClient, hMemory;
  uint32_t rmStatus;
};
static_assert(sizeof(UvmMapExternalAllocation) == 9264 &&
              offsetof(UvmMapExternalAllocation, perGpuAttributes) == 24 &&
              offsetof(UvmMapExternalAllocation, gpuAttributesCount) == 9240 &&
              offsetof(UvmMapExternalAllocation, rmCtrlFd) == 9248 &&
              offsetof(UvmMapExternalAllocation, hMemory) == 9256 &&
              offsetof(UvmMapExternalAllocation, rmStatus) == 9260);
// kernel-open/common/inc/nv_uvm_user_types.h UvmGpuMappingTypeReadWriteAtomic = 1
inline constexpr uint32_t kUvmMappingReadWriteAtomic = 1;
struct UvmFree {
  uint64_t base, length;
  uint32_t rmStatus;
  uint32_t pad0;
};
static_assert(sizeof(UvmFree) == 24);

// nverror.h ROBUST_CHANNEL_* (error notifier info32)
inline constexpr uint32_t kRcMmuFault = 31;  // ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT
inline constexpr uint32_t kRcPbdmaError = 32;

// ---- OS events: interrupt-driven waits ------------------------------------------
// kernel-open/common/inc/nv-ioctl.h nv_ioctl_alloc_os_event_t (nv_ioctl_free_os_event_t
// has the same layout). Issued on the file that will be poll()ed; `fd` is only the
// key RM looks the event up by (kernel-open/nvidia/nv.c, arch/nvalloc/unix/src/osapi.c
// allocate_os_event), by convention that file's own number.
struct OsEvent {
  NvHandle hClient;
  NvHandle hDevice;  // not used by the kernel
  uint32_t fd;
  uint32_t Status;
};
static_assert(sizeof(OsEvent) == 16);

inline constexpr uint32_t kNv01EventOsEvent = 0x79;  // nvos.h NV01_EVENT_OS_EVENT
// class/cl0005.h NV0005_ALLOC_PARAMETERS; data = the OsEvent fd key.
struct EventAllocParams {
  NvHandle hParentClient;
  NvHandle hSrcResource;
  uint32_t hClass;
  uint32_t notifyIndex;
  alignas(8) uint64_t data;  // NvP64
};
static_assert(sizeof(EventAllocParams) == 24 && offsetof(EventAllocParams, notifyIndex) == 12 &&
              offsetof(EventAllocParams, data) == 16);
// nvos.h NV01_EVENT_* flags in notifyIndex's upper bits.
inline constexpr uint32_t kEventWithoutEventData = 0x10000000;  // NV01_EVENT_WITHOUT_EVENT_DATA
inline constexpr uint32_t kEventNonstallIntr = 0x08000000;      // NV01_EVENT_NONSTALL_INTR
// class/cl2080_notification.h NV2080_NOTIFIERS_CE(x), NV2080_NOTIFIERS_FIFO_EVENT_MTHD.
constexpr uint32_t notifier_ce(int lce) { return lce < 10 ? 23u + uint32_t(lce) : 166u + uint32_t(lce - 10); }
inline constexpr uint32_t kNotifierFifoEventMthd = 35;
// class/clc86f.h host methods used to raise the interrupt after earlier work.
inline constexpr uint16_t kHostNonStallInterrupt = 0x020;  // NVC56F_NON_STALL_INTERRUPT (same offset on C86F)
inline constexpr uint16_t kHostWfi = 0x078;                // NVC86F_WFI

}  // namespace conccl::nv::abi
