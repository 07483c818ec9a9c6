// src/collectives/host_stream.cpp - HostStream: a StreamOps that a host
// thread runs in order (stores, waits, the caller's work), so that the
// stream-ordered calls run and are tested where there is no CUDA stream.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "conccl/collectives.hpp"
#include "util/thread_name.hpp"

namespace conccl {

struct HostStream::Impl {
  struct Op {  // (a Recording keeps them too)
    enum Kind : uint8_t { write, wait, work, write32 } kind = work;
    uint64_t va = 0, value = 0;
    std::function<Status()> fn;
  };
  Device* device = nullptr;
  int64_t wait_timeout_ms = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Op> ops;
  uint64_t queued = 0, ran = 0;
  Status first_error;
  bool stop = false;
  std::thread thread;
  // Capture: ops go to `recording` instead of `ops` (begin_capture .. end_capture).
  bool capturing = false;
  std::vector<Op> recording;
  std::vector<std::shared_ptr<void>> retained;

  void run() {
    std::unique_lock<std::mutex> lk(mu);
    while (true) {
      cv.wait(lk, [&] { return stop || !ops.empty(); });
      if (ops.empty()) return;  // stop, and nothing left
      Status st;
      {
        Op op = std::move(ops.front());
        ops.pop_front();
        lk.unlock();
        st = execute(op);
      }  // the step, and what it holds (a replay keeps its capture alive), goes before the step
         // counts as run: once synchronize() returns, the stream holds nothing of the work
         // it ran, so a capture whose recording the caller then drops goes with it
      lk.lock();
      if (!st.ok() && first_error.ok()) first_error = st;
      ++ran;
      cv.notify_all();
    }
  }

  Status execute(const Op& op) {
    if (op.kind == Op::work) return op.fn();
    if (op.kind == Op::write32) {
      auto* p32 = static_cast<uint32_t*>(device->compute_pointer(op.va, 4));
      if (!p32 || op.va % 4) return error(Code::invalid_argument, "HostStream: " + hex(op.va) + " has no host mapping or is not 4-aligned");
      std::atomic_ref<uint32_t>(*p32).store(uint32_t(op.value), std::memory_order_release);
      return Status();
    }
    auto* p = static_cast<uint64_t*>(device->compute_pointer(op.va, 8));
    if (!p) return error(Code::invalid_argument, "HostStream: " + hex(op.va) + " has no host mapping");
    std::atomic_ref<uint64_t> word(*p);
    if (op.kind == Op::write) {
      word.store(op.value, std::memory_order_release);
      return Status();
    }
    const Deadline dl = Deadline::after_ms(wait_timeout_ms);
    std::chrono::microseconds nap{1};
    for (int spins = 0; word.load(std::memory_order_acquire) < op.value; ++spins) {
      if (dl.expired())
        return error(Code::timeout, "HostStream: waited " + std::to_string(wait_timeout_ms) + " ms for the value at " +
                                        hex(op.va) + " to reach " + std::to_string(op.value) + " (it is " +
                                        std::to_string(word.load()) + ")");
      if (spins > 200) {
        std::this_thread::sleep_for(nap);
        if (nap < std::chrono::microseconds(50)) nap *= 2;
      }
    }
    return Status();
  }

  Status push(Op op) {
    std::lock_guard<std::mutex> lk(mu);
    if (stop) return error(Code::invalid_argument, "HostStream: enqueue after destruction began");
    if (capturing) {
      recording.push_back(std::move(op));
      return Status();
    }
    ops.push_back(std::move(op));
    ++queued;
    cv.notify_all();
    return Status();
  }
};

HostStream::HostStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<HostStream>> HostStream::create(Device& device, int64_t wait_timeout_ms) {
  if (wait_timeout_ms < 1) return error(Code::invalid_argument, "HostStream: wait_timeout_ms must be >= 1");
  auto impl = std::make_unique<Impl>();
  impl->device = &device;
  impl->wait_timeout_ms = wait_timeout_ms;
  Impl* raw = impl.get();
  impl->thread = util::named_thread("conccl-stream", [raw] { raw->run(); });
  return std::unique_ptr<HostStream>(new HostStream(std::move(impl)));
}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

Status HostStream::write_value32(uint64_t va, uint32_t value) {
  if (va % 4) return error(Code::invalid_argument, "HostStream::write_value32: " + hex(va) + " is not 4-aligned");
  return impl_->push(Impl::Op{Impl::Op::write32, va, value, {}});
}

Status HostStream::write_value64(uint64_t va, uint64_t value) {
  return impl_->push(Impl::Op{Impl::Op::write, va, value, {}});
}

Status HostStream::wait_value64(uint64_t va, uint64_t value) {
  return impl_->push(Impl::Op{Impl::Op::wait, va, value, {}});
}

Status HostStream::enqueue(std::function<void()> work) {
  if (!work) return error(Code::invalid_argument, "HostStream::enqueue: no work given");
  return impl_->push(Impl::Op{Impl::Op::work, 0, 0, [w = std::move(work)] {
                                w();
                                return Status();
                              }});
}

Status HostStream::reduce(const DeviceReduceStep& step) {
  Device* device = impl_->device;
  return impl_->push(Impl::Op{Impl::Op::work, 0, 0, [device, step] {
                                return reduce_through_host_mapping(*device, step).prefix("HostStream: reduce");
                              }});
}

struct HostStream::Recording::Impl {
  std::vector<HostStream::Impl::Op> ops;
  std::vector<std::shared_ptr<void>> retained;
};

HostStream::Recording::~Recording() = default;

size_t HostStream::Recording::steps() const { return impl_->ops.size(); }

Status HostStream::Recording::launch(HostStream& stream) const {
  std::lock_guard<std::mutex> lk(stream.impl_->mu);
  if (stream.impl_->stop) return error(Code::invalid_argument, "Recording::launch: the stream is being destroyed");
  if (stream.impl_->capturing)
    return error(Code::invalid_argument, "Recording::launch: the stream is capturing (end_capture() first)");
  for (const HostStream::Impl::Op& op : impl_->ops) {
    stream.impl_->ops.push_back(op);
    ++stream.impl_->queued;
  }
  // The replay keeps what the recording retains alive until its steps have
  // run, even if the recording is destroyed first.
  stream.impl_->ops.push_back(HostStream::Impl::Op{HostStream::Impl::Op::work, 0, 0,
                                                   [keep = impl_->retained] { return Status(); }});
  ++stream.impl_->queued;
  stream.impl_->cv.notify_all();
  return Status();
}

Status HostStream::begin_capture() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (impl_->capturing) return error(Code::invalid_argument, "HostStream::begin_capture: already capturing");
  impl_->capturing = true;
  impl_->recording.clear();
  impl_->retained.clear();
  return Status();
}

Result<std::unique_ptr<HostStream::Recording>> HostStream::end_capture() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (!impl_->capturing) return error(Code::invalid_argument, "HostStream::end_capture: not capturing");
  impl_->capturing = false;
  auto rec = std::unique_ptr<Recording>(new Recording());
  rec->impl_ = std::make_unique<Recording::Impl>();
  rec->impl_->ops = std::move(impl_->recording);
  rec->impl_->retained = std::move(impl_->retained);
  impl_->recording.clear();
  impl_->retained.clear();
  return rec;
}

bool HostStream::capturing() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->capturing;
}

Status HostStream::replay_tick(const ReplayTick& tick) {
  Device* device = impl_->device;
  auto word = [device](uint64_t va) { return static_cast<uint64_t*>(device->compute_pointer(va, 8)); };
  uint64_t *counter = word(tick.counter), *reset = word(tick.reset), *stop = word(tick.stop);
  if (!counter || !reset || !stop)
    return error(Code::invalid_argument, "HostStream::replay_tick: a word without a host mapping (counter " +
                                             hex(tick.counter) + ", reset " + hex(tick.reset) + ", stop " +
                                             hex(tick.stop) + ")");
  return impl_->push(Impl::Op{Impl::Op::work, 0, 0, [counter, reset, stop] {
                                if (std::atomic_ref<uint64_t>(*stop).load(std::memory_order_acquire) != 0) {
                                  std::atomic_ref<uint64_t>(*reset).store(1, std::memory_order_release);
                                  return Status();
                                }
                                std::atomic_ref<uint64_t>(*reset).store(0, std::memory_order_release);
                                std::atomic_ref<uint64_t> c(*counter);
                                c.store(c.load(std::memory_order_acquire) + 1, std::memory_order_release);
                                return Status();
                              }});
}

Status HostStream::retain_for_replays(std::shared_ptr<void> what) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (!impl_->capturing)
    return error(Code::invalid_argument, "HostStream::retain_for_replays: the stream is not capturing");
  impl_->retained.push_back(std::move(what));
  return Status();
}

Status HostStream::synchronize(Deadline deadline) {
  std::unique_lock<std::mutex> lk(impl_->mu);
  const uint64_t target = impl_->queued;
  while (impl_->ran < target) {
    if (deadline.expired())
      return error(Code::timeout, "HostStream::synchronize: " + std::to_string(target - impl_->ran) +
                                      " queued operations have not run by the deadline");
    impl_->cv.wait_for(lk, std::chrono::milliseconds(1));
  }
  Status st = impl_->first_error;
  impl_->first_error = Status();
  return st;
}

}  // namespace conccl
