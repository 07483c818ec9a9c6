// conccl/staging.hpp - moving bytes between the host and device memory the
// CPU cannot see (NVIDIA HBM is not CPU-mapped; KFD VRAM beyond the BAR).
//
// A Stager owns one queue on a GPU and a host staging buffer; upload() and
// download() go through them in chunks (copy engine to or from the staging
// buffer, then memcpy), and use memcpy directly when the buffer is
// CPU-visible. For setting up and checking data (tests, tools, the first
// fill of a collective's buffers), not for hot paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "conccl/deadline.hpp"
#include "conccl/device.hpp"
#include "conccl/status.hpp"

namespace conccl {

class Stager {
 public:
  // A queue on `gpu`'s heaviest engine and `staging_bytes` of host memory.
  static Result<std::unique_ptr<Stager>> create(Device& device, int gpu, size_t staging_bytes = 64u << 20);
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // dst[offset, offset+bytes) = src. Errors: out_of_range past the buffer.
  Status upload(const Buffer& dst, size_t offset, const void* src, size_t bytes, Deadline deadline);
  // dst = src[offset, offset+bytes).
  Status download(void* dst, const Buffer& src, size_t offset, size_t bytes, Deadline deadline);
  // Every 32-bit word of the buffer (size a multiple of 4) = value, by the engine.
  Status fill(const Buffer& dst, uint32_t value, Deadline deadline);

 private:
  Stager(Device& device, std::unique_ptr<Queue> queue, Buffer staging);
  Status check(const Buffer& b, size_t offset, size_t bytes) const;
  Device& device_;
  std::unique_ptr<Queue> queue_;
  Buffer staging_;
};

}  // namespace conccl
