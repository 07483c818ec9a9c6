// src/queue/staging.cpp - host <-> device-memory transfers through a staging buffer.
#include "conccl/staging.hpp"

#include <algorithm>
#include <cstring>

namespace conccl {

Result<std::unique_ptr<Stager>> Stager::create(Device& device, int gpu, size_t staging_bytes) {
  if (gpu < 0 || gpu >= device.gpu_count())
    return error(Code::invalid_argument, "stager on gpu " + std::to_string(gpu) + ": the device has GPUs 0.." +
                                             std::to_string(device.gpu_count() - 1));
  if (staging_bytes < 4096) return error(Code::invalid_argument, "staging buffer must be at least 4096 bytes");
  const GpuInfo& g = device.topology().gpus[static_cast<size_t>(gpu)];
  if (g.engines.empty()) return error(Code::unavailable, "gpu " + std::to_string(gpu) + " has no DMA engine");
  const EngineInfo* best = &g.engines[0];
  for (const EngineInfo& e : g.engines)
    if (e.weight > best->weight) best = &e;
  QueueOptions qo;
  qo.ring_bytes = 64 << 10;
  Result<std::unique_ptr<Queue>> q = device.create_queue(gpu, best->id, qo);
  if (!q.ok()) return q.status().prefix("stager queue");
  Result<Buffer> b = device.alloc(-1, staging_bytes, MemKind::host);
  if (!b.ok()) return b.status().prefix("stager buffer");
  if (!b->host) {
    (void)device.free(*b);
    return error(Code::unavailable, "host memory of this backend is not CPU-visible");
  }
  return std::unique_ptr<Stager>(new Stager(device, std::move(q).value(), *b));
}

Stager::Stager(Device& device, std::unique_ptr<Queue> queue, Buffer staging)
    : device_(device), queue_(std::move(queue)), staging_(staging) {}

Stager::~Stager() {
  queue_.reset();
  (void)device_.free(staging_);
}

Status Stager::check(const Buffer& b, size_t offset, size_t bytes) const {
  if (offset > b.size || bytes > b.size - offset)
    return error(Code::out_of_range, "[" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                                         ") is outside the " + std::to_string(b.size) + "-byte buffer at " + hex(b.va));
  return Status();
}

Status Stager::upload(const Buffer& dst, size_t offset, const void* src, size_t bytes, Deadline deadline) {
  CONCCL_RETURN_IF_ERROR(check(dst, offset, bytes));
  if (bytes == 0) return Status();  // src may be null then; memcpy's pointers may not (C11 7.24.1p2)
  if (dst.host) {
    std::memcpy(static_cast<uint8_t*>(dst.host) + offset, src, bytes);
    return Status();
  }
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, staging_.size);
    std::memcpy(staging_.host, static_cast<const uint8_t*>(src) + done, n);
    CommandBuffer cb = queue_->command_buffer();
    CONCCL_RETURN_IF_ERROR(cb.copy(dst.va + offset + done, staging_.va, n));
    QueueSpan span;
    CONCCL_RETURN_IF_ERROR(queue_->submit(cb, deadline, &span));
    CONCCL_RETURN_IF_ERROR(queue_->wait_done(deadline, span.end));
    done += n;
  }
  return Status();
}

Status Stager::download(void* dst, const Buffer& src, size_t offset, size_t bytes, Deadline deadline) {
  CONCCL_RETURN_IF_ERROR(check(src, offset, bytes));
  if (bytes == 0) return Status();  // dst may be null then; memcpy's pointers may not (C11 7.24.1p2)
  if (src.host) {
    std::memcpy(dst, static_cast<const uint8_t*>(src.host) + offset, bytes);
    return Status();
  }
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(bytes - done, staging_.size);
    CommandBuffer cb = queue_->command_buffer();
    CONCCL_RETURN_IF_ERROR(cb.copy(staging_.va, src.va + offset + done, n));
    QueueSpan span;
    CONCCL_RETURN_IF_ERROR(queue_->submit(cb, deadline, &span));
    CONCCL_RETURN_IF_ERROR(queue_->wait_done(deadline, span.end));
    std::memcpy(static_cast<uint8_t*>(dst) + done, staging_.host, n);
    done += n;
  }
  return Status();
}

Status Stager::fill(const Buffer& dst, uint32_t value, Deadline deadline) {
  if (dst.size % 4 || dst.va % 4)
    return error(Code::invalid_argument, "fill of the buffer at " + hex(dst.va) + ": its address and size (" +
                                             std::to_string(dst.size) + ") must be multiples of 4");
  CommandBuffer cb = queue_->command_buffer();
  CONCCL_RETURN_IF_ERROR(cb.fill(dst.va, value, dst.size));
  QueueSpan span;
  CONCCL_RETURN_IF_ERROR(queue_->submit(cb, deadline, &span));
  return queue_->wait_done(deadline, span.end);
}

}  // namespace conccl
