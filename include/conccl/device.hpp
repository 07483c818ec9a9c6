// conccl/device.hpp - the small interface every backend (emu, kfd, nv) implements.
//
// A Device enumerates GPUs, engines and links; allocates memory that engines
// can reach; and creates queues on chosen engines. Nothing above backends/
// includes a driver header: everything goes through this interface. What an
// engine speaks and can do is data: GpuInfo::isa and caps(isa)
// (conccl/commands.hpp), Queue::caps().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conccl/deadline.hpp"
#include "conccl/reduce.hpp"
#include "conccl/status.hpp"
#include "conccl/queue.hpp"
#include "conccl/topology.hpp"

namespace conccl {

enum class MemKind : uint8_t {
  device,  // the GPU's own memory (HBM)
  host,    // system memory every GPU's engines can reach (GTT)
  cuda,    // the GPU's memory, allocated by CUDA and mapped for the engines
           // (nv backend; C: CONCCL_MEM_CUDA): kernels and CUDA copies use
           // compute_address(va), which is va itself unless the device has a
           // process slot (DeviceOptions::process_slot)
};

// A piece of memory engines can address. `va` is what goes into packets;
// `host` is the CPU's mapping of the same bytes (null if not CPU-visible).
struct Buffer {
  uint64_t va = 0;
  void* host = nullptr;
  size_t size = 0;
  int gpu = -1;  // owning GPU; -1 for host memory
  MemKind kind = MemKind::host;
  uint64_t id = 0;  // backend's handle

  template <typename T>
  T* as() const { return static_cast<T*>(host); }
  uint64_t va_at(size_t offset) const { return va + offset; }
  // Bytes [offset, offset + bytes) of this buffer, as a buffer.
  Buffer slice(size_t offset, size_t bytes) const {
    Buffer s = *this;
    s.va += offset;
    s.host = host ? static_cast<uint8_t*>(host) + offset : nullptr;
    s.size = bytes;
    return s;
  }
};

// Memory that another process maps at the same address: what a rank in one
// process gives the others so that one plan's addresses hold in all of them
// (multi-process communicators, docs/multiprocess.md). The region is at
// least the buffer shared; the emulator shares its whole arena, NVIDIA the
// allocation.
struct SharedRegion {
  uint64_t va = 0;   // start, the same in every process
  uint64_t size = 0;
  MemKind kind = MemKind::host;
  int gpu = -1;  // the owner's GPU index, as the owner numbers its GPUs (-1: host memory)
  // The GPU whose driver holds the memory (for host memory, the GPU it was
  // allocated through) by its GpuInfo::node_gpu_id, which every process
  // reads alike: the importer finds that GPU among its own, or imports into
  // a GPU of its own where the owner's is hidden from it. 0 = not known.
  uint64_t node_gpu_id = 0;
  // Which allocation: memory freed and allocated again at the same address
  // is another region (the importer then maps the new one).
  uint64_t serial = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual const Topology& topology() const = 0;
  // The engine of `gpu` to use for copies toward GPU `peer` (peer == gpu:
  // local copies): the first of engines_toward(topology(), gpu, peer).
  Result<int> engine_toward(int gpu, int peer) const {
    Result<std::vector<int>> e = engines_toward(topology(), gpu, peer);
    if (!e.ok()) return e.status();
    if (e->empty()) return error(Code::not_found, "GPU " + std::to_string(gpu) + " has no DMA engines");
    return e->front();
  }
  int gpu_count() const { return static_cast<int>(topology().gpus.size()); }

  // Allocates memory engines can reach. MemKind::device and MemKind::cuda
  // memory belongs to `gpu`; MemKind::host ignores `gpu`. Contents are zero.
  // MemKind::cuda needs CUDA (the nv backend); other backends refuse it with
  // Code::unavailable. free() gives every kind back the way it came.
  virtual Result<Buffer> alloc(int gpu, size_t bytes, MemKind kind) = 0;
  virtual Status free(const Buffer& buffer) = 0;

  // Creates a queue (one ring) on engine `engine` of `gpu`.
  virtual Result<std::unique_ptr<Queue>> create_queue(int gpu, int engine,
                                                      const QueueOptions& options = {}) = 0;

  // CPU pointer for [va, va+bytes) when the range is CPU-visible, else null.
  virtual void* host_pointer(uint64_t va, size_t bytes) = 0;

  // Where the host reaches [va, va+bytes) when it stands in for the GPU's
  // compute (the emulator's stream and reduce step, which run on the host):
  // host_pointer, except on an emulated node whose host does not map GPU
  // memory (its setting host_maps_gpu_memory=0), where GPU memory is still
  // reached here.
  virtual void* compute_pointer(uint64_t va, size_t bytes) { return host_pointer(va, bytes); }

  // Whether engines can reach [va, va+bytes) (false: a packet touching it
  // would fault). Backends that cannot tell answer true.
  virtual bool is_mapped(uint64_t va, size_t bytes) { return host_pointer(va, bytes) != nullptr; }

  // Which allocation holds `va` now: a number that changes when the memory
  // is freed and allocated again at the same address, so that a cache keyed
  // by addresses (Communicator::call's plans) can tell the two apart. 0 where
  // the backend keeps one mapping for all its memory (the emulator's arena:
  // the same address is the same memory in every process) or does not know.
  virtual uint64_t allocation_serial(uint64_t va) const {
    (void)va;
    return 0;
  }

  // ---- the reduce step of reductions (docs/reductions.md) ----
  // Memory for staging that the device's compute can read and write
  // (NVIDIA: CUDA memory mapped for the engines too); by default alloc().
  virtual Result<Buffer> alloc_for_compute(int gpu, size_t bytes) { return alloc(gpu, bytes, MemKind::device); }
  virtual Status free_for_compute(const Buffer& buffer) { return free(buffer); }
  // The address compute kernels use for the engines' address `va` (NVIDIA
  // with a process slot: CUDA's own pointer of memory imported into the
  // slot's window); `va` itself by default.
  virtual uint64_t compute_address(uint64_t va) const { return va; }
  // Whether the device's compute can read and write [va, va+bytes) (NVIDIA:
  // CUDA memory, registered or from alloc_for_compute; not the memory
  // alloc() gives, which only the engines map).
  virtual bool compute_reaches(uint64_t va, size_t bytes) const {
    (void)va;
    (void)bytes;
    return true;
  }
  // Runs one reduction on the device now and waits for it (a stream-ordered
  // call uses StreamOps::reduce instead). Addresses are compute addresses.
  virtual Status reduce_now(const DeviceReduceStep& step, Deadline deadline) {
    (void)step;
    (void)deadline;
    return error(Code::unavailable,
                 "this backend has no reduce step: reductions need a kernel on the GPU (AMD: a code object for the "
                 "GPU's ISA loaded through hsa-runtime, not built here); use the emulator or the nv backend");
  }

  // ---- memory across processes (docs/multiprocess.md) ----
  // DeviceOptions::process_slot: where this process's memory lives in the
  // address layout that processes of one communicator share (-1: none).
  virtual int process_slot() const { return -1; }
  // The region holding `buffer`, and a new file descriptor for it (the
  // caller closes it once passed on).
  virtual Result<SharedRegion> share(const Buffer& buffer, int* fd) {
    (void)buffer;
    (void)fd;
    return error(Code::unavailable, "this backend cannot share memory with another process");
  }
  // Maps a region another process shared (its fd) at its address here, so
  // this process's engines can reach it; a region imported before is
  // reused. Fails when the address is taken here (the two processes opened
  // their devices with the same process_slot).
  virtual Status import_shared(const SharedRegion& region, int fd) {
    (void)region;
    (void)fd;
    return error(Code::unavailable, "this backend cannot map memory of another process");
  }

 private:
  friend class Signal;
  // The host wrote memory engines may be polling (a signal): the emulator
  // wakes its polling engines at once instead of at their next re-check.
  // Real engines poll memory themselves; nothing to do there.
  virtual void host_wrote() {}
};

// A reduction run by the host on the device's host mapping of its
// addresses (the emulated node's compute, and HostStream): an error names
// an address the host cannot see.
Status reduce_through_host_mapping(Device& device, const DeviceReduceStep& step);

// Options for open_device(). What belongs to one backend (the emulator's
// preset, GPU count, ... ; the nv backend's GPUs and waits) goes in
// `settings`, which each backend reads for itself (docs/backends.md).
struct DeviceOptions {
  std::string backend = "emu";  // "emu", "kfd", "nv" (backend_names())
  // Processes that form one communicator (Communicator::create with a
  // UniqueId) open their devices with distinct slots, 0..15 - their rank is
  // the natural choice - so that every process's memory has one address in
  // all of them (docs/multiprocess.md). -1: a device of one process.
  int process_slot = -1;
  // The backend's own settings: "key=value" words separated by spaces, the
  // same string from C (conccl_device_options.settings) and Python
  // (Device(settings=...)). Each backend refuses keys it does not know and
  // names those it does (docs/backends.md lists them), e.g.
  //   emu: "preset=small gpus=4 engines=2 gen=6.0 memory_per_gpu=64M"
  //   kfd: "trap=off require_engine_ids=1"
  //   nv:  "gpus=0,0 interrupt_waits=0 wait_max_sleep_us=100"
  std::string settings;
};

// The backends open_device knows, by name ("emu", "kfd", "nv").
std::vector<std::string> backend_names();

// Opens a backend. Errors: Code::unavailable when the backend is not built or
// its driver is missing here (the message names the cause and the fix).
Result<std::unique_ptr<Device>> open_device(const DeviceOptions& options);

// An owning Buffer, as std::unique_ptr owns memory: freed through its device
// when destroyed or reset(); move-only. release() hands the plain Buffer back
// to the caller, who then frees it. The device must outlive it.
class UniqueBuffer {
 public:
  UniqueBuffer() = default;
  UniqueBuffer(Device& device, const Buffer& buffer) : device_(&device), buffer_(buffer) {}
  static Result<UniqueBuffer> alloc(Device& device, int gpu, size_t bytes, MemKind kind) {
    Result<Buffer> b = device.alloc(gpu, bytes, kind);
    if (!b.ok()) return b.status();
    return UniqueBuffer(device, *b);
  }
  UniqueBuffer(UniqueBuffer&& o) noexcept : device_(o.device_), buffer_(o.buffer_) { o.device_ = nullptr; }
  UniqueBuffer& operator=(UniqueBuffer&& o) noexcept {
    if (this != &o) {
      (void)reset();
      device_ = o.device_;
      buffer_ = o.buffer_;
      o.device_ = nullptr;
    }
    return *this;
  }
  UniqueBuffer(const UniqueBuffer&) = delete;
  UniqueBuffer& operator=(const UniqueBuffer&) = delete;
  ~UniqueBuffer() { (void)reset(); }

  const Buffer& get() const { return buffer_; }
  const Buffer* operator->() const { return &buffer_; }
  operator const Buffer&() const { return buffer_; }  // NOLINT: passes where a Buffer is taken
  explicit operator bool() const { return device_ != nullptr; }
  // Frees now; the error of Device::free, if any (the destructor drops it).
  Status reset() {
    if (!device_) return Status();
    Device* d = device_;
    device_ = nullptr;
    return d->free(buffer_);
  }
  Buffer release() {
    device_ = nullptr;
    return buffer_;
  }

 private:
  Device* device_ = nullptr;
  Buffer buffer_{};
};

}  // namespace conccl
