// src/backends/nv/nv_device.hpp - the nv backend's own RM client, memory and
// channels (internal: the public API is conccl::Device from open_device
// ("nv"), conccl/nv.hpp). The benchmarks and hardware tests use it directly.
//
// The nv backend talks to the open NVIDIA kernel module (580 branch) directly:
// its own RM client on /dev/nvidiactl, /dev/nvidia<N> and /dev/nvidia-uvm, its
// own GPU virtual address space, and GPFIFO channels on asynchronous copy
// engines (LCEs) - never a graphics copy engine (GRCE). See docs/nv-backend.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "conccl/deadline.hpp"
#include "conccl/device.hpp"
#include "conccl/nv.hpp"
#include "conccl/status.hpp"
#include "packets/hopper_ce.hpp"
#include "queue/gpfifo_queue.hpp"

namespace conccl::nv {

enum class Placement : uint8_t {
  device,  // HBM (NV01_MEMORY_LOCAL_USER); CPU mapping through BAR1 on request
  host,    // anonymous host pages registered as an OS descriptor; always CPU-mapped
};

// GPU VA == CPU VA for every CPU-mapped buffer.
struct Allocation {
  uint64_t va = 0;
  void* host = nullptr;  // CPU mapping or null
  size_t size = 0;
  Placement kind = Placement::device;
  uint32_t handle = 0;     // RM memory handle
  uint32_t parent = 0;     // its RM parent when not our device (another GPU's memory: our handle of that GPU)
  bool imported = false;   // import_fd()/map_host(): at an address outside our windows
  int fd = -1;             // host memory: the memfd behind it (shared with other processes)
  bool windowed = false;   // import_in_window(): imported, at an address of our data window
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


// What a channel looked like when a wait gave up or the engine faulted.
struct ChannelState {
  uint32_t gp_get = 0, gp_put = 0;
  uint64_t submitted = 0, completed = 0;  // timeline values
  uint32_t notifier_info32 = 0;
  uint16_t notifier_info16 = 0, notifier_status = 0;
  uint64_t notifier_time_ns = 0;
  bool faulted() const { return notifier_status != 0; }
};

class Gpu;

// The RM objects behind one GPFIFO channel on an asynchronous copy engine,
// and what the shared GPFIFO protocol (src/queue/gpfifo_queue.cpp) needs from
// them: the doorbell (the work-submit token), faults (the error notifier),
// and sleeping on the engine's non-stall interrupt (nv_wakeup.cpp).
class NvChannel final : public GpfifoBackend {
 public:
  NvChannel(Gpu* dev, int lce, int pces);
  ~NvChannel() override;
  NvChannel(const NvChannel&) = delete;
  NvChannel& operator=(const NvChannel&) = delete;

  int id() const override { return id_; }
  void ring_doorbell() override;
  Status fault_status() const override;
  EngineStatus engine_status() const override;
  std::string describe() const override;
  WaitPolicy wait_policy() const override;
  bool sleep(std::chrono::nanoseconds timeout) override;  // nv_wakeup.cpp
  Event* wake_event() override { return nullptr; }

  ChannelState state() const;
  // Frees the RM objects (at the channel's end, or when the Gpu closes
  // first); afterwards every call reports the channel closed.
  void release();

  // Set up by Gpu::create_queue.
  Gpu* dev = nullptr;
  int lce = -1, pces = 0, id_ = 0;
  uint32_t h_group = 0, h_channel = 0, h_copy = 0;
  uint32_t token = 0;
  bool uvm_registered = false;  // UVM_REGISTER_CHANNEL succeeded: MMU faults reach the notifier
  uint64_t uvm_range_va = 0, uvm_range_bytes = 0;
  Allocation ring;         // GP entries, USERD after them (device memory, WC CPU mapping)
  Allocation pushbuffer;   // device memory, WC CPU mapping
  Allocation notifier;     // NV01_MEMORY_SYSTEM, error notifier
  uint64_t timeline_va = 0;
  volatile uint64_t* timeline = nullptr;  // [0] value, [1] GPU ns
  uint32_t entries = 0;
  int event_fd = -1;            // /dev/nvidiactl file RM posts this channel's wake events to
  uint32_t h_wake[2] = {};      // NV01_EVENT_OS_EVENT objects under the subdevice
  std::string irq_note;         // why interrupt waits are off, if they are
  bool event_lost = false;      // the event file reported POLLHUP/POLLERR
  GpfifoQueue* queue = nullptr; // the queue over this channel (for state())
};

// One GPFIFO channel on one asynchronous copy engine, for the nv backend's
// own tools (benchmarks, tests): work is recorded in a CommandBuffer of
// Isa::hopper() (commands(): the vocabulary, plus conccl/hopper_methods.hpp
// for Hopper-only methods) and submitted to the channel's GpfifoQueue (the
// generic conccl::Queue, also reachable as queue()).
class Channel {
 public:
  explicit Channel(std::unique_ptr<GpfifoQueue> q);
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel();

  int lce() const { return be_->lce; }
  int pces() const { return be_->pces; }
  // Whether UVM knows this channel, so that an MMU fault on it is turned into
  // an RC error in the notifier (Code::device_fault) rather than a stall
  // (which wait_done reports as Code::timeout with the channel state).
  bool faults_reported() const { return be_->uvm_registered; }

  // An empty command buffer for this channel (its Isa, at most what one
  // submission takes).
  CommandBuffer commands() const;
  // Submits `cb` followed by a release of the channel timeline; *ticket gets
  // the timeline value that marks its end. An empty `cb` still releases the
  // timeline (what a latency benchmark times). Waits for pushbuffer/GPFIFO
  // space until `deadline`.
  Status submit(const CommandBuffer& cb, Deadline deadline, uint64_t* ticket = nullptr);
  // submit(), then wait_done() for it: both by `deadline`.
  Status run(const CommandBuffer& cb, Deadline deadline);

  // Host wait until the timeline reaches `ticket` (default: everything
  // submitted): polls, then sleeps (Options::wait_spin_us, wait_max_sleep_us,
  // interrupt_waits). Code::device_fault when the error notifier reports an
  // RC error (MMU fault, ...); Code::timeout with the channel state.
  Status wait_done(Deadline deadline, uint64_t ticket = ~uint64_t(0));
  uint64_t completed() const;
  uint64_t submitted() const;
  // GPU ns timestamp of the last timeline release.
  uint64_t completed_time_ns() const;

  using WaitStats = GpfifoQueue::WaitStats;
  WaitStats wait_stats() const;
  // Whether waits can sleep on an interrupt here, and if not, why.
  bool interrupt_waits() const { return be_->event_fd >= 0; }
  const std::string& interrupt_note() const { return be_->irq_note; }

  ChannelState state() const { return be_->state(); }
  std::string diagnose() const;  // engine, GP_GET/GP_PUT, timeline, notifier, pending methods
  Status fault_status() const { return be_->fault_status(); }
  GpfifoQueue& queue() { return *q_; }

 private:
  std::unique_ptr<GpfifoQueue> q_;
  NvChannel* be_;  // owned by q_
};

class Gpu {
 public:
  // Opens the GPU in the order tinygrad's runtime/ops_nv.py does (root client, version checks,
  // UVM, device, subdevice, usermode doorbell, VA space, engines, channels).
  static Result<std::unique_ptr<Gpu>> open(const Options& options = {});
  // Quick check without opening anything: ok, or Code::unavailable with why
  // (no /dev/nvidiactl, proprietary module, other branch).
  static Status probe(const Options& options = {});
  ~Gpu();
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  const DriverInfo& info() const { return info_; }
  // Every copy engine RM reports, with why some have no channel.
  std::span<const Engine> engines() const { return engines_; }
  // A new GPFIFO channel on asynchronous copy engine `lce` (its own channel
  // group, channel, copy object and token), as a conccl::Queue; `gpu` is the
  // index it reports. The queue must be destroyed before this Gpu (if it
  // is not, closing the Gpu releases the channel and the queue reports it
  // closed).
  Result<std::unique_ptr<GpfifoQueue>> create_queue(int lce, size_t pushbuffer_bytes, int gpu = 0);

  // Channels, one per usable asynchronous LCE, most PCEs first.
  size_t channel_count() const { return channels_.size(); }
  Channel& channel(size_t i) { return *channels_[i]; }
  Channel* channel_for_lce(int lce);

  // Memory. Gpu memory is CPU-mapped only when cpu_map (BAR1, write-combined).
  // `low`: in the ring window below 2^40 (GP rings and pushbuffers).
  Result<Allocation> alloc(size_t bytes, Placement kind, bool cpu_map = false, bool low = false);
  Status free(Allocation& buffer);
  // Imports a CUDA VMM allocation (cuMemCreate with a POSIX fd handle type,
  // exported with cuMemExportToShareableHandle) and maps it at `va` (CUDA's
  // own address works: identity mapping). The fd may be closed afterwards.
  Result<Allocation> import_fd(int fd, uint64_t va, size_t bytes);

  // ---- memory of other RM clients and other GPUs (nv_peer.cpp) ---------------
  // Exports a buffer of ours (device memory) as an RM export fd: a fresh
  // /dev/nvidiactl fd holding its own reference to the memory until it is
  // closed. import_fd of another Gpu - of this GPU or of another, in this
  // process or, passed with SCM_RIGHTS, in another - maps it. The caller
  // closes the fd.
  Result<int> export_fd(const Allocation& buffer);
  // import_fd (above) takes memory of any GPU: the fd says which device
  // instance owns it. Another GPU's memory is imported under our handle of
  // that GPU and mapped with a peer PTE (NV50_P2P between the two GPUs, UVM
  // peer access); without peer access between them (p2p_caps), the error
  // says so.
  //
  // Host memory CPU-mapped by someone else (another Gpu's host buffer) at
  // its own address, registered with this GPU (OS descriptor) and mapped at
  // that address in our GPU VA space. free() unmaps it; the pages stay.
  Result<Allocation> map_host(void* host, size_t bytes);
  // NV0000_CTRL_SYSTEM_GET_P2P_CAPS bits between this GPU and `gpu_id`
  // (abi::kP2p*: reads, writes, NVLink, PCI, ...), as RM reports them.
  Result<uint32_t> p2p_caps(uint32_t gpu_id);

  // 16-byte host-visible semaphore slots (payload, GPU ns timestamp).
  Result<uint64_t> alloc_slot();
  volatile uint64_t* slot_host(uint64_t va);

  // ---- CUDA interop (cuda_interop.cpp; libcuda is loaded with dlopen) -------
  // The memory model with CUDA in the process (docs/nv-backend.md): CUDA
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
  // The one CUDA VMM allocation holding ptr: its base, size and a new RM
  // export fd of it (the caller closes it). For sharing CUDA memory with
  // other processes (conccl::Device::share on the nv backend).
  struct CudaAllocation {
    uint64_t base = 0;
    size_t size = 0;
    int fd = -1;
  };
  Result<CudaAllocation> export_cuda(uint64_t ptr);
  // import_fd at an address of this device's data window instead of one the
  // caller gives; freed (and the address given back) by free().
  Result<Allocation> import_in_window(int fd, size_t bytes);
  // Several CUDA allocations that are adjacent in CUDA's address space (one
  // tensor of PyTorch's expandable segments spans several), imported at one
  // contiguous range of the data window with the same layout: piece k at
  // start + (pieces[k].base - pieces[0].base). Each is freed on its own.
  Result<std::vector<Allocation>> import_span_in_window(const std::vector<CudaAllocation>& pieces);
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
  // cuMemHostRegister(PORTABLE|DEVICEMAP) of host memory of ours, checking
  // that CUDA's device pointer equals the host address; and its undoing.
  Status cuda_host_register(void* host, size_t bytes);
  Status cuda_host_unregister(void* host);
  bool slots_shared_with_cuda() const { return slots_shared_; }

  // Fills [va, va+bytes) with zeros on the first channel and waits, by
  // `deadline` (bytes a multiple of 4): how new memory is zeroed.
  Status zero(uint64_t va, uint64_t bytes, Deadline deadline);

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
  friend class NvChannel;
  Gpu() = default;
  Status open_impl(const Options& o);
  // open_impl's steps, in order (nv_device.cpp).
  Status check_options();
  Status open_control();
  Status open_gpu();
  Status alloc_device_objects();
  Status map_usermode();
  Status register_vaspace();
  Status open_engines();
  Status reserve_windows();
  // Registers the channel with UVM so that its MMU faults are reported (a
  // failure is logged: faults then stall the channel instead).
  void register_channel_faults(NvChannel& c, int lce);
  void setup_wakeup(NvChannel& ch);     // nv_wakeup.cpp; failures only turn interrupt waits off
  void teardown_wakeup(NvChannel& ch);
  void teardown();
  void log(const std::string& s) const;

  // RM/UVM primitives (nv_rm.cpp).
  Status rm_alloc(uint32_t parent, uint32_t cls, void* params, uint32_t size, uint32_t* handle,
                  const char* what, uint32_t want_handle = 0);
  Status rm_control(uint32_t object, uint32_t cmd, void* params, uint32_t size, const char* what);
  Status rm_free(uint32_t parent, uint32_t object, const char* what);
  Status uvm_ioctl(int fd, unsigned long cmd, void* params, uint32_t* rm_status, const char* what);
  Status map_cpu(uint32_t handle, uint64_t va, size_t bytes, bool sysmem, uint32_t flags);
  Status map_gpu(uint32_t handle, uint64_t va, size_t bytes, uint32_t extra_flags = 0);
  Result<uint64_t> reserve_va(size_t bytes, size_t align, bool low = false);
  void release_va(uint64_t va, size_t bytes);
  Result<Allocation> alloc_rm_sysmem(size_t bytes);  // NV01_MEMORY_SYSTEM, CPU-mapped
  // Host pages at `va` (CPU-mapped already) as an OS-descriptor memory object; its handle.
  Result<uint32_t> register_host_pages(uint64_t va, size_t bytes);

  Options opt_;
  DriverInfo info_;
  int fd_ctl_ = -1, fd_dev_ = -1, fd_uvm_ = -1, fd_uvm2_ = -1;
  uint32_t h_client_ = 0, h_device_ = 0, h_subdevice_ = 0, h_virtmem_ = 0, h_usermode_ = 0, h_vaspace_ = 0;
  bool uvm_gpu_registered_ = false, uvm_vaspace_registered_ = false;
  // Two CPU+GPU windows reserved PROT_NONE with MAP_FIXED_NOREPLACE (see
  // reserve_windows): the ring window below 2^40 for GP rings and pushbuffers
  // (GP entries carry 40-bit addresses), the data window for everything else.
  uint64_t low_base_ = 0, low_size_ = 0, data_base_ = 0, data_size_ = 0;
  volatile uint32_t* doorbell_ = nullptr;
  void* usermode_map_ = nullptr;
  uint32_t next_handle_ = 0x4E560001;  // client-chosen handles ('NV'), clear of RM's 0xcaf0xxxx
  std::vector<std::pair<uint64_t, uint64_t>> free_va_;   // data window: [va, bytes) free ranges, sorted
  std::vector<std::pair<uint64_t, uint64_t>> free_low_;  // ring window
  std::vector<Engine> engines_;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::set<NvChannel*> live_;  // every channel not yet released (channels_ and create_queue's)
  int next_channel_id_ = 0;
  std::vector<Allocation> buffers_;  // every live allocation, for teardown
  Allocation slots_;
  bool slots_shared_ = false;  // slots_ registered with cuMemHostRegister
  uint64_t next_slot_ = 0;
  struct Registration {
    Allocation buffer;  // import_fd at CUDA's address
    uint64_t refs = 0;
  };
  std::map<uint64_t, Registration> registered_;  // by allocation base VA
  uint64_t cuda_slot_ptr_ = 0, cuda_slot_handle_ = 0, cuda_slot_size_ = 0, next_cuda_slot_ = 0;
  int cuda_slot_device_ = 0;
  // Another GPU as this client sees it (nv_peer.cpp): its device and
  // subdevice in our client, the NV50_P2P object, its UVM registration.
  struct Peer {
    uint32_t gpu_id = 0, device_instance = 0, caps = 0;
    int fd_dev = -1;  // /dev/nvidia<minor> of the peer, kept open (RM requires it for the device object)
    uint8_t uuid[16] = {};
    uint32_t h_device = 0, h_subdevice = 0, h_p2p = 0;
    bool uvm_registered = false, uvm_peer = false;
  };
  std::vector<Peer> peers_;
  Result<Peer*> peer_for_instance(uint32_t device_instance);
  void release_peers();
  Status query_identity();  // GPU name and memory size (not fatal)
  void release_cuda();      // teardown of registrations and the CUDA slot page
  const Registration* find_registration(uint64_t va) const;
};

// CUDA stream memory operations on 64-bit words CUDA can address (our host
// memory after cuMemHostRegister, or CUDA memory): a store ordered after the
// stream's prior work, and a wait until the word is >= value.
Status stream_write_value64(void* stream, uint64_t va, uint64_t value);
Status stream_wait_value64(void* stream, uint64_t va, uint64_t value);
Status stream_write_value32(void* stream, uint64_t va, uint32_t value);
// Several of those in one driver call (cuStreamBatchMemOp), in order; one
// call per operation where the driver lacks it.
struct StreamMemOp {
  bool wait = false;  // else a write
  uint64_t va = 0, value = 0;
};
Status stream_batch64(void* stream, std::span<const StreamMemOp> ops);
// ok unless the stream is capturing a CUDA graph (then a message saying why
// a collective cannot be captured).
Status stream_not_capturing(void* stream);
// Graph capture of collectives (docs/graphs.md): whether the stream captures
// and collectives are recorded (unless CONCCL_CUDA_GRAPHS=0); an object kept
// alive by the captured graph (a CUDA user object).
bool stream_records_collectives(void* stream);
Status stream_capture_retain(void* stream, std::shared_ptr<void> what);
Status stream_host_sync(void* stream, Deadline deadline);  // nv::synchronize_stream
// Runs fn with the primary context of CUDA device `cuda_device` current on
// this thread, then gives the thread its context back.
Status run_in_device_context(int cuda_device, const std::function<Status()>& fn);

}  // namespace conccl::nv
