// tests/backends/nv/nv_reduction_hw_test.cpp - Communicator::call_reduction on the
// nv backend: moves on the Hopper copy engines, the reduce step in the PTX
// kernel (reduce_kernel.hpp), with every rank in one process on GPU 0
// (loopback ranks) and buffers of CUDA memory (Device::alloc_for_compute).
// Every element of every rank's result is compared bit for bit with the
// host reduction of the same inputs in rank order, host-ordered (the kernel
// on the GPU's default stream, waited for) and stream-ordered (the default
// stream's memory operations and kernel, then a host sync). Skipped without
// /dev/nvidiactl or libcuda. Engine-only memory as recv is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "collectives/reduction_test_data.hpp"
#include "conccl/collectives.hpp"
#include "conccl/nv.hpp"
#include "conccl/staging.hpp"

namespace conccl {
namespace {

using namespace redtest;  // kOps, kTypes, random_elements, reference, ... (reduction_test_data.hpp)

struct NvNode {
  std::unique_ptr<Device> dev;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Stager> stager;
  std::unique_ptr<StreamOps> stream;  // the legacy default stream
  std::string skip;
};

NvNode open_node(int n, uint64_t staging) {
  NvNode node;
  if (access("/dev/nvidiactl", F_OK) != 0 || !nv::cuda_available().ok()) {
    node.skip = "no NVIDIA driver or libcuda here";
    return node;
  }
  DeviceOptions o;
  o.backend = "nv";
  Result<std::unique_ptr<Device>> d = open_device(o);
  if (!d.ok()) {
    node.skip = "open_device(nv): " + d.status().to_string();
    return node;
  }
  node.dev = std::move(d).value();
  Communicator::Options co;
  co.loopback = true;
  co.reduce_staging_bytes = staging;
  node.comm = std::move(Communicator::create(*node.dev, std::vector<int>(static_cast<size_t>(n), 0), co).value());
  node.stager = std::move(Stager::create(*node.dev, 0).value());
  node.stream = std::move(nv::stream_ops(*node.dev, nullptr).value());
  return node;
}

std::string run_one(NvNode& node, ReduceColl coll, DataType t, ReduceOp op, uint64_t count, int root, bool on_stream,
                    uint64_t seed) {
  Communicator& c = *node.comm;
  const int n = c.size();
  const uint64_t es = dtype_size(t);
  const uint64_t send_elems = coll == ReduceColl::reduce_scatter ? count * n : count;
  const Deadline dl = Deadline::after_ms(60000);
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<Buffer> owned;
  ReductionArgs a = redtest::reduction_args(coll, t, op, count, root);
  const std::vector<uint8_t> stale(count * es, 0xA5);
  std::string bad;
  for (int r = 0; r < n && bad.empty(); ++r) {
    inputs.push_back(random_elements(t, send_elems, seed * 131 + r));
    Result<Buffer> s = node.dev->alloc_for_compute(0, send_elems * es);
    Result<Buffer> v = node.dev->alloc_for_compute(0, count * es);
    if (!s.ok() || !v.ok()) return "alloc_for_compute failed";
    owned.push_back(*s);
    owned.push_back(*v);
    Status up = node.stager->upload(*s, 0, inputs.back().data(), send_elems * es, dl);
    if (up.ok()) up = node.stager->upload(*v, 0, stale.data(), count * es, dl);
    if (!up.ok()) bad = "upload: " + up.to_string();
    a.send.push_back(*s);
    a.recv.push_back(*v);
  }
  const std::string what = std::string(reduce_coll_name(coll)) + " " + dtype_name(t) + " " + reduce_op_name(op) +
                           " count " + std::to_string(count) + (on_stream ? " stream" : " host");
  Status st = bad.empty() ? c.call_reduction(a, on_stream ? node.stream.get() : nullptr) : Status();
  if (st.ok() && bad.empty() && on_stream) st = nv::synchronize_stream(nullptr, dl);
  if (!st.ok()) bad = what + ": " + st.to_string();
  std::vector<uint8_t> got(count * es);
  for (int r = 0; r < n && bad.empty(); ++r) {
    Status down = node.stager->download(got.data(), a.recv[size_t(r)], 0, count * es, dl);
    if (!down.ok()) {
      bad = "download: " + down.to_string();
      break;
    }
    if (coll == ReduceColl::reduce && r != root) {
      if (got != stale) bad = what + ": a non-root rank's recv was written";
      continue;
    }
    const std::vector<uint8_t> want =
        reference(t, op, inputs, coll == ReduceColl::reduce_scatter ? r * count * es : 0, count);
    for (uint64_t i = 0; i < count * es && bad.empty(); ++i)
      if (got[i] != want[i]) bad = what + ": rank " + std::to_string(r) + " element " + std::to_string(i / es) + " WRONG";
  }
  for (const Buffer& b : owned) (void)node.dev->free_for_compute(b);
  return bad;
}

TEST(NvReductionHw, EveryTypeOpAndCollectiveBitExact) {
  NvNode node = open_node(4, 8 << 20);
  if (!node.skip.empty()) GTEST_SKIP() << node.skip;
  uint64_t seed = 3;
  for (ReduceColl coll : {ReduceColl::reduce_scatter, ReduceColl::all_reduce, ReduceColl::reduce})
    for (DataType t : kTypes)
      for (ReduceOp op : kOps) {
        ++seed;
        ASSERT_EQ(run_one(node, coll, t, op, 10007, static_cast<int>(seed % 4), seed % 2 == 0, seed), "");
      }
}

TEST(NvReductionHw, PiecesAndTheTwoStepAllReduce) {
  NvNode node = open_node(4, 64 << 10);  // 64 KiB of staging: many pieces
  if (!node.skip.empty()) GTEST_SKIP() << node.skip;
  ASSERT_EQ(run_one(node, ReduceColl::reduce_scatter, DataType::bf16, ReduceOp::sum, 100003, 0, true, 1), "");
  ASSERT_EQ(run_one(node, ReduceColl::all_reduce, DataType::f32, ReduceOp::avg, (1 << 20) + 3, 0, true, 2), "");
  ASSERT_EQ(run_one(node, ReduceColl::reduce, DataType::f16, ReduceOp::max, 300001, 2, false, 3), "");
}

TEST(NvReductionHw, EngineOnlyRecvIsRefused) {
  NvNode node = open_node(2, 1 << 20);
  if (!node.skip.empty()) GTEST_SKIP() << node.skip;
  Result<UniqueBuffer> plain = UniqueBuffer::alloc(*node.dev, 0, 4096, MemKind::device);
  Result<Buffer> cuda = node.dev->alloc_for_compute(0, 4096);
  ASSERT_TRUE(plain.ok() && cuda.ok());
  ReductionArgs a;
  a.count = 1024;
  a.send = {*cuda, *cuda};
  a.recv = {plain->get(), *cuda};
  Status st = node.comm->call_reduction(a);
  EXPECT_EQ(st.code(), Code::invalid_argument) << st.to_string();
  EXPECT_NE(st.message().find("CUDA memory"), std::string::npos) << st.to_string();
  (void)node.dev->free_for_compute(*cuda);
}

}  // namespace
}  // namespace conccl
