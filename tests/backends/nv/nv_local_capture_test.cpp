// tests/backends/nv/nv_local_capture_test.cpp - a collective with every rank in one
// process, captured into a CUDA graph and replayed (docs/graphs.md), on the
// H200: the one-process form of issue #29's capture, which the emulator's
// tests cover with a HostStream.
//
// N loopback ranks on GPU 0, CUDA memory from Device::alloc(MemKind::cuda).
// The stream is captured around one all-gather; each replay is preceded by an
// upload of new random inputs and followed by a download of every rank's
// output, all on the same stream, so every replay's bytes are checked and
// each differs from the last. Skipped without an NVIDIA driver and libcuda.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "conccl/collectives.hpp"
#include "conccl/device.hpp"
#include "conccl/nv.hpp"
#include "backends/nv/cuda_driver.hpp"

namespace conccl {
namespace {

using test::CudaDriver;
using test::have_nv_gpu;

constexpr int kCaptureModeThreadLocal = 1;  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL

void one_process_replays(int n, int replays) {
  SCOPED_TRACE(std::to_string(n) + " loopback ranks");
  CudaDriver cu;
  ASSERT_TRUE(cu.load());
  int cdev = 0;
  void* ctx = nullptr;
  ASSERT_EQ(cu.cuInit(0), 0);
  ASSERT_EQ(cu.cuDeviceGet(&cdev, 0), 0);
  ASSERT_EQ(cu.cuDevicePrimaryCtxRetain(&ctx, cdev), 0);
  ASSERT_EQ(cu.cuCtxSetCurrent(ctx), 0);
  DeviceOptions o;
  o.backend = "nv";
  Result<std::unique_ptr<Device>> d = open_device(o);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  Device& dev = **d;
  Communicator::Options co;
  co.loopback = true;
  co.call_timeout_ms = 20000;
  Result<std::unique_ptr<Communicator>> c = Communicator::create(dev, std::vector<int>(size_t(n), 0), co);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  Communicator& comm = **c;

  const uint64_t chunk = (64u << 10) + 12;  // not a multiple of anything nice
  const size_t total = chunk * size_t(n);
  std::vector<Buffer> send, recv;
  CollectiveArgs a;
  a.op = CollOp::all_gather;
  a.bytes = chunk;
  for (int r = 0; r < n; ++r) {
    Result<Buffer> s = dev.alloc(0, chunk, MemKind::cuda), v = dev.alloc(0, total, MemKind::cuda);
    ASSERT_TRUE(s.ok() && v.ok()) << s.status().to_string() << v.status().to_string();
    send.push_back(*s);
    recv.push_back(*v);
    a.send.push_back(*s);
    a.recv.push_back(*v);
  }
  void* stream = nullptr;
  ASSERT_EQ(cu.cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */), 0);
  Result<std::unique_ptr<StreamOps>> ops = nv::stream_ops(dev, stream);
  ASSERT_TRUE(ops.ok()) << ops.status().to_string();

  // Pinned host memory: every replay's inputs and outputs.
  uint8_t *up = nullptr, *down = nullptr;
  const size_t per_replay = total;  // n inputs of `chunk` up, n outputs of `total` down per rank: see below
  ASSERT_EQ(cu.cuMemHostAlloc(reinterpret_cast<void**>(&up), per_replay * size_t(replays), 0), 0);
  ASSERT_EQ(cu.cuMemHostAlloc(reinterpret_cast<void**>(&down), per_replay * size_t(n) * size_t(replays), 0), 0);
  std::mt19937_64 rng(4242 + n);
  for (size_t i = 0; i < per_replay * size_t(replays); ++i) up[i] = uint8_t(rng() | 1);
  std::memset(down, 0, per_replay * size_t(n) * size_t(replays));

  // The call, uncaptured once (its plan is compiled on the stream as usual),
  // then captured.
  const Status first = comm.call(a, ops->get());
  ASSERT_TRUE(first.ok()) << first.to_string() << " (CUDA's pinned inputs at " << static_cast<void*>(up) << " +"
                          << per_replay * size_t(replays) << ", outputs at " << static_cast<void*>(down) << " +"
                          << per_replay * size_t(n) * size_t(replays) << "; send[0] at 0x" << std::hex << send[0].va
                          << ")";
  ASSERT_EQ(cu.cuStreamSynchronize(stream), 0);
  ASSERT_EQ(cu.cuStreamBeginCapture(stream, kCaptureModeThreadLocal), 0);
  const Status captured = comm.call(a, ops->get());
  void* graph = nullptr;
  ASSERT_EQ(cu.cuStreamEndCapture(stream, &graph), 0);
  ASSERT_TRUE(captured.ok()) << captured.to_string();
  void* exec = nullptr;
  ASSERT_EQ(cu.cuGraphInstantiateWithFlags(&exec, graph, 0), 0);

  for (int k = 0; k < replays; ++k) {
    const uint8_t* in = up + per_replay * size_t(k);
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(cu.cuMemcpyHtoDAsync(dev.compute_address(send[size_t(r)].va), in + chunk * size_t(r), chunk, stream), 0);
    ASSERT_EQ(cu.cuGraphLaunch(exec, stream), 0);
    uint8_t* out = down + per_replay * size_t(n) * size_t(k);
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(cu.cuMemcpyDtoHAsync(out + total * size_t(r), dev.compute_address(recv[size_t(r)].va), total, stream), 0);
  }
  ASSERT_EQ(cu.cuStreamSynchronize(stream), 0);
  EXPECT_TRUE(comm.async_error().ok()) << comm.async_error().to_string();
  for (int k = 0; k < replays; ++k) {
    const uint8_t* in = up + per_replay * size_t(k);
    for (int r = 0; r < n; ++r) {
      const uint8_t* got = down + per_replay * size_t(n) * size_t(k) + total * size_t(r);
      ASSERT_EQ(std::memcmp(got, in, total), 0) << "replay " << k << ", rank " << r << "'s output";
    }
  }
  EXPECT_EQ(cu.cuGraphExecDestroy(exec), 0);
  EXPECT_EQ(cu.cuGraphDestroy(graph), 0);  // the capture goes with the graph
  ASSERT_EQ(cu.cuStreamSynchronize(stream), 0);
  ops->reset();
  (void)cu.cuStreamDestroy(stream);
  (void)cu.cuMemFreeHost(up);
  (void)cu.cuMemFreeHost(down);
  c->reset();
  for (Buffer& b : send) EXPECT_TRUE(dev.free(b).ok());
  for (Buffer& b : recv) EXPECT_TRUE(dev.free(b).ok());
}

TEST(NvLocalCapture, EveryReplayOfACapturedAllGatherIsRight) {
  if (!have_nv_gpu()) GTEST_SKIP() << "no NVIDIA driver or libcuda";
  // Two devices one after the other in one process: the second's windows
  // land where the first's were, so memory the first left registered with
  // CUDA would refuse the second's (run 42 on the H200, fixed by unregistering
  // host memory when a device goes).
  for (int n : {2, 4}) {
    one_process_replays(n, 200);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace conccl
