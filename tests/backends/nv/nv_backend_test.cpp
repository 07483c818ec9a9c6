// tests/backends/nv/nv_backend_test.cpp - the nv backend (own RM client, Hopper CE channels).
//
// Without /dev/nvidiactl (CI, this project's build machines) only the
// unavailable path and the pure helpers run; the hardware tests skip. On an
// H100/H200 with the open 580 module they open the GPU and verify every byte.
// CONCCL_NV_FAULT_TEST=1 adds a test that provokes an MMU fault on our own
// channel (an Xid 31 in dmesg) to check that it is reported, not hung on.
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "conccl/hopper_methods.hpp"
#include "backends/nv/nv_device.hpp"
#include "packets/hopper_ce.hpp"

namespace conccl::nv {
namespace {

bool have_driver() { return access("/dev/nvidiactl", F_OK) == 0; }

TEST(NvBackend, UnavailableWithoutDriver) {
  if (have_driver()) GTEST_SKIP() << "/dev/nvidiactl exists here";
  Status p = Gpu::probe();
  EXPECT_EQ(p.code(), Code::unavailable);
  EXPECT_NE(p.message().find("/dev/nvidiactl"), std::string::npos) << p.message();
  EXPECT_NE(p.message().find("--backend emu"), std::string::npos) << p.message();
  Result<std::unique_ptr<Gpu>> d = Gpu::open();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::unavailable);
  EXPECT_NE(d.status().message().find("/dev/nvidiactl"), std::string::npos);
}

TEST(NvBackend, BadOptions) {
  Options o;
  o.gpfifo_entries = 1000;
  EXPECT_EQ(Gpu::open(o).status().code(), Code::invalid_argument);
  o = Options{};
  o.ring_window_bytes = 3u << 20;  // not a multiple of 2 MiB
  EXPECT_EQ(Gpu::open(o).status().code(), Code::invalid_argument);
  o = Options{};
  o.va_base = 0x10'0000'1000ull;  // not 2 MiB aligned
  EXPECT_EQ(Gpu::open(o).status().code(), Code::invalid_argument);
  o = Options{};
  o.pce_bytes_per_s = 0;
  Status st = Gpu::open(o).status();
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_NE(st.message().find("pce_bytes_per_s"), std::string::npos) << st.to_string();
  o = Options{};
  o.wait_max_sleep_us = 2000000;
  st = Gpu::open(o).status();
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_NE(st.message().find("wait_max_sleep_us"), std::string::npos) << st.to_string();
}

// H200 shape: LCE4 12 PCEs, LCE2/LCE3 2 PCEs each sharing with the GRCEs.
TEST(NvBackend, PickForRate) {
  const RateCandidate h200[] = {{12, false}, {2, true}, {2, true}};
  const double pce = 47e9;
  auto pick = [&](double need) { return pick_for_rate(h200, need, pce); };
  EXPECT_EQ(pick(50e9), (std::vector<size_t>{1}));         // one 2-PCE engine: 94 GB/s
  EXPECT_EQ(pick(94e9), (std::vector<size_t>{1}));
  EXPECT_EQ(pick(95e9), (std::vector<size_t>{1, 2}));      // 4 PCEs beat LCE4's 12
  EXPECT_EQ(pick(188e9), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(pick(189e9), (std::vector<size_t>{0}));        // 12 PCEs, the next smallest
  EXPECT_EQ(pick(564e9), (std::vector<size_t>{0}));
  EXPECT_EQ(pick(565e9), (std::vector<size_t>{0, 1}));     // 14 PCEs; LCE2 first (equal keys: lowest mask)
  EXPECT_EQ(pick(700e9), (std::vector<size_t>{0, 1, 2}));  // 16 PCEs = 752 GB/s
  EXPECT_EQ(pick(1e13), (std::vector<size_t>{0, 1, 2}));   // unreachable: the fastest set
  EXPECT_EQ(pick(0), (std::vector<size_t>{1}));            // anything moves nothing: the smallest engine
  // Among equal PCE counts the engine that does not share PCEs with a GRCE wins.
  const RateCandidate mixed[] = {{2, true}, {2, false}, {0, false}};
  EXPECT_EQ(pick_for_rate(mixed, 50e9, pce), (std::vector<size_t>{1}));
  // Engines without PCEs are never chosen, even when nothing is fast enough.
  EXPECT_EQ(pick_for_rate(mixed, 1e13, pce), (std::vector<size_t>{0, 1}));
  const RateCandidate none[] = {{0, false}};
  EXPECT_TRUE(pick_for_rate(none, 1e9, pce).empty());
  EXPECT_TRUE(pick_for_rate({}, 1e9, pce).empty());
}

TEST(NvBackend, Stripe) {
  const int w3[] = {2, 2, 12};
  std::vector<uint64_t> s = stripe(1ull << 30, w3, 4096);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], 128ull << 20);
  EXPECT_EQ(s[1], 128ull << 20);
  EXPECT_EQ(s[2], 768ull << 20);
  s = stripe(1000003, w3, 4096);
  EXPECT_EQ(s[0] + s[1] + s[2], 1000003u);
  EXPECT_EQ(s[0] % 4096, 0u);
  EXPECT_EQ(s[1] % 4096, 0u);
  const int w0[] = {0, 5};
  s = stripe(100, w0, 1);
  EXPECT_EQ(s[0], 0u);
  EXPECT_EQ(s[1], 100u);
  EXPECT_TRUE(stripe(0, w3, 1) == std::vector<uint64_t>(3, 0));
}

TEST(NvBackend, StatusNames) {
  EXPECT_EQ(rm_status_name(0), "NV_OK");
  EXPECT_EQ(rm_status_name(0x1F), "NV_ERR_INVALID_ARGUMENT");
  EXPECT_EQ(rm_status_name(0x22), "NV_ERR_INVALID_CLASS");
  EXPECT_EQ(rm_status_name(0x3A), "NV_ERR_INVALID_PARAM_STRUCT");
  EXPECT_EQ(rm_status_name(0x40), "NV_ERR_INVALID_STATE");
  EXPECT_EQ(rm_status_name(0x8B), "NV_ERR_DMA_XFER_FAILED");
  EXPECT_EQ(rm_status_name(0xFFFF), "NV_ERR_GENERIC");
  EXPECT_NE(rc_error_name(31).find("MMU fault"), std::string::npos);
}

// ---- hardware -------------------------------------------------------------------

class NvHw : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_driver()) return;
    Result<std::unique_ptr<Gpu>> d = Gpu::open();
    if (!d.ok()) {
      open_error_ = d.status().to_string();
      return;
    }
    dev_ = std::move(d).value();
  }
  static void TearDownTestSuite() { dev_.reset(); }
  void SetUp() override {
    if (!have_driver()) GTEST_SKIP() << "no /dev/nvidiactl";
    ASSERT_TRUE(dev_) << open_error_;
  }
  static std::unique_ptr<Gpu> dev_;
  static std::string open_error_;
};
std::unique_ptr<Gpu> NvHw::dev_;
std::string NvHw::open_error_;

void fill_random(void* p, size_t n, uint64_t seed) {
  std::mt19937_64 r(seed);
  auto* q = static_cast<uint64_t*>(p);
  for (size_t i = 0; i < n / 8; ++i) q[i] = r();
}

TEST_F(NvHw, EnginesAndInfo) {
  EXPECT_NE(dev_->info().driver_version.rfind("580.", 0), std::string::npos);
  EXPECT_TRUE(dev_->info().open_module);
  ASSERT_GT(dev_->channel_count(), 0u);
  for (size_t i = 0; i < dev_->channel_count(); ++i)
    std::printf("LCE%d: %d PCEs, MMU faults reported: %s\n", dev_->channel(i).lce(), dev_->channel(i).pces(),
                dev_->channel(i).faults_reported() ? "yes" : "no (UVM_REGISTER_CHANNEL refused)");
  for (const Engine& e : dev_->engines()) {
    if (e.has_channel) {
      EXPECT_FALSE(e.grce);
      EXPECT_GT(e.pces, 0);
    }
  }
  for (size_t i = 1; i < dev_->channel_count(); ++i)
    EXPECT_GE(dev_->channel(i - 1).pces(), dev_->channel(i).pces());
}

TEST_F(NvHw, CopyRoundTripEveryChannel) {
  const size_t n = 8u << 20;
  Result<Allocation> h = dev_->alloc(n, Placement::host), a = dev_->alloc(n, Placement::device),
                 b = dev_->alloc(n, Placement::device), r = dev_->alloc(n, Placement::host);
  ASSERT_TRUE(h.ok() && a.ok() && b.ok() && r.ok()) << h.status().to_string() << a.status().to_string();
  for (size_t c = 0; c < dev_->channel_count(); ++c) {
    SCOPED_TRACE("LCE" + std::to_string(dev_->channel(c).lce()));
    fill_random(h->host, n, 100 + c);
    std::memset(r->host, 0xA5, n);
    Channel& ch = dev_->channel(c);
    CommandBuffer cb = ch.commands();
    ASSERT_TRUE(cb.copy(a->va, h->va, n).ok());
    ASSERT_TRUE(cb.copy(b->va, a->va, n).ok());
    ASSERT_TRUE(cb.copy(r->va, b->va, n).ok());
    uint64_t f = 0;
    ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000), &f).ok());
    cb.clear();
    Status st = ch.wait_done(Deadline::after_ms(5000), f);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(std::memcmp(h->host, r->host, n), 0);
  }
  // Odd sizes and offsets.
  fill_random(h->host, n, 7);
  std::memset(r->host, 0, n);
  Channel& ch = dev_->channel(0);
  CommandBuffer cb = ch.commands();
  ASSERT_TRUE(cb.copy(r->va + 0x300003, h->va + 0x12345, 1000001).ok());
  ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
  cb.clear();
  ASSERT_TRUE(ch.wait_done(Deadline::after_ms(5000)).ok());
  EXPECT_EQ(std::memcmp(r->as<uint8_t>() + 0x300003, h->as<uint8_t>() + 0x12345, 1000001), 0);
  EXPECT_EQ(r->as<uint8_t>()[0x300002], 0);
  EXPECT_EQ(r->as<uint8_t>()[0x300003 + 1000001], 0);
  for (Allocation* x : {&*h, &*a, &*b, &*r}) EXPECT_TRUE(dev_->free(*x).ok());
}

TEST_F(NvHw, FillAndTimestamp) {
  const size_t n = 4u << 20;
  Result<Allocation> a = dev_->alloc(n, Placement::device), r = dev_->alloc(n, Placement::host);
  ASSERT_TRUE(a.ok() && r.ok());
  Result<uint64_t> t0 = dev_->alloc_slot(), t1 = dev_->alloc_slot();
  ASSERT_TRUE(t0.ok() && t1.ok());
  Channel& ch = dev_->channel(0);
  CommandBuffer cb = ch.commands();
  ASSERT_TRUE(cb.timestamp(*t0).ok());
  ASSERT_TRUE(cb.fill(a->va, 0xC0FFEE11u, n).ok());
  ASSERT_TRUE(cb.copy(r->va, a->va, n).ok());
  ASSERT_TRUE(cb.timestamp(*t1).ok());
  ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
  cb.clear();
  ASSERT_TRUE(ch.wait_done(Deadline::after_ms(5000)).ok());
  for (size_t i = 0; i < n / 4; ++i) ASSERT_EQ(r->as<uint32_t>()[i], 0xC0FFEE11u) << i;
  const uint64_t a0 = dev_->slot_host(*t0)[1], a1 = dev_->slot_host(*t1)[1];
  EXPECT_GT(a0, 1'600'000'000ull * 1'000'000'000ull) << "GPU timestamps are ns since the Unix epoch";
  EXPECT_GT(a1, a0);
  EXPECT_TRUE(dev_->free(*a).ok());
  EXPECT_TRUE(dev_->free(*r).ok());
}

TEST_F(NvHw, WaitSignalAcrossChannelsAndHost) {
  Result<uint64_t> s1 = dev_->alloc_slot(), s2 = dev_->alloc_slot();
  ASSERT_TRUE(s1.ok() && s2.ok());
  volatile uint64_t* h1 = dev_->slot_host(*s1);
  volatile uint64_t* h2 = dev_->slot_host(*s2);
  h1[0] = 0;
  h2[0] = 0;
  Channel& a = dev_->channel(0);
  CommandBuffer a_cb = a.commands();
  Channel& b = dev_->channel(dev_->channel_count() > 1 ? 1 : 0);
  CommandBuffer b_cb = b.commands();
  // b waits for s1 >= 0x300000001 (a 64-bit value), then signals s2.
  ASSERT_TRUE(b_cb.wait_ge(*s1, 0x300000001ull).ok());
  ASSERT_TRUE(HopperMethods(b_cb).release(*s2, 0x500000007ull, /*timestamp=*/true, /*interrupt=*/false).ok());
  ASSERT_TRUE(b.submit(b_cb, Deadline::after_ms(1000)).ok());
  b_cb.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(h2[0], 0u) << "the acquire must hold the channel";
  h1[0] = 0x300000000ull;  // still below
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(h2[0], 0u);
  if (&a != &b) {  // a releases s1 from another engine
    ASSERT_TRUE(HopperMethods(a_cb).release(*s1, 0x300000001ull, /*timestamp=*/true, /*interrupt=*/false).ok());
    ASSERT_TRUE(a.submit(a_cb, Deadline::after_ms(1000)).ok());
    a_cb.clear();
  } else {
    h1[0] = 0x300000001ull;
  }
  ASSERT_TRUE(b.wait_done(Deadline::after_ms(5000)).ok()) << b.diagnose();
  EXPECT_EQ(h2[0], 0x500000007ull);
  EXPECT_NE(h2[1], 0u);
}

TEST_F(NvHw, TimeoutReportsChannelState) {
  Result<uint64_t> s = dev_->alloc_slot();
  ASSERT_TRUE(s.ok());
  volatile uint64_t* h = dev_->slot_host(*s);
  h[0] = 0;
  Channel& ch = dev_->channel(0);
  CommandBuffer cb = ch.commands();
  ASSERT_TRUE(cb.wait_ge(*s, 1).ok());
  uint64_t f = 0;
  ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000), &f).ok());
  cb.clear();
  Status st = ch.wait_done(Deadline::after_ms(50), f);
  EXPECT_EQ(st.code(), Code::timeout);
  EXPECT_NE(st.message().find("GP_GET="), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("GP_PUT="), std::string::npos);
  EXPECT_NE(st.message().find("error notifier clear"), std::string::npos);
  h[0] = 1;  // release it
  EXPECT_TRUE(ch.wait_done(Deadline::after_ms(5000), f).ok()) << ch.diagnose();
}

TEST_F(NvHw, StripedCopy) {
  const size_t n = 64u << 20;
  Result<Allocation> h = dev_->alloc(n, Placement::host), a = dev_->alloc(n, Placement::device),
                 b = dev_->alloc(n, Placement::device), r = dev_->alloc(n, Placement::host);
  ASSERT_TRUE(h.ok() && a.ok() && b.ok() && r.ok());
  fill_random(h->host, n, 42);
  Channel& ch = dev_->channel(0);
  CommandBuffer cb = ch.commands();
  ASSERT_TRUE(cb.copy(a->va, h->va, n).ok());
  ASSERT_TRUE(cb.fill(b->va, 0xDEADBEEF, n).ok());
  ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
  cb.clear();
  ASSERT_TRUE(ch.wait_done(Deadline::after_ms(5000)).ok());
  Status st = dev_->copy_striped(b->va, a->va, n, Deadline::after_ms(5000));
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(cb.copy(r->va, b->va, n).ok());
  ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
  cb.clear();
  ASSERT_TRUE(ch.wait_done(Deadline::after_ms(5000)).ok());
  EXPECT_EQ(std::memcmp(h->host, r->host, n), 0);
  for (Allocation* x : {&*h, &*a, &*b, &*r}) EXPECT_TRUE(dev_->free(*x).ok());
}

// ---- the copy engine's own 64-bit add (issue #28: arrivals folded into copies) ----
//
// A list's arrival today is a host SEM_EXECUTE reduction with RELEASE_WFI
// after its copies: the PBDMA waits for the engine to drain, then adds. The
// copy engine can add itself when a LAUNCH_DMA ends (SEMAPHORE_REDUCTION,
// clc8b5.h), but no public manual says a two-word (64-bit) IADD works there.
// These tests ask the hardware: the carry out of the low word, adds from
// every engine at once into one value, and the add seen only after the data.

// Appends one copy piece that adds `delta` at `sem` once its writes landed.
Status copy_add(CommandBuffer& cb, uint64_t dst, uint64_t src, uint64_t len, bool pipelined, uint64_t sem,
                uint64_t delta) {
  uint32_t dw[hopper::kCopyAddDwords];
  hopper::put_copy_piece_add(dw, dst, src, len, pipelined, sem, delta);
  return cb.raw(dw);
}

TEST_F(NvHw, CopyEngineAdd64Carries) {
  const size_t n = 4096;
  Result<Allocation> h = dev_->alloc(n, Placement::host), d = dev_->alloc(n, Placement::device);
  Result<uint64_t> s = dev_->alloc_slot();
  ASSERT_TRUE(h.ok() && d.ok() && s.ok());
  fill_random(h->host, n, 11);
  volatile uint64_t* v = dev_->slot_host(*s);
  v[0] = 0x1FFFFFFFFull;
  Channel& ch = dev_->channel(0);
  CommandBuffer cb = ch.commands();
  ASSERT_TRUE(copy_add(cb, d->va, h->va, n, false, *s, 0x100000001ull).ok());
  ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
  cb.clear();
  ASSERT_TRUE(ch.wait_done(Deadline::after_ms(5000)).ok()) << ch.diagnose();
  EXPECT_EQ(v[0], 0x300000000ull) << "a two-word IADD must carry out of the low word";
  EXPECT_TRUE(dev_->free(*h).ok());
  EXPECT_TRUE(dev_->free(*d).ok());
}

TEST_F(NvHw, CopyEngineAdd64FromEveryEngineAtOnce) {
  const size_t n = 256, per = 300;
  Result<Allocation> h = dev_->alloc(n, Placement::host), d = dev_->alloc(n * per, Placement::device);
  Result<uint64_t> s = dev_->alloc_slot();
  ASSERT_TRUE(h.ok() && d.ok() && s.ok());
  fill_random(h->host, n, 12);
  volatile uint64_t* v = dev_->slot_host(*s);
  const uint64_t base = 0xFFFFFF00ull;  // the sum crosses 2^32
  v[0] = base;
  std::vector<CommandBuffer> cbs;
  for (size_t c = 0; c < dev_->channel_count(); ++c) {
    cbs.push_back(dev_->channel(c).commands());
    for (size_t i = 0; i < per; ++i)
      ASSERT_TRUE(copy_add(cbs.back(), d->va + i * n, h->va, n, i != 0, *s, 1).ok());
  }
  for (size_t c = 0; c < cbs.size(); ++c) ASSERT_TRUE(dev_->channel(c).submit(cbs[c], Deadline::after_ms(1000)).ok());
  for (size_t c = 0; c < cbs.size(); ++c)
    ASSERT_TRUE(dev_->channel(c).wait_done(Deadline::after_ms(5000)).ok()) << dev_->channel(c).diagnose();
  EXPECT_EQ(v[0], base + per * cbs.size()) << "adds from " << cbs.size() << " engines into one value";
  EXPECT_TRUE(dev_->free(*h).ok());
  EXPECT_TRUE(dev_->free(*d).ok());
}

// Engine A copies 32 MiB from `src` to `mid` in pipelined pieces of
// `piece` bytes and adds 1 to a signal that starts at `base`, as
// `record_a(cb, mid, src, piece, sem)` writes it; engine B waits for the
// add, then copies `mid` out. What B read must be all of A's data, in each
// of 8 rounds of new data.
using RecordA =
    std::function<void(CommandBuffer&, uint64_t mid, uint64_t src, size_t piece, uint64_t sem, uint64_t target)>;
void expect_add_follows_data(Gpu& dev, size_t piece, uint64_t base, uint64_t seed, const RecordA& record_a) {
  if (dev.channel_count() < 2) GTEST_SKIP() << "one channel";
  const size_t n = 32u << 20, rounds = 8;
  Result<Allocation> src = dev.alloc(n, Placement::device), mid = dev.alloc(n, Placement::device),
                     h = dev.alloc(n, Placement::host), r = dev.alloc(n, Placement::host);
  Result<uint64_t> s = dev.alloc_slot();
  ASSERT_TRUE(src.ok() && mid.ok() && h.ok() && r.ok() && s.ok());
  volatile uint64_t* v = dev.slot_host(*s);
  v[0] = base;
  Channel& a = dev.channel(0);
  Channel& b = dev.channel(1);
  for (size_t k = 1; k <= rounds; ++k) {
    fill_random(h->host, n, seed + k);
    std::memset(r->host, 0, n);
    CommandBuffer up = a.commands();
    ASSERT_TRUE(up.copy(src->va, h->va, n).ok());
    ASSERT_TRUE(a.submit(up, Deadline::after_ms(1000)).ok());
    ASSERT_TRUE(a.wait_done(Deadline::after_ms(5000)).ok());
    CommandBuffer wb = b.commands();  // B first: it waits while A copies
    ASSERT_TRUE(wb.wait_ge(*s, base + k).ok());
    ASSERT_TRUE(wb.copy(r->va, mid->va, n).ok());
    ASSERT_TRUE(b.submit(wb, Deadline::after_ms(1000)).ok());
    CommandBuffer ca = a.commands();
    record_a(ca, mid->va, src->va, piece, *s, base + k);
    ASSERT_TRUE(a.submit(ca, Deadline::after_ms(1000)).ok());
    ASSERT_TRUE(b.wait_done(Deadline::after_ms(5000)).ok()) << b.diagnose();
    ASSERT_EQ(v[0], base + k);
    size_t first_bad = n;
    for (size_t i = 0; i < n && first_bad == n; i += 4096)
      if (std::memcmp(h->as<uint8_t>() + i, r->as<uint8_t>() + i, std::min<size_t>(4096, n - i)) != 0) first_bad = i;
    ASSERT_EQ(first_bad, n) << "round " << k << ": engine B saw the add before A's data at byte " << first_bad;
  }
  ASSERT_TRUE(a.wait_done(Deadline::after_ms(5000)).ok());
  for (Allocation* x : {&*src, &*mid, &*h, &*r}) EXPECT_TRUE(dev.free(*x).ok());
}

// Plain pieces of `piece` bytes copying [src, src+n) to mid, the first
// NON_PIPELINED and the rest PIPELINED.
void record_pieces(CommandBuffer& cb, uint64_t mid, uint64_t src, size_t piece, size_t n) {
  for (size_t off = 0; off < n; off += piece) {
    uint32_t dw[hopper::kCopyPieceDwords];
    hopper::put_copy_piece(dw, mid + off, src + off, piece, off != 0);
    ASSERT_TRUE(cb.raw(dw).ok());
  }
}

// The add on the copy's last pipelined piece.
TEST_F(NvHw, CopyEngineAddFollowsTheCopysData) {
  expect_add_follows_data(*dev_, 4u << 20, 0, 100, [](CommandBuffer& cb, uint64_t mid, uint64_t src, size_t piece,
                                                      uint64_t sem, uint64_t) {
    const size_t n = 32u << 20;
    record_pieces(cb, mid, src, piece, n - piece);
    ASSERT_TRUE(copy_add(cb, mid + n - piece, src + n - piece, piece, true, sem, 1).ok());
  });
}

// The add as a LAUNCH_DMA of its own (no transfer, FLUSH) after the
// pipelined pieces: how a list's "sent" add or a batch of arrivals would
// look without the host's wait for idle (CONCCL_NV_CE_ADD=1).
TEST_F(NvHw, CopyEngineAddAfterPipelinedCopies) {
  expect_add_follows_data(*dev_, 2u << 20, 0xFFFFFFFFull, 200,
                          [](CommandBuffer& cb, uint64_t mid, uint64_t src, size_t piece, uint64_t sem, uint64_t) {
                            record_pieces(cb, mid, src, piece, 32u << 20);
                            uint32_t add[hopper::kReleaseDwords];
                            hopper::put_release_add(add, sem, 1);
                            ASSERT_TRUE(cb.raw(add).ok());
                          });
}

// The vocabulary's signal_set (a LAUNCH_DMA semaphore release of its own,
// FLUSH, no reduction) after the pipelined pieces: how a list that alone
// delivers a rank's arrivals ends (PlanBuilder::finish stores their count).
TEST_F(NvHw, CopyEngineReleaseAfterPipelinedCopies) {
  expect_add_follows_data(*dev_, 2u << 20, 0x7FFFFFF0ull, 300,
                          [](CommandBuffer& cb, uint64_t mid, uint64_t src, size_t piece, uint64_t sem, uint64_t target) {
                            record_pieces(cb, mid, src, piece, 32u << 20);
                            ASSERT_TRUE(cb.signal_set(sem, target).ok());
                          });
}

// The bandwidth-budget set: the fewest PCEs that reach the rate, and a
// striped copy over just that set lands every byte.
TEST_F(NvHw, ChannelsForRate) {
  const double pce = dev_->options().pce_bytes_per_s;
  int min_pces = 1 << 30, all_pces = 0;
  for (size_t i = 0; i < dev_->channel_count(); ++i) {
    min_pces = std::min(min_pces, dev_->channel(i).pces());
    all_pces += dev_->channel(i).pces();
  }
  std::vector<Channel*> slow = dev_->channels_for_rate(1e9);
  ASSERT_EQ(slow.size(), 1u);
  EXPECT_EQ(slow[0]->pces(), min_pces);
  std::vector<Channel*> fast = dev_->channels_for_rate(1e15);
  EXPECT_EQ(fast.size(), dev_->channel_count());
  EXPECT_DOUBLE_EQ(dev_->estimated_rate(fast), all_pces * pce);
  const double need = (min_pces + 1) * pce;  // more than the smallest engine moves
  std::vector<Channel*> mid = dev_->channels_for_rate(need);
  EXPECT_GE(dev_->estimated_rate(mid), std::min(need, all_pces * pce));

  const size_t n = 48u << 20;
  Result<Allocation> h = dev_->alloc(n, Placement::host), d = dev_->alloc(n, Placement::device),
                 r = dev_->alloc(n, Placement::host);
  ASSERT_TRUE(h.ok() && d.ok() && r.ok());
  fill_random(h->host, n, 7);
  std::memset(r->host, 0x5A, n);
  Status st = dev_->copy_striped(d->va, h->va, n, Deadline::after_ms(5000), mid);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = dev_->copy_striped(r->va, d->va, n, Deadline::after_ms(5000), slow);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(std::memcmp(h->host, r->host, n), 0);
  for (Allocation* x : {&*h, &*d, &*r}) EXPECT_TRUE(dev_->free(*x).ok());
}

// A long wait sleeps instead of holding a core: the waiting thread's CPU time
// stays well below the wall time of a ~10 ms copy on the smallest engine.
TEST_F(NvHw, LongWaitSleeps) {
  const size_t n = 1u << 30;
  Result<Allocation> a = dev_->alloc(n, Placement::device), b = dev_->alloc(n, Placement::device);
  ASSERT_TRUE(a.ok() && b.ok());
  Channel* ch = dev_->channels_for_rate(1e9)[0];
  CommandBuffer cb = ch->commands();
  auto cpu_ns = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
  };
  double wall_sum = 0, cpu_sum = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(cb.copy(b->va, a->va, n).ok());
    ASSERT_TRUE(ch->submit(cb, Deadline::after_ms(1000)).ok());
    cb.clear();
    const int64_t c0 = cpu_ns();
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(ch->wait_done(Deadline::after_ms(10000)).ok()) << ch->diagnose();
    wall_sum += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    cpu_sum += double(cpu_ns() - c0);
  }
  std::printf("LongWaitSleeps: LCE%d, wait %.2f ms wall, %.2f ms CPU per 1 GiB copy\n", ch->lce(), wall_sum / 3e6,
              cpu_sum / 3e6);
  EXPECT_GT(wall_sum / 3, 2e6) << "the copy was expected to take milliseconds";
  EXPECT_LT(cpu_sum, 0.3 * wall_sum);
  for (Allocation* x : {&*a, &*b}) EXPECT_TRUE(dev_->free(*x).ok());
}

// Interrupt-driven waits, for every way of raising and routing the
// interrupt. Each wait is for a 64 MiB copy (~0.1 ms on LCE4), so it always
// goes to sleep (no spin phase); it must wake on the event, not on the ppoll
// safety timeout (10 ms here). A 1 GiB copy's wait must cost little CPU.
// Prints a table; the default combination must work.
TEST_F(NvHw, InterruptWaits) {
  struct Combo {
    IrqSource src;
    IrqNotifier ntf;
    const char* name;
  };
  const Combo combos[] = {
      {IrqSource::host_method, IrqNotifier::both, "host WFI+NSI / CE+host"},
      {IrqSource::host_method, IrqNotifier::copy_engine, "host WFI+NSI / CE"},
      {IrqSource::host_method, IrqNotifier::host, "host WFI+NSI / host"},
      {IrqSource::copy_launch, IrqNotifier::copy_engine, "LAUNCH_DMA intr / CE"},
      {IrqSource::copy_launch, IrqNotifier::both, "LAUNCH_DMA intr / CE+host"},
  };
  const Options defaults;
  bool default_works = false;
  int working = 0;
  std::printf("%-27s %7s %8s %8s %8s %5s %5s %4s | %8s %5s %5s %4s %8s\n", "interrupt / notifier", "copy us",
              "wait med", "p90", "max", "arms", "wakes", "tmo", "1GiB ms", "arms", "wakes", "tmo", "CPU/wall");
  for (const Combo& c : combos) {
    Options o;
    o.va_size = 8ull << 30;  // beside the fixture's device (windows placed where nothing is mapped)
    o.wait_spin_us = 0;
    o.wait_max_sleep_us = 1000;  // safety timeout 10 ms
    o.irq_source = c.src;
    o.irq_notifier = c.ntf;
    Result<std::unique_ptr<Gpu>> d = Gpu::open(o);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    Gpu& dev = **d;
    Channel& ch = dev.channel(0);
    CommandBuffer cb = ch.commands();
    if (!ch.interrupt_waits()) {
      std::printf("%-27s not available: %s\n", c.name, ch.interrupt_note().c_str());
      continue;
    }
    const size_t mid = 64u << 20, big = 1u << 30;
    Result<Allocation> a = dev.alloc(big, Placement::device), b = dev.alloc(big, Placement::device),
                   h = dev.alloc(mid, Placement::host), r = dev.alloc(mid, Placement::host);
    ASSERT_TRUE(a.ok() && b.ok() && h.ok() && r.ok());
    fill_random(h->host, mid, 11);
    ASSERT_TRUE(cb.copy(a->va, h->va, mid).ok());
    ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
    cb.clear();
    ASSERT_TRUE(ch.wait_done(Deadline::after_ms(5000)).ok());
    double copy_us = 0;
    std::vector<double> lat;
    const Channel::WaitStats s0 = ch.wait_stats();
    for (int i = 0; i < 30; ++i) {
      ASSERT_TRUE(cb.copy(b->va, a->va, mid).ok());
      ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
      cb.clear();
      const auto t0 = std::chrono::steady_clock::now();
      Status st = ch.wait_done(Deadline::after_ms(5000));
      lat.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      ASSERT_TRUE(st.ok()) << st.to_string();
    }
    const Channel::WaitStats s1 = ch.wait_stats();
    // The engine's time for one copy: two releases with timestamps around it.
    {
      Result<uint64_t> slot = dev.alloc_slot();
      ASSERT_TRUE(slot.ok());
      ASSERT_TRUE(cb.timestamp(*slot).ok());
      ASSERT_TRUE(cb.copy(b->va, a->va, mid).ok());
      ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
      cb.clear();
      ASSERT_TRUE(ch.wait_done(Deadline::after_ms(5000)).ok());
      copy_us = double(ch.completed_time_ns() - dev.slot_host(*slot)[1]) / 1e3;
    }
    // The bytes landed: copy back and compare.
    ASSERT_TRUE(cb.copy(r->va, b->va, mid).ok());
    ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
    cb.clear();
    ASSERT_TRUE(ch.wait_done(Deadline::after_ms(5000)).ok());
    EXPECT_EQ(std::memcmp(h->host, r->host, mid), 0);
    // A long wait: CPU time against wall time.
    const Channel::WaitStats s2 = ch.wait_stats();
    timespec c0{}, c1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    const auto w0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(cb.copy(b->va, a->va, big).ok());
    ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000)).ok());
    cb.clear();
    ASSERT_TRUE(ch.wait_done(Deadline::after_ms(10000)).ok());
    const double wall = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - w0).count();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    const Channel::WaitStats s3 = ch.wait_stats();
    const double cpu = double(c1.tv_sec - c0.tv_sec) * 1e9 + double(c1.tv_nsec - c0.tv_nsec);
    std::sort(lat.begin(), lat.end());
    const double med = lat[lat.size() / 2], p90 = lat[lat.size() * 9 / 10], mx = lat.back();
    const uint64_t arms = s1.irq_arms - s0.irq_arms, wakes = s1.irq_wakes - s0.irq_wakes,
                   tmo = s1.irq_timeouts - s0.irq_timeouts;
    auto u = [](uint64_t v) { return static_cast<unsigned long long>(v); };
    std::printf("%-27s %7.1f %8.1f %8.1f %8.1f %5llu %5llu %4llu | %8.2f %5llu %5llu %4llu %7.1f%%\n", c.name, copy_us,
                med, p90, mx, u(arms), u(wakes), u(tmo), wall / 1e6, u(s3.irq_arms - s2.irq_arms),
                u(s3.irq_wakes - s2.irq_wakes), u(s3.irq_timeouts - s2.irq_timeouts), 100 * cpu / wall);
    EXPECT_EQ(arms, 30u) << c.name << ": every wait should have slept";
    const bool works = wakes > 0 && tmo == 0 && med < copy_us + 1000;
    working += works ? 1 : 0;
    if (c.src == defaults.irq_source && c.ntf == defaults.irq_notifier) default_works = works;
    for (Allocation* x : {&*a, &*b, &*h, &*r}) EXPECT_TRUE(dev.free(*x).ok());
  }
  EXPECT_GT(working, 0) << "no combination woke on the interrupt";
  EXPECT_TRUE(default_works) << "the default irq_source/irq_notifier did not wake on the interrupt";
}

TEST_F(NvHw, FreeUnknownBuffer) {
  Allocation bogus;
  bogus.va = 0x1234000;
  bogus.handle = 77;
  EXPECT_EQ(dev_->free(bogus).code(), Code::not_found);
}

TEST(NvFault, MmuFaultIsReportedNotHung) {
  if (!have_driver()) GTEST_SKIP() << "no /dev/nvidiactl";
  const char* on = std::getenv("CONCCL_NV_FAULT_TEST");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set CONCCL_NV_FAULT_TEST=1 (provokes an Xid 31 on our channel)";
  Options o;
  o.va_base = 0x80'0000'0000ull;  // its own window, clear of the suite's device
  o.va_size = 16ull << 30;
  Result<std::unique_ptr<Gpu>> d = Gpu::open(o);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  Result<Allocation> a = (*d)->alloc(1 << 20, Placement::device);
  ASSERT_TRUE(a.ok());
  Channel& ch = (*d)->channel(0);
  CommandBuffer cb = ch.commands();
  // Copy into the reserved but unmapped end of the window.
  ASSERT_TRUE(cb.copy(o.va_base + o.va_size - (1 << 20), a->va, 4096).ok());
  uint64_t f = 0;
  ASSERT_TRUE(ch.submit(cb, Deadline::after_ms(1000), &f).ok());
  cb.clear();
  Status st = ch.wait_done(Deadline::after_ms(5000), f);
  std::printf("fault report (faults_reported=%d): %s\n", int(ch.faults_reported()), st.to_string().c_str());
  if (!ch.faults_reported()) {
    EXPECT_EQ(st.code(), Code::timeout) << "an unregistered channel stalls on a fault";
    return;
  }
  EXPECT_EQ(st.code(), Code::device_fault) << st.to_string();
  EXPECT_NE(st.message().find("MMU fault"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace conccl::nv
