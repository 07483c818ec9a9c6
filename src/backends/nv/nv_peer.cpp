// src/backends/nv/nv_peer.cpp - memory that crosses RM clients and GPUs:
// exporting our memory as an fd, importing another GPU's memory with a peer
// mapping, and mapping another client's host pages.
//
// How RM does it (NVIDIA/open-gpu-kernel-modules, branch 580):
//  - Export: NV0000_CTRL_CMD_OS_UNIX_EXPORT_OBJECTS_TO_FD on a /dev/nvidiactl
//    fd the caller opened (ctrl0000unix.h; the kernel dups the object into its
//    own client and keeps it until the fd closes: arch/nvalloc/unix/src/os.c,
//    rmobjexportimport.c). Import: _IMPORT_OBJECTS_FROM_FD (nv_rm.cpp).
//  - Another GPU's memory must sit under a device object of *that* GPU in the
//    importing client: RM takes a memory object's GPU from its parent device
//    (mem_mgr/mem.c memGetMemInterMapParams), so under ours it would be
//    mapped as our own memory at the same offsets.
//  - The mapping needs an NV50_P2P object between the two subdevices, both in
//    our client (class/cl503b.h; gpu/bus/p2p_api.c), and NVOS46 P2P_ENABLE
//    NOSLI (nvos.h), which makes RM write a peer-aperture PTE.
//  - UVM maps it too (UVM_MAP_EXTERNAL_ALLOCATION, as for our own memory):
//    the owning GPU must be registered in our UVM va space and peer access
//    enabled between the two (kernel-open/nvidia-uvm/uvm_map_external.c).
//  - RM allocates a device object for a GPU only when the process has one of
//    its /dev/nvidia<minor> files open (kernel-open/nvidia/nv.c
//    nv_is_gpu_accessible): we keep one open per peer.
// Peer capability comes from NV0000_CTRL_CMD_SYSTEM_GET_P2P_CAPS_V2
// (ctrl0000system.h): reads and writes must both be supported.
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "backends/nv/nv_device.hpp"
#include "backends/nv/rm_abi.hpp"

namespace conccl::nv {

namespace {

Status os_error(const std::string& what, int err) {
  return error(Code::unavailable, what + " failed: " + std::strerror(err) + " (errno " + std::to_string(err) + ")");
}

std::string caps_text(uint32_t caps) {
  std::string s;
  auto add = [&](uint32_t bit, const char* name) {
    if (caps & bit) s += (s.empty() ? "" : "|") + std::string(name);
  };
  add(abi::kP2pReads, "reads");
  add(abi::kP2pWrites, "writes");
  add(abi::kP2pNvlink, "nvlink");
  add(abi::kP2pPci, "pci");
  add(abi::kP2pPciBar1, "pci-bar1");
  add(abi::kP2pC2c, "c2c");
  add(abi::kP2pAtomics, "atomics");
  return s.empty() ? "none" : s;
}

}  // namespace

Result<int> Gpu::export_fd(const Allocation& buffer) {
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  bool ours = false;
  for (const Allocation& b : buffers_) ours |= b.handle == buffer.handle && b.va == buffer.va;
  if (!ours)
    return error(Code::not_found, "export of buffer " + hex(buffer.va) + ": not allocated by this device");
  if (buffer.kind != Placement::device)
    return error(Code::invalid_argument, "export of buffer " + hex(buffer.va) +
                                             ": only device memory is exported; host pages are shared by address "
                                             "(map_host)");
  const int fd = ::open("/dev/nvidiactl", O_RDWR | O_CLOEXEC);
  if (fd < 0) return os_error("open /dev/nvidiactl (export fd)", errno);
  abi::ExportObjectsToFd p{};
  p.fd = fd;
  p.hDevice = buffer.parent ? buffer.parent : h_device_;
  p.maxObjects = 1;
  p.objects[0] = buffer.handle;
  p.numObjects = 1;
  p.index = 0;
  Status st = rm_control(h_client_, abi::kCtrlExportObjectsToFd, &p, sizeof p, "OS_UNIX_EXPORT_OBJECTS_TO_FD");
  if (!st.ok()) {
    ::close(fd);
    return st.prefix("exporting buffer " + hex(buffer.va));
  }
  return fd;
}

Result<Allocation> Gpu::map_host(void* host, size_t bytes) {
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  const uint64_t va = reinterpret_cast<uint64_t>(host);
  if (!host || bytes == 0 || (va | bytes) & 0xFFF)
    return error(Code::invalid_argument, "map_host(" + hex(va) + ", " + std::to_string(bytes) +
                                             "): a non-null, 4 KiB aligned address and a non-zero multiple of 4 KiB");
  if ((va < data_base_ + data_size_ && va + bytes > data_base_) || (va < low_base_ + low_size_ && va + bytes > low_base_))
    return error(Code::invalid_argument, "map_host(" + hex(va) + "): the range is in this device's own windows; "
                                             "its own host buffers are mapped already");
  Result<uint32_t> h = register_host_pages(va, bytes);
  if (!h.ok()) return h.status().prefix("sharing host pages");
  Allocation b;
  b.va = va;
  b.host = host;
  b.size = bytes;
  b.kind = Placement::host;
  b.handle = *h;
  b.imported = true;
  Status st = map_gpu(b.handle, va, bytes);
  if (!st.ok()) {
    (void)rm_free(h_device_, b.handle, "shared host memory");
    return st.prefix("mapping shared host memory at " + hex(va));
  }
  buffers_.push_back(b);
  return b;
}

Result<uint32_t> Gpu::p2p_caps(uint32_t gpu_id) {
  if (fd_ctl_ < 0) return error(Code::unavailable, "the nv device is closed");
  auto p = std::make_unique<abi::P2pCapsV2>();
  std::memset(p.get(), 0, sizeof *p);
  p->gpuIds[0] = info_.gpu_id;
  p->gpuIds[1] = gpu_id;
  p->gpuCount = 2;
  CONCCL_RETURN_IF_ERROR(rm_control(h_client_, abi::kCtrlSystemGetP2pCapsV2, p.get(), sizeof *p, "SYSTEM_GET_P2P_CAPS_V2"));
  return p->p2pCaps;
}

Result<Gpu::Peer*> Gpu::peer_for_instance(uint32_t device_instance) {
  for (Peer& p : peers_)
    if (p.device_instance == device_instance) return &p;
  Peer peer;
  peer.device_instance = device_instance;
  // Which GPU is it?
  {
    abi::AttachedIds ids{};
    CONCCL_RETURN_IF_ERROR(rm_control(h_client_, abi::kCtrlGpuGetAttachedIds, &ids, sizeof ids, "GPU_GET_ATTACHED_IDS"));
    bool found = false;
    for (uint32_t id : ids.gpuIds) {
      if (id == abi::kInvalidGpuId) break;
      abi::GpuIdInfoV2 idi{};
      idi.gpuId = id;
      if (rm_control(h_client_, abi::kCtrlGpuGetIdInfoV2, &idi, sizeof idi, "GPU_GET_ID_INFO_V2").ok() &&
          idi.deviceInstance == device_instance) {
        peer.gpu_id = id;
        found = true;
        break;
      }
    }
    if (!found)
      return error(Code::not_found, "no attached GPU has device instance " + std::to_string(device_instance));
  }
  Result<uint32_t> caps = p2p_caps(peer.gpu_id);
  if (!caps.ok()) return caps.status();
  peer.caps = *caps;
  if ((peer.caps & (abi::kP2pReads | abi::kP2pWrites)) != (abi::kP2pReads | abi::kP2pWrites))
    return error(Code::unavailable, "GPU " + hex(info_.gpu_id) + " cannot reach the memory of GPU " + hex(peer.gpu_id) +
                                        ": RM reports peer capabilities " + caps_text(peer.caps) +
                                        " (reads and writes are needed; PCIe peer access may be off on this "
                                        "platform, NVLink peers need the fabric up - nvidia-smi topo -p2p rw)");
  // RM allocates a device object only for a GPU the process has open.
  {
    std::vector<abi::CardInfo> cards(abi::kMaxCards);
    if (ioctl(fd_ctl_, abi::rm_ioctl(abi::kEscCardInfo, cards.size() * sizeof(abi::CardInfo)), cards.data()) != 0)
      return os_error("NV_ESC_CARD_INFO", errno);
    int minor = -1;
    for (const abi::CardInfo& c : cards)
      if (c.valid && c.gpu_id == peer.gpu_id) minor = static_cast<int>(c.minor_number);
    if (minor < 0) return error(Code::not_found, "GPU " + hex(peer.gpu_id) + " is not in the driver's card list");
    const std::string path = "/dev/nvidia" + std::to_string(minor);
    peer.fd_dev = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (peer.fd_dev < 0) return os_error("open " + path, errno);
  }
  auto undo = [&](Status s) {
    if (peer.uvm_registered) {
      abi::UvmUnregisterGpu u{};
      std::memcpy(u.gpu_uuid, peer.uuid, 16);
      (void)uvm_ioctl(fd_uvm_, abi::kUvmUnregisterGpu, &u, &u.rmStatus, "UVM_UNREGISTER_GPU (peer)");
    }
    if (peer.h_p2p) (void)rm_free(h_client_, peer.h_p2p, "NV50_P2P");
    if (peer.h_device) (void)rm_free(h_client_, peer.h_device, "peer NV01_DEVICE_0");
    ::close(peer.fd_dev);
    return s.prefix("setting up peer access to GPU " + hex(peer.gpu_id));
  };
  abi::DeviceAllocParams dp{};
  dp.deviceId = device_instance;
  dp.hClientShare = h_client_;
  dp.vaMode = abi::kVamodeOptionalMultiple;
  Status st = rm_alloc(h_client_, abi::kNv01Device0, &dp, sizeof dp, &peer.h_device, "peer NV01_DEVICE_0");
  if (!st.ok()) return undo(st);
  abi::SubdeviceAllocParams sp{};
  st = rm_alloc(peer.h_device, abi::kNv20Subdevice0, &sp, sizeof sp, &peer.h_subdevice, "peer NV20_SUBDEVICE_0");
  if (!st.ok()) return undo(st);
  abi::GidInfo gid{};
  gid.flags = 2;  // NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY
  gid.length = 16;
  st = rm_control(peer.h_subdevice, abi::kCtrlGetGidInfo, &gid, sizeof gid, "GPU_GET_GID_INFO (peer)");
  if (!st.ok()) return undo(st);
  std::memcpy(peer.uuid, gid.data, 16);
  abi::P2pAllocParams pp{};
  pp.hSubDevice = h_subdevice_;
  pp.hPeerSubDevice = peer.h_subdevice;
  st = rm_alloc(h_client_, abi::kNv50P2p, &pp, sizeof pp, &peer.h_p2p, "NV50_P2P");
  if (!st.ok()) return undo(st);
  abi::UvmRegisterGpu rg{};
  std::memcpy(rg.gpu_uuid, peer.uuid, 16);
  rg.rmCtrlFd = -1;
  st = uvm_ioctl(fd_uvm_, abi::kUvmRegisterGpu, &rg, &rg.rmStatus, "UVM_REGISTER_GPU (peer)");
  if (!st.ok()) return undo(st);
  peer.uvm_registered = true;
  abi::UvmPeerAccess pa{};
  std::memcpy(pa.gpuUuidA, info_.uuid, 16);
  std::memcpy(pa.gpuUuidB, peer.uuid, 16);
  st = uvm_ioctl(fd_uvm_, abi::kUvmEnablePeerAccess, &pa, &pa.rmStatus, "UVM_ENABLE_PEER_ACCESS");
  if (!st.ok()) return undo(st);
  peer.uvm_peer = true;
  log("peer GPU " + hex(peer.gpu_id) + " (device instance " + std::to_string(device_instance) + "): " +
      caps_text(peer.caps));
  peers_.push_back(peer);
  return &peers_.back();
}

void Gpu::release_peers() {
  for (Peer& p : peers_) {
    if (p.uvm_peer) {
      abi::UvmPeerAccess pa{};
      std::memcpy(pa.gpuUuidA, info_.uuid, 16);
      std::memcpy(pa.gpuUuidB, p.uuid, 16);
      (void)uvm_ioctl(fd_uvm_, abi::kUvmDisablePeerAccess, &pa, &pa.rmStatus, "UVM_DISABLE_PEER_ACCESS");
    }
    if (p.uvm_registered) {
      abi::UvmUnregisterGpu u{};
      std::memcpy(u.gpu_uuid, p.uuid, 16);
      (void)uvm_ioctl(fd_uvm_, abi::kUvmUnregisterGpu, &u, &u.rmStatus, "UVM_UNREGISTER_GPU (peer)");
    }
    // The RM objects (device, subdevice, NV50_P2P) go with the root client.
    if (p.fd_dev >= 0) ::close(p.fd_dev);
  }
  peers_.clear();
}

}  // namespace conccl::nv
