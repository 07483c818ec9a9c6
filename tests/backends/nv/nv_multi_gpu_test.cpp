// tests/backends/nv/nv_multi_gpu_test.cpp - memory that crosses RM clients and GPUs
// (src/backends/nv/nv_peer.cpp) and a conccl::Device of several GPUs
// (nv::Options::gpus).
//
// One GPU is enough for everything but the peer PTE itself: the GPU opened
// twice is two RM clients, two VA spaces and two sets of channels, and
// memory of one reaches the other through an export fd exactly as another
// GPU's would (the import then takes the local path instead of NV50_P2P).
// Without /dev/nvidiactl the tests skip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include "backends/nv/nv_device.hpp"
#include "conccl/collectives.hpp"
#include "conccl/device.hpp"
#include "conccl/nv.hpp"
#include "conccl/staging.hpp"

namespace conccl {
namespace {

bool have_driver() { return access("/dev/nvidiactl", F_OK) == 0; }

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  return v;
}

// One copy on `ch`, waited for.
Status copy_and_wait(nv::Channel& ch, uint64_t dst, uint64_t src, uint64_t bytes) {
  CommandBuffer cb = ch.commands();
  const Deadline dl = Deadline::after_ms(10000);
  uint64_t f = 0;
  CONCCL_RETURN_IF_ERROR(cb.copy(dst, src, bytes));
  CONCCL_RETURN_IF_ERROR(ch.submit(cb, dl, &f));
  cb.clear();
  return ch.wait_done(dl, f);
}

TEST(NvMultiGpu, ExportImportBetweenTwoClients) {
  if (!have_driver()) GTEST_SKIP() << "no /dev/nvidiactl";
  Result<std::unique_ptr<nv::Gpu>> a = nv::Gpu::open();
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  Result<std::unique_ptr<nv::Gpu>> b = nv::Gpu::open();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  nv::Gpu& A = **a;
  nv::Gpu& B = **b;

  const size_t n = 4u << 20;
  Result<nv::Allocation> dev_a = A.alloc(n, nv::Placement::device);
  Result<nv::Allocation> host_a = A.alloc(n, nv::Placement::host);
  Result<nv::Allocation> host_b = B.alloc(n, nv::Placement::host);
  ASSERT_TRUE(dev_a.ok() && host_a.ok() && host_b.ok());
  const std::vector<uint8_t> data = random_bytes(n, 17);
  std::memcpy(host_a->host, data.data(), n);
  ASSERT_TRUE(copy_and_wait(A.channel(0), dev_a->va, host_a->va, n).ok());

  // A's device memory in B's client, at A's address.
  Result<int> fd = A.export_fd(*dev_a);
  ASSERT_TRUE(fd.ok()) << fd.status().to_string();
  Result<nv::Allocation> view = B.import_fd(*fd, dev_a->va, dev_a->size);
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  ::close(*fd);
  EXPECT_TRUE(view->imported);
  std::memset(host_b->host, 0, n);
  ASSERT_TRUE(copy_and_wait(B.channel(0), host_b->va, view->va, n).ok()) << B.channel(0).diagnose();
  EXPECT_EQ(std::memcmp(host_b->host, data.data(), n), 0) << "B reads A's memory";

  // B writes into A's memory; A reads it back.
  const std::vector<uint8_t> data2 = random_bytes(n, 18);
  std::memcpy(host_b->host, data2.data(), n);
  ASSERT_TRUE(copy_and_wait(B.channel(0), view->va, host_b->va, n).ok());
  std::memset(host_a->host, 0, n);
  ASSERT_TRUE(copy_and_wait(A.channel(0), host_a->va, dev_a->va, n).ok());
  EXPECT_EQ(std::memcmp(host_a->host, data2.data(), n), 0) << "A sees B's writes";

  // A's host pages in B's GPU VA space, at their own address.
  Result<nv::Allocation> hview = B.map_host(host_a->host, host_a->size);
  ASSERT_TRUE(hview.ok()) << hview.status().to_string();
  std::memset(host_a->host, 0, n);
  ASSERT_TRUE(copy_and_wait(B.channel(0), hview->va, view->va, n).ok());
  EXPECT_EQ(std::memcmp(host_a->host, data2.data(), n), 0) << "B writes A's host pages";

  // The import holds its own reference: freeing the exporter's handle first
  // leaves B's view working.
  nv::Allocation v = *view, hv = *hview;
  EXPECT_TRUE(B.free(hv).ok());
  EXPECT_TRUE(B.free(v).ok());

  // Errors name the problem.
  EXPECT_EQ(A.export_fd(*host_a).status().code(), Code::invalid_argument) << "host memory is shared by address";
  EXPECT_EQ(B.export_fd(*dev_a).status().code(), Code::not_found) << "not B's buffer";
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  Result<nv::Allocation> bad = B.import_fd(p[0], 0x7f0000000000ull, 2u << 20);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not an RM export fd"), std::string::npos) << bad.status().to_string();
  ::close(p[0]);
  ::close(p[1]);
  EXPECT_EQ(B.map_host(static_cast<uint8_t*>(host_a->host) + 8, 4096).status().code(), Code::invalid_argument);
  EXPECT_EQ(B.map_host(host_b->host, host_b->size).status().code(), Code::invalid_argument)
      << "B's own host buffer is mapped already";
}

TEST(NvMultiGpu, OneGpuOpenedTwiceRunsACommunicatorAcrossBoth) {
  if (!have_driver()) GTEST_SKIP() << "no /dev/nvidiactl";
  nv::Options o;
  o.gpus = {0, 0};
  Result<std::unique_ptr<Device>> d = nv::open_generic(o);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  Device& dev = **d;
  const Topology& t = dev.topology();
  ASSERT_EQ(t.gpus.size(), 2u);
  ASSERT_NE(t.gpus[0].link_to(1), nullptr);
  EXPECT_EQ(t.gpus[0].link_to(1)->type, "same-gpu");
  EXPECT_NE(nv::native(dev, 1), nullptr);
  EXPECT_EQ(nv::native(dev, 2), nullptr);
  EXPECT_EQ(dev.alloc(2, 4096, MemKind::device).status().code(), Code::not_found);

  // A collective across the two logical GPUs (not loopback: each rank its
  // own GPU, copies cross RM clients through the peer views).
  const int n = 2;
  for (CollOp op : {CollOp::all_gather, CollOp::all_to_all}) {
    SCOPED_TRACE(op == CollOp::all_gather ? "all-gather" : "all-to-all");
    const uint64_t chunk = (1u << 20) + 4096;
    Result<std::unique_ptr<Communicator>> comm = Communicator::create(dev, {0, 1});
    ASSERT_TRUE(comm.ok()) << comm.status().to_string();
    CollectiveArgs args;
    args.op = op;
    args.bytes = chunk;
    std::vector<std::vector<uint8_t>> src(n);
    for (int r = 0; r < n; ++r) {
      const size_t send_bytes = op == CollOp::all_gather ? chunk : chunk * n;
      Result<Buffer> s = dev.alloc(r, send_bytes, MemKind::device);
      Result<Buffer> rv = dev.alloc(r, chunk * n, MemKind::device);
      ASSERT_TRUE(s.ok() && rv.ok());
      EXPECT_TRUE(dev.is_mapped(rv->va, rv->size));
      src[r] = random_bytes(send_bytes, 100 + r);
      Result<std::unique_ptr<Stager>> st = Stager::create(dev, r);
      ASSERT_TRUE(st.ok()) << st.status().to_string();
      ASSERT_TRUE((*st)->upload(*s, 0, src[r].data(), send_bytes, Deadline::after_ms(10000)).ok());
      ASSERT_TRUE((*st)->fill(*rv, 0xDEADBEEFu, Deadline::after_ms(10000)).ok());
      args.send.push_back(*s);
      args.recv.push_back(*rv);
    }
    Result<std::unique_ptr<Plan>> plan = (*comm)->plan(args);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    ASSERT_TRUE((*plan)->launch(Deadline::after_ms(10000)).ok());
    ASSERT_TRUE((*plan)->wait(Deadline::after_ms(10000)).ok());
    for (int r = 0; r < n; ++r) {
      std::vector<uint8_t> got(chunk * n);
      Result<std::unique_ptr<Stager>> st = Stager::create(dev, r);
      ASSERT_TRUE(st.ok());
      ASSERT_TRUE((*st)->download(got.data(), args.recv[r], 0, got.size(), Deadline::after_ms(10000)).ok());
      for (int s = 0; s < n; ++s) {
        // all-gather: recv[r][s] = send[s]; all-to-all: recv[r][s] = send[s][r].
        const uint8_t* want = src[s].data() + (op == CollOp::all_gather ? 0 : chunk * r);
        EXPECT_EQ(std::memcmp(got.data() + chunk * s, want, chunk), 0) << "rank " << r << " block " << s;
      }
    }
    plan->reset();
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(dev.free(args.send[r]).ok());
      EXPECT_TRUE(dev.free(args.recv[r]).ok());
    }
  }
}

TEST(NvMultiGpu, GpuCountAndRangeErrors) {
  if (!have_driver()) GTEST_SKIP() << "no /dev/nvidiactl";
  Result<int> n = nv::gpu_count();
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_GE(*n, 1);
  nv::Options o;
  o.gpus = {*n};  // one past the last
  Result<std::unique_ptr<Device>> d = nv::open_generic(o);
  EXPECT_EQ(d.status().code(), Code::not_found) << d.status().to_string();
}

}  // namespace
}  // namespace conccl
