// tests/backends/kfd/kfd_share_test.cpp - memory shared between processes on the
// KFD backend (src/backends/kfd/kfd_share.{hpp,cpp}) over a fake seam whose
// dma-bufs are memfds: the address plan, the exact calls and their arguments
// for alloc/share/import/free, two real processes sharing bytes at one
// address, and the error paths. What it cannot prove: that KFD and amdgpu
// accept these calls on hardware (never run there yet; docs/multiprocess.md).
#include <gtest/gtest.h>
#include <poll.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "backends/kfd/kfd_share.hpp"
#include "fake_share_sys.hpp"

namespace {

using conccl::Buffer;
using conccl::Code;
using conccl::MemKind;
using conccl::SharedRegion;
using conccl::kfd::ShareConfig;
using conccl::kfd::SharedMemory;
using fakeshare::Call;
using fakeshare::FakeShareSys;
namespace k = conccl::kfd;

constexpr uint32_t kId0 = 0x1111, kId1 = 0x2222;
constexpr int kMinor0 = 128, kMinor1 = 136;
constexpr uint64_t kMiB = 1 << 20;

bool contains(const std::string& s, const std::string& n) { return s.find(n) != std::string::npos; }

ShareConfig config(int slot) {
  ShareConfig c;
  c.slot = slot;
  c.gpus = {{kId0, kMinor0}, {kId1, kMinor1}};
  c.kfd_path = "/dev/kfd-fake";
  return c;
}

std::unique_ptr<SharedMemory> open_slot(const std::shared_ptr<FakeShareSys>& sys, int slot) {
  conccl::Result<std::unique_ptr<SharedMemory>> m = SharedMemory::open(sys, config(slot));
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

// A page-aligned region of another process's slot, backed by a memfd.
std::pair<SharedRegion, int> foreign_region(int slot, uint64_t offset, uint64_t size, MemKind kind, int gpu,
                                            uint64_t serial) {
  SharedRegion r;
  r.va = k::slot_window(slot)->base + offset;
  r.size = size;
  r.kind = kind;
  r.gpu = gpu;
  r.serial = serial;
  const int fd = memfd_create("foreign", MFD_CLOEXEC);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  return {r, fd};
}

constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE;

// ---- (a) the address plan ----

TEST(KfdShareWindow, SlotsAreDisjointAndBelowTheGpuVmLimit) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  for (int s = 0; s < k::kMaxProcessSlots; ++s) {
    conccl::Result<k::Window> w = k::slot_window(s);
    ASSERT_TRUE(w.ok());
    EXPECT_GE(w->base, uint64_t(17) << 40) << "above AddressSanitizer's shadow";
    EXPECT_LE(w->end(), uint64_t(1) << 47) << "slot " << s;
    EXPECT_EQ(w->base % (uint64_t(1) << 30), 0u);
    EXPECT_EQ(k::slot_of(w->base), s);
    EXPECT_EQ(k::slot_of(w->end() - 1), s);
    for (int t = 0; t < s; ++t) {
      const k::Window o = *k::slot_window(t);
      EXPECT_TRUE(o.end() <= w->base || w->end() <= o.base) << "slots " << t << " and " << s << " overlap";
    }
  }
  EXPECT_EQ(k::slot_of(k::kSlotWindowBase - 1), -1);
  EXPECT_EQ(k::slot_of(k::slot_window(k::kMaxProcessSlots - 1)->end()), -1);
  for (int bad : {-1, 16, 1000}) {
    conccl::Result<k::Window> w = k::slot_window(bad);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), Code::invalid_argument);
    EXPECT_TRUE(contains(w.status().message(), "0..15")) << w.status().message();
  }
}

TEST(KfdShareWindow, OpenReservesTheWholeWindowOnce) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 3);
  ASSERT_TRUE(m);
  const k::Window w = *k::slot_window(3);
  std::vector<Call> c = sys->calls();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].op, "mmap");
  EXPECT_EQ(c[0].va, w.base);
  EXPECT_EQ(c[0].size, w.bytes);
  EXPECT_EQ(c[0].prot, PROT_NONE);
  EXPECT_EQ(c[0].flags, kReserveFlags);
  EXPECT_EQ(c[1].op, "open_kfd");

  // The same slot again in this process: refused, naming the slot.
  conccl::Result<std::unique_ptr<SharedMemory>> again = SharedMemory::open(sys, config(3));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::busy);
  EXPECT_TRUE(contains(again.status().message(), "process_slot 3")) << again.status().message();
  EXPECT_TRUE(contains(again.status().message(), "already in use")) << again.status().message();
  // Another slot is fine; and once closed, slot 3 can be opened again.
  EXPECT_TRUE(open_slot(sys, 4));
  m.reset();
  EXPECT_TRUE(open_slot(sys, 3));
}

TEST(KfdShareWindow, OpenFailuresSayWhy) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  sys->fail_next["open_kfd"] = ENOENT;
  conccl::Result<std::unique_ptr<SharedMemory>> m = SharedMemory::open(sys, config(0));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::unavailable);
  EXPECT_TRUE(contains(m.status().message(), "/dev/kfd-fake")) << m.status().message();
  EXPECT_TRUE(open_slot(sys, 0)) << "the window was given back";

  sys->unavailable = true;
  m = SharedMemory::open(sys, config(1));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::unavailable);
  EXPECT_TRUE(contains(m.status().message(), "libdrm")) << m.status().message();

  sys->unavailable = false;
  m = SharedMemory::open(sys, config(16));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::invalid_argument);
}

// ---- (b) the calls and their arguments ----

TEST(KfdShareCalls, AllocShareAndFreeOfHostMemory) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 2);
  ASSERT_TRUE(m);
  const k::Window w = *k::slot_window(2);
  sys->clear();
  conccl::Result<Buffer> b = m->alloc(-1, 5000, MemKind::host, {0, 1});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->va, w.base);
  EXPECT_EQ(b->host, reinterpret_cast<void*>(w.base)) << "CPU VA == GPU VA";
  EXPECT_EQ(b->size, 5000u);
  EXPECT_EQ(b->kind, MemKind::host);
  EXPECT_EQ(b->gpu, -1);

  std::vector<Call> c = sys->calls();
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].op, "bo_alloc_export");
  EXPECT_EQ(c[0].render_minor, kMinor0) << "host memory is made on GPU 0's render node";
  EXPECT_EQ(c[0].size, 8192u);
  EXPECT_EQ(c[0].domain, k::kGemDomainGtt);
  EXPECT_EQ(c[0].gem_flags, k::kGemCreateCpuAccessRequired | k::kGemCreateCoherent | k::kGemCreateUncached)
      << "host memory is fine-grained: compute kernels polling signals there see the stores";
  const int dmabuf = c[0].fd;
  const uint64_t bo = c[0].bo;
  EXPECT_EQ(c[1].op, "import_dmabuf");
  EXPECT_EQ(c[1].va, w.base);
  EXPECT_EQ(c[1].gpu_id, kId0);
  EXPECT_EQ(c[1].fd, dmabuf);
  const uint64_t handle = c[1].handle;
  EXPECT_EQ(c[2].op, "map");
  EXPECT_EQ(c[2].handle, handle);
  EXPECT_EQ(c[2].gpu_ids, (std::vector<uint32_t>{kId0, kId1}));
  EXPECT_EQ(c[3].op, "mmap");
  EXPECT_EQ(c[3].va, w.base);
  EXPECT_EQ(c[3].size, 8192u);
  EXPECT_EQ(c[3].prot, PROT_READ | PROT_WRITE);
  EXPECT_EQ(c[3].flags, MAP_SHARED | MAP_FIXED);
  EXPECT_EQ(c[3].fd, dmabuf);

  // CPU view and coverage.
  std::memset(b->host, 0x5A, 5000);
  EXPECT_EQ(m->host_pointer(b->va + 100, 10), static_cast<uint8_t*>(b->host) + 100);
  EXPECT_EQ(m->covers(b->va, 8192), std::optional<bool>(true));
  EXPECT_EQ(m->covers(b->va + 8000, 500), std::optional<bool>(false)) << "runs past the buffer";
  EXPECT_EQ(m->covers(w.base + 64 * kMiB, 8), std::optional<bool>(false)) << "our window, no buffer";
  EXPECT_EQ(m->covers(0x1000, 8), std::nullopt);

  sys->clear();
  int fd = -1;
  conccl::Result<SharedRegion> r = m->share(b->va + 16, 32, &fd);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->va, w.base);
  EXPECT_EQ(r->size, 8192u);
  EXPECT_EQ(r->kind, MemKind::host);
  EXPECT_EQ(r->gpu, -1);
  EXPECT_NE(r->serial, 0u);
  c = sys->calls();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].op, "dup");
  EXPECT_EQ(c[0].fd, dmabuf);
  EXPECT_GE(fd, 0);
  EXPECT_NE(fd, dmabuf);
  ::close(fd);

  sys->clear();
  ASSERT_TRUE(m->free(b->va).ok());
  c = sys->calls();
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0].op, "mmap") << "the CPU view goes back to a reservation";
  EXPECT_EQ(c[0].va, w.base);
  EXPECT_EQ(c[0].size, 8192u);
  EXPECT_EQ(c[0].prot, PROT_NONE);
  EXPECT_EQ(c[0].flags, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED);
  EXPECT_EQ(c[1].op, "unmap");
  EXPECT_EQ(c[1].handle, handle);
  EXPECT_EQ(c[1].gpu_ids, (std::vector<uint32_t>{kId0, kId1}));
  EXPECT_EQ(c[2].op, "free");
  EXPECT_EQ(c[2].handle, handle);
  EXPECT_EQ(c[3].op, "close");
  EXPECT_EQ(c[3].fd, dmabuf);
  EXPECT_EQ(c[4].op, "bo_free");
  EXPECT_EQ(c[4].bo, bo);
  EXPECT_EQ(m->host_pointer(w.base, 1), nullptr);
  EXPECT_EQ(sys->live_bos(), 0);
  EXPECT_EQ(sys->live_kfd_handles(), 0);

  // The address comes back, as a new allocation (another serial), zeroed.
  conccl::Result<Buffer> again = m->alloc(-1, 4096, MemKind::host, {0});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->va, w.base);
  EXPECT_EQ(static_cast<uint8_t*>(again->host)[0], 0);
  conccl::Result<SharedRegion> r2 = m->share(again->va, 1, &fd);
  ASSERT_TRUE(r2.ok());
  ::close(fd);
  EXPECT_NE(r2->serial, r->serial);
}

TEST(KfdShareCalls, DeviceMemoryIsVramOnItsGpuAlignedAndMappedOwnerFirst) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 0);
  ASSERT_TRUE(m);
  const k::Window w = *k::slot_window(0);
  conccl::Result<Buffer> small = m->alloc(-1, 100, MemKind::host, {0, 1});
  ASSERT_TRUE(small.ok());
  sys->clear();
  conccl::Result<Buffer> b = m->alloc(1, 4 * kMiB, MemKind::device, {1, 0});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->va, w.base + 2 * kMiB) << "2 MiB buffers are 2 MiB-aligned";
  EXPECT_EQ(b->gpu, 1);
  EXPECT_EQ(b->kind, MemKind::device);
  EXPECT_NE(b->host, nullptr);
  std::vector<Call> c = sys->calls_of({"bo_alloc_export", "import_dmabuf", "map"});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].render_minor, kMinor1);
  EXPECT_EQ(c[0].size, 4 * kMiB);
  EXPECT_EQ(c[0].domain, k::kGemDomainVram);
  EXPECT_EQ(c[0].gem_flags, k::kGemCreateCpuAccessRequired | k::kGemCreateVramCleared);
  EXPECT_EQ(c[1].gpu_id, kId1);
  EXPECT_EQ(c[1].va, b->va);
  EXPECT_EQ(c[2].gpu_ids, (std::vector<uint32_t>{kId1, kId0}));

  int fd = -1;
  conccl::Result<SharedRegion> r = m->share(b->va, b->size, &fd);
  ASSERT_TRUE(r.ok());
  ::close(fd);
  EXPECT_EQ(r->kind, MemKind::device);
  EXPECT_EQ(r->gpu, 1);
  EXPECT_EQ(r->size, 4 * kMiB);
}

// A kernel that does not know AMDGPU_GEM_CREATE_COHERENT/_UNCACHED refuses
// them (EINVAL): host memory is then made without them, and works as before.
TEST(KfdShareCalls, HostMemoryWithoutCoherenceFlagsOnKernelsWithoutThem) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  sys->no_coherence_flags = true;
  std::unique_ptr<SharedMemory> m = open_slot(sys, 0);
  ASSERT_TRUE(m);
  sys->clear();
  conccl::Result<Buffer> b = m->alloc(-1, 4096, MemKind::host, {0});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_NE(b->host, nullptr);
  std::vector<Call> c = sys->calls_of({"bo_alloc_export"});
  ASSERT_EQ(c.size(), 2u) << "one try with the flags, one without";
  EXPECT_EQ(c[0].gem_flags, k::kGemCreateCpuAccessRequired | k::kGemCreateCoherent | k::kGemCreateUncached);
  EXPECT_EQ(c[1].gem_flags, k::kGemCreateCpuAccessRequired);
  std::memset(b->host, 0xA5, 4096);
  EXPECT_EQ(static_cast<uint8_t*>(b->host)[4095], 0xA5);
  // Device memory never asks for them (VRAM is coherent for its own GPU; peers
  // reach it through their own mappings).
  sys->clear();
  conccl::Result<Buffer> d = m->alloc(0, 4096, MemKind::device, {0});
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  c = sys->calls_of({"bo_alloc_export"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].gem_flags & (k::kGemCreateCoherent | k::kGemCreateUncached), 0u);
  EXPECT_TRUE(m->free(d->va).ok());
  EXPECT_TRUE(m->free(b->va).ok());
}

TEST(KfdShareCalls, SmallBarVramHasNoCpuView) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  sys->small_bar = true;
  std::unique_ptr<SharedMemory> m = open_slot(sys, 0);
  ASSERT_TRUE(m);
  sys->clear();
  conccl::Result<Buffer> b = m->alloc(0, 8192, MemKind::device, {0});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->host, nullptr);
  std::vector<Call> c = sys->calls_of({"bo_alloc_export", "mmap"});
  ASSERT_EQ(c.size(), 2u) << "two tries, and no CPU view";
  EXPECT_EQ(c[0].gem_flags, k::kGemCreateCpuAccessRequired | k::kGemCreateVramCleared);
  EXPECT_EQ(c[1].op, "bo_alloc_export");
  EXPECT_EQ(c[1].gem_flags, k::kGemCreateVramCleared);
  EXPECT_EQ(m->covers(b->va, 8192), std::optional<bool>(true));
  EXPECT_EQ(m->host_pointer(b->va, 1), nullptr);
}

TEST(KfdShareCalls, ImportMapsAtTheOwnersAddressAndIsReusedOrReplaced) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 1);
  ASSERT_TRUE(m);
  auto [r, fd] = foreign_region(5, 2 * kMiB, 3 * 4096, MemKind::device, 1, 77);
  const int fd_again = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the same dma-buf, sent again later
  sys->clear();
  ASSERT_TRUE(m->import(r, fd, {1, 0}).ok());
  std::vector<Call> c = sys->calls();
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0].op, "mmap");
  EXPECT_EQ(c[0].va, r.va);
  EXPECT_EQ(c[0].size, r.size);
  EXPECT_EQ(c[0].prot, PROT_NONE);
  EXPECT_EQ(c[0].flags, kReserveFlags) << "the address is taken first, never over something else";
  EXPECT_EQ(c[1].op, "import_dmabuf");
  EXPECT_EQ(c[1].va, r.va);
  EXPECT_EQ(c[1].gpu_id, kId1) << "a dma-buf goes to KFD through the GPU that made it";
  EXPECT_EQ(c[1].fd, fd);
  const uint64_t handle = c[1].handle;
  EXPECT_EQ(c[2].op, "map");
  EXPECT_EQ(c[2].gpu_ids, (std::vector<uint32_t>{kId1, kId0}));
  EXPECT_EQ(c[3].op, "mmap");
  EXPECT_EQ(c[3].flags, MAP_SHARED | MAP_FIXED);
  EXPECT_EQ(c[4].op, "close") << "KFD and the mapping hold the dma-buf: the descriptor goes at once";
  EXPECT_EQ(c[4].fd, fd);
  EXPECT_EQ(m->host_pointer(r.va + 4096, 4096), reinterpret_cast<void*>(r.va + 4096));
  EXPECT_EQ(m->covers(r.va, r.size), std::optional<bool>(true));
  EXPECT_EQ(m->imports(), 1u);

  // The same region again: nothing but closing the new descriptor.
  sys->clear();
  ASSERT_TRUE(m->import(r, fd_again, {1, 0}).ok());
  c = sys->calls();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].op, "close");
  EXPECT_EQ(c[0].fd, fd_again);

  // Another serial at that address: the old import goes, the new one comes.
  auto [r2, fd2] = foreign_region(5, 2 * kMiB, 3 * 4096, MemKind::host, -1, 78);
  sys->clear();
  ASSERT_TRUE(m->import(r2, fd2, {0, 1}).ok());
  c = sys->calls();
  ASSERT_EQ(c.size(), 8u);
  EXPECT_EQ(c[0].op, "munmap");
  EXPECT_EQ(c[0].va, r.va);
  EXPECT_EQ(c[1].op, "unmap");
  EXPECT_EQ(c[1].handle, handle);
  EXPECT_EQ(c[2].op, "free");
  EXPECT_EQ(c[2].handle, handle);
  EXPECT_EQ(c[3].op, "mmap");
  EXPECT_EQ(c[4].op, "import_dmabuf");
  EXPECT_EQ(c[4].gpu_id, kId0) << "host memory is imported through GPU 0, where every process makes it";
  EXPECT_EQ(c[4].fd, fd2);
  EXPECT_EQ(c[5].op, "map");
  EXPECT_EQ(c[6].op, "mmap");
  EXPECT_EQ(c[7].op, "close");
  EXPECT_EQ(c[7].fd, fd2);
  EXPECT_EQ(m->imports(), 1u);

  // Closing drops it.
  sys->clear();
  m.reset();
  EXPECT_EQ(sys->live_kfd_handles(), 0);
  EXPECT_EQ(sys->calls_of({"unmap", "free"}).size(), 2u);
}

// Issue #31, item 6: a region names the GPU holding it by its node-wide
// gpu_id. The importer finds that GPU among its own whatever index the owner
// gave it (ranks isolated to different GPU sets number them differently); a
// GPU hidden from the importer is not imported through, its own GPU is (the
// kernels that import through DRM PRIME take another device's buffer).
TEST(KfdShareCalls, ImportGoesThroughTheOwnersGpuByIdElseThroughOurOwn) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 1);
  ASSERT_TRUE(m);
  constexpr uint32_t kHidden = 0x7777;  // a GPU of the node this process does not see

  // The owner sees one GPU (its index 0), ours is index 1 here.
  auto [r, fd] = foreign_region(5, 2 * kMiB, 2 * 4096, MemKind::device, 0, 1);
  r.node_gpu_id = kId1;
  sys->clear();
  ASSERT_TRUE(m->import(r, fd, {1, 0}).ok());
  std::vector<Call> c = sys->calls_of({"import_dmabuf"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].gpu_id, kId1) << "found by its id, not by the owner's index 0";

  // VRAM of a hidden GPU: imported through the first GPU it is mapped to.
  auto [h, hfd] = foreign_region(6, 2 * kMiB, 4096, MemKind::device, 0, 2);
  h.node_gpu_id = kHidden;
  sys->clear();
  ASSERT_TRUE(m->import(h, hfd, {1, 0}).ok());
  c = sys->calls_of({"import_dmabuf", "map"});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].gpu_id, kId1);
  EXPECT_EQ(c[1].gpu_ids, (std::vector<uint32_t>{kId1, kId0}));

  // Host memory made through a hidden GPU: likewise.
  auto [g, gfd] = foreign_region(7, 2 * kMiB, 4096, MemKind::host, -1, 3);
  g.node_gpu_id = kHidden;
  sys->clear();
  ASSERT_TRUE(m->import(g, gfd, {0, 1}).ok());
  c = sys->calls_of({"import_dmabuf"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].gpu_id, kId0);
  EXPECT_EQ(m->imports(), 3u);
  // A region's own share() names its GPU by id too.
  conccl::Result<Buffer> mine = m->alloc(1, 4096, MemKind::device, {1});
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  int sfd = -1;
  conccl::Result<SharedRegion> shared = m->share(mine->va, 4096, &sfd);
  ASSERT_TRUE(shared.ok()) << shared.status().to_string();
  EXPECT_EQ(shared->node_gpu_id, kId1);
  ::close(sfd);
}

// A kernel that imports a dma-buf only into the GPU that made it (Linux 6.1)
// refuses a hidden GPU's buffer: the error says why and what to do, and the
// import leaves nothing behind. The same refusal for a GPU we see stays the
// plain ioctl error.
TEST(KfdShareErrors, AKernelRefusingAHiddenGpusBufferSaysToShowEveryGpu) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 1);
  ASSERT_TRUE(m);
  auto [h, hfd] = foreign_region(6, 2 * kMiB, 4096, MemKind::device, 0, 2);
  h.node_gpu_id = 0x7777;
  sys->fail_next["import_dmabuf"] = EINVAL;
  conccl::Status st = m->import(h, hfd, {0});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::unavailable) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "gpu_id 30583, which this process does not see")) << st.message();
  EXPECT_TRUE(contains(st.message(), "into gpu_id 4369")) << st.message();
  EXPECT_TRUE(contains(st.message(), "let every rank see every GPU of the node")) << st.message();
  EXPECT_TRUE(contains(st.message(), "errno 22 EINVAL")) << st.message();
  EXPECT_EQ(m->imports(), 0u);
  EXPECT_EQ(sys->live_kfd_handles(), 0);
  EXPECT_EQ(m->covers(h.va, h.size), std::nullopt) << "the address is given back";

  auto [r, fd] = foreign_region(5, 2 * kMiB, 4096, MemKind::device, 0, 1);
  r.node_gpu_id = kId0;
  sys->fail_next["import_dmabuf"] = EINVAL;
  st = m->import(r, fd, {0});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::invalid_argument) << st.to_string();
  EXPECT_FALSE(contains(st.message(), "does not see")) << st.message();
  // And the next try, which the kernel takes, works at the same address.
  auto [again, again_fd] = foreign_region(6, 2 * kMiB, 4096, MemKind::device, 0, 3);
  again.node_gpu_id = 0x7777;
  ASSERT_TRUE(m->import(again, again_fd, {0}).ok());
  EXPECT_EQ(m->imports(), 1u);
}

// Many imports under a small descriptor limit: each import gives its dma-buf
// descriptor back once KFD and the mapping hold the buffer, so 400 live imports
// fit under `ulimit -n 256` and leave no descriptor open (they held one each,
// and the 250th or so failed, before issue #31).
TEST(KfdShareCalls, ImportsKeepNoDescriptorsUnderASmallLimit) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto count_fds = [] {
    int n = 0;
    for (int fd = 0; fd < 4096; ++fd)
      if (::fcntl(fd, F_GETFD) != -1) ++n;
    return n;
  };
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  if (old.rlim_max < 256) GTEST_SKIP() << "the hard descriptor limit is below 256";
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 1);
  ASSERT_TRUE(m);
  const int before = count_fds();
  ASSERT_LT(before, 200) << "this test needs room under a limit of 256";
  rlimit small = old;
  small.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &small), 0);
  conccl::Status failed;
  int done = 0;
  for (int i = 0; i < 400 && failed.ok(); ++i, ++done) {
    auto [r, fd] = foreign_region(5, uint64_t(i) * 2 * kMiB, 4096, MemKind::host, -1, 1000 + uint64_t(i));
    if (fd < 0) {
      failed = conccl::error(Code::resource_exhausted, "memfd_create failed at import " + std::to_string(i));
      break;
    }
    failed = m->import(r, fd, {0});
  }
  const int during = count_fds();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_TRUE(failed.ok()) << failed.to_string() << " (after " << done << " imports)";
  EXPECT_EQ(m->imports(), 400u);
  EXPECT_EQ(during, before) << "imports hold descriptors";
  m.reset();
  EXPECT_EQ(sys->live_kfd_handles(), 0);
  EXPECT_EQ(count_fds(), before - 1) << "the device's own KFD descriptor is closed with it";
}

// ---- (c) two processes, one address ----

struct Offer {
  SharedRegion regions[2];
  uint64_t bytes[2];
  uint64_t seed;
};

uint8_t pattern(uint64_t seed, uint64_t i) {  // never zero: zeros would pass on untouched memory
  uint64_t x = (seed + i) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(1 + x % 255);
}
uint8_t answer(uint8_t v) { return static_cast<uint8_t>(v % 255 + 1); }  // 1..255 -> 2..255, 1: changed, never 0

bool send_with_fds(int sock, const void* data, size_t len, const int* fds, int nfds) {
  iovec iov{const_cast<void*>(data), len};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 2)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds > 0) {
    msg.msg_control = ctl;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<size_t>(nfds));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<size_t>(nfds));
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * static_cast<size_t>(nfds));
  }
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(len);
}

// Waits for len bytes (and up to two fds) until timeout_ms passes.
bool recv_with_fds(int sock, void* data, size_t len, int* fds, int nfds, int timeout_ms) {
  pollfd p{sock, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return false;
  iovec iov{data, len};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * 2)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl;
  msg.msg_controllen = sizeof ctl;
  if (::recvmsg(sock, &msg, MSG_WAITALL) != static_cast<ssize_t>(len)) return false;
  int got = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      got = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      std::memcpy(fds, CMSG_DATA(c), sizeof(int) * static_cast<size_t>(std::min(got, nfds)));
    }
  return got == nfds;
}

// Process B: imports A's two regions at A's addresses, checks every byte,
// answers. Exit codes say which step failed (0: all well).
int importer(int sock) {
  Offer offer{};
  int fds[2] = {-1, -1};
  if (!recv_with_fds(sock, &offer, sizeof offer, fds, 2, 20000)) return 10;
  auto sys = std::make_shared<FakeShareSys>();
  conccl::Result<std::unique_ptr<SharedMemory>> m = SharedMemory::open(sys, config(1));
  if (!m.ok()) return 11;
  for (int i = 0; i < 2; ++i) {
    const SharedRegion& r = offer.regions[i];
    if (!(*m)->import(r, fds[i], {0, 1}).ok()) return 12 + i;
    auto* p = static_cast<uint8_t*>((*m)->host_pointer(r.va, offer.bytes[i]));
    if (p != reinterpret_cast<uint8_t*>(r.va)) return 14;  // the same address as in A
    for (uint64_t j = 0; j < offer.bytes[i]; ++j)
      if (p[j] != pattern(offer.seed + static_cast<uint64_t>(i), j)) return 15;
    for (uint64_t j = 0; j < offer.bytes[i]; ++j) p[j] = answer(p[j]);
  }
  const char done = 'y';
  if (!send_with_fds(sock, &done, 1, nullptr, 0)) return 16;
  m->reset();
  if (sys->live_kfd_handles() != 0) return 17;
  return 0;
}

TEST(KfdShareProcesses, AnotherProcessReadsAndWritesAtTheSameAddress) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  // Fork before either process maps anything: B's address space must not
  // inherit A's buffers, as with two unrelated processes.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(sv[0]);
    ::_exit(importer(sv[1]));
  }
  ::close(sv[1]);

  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 0);
  ASSERT_TRUE(m);
  Offer offer{};
  offer.seed = std::random_device{}();
  offer.bytes[0] = 3 * kMiB + 123;  // host, odd size
  offer.bytes[1] = 2 * kMiB + 4097;  // device
  conccl::Result<Buffer> host = m->alloc(-1, offer.bytes[0], MemKind::host, {0, 1});
  conccl::Result<Buffer> dev = m->alloc(1, offer.bytes[1], MemKind::device, {1, 0});
  ASSERT_TRUE(host.ok() && dev.ok());
  const Buffer bufs[2] = {*host, *dev};
  int fds[2];
  for (int i = 0; i < 2; ++i) {
    auto* p = static_cast<uint8_t*>(bufs[i].host);
    ASSERT_NE(p, nullptr);
    for (uint64_t j = 0; j < offer.bytes[i]; ++j) p[j] = pattern(offer.seed + static_cast<uint64_t>(i), j);
    conccl::Result<SharedRegion> r = m->share(bufs[i].va, bufs[i].size, &fds[i]);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    offer.regions[i] = *r;
  }
  ASSERT_TRUE(send_with_fds(sv[0], &offer, sizeof offer, fds, 2));
  for (int f : fds) ::close(f);

  char done = 0;
  const bool answered = recv_with_fds(sv[0], &done, 1, nullptr, 0, 20000);
  // Reap B within a deadline, whatever happened.
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  pid_t w = 0;
  while ((w = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (w == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ::close(sv[0]);
  ASSERT_TRUE(WIFEXITED(status)) << "the importer did not finish";
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the importer failed at step " << WEXITSTATUS(status);
  ASSERT_TRUE(answered && done == 'y');
  for (int i = 0; i < 2; ++i) {
    const auto* p = static_cast<const uint8_t*>(bufs[i].host);
    uint64_t wrong = 0;
    for (uint64_t j = 0; j < offer.bytes[i]; ++j) wrong += p[j] != answer(pattern(offer.seed + static_cast<uint64_t>(i), j));
    EXPECT_EQ(wrong, 0u) << "buffer " << i << ": bytes B wrote that A does not see";
  }
  EXPECT_TRUE(m->free(host->va).ok());
  EXPECT_TRUE(m->free(dev->va).ok());
}

// ---- (d) errors ----

TEST(KfdShareErrors, ImportWhereTheAddressIsTakenNamesTheSlot) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 1);
  ASSERT_TRUE(m);
  auto [r, fd] = foreign_region(6, 0, 4096, MemKind::host, -1, 9);
  void* squatter = ::mmap(reinterpret_cast<void*>(r.va), 4096, PROT_READ, kReserveFlags, -1, 0);
  ASSERT_EQ(squatter, reinterpret_cast<void*>(r.va));
  sys->clear();
  conccl::Status st = m->import(r, fd, {0});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "process_slot 6")) << st.message();
  EXPECT_TRUE(contains(st.message(), "in use")) << st.message();
  EXPECT_TRUE(contains(st.message(), "EEXIST")) << st.message();
  std::vector<Call> c = sys->calls();
  ASSERT_EQ(c.size(), 2u) << "nothing reaches KFD";
  EXPECT_EQ(c[1].op, "close");
  EXPECT_EQ(c[1].fd, fd) << "import_shared owns the descriptor, on failure too";
  ::munmap(squatter, 4096);

  // A region in our own window: the other process has our slot.
  auto [mine, fd2] = foreign_region(1, 0, 4096, MemKind::host, -1, 10);
  st = m->import(mine, fd2, {0});
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "another process uses process_slot 1")) << st.message();
  EXPECT_EQ(m->imports(), 0u);
}

TEST(KfdShareErrors, AFailingIoctlIsNamedWithItsErrnoAndLeavesNothing) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 0);
  ASSERT_TRUE(m);
  const k::Window w = *k::slot_window(0);

  sys->fail_next["import_dmabuf"] = EINVAL;
  conccl::Result<Buffer> b = m->alloc(0, 4096, MemKind::device, {0});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::invalid_argument);
  EXPECT_TRUE(contains(b.status().message(), "AMDKFD_IOC_IMPORT_DMABUF")) << b.status().message();
  EXPECT_TRUE(contains(b.status().message(), "errno 22 EINVAL")) << b.status().message();
  EXPECT_TRUE(contains(b.status().message(), "process_slot 0")) << b.status().message();
  EXPECT_EQ(sys->live_bos(), 0);

  sys->fail_next["import_dmabuf"] = ENOTTY;
  b = m->alloc(0, 4096, MemKind::device, {0});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::unavailable);
  EXPECT_TRUE(contains(b.status().message(), "too old")) << b.status().message();

  // Mapping fails on the second GPU: the first is unmapped again.
  sys->fail_next["map"] = ENOMEM;
  sys->map_done_before_failure = 1;
  sys->clear();
  b = m->alloc(0, 4096, MemKind::device, {0, 1});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::resource_exhausted);
  EXPECT_TRUE(contains(b.status().message(), "AMDKFD_IOC_MAP_MEMORY_TO_GPU")) << b.status().message();
  EXPECT_TRUE(contains(b.status().message(), "gpu 1 (gpu_id 8738)")) << b.status().message();
  EXPECT_TRUE(contains(b.status().message(), "ENOMEM")) << b.status().message();
  std::vector<Call> undo = sys->calls_of({"unmap", "free", "bo_free"});
  ASSERT_EQ(undo.size(), 3u);
  EXPECT_EQ(undo[0].gpu_ids, std::vector<uint32_t>{kId0}) << "only what was mapped";
  EXPECT_EQ(sys->live_bos(), 0);
  EXPECT_EQ(sys->live_kfd_handles(), 0);

  // The buffer object cannot be made.
  sys->fail_next["bo_alloc_export"] = ENOMEM;
  b = m->alloc(-1, 4096, MemKind::host, {0});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::resource_exhausted);
  EXPECT_TRUE(contains(b.status().message(), "renderD128")) << b.status().message();

  // After all that, the window is whole: the next buffer is at its start.
  b = m->alloc(-1, 4096, MemKind::host, {0});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->va, w.base);
}

TEST(KfdShareErrors, FreeingTwiceAndSharingWhatIsNotOurs) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 0);
  ASSERT_TRUE(m);
  conccl::Result<Buffer> b = m->alloc(-1, 4096, MemKind::host, {0});
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(m->free(b->va).ok());
  sys->clear();
  conccl::Status st = m->free(b->va);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_TRUE(contains(st.message(), "freed already")) << st.message();
  EXPECT_TRUE(sys->calls().empty()) << "nothing is released twice";

  int fd = -1;
  conccl::Result<SharedRegion> r = m->share(b->va, 1, &fd);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::invalid_argument);
  EXPECT_EQ(fd, -1);
}

TEST(KfdShareErrors, ARegionWhoseSerialChangedReplacesTheOldImportEvenWhenItsImportFails) {
  CONCCL_SKIP_WITHOUT_SLOT_WINDOWS();
  auto sys = std::make_shared<FakeShareSys>();
  std::unique_ptr<SharedMemory> m = open_slot(sys, 1);
  ASSERT_TRUE(m);
  auto [r, fd] = foreign_region(3, 0, 8192, MemKind::host, -1, 100);
  ASSERT_TRUE(m->import(r, fd, {0, 1}).ok());
  auto [r2, fd2] = foreign_region(3, 0, 8192, MemKind::host, -1, 101);
  sys->fail_next["import_dmabuf"] = EINVAL;
  conccl::Status st = m->import(r2, fd2, {0, 1});
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "AMDKFD_IOC_IMPORT_DMABUF")) << st.message();
  // The stale import is gone (its owner freed it), and so is the failed one.
  EXPECT_EQ(m->imports(), 0u);
  EXPECT_EQ(m->host_pointer(r.va, 1), nullptr);
  EXPECT_EQ(m->covers(r.va, 1), std::nullopt);
  EXPECT_EQ(sys->live_kfd_handles(), 0);
  // The address is free again here: a later import of it works.
  auto [r3, fd3] = foreign_region(3, 0, 8192, MemKind::host, -1, 102);
  EXPECT_TRUE(m->import(r3, fd3, {0}).ok());
}

}  // namespace
