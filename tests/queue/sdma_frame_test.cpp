// tests/queue/sdma_frame_test.cpp - what wraps every SDMA submission
// (src/queue/sdma_frame.hpp): exact packets per generation, that the
// emulator's engines execute them (HDP flushes and GCRs are counted), and that
// completion is the sequence FENCE, not the read pointer.
#include <gtest/gtest.h>

#include <vector>

#include "backends/emu/emu_test_util.hpp"
#include "queue/sdma_frame.hpp"

namespace conccl {
namespace {

using namespace conccl::test;
using V = std::vector<uint32_t>;
using sdma::Gen;

constexpr uint64_t kDone = 0x00007F0000001000ull;

// ROCr's firmware HDP flush (ROCR-Runtime core/inc/sdma_registers.h
// SDMA_PKT_HDP_FLUSH) and GCR_USER packets (amd_blit_sdma.cpp BuildGCRCommand;
// layout: linux navi10_sdma_pkt_open.h / sdma_v6_0_0_pkt_open.h GCR_REQ).
const V kHdpFlush = {0x00000008, 0x00000000, 0x80000000, 0x00000000, 0x00000000, 0x00000000};
const V kGcrInvalidate = {0x00000111, 0x00000000, 0xC3C00000, 0x00000000, 0x00000000};
const V kGcrWriteBack = {0x00000111, 0x00000000, 0x80400000, 0x00000000, 0x00000000};
// FENCE to kDone, value patched per submission; MTYPE=3 (UC) on 5.x/6.x.
const V kFence4 = {0x00000005, 0x00001000, 0x00007F00, 0x00000000};
const V kFenceUc = {0x00030005, 0x00001000, 0x00007F00, 0x00000000};

struct Expect {
  Gen gen;
  bool hdp, gcr;
  const V* fence;
};

TEST(SubmitFrame, ExactPacketsPerGeneration) {
  const Expect cases[] = {
      {Gen::v4, true, false, &kFence4},   {Gen::v4_4_2, true, false, &kFence4},  // gfx9: flush, no GCR
      {Gen::v5, false, true, &kFenceUc},  // gfx101x firmware has no user HDP flush (ROCr)
      {Gen::v5_2, true, true, &kFenceUc}, {Gen::v6, true, true, &kFenceUc}, {Gen::v7, true, true, &kFenceUc},
  };
  for (const Expect& c : cases) {
    SCOPED_TRACE("SDMA " + std::string(sdma::gen_name(c.gen)));
    const FramePolicy p = frame_policy(c.gen, /*cpu_link_xgmi=*/false);
    EXPECT_EQ(p.hdp_flush, c.hdp);
    EXPECT_EQ(p.gcr, c.gcr);
    SubmitFrame f;
    ASSERT_OK_AND_ASSIGN(f, make_frame(c.gen, p, kDone));
    std::vector<V> pro, epi;
    if (c.hdp) pro.push_back(kHdpFlush);
    if (c.gcr) {
      pro.push_back(kGcrInvalidate);
      epi.push_back(kGcrWriteBack);
    }
    EXPECT_EQ(f.prologue, pro);
    EXPECT_EQ(f.epilogue, epi);
    EXPECT_EQ(f.fence, *c.fence);
    EXPECT_EQ(f.overhead_bytes(), (c.hdp ? 24u : 0u) + (c.gcr ? 40u : 0u) + 16u);
  }
}

TEST(SubmitFrame, XgmiCpuLinkSkipsTheFlushAndMinimumSizeIsKept) {
  // MI300A / MI250X with Trento: the CPU is coherent over xGMI (ROCr skips it).
  EXPECT_FALSE(frame_policy(Gen::v4_4_2, true).hdp_flush);
  EXPECT_FALSE(frame_policy(Gen::v6, true).hdp_flush);
  EXPECT_TRUE(frame_policy(Gen::v6, true).gcr);
  // gfx900: 256-byte minimum submissions, from the gfx table.
  const auto t = sdma::gfx_to_target("gfx900");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->min_submit_bytes, 256u);
  EXPECT_EQ(sdma::gfx_to_target("gfx942")->min_submit_bytes, 0u);
  EXPECT_EQ(frame_policy(Gen::v4, false, t->min_submit_bytes).min_submit_bytes, 256u);
  EXPECT_EQ(describe(frame_policy(Gen::v4, false, 256)), "hdp-flush min-submit=256");
  EXPECT_EQ(describe(FramePolicy{}), "none");
  EXPECT_EQ(make_frame(Gen::v4, FramePolicy{}, kDone + 2).status().code(), Code::invalid_argument);
}

Result<std::unique_ptr<emu::EmuDevice>> device_of(const std::string& gen) {
  return emu::create(options("small", 1, 2, gen));
}

// Every submission carries the frame, and the engines run it: the counters
// say so, and a stalled queue's pending packets show it in order.
TEST(SubmitFrame, EngineRunsTheFrameAroundEverySubmission) {
  for (const char* gen : {"4.4.2", "5", "6", "7"}) {
    SCOPED_TRACE(std::string("SDMA ") + gen);
    std::unique_ptr<emu::EmuDevice> dev;
    ASSERT_OK_AND_ASSIGN(dev, device_of(gen));
    const FramePolicy p = frame_policy(*sdma::parse_gen(gen), false);
    std::unique_ptr<Queue> q;
    ASSERT_OK_AND_ASSIGN(q, make_queue(*dev, 0, 0, 4096));
    Buffer a, b;
    ASSERT_OK_AND_ASSIGN(a, dev->alloc(-1, 4096, MemKind::host));
    ASSERT_OK_AND_ASSIGN(b, dev->alloc(0, 4096, MemKind::device));
    CommandBuffer cb = q->command_buffer();
    ASSERT_OK(cb.copy(b.va, a.va, 4096));
    for (int i = 0; i < 3; ++i) ASSERT_OK(run(*q, cb));
    emu::EngineStats st;
    ASSERT_OK_AND_ASSIGN(st, dev->engine_stats(0, 0));
    EXPECT_EQ(st.hdp_flushes, p.hdp_flush ? 3u : 0u);
    EXPECT_EQ(st.cache_ops, p.gcr ? 6u : 0u);

    // Reservations are framed too.
    {
      auto r = q->reserve(64, long_deadline());
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      ASSERT_OK(r->commands().copy(b.va, a.va, 64));
      QueueSpan span;
      ASSERT_OK(r->commit(&span));
      ASSERT_OK(q->wait_done(long_deadline(), span.end));
    }
    ASSERT_OK_AND_ASSIGN(st, dev->engine_stats(0, 0));
    EXPECT_EQ(st.hdp_flushes, p.hdp_flush ? 4u : 0u);
    EXPECT_EQ(st.cache_ops, p.gcr ? 8u : 0u);

    // The packet stream, as the engine will fetch it.
    ASSERT_OK(dev->inject(0, 0, emu::Injection{.stall = true}));
    ASSERT_OK(q->submit(cb, long_deadline()));
    const std::string d = q->diagnose();
    size_t at = 0;
    auto next = [&](const std::string& what) {
      const size_t i = d.find("\n  @", at);
      if (i == std::string::npos) return std::string("<end>");
      at = i + 4;
      const size_t colon = d.find(": ", at);
      return d.substr(colon + 2, what.size());
    };
    if (p.hdp_flush) {
      EXPECT_EQ(next("poll_reg req=0x80000000"), "poll_reg req=0x80000000") << d;
    }
    if (p.gcr) {
      EXPECT_EQ(next("gcr_user control=0xc3c0"), "gcr_user control=0xc3c0") << d;
    }
    EXPECT_EQ(next("copy "), "copy ") << d;
    if (p.gcr) {
      EXPECT_EQ(next("gcr_user control=0x8040"), "gcr_user control=0x8040") << d;
    }
    EXPECT_EQ(next("fence addr="), "fence addr=") << d;
    ASSERT_OK(dev->inject(0, 0, emu::Injection{}));
    ASSERT_OK(q->wait_done(long_deadline()));
  }
}

emu::Injection early_rptr_with_delay() {
  emu::Injection inj;
  inj.delay = std::chrono::milliseconds(5);
  inj.early_rptr = true;
  return inj;
}

// Issue #14, defect 5: the engine's read pointer reports what it fetched.
// With an engine that writes rptr back before the work lands (as hardware
// may), a queue that took rptr >= end as "done" returns before the copy
// finished. Completion must come from the sequence FENCE.
TEST(SubmitFrame, ReadPointerAheadOfTheDataIsNotCompletion) {
  std::unique_ptr<emu::EmuDevice> dev;
  ASSERT_OK_AND_ASSIGN(dev, device_of("4.4.2"));
  std::unique_ptr<Queue> q;
  ASSERT_OK_AND_ASSIGN(q, make_queue(*dev, 0, 0, 1 << 16));
  constexpr size_t kBytes = 1 << 16;
  Buffer src, dst;
  ASSERT_OK_AND_ASSIGN(src, dev->alloc(-1, kBytes, MemKind::host));
  ASSERT_OK_AND_ASSIGN(dst, dev->alloc(0, kBytes, MemKind::device));
  std::mt19937_64 rng(14);
  ASSERT_OK(dev->inject(0, 0, early_rptr_with_delay()));
  for (int round = 0; round < 3; ++round) {
    fill_random(src.host, kBytes, rng);
    CommandBuffer cb = q->command_buffer();
    ASSERT_OK(cb.copy(dst.va, src.va, kBytes));
    QueueSpan span;
    ASSERT_OK(q->submit(cb, long_deadline(), &span));
    ASSERT_OK(q->wait_done(long_deadline(), span.end));
    ASSERT_TRUE(bytes_equal(dst.host, src.host, kBytes)) << "wait_done returned before the copy landed";
  }
  ASSERT_OK(dev->inject(0, 0, emu::Injection{}));
}

}  // namespace
}  // namespace conccl
