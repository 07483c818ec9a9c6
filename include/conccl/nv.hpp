// conccl/nv.hpp - NVIDIA Hopper copy engines on our own RM channels: the
// options of open_device({.backend = "nv"}), CUDA interop, and pure helpers.
//
// The nv backend talks to the open NVIDIA kernel module (580 branch) directly:
// its own RM client, its own GPU virtual address space, and GPFIFO channels
// on asynchronous copy engines (LCEs) - never a graphics copy engine (GRCE).
// What open_device gives is a full conccl::Device: create_queue(gpu, lce)
// opens a channel on that LCE whose queue speaks the vocabulary
// (conccl/commands.hpp, lowered to Hopper CE and host methods), and
// Communicator plans run on it. See docs/nv-backend.md.
//
// Without /dev/nvidiactl, with the proprietary module, or with another driver
// branch, every entry point returns Code::unavailable naming the cause.
// No call blocks without a deadline; library code never exits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "conccl/deadline.hpp"
#include "conccl/device.hpp"
#include "conccl/status.hpp"

namespace conccl {
class Plan;
class StreamOps;
}

namespace conccl::nv {

// How a sleeping wait is woken (Options::irq_source / irq_notifier).
enum class IrqSource : uint8_t {
  host_method,  // the waiter submits host WFI + NON_STALL_INTERRUPT after the awaited work
  copy_launch,  // the waiter submits a timeline release whose LAUNCH_DMA has INTERRUPT_TYPE=NON_BLOCKING
};
enum class IrqNotifier : uint8_t {
  copy_engine,  // NV2080_NOTIFIERS_CE(lce): this engine's non-stall interrupts
  host,         // NV2080_NOTIFIERS_FIFO_EVENT_MTHD: every host-driven engine's (more spurious wakes)
  both,
};

// Where process slots put their data windows (Options::process_slot): above
// AddressSanitizer's shadow (which ends at 16 TiB) and below the 128 TiB of
// a 47-bit user address space.
inline constexpr uint64_t kSlotWindowBase = 0x2000'0000'0000ull;   // 32 TiB
inline constexpr uint64_t kSlotWindowBytes = 0x0400'0000'0000ull;  // 4 TiB per slot

struct Options {
  int gpu = 0;  // index among the GPUs the driver lists (NV_ESC_CARD_INFO order)
  // Ranks in separate processes (DeviceOptions::process_slot, 0..15): the
  // data windows go to fixed addresses by slot - kSlotWindowBase + slot *
  // kSlotWindowBytes + gpu * va_size - so that every process of a
  // communicator can map the others' memory at the addresses its owner
  // uses. -1: va_base as given (or where the kernel puts it).
  int process_slot = -1;
  // open_generic: the GPUs of the conccl::Device, in order (GPU i of the
  // Gpu is driver GPU gpus[i]); empty = every GPU the driver lists. Each
  // gets its own RM client, channels and VA windows; device memory of one is
  // mapped into every other's GPU VA space at the same address (a peer
  // mapping, NV50_P2P), host memory into all. An index may repeat: that GPU
  // is opened again as another logical GPU with its own client - how the
  // multi-GPU paths (export/import between clients, a communicator across
  // GPUs) run on a one-GPU machine; only the peer PTE itself needs two GPUs.
  std::vector<int> gpus;
  // CPU+GPU virtual windows this client reserves (PROT_NONE,
  // MAP_FIXED_NOREPLACE) and places every allocation in, so nothing else in
  // the process (CUDA) can be given those addresses; GPU VA == CPU VA.
  //  - the data window (va_size bytes) at va_base, or where the kernel puts
  //    it when va_base is 0;
  //  - the ring window (ring_window_bytes) for GP rings and pushbuffers, which
  //    must lie below 1 TiB (GP entries carry 40-bit addresses): the first
  //    free range of /proc/self/maps below 1 TiB, from 64 GiB down (an
  //    AddressSanitizer build keeps [2 GiB, 2 TiB) as its shadow, so there it
  //    lands below 2 GiB). Where no range fits: Code::resource_exhausted.
  uint64_t va_base = 0;
  uint64_t va_size = 256ull << 30;
  uint64_t ring_window_bytes = 512ull << 20;  // 4 MiB per channel (GP ring + pushbuffer, 2 MiB aligned each)
  uint32_t gpfifo_entries = 1024;        // per channel, power of two
  uint32_t pushbuffer_bytes = 1u << 20;  // per channel
  // LCEs to open channels on; empty = every asynchronous LCE with PCEs.
  std::vector<int> engines;
  // Refuse the proprietary module (its RM interface faults with our layouts,
  // tinygrad issue #6947). Set false only to experiment.
  bool require_open_module = true;
  // Gpu-to-device bytes per second one PCE moves while compute runs
  // beside it, for channels_for_rate (which plans transfers that overlap
  // compute). An H200 measured 32-40 GB/s per PCE under a bf16 GEMM (47 GB/s
  // alone: copy engines slow with the GPU clock that the GEMM's power draw
  // lowers; docs/perf/h200.md, C3). Calibrate it for other GPUs or workloads.
  double pce_bytes_per_s = 34e9;
  // Channel::wait_done polls for wait_spin_us, then sleeps in naps that double
  // from 2 us up to wait_max_sleep_us (0: never sleep, yield instead). The
  // nap bounds the extra latency of a long wait; the spin keeps short ones at
  // their 3-5 us.
  uint32_t wait_spin_us = 50;
  uint32_t wait_max_sleep_us = 200;
  // Sleep on an interrupt instead of napping when the wait is for everything
  // submitted: the waiter asks the channel for a non-stall interrupt after
  // that work and sleeps in ppoll() on an OS event RM signals from it
  // (NV01_EVENT_OS_EVENT on the subdevice, one event file per channel). The
  // ppoll has a safety timeout of wait_max_sleep_us x 10, so a lost interrupt
  // costs time, never a hang. Falls back to naps when the events cannot be
  // set up (Channel::interrupt_waits() says which).
  bool interrupt_waits = true;
  IrqSource irq_source = IrqSource::host_method;
  IrqNotifier irq_notifier = IrqNotifier::both;
  // Every RM/UVM call and its status, for bring-up logs.
  std::function<void(const std::string&)> log;
};

struct DriverInfo {
  std::string proc_version;    // first line of /proc/driver/nvidia/version
  std::string driver_version;  // NV0000_CTRL_CMD_SYSTEM_GET_BUILD_VERSION_V2
  bool open_module = false;
  uint32_t gpu_id = 0;
  int minor = -1;
  uint32_t device_instance = 0;
  uint16_t pci_device_id = 0;
  uint8_t uuid[16] = {};
  std::vector<uint32_t> classes;  // NV0080_CTRL_CMD_GPU_GET_CLASSLIST_V2
  uint32_t channel_class = 0;     // 0xC86F or 0xC56F
  std::string gpu_name;           // NV2080_CTRL_CMD_GPU_GET_NAME_STRING ("NVIDIA H200"), "" if refused
  uint64_t fb_bytes = 0;          // NV2080_CTRL_FB_INFO_INDEX_TOTAL_RAM_SIZE, 0 if refused
  std::string uuid_string() const;
};

// ---- CUDA allocations that channels can import --------------------------------
// A CUDA VMM allocation: cuMemCreate(PINNED, device, POSIX_FILE_DESCRIPTOR
// handle type), rounded up to the recommended granularity (2 MiB on H200),
// a VA reservation, cuMemMap and read/write access for its device. `ptr`
// works in CUDA kernels and stream operations and, after
// Gpu::register_cuda, in channel commands. Contents are undefined.
struct CudaAlloc {
  uint64_t ptr = 0;
  size_t size = 0;
  uint64_t handle = 0;  // CUmemGenericAllocationHandle
  int device = 0;       // CUDA device ordinal
};
// ok when libcuda.so.1 loads and has the VMM entry points; else unavailable with why.
Status cuda_available();
// Initialises CUDA (cuInit) and, when the calling thread has no current
// context, makes `cuda_device`'s primary context current.
Result<CudaAlloc> cuda_alloc(size_t bytes, int cuda_device = 0);
Status cuda_free(CudaAlloc& a);
// The CUDA device ordinal whose UUID matches `uuid` (DriverInfo::uuid), or not_found.
Result<int> cuda_device_for_uuid(const uint8_t (&uuid)[16]);

// ---- conccl::Device --------------------------------------------------------------
// What open_device({backend = "nv"}) returns (src/backends/nv/nv_adapter.cpp):
// topology() lists the GPUs (Options::gpus) and their asynchronous copy
// engines (EngineKind::copy, id = LCE, weight = PCE count) with Isa
// hopper-ce, and the links between GPUs ("nvlink", "pcie", or "same-gpu" for
// a GPU opened twice); alloc/free/host_pointer map to our RM memory (device
// memory is zeroed by a copy-engine fill, not CPU-visible, and mapped into
// every GPU of the Gpu at the same address; host memory is CPU-visible
// and mapped into all); create_queue(gpu, lce) opens a new GPFIFO channel on
// that GPU's LCE. GPUs without peer access to each other: open fails and
// says which pair.
Result<std::unique_ptr<conccl::Device>> open_generic(const Options& options = {});
// How many GPUs the driver lists (no RM client is opened), or unavailable.
Result<int> gpu_count(const Options& options = {});
class Gpu;  // src/backends/nv/nv_device.hpp (internal)
// The nv::Gpu of `gpu` behind an adapter from open_generic, or null for
// other backends or a GPU out of range.
Gpu* native(conccl::Device& device, int gpu = 0);

// CUDA memory as a conccl::Buffer of an nv conccl::Device: registers every
// CUDA VMM allocation [ptr, ptr+bytes) touches (cuMemCreate with the POSIX-fd
// handle type: cuda_alloc, or PyTorch with expandable segments) so that the
// engines use CUDA's own pointer. Unregister before CUDA frees the memory.
// On a device opened with a process slot (one process per rank), the one
// allocation holding [ptr, ptr+bytes) is mapped into the slot's window
// instead, where other processes can map it too: the Allocation's va is then
// that address, not ptr (docs/multiprocess.md).
// Errors: invalid_argument for plain cudaMalloc memory, unavailable for
// other backends or without libcuda.
Result<conccl::Buffer> register_cuda(conccl::Device& device, uint64_t ptr, size_t bytes, int gpu = 0);
Status unregister_cuda(conccl::Device& device, const conccl::Buffer& buffer);
// Makes the host memory the device hands out for signals (Signal::create with
// gpu -1) visible to CUDA at the same addresses (cuMemHostRegister), so that
// CUDA streams can cuStreamWaitValue64 on a plan's arrival signals. Once per
// device; needs libcuda.
Status share_signals_with_cuda(conccl::Device& device);
// The CUDA device ordinal of `gpu` of an nv conccl::Device (by UUID).
Result<int> cuda_ordinal(conccl::Device& device, int gpu);
// Orders a prelaunched plan on a CUDA stream (a CUstream; nullptr is the
// legacy default stream): the stream releases the plan once its prior work is
// done (cuStreamWriteValue64 into the plan's trigger, which fences that work's
// writes first), and work queued on the stream afterwards waits until every
// rank's receive buffer is complete (cuStreamWaitValue64 GEQ on each rank's
// arrival signal). Shares the device's signals with CUDA on first use. The
// host returns at once; running() and wait() say when the launch is done,
// and a relaunch must wait for it. The plan must be compiled with
// CollectiveArgs::prelaunch; its buffers must be ones the stream's work may
// touch in that order (registered CUDA memory).
Status enqueue_on_stream(conccl::Device& device, conccl::Plan& plan, void* cu_stream, Deadline deadline);
// A StreamOps over a CUDA stream (a CUstream; nullptr is the legacy default
// stream), for Communicator::call: stores are cuStreamWriteValue64 and
// waits cuStreamWaitValue64 GEQ on the device's signal memory, which is
// shared with CUDA first (share_signals_with_cuda). Keep one per stream and
// reuse it: it holds no CUDA resource of its own.
Result<std::unique_ptr<conccl::StreamOps>> stream_ops(conccl::Device& device, void* cu_stream);
// Waits on the host until the work queued on cu_stream so far is done
// (cuStreamQuery polled, so that the wait has a deadline, which
// cuStreamSynchronize lacks). The NCCL-shaped calls of a multi-process
// communicator order themselves on a stream this way.
Status synchronize_stream(void* cu_stream, Deadline deadline);

// Splits `bytes` over weights (PCE counts): piece i gets about
// bytes*w[i]/sum(w), rounded to `align`; the last non-empty piece takes the
// rest. Pure; used by copy_striped.
std::vector<uint64_t> stripe(uint64_t bytes, std::span<const int> weights, uint64_t align);

// One engine as pick_for_rate sees it.
struct RateCandidate {
  int pces = 0;
  bool shared = false;  // shares PCEs with a graphics CE (CUDA's copies use those too)
};
// Indices of the engine subset that reaches `need_bytes_per_s` (estimated as
// sum of PCEs x pce_bytes_per_s) with the fewest PCEs; among those, fewer
// shared engines, then fewer engines. Every subset is considered. When no
// subset reaches the need, every engine with PCEs; empty only when no engine
// has PCEs. Pure.
std::vector<size_t> pick_for_rate(std::span<const RateCandidate> engines, double need_bytes_per_s,
                                  double pce_bytes_per_s);

// Name of an RM status code (NV_ERR_INVALID_ARGUMENT, ...), or "NV_STATUS_0x.."
std::string rm_status_name(uint32_t status);
// Name of an RC error code in the error notifier (31 = MMU fault, ...).
std::string rc_error_name(uint32_t info32);

}  // namespace conccl::nv
