// src/backends/nv/cuda_stream_ops.cpp - a CUDA stream as conccl::StreamOps:
// how calls, plans and reductions order themselves on a stream (stream
// memory operations, the reduce kernel) and how a capturing stream records
// them (docs/graphs.md). The driver calls behind each are in
// cuda_interop.cpp, cuda_graphs.cpp and reduce_kernel.cpp.
#include <memory>
#include <span>

#include "backends/nv/nv_adapter.hpp"
#include "backends/nv/replay_tick.hpp"
#include "backends/nv/wait_kernel.hpp"

namespace conccl::nv {

Status synchronize_stream(void* cu_stream, Deadline deadline) { return stream_host_sync(cu_stream, deadline); }

namespace {

// How long a wait kernel (CONCCL_STREAM_WAITS=kernel) polls at most: past
// any call timeout, by when the host's watchdog has failed the call (and
// stored what the stream waits for, releasing it).
constexpr uint64_t kWaitKernelBudgetNs = 300ull * 1000 * 1000 * 1000;

class CudaStreamOps final : public conccl::StreamOps {
 public:
  explicit CudaStreamOps(void* stream) : stream_(stream) {}
  Status write_value64(uint64_t va, uint64_t value) override { return stream_write_value64(stream_, va, value); }
  Status wait_value64(uint64_t va, uint64_t value) override {
    if (stream_waits_mode() == StreamWaits::kernel) {
      const StreamMemOp w{true, va, value};
      return launch_wait_kernel(stream_, std::span<const StreamMemOp>(&w, 1), kWaitKernelBudgetNs);
    }
    return stream_wait_value64(stream_, va, value);
  }
  Status write_value32(uint64_t va, uint32_t value) override { return stream_write_value32(stream_, va, value); }
  Status reduce(const DeviceReduceStep& step) override { return launch_reduce(stream_, step); }
  Status ready_to_order() override { return stream_not_capturing(stream_); }
  bool capturing() const override { return stream_records_collectives(stream_); }
  Status replay_tick(const ReplayTick& tick) override { return launch_replay_tick(stream_, tick); }
  Status retain_for_replays(std::shared_ptr<void> what) override {
    return stream_capture_retain(stream_, std::move(what));
  }
  Status batch(std::span<const Op> ops) override {
    StreamMemOp m[16];
    if (ops.size() > 16) return StreamOps::batch(ops);
    for (size_t i = 0; i < ops.size(); ++i) m[i] = StreamMemOp{ops[i].wait, ops[i].va, ops[i].value};
    const StreamWaits mode = stream_waits_mode();
    auto by_kernel = [&](size_t i) {
      if (!ops[i].wait || !ops[i].poll || mode == StreamWaits::memop) return false;
      return mode == StreamWaits::kernel || (ops[i].shares_gpu && stream_context_uses_mps(stream_));
    };
    // Runs of waits that poll as wait kernels, the rest (writes, and waits
    // that do not) as batches of memory operations, in the order given.
    for (size_t at = 0; at < ops.size();) {
      size_t end = at;
      while (end < ops.size() && by_kernel(end) == by_kernel(at)) ++end;
      const std::span<const StreamMemOp> run(m + at, end - at);
      CONCCL_RETURN_IF_ERROR(by_kernel(at) ? launch_wait_kernel(stream_, run, kWaitKernelBudgetNs)
                                           : stream_batch64(stream_, run));
      at = end;
    }
    return Status();
  }

 private:
  void* stream_;
};

}  // namespace

Result<std::unique_ptr<conccl::StreamOps>> stream_ops(conccl::Device& device, void* cu_stream) {
  if (!generic(device)) return not_nv("stream_ops");
  CONCCL_RETURN_IF_ERROR(check_stream_waits_setting());
  CONCCL_RETURN_IF_ERROR(share_signals_with_cuda(device));
  return std::unique_ptr<conccl::StreamOps>(new CudaStreamOps(cu_stream));
}

Status enqueue_on_stream(conccl::Device& device, conccl::Plan& plan, void* cu_stream, Deadline deadline) {
  if (!generic(device)) return not_nv("enqueue_on_stream");
  CONCCL_RETURN_IF_ERROR(check_stream_waits_setting());
  CONCCL_RETURN_IF_ERROR(share_signals_with_cuda(device));
  CudaStreamOps ops(cu_stream);
  return plan.enqueue(ops, deadline).prefix("enqueue_on_stream");
}

}  // namespace conccl::nv
