// src/backends/nv/nv_device.cpp - opening the GPU, engines, channels, teardown.
//
// The sequence (tinygrad runtime/ops_nv.py NVKIface, and RM's own recipe for
// UVM channels in open-gpu-kernel-modules src/nvidia/src/kernel/rmapi/nv_gpu_ops.c):
//   /dev/nvidiactl, root client, build-version check (580 only), UVM init,
//   NV_ESC_CARD_INFO, /dev/nvidia<minor> + NV_ESC_REGISTER_FD,
//   GPU_GET_ID_INFO_V2, NV01_DEVICE_0, NV20_SUBDEVICE_0, NV01_MEMORY_VIRTUAL,
//   class list, HOPPER_USERMODE_A (doorbell at +0x90), FERMI_VASPACE_A
//   (externally owned) + UVM_REGISTER_GPU(_VASPACE), CE caps and PCE masks,
//   and per asynchronous LCE: KEPLER_CHANNEL_GROUP_A {engineType COPY(n)},
//   GPFIFO channel (0xC86F, falling back to 0xC56F), HOPPER_DMA_COPY_A with
//   NVB0B5_ALLOCATION_PARAMETERS {1, COPY(n)}, work-submit token, schedule.
// The async-LCE channel-group recipe is RM's own for UVM channels
// (src/nvidia/src/kernel/rmapi/nv_gpu_ops.c).
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "backends/nv/nv_device.hpp"
#include "backends/nv/rm_abi.hpp"

namespace conccl::nv {

namespace {

// "580.159.04" from a line of /proc/driver/nvidia/version.
std::string find_version(const std::string& line) {
  for (size_t i = 0; i < line.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(line[i])) || (i && std::isdigit(static_cast<unsigned char>(line[i - 1]))))
      continue;
    size_t j = i;
    while (j < line.size() && (std::isdigit(static_cast<unsigned char>(line[j])) || line[j] == '.')) ++j;
    const std::string tok = line.substr(i, j - i);
    if (std::count(tok.begin(), tok.end(), '.') >= 1 && tok.size() >= 5) return tok;
    i = j;
  }
  return "";
}

const char* kFix =
    " The nv backend needs the open NVIDIA kernel module of branch 580 and a Hopper GPU; elsewhere use "
    "the emulator: DeviceOptions::backend \"emu\" (conccl_device_options.backend; sdma-probe --backend emu).";

}  // namespace

std::string DriverInfo::uuid_string() const {
  char b[48];
  std::snprintf(b, sizeof b, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", uuid[0],
                uuid[1], uuid[2], uuid[3], uuid[4], uuid[5], uuid[6], uuid[7], uuid[8], uuid[9], uuid[10], uuid[11],
                uuid[12], uuid[13], uuid[14], uuid[15]);
  return b;
}

// ---- probe / open -------------------------------------------------------------

Status Gpu::probe(const Options& o) {
  if (access("/dev/nvidiactl", F_OK) != 0)
    return error(Code::unavailable,
                 "no /dev/nvidiactl here: the NVIDIA kernel driver is not loaded or not visible to this process "
                 "(container, VM without the GPU)." + std::string(kFix));
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!f || !std::getline(f, line)) {
    if (o.require_open_module)
      return error(Code::unavailable,
                   "cannot read /proc/driver/nvidia/version, so the open and the proprietary kernel module cannot "
                   "be told apart; refusing (set nv::Options::require_open_module=false to try anyway)." +
                       std::string(kFix));
    return Status();
  }
  const bool open_module = line.find("Open Kernel Module") != std::string::npos;
  if (!open_module && o.require_open_module)
    return error(Code::unavailable,
                 "the proprietary NVIDIA kernel module is loaded (\"" + line +
                     "\"); our RM interface definitions fault on it (tinygrad issue #6947). Install the open "
                     "module of the same version (nvidia-open / kernel-open)." + std::string(kFix));
  const std::string ver = find_version(line);
  if (ver.rfind("580.", 0) != 0)
    return error(Code::unavailable,
                 "driver " + (ver.empty() ? std::string("of unknown version") : ver) +
                     " is loaded; the nv backend's RM struct definitions are pinned to branch 580 "
                     "(layouts change between branches: tinygrad issues #5730, #12723)." + std::string(kFix));
  return Status();
}

Result<int> gpu_count(const Options& o) {
  CONCCL_RETURN_IF_ERROR(Gpu::probe(o));
  const int fd = ::open("/dev/nvidiactl", O_RDWR | O_CLOEXEC);
  if (fd < 0) return error(Code::unavailable, std::string("cannot open /dev/nvidiactl: ") + std::strerror(errno));
  std::vector<abi::CardInfo> cards(abi::kMaxCards);
  const int rc = ioctl(fd, abi::rm_ioctl(abi::kEscCardInfo, cards.size() * sizeof(abi::CardInfo)), cards.data());
  const int e = errno;
  ::close(fd);
  if (rc != 0) return error(Code::unavailable, std::string("NV_ESC_CARD_INFO failed: ") + std::strerror(e));
  int n = 0;
  for (const abi::CardInfo& c : cards) n += c.valid ? 1 : 0;
  return n;
}

Result<std::unique_ptr<Gpu>> Gpu::open(const Options& o) {
  std::unique_ptr<Gpu> d(new Gpu());
  Status st = d->open_impl(o);
  if (!st.ok()) {
    d->teardown();
    return st;
  }
  return d;
}

Status Gpu::open_impl(const Options& o) {
  opt_ = o;
  CONCCL_RETURN_IF_ERROR(check_options());
  CONCCL_RETURN_IF_ERROR(open_control());          // steps 1-2
  CONCCL_RETURN_IF_ERROR(open_gpu());              // step 3
  CONCCL_RETURN_IF_ERROR(alloc_device_objects());  // step 4
  CONCCL_RETURN_IF_ERROR(map_usermode());          // step 5
  CONCCL_RETURN_IF_ERROR(register_vaspace());      // step 6
  CONCCL_RETURN_IF_ERROR(reserve_windows());
  // Semaphore slots (host memory, CPU-cached, one VA for CPU and GPU).
  Result<Allocation> s = alloc(64 << 10, Placement::host);
  if (!s.ok()) return s.status().prefix("allocating semaphore slots");
  slots_ = *s;
  return open_engines();  // step 8
}

// Options that no driver call needs to refuse.
Status Gpu::check_options() {
  if (opt_.gpfifo_entries < 16 || (opt_.gpfifo_entries & (opt_.gpfifo_entries - 1)) || opt_.gpfifo_entries > (1u << 16))
    return error(Code::invalid_argument, "gpfifo_entries must be a power of two in 16..65536");
  if (opt_.pushbuffer_bytes < 4096 || opt_.pushbuffer_bytes % 4096)
    return error(Code::invalid_argument, "pushbuffer_bytes must be a multiple of 4096");
  if (opt_.va_base % (2u << 20) || opt_.va_size % (2u << 20) || opt_.va_size == 0 ||
      opt_.ring_window_bytes % (2u << 20) || opt_.ring_window_bytes == 0 || opt_.va_base + opt_.va_size < opt_.va_base)
    return error(Code::invalid_argument,
                 "the VA windows must be 2 MiB aligned and non-empty, got data " + hex(opt_.va_base) + "+" +
                     hex(opt_.va_size) + ", ring window " + hex(opt_.ring_window_bytes) + " bytes");
  if (!(opt_.pce_bytes_per_s > 0) || !std::isfinite(opt_.pce_bytes_per_s))
    return error(Code::invalid_argument,
                 "pce_bytes_per_s must be a positive bytes-per-second figure (34e9 measured beside a GEMM on an H200), got " +
                     std::to_string(opt_.pce_bytes_per_s));
  if (opt_.wait_max_sleep_us > 100000 || opt_.wait_spin_us > 10000000)
    return error(Code::invalid_argument,
                 "wait_max_sleep_us must be at most 100000 (a nap bounds the wake-up latency of a wait) and "
                 "wait_spin_us at most 10000000");
  return Status();
}

// Steps 1-2: the module's version, the control fd, the root client, the driver's build.
Status Gpu::open_control() {
  CONCCL_RETURN_IF_ERROR(probe(opt_));
  {
    std::ifstream f("/proc/driver/nvidia/version");
    std::getline(f, info_.proc_version);
    info_.open_module = info_.proc_version.find("Open Kernel Module") != std::string::npos;
  }

  // Step 1-2: control fd, root client, build version.
  fd_ctl_ = ::open("/dev/nvidiactl", O_RDWR | O_CLOEXEC);
  if (fd_ctl_ < 0)
    return error(Code::unavailable, std::string("cannot open /dev/nvidiactl: ") + std::strerror(errno) +
                                        (errno == EACCES ? " (add the user to the video group or fix the mode)" : ""));
  CONCCL_RETURN_IF_ERROR(rm_alloc(0, abi::kNv01RootClient, nullptr, 0, &h_client_, "root client"));
  {
    auto bv = std::make_unique<abi::BuildVersionV2>();
    std::memset(bv.get(), 0, sizeof *bv);
    CONCCL_RETURN_IF_ERROR(rm_control(h_client_, abi::kCtrlGetBuildVersionV2, bv.get(), sizeof *bv,
                                      "SYSTEM_GET_BUILD_VERSION_V2"));
    bv->driverVersionBuffer[255] = 0;
    info_.driver_version = bv->driverVersionBuffer;
    log("driver version " + info_.driver_version + " (" + info_.proc_version + ")");
    if (info_.driver_version.rfind("580.", 0) != 0)
      return error(Code::unavailable, "RM reports driver " + info_.driver_version +
                                          "; the nv backend's RM struct definitions are pinned to branch 580." + kFix);
  }

  return Status();
}

// Step 3: UVM, the GPU among the driver's cards, its device file.
Status Gpu::open_gpu() {
  // Step 3: UVM, then the GPU list.
  fd_uvm_ = ::open("/dev/nvidia-uvm", O_RDWR | O_CLOEXEC);
  fd_uvm2_ = ::open("/dev/nvidia-uvm", O_RDWR | O_CLOEXEC);
  if (fd_uvm_ < 0 || fd_uvm2_ < 0)
    return error(Code::unavailable, std::string("cannot open /dev/nvidia-uvm: ") + std::strerror(errno) +
                                        " (load nvidia-uvm: modprobe nvidia-uvm)");
  {
    abi::UvmInitialize ui{};
    CONCCL_RETURN_IF_ERROR(uvm_ioctl(fd_uvm_, abi::kUvmInitialize, &ui, &ui.rmStatus, "UVM_INITIALIZE"));
    abi::UvmMmInitialize mi{};
    mi.uvmFd = fd_uvm_;
    Status s = uvm_ioctl(fd_uvm2_, abi::kUvmMmInitialize, &mi, &mi.rmStatus, "UVM_MM_INITIALIZE");
    if (!s.ok()) log("UVM_MM_INITIALIZE failed (tolerated, CUDA hits it too): " + s.message());
  }
  {
    std::vector<abi::CardInfo> cards(abi::kMaxCards);
    if (ioctl(fd_ctl_, abi::rm_ioctl(abi::kEscCardInfo, cards.size() * sizeof(abi::CardInfo)), cards.data()) != 0)
      return error(Code::unavailable, std::string("NV_ESC_CARD_INFO failed: ") + std::strerror(errno));
    std::vector<const abi::CardInfo*> valid;
    for (const abi::CardInfo& c : cards)
      if (c.valid) valid.push_back(&c);
    if (opt_.gpu < 0 || static_cast<size_t>(opt_.gpu) >= valid.size())
      return error(Code::not_found, "GPU " + std::to_string(opt_.gpu) + " requested but the driver lists " +
                                        std::to_string(valid.size()));
    info_.gpu_id = valid[opt_.gpu]->gpu_id;
    info_.minor = static_cast<int>(valid[opt_.gpu]->minor_number);
    info_.pci_device_id = valid[opt_.gpu]->device_id;
    log("card " + std::to_string(opt_.gpu) + ": gpu_id " + hex(info_.gpu_id) + " minor " +
        std::to_string(info_.minor) + " pci " + hex(valid[opt_.gpu]->vendor_id) + ":" + hex(info_.pci_device_id));
  }
  {
    const std::string path = "/dev/nvidia" + std::to_string(info_.minor);
    fd_dev_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd_dev_ < 0) return error(Code::unavailable, "cannot open " + path + ": " + std::strerror(errno));
    abi::RegisterFd r{fd_ctl_};
    if (ioctl(fd_dev_, abi::rm_ioctl(abi::kEscRegisterFd, sizeof r), &r) != 0)
      return error(Code::unavailable, std::string("NV_ESC_REGISTER_FD failed: ") + std::strerror(errno));
  }
  abi::GpuIdInfoV2 idi{};
  idi.gpuId = info_.gpu_id;
  CONCCL_RETURN_IF_ERROR(rm_control(h_client_, abi::kCtrlGpuGetIdInfoV2, &idi, sizeof idi, "GPU_GET_ID_INFO_V2"));
  info_.device_instance = idi.deviceInstance;

  return Status();
}

// Step 4: device, subdevice, virtual memory object, class list.
Status Gpu::alloc_device_objects() {
  // Step 4: device, subdevice, virtual memory object, class list.
  abi::DeviceAllocParams dp{};
  dp.deviceId = info_.device_instance;
  dp.hClientShare = h_client_;
  dp.vaMode = abi::kVamodeOptionalMultiple;
  CONCCL_RETURN_IF_ERROR(rm_alloc(h_client_, abi::kNv01Device0, &dp, sizeof dp, &h_device_, "NV01_DEVICE_0"));
  abi::SubdeviceAllocParams sp{};
  CONCCL_RETURN_IF_ERROR(rm_alloc(h_device_, abi::kNv20Subdevice0, &sp, sizeof sp, &h_subdevice_, "NV20_SUBDEVICE_0"));
  (void)query_identity();
  abi::MemoryVirtualParams vp{};
  vp.limit = 0x1FFFFFFFFFFFFull;
  CONCCL_RETURN_IF_ERROR(rm_alloc(h_device_, abi::kNv01MemoryVirtual, &vp, sizeof vp, &h_virtmem_, "NV01_MEMORY_VIRTUAL"));
  {
    auto cl = std::make_unique<abi::ClasslistV2>();
    std::memset(cl.get(), 0, sizeof *cl);
    CONCCL_RETURN_IF_ERROR(rm_control(h_device_, abi::kCtrlGetClasslistV2, cl.get(), sizeof *cl, "GPU_GET_CLASSLIST_V2"));
    info_.classes.assign(cl->classList, cl->classList + std::min<uint32_t>(cl->numClasses, 200));
  }
  auto has = [&](uint32_t c) { return std::find(info_.classes.begin(), info_.classes.end(), c) != info_.classes.end(); };
  if (!has(hopper::kHopperDmaCopyA) || !has(hopper::kHopperUsermodeA))
    return error(Code::unavailable, "this GPU lists no HOPPER_DMA_COPY_A (0xC8B5) or HOPPER_USERMODE_A (0xC661) "
                                    "class: the nv backend drives Hopper (H100/H200) copy engines only");
  info_.channel_class = has(hopper::kHopperChannelGpfifoA) ? hopper::kHopperChannelGpfifoA
                        : has(hopper::kAmpereChannelGpfifoA) ? hopper::kAmpereChannelGpfifoA : 0;
  if (!info_.channel_class)
    return error(Code::unavailable, "no GPFIFO channel class (0xC86F or 0xC56F) in the class list");

  return Status();
}

// Step 5: the usermode doorbell page.
Status Gpu::map_usermode() {
  // Step 5: usermode doorbell page.
  CONCCL_RETURN_IF_ERROR(rm_alloc(h_subdevice_, hopper::kHopperUsermodeA, nullptr, 0, &h_usermode_, "HOPPER_USERMODE_A"));
  {
    const std::string path = "/dev/nvidia" + std::to_string(info_.minor);
    const int mfd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (mfd < 0) return error(Code::unavailable, "cannot open " + path + ": " + std::strerror(errno));
    abi::RegisterFd r{fd_ctl_};
    abi::Nvos33WithFd p{};
    p.hClient = h_client_;
    p.hDevice = h_device_;
    p.hMemory = h_usermode_;
    p.length = abi::kUsermodeMapBytes;
    p.fd = mfd;
    if (ioctl(mfd, abi::rm_ioctl(abi::kEscRegisterFd, sizeof r), &r) != 0 ||
        ioctl(fd_ctl_, abi::rm_ioctl(abi::kEscRmMapMemory, sizeof p), &p) != 0) {
      const int e = errno;
      ::close(mfd);
      return error(Code::unavailable, std::string("mapping the usermode doorbell: ") + std::strerror(e));
    }
    log("rm_map_memory usermode -> " + rm_status_name(p.status));
    if (p.status != 0) {
      ::close(mfd);
      return error(Code::unavailable, "mapping the usermode doorbell failed: " + rm_status_name(p.status));
    }
    void* m = mmap(nullptr, abi::kUsermodeMapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    const int e = errno;
    ::close(mfd);
    if (m == MAP_FAILED) return error(Code::unavailable, std::string("mmap of the usermode page: ") + std::strerror(e));
    usermode_map_ = m;
    doorbell_ = static_cast<volatile uint32_t*>(m) + abi::kUsermodeDoorbell / 4;
  }

  return Status();
}

// Step 6: our VA space, registered with UVM.
Status Gpu::register_vaspace() {
  // Step 6: our VA space, registered with UVM.
  abi::VaspaceParams vs{};
  vs.vaBase = 0x1000;
  vs.vaSize = 0x1FFFFFB000000ull;
  vs.flags = abi::kVaspaceEnablePageFaulting | abi::kVaspaceExternallyOwned;
  CONCCL_RETURN_IF_ERROR(rm_alloc(h_device_, abi::kFermiVaspaceA, &vs, sizeof vs, &h_vaspace_, "FERMI_VASPACE_A"));
  abi::GidInfo gid{};
  gid.flags = 2;  // NV2080_GPU_CMD_GPU_GET_GID_FLAGS_FORMAT_BINARY
  gid.length = 16;
  CONCCL_RETURN_IF_ERROR(rm_control(h_subdevice_, abi::kCtrlGetGidInfo, &gid, sizeof gid, "GPU_GET_GID_INFO"));
  std::memcpy(info_.uuid, gid.data, 16);
  log("gpu " + info_.uuid_string());
  abi::UvmRegisterGpu rg{};
  std::memcpy(rg.gpu_uuid, info_.uuid, 16);
  rg.rmCtrlFd = -1;
  CONCCL_RETURN_IF_ERROR(uvm_ioctl(fd_uvm_, abi::kUvmRegisterGpu, &rg, &rg.rmStatus, "UVM_REGISTER_GPU"));
  uvm_gpu_registered_ = true;
  abi::UvmRegisterGpuVaspace rv{};
  std::memcpy(rv.gpuUuid, info_.uuid, 16);
  rv.rmCtrlFd = fd_ctl_;
  rv.hClient = h_client_;
  rv.hVaSpace = h_vaspace_;
  CONCCL_RETURN_IF_ERROR(uvm_ioctl(fd_uvm_, abi::kUvmRegisterGpuVaspace, &rv, &rv.rmStatus, "UVM_REGISTER_GPU_VASPACE"));
  uvm_vaspace_registered_ = true;

  return Status();
}

// Step 8: the copy engines, and a channel on each asynchronous one with PCEs.
Status Gpu::open_engines() {
  // Step 8: copy engines.
  {
    abi::CeAllCaps all{};
    Status s = rm_control(h_subdevice_, abi::kCtrlCeGetAllCaps, &all, sizeof all, "CE_GET_ALL_CAPS");
    std::vector<std::pair<int, std::array<uint8_t, 2>>> present;
    if (s.ok()) {
      for (int i = 0; i < 64; ++i)
        if (all.present >> i & 1) present.push_back({i, {all.capsTbl[i][0], all.capsTbl[i][1]}});
    } else {
      for (int i = 0; i < 16; ++i) {
        abi::CeCapsV2 c{};
        c.ceEngineType = abi::engine_type_copy(i);
        if (rm_control(h_subdevice_, abi::kCtrlCeGetCapsV2, &c, sizeof c, "CE_GET_CAPS_V2").ok())
          present.push_back({i, {c.capsTbl[0], c.capsTbl[1]}});
      }
    }
    for (auto& [lce, caps] : present) {
      Engine e;
      e.lce = lce;
      e.caps[0] = caps[0];
      e.caps[1] = caps[1];
      e.grce = caps[0] & abi::kCeCapGrce;
      e.shared = caps[0] & abi::kCeCapShared;
      abi::CePceMask pm{};
      pm.ceEngineType = abi::engine_type_copy(lce);
      Status ps = rm_control(h_subdevice_, abi::kCtrlCeGetPceMask, &pm, sizeof pm, "CE_GET_CE_PCE_MASK");
      if (ps.ok()) {
        e.pce_mask = pm.pceMask;
        e.pces = std::popcount(pm.pceMask);
      } else {
        e.note = "PCE mask query failed: " + ps.message();
      }
      char buf[160];
      std::snprintf(buf, sizeof buf, "LCE%d caps %02x %02x pce_mask %#x (%d PCEs)%s%s", lce, caps[0], caps[1],
                    e.pce_mask, e.pces, e.grce ? " GRCE" : "", e.shared ? " shared" : "");
      log(buf);
      engines_.push_back(e);
    }
  }
  std::vector<Engine*> order;
  for (Engine& e : engines_) {
    if (e.grce) {
      e.note = "graphics CE (GRCE): belongs to the graphics runlist, never used";
      continue;
    }
    if (e.pces == 0) {
      if (e.note.empty()) e.note = "no PCEs assigned";
      continue;
    }
    if (!opt_.engines.empty() && std::find(opt_.engines.begin(), opt_.engines.end(), e.lce) == opt_.engines.end()) {
      e.note = "not requested (nv::Options::engines)";
      continue;
    }
    order.push_back(&e);
  }
  std::stable_sort(order.begin(), order.end(), [](const Engine* a, const Engine* b) { return a->pces > b->pces; });
  std::string notes;
  for (Engine* e : order) {
    Result<std::unique_ptr<GpfifoQueue>> q = create_queue(e->lce, opt_.pushbuffer_bytes);
    Status s = q.status();
    if (s.ok()) {
      channels_.push_back(std::make_unique<Channel>(std::move(q).value()));
      e->has_channel = true;
    } else {
      e->note = "channel creation failed: " + s.to_string();
      log("LCE" + std::to_string(e->lce) + ": " + e->note);
    }
  }
  for (const Engine& e : engines_)
    if (!e.has_channel) notes += " LCE" + std::to_string(e.lce) + ": " + e.note + ";";
  if (channels_.empty())
    return error(Code::unavailable, "no asynchronous copy engine accepted a channel:" + notes);
  return Status();
}

Status Gpu::query_identity() {
  auto n = std::make_unique<abi::GpuNameString>();
  std::memset(n.get(), 0, sizeof *n);
  Status s = rm_control(h_subdevice_, abi::kCtrlGpuGetNameString, n.get(), sizeof *n, "GPU_GET_NAME_STRING");
  if (s.ok()) {
    n->name[63] = 0;
    std::string name(reinterpret_cast<const char*>(n->name));
    while (!name.empty() && (name.back() == ' ' || name.back() == '\n')) name.pop_back();
    info_.gpu_name = name;
  } else {
    log("GPU name not available (not fatal): " + s.message());
  }
  abi::InfoEntry e{abi::kFbInfoTotalRamSize, 0};
  abi::InfoListParams p{};
  p.listSize = 1;
  p.list = reinterpret_cast<uint64_t>(&e);
  s = rm_control(h_subdevice_, abi::kCtrlFbGetInfo, &p, sizeof p, "FB_GET_INFO (total RAM)");
  if (s.ok()) info_.fb_bytes = uint64_t(e.data) << 10;  // KiB
  else log("memory size not available (not fatal): " + s.message());
  return Status();
}

// ---- channels -----------------------------------------------------------------

// Register the channel with UVM so that its MMU faults are reported (see
// rm_abi.hpp UvmRegisterChannel). UVM maps the channel's context buffers in
// [base, base+length); copy engines have none, but the range must be free.
void Gpu::register_channel_faults(NvChannel& c, int lce) {
  const uint64_t bytes = 64ull << 20;
  Result<uint64_t> va = reserve_va(bytes, 2u << 20);
  if (va.ok()) {
    abi::UvmRegisterChannel rc{};
    std::memcpy(rc.gpuUuid, info_.uuid, 16);
    rc.rmCtrlFd = fd_ctl_;
    rc.hClient = h_client_;
    rc.hChannel = c.h_channel;
    rc.base = *va;
    rc.length = bytes;
    Status r = uvm_ioctl(fd_uvm_, abi::kUvmRegisterChannel, &rc, &rc.rmStatus, "UVM_REGISTER_CHANNEL");
    if (r.ok()) {
      c.uvm_registered = true;
      c.uvm_range_va = *va;
      c.uvm_range_bytes = bytes;
    } else {
      release_va(*va, bytes);
      log("LCE" + std::to_string(lce) + ": MMU faults on this channel will stall it instead of being reported: " +
          r.message());
    }
  }
}

Result<std::unique_ptr<GpfifoQueue>> Gpu::create_queue(int lce, size_t pushbuffer_bytes, int gpu) {
  const Engine* eng = nullptr;
  std::string ids;
  for (const Engine& e : engines_) {
    if (e.lce == lce) eng = &e;
    if (!e.grce && e.pces > 0) ids += (ids.empty() ? "" : ", ") + std::to_string(e.lce);
  }
  if (!eng) return error(Code::invalid_argument, "no LCE" + std::to_string(lce) + " on this GPU (async LCEs: " + ids + ")");
  if (eng->grce)
    return error(Code::invalid_argument, "LCE" + std::to_string(lce) +
                                             " is a graphics copy engine (GRCE): it belongs to the graphics runlist, "
                                             "so no channel of ours goes there; use an asynchronous LCE (" + ids + ")");
  if (eng->pces == 0)
    return error(Code::invalid_argument, "LCE" + std::to_string(lce) + " has no PCEs; use " + ids);
  if (pushbuffer_bytes < 4096 || pushbuffer_bytes % 4096)
    return error(Code::invalid_argument, "pushbuffer (ring) size must be a multiple of 4096, not " +
                                             std::to_string(pushbuffer_bytes));
  auto ch = std::make_unique<NvChannel>(this, lce, eng->pces);
  NvChannel& c = *ch;
  c.id_ = next_channel_id_++;
  c.entries = opt_.gpfifo_entries;
  live_.insert(&c);
  const uint32_t engine = abi::engine_type_copy(lce);
  // On failure the NvChannel's destructor releases whatever was made.

  abi::ChannelGroupParams gp{};
  gp.hVASpace = h_vaspace_;
  gp.engineType = engine;
  CONCCL_RETURN_IF_ERROR(rm_alloc(h_device_, abi::kKeplerChannelGroupA, &gp, sizeof gp, &c.h_group, "channel group"));

  // GP ring with USERD right after it, and the pushbuffer: device memory,
  // CPU write-combined, in the ring window below 2^40.
  const size_t ring_bytes = size_t(c.entries) * 8 + 4096;
  Result<Allocation> ring = alloc(ring_bytes, Placement::device, true, true);
  if (!ring.ok()) return ring.status();
  c.ring = *ring;
  std::memset(c.ring.host, 0, c.ring.size);
  Result<Allocation> pb = alloc(pushbuffer_bytes, Placement::device, true, true);
  if (!pb.ok()) return pb.status();
  c.pushbuffer = *pb;
  Result<Allocation> nt = alloc_rm_sysmem(4096);
  if (!nt.ok()) return nt.status();
  c.notifier = *nt;
  Result<uint64_t> tl = alloc_slot();
  if (!tl.ok()) return tl.status();
  c.timeline_va = *tl;
  c.timeline = slot_host(*tl);
  c.timeline[0] = 0;
  c.timeline[1] = 0;

  abi::ChannelAllocParams cp{};
  cp.hObjectError = c.notifier.handle;
  cp.hObjectBuffer = c.ring.handle;
  cp.gpFifoOffset = c.ring.va;
  cp.gpFifoEntries = c.entries;
  cp.hUserdMemory[0] = c.ring.handle;
  cp.userdOffset[0] = uint64_t(c.entries) * 8;
  cp.engineType = engine;
  Status st = rm_alloc(c.h_group, info_.channel_class, &cp, sizeof cp, &c.h_channel, "GPFIFO channel");
  if (!st.ok() && info_.channel_class == hopper::kHopperChannelGpfifoA &&
      std::find(info_.classes.begin(), info_.classes.end(), hopper::kAmpereChannelGpfifoA) != info_.classes.end()) {
    log("retrying the channel as AMPERE_CHANNEL_GPFIFO_A (0xC56F)");
    st = rm_alloc(c.h_group, hopper::kAmpereChannelGpfifoA, &cp, sizeof cp, &c.h_channel, "GPFIFO channel (0xC56F)");
    if (st.ok()) info_.channel_class = hopper::kAmpereChannelGpfifoA;
  }
  if (!st.ok()) return st;
  abi::CopyAllocParams ca{1, engine};
  CONCCL_RETURN_IF_ERROR(rm_alloc(c.h_channel, hopper::kHopperDmaCopyA, &ca, sizeof ca, &c.h_copy, "HOPPER_DMA_COPY_A"));
  abi::WorkSubmitToken tok{0xFFFFFFFFu};
  CONCCL_RETURN_IF_ERROR(
      rm_control(c.h_channel, abi::kCtrlGetWorkSubmitToken, &tok, sizeof tok, "GPFIFO_GET_WORK_SUBMIT_TOKEN"));
  c.token = tok.workSubmitToken;
  abi::ScheduleParams sc{1, 0, 0};
  st = rm_control(c.h_group, abi::kCtrlGroupSchedule, &sc, sizeof sc, "KEPLER_CHANNEL_GROUP_A GPFIFO_SCHEDULE");
  if (!st.ok()) {
    log("group schedule failed; scheduling the channel instead: " + st.message());
    abi::ScheduleParams sc2{1, 0, 0};
    CONCCL_RETURN_IF_ERROR(
        rm_control(c.h_channel, abi::kCtrlChannelSchedule, &sc2, sizeof sc2, "CHANNEL GPFIFO_SCHEDULE"));
  }
  register_channel_faults(c, lce);
  log("LCE" + std::to_string(lce) + ": channel " + hex(c.h_channel) + " token " + hex(c.token) + " ring " +
      hex(c.ring.va) + " pushbuffer " + hex(c.pushbuffer.va) + " timeline " + hex(c.timeline_va));

  GpfifoMemory m;
  m.gp = static_cast<uint64_t*>(c.ring.host);
  m.entries = c.entries;
  m.userd = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(c.ring.host) + size_t(c.entries) * 8);
  m.pushbuffer = static_cast<uint8_t*>(c.pushbuffer.host);
  m.pushbuffer_va = c.pushbuffer.va;
  m.pushbuffer_bytes = c.pushbuffer.size;
  m.timeline_va = c.timeline_va;
  m.timeline = const_cast<uint64_t*>(c.timeline);
  auto q = std::make_unique<GpfifoQueue>(gpu, lce, caps(Isa::hopper()), m, std::move(ch));
  c.queue = q.get();
  // First submission: bind the copy class; proves the channel runs.
  st = q->bind_copy_object(Deadline::after_ms(5000));
  if (!st.ok()) return st.prefix("first submission (SET_OBJECT) on LCE" + std::to_string(lce));
  setup_wakeup(c);
  return q;
}

Channel* Gpu::channel_for_lce(int lce) {
  for (auto& c : channels_)
    if (c->lce() == lce) return c.get();
  return nullptr;
}

Status Gpu::zero(uint64_t va, uint64_t bytes, Deadline deadline) {
  if (channels_.empty()) return error(Code::unavailable, "no copy-engine channel is open to zero memory with");
  Channel& ch = *channels_[0];
  CommandBuffer cb = ch.commands();
  CONCCL_RETURN_IF_ERROR(cb.fill(va, 0, bytes));
  return ch.run(cb, deadline);
}

Status Gpu::copy_striped(uint64_t dst, uint64_t src, uint64_t bytes, Deadline deadline,
                            std::span<Channel* const> channels, uint64_t align) {
  std::vector<Channel*> chs(channels.begin(), channels.end());
  if (chs.empty())
    for (auto& c : channels_) chs.push_back(c.get());
  if (chs.empty()) return error(Code::unavailable, "no channels");
  std::vector<int> w;
  for (Channel* c : chs) w.push_back(c->pces());
  const std::vector<uint64_t> pieces = stripe(bytes, w, align);
  std::vector<uint64_t> fences(chs.size(), 0);
  uint64_t off = 0;
  for (size_t i = 0; i < chs.size(); ++i) {
    if (!pieces[i]) continue;
    CommandBuffer cb = chs[i]->commands();
    CONCCL_RETURN_IF_ERROR(cb.copy(dst + off, src + off, pieces[i]));
    CONCCL_RETURN_IF_ERROR(chs[i]->submit(cb, deadline, &fences[i]));
    off += pieces[i];
  }
  for (size_t i = 0; i < chs.size(); ++i)
    if (pieces[i]) CONCCL_RETURN_IF_ERROR(chs[i]->wait_done(deadline, fences[i]));
  return Status();
}

std::vector<Channel*> Gpu::channels_for_rate(double bytes_per_s) {
  std::vector<RateCandidate> cand;
  for (auto& c : channels_) {
    RateCandidate r;
    r.pces = c->pces();
    for (const Engine& e : engines_)
      if (e.lce == c->lce()) r.shared = e.shared;
    cand.push_back(r);
  }
  std::vector<Channel*> out;
  for (size_t i : pick_for_rate(cand, bytes_per_s, opt_.pce_bytes_per_s)) out.push_back(channels_[i].get());
  return out;
}

double Gpu::estimated_rate(std::span<Channel* const> channels) const {
  double pces = 0;
  for (const Channel* c : channels) pces += c->pces();
  return pces * opt_.pce_bytes_per_s;
}

// ---- teardown (step 13) -----------------------------------------------------------

Gpu::~Gpu() { teardown(); }

void Gpu::teardown() {
  // Channels first: freeing a group stops and frees its channel and copy
  // object. Queues handed out by create_queue that outlive the Gpu are
  // released here and report the channel closed from then on.
  channels_.clear();
  for (NvChannel* c : std::vector<NvChannel*>(live_.begin(), live_.end())) c->release();
  release_cuda();
  while (!buffers_.empty()) {
    Allocation b = buffers_.back();
    Status s = free(b);
    if (!s.ok()) {
      log("teardown: " + s.to_string());
      if (!buffers_.empty() && buffers_.back().va == b.va) buffers_.pop_back();
    }
  }
  slots_ = Allocation{};
  release_peers();
  if (uvm_vaspace_registered_) {
    abi::UvmUnregisterGpuVaspace u{};
    std::memcpy(u.gpuUuid, info_.uuid, 16);
    (void)uvm_ioctl(fd_uvm_, abi::kUvmUnregisterGpuVaspace, &u, &u.rmStatus, "UVM_UNREGISTER_GPU_VASPACE");
    uvm_vaspace_registered_ = false;
  }
  if (uvm_gpu_registered_) {
    abi::UvmUnregisterGpu u{};
    std::memcpy(u.gpu_uuid, info_.uuid, 16);
    (void)uvm_ioctl(fd_uvm_, abi::kUvmUnregisterGpu, &u, &u.rmStatus, "UVM_UNREGISTER_GPU");
    uvm_gpu_registered_ = false;
  }
  if (usermode_map_) {
    munmap(usermode_map_, abi::kUsermodeMapBytes);
    usermode_map_ = nullptr;
    doorbell_ = nullptr;
  }
  if (h_client_) {
    // Freeing the root client frees every object under it.
    abi::Nvos00 p{};
    p.hRoot = h_client_;
    p.hObjectOld = h_client_;
    if (fd_ctl_ >= 0 && ioctl(fd_ctl_, abi::rm_ioctl(abi::kEscRmFree, sizeof p), &p) == 0)
      log("rm_free root client -> " + rm_status_name(p.status));
    h_client_ = h_device_ = h_subdevice_ = h_virtmem_ = h_usermode_ = h_vaspace_ = 0;
  }
  for (int* fd : {&fd_uvm2_, &fd_uvm_, &fd_dev_, &fd_ctl_})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
  if (data_base_) munmap(reinterpret_cast<void*>(data_base_), data_size_);
  if (low_base_) munmap(reinterpret_cast<void*>(low_base_), low_size_);
  data_base_ = low_base_ = 0;
}

}  // namespace conccl::nv
