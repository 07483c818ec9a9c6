// examples/collective_cpp/collectives.cpp - ConCCL from C++: the queue layer
// (a copy and a completion signal on one engine), then a communicator over
// every GPU of the device with an all-gather (the one-call form and a plan
// whose per-rank completion signal a stream could wait on) and a float
// reduce-scatter. Every byte is checked against the host's own answer, and
// one refused call shows what an error says.
//
//   collectives [backend] [settings]   (default: emu, its mi300x preset - no GPU needed)
//   collectives emu "preset=small"     (the backend's settings, docs/backends.md)
//
// Errors come back as conccl::Status / conccl::Result values, never as
// exceptions or aborts: each step below checks ok() and prints the message.
#include <conccl/collectives.hpp>
#include <conccl/commands.hpp>
#include <conccl/device.hpp>
#include <conccl/queue.hpp>
#include <conccl/reduce.hpp>
#include <conccl/signal.hpp>
#include <conccl/staging.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using conccl::Deadline;
using conccl::Status;

// Prints a failed step and returns false, so main can stop there.
bool ok(const Status& s, const char* step) {
  if (!s.ok()) std::fprintf(stderr, "%s: %s\n", step, s.to_string().c_str());
  return s.ok();
}
template <typename T>
bool ok(const conccl::Result<T>& r, const char* step) {
  return ok(r.status(), step);
}

// Random bytes (xorshift64), never zeros: a step that writes nothing shows.
std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

// 1. The queue layer: copy GPU 0 -> GPU 1 and add 1 to a signal, on one
// engine of GPU 0; the host waits for the signal, then checks every byte.
bool queue_layer(conccl::Device& dev, conccl::Stager& stage0, conccl::Stager& stage1) {
  const int peer = dev.gpu_count() > 1 ? 1 : 0;
  const size_t n = 4u << 20;
  auto src = conccl::UniqueBuffer::alloc(dev, 0, n, conccl::MemKind::device);
  auto dst = conccl::UniqueBuffer::alloc(dev, peer, n, conccl::MemKind::device);
  if (!ok(src, "alloc src") || !ok(dst, "alloc dst")) return false;
  const std::vector<uint8_t> data = random_bytes(n, 1);
  if (!ok(stage0.upload(*src, 0, data.data(), n, Deadline::after_ms(10000)), "upload")) return false;

  auto engine = dev.engine_toward(0, peer);
  if (!ok(engine, "engine_toward")) return false;
  auto queue = dev.create_queue(0, *engine);
  auto done = conccl::Signal::create(dev, 0);
  if (!ok(queue, "create_queue") || !ok(done, "Signal::create")) return false;
  conccl::CommandBuffer cb((*queue)->isa());
  if (!ok(cb.copy(dst->get().va, src->get().va, n), "record copy") ||
      !ok(done->signal_add(cb, 1), "record signal add") ||
      !ok((*queue)->submit(cb, Deadline::after_ms(1000)), "submit") ||
      !ok(done->wait(1, Deadline::after_ms(10000)), "wait for the signal"))
    return false;

  std::vector<uint8_t> back(n);
  conccl::Stager& stage = peer == 0 ? stage0 : stage1;
  if (!ok(stage.download(back.data(), *dst, 0, n, Deadline::after_ms(10000)), "download")) return false;
  const bool same = back == data;
  std::printf("queue:          %zu bytes GPU 0 -> GPU %d on engine %d, signal %llu, %s\n", n, peer, *engine,
              static_cast<unsigned long long>(done->value()), same ? "every byte right" : "WRONG BYTES");
  return same;
}

// 2. An all-gather over every GPU: each rank's chunk lands in every rank's
// output at offset rank * chunk.
bool all_gather(conccl::Device& dev, conccl::Communicator& comm, std::vector<std::unique_ptr<conccl::Stager>>& st) {
  const int n = comm.size();
  const size_t chunk = 1u << 20;
  std::vector<conccl::UniqueBuffer> send, recv;
  conccl::CollectiveArgs a;
  a.op = conccl::CollOp::all_gather;
  a.bytes = chunk;
  const std::vector<uint8_t> data = random_bytes(chunk * n, 2);
  for (int r = 0; r < n; ++r) {
    auto s = conccl::UniqueBuffer::alloc(dev, r, chunk, conccl::MemKind::device);
    auto d = conccl::UniqueBuffer::alloc(dev, r, chunk * n, conccl::MemKind::device);
    if (!ok(s, "alloc send") || !ok(d, "alloc recv")) return false;
    if (!ok(st[r]->upload(*s, 0, data.data() + chunk * r, chunk, Deadline::after_ms(10000)), "upload")) return false;
    a.send.push_back(*s);
    a.recv.push_back(*d);
    send.push_back(std::move(*s));
    recv.push_back(std::move(*d));
  }
  auto check = [&](const char* how) {
    std::vector<uint8_t> back(chunk * n);
    size_t wrong = 0;
    for (int r = 0; r < n; ++r) {
      if (!ok(st[r]->download(back.data(), recv[r], 0, back.size(), Deadline::after_ms(10000)), "download"))
        return false;
      for (size_t i = 0; i < back.size(); ++i) wrong += back[i] != data[i];
    }
    std::printf("all-gather:     %d ranks x %zu bytes, %s: %zu wrong bytes\n", n, chunk, how, wrong);
    return wrong == 0;
  };

  // The one-call form (NCCL's shape): returns once every rank's data is in place.
  if (!ok(comm.call(a), "all-gather call") || !check("one call")) return false;

  // The same as a plan: compiled once, launched, and waited for the way a
  // stream would, through rank 0's completion signal (address, value).
  // The outputs are overwritten first, so that only the plan can make them right.
  for (int r = 0; r < n; ++r)
    if (!ok(st[r]->fill(recv[r], 0xA5A5A5A5u, Deadline::after_ms(10000)), "fill")) return false;
  auto plan = comm.plan(a);
  if (!ok(plan, "plan")) return false;
  if (!ok((*plan)->launch(Deadline::after_ms(10000)), "launch") ||
      !ok((*plan)->wait(Deadline::after_ms(10000)), "plan wait"))
    return false;
  return check("plan, launched and waited");
}

// 3. A reduce-scatter of floats: rank r gets the sum over q of send[q]'s
// r-th slice, added in rank order 0..n-1 (as the library does: exact).
bool reduce_scatter(conccl::Device& dev, conccl::Communicator& comm,
                    std::vector<std::unique_ptr<conccl::Stager>>& st) {
  const int n = comm.size();
  const size_t count = 4096;  // elements each rank receives
  conccl::ReductionArgs a;
  a.coll = conccl::ReduceColl::reduce_scatter;
  a.dtype = conccl::DataType::f32;
  a.op = conccl::ReduceOp::sum;
  a.count = count;
  std::vector<std::vector<float>> in(n, std::vector<float>(count * n));
  std::vector<conccl::UniqueBuffer> keep;
  for (int r = 0; r < n; ++r) {
    const std::vector<uint8_t> bits = random_bytes(count * n, 10 + r);
    for (size_t i = 0; i < count * n; ++i) in[r][i] = static_cast<float>(bits[i]) / 7.0f - 17.0f;
    auto s = conccl::UniqueBuffer::alloc(dev, r, count * n * sizeof(float), conccl::MemKind::device);
    auto d = conccl::UniqueBuffer::alloc(dev, r, count * sizeof(float), conccl::MemKind::device);
    if (!ok(s, "alloc send") || !ok(d, "alloc recv")) return false;
    if (!ok(st[r]->upload(*s, 0, in[r].data(), count * n * sizeof(float), Deadline::after_ms(10000)), "upload"))
      return false;
    a.send.push_back(*s);
    a.recv.push_back(*d);
    keep.push_back(std::move(*s));
    keep.push_back(std::move(*d));
  }
  if (!ok(comm.call_reduction(a), "reduce-scatter")) return false;
  size_t wrong = 0;
  std::vector<float> got(count);
  for (int r = 0; r < n; ++r) {
    if (!ok(st[r]->download(got.data(), a.recv[r], 0, count * sizeof(float), Deadline::after_ms(10000)), "download"))
      return false;
    for (size_t i = 0; i < count; ++i) {
      float want = in[0][r * count + i];
      for (int q = 1; q < n; ++q) want += in[q][r * count + i];
      wrong += std::memcmp(&want, &got[i], sizeof(float)) != 0;
    }
  }
  std::printf("reduce-scatter: %d ranks x %zu floats, sum in rank order: %zu wrong elements\n", n, count, wrong);
  return wrong == 0;
}

}  // namespace

int main(int argc, char** argv) {
  conccl::DeviceOptions o;
  o.backend = argc > 1 ? argv[1] : "emu";
  o.settings = argc > 2 ? argv[2] : "";
  auto dev = conccl::open_device(o);
  if (!ok(dev, "open_device")) return 1;
  const int n = (*dev)->gpu_count();
  std::printf("%s: %d GPUs\n", o.backend.c_str(), n);

  // A Stager per GPU moves bytes between the host and its memory (device
  // memory the CPU cannot see goes through an engine and a host buffer).
  std::vector<std::unique_ptr<conccl::Stager>> st;
  for (int g = 0; g < n; ++g) {
    auto s = conccl::Stager::create(**dev, g, 8u << 20);
    if (!ok(s, "Stager::create")) return 1;
    st.push_back(std::move(*s));
  }
  if (!queue_layer(**dev, *st[0], *st[n > 1 ? 1 : 0])) return 1;

  std::vector<int> gpus;
  for (int g = 0; g < n; ++g) gpus.push_back(g);
  auto comm = conccl::Communicator::create(**dev, gpus);
  if (!ok(comm, "Communicator::create")) return 1;
  if (!all_gather(**dev, **comm, st) || !reduce_scatter(**dev, **comm, st)) return 1;

  // An error names the problem and the fix: an all-gather with no buffers.
  conccl::CollectiveArgs bad;
  bad.bytes = 64;
  const Status s = (*comm)->call(bad);
  std::printf("refused:        %s\n", s.to_string().c_str());
  return s.ok() ? 1 : 0;
}
