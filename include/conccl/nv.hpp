// conccl/nv.hpp - NVIDIA Hopper copy engines on our own RM channels.
//
// The nv backend talks to the open NVIDIA kernel module (580 branch) directly:
// its own RM client on /dev/nvidiactl, /dev/nvidia<N> and /dev/nvidia-uvm, its
// own GPU virtual address space, and one GPFIFO channel per asynchronous copy
// engine (LCE) - never a graphics copy engine (GRCE). Commands are the
// copy-engine vocabulary of packets/hopper_ce.hpp: copy, fill, signal, wait,
// timestamp. See docs/nv-backend.md and shared/reference/nvidia_ce.md §2.5.
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
#include "conccl/status.hpp"
#include "packets/hopper_ce.hpp"

namespace conccl {
class Device;  // conccl/device.hpp: the interface every backend implements
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

struct Options {
  int gpu = 0;  // index among the GPUs the driver lists (NV_ESC_CARD_INFO order)
  // CPU+GPU virtual window this client reserves (PROT_NONE, MAP_FIXED_NOREPLACE)
  // and places every allocation in, so nothing else in the process (CUDA) can
  // be given those addresses. Pushbuffers must sit below 1 TiB (40-bit GP
  // entries), so the window must end below 1 TiB.
  uint64_t va_base = 0x10'0000'0000ull;  // 64 GiB
  uint64_t va_size = 256ull << 30;
  uint32_t gpfifo_entries = 1024;        // per channel, power of two
  uint32_t pushbuffer_bytes = 1u << 20;  // per channel
  // LCEs to open channels on; empty = every asynchronous LCE with PCEs.
  std::vector<int> engines;
  // Refuse the proprietary module (its RM interface faults with our layouts,
  // tinygrad issue #6947). Set false only to experiment.
  bool require_open_module = true;
  // Device-to-device bytes per second one PCE moves while compute runs
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

enum class MemKind : uint8_t {
  device,  // HBM (NV01_MEMORY_LOCAL_USER); CPU mapping through BAR1 on request
  host,    // anonymous host pages registered as an OS descriptor; always CPU-mapped
};

// GPU VA == CPU VA for every CPU-mapped buffer.
struct Buffer {
  uint64_t va = 0;
  void* host = nullptr;  // CPU mapping or null
  size_t size = 0;
  MemKind kind = MemKind::device;
  uint32_t handle = 0;     // RM memory handle
  bool imported = false;   // import_fd(): mapped outside our window, not CPU-mapped
  template <typename T>
  T* as() const { return static_cast<T*>(host); }
};

struct Engine {
  int lce = -1;
  uint32_t pce_mask = 0;
  int pces = 0;
  uint8_t caps[2] = {};  // NV2080_CTRL_CE_GET_CAPS_V2 table
  bool grce = false;     // graphics CE: never used
  bool shared = false;   // shares PCEs with a GRCE
  bool has_channel = false;
  std::string note;      // why there is no channel, if there is none
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

// What a channel looked like when a wait gave up or the engine faulted.
struct ChannelState {
  uint32_t gp_get = 0, gp_put = 0;
  uint64_t submitted = 0, completed = 0;  // timeline values
  uint32_t notifier_info32 = 0;
  uint16_t notifier_info16 = 0, notifier_status = 0;
  uint64_t notifier_time_ns = 0;
  bool faulted() const { return notifier_status != 0; }
};

class Device;

// One GPFIFO channel on one asynchronous copy engine. Commands recorded with
// copy/fill/signal/wait/timestamp go to a pending list; submit() writes them
// to the pushbuffer with a release of the channel's timeline, one GP entry,
// GP_PUT, a store fence and the doorbell. Not thread-safe: one thread per
// channel (or external locking).
class Channel {
 public:
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel();

  int lce() const { return lce_; }
  int pces() const { return pces_; }
  // Whether UVM knows this channel, so that an MMU fault on it is turned into
  // an RC error in the notifier (Code::device_fault) rather than a stall
  // (which wait_done reports as Code::timeout with the channel state).
  bool faults_reported() const { return uvm_registered_; }

  // Recording (packets/hopper_ce.hpp CommandList semantics).
  Status copy(uint64_t dst, uint64_t src, uint64_t bytes) { return pending_.copy(dst, src, bytes); }
  Status fill(uint64_t dst, uint32_t value, uint64_t bytes) { return pending_.fill(dst, value, bytes); }
  // 64-bit release of `value` at addr (16-byte slot) with the GPU ns time at addr+8.
  Status signal(uint64_t addr, uint64_t value) { return pending_.signal(addr, value); }
  // The channel waits until *addr >= value (64 bit).
  Status wait(uint64_t addr, uint64_t value) { return pending_.wait(addr, value); }
  Status timestamp(uint64_t addr) { return pending_.timestamp(addr); }
  hopper::CommandList& pending() { return pending_; }

  // Submits the pending commands (or `cl`) followed by a release of the
  // channel timeline; *fence gets the timeline value that marks their end.
  // Waits for pushbuffer/GPFIFO space until `deadline`.
  Status submit(Deadline deadline, uint64_t* fence = nullptr);
  Status submit(const hopper::CommandList& cl, Deadline deadline, uint64_t* fence = nullptr);

  // Host wait until the timeline reaches `fence` (default: everything
  // submitted): polls, then sleeps (Options::wait_spin_us, wait_max_sleep_us).
  // Code::device_fault when the error notifier reports an RC
  // error (MMU fault, ...); Code::timeout with the channel state at the deadline.
  Status wait_done(Deadline deadline, uint64_t fence = ~uint64_t(0));
  uint64_t completed() const;       // timeline value the engine has released
  uint64_t submitted() const { return submitted_; }
  // GPU ns timestamp of the last timeline release (when the last completed
  // submission finished on the engine).
  uint64_t completed_time_ns() const;

  // What the waits on this channel did (for tests and tuning).
  struct WaitStats {
    uint64_t waits = 0;        // wait_done calls that had to wait
    uint64_t naps = 0;         // nanosleeps
    uint64_t irq_arms = 0;     // interrupt requests submitted
    uint64_t irq_wakes = 0;    // ppoll returned with the event
    uint64_t irq_timeouts = 0; // ppoll ran into its safety timeout
  };
  const WaitStats& wait_stats() const { return stats_; }
  // Whether waits can sleep on an interrupt here, and if not, why.
  bool interrupt_waits() const { return event_fd_ >= 0; }
  const std::string& interrupt_note() const { return irq_note_; }

  ChannelState state() const;
  std::string diagnose() const;  // one line: engine, GP_GET/GP_PUT, timeline, notifier
  Status fault_status() const;   // ok, or device_fault decoded from the notifier

 private:
  friend class Device;
  Channel() = default;
  Status reclaim(uint64_t need_bytes, Deadline deadline, uint64_t* start);
  // submit(cl, ...); with `interrupt`, the timeline release also raises a
  // non-stall interrupt (LAUNCH_DMA INTERRUPT_TYPE=NON_BLOCKING).
  Status submit_list(const hopper::CommandList& cl, Deadline deadline, uint64_t* fence, bool interrupt);
  Status sleep_on_interrupt(Deadline deadline, uint64_t target);  // nv_wakeup.cpp

  Device* dev_ = nullptr;
  int lce_ = -1, pces_ = 0;
  uint32_t h_group_ = 0, h_channel_ = 0, h_copy_ = 0;
  uint32_t token_ = 0;
  bool uvm_registered_ = false;  // UVM_REGISTER_CHANNEL succeeded: MMU faults reach the notifier
  uint64_t uvm_range_va_ = 0, uvm_range_bytes_ = 0;
  Buffer ring_;         // GP entries, USERD after them (device memory, WC CPU mapping)
  Buffer pushbuffer_;   // device memory, WC CPU mapping
  Buffer notifier_;     // NV01_MEMORY_SYSTEM, error notifier
  uint64_t timeline_va_ = 0;
  volatile uint64_t* timeline_ = nullptr;  // [0] value, [1] GPU ns
  uint32_t entries_ = 0;
  uint64_t put_ = 0;          // GP entries written (monotonic)
  uint64_t submitted_ = 0;    // timeline value of the last submission
  uint64_t pb_head_ = 0;      // monotonic pushbuffer byte position
  struct InFlight {
    uint64_t value, pb_start;
  };
  std::deque<InFlight> inflight_;
  hopper::CommandList pending_;
  hopper::CommandList tail_;  // scratch for the timeline release
  int event_fd_ = -1;            // /dev/nvidiactl file RM posts this channel's wake events to
  uint32_t h_wake_[2] = {};      // NV01_EVENT_OS_EVENT objects under the subdevice
  std::string irq_note_;         // why interrupt waits are off, if they are
  WaitStats stats_;
};

class Device {
 public:
  // Opens the GPU: nvidia_ce.md §2.5 steps 1-8 (root client, version checks,
  // UVM, device, subdevice, usermode doorbell, VA space, engines, channels).
  static Result<std::unique_ptr<Device>> open(const Options& options = {});
  // Quick check without opening anything: ok, or Code::unavailable with why
  // (no /dev/nvidiactl, proprietary module, other branch).
  static Status probe(const Options& options = {});
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DriverInfo& info() const { return info_; }
  // Every copy engine RM reports, with why some have no channel.
  std::span<const Engine> engines() const { return engines_; }
  // Channels, one per usable asynchronous LCE, most PCEs first.
  size_t channel_count() const { return channels_.size(); }
  Channel& channel(size_t i) { return *channels_[i]; }
  Channel* channel_for_lce(int lce);

  // Memory. Device memory is CPU-mapped only when cpu_map (BAR1, write-combined).
  Result<Buffer> alloc(size_t bytes, MemKind kind, bool cpu_map = false);
  Status free(Buffer& buffer);
  // Imports a CUDA VMM allocation (cuMemCreate with a POSIX fd handle type,
  // exported with cuMemExportToShareableHandle) and maps it at `va` (CUDA's
  // own address works: identity mapping). The fd may be closed afterwards.
  Result<Buffer> import_fd(int fd, uint64_t va, size_t bytes);

  // 16-byte host-visible semaphore slots (payload, GPU ns timestamp).
  Result<uint64_t> alloc_slot();
  volatile uint64_t* slot_host(uint64_t va);

  // ---- CUDA interop (cuda_interop.cpp; libcuda is loaded with dlopen) -------
  // The memory model with CUDA in the process (nvidia_interop.md §6): CUDA
  // allocates with cuMemCreate and the POSIX-fd handle type (cuda_alloc below
  // does that), and the channels use CUDA's own pointers once registered.
  //
  // register_cuda imports every CUDA VMM allocation that [ptr, ptr+bytes)
  // touches (cuMemRetainAllocationHandle, cuMemGetAddressRange,
  // cuMemExportToShareableHandle, import_fd at CUDA's address). Registrations
  // are cached per allocation and counted: registering memory already
  // registered only takes another reference. The import holds its own RM
  // reference to the memory - CUDA freeing it does not free it - so every
  // register_cuda needs an unregister_cuda of the same range (the device
  // releases whatever is left when it closes). Unregister before CUDA unmaps
  // or frees the memory: the mapping stays at that address in our VA space,
  // and CUDA may hand the address out again. Errors: invalid_argument for
  // memory CUDA did not allocate with cuMemCreate + POSIX fd (plain
  // cudaMalloc), unavailable without libcuda.
  Status register_cuda(uint64_t ptr, size_t bytes);
  Status unregister_cuda(uint64_t ptr, size_t bytes);
  // Whether [va, va+bytes) lies in registered CUDA memory.
  bool is_registered(uint64_t va, size_t bytes) const;
  size_t registered_allocations() const { return registered_.size(); }
  // 16-byte semaphore slots in device memory that CUDA and the channels share
  // (a 2 MiB cuda_alloc page registered with this device, zeroed): signal()
  // into it and cuStreamWaitValue64 on it, or cuStreamWriteValue64 into it
  // and wait() on it. Not CPU-visible (use alloc_slot for host polling).
  Result<uint64_t> alloc_cuda_slot();
  // Makes the host slot page (alloc_slot) visible to CUDA at the same
  // addresses (cuMemHostRegister PORTABLE|DEVICEMAP; CUDA's device pointer
  // must equal the host address, else Code::unavailable). Afterwards every
  // alloc_slot() slot is one semaphore for the CPU (slot_host), CUDA streams
  // (cuStreamWaitValue64 / cuStreamWriteValue64) and our channels. Once per
  // device; undone at close. Needs libcuda (Code::unavailable without).
  Status share_slots_with_cuda();
  bool slots_shared_with_cuda() const { return slots_shared_; }

  // Splits a copy over `channels` (default: all) in proportion to their PCE
  // counts, pieces aligned to `align` bytes, submits and waits.
  Status copy_striped(uint64_t dst, uint64_t src, uint64_t bytes, Deadline deadline,
                      std::span<Channel* const> channels = {}, uint64_t align = 4096);

  // The channels with the fewest PCEs that together move `bytes_per_s`
  // (estimated as PCEs x Options::pce_bytes_per_s; see pick_for_rate), or
  // all channels when none is fast enough. For transfers that overlap
  // compute and only have to finish within a window: on an H200 running a
  // GEMM at its power cap, what copies cost the GEMM grows with the bandwidth
  // they use (docs/perf/h200.md, C3), so ask for bytes / window, not more.
  std::vector<Channel*> channels_for_rate(double bytes_per_s);
  // The estimated bytes per second of a channel set (PCEs x pce_bytes_per_s).
  double estimated_rate(std::span<Channel* const> channels) const;

  const Options& options() const { return opt_; }

 private:
  friend class Channel;
  Device() = default;
  Status open_impl(const Options& o);
  Status create_channel(int lce, int pces);
  void setup_wakeup(Channel& ch);     // nv_wakeup.cpp; failures only turn interrupt waits off
  void teardown_wakeup(Channel& ch);
  void teardown();
  void log(const std::string& s) const;

  // RM/UVM primitives (nv_rm.cpp).
  Status rm_alloc(uint32_t parent, uint32_t cls, void* params, uint32_t size, uint32_t* handle,
                  const char* what, uint32_t want_handle = 0);
  Status rm_control(uint32_t object, uint32_t cmd, void* params, uint32_t size, const char* what);
  Status rm_free(uint32_t parent, uint32_t object, const char* what);
  Status uvm_ioctl(int fd, unsigned long cmd, void* params, uint32_t* rm_status, const char* what);
  Status map_cpu(uint32_t handle, uint64_t va, size_t bytes, bool sysmem, uint32_t flags);
  Status map_gpu(uint32_t handle, uint64_t va, size_t bytes);
  Result<uint64_t> reserve_va(size_t bytes, size_t align);
  void release_va(uint64_t va, size_t bytes);
  Result<Buffer> alloc_rm_sysmem(size_t bytes);  // NV01_MEMORY_SYSTEM, CPU-mapped

  Options opt_;
  DriverInfo info_;
  int fd_ctl_ = -1, fd_dev_ = -1, fd_uvm_ = -1, fd_uvm2_ = -1;
  uint32_t h_client_ = 0, h_device_ = 0, h_subdevice_ = 0, h_virtmem_ = 0, h_usermode_ = 0, h_vaspace_ = 0;
  bool uvm_gpu_registered_ = false, uvm_vaspace_registered_ = false;
  void* window_ = nullptr;
  volatile uint32_t* doorbell_ = nullptr;
  void* usermode_map_ = nullptr;
  uint32_t next_handle_ = 0x4E560001;  // client-chosen handles ('NV'), clear of RM's 0xcaf0xxxx
  std::vector<std::pair<uint64_t, uint64_t>> free_va_;  // [va, bytes) free ranges, sorted
  std::vector<Engine> engines_;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::vector<Buffer> buffers_;  // every live allocation, for teardown
  Buffer slots_;
  bool slots_shared_ = false;  // slots_ registered with cuMemHostRegister
  uint64_t next_slot_ = 0;
  struct Registration {
    Buffer buffer;  // import_fd at CUDA's address
    uint64_t refs = 0;
  };
  std::map<uint64_t, Registration> registered_;  // by allocation base VA
  uint64_t cuda_slot_ptr_ = 0, cuda_slot_handle_ = 0, cuda_slot_size_ = 0, next_cuda_slot_ = 0;
  int cuda_slot_device_ = 0;
  Status query_identity();  // GPU name and memory size (not fatal)
  void release_cuda();      // teardown of registrations and the CUDA slot page
  const Registration* find_registration(uint64_t va) const;
};

// ---- CUDA allocations that channels can import --------------------------------
// A CUDA VMM allocation: cuMemCreate(PINNED, device, POSIX_FILE_DESCRIPTOR
// handle type), rounded up to the recommended granularity (2 MiB on H200),
// a VA reservation, cuMemMap and read/write access for its device. `ptr`
// works in CUDA kernels and stream operations and, after
// Device::register_cuda, in channel commands. Contents are undefined.
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

// ---- conccl::Device adapter -----------------------------------------------------
// What open_device({backend = "nv"}) returns (src/backends/nv/nv_adapter.cpp,
// part of the conccl library, not conccl_nv): topology() lists the GPU and its
// asynchronous copy engines (EngineKind::copy, weight = PCE count); alloc,
// free and host_pointer map to nv::Device memory; create_queue is unavailable -
// NVIDIA channels are used through nv::Channel (native(dev)->channel(i)).
Result<std::unique_ptr<conccl::Device>> open_generic(const Options& options = {});
// The nv::Device behind an adapter from open_generic, or null for other backends.
Device* native(conccl::Device& device);

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
