// tests/collectives/collectives_control_test.cpp - prelaunch, argument
// errors, busy plans, the automatic variant rule, hang diagnosis, which
// engines plans use (including engine_for's round-robin fallback, on a device
// whose links recommend no engine), one- and two-rank communicators, and the
// b2b_ways / striped engines / chain_chunks options.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "collectives/coll_fixture.hpp"
#include "collectives/builder.hpp"
#include "packets/hopper_ce.hpp"
#include "util/env.hpp"

namespace conccl {
namespace {

using namespace conccl::coltest;

constexpr uint64_t K = 1024, M = 1024 * 1024;

std::unique_ptr<Plan> must_plan(Communicator& comm, const CollectiveArgs& a) {
  Result<std::unique_ptr<Plan>> p = comm.plan(a);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(p).value() : nullptr;
}

// The list of `plan` on (rank, engine), or null.
const PlanList* find_list(const Plan& plan, int rank, int engine) {
  for (const PlanList& l : plan.lists())
    if (l.rank == rank && l.engine == engine) return &l;
  return nullptr;
}

// ---------------------------------------------------------------- variant table

// Every variant has one name that parses back to it; every op accepts
// automatic first and has a builder for each other variant it accepts, and
// none for a variant it refuses; a capability a variant needs is named when
// the engines lack it and not otherwise.
TEST(VariantTable, NamesBuildersAndCapabilitiesAgree) {
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(Variant::single); ++i) {
    const Variant v = static_cast<Variant>(i);
    const std::string name = variant_name(v);
    ASSERT_NE(name, "?") << "variant " << i << " has no row";
    EXPECT_TRUE(names.insert(name).second) << name << " names two variants";
    Variant back{};
    ASSERT_TRUE(parse_variant(name, &back)) << name;
    EXPECT_EQ(back, v) << name;
  }
  Variant none{};
  EXPECT_FALSE(parse_variant("ring", &none));
  EXPECT_STREQ(variant_name(static_cast<Variant>(200)), "?");
  for (CollOp op : {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                    CollOp::all_to_all}) {
    const std::vector<Variant> ok = variants_for(op);
    ASSERT_GE(ok.size(), 2u) << coll_op_name(op);
    EXPECT_EQ(ok.front(), Variant::automatic);
    EXPECT_EQ(variant_builder(op, Variant::automatic), nullptr);
    for (int i = 1; i <= static_cast<int>(Variant::single); ++i) {
      const Variant v = static_cast<Variant>(i);
      const bool accepted = std::find(ok.begin(), ok.end(), v) != ok.end();
      EXPECT_EQ(variant_builder(op, v) != nullptr, accepted) << coll_op_name(op) << " " << variant_name(v);
    }
  }
  Caps none_caps, all_caps;
  all_caps.broadcast_copy = all_caps.swap = true;
  EXPECT_NE(variant_missing_cap(Variant::bcst, none_caps).find("Caps::broadcast_copy"), std::string::npos);
  EXPECT_NE(variant_missing_cap(Variant::swap, none_caps).find("Caps::swap"), std::string::npos);
  EXPECT_EQ(variant_missing_cap(Variant::pcpy, none_caps), "");
  EXPECT_EQ(variant_missing_cap(Variant::bcst, all_caps), "");
  EXPECT_EQ(variant_missing_cap(Variant::swap, all_caps), "");
}

// ---------------------------------------------------------------- prelaunch

// The node of the prelaunch and hang-diagnosis tests: three ranks on GPUs
// 5, 1 and 6 of the MI300X-like preset.
class Mapped3Node : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(make_node(Topo::mapped3, &node_)); }
  Node node_;
};

using CollPrelaunch = Mapped3Node;

// Every op and variant compiled with prelaunch: prelaunch() queues every list
// behind the trigger and nothing moves until release(); launch() of such a
// plan is prelaunch + release in one.
TEST_F(CollPrelaunch, NothingMovesUntilRelease) {
  Communicator& comm = *node_.comm;
  const int n = comm.size();
  for (CollOp op : {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                    CollOp::all_to_all})
    for (Variant v : variants_for(op)) {
      SCOPED_TRACE(op_variant(op, v));
      Mem mem(*node_.dev, 0x9E1A + static_cast<uint64_t>(op) * 16 + static_cast<uint64_t>(v));
      CollectiveArgs a;
      a.op = op;
      a.variant = v;
      a.bytes = kTsan ? 1001 : 40009;
      a.root = 2;
      a.peer = 0;
      a.prelaunch = true;
      make_buffers(mem, comm, a, Form::separate);
      std::unique_ptr<Plan> plan = must_plan(comm, a);
      ASSERT_TRUE(plan);
      if (v == Variant::automatic) {
        EXPECT_EQ(plan->variant(), choose_variant(op, a.bytes, n, comm.caps(), /*prelaunch=*/true));
      }
      for (int round = 0; round < 3; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        mem.refill();
        const Mem::Image before = mem.snapshot();
        const Mem::Image want = expected_after(mem, before, a, n);
        if (round == 1) {
          // launch() = prelaunch + release.
          ASSERT_OK(plan->launch(long_deadline()));
        } else {
          ASSERT_OK(plan->prelaunch(long_deadline()));
          // Give the engines time to (wrongly) run ahead.
          std::this_thread::sleep_for(std::chrono::milliseconds(round == 0 ? 20 : 2));
          EXPECT_TRUE(plan->running());
          for (int r = 0; r < n; ++r) EXPECT_EQ(plan->arrival(r).value(), 0u) << "rank " << r;
          ASSERT_TRUE(mem.matches(before)) << "data moved before release()";
          // Still gated: a second prelaunch, a launch and a wait are refused.
          ASSERT_CODE(plan->prelaunch(long_deadline()), Code::busy);
          ASSERT_CODE(plan->launch(long_deadline()), Code::busy);
          ASSERT_CODE(plan->wait(Deadline::after_ms(10)), Code::invalid_argument);
          ASSERT_TRUE(mem.matches(before));
          ASSERT_OK(plan->release());
        }
        ASSERT_OK(wait_done(*plan));
        EXPECT_FALSE(plan->running());
        ASSERT_TRUE(mem.matches(want));
      }
      // release() with nothing prelaunched is an error.
      Status st = plan->release();
      EXPECT_EQ(st.code(), Code::invalid_argument) << st.to_string();
      EXPECT_TRUE(contains(st.message(), "without prelaunch")) << st.message();
    }
}

TEST_F(CollPrelaunch, ReleaseWithoutPrelaunchAndPrelaunchOfAPlainPlanAreErrors) {
  Communicator& comm = *node_.comm;
  Mem mem(*node_.dev, 5);
  CollectiveArgs a = separate_args(mem, comm, CollOp::all_gather, Variant::pcpy, 999);

  // A prelaunch plan never launched: release() is an error, nothing moves.
  a.prelaunch = true;
  std::unique_ptr<Plan> gated = must_plan(comm, a);
  ASSERT_TRUE(gated);
  const Mem::Image before = mem.snapshot();
  Status st = gated->release();
  EXPECT_EQ(st.code(), Code::invalid_argument) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "release() without prelaunch()")) << st.message();
  ASSERT_CODE(gated->wait(Deadline::after_ms(10)), Code::invalid_argument);  // never launched
  EXPECT_FALSE(gated->running());

  // A plan compiled without prelaunch: prelaunch() is an error and submits
  // nothing; release() too.
  a.prelaunch = false;
  std::unique_ptr<Plan> plain = must_plan(comm, a);
  ASSERT_TRUE(plain);
  std::map<const Queue*, uint64_t> wptr;
  for (const PlanList& l : plain->lists()) wptr[l.queue] = l.queue->submitted();
  st = plain->prelaunch(long_deadline());
  EXPECT_EQ(st.code(), Code::invalid_argument) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "without prelaunch")) << st.message();
  EXPECT_TRUE(contains(st.message(), "CollectiveArgs::prelaunch")) << st.message();
  EXPECT_EQ(plain->release().code(), Code::invalid_argument);
  for (const auto& [q, w] : wptr) EXPECT_EQ(q->submitted(), w) << "queue on gpu " << q->gpu() << " engine " << q->engine();
  EXPECT_FALSE(plain->running());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(mem.matches(before));

  // Both still work normally afterwards.
  const Mem::Image want = expected_after(mem, before, a, comm.size());
  ASSERT_OK(plain->launch(long_deadline()));
  ASSERT_OK(wait_done(*plain));
  ASSERT_TRUE(mem.matches(want));
  ASSERT_OK(gated->prelaunch(long_deadline()));
  ASSERT_OK(gated->release());
  ASSERT_OK(wait_done(*gated));
  ASSERT_TRUE(mem.matches(want));  // same sources: same result

  // The coordinated end of a launch is for ranks in separate processes; in
  // one process wait_here() is wait(), and nothing is ever unwaited.
  ASSERT_OK(plain->launch(long_deadline()));
  ASSERT_OK(plain->wait_here(long_deadline()));
  EXPECT_FALSE(plain->running());
  EXPECT_FALSE(plain->unwaited());
  st = plain->end_launch_known_done();
  EXPECT_EQ(st.code(), Code::invalid_argument) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "separate processes")) << st.message();
  ASSERT_TRUE(mem.matches(want));
}

// ------------------------------------------------------------------- errors

class CollErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(make_node(Topo::mapped3, &node_));
    mem_ = std::make_unique<Mem>(*node_.dev, 0xE770);
    // Every queue the communicator could use exists up front, so "nothing
    // submitted" can be checked on all of them.
    Communicator& comm = *node_.comm;
    for (int r = 0; r < comm.size(); ++r)
      for (const EngineInfo& e : node_.dev->topology().gpus[static_cast<size_t>(comm.gpu(r))].engines) {
        Result<Queue*> q = comm.queue(r, e.id);
        ASSERT_TRUE(q.ok()) << q.status().to_string();
        queues_.push_back(*q);
      }
  }
  void TearDown() override { mem_.reset(); }

  CollectiveArgs args(CollOp op, Variant v, uint64_t bytes, int root = 0) {
    return separate_args(*mem_, *node_.comm, op, v, bytes, root);
  }

  // plan(a) fails with `code` and a message containing every `needle`;
  // nothing was submitted to any queue and no byte of memory changed.
  void expect_rejected(const CollectiveArgs& a, Code code, std::vector<std::string> needles) {
    std::vector<uint64_t> w;
    for (Queue* q : queues_) w.push_back(q->submitted());
    const Mem::Image before = mem_->snapshot();
    Result<std::unique_ptr<Plan>> p = node_.comm->plan(a);
    ASSERT_FALSE(p.ok()) << "plan was accepted";
    EXPECT_EQ(p.status().code(), code) << p.status().to_string();
    for (const std::string& s : needles)
      EXPECT_TRUE(contains(p.status().message(), s)) << "missing '" << s << "' in: " << p.status().message();
    for (size_t i = 0; i < queues_.size(); ++i) EXPECT_EQ(queues_[i]->submitted(), w[i]) << "queue " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_TRUE(mem_->matches(before));
  }

  Node node_;
  std::unique_ptr<Mem> mem_;
  std::vector<Queue*> queues_;
};

TEST_F(CollErrors, ZeroBytes) {
  CollectiveArgs a = args(CollOp::all_gather, Variant::pcpy, 64);
  a.bytes = 0;
  expect_rejected(a, Code::invalid_argument, {"allgather", "bytes is 0"});
}

TEST_F(CollErrors, OverlappingDestinations) {
  // recv[1] starts one byte into recv[0].
  CollectiveArgs a = args(CollOp::all_gather, Variant::pcpy, 100);
  const Buffer big = mem_->alloc(node_.comm->gpu(0), 3 * 100 + 1);
  a.recv[0] = Mem::sub(big, 0, 300);
  a.recv[1] = Mem::sub(big, 1, 300);
  expect_rejected(a, Code::invalid_argument, {"destinations overlap", "rank 0", "rank 1"});
  // Broadcast: two ranks share one recv buffer.
  CollectiveArgs b = args(CollOp::broadcast, Variant::fanout, 100);
  b.recv[2] = b.recv[1];
  expect_rejected(b, Code::invalid_argument, {"destinations overlap"});
  // Scatter: two ranks' recv overlap by their last/first byte.
  CollectiveArgs c = args(CollOp::scatter, Variant::fanout, 100);
  const Buffer two = mem_->alloc(node_.comm->gpu(1), 199);
  c.recv[1] = Mem::sub(two, 0, 100);
  c.recv[2] = Mem::sub(two, 99, 100);
  expect_rejected(c, Code::invalid_argument, {"destinations overlap"});
}

TEST_F(CollErrors, DestinationOverlapsASource) {
  // all_gather: send[1] lies inside recv[0], but not as the in-place form.
  CollectiveArgs a = args(CollOp::all_gather, Variant::bcst, 100);
  a.send[1] = Mem::sub(a.recv[0], 0, 100);
  expect_rejected(a, Code::invalid_argument, {"overlaps a source", "separate send and recv"});
  // all_gather: send[r] == recv[r] but at the wrong offset (in place is recv[r] + r*bytes).
  CollectiveArgs b = args(CollOp::all_gather, Variant::pcpy, 100);
  b.send[2] = Mem::sub(b.recv[2], 0, 100);
  expect_rejected(b, Code::invalid_argument, {"overlaps a source"});
  // broadcast: the root's send overlaps half of another rank's recv.
  CollectiveArgs c = args(CollOp::broadcast, Variant::chain, 100);
  const Buffer span = mem_->alloc(node_.comm->gpu(1), 150);
  c.recv[1] = Mem::sub(span, 0, 100);
  c.send[0] = Mem::sub(span, 50, 100);
  expect_rejected(c, Code::invalid_argument, {"overlaps a source"});
  // p2p: recv[peer] overlaps send[root] by one byte.
  CollectiveArgs d = args(CollOp::p2p, Variant::single, 100);
  const Buffer both = mem_->alloc(node_.comm->gpu(1), 199);
  d.send[0] = Mem::sub(both, 0, 100);
  d.recv[1] = Mem::sub(both, 99, 100);
  expect_rejected(d, Code::invalid_argument, {"overlaps a source"});
}

TEST_F(CollErrors, InPlaceAllToAllNeedsSwap) {
  for (Variant v : {Variant::pcpy, Variant::b2b}) {
    SCOPED_TRACE(variant_name(v));
    CollectiveArgs a = args(CollOp::all_to_all, v, 100);
    a.send = a.recv;
    expect_rejected(a, Code::invalid_argument, {"overlaps a source", "swap"});
  }
}

TEST_F(CollErrors, UnmappedBuffers) {
  // A made-up address nowhere near any memory.
  CollectiveArgs a = args(CollOp::all_gather, Variant::pcpy, 100);
  a.recv[1].va = 0xdead0000;
  a.recv[1].host = nullptr;
  expect_rejected(a, Code::invalid_argument, {"recv[1]", "0xdead0000", "not mapped"});
  // In a GPU's window but past its memory.
  CollectiveArgs b = args(CollOp::broadcast, Variant::bcst, 100, 1);
  const int g = node_.comm->gpu(1);
  b.send[1].va = emu::kGpuVaBase + uint64_t(g) * emu::kGpuVaStride + node_.dev->topology().gpus[size_t(g)].memory_bytes;
  b.send[1].host = nullptr;
  expect_rejected(b, Code::invalid_argument, {"send[1]", "not mapped"});
  // A buffer whose end runs past the memory.
  CollectiveArgs c = args(CollOp::p2p, Variant::striped, 100);
  c.recv[1].va = emu::kGpuVaBase + uint64_t(node_.comm->gpu(1)) * emu::kGpuVaStride +
                 node_.dev->topology().gpus[size_t(node_.comm->gpu(1))].memory_bytes - 50;
  expect_rejected(c, Code::invalid_argument, {"recv[1]", "not mapped"});
}

TEST_F(CollErrors, MissingBuffer) {
  CollectiveArgs a = args(CollOp::broadcast, Variant::fanout, 100);
  a.recv[2] = Buffer{};
  expect_rejected(a, Code::invalid_argument, {"recv[2]", "missing"});
  CollectiveArgs b = args(CollOp::scatter, Variant::fanout, 100, 1);
  b.send[1] = Buffer{};
  expect_rejected(b, Code::invalid_argument, {"send[1]", "missing"});
}

TEST_F(CollErrors, MismatchedSizes) {
  CollectiveArgs a = args(CollOp::all_gather, Variant::b2b, 100);
  a.recv[2].size = 299;  // needs 3 * 100
  expect_rejected(a, Code::invalid_argument, {"mismatched sizes", "recv[2]", "299", "300"});
  CollectiveArgs b = args(CollOp::all_to_all, Variant::pcpy, 100);
  b.send[0].size = 100;
  expect_rejected(b, Code::invalid_argument, {"mismatched sizes", "send[0]"});
  CollectiveArgs c = args(CollOp::gather, Variant::pcpy, 100, 2);
  c.recv[2].size = 299;
  expect_rejected(c, Code::invalid_argument, {"mismatched sizes", "recv[2]"});
  CollectiveArgs d = args(CollOp::p2p, Variant::automatic, 100);
  d.recv[1].size = 99;
  expect_rejected(d, Code::invalid_argument, {"mismatched sizes", "recv[1]"});
}

TEST_F(CollErrors, WrongNumberOfBuffers) {
  CollectiveArgs a = args(CollOp::all_gather, Variant::pcpy, 100);
  a.send.pop_back();
  expect_rejected(a, Code::invalid_argument, {"one send and one recv Buffer per rank", "3 each", "got 2 and 3"});
  CollectiveArgs b = args(CollOp::all_to_all, Variant::swap, 100);
  b.recv.push_back(b.recv[0]);
  expect_rejected(b, Code::invalid_argument, {"got 3 and 4"});
  CollectiveArgs c = args(CollOp::p2p, Variant::single, 100);
  c.send.clear();
  c.recv.clear();
  expect_rejected(c, Code::invalid_argument, {"got 0 and 0"});
}

TEST_F(CollErrors, BufferOnAGpuOutsideTheCommunicator) {
  // The communicator is GPUs {5, 1, 6}; GPU 0's memory is not part of it.
  CollectiveArgs a = args(CollOp::all_gather, Variant::pcpy, 100);
  a.send[1] = mem_->alloc(0, 100);
  expect_rejected(a, Code::invalid_argument, {"send[1]", "GPU 0", "outside the communicator"});
  CollectiveArgs b = args(CollOp::all_to_all, Variant::swap, 100);
  b.recv[0] = mem_->alloc(7, 300);
  expect_rejected(b, Code::invalid_argument, {"recv[0]", "GPU 7", "outside the communicator"});
}

TEST_F(CollErrors, RootOrPeerOutsideTheCommunicator) {
  for (int root : {3, -1, 5}) {
    CollectiveArgs a = args(CollOp::broadcast, Variant::fanout, 100);
    a.root = root;
    expect_rejected(a, Code::invalid_argument, {"root rank " + std::to_string(root), "outside the communicator"});
  }
  CollectiveArgs g = args(CollOp::gather, Variant::pcpy, 100);
  g.root = 3;
  expect_rejected(g, Code::invalid_argument, {"root rank 3"});
  for (int peer : {3, -2}) {
    CollectiveArgs p = args(CollOp::p2p, Variant::single, 100);
    p.peer = peer;
    expect_rejected(p, Code::invalid_argument, {"peer rank " + std::to_string(peer), "outside the communicator"});
  }
}

TEST_F(CollErrors, VariantNotValidForTheOp) {
  const std::vector<std::pair<CollOp, Variant>> bad = {
      {CollOp::p2p, Variant::pcpy},          {CollOp::p2p, Variant::fanout},
      {CollOp::broadcast, Variant::pcpy},    {CollOp::broadcast, Variant::swap},
      {CollOp::gather, Variant::bcst},       {CollOp::gather, Variant::fanout},
      {CollOp::scatter, Variant::chain},     {CollOp::scatter, Variant::pcpy},
      {CollOp::all_gather, Variant::swap},   {CollOp::all_gather, Variant::striped},
      {CollOp::all_to_all, Variant::bcst},   {CollOp::all_to_all, Variant::single},
  };
  for (const auto& [op, v] : bad) {
    SCOPED_TRACE(op_variant(op, v));
    CollectiveArgs a = args(op, v, 100);
    expect_rejected(a, Code::invalid_argument, {std::string("variant '") + variant_name(v) + "' does not apply"});
  }
  // Every op accepts exactly the variants it lists.
  for (CollOp op : {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                    CollOp::all_to_all}) {
    const std::vector<Variant> ok = variants_for(op);
    EXPECT_EQ(ok.front(), Variant::automatic);
    for (Variant v : {Variant::automatic, Variant::pcpy, Variant::bcst, Variant::b2b, Variant::swap, Variant::fanout,
                      Variant::chain, Variant::striped, Variant::single}) {
      CollectiveArgs a = args(op, v, 64);
      Result<std::unique_ptr<Plan>> p = node_.comm->plan(a);
      const bool listed = std::find(ok.begin(), ok.end(), v) != ok.end();
      EXPECT_EQ(p.ok(), listed) << op_variant(op, v) << ": " << p.status().to_string();
    }
  }
}

TEST(CollErrorsGen6, SwapNeedsSwapLinear) {
  Node node;
  ASSERT_OK(make_node(Topo::mapped3, &node, "6"));
  ASSERT_EQ(node.comm->isa(0), Isa::sdma_gen(sdma::Gen::v6));
  ASSERT_FALSE(sdma::limits(sdma::Gen::v6).has_swap_linear);
  Mem mem(*node.dev, 6);
  CollectiveArgs a = separate_args(mem, *node.comm, CollOp::all_to_all, Variant::swap, 1000);
  const Mem::Image before = mem.snapshot();
  Result<std::unique_ptr<Plan>> p = node.comm->plan(a);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::invalid_argument);
  EXPECT_TRUE(contains(p.status().message(), "SWAP_LINEAR")) << p.status().message();
  EXPECT_TRUE(contains(p.status().message(), "SDMA 6")) << p.status().message();
  EXPECT_TRUE(mem.matches(before));

  // The same with in-place buffers; and every other variant runs on SDMA 6,
  // automatic never picking swap (at a size where 4.4.2 would).
  a.send = a.recv;
  EXPECT_EQ(node.comm->plan(a).status().code(), Code::invalid_argument);
  for (Variant v : {Variant::automatic, Variant::pcpy, Variant::b2b}) {
    SCOPED_TRACE(variant_name(v));
    Mem m2(*node.dev, 60 + static_cast<uint64_t>(v));
    // 100003 bytes a rank, total 300009: swap territory on 4.4.2
    CollectiveArgs b = separate_args(m2, *node.comm, CollOp::all_to_all, v, 100003);
    std::unique_ptr<Plan> plan = must_plan(*node.comm, b);
    ASSERT_TRUE(plan);
    EXPECT_NE(plan->variant(), Variant::swap);
    if (v == Variant::automatic) {
      EXPECT_EQ(plan->variant(), Variant::pcpy);
    }
    launch_and_verify(m2, *plan, node.comm->size(), 2);
  }
  // all_gather bcst (COPY broadcast exists on every generation) runs too.
  Mem m3(*node.dev, 66);
  CollectiveArgs c = separate_args(m3, *node.comm, CollOp::all_gather, Variant::bcst, 4093);
  std::unique_ptr<Plan> plan = must_plan(*node.comm, c);
  ASSERT_TRUE(plan);
  launch_and_verify(m3, *plan, node.comm->size(), 2);
}

TEST(CollCommunicator, CreateRejectsBadGpuLists) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(Topo::mi300x8));
  struct Bad {
    std::vector<int> gpus;
    std::vector<std::string> needles;
  };
  const std::vector<Bad> bad = {
      {{1, 2, 1}, {"GPU 1 given twice"}},
      {{3, 3}, {"GPU 3 given twice"}},
      {{0, 8}, {"GPU 8 does not exist", "0..7"}},
      {{-1, 0}, {"GPU -1 does not exist"}},
      {{}, {"at least one GPU"}},
  };
  for (const Bad& b : bad) {
    Result<std::unique_ptr<Communicator>> c = Communicator::create(*dev, b.gpus);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), Code::invalid_argument);
    for (const std::string& s : b.needles)
      EXPECT_TRUE(contains(c.status().message(), s)) << "missing '" << s << "' in: " << c.status().message();
  }
  Communicator::Options o;
  o.ring_bytes = 5000;
  EXPECT_EQ(Communicator::create(*dev, {0, 1}, o).status().code(), Code::invalid_argument);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> ok, Communicator::create(*dev, {7, 0, 3}));
  EXPECT_EQ(ok->size(), 3);
  EXPECT_EQ(ok->gpu(0), 7);
  EXPECT_EQ(ok->rank_of_gpu(3), 2);
  EXPECT_EQ(ok->rank_of_gpu(1), -1);
}

// --------------------------------------------------------------------- busy

TEST(CollBusy, LaunchWhileThePreviousLaunchRunsIsRefused) {
  Node node;
  ASSERT_OK(make_node(Topo::mapped3, &node));
  Communicator& comm = *node.comm;
  Mem mem(*node.dev, 0xB05);
  for (bool prelaunch : {false, true}) {
    SCOPED_TRACE(prelaunch ? "prelaunch plan" : "plain plan");
    CollectiveArgs a = separate_args(mem, comm, CollOp::all_gather, Variant::pcpy, 4093);
    a.prelaunch = prelaunch;
    std::unique_ptr<Plan> plan = must_plan(comm, a);
    ASSERT_TRUE(plan);
    // Stall the engine of rank 0's copy to rank 2.
    const int eng = comm.engine_for(0, 2);
    ASSERT_NE(find_list(*plan, 0, eng), nullptr);
    mem.refill();
    const Mem::Image before = mem.snapshot();
    const Mem::Image want = expected_after(mem, before, a, comm.size());
    ASSERT_OK(node.dev->inject(comm.gpu(0), eng, emu::Injection{.stall = true}));
    ASSERT_OK(plan->launch(long_deadline()));
    EXPECT_TRUE(plan->running());

    std::map<const Queue*, uint64_t> w;
    for (const PlanList& l : plan->lists()) w[l.queue] = l.queue->submitted();
    Status st = plan->launch(long_deadline());
    EXPECT_EQ(st.code(), Code::busy) << st.to_string();
    EXPECT_TRUE(contains(st.message(), "still running")) << st.message();
    EXPECT_TRUE(contains(st.message(), "wait()")) << st.message();
    if (prelaunch) {
      st = plan->prelaunch(long_deadline());
      EXPECT_EQ(st.code(), Code::busy) << st.to_string();
    }
    for (const auto& [q, wp] : w) EXPECT_EQ(q->submitted(), wp) << "a refused launch submitted to gpu " << q->gpu()
                                                           << " engine " << q->engine();
    EXPECT_TRUE(plan->running());

    ASSERT_OK(node.dev->inject(comm.gpu(0), eng, emu::Injection{}));
    ASSERT_OK(wait_done(*plan));
    EXPECT_FALSE(plan->running());
    ASSERT_TRUE(mem.matches(want));
    // And it launches again once done.
    launch_and_verify(mem, *plan, comm.size(), 1);
  }
}

// ----------------------------------------------------------- choose_variant

TEST(CollChooseVariant, AllGatherRule) {
  const Caps& g = caps(Isa::sdma_gen(sdma::Gen::v4_4_2));
  auto ag = [&](uint64_t bytes, int ranks, bool pre) { return choose_variant(CollOp::all_gather, bytes, ranks, g, pre); };
  // Totals (ranks * bytes): b2b <= 512 KiB, bcst <= 4 MiB, pcpy above.
  EXPECT_EQ(ag(1, 8, false), Variant::b2b);
  EXPECT_EQ(ag(64 * K, 8, false), Variant::b2b);
  EXPECT_EQ(ag(64 * K + 1, 8, false), Variant::bcst);
  EXPECT_EQ(ag(512 * K, 8, false), Variant::bcst);
  EXPECT_EQ(ag(512 * K + 1, 8, false), Variant::pcpy);
  EXPECT_EQ(ag(64 * M, 8, false), Variant::pcpy);
  // With prelaunch: b2b <= 128 KiB, bcst <= 256 KiB.
  EXPECT_EQ(ag(16 * K, 8, true), Variant::b2b);
  EXPECT_EQ(ag(16 * K + 1, 8, true), Variant::bcst);
  EXPECT_EQ(ag(32 * K, 8, true), Variant::bcst);
  EXPECT_EQ(ag(32 * K + 1, 8, true), Variant::pcpy);
  // The total counts, not the chunk: 3 ranks of 170 KiB = 510 KiB.
  EXPECT_EQ(ag(170 * K, 3, false), Variant::b2b);
  EXPECT_EQ(ag(171 * K, 3, false), Variant::bcst);
  // The generation does not matter for all-gather.
  EXPECT_EQ(choose_variant(CollOp::all_gather, 100 * K, 8, caps(Isa::sdma_gen(sdma::Gen::v6)), false), Variant::bcst);
}

// Hopper (a store beats an add): where b2b would run, one process pulls;
// ranks in several processes keep b2b (pull reads other processes' send
// buffers); SDMA keeps b2b in one process too.
TEST(CollChooseVariant, SmallAllGathersOfOneProcessPullOnHopper) {
  const Caps& h = caps(Isa::hopper());
  ASSERT_TRUE(h.store_beats_add);
  auto ag = [&](uint64_t bytes, int ranks, bool pre, bool one) {
    return choose_variant(CollOp::all_gather, bytes, ranks, h, pre, true, one);
  };
  EXPECT_EQ(ag(1, 8, false, true), Variant::pull);
  EXPECT_EQ(ag(64 * K, 8, false, true), Variant::pull);
  EXPECT_EQ(ag(256 * K, 2, false, true), Variant::pull);
  EXPECT_EQ(ag(64 * K + 1, 8, false, true), Variant::pcpy);  // no broadcast copies on Hopper
  EXPECT_EQ(ag(16 * K, 8, true, true), Variant::pull);
  EXPECT_EQ(ag(16 * K + 1, 8, true, true), Variant::pcpy);
  EXPECT_EQ(ag(1, 8, false, false), Variant::b2b);
  EXPECT_EQ(ag(64 * K, 8, true, false), Variant::pcpy);
  const Caps& sdma = caps(Isa::sdma_gen(sdma::Gen::v4_4_2));
  EXPECT_FALSE(sdma.store_beats_add);
  EXPECT_EQ(choose_variant(CollOp::all_gather, 1, 8, sdma, false, true, true), Variant::b2b);
}

TEST(CollChooseVariant, AllToAllRule) {
  auto a2a = [](uint64_t bytes, int ranks, bool pre, sdma::Gen g = sdma::Gen::v4_4_2) {
    return choose_variant(CollOp::all_to_all, bytes, ranks, caps(Isa::sdma_gen(g)), pre);
  };
  // b2b <= 256 KiB total, swap <= 4 MiB, pcpy above.
  EXPECT_EQ(a2a(1, 8, false), Variant::b2b);
  EXPECT_EQ(a2a(32 * K, 8, false), Variant::b2b);
  EXPECT_EQ(a2a(32 * K + 1, 8, false), Variant::swap);
  EXPECT_EQ(a2a(512 * K, 8, false), Variant::swap);
  EXPECT_EQ(a2a(512 * K + 1, 8, false), Variant::pcpy);
  // With prelaunch: b2b <= 32 KiB, swap <= 2 MiB.
  EXPECT_EQ(a2a(4 * K, 8, true), Variant::b2b);
  EXPECT_EQ(a2a(4 * K + 1, 8, true), Variant::swap);
  EXPECT_EQ(a2a(256 * K, 8, true), Variant::swap);
  EXPECT_EQ(a2a(256 * K + 1, 8, true), Variant::pcpy);
  // Without SWAP_LINEAR, swap's range falls back to pcpy; b2b is unchanged.
  for (sdma::Gen g : {sdma::Gen::v4, sdma::Gen::v5, sdma::Gen::v5_2, sdma::Gen::v6, sdma::Gen::v7}) {
    SCOPED_TRACE(std::string(sdma::gen_name(g)));
    ASSERT_FALSE(sdma::limits(g).has_swap_linear);
    EXPECT_EQ(a2a(32 * K, 8, false, g), Variant::b2b);
    EXPECT_EQ(a2a(32 * K + 1, 8, false, g), Variant::pcpy);
    EXPECT_EQ(a2a(512 * K, 8, false, g), Variant::pcpy);
    EXPECT_EQ(a2a(4 * K + 1, 8, true, g), Variant::pcpy);
  }
}

TEST(CollChooseVariant, OtherOps) {
  const Caps& g = caps(Isa::sdma_gen(sdma::Gen::v4_4_2));
  EXPECT_EQ(choose_variant(CollOp::p2p, M - 1, 8, g, false), Variant::single);
  EXPECT_EQ(choose_variant(CollOp::p2p, M, 8, g, false), Variant::striped);
  EXPECT_EQ(choose_variant(CollOp::broadcast, 100 * M, 2, g, false), Variant::fanout);
  EXPECT_EQ(choose_variant(CollOp::broadcast, 512 * K, 8, g, false), Variant::bcst);
  EXPECT_EQ(choose_variant(CollOp::broadcast, 512 * K + 1, 8, g, false), Variant::chain);
  EXPECT_EQ(choose_variant(CollOp::gather, 1, 8, g, false), Variant::pcpy);
  EXPECT_EQ(choose_variant(CollOp::scatter, 1, 8, g, false), Variant::fanout);
  for (CollOp op : {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                    CollOp::all_to_all})
    for (uint64_t bytes : {uint64_t(1), 4 * K, M, 64 * M})
      for (bool pre : {false, true}) {
        const Variant v = choose_variant(op, bytes, 8, g, pre);
        EXPECT_NE(v, Variant::automatic);
        const std::vector<Variant> ok = variants_for(op);
        EXPECT_NE(std::find(ok.begin(), ok.end(), v), ok.end()) << op_variant(op, v);
      }
}

// A plan with `automatic` takes the rule's choice, prelaunch included.
TEST(CollChooseVariant, PlansFollowTheRule) {
  Node node;
  ASSERT_OK(make_node(Topo::mapped3, &node));
  Communicator& comm = *node.comm;
  struct C {
    CollOp op;
    uint64_t bytes;
    bool pre;
    Variant want;
  };
  const std::vector<C> cases = {
      {CollOp::all_gather, 50000, false, Variant::b2b},   // 150000 total
      {CollOp::all_gather, 50000, true, Variant::bcst},   // > 128 KiB with prelaunch
      {CollOp::all_gather, 90000, true, Variant::pcpy},   // > 256 KiB with prelaunch
      {CollOp::all_gather, 200000, false, Variant::bcst},
      {CollOp::all_to_all, 50000, false, Variant::b2b},
      {CollOp::all_to_all, 50000, true, Variant::swap},   // > 32 KiB with prelaunch
      {CollOp::all_to_all, 100003, false, Variant::swap},
      {CollOp::broadcast, 1000, false, Variant::bcst},
  };
  for (const C& c : cases) {
    SCOPED_TRACE(std::string(coll_op_name(c.op)) + " " + std::to_string(c.bytes) + (c.pre ? " prelaunch" : ""));
    ASSERT_EQ(choose_variant(c.op, c.bytes, 3, comm.caps(), c.pre), c.want);
    Mem mem(*node.dev, c.bytes);
    CollectiveArgs a = separate_args(mem, comm, c.op, Variant::automatic, c.bytes);
    a.prelaunch = c.pre;
    std::unique_ptr<Plan> plan = must_plan(comm, a);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->variant(), c.want);
    EXPECT_EQ(plan->args().variant, Variant::automatic);
    launch_and_verify(mem, *plan, comm.size(), 1);
  }
}

// --------------------------------------------------------- hang diagnosis

using CollDiagnosis = Mapped3Node;

TEST_F(CollDiagnosis, WaitTimeoutNamesTheStuckListAndItsPackets) {
  Communicator& comm = *node_.comm;
  Mem mem(*node_.dev, 0xD1A6);
  CollectiveArgs a = separate_args(mem, comm, CollOp::all_gather, Variant::pcpy, 4093);
  std::unique_ptr<Plan> plan = must_plan(comm, a);
  ASSERT_TRUE(plan);
  const Mem::Image want = expected_after(mem, mem.snapshot(), a, comm.size());

  // Rank 1 (GPU 1) sends to rank 2 (GPU 6) on the kernel's engine for 1 -> 6.
  const int eng = comm.engine_for(1, 2);
  ASSERT_EQ(eng, kMi300xRec[1][6]);
  const PlanList* stuck = find_list(*plan, 1, eng);
  ASSERT_NE(stuck, nullptr);
  ASSERT_OK(node_.dev->inject(comm.gpu(1), eng, emu::Injection{.stall = true}));
  ASSERT_OK(plan->launch(long_deadline()));
  // Let every other list finish, so only the stalled one is pending.
  for (const PlanList& l : plan->lists())
    if (&l != stuck) ASSERT_OK(l.queue->wait_done(long_deadline(), l.span.end));

  const auto t0 = Clock::now();
  Status st = plan->wait(Deadline::after_ms(60));
  const auto took = Clock::now() - t0;
  ASSERT_EQ(st.code(), Code::timeout) << st.to_string();
  EXPECT_LT(took, std::chrono::seconds(5));
  const std::string& m = st.message();
  EXPECT_TRUE(contains(m, "allgather (pcpy)")) << m;
  EXPECT_TRUE(contains(m, "rank 2 has")) << m;  // the rank still missing data
  EXPECT_TRUE(contains(m, "stuck list: rank 1 engine " + std::to_string(eng))) << m;
  EXPECT_TRUE(contains(m, "never fetched")) << m;
  EXPECT_TRUE(contains(m, "stalled")) << m;
  EXPECT_TRUE(contains(m, "pending packets")) << m;
  // The decoded copy into rank 2's chunk 1, and its arrival.
  EXPECT_TRUE(contains(m, "copy")) << m;
  EXPECT_TRUE(contains(m, hex(a.recv[2].va + a.bytes))) << m;
  EXPECT_TRUE(contains(m, "atomic")) << m;
  EXPECT_TRUE(plan->running());
  // Rank 2 has all but the stalled chunk.
  EXPECT_EQ(plan->arrival(2).value() + 1, plan->arrivals_expected(2));

  ASSERT_OK(node_.dev->inject(comm.gpu(1), eng, emu::Injection{}));
  ASSERT_OK(wait_done(*plan));
  EXPECT_FALSE(plan->running());
  ASSERT_TRUE(mem.matches(want));
}

// A chain broadcast stalled at its first link: the root's list is named (the
// later links are only waiting for it).
TEST_F(CollDiagnosis, ChainNamesTheFirstStuckLink) {
  Communicator& comm = *node_.comm;
  Mem mem(*node_.dev, 0xC4A1);
  CollectiveArgs a;
  a.op = CollOp::broadcast;
  a.variant = Variant::chain;
  a.bytes = 3 * 256 * 1024 + 5;
  a.root = 1;
  make_buffers(mem, comm, a, Form::separate);
  std::unique_ptr<Plan> plan = must_plan(comm, a);
  ASSERT_TRUE(plan);
  const Mem::Image want = expected_after(mem, mem.snapshot(), a, comm.size());
  const int eng = comm.engine_for(1, 2);
  ASSERT_NE(find_list(*plan, 1, eng), nullptr);
  ASSERT_NE(find_list(*plan, 2, comm.engine_for(2, 0)), nullptr);
  ASSERT_OK(node_.dev->inject(comm.gpu(1), eng, emu::Injection{.stall = true}));
  ASSERT_OK(plan->launch(long_deadline()));
  // The root's local copy finishes; the last link (2 -> 0) waits on a poll.
  const PlanList* local = find_list(*plan, 1, comm.engine_for(1, 1));
  ASSERT_NE(local, nullptr);
  ASSERT_OK(local->queue->wait_done(long_deadline(), local->span.end));
  Status st = plan->wait(Deadline::after_ms(80));
  ASSERT_EQ(st.code(), Code::timeout) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "broadcast (chain)")) << st.message();
  EXPECT_TRUE(contains(st.message(), "stuck list: rank 1 engine " + std::to_string(eng))) << st.message();
  EXPECT_TRUE(contains(st.message(), "pending packets")) << st.message();
  ASSERT_OK(node_.dev->inject(comm.gpu(1), eng, emu::Injection{}));
  ASSERT_OK(wait_done(*plan));
  ASSERT_TRUE(mem.matches(want));
}

// -------------------------------------------------------- engine selection

TEST(CollEngines, Mi300xFollowsTheKernelTable) {
  Node node;
  ASSERT_OK(make_node(Topo::mi300x8, &node));
  Communicator& comm = *node.comm;
  const Topology& topo = node.dev->topology();
  for (int s = 0; s < 8; ++s) {
    std::set<int> rec;
    for (int d = 0; d < 8; ++d) {
      if (d == s) continue;
      EXPECT_EQ(comm.engine_for(s, d), kMi300xRec[s][d]) << s << " -> " << d;
      EXPECT_EQ(comm.engine_for(s, d, 1), kMi300xRec[s][d]) << "one recommended engine: k wraps";
      const LinkInfo* l = topo.gpus[size_t(s)].link_to(d);
      ASSERT_NE(l, nullptr);
      ASSERT_EQ(l->recommended_engines, std::vector<int>{kMi300xRec[s][d]});
      const std::vector<int> toward = comm.engines_toward(s, d);
      ASSERT_FALSE(toward.empty());
      EXPECT_EQ(toward.front(), kMi300xRec[s][d]);
      EXPECT_EQ(toward.size(), 16u);
      EXPECT_EQ(std::set<int>(toward.begin(), toward.end()).size(), 16u) << "duplicates in engines_toward";
      rec.insert(kMi300xRec[s][d]);
    }
    EXPECT_EQ(rec.size(), 7u) << "each peer of GPU " << s << " has its own engine";
    // Local copies: an xGMI engine no peer link recommends.
    for (int k = 0; k < 7; ++k) {
      const int e = comm.engine_for(s, s, k);
      EXPECT_EQ(rec.count(e), 0u) << "local engine " << e << " of GPU " << s << " is a peer's";
      EXPECT_GE(e, 2) << "local copies stay off the PCIe engines";
      EXPECT_LT(e, 16);
    }
  }

  // pcpy all-gather: exactly the (rank, recommended engine) lists plus one
  // local-copy list per rank.
  Mem mem(*node.dev, 0xE6);
  CollectiveArgs a = separate_args(mem, comm, CollOp::all_gather, Variant::pcpy, 333);
  std::unique_ptr<Plan> plan = must_plan(comm, a);
  ASSERT_TRUE(plan);
  std::set<std::pair<int, int>> want, got;
  for (int s = 0; s < 8; ++s) {
    want.insert({s, comm.engine_for(s, s)});
    for (int d = 0; d < 8; ++d)
      if (d != s) want.insert({s, kMi300xRec[s][d]});
  }
  for (const PlanList& l : plan->lists()) {
    EXPECT_TRUE(got.insert({l.rank, l.engine}).second) << "two lists on rank " << l.rank << " engine " << l.engine;
    // Each peer list writes to exactly the peer whose recommended engine it is.
    if (l.engine != comm.engine_for(l.rank, l.rank)) {
      ASSERT_EQ(l.writes_to.size(), 1u);
      EXPECT_EQ(kMi300xRec[l.rank][l.writes_to[0]], l.engine);
    }
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(plan->lists().size(), 64u);
  launch_and_verify(mem, *plan, 8, 1);
}

TEST(CollEngines, MappedRanksUseTheirGpusTable) {
  Node node;
  ASSERT_OK(make_node(Topo::mapped3, &node));
  Communicator& comm = *node.comm;
  const int g[3] = {5, 1, 6};
  for (int s = 0; s < 3; ++s)
    for (int d = 0; d < 3; ++d)
      if (s != d) {
        EXPECT_EQ(comm.engine_for(s, d), kMi300xRec[g[s]][g[d]]) << s << " -> " << d;
      }
  Mem mem(*node.dev, 0x5A);
  CollectiveArgs a = separate_args(mem, comm, CollOp::all_gather, Variant::pcpy, 4093);
  std::unique_ptr<Plan> plan = must_plan(comm, a);
  ASSERT_TRUE(plan);
  std::set<std::pair<int, int>> want, got;
  for (int s = 0; s < 3; ++s) {
    want.insert({s, comm.engine_for(s, s)});
    for (int d = 0; d < 3; ++d)
      if (d != s) want.insert({s, kMi300xRec[g[s]][g[d]]});
  }
  for (const PlanList& l : plan->lists()) {
    got.insert({l.rank, l.engine});
    EXPECT_EQ(l.queue->gpu(), g[l.rank]);
  }
  EXPECT_EQ(got, want);
}

// A device whose links recommend no engine (as a backend without the KFD
// table would report): engine_for falls back to round robin over xGMI
// engines. Everything else is the emulated node underneath.
class NoRecommendations final : public Device {
 public:
  explicit NoRecommendations(Device& inner) : inner_(inner), topo_(inner.topology()) {
    for (GpuInfo& g : topo_.gpus)
      for (LinkInfo& l : g.links) l.recommended_engines.clear();
  }
  const Topology& topology() const override { return topo_; }
  Result<Buffer> alloc(int gpu, size_t bytes, MemKind kind) override { return inner_.alloc(gpu, bytes, kind); }
  Status free(const Buffer& b) override { return inner_.free(b); }
  Result<std::unique_ptr<Queue>> create_queue(int gpu, int engine, const QueueOptions& o) override {
    return inner_.create_queue(gpu, engine, o);
  }
  void* host_pointer(uint64_t va, size_t bytes) override { return inner_.host_pointer(va, bytes); }
  bool is_mapped(uint64_t va, size_t bytes) override { return inner_.is_mapped(va, bytes); }

 private:
  Device& inner_;
  Topology topo_;
};

TEST(CollEngines, RoundRobinWithoutRecommendations) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> emu_dev, make_device(Topo::small3));
  NoRecommendations dev(*emu_dev);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(dev, {2, 0, 1}));
  // 4 engines: 0-1 PCIe, 2-3 xGMI. Peer at distance d takes xGMI engine (d-1) mod 2.
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(comm->engine_for(s, (s + 1) % 3), 2);
    EXPECT_EQ(comm->engine_for(s, (s + 2) % 3), 3);
    EXPECT_EQ(comm->engine_for(s, (s + 1) % 3, 1), 3);
    EXPECT_EQ(comm->engine_for(s, s), 2);  // no link recommends anything: every xGMI engine is free
    EXPECT_EQ(comm->engine_for(s, s, 1), 3);
  }
  // Every variant still moves the right bytes on those engines.
  const int n = comm->size();
  for (CollOp op : {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                    CollOp::all_to_all})
    for (Variant v : variants_for(op)) {
      SCOPED_TRACE(op_variant(op, v));
      Mem mem(dev, 0x22 + static_cast<uint64_t>(op) * 16 + static_cast<uint64_t>(v));
      CollectiveArgs a;
      a.op = op;
      a.variant = v;
      a.bytes = 3001;
      a.root = 1;
      a.peer = 2;
      make_buffers(mem, *comm, a, Form::separate);
      std::unique_ptr<Plan> plan = must_plan(*comm, a);
      ASSERT_TRUE(plan);
      if (op != CollOp::p2p) {  // striped p2p may also use the PCIe engines
        for (const PlanList& l : plan->lists()) EXPECT_GE(l.engine, 2) << "rank " << l.rank;
      }
      launch_and_verify(mem, *plan, n, 2);
    }
}

TEST(CollEngines, SmallNodeSharesItsTwoXgmiEngines) {
  Node node;
  ASSERT_OK(make_node(Topo::small3, &node));
  Communicator& comm = *node.comm;
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(comm.engine_for(s, (s + 1) % 3), 2);
    EXPECT_EQ(comm.engine_for(s, (s + 2) % 3), 3);
    const int local = comm.engine_for(s, s);
    EXPECT_TRUE(local == 2 || local == 3) << local;  // every xGMI engine is some peer's: share one
  }
}

// ------------------------------------------------------- small communicators

// One and two ranks: every op and variant (with one rank, only local copies;
// with two, broadcast pairs degenerate to single copies).
TEST(CollSmallComms, OneAndTwoRanks) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(Topo::mi300x8));
  for (std::vector<int> gpus : {std::vector<int>{4}, std::vector<int>{6, 3}}) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, gpus));
    const int n = comm->size();
    for (CollOp op : {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                      CollOp::all_to_all})
      for (Variant v : variants_for(op))
        for (Form form : {Form::separate, Form::in_place}) {
          if (form == Form::in_place && (op == CollOp::p2p || (op == CollOp::all_to_all && v != Variant::swap)))
            continue;
          SCOPED_TRACE(std::to_string(n) + " ranks, " + op_variant(op, v) +
                       (form == Form::in_place ? " in place" : ""));
          Mem mem(*dev, 0x12 + static_cast<uint64_t>(op) * 16 + static_cast<uint64_t>(v));
          CollectiveArgs a;
          a.op = op;
          a.variant = v;
          a.bytes = 1027;
          a.root = n - 1;
          a.peer = 0;
          make_buffers(mem, *comm, a, form);
          Result<std::unique_ptr<Plan>> plan = comm->plan(a);
          ASSERT_TRUE(plan.ok()) << plan.status().to_string();
          launch_and_verify(mem, **plan, n, 2);
        }
  }
}

// ------------------------------------------------------------------ options

// b2b_ways, p2p striped `engines`, chain_chunks.
TEST(CollOptions, WaysEnginesAndChunks) {
  Node node;
  ASSERT_OK(make_node(Topo::mi300x8, &node));
  Communicator& comm = *node.comm;
  const int n = comm.size();
  for (CollOp op : {CollOp::all_gather, CollOp::all_to_all})
    for (int ways : {1, 2, 3, 7, 9}) {
      SCOPED_TRACE(std::string(coll_op_name(op)) + " b2b_ways=" + std::to_string(ways));
      Mem mem(*node.dev, 0xB2B + static_cast<uint64_t>(ways));
      CollectiveArgs a = separate_args(mem, comm, op, Variant::b2b, 2049);
      a.b2b_ways = ways;
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm.plan(a));
      // Per rank: one local list plus ceil(7 / ways) peer lists (fewer only
      // if two groups' first peers share an engine).
      std::map<int, int> per_rank;
      for (const PlanList& l : plan->lists()) per_rank[l.rank]++;
      const int w = std::min(ways, n - 1);
      for (int r = 0; r < n; ++r) EXPECT_LE(per_rank[r], 1 + (n - 1 + w - 1) / w) << "rank " << r;
      launch_and_verify(mem, *plan, n, 2);
    }
  for (int engines : {1, 2, 3, 16}) {
    SCOPED_TRACE("p2p striped engines=" + std::to_string(engines));
    Mem mem(*node.dev, 0x5 + static_cast<uint64_t>(engines));
    CollectiveArgs a;
    a.op = CollOp::p2p;
    a.variant = Variant::striped;
    a.bytes = 1 << 20;
    a.root = 3;
    a.peer = 6;
    a.engines = engines;
    make_buffers(mem, comm, a, Form::separate);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm.plan(a));
    EXPECT_EQ(plan->lists().size(), static_cast<size_t>(engines));
    EXPECT_EQ(plan->lists().front().engine, kMi300xRec[3][6]) << "the recommended engine first";
    launch_and_verify(mem, *plan, n, 2);
  }
  for (int chunks : {1, 3, 16}) {
    SCOPED_TRACE("chain_chunks=" + std::to_string(chunks));
    Mem mem(*node.dev, 0xC + static_cast<uint64_t>(chunks));
    CollectiveArgs a;
    a.op = CollOp::broadcast;
    a.variant = Variant::chain;
    a.bytes = 100003;
    a.root = 5;
    a.chain_chunks = chunks;
    make_buffers(mem, comm, a, Form::separate);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm.plan(a));
    for (int r = 0; r < n; ++r) {
      const uint64_t want = r == a.root ? 1 : static_cast<uint64_t>(chunks);  // the root's local copy
      EXPECT_EQ(plan->arrivals_expected(r), want) << "rank " << r;
    }
    launch_and_verify(mem, *plan, n, 2);
  }
}

// A lost completion (the arrival's write dropped): wait() times out and says
// the completion was lost rather than naming a stuck list.
TEST_F(CollDiagnosis, LostCompletion) {
  Communicator& comm = *node_.comm;
  Mem mem(*node_.dev, 0x10C7);
  CollectiveArgs a = separate_args(mem, comm, CollOp::all_gather, Variant::pcpy, 100);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm.plan(a));
  const int eng = comm.engine_for(0, 2);
  ASSERT_OK(node_.dev->inject(comm.gpu(0), eng, emu::Injection{.drop_completions = 2}));  // both words of the signal add
  ASSERT_OK(plan->launch(long_deadline()));
  for (const PlanList& l : plan->lists()) ASSERT_OK(l.queue->wait_done(long_deadline(), l.span.end));
  Status st = plan->wait(Deadline::after_ms(50));
  ASSERT_EQ(st.code(), Code::timeout) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "rank 2")) << st.message();
  EXPECT_TRUE(contains(st.message(), "completion write lost")) << st.message();
  EXPECT_TRUE(plan->running());
  ASSERT_OK(node_.dev->inject(comm.gpu(0), eng, emu::Injection{}));
}

}  // namespace
}  // namespace conccl

// ------------------------------------------------- one layer, several ISAs

namespace conccl {
namespace {

using namespace conccl::coltest;

TEST(CollHopper, VariantsNeedTheirCapability) {
  Node node;
  ASSERT_OK(make_node(Topo::h200loop4, &node));
  EXPECT_FALSE(node.comm->caps().broadcast_copy);
  EXPECT_FALSE(node.comm->caps().swap);
  Mem mem(*node.dev, 5);
  for (auto [op, v] : {std::pair{CollOp::all_gather, Variant::bcst}, std::pair{CollOp::broadcast, Variant::bcst},
                       std::pair{CollOp::all_to_all, Variant::swap}}) {
    SCOPED_TRACE(op_variant(op, v));
    CollectiveArgs a = separate_args(mem, *node.comm, op, v, 4096);
    Result<std::unique_ptr<Plan>> p = node.comm->plan(a);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), Code::invalid_argument);
    EXPECT_TRUE(contains(p.status().message(), "Hopper CE")) << p.status().message();
    EXPECT_TRUE(contains(p.status().message(), v == Variant::bcst ? "broadcast copies" : "swaps"))
        << p.status().message();
  }
  // The automatic rule never picks them where they do not exist.
  const Caps& hc = caps(Isa::hopper());
  for (CollOp op : {CollOp::broadcast, CollOp::all_gather, CollOp::all_to_all})
    for (uint64_t bytes : {uint64_t(1), 4 * K, 64 * K, M, 64 * M})
      for (bool pre : {false, true}) {
        const Variant v = choose_variant(op, bytes, 8, hc, pre);
        EXPECT_TRUE(variant_missing_cap(v, hc).empty()) << op_variant(op, v) << " at " << bytes;
      }
  EXPECT_EQ(choose_variant(CollOp::broadcast, 64 * K, 4, hc, false), Variant::fanout);
  EXPECT_EQ(choose_variant(CollOp::all_gather, 256 * K, 4, hc, false), Variant::pcpy);
}

TEST(CollHopper, PlansAreHopperMethods) {
  Node node;
  ASSERT_OK(make_node(Topo::h200loop4, &node));
  Mem mem(*node.dev, 6);
  // kSpreadMaxBytes + 1000: engines by weight (smaller plans spread: the next test)
  CollectiveArgs a = separate_args(mem, *node.comm, CollOp::all_gather, Variant::pcpy, kSpreadMaxBytes + 1000);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, node.comm->plan(a));
  const std::string text = plan->describe();
  EXPECT_TRUE(contains(text, "copy.launch_dma")) << text;
  EXPECT_TRUE(contains(text, "host.sem_execute")) << text;
  EXPECT_FALSE(contains(text, "atomic_add64")) << text;
  // Engines are taken in proportion to their PCEs: LCE4 (12) serves more
  // peers than LCE2 and LCE3 (2 each).
  std::map<int, int> copies_per_engine;
  for (const PlanList& l : plan->lists()) copies_per_engine[l.engine] += static_cast<int>(l.writes_to.size());
  EXPECT_GT(copies_per_engine[4], copies_per_engine[2]) << text;
  launch_and_verify(mem, *plan, node.comm->size(), 2);
}

// The same layout on SDMA lists (issue #28 asks it of both lowerings): a
// list's copies, then its arrivals (an ATOMIC add on the twin and one on the
// value per destination), nothing between the copies.
TEST(CollSdma, ArrivalsFollowTheCopies) {
  Node node;
  ASSERT_OK(make_node(Topo::mi300x8, &node));
  // Four ranks on one MI300X: each rank's small list holds its local copy
  // and its copies to the three peers.
  Communicator::Options o;
  o.loopback = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*node.dev, {0, 0, 0, 0}, o));
  Mem mem(*node.dev, 6);
  const CollectiveArgs a = separate_args(mem, *comm, CollOp::all_gather, Variant::pcpy, 1000);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
  ASSERT_EQ(plan->lists().size(), 4u) << plan->describe();
  for (const PlanList& l : plan->lists()) {
    const std::string text = l.cb.disassemble();
    const size_t first_add = text.find("atomic_add64");
    ASSERT_NE(first_add, std::string::npos) << text;
    EXPECT_LT(text.rfind("copy "), first_add) << text;
    size_t adds = 0;
    for (size_t at = first_add; at != std::string::npos; at = text.find("atomic_add64", at + 1)) ++adds;
    EXPECT_EQ(adds, 2 * l.writes_to.size()) << text;
  }
  launch_and_verify(mem, *plan, comm->size(), 2);
}

// Small plans of ranks that share a GPU put each rank's lists on one engine
// of its own, round robin over the GPU's engines, so the ranks' lists run
// on every engine at once; larger ones take engines by weight (LCE4 most).
TEST(CollHopper, SmallPlansSpreadRanksOverTheEngines) {
  Node node;
  ASSERT_OK(make_node(Topo::h200loop4, &node));
  for (Variant v : {Variant::pcpy, Variant::b2b}) {
    for (uint64_t bytes : {uint64_t(1000), kSpreadMaxBytes}) {
      Mem mem(*node.dev, 6);
      const CollectiveArgs a = separate_args(mem, *node.comm, CollOp::all_gather, v, bytes);
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, node.comm->plan(a));
      std::map<int, std::set<int>> engines_of_rank;
      for (const PlanList& l : plan->lists()) engines_of_rank[l.rank].insert(l.engine);
      ASSERT_EQ(engines_of_rank.size(), 4u) << plan->describe();
      const int lce[4] = {2, 3, 4, 2};  // the H200's copy engines, in order
      for (int r = 0; r < 4; ++r) EXPECT_EQ(engines_of_rank[r], std::set<int>{lce[r]}) << plan->describe();
      launch_and_verify(mem, *plan, node.comm->size(), 2);
    }
  }
  Mem mem(*node.dev, 6);
  const CollectiveArgs a = separate_args(mem, *node.comm, CollOp::all_gather, Variant::b2b, kSpreadMaxBytes + 256);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, node.comm->plan(a));
  for (const PlanList& l : plan->lists()) {
    const bool local_only = l.writes_to.size() == 1 && l.writes_to[0] == l.rank;
    if (!local_only) {
      EXPECT_EQ(l.engine, 4) << plan->describe();
    }
  }
}

// An all-to-all with a send_stride reads destination d's chunk at
// send + d*stride (what a reduce-scatter in pieces sends): on SDMA and on
// Hopper lists, every variant that takes it, each byte checked by the model.
TEST(CollAllToAll, SendStrideSpreadsTheSendChunks) {
  for (Topo t : {Topo::h200loop4, Topo::small3}) {
    Node node;
    ASSERT_OK(make_node(t, &node));
    for (Variant v : {Variant::automatic, Variant::pcpy, Variant::b2b}) {
      for (uint64_t bytes : {uint64_t(1000), uint64_t(70000)}) {
        Mem mem(*node.dev, 6);
        const CollectiveArgs a = separate_args(mem, *node.comm, CollOp::all_to_all, v, bytes, 0, 3 * bytes + 8);
        ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, node.comm->plan(a));
        EXPECT_NE(plan->variant(), Variant::swap);
        SCOPED_TRACE(std::string(topo_name(t)) + " " + variant_name(plan->variant()) + " " + std::to_string(bytes));
        launch_and_verify(mem, *plan, node.comm->size(), 2);
      }
    }
  }
}

// A status of `code` whose message holds `needle`.
void expect_refused(const Status& st, Code code, const std::string& needle) {
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_TRUE(contains(st.message(), needle)) << "missing '" << needle << "' in: " << st.message();
}

TEST(CollAllToAll, SendStrideErrorsNameTheFix) {
  Node node;
  ASSERT_OK(make_node(Topo::h200loop4, &node));
  Mem mem(*node.dev, 6);
  const CollectiveArgs a = separate_args(mem, *node.comm, CollOp::all_to_all, Variant::automatic, 4096, 0, 8192);
  CollectiveArgs small = a;
  small.send_stride = 4000;
  expect_refused(node.comm->plan(small).status(), Code::invalid_argument, "is less than bytes");
  CollectiveArgs short_send = a;
  short_send.send[1].size = 3 * 8192;  // (n-1) strides + a chunk = 3*8192 + 4096
  expect_refused(node.comm->plan(short_send).status(), Code::invalid_argument, "mismatched sizes");
  CollectiveArgs gather = a;
  gather.op = CollOp::gather;
  expect_refused(node.comm->plan(gather).status(), Code::invalid_argument, "send_stride is for all_to_all");
  // The swap variant exchanges packed chunks in place (SDMA 4.4.2 only).
  Node mi;
  ASSERT_OK(make_node(Topo::mi300x8, &mi));
  Mem mm(*mi.dev, 6);
  CollectiveArgs s = separate_args(mm, *mi.comm, CollOp::all_to_all, Variant::automatic, 256, 0, 512);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> automatic, mi.comm->plan(s));
  EXPECT_NE(automatic->variant(), Variant::swap) << "automatic picks swap for small packed all-to-alls, not strided ones";
  launch_and_verify(mm, *automatic, mi.comm->size(), 1);
  s.variant = Variant::swap;
  expect_refused(mi.comm->plan(s).status(), Code::invalid_argument, "takes no send_stride");
}

// Folded arrivals (Options::fold_arrivals): the copy into rank d carries d's
// arrival as its LAUNCH_DMA's semaphore reduction, so a pcpy list holds no
// host reduction and no wait for idle; arrivals that follow several copies
// (b2b's groups) stay adds after them. Every op and Hopper variant, small
// and spread over engines, one GPU with loopback ranks and three GPUs, each
// byte checked by the model over two launches.
TEST(CollHopper, FoldedArrivalsRideOnTheCopies) {
  auto host_adds = [](const PlanList& l) {
    const std::span<const uint32_t> d = l.cb.dwords();
    int n = 0;
    for (uint32_t at : l.cb.packet_starts())
      if (d[at] == hopper::kHostSemHeader && (d[at + 5] & hopper::kSemOperationMask) == hopper::kSemOpReduction) ++n;
    return n;
  };
  auto copy_adds = [](const PlanList& l) {
    const std::string text = l.cb.disassemble();
    int n = 0;
    for (size_t at = text.find("semaphore_reduction_enable=true"); at != std::string::npos;
         at = text.find("semaphore_reduction_enable=true", at + 1))
      ++n;
    return n;
  };
  for (Topo t : {Topo::h200loop4, Topo::h200x3}) {
    Result<std::unique_ptr<emu::EmuDevice>> dev = make_device(t);
    ASSERT_OK(dev.status());
    Communicator::Options o;
    o.loopback = t == Topo::h200loop4;
    o.queues = Communicator::Options::QueueSharing::per_rank;  // chain's lists wait on each other
    o.fold_arrivals = true;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(**dev, topo_gpus(t), o));
    for (CollOp op : {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                      CollOp::all_to_all}) {
      for (Variant v : variants_for(op)) {
        if (!variant_missing_cap(v, caps(Isa::hopper())).empty()) continue;
        for (uint64_t bytes : {uint64_t(1000), uint64_t(70000)}) {
          SCOPED_TRACE(std::string(topo_name(t)) + " " + coll_op_name(op) + " " + variant_name(v) + " " +
                       std::to_string(bytes));
          Mem mem(**dev, 7 + bytes);
          const CollectiveArgs a = separate_args(mem, *comm, op, v, bytes, op == CollOp::p2p ? 0 : 1);
          ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
          int on_host = 0;
          for (const PlanList& l : plan->lists()) {
            on_host += host_adds(l);
            if (plan->variant() != Variant::b2b && plan->variant() != Variant::pull) {
              EXPECT_EQ(host_adds(l), 0) << plan->describe();
              EXPECT_GT(copy_adds(l), 0) << plan->describe();
            }
          }
          // b2b and pull: a list's arrivals follow all of its copies, so
          // only its last copy carries one.
          if (plan->variant() == Variant::b2b || plan->variant() == Variant::pull) {
            EXPECT_GT(on_host, 0) << plan->describe();
          }
          launch_and_verify(mem, *plan, comm->size(), 2);
        }
      }
    }
  }
  // Without the option the same plan adds on the host after its copies.
  Node node;
  ASSERT_OK(make_node(Topo::h200loop4, &node));
  Mem mem(*node.dev, 9);
  const CollectiveArgs a = separate_args(mem, *node.comm, CollOp::all_gather, Variant::pcpy, 1000);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, node.comm->plan(a));
  for (const PlanList& l : plan->lists()) {
    EXPECT_GT(host_adds(l), 0) << plan->describe();
    EXPECT_EQ(copy_adds(l), 0) << plan->describe();
  }
}

// The byte counts of environment knobs (CONCCL_STRIPE_MIN_BYTES): digits
// with an optional K, M or G; anything else is as if unset.
TEST(EnvKnobs, ByteCountsTakeKMGSuffixes) {
  const char* name = "CONCCL_TEST_ENV_BYTES";
  const std::pair<const char*, std::optional<uint64_t>> cases[] = {
      {"0", 0},          {"4096", 4096},       {"4K", 4096},         {"64K", 65536},
      {"3M", 3u << 20},  {"2G", 2ull << 30},   {"", std::nullopt},   {"K", std::nullopt},
      {"4KB", std::nullopt}, {"-1", std::nullopt}, {"1.5M", std::nullopt}, {"4k", std::nullopt}};
  for (const auto& [text, want] : cases) {
    ASSERT_EQ(setenv(name, text, 1), 0);
    EXPECT_EQ(util::env_bytes(name), want) << "'" << text << "'";
  }
  unsetenv(name);
  EXPECT_EQ(util::env_bytes(name), std::nullopt);
}

// Bytes a Hopper list copies, from its LAUNCH_DMAs' LINE_LENGTH_IN.
uint64_t copied(const PlanList& l) {
  const std::string text = l.cb.disassemble();
  uint64_t n = 0;
  const std::string key = "copy.line_length_in value=";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1))
    n += std::strtoull(text.c_str() + at + key.size(), nullptr, 0);
  return n;
}

// Striping (Options::stripe_min_bytes): a copy of at least that many bytes
// between ranks on one GPU puts a share on each of the GPU's engines by
// weight (H200: LCE2 2, LCE3 2, LCE4 12 PCEs), so two ranks keep all three
// engines busy where whole copies by weighted round robin put every copy on
// LCE4. Smaller copies, and copies between GPUs, are placed as before.
// Every op and Hopper variant, each byte checked by the model.
TEST(CollHopper, LargeCopiesStripeOverTheGpusEngines) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(Topo::h200loop4));
  const uint64_t stripe = 64 * 1024;
  int striped = 0;  // ranks' copies checked
  for (int ranks : {2, 4}) {
    Communicator::Options o;
    o.loopback = true;
    o.queues = Communicator::Options::QueueSharing::per_rank;  // chain's lists wait on each other
    o.stripe_min_bytes = stripe;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm,
                         Communicator::create(*dev, std::vector<int>(static_cast<size_t>(ranks), 0), o));
    for (CollOp op : {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                      CollOp::all_to_all}) {
      for (Variant v : variants_for(op)) {
        if (!variant_missing_cap(v, caps(Isa::hopper())).empty()) continue;
        for (uint64_t bytes : {stripe - 256, 4 * stripe + 768}) {
          SCOPED_TRACE(std::to_string(ranks) + " ranks " + coll_op_name(op) + " " + variant_name(v) + " " +
                       std::to_string(bytes));
          Mem mem(*dev, 3 + bytes);
          const CollectiveArgs a = separate_args(mem, *comm, op, v, bytes, op == CollOp::p2p ? 0 : 1);
          ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
          // pcpy, fanout and the p2p variants place each copy by
          // engine_shares; b2b's groups, chain's links and pull's
          // destinations stay one list.
          const Variant pv = plan->variant();
          const bool stripes = bytes >= stripe && pv != Variant::b2b && pv != Variant::chain && pv != Variant::single &&
                               pv != Variant::pull;
          std::map<int, std::map<int, uint64_t>> bytes_of;  // rank -> engine -> bytes
          for (const PlanList& l : plan->lists()) bytes_of[l.rank][l.engine] += copied(l);
          for (const auto& [rank, by_engine] : bytes_of) {
            uint64_t total = 0;
            for (const auto& [e, n] : by_engine) total += n;
            if (total == 0) continue;
            if (stripes) {
              // 2:2:12 of every copy, in 256-byte units.
              ASSERT_EQ(by_engine.size(), 3u) << plan->describe();
              EXPECT_NEAR(double(by_engine.at(2)) / double(total), 2.0 / 16, 0.01) << plan->describe();
              EXPECT_NEAR(double(by_engine.at(3)) / double(total), 2.0 / 16, 0.01) << plan->describe();
              EXPECT_NEAR(double(by_engine.at(4)) / double(total), 12.0 / 16, 0.01) << plan->describe();
              ++striped;
            }
          }
          launch_and_verify(mem, *plan, comm->size(), 2);
        }
      }
    }
  }
  EXPECT_GE(striped, 30);
  {
    // Without it, by weighted round robin, two ranks' copies all take LCE4.
    Communicator::Options o;
    o.loopback = true;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, {0, 0}, o));
    Mem mem(*dev, 4);
    const CollectiveArgs a = separate_args(mem, *comm, CollOp::all_gather, Variant::pcpy, 4 * stripe);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
    for (const PlanList& l : plan->lists()) EXPECT_EQ(l.engine, 4) << plan->describe();
  }
  // Communicators over several GPUs (three H200s; two SDMA GPUs with two
  // loopback ranks each) place every copy as without the option: their
  // links' engines carry peer traffic.
  struct Spread {
    Topo topo;
    std::vector<int> gpus;
    bool loopback;
  };
  for (const Spread& sp : {Spread{Topo::h200x3, topo_gpus(Topo::h200x3), false}, Spread{Topo::small3, {0, 1, 0, 1}, true}}) {
    SCOPED_TRACE(topo_name(sp.topo));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> d, make_device(sp.topo));
    Communicator::Options o;
    o.loopback = sp.loopback;
    Communicator::Options striped = o;
    striped.stripe_min_bytes = stripe;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*d, sp.gpus, striped));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> plain, Communicator::create(*d, sp.gpus, o));
    Mem mem(*d, 5 + stripe);
    const CollectiveArgs a = separate_args(mem, *comm, CollOp::all_gather, Variant::pcpy, 4 * stripe);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan2, plain->plan(a));
    ASSERT_EQ(plan->lists().size(), plan2->lists().size());
    for (size_t i = 0; i < plan->lists().size(); ++i) {
      EXPECT_EQ(plan->lists()[i].rank, plan2->lists()[i].rank);
      EXPECT_EQ(plan->lists()[i].engine, plan2->lists()[i].engine) << plan->describe();
      EXPECT_EQ(plan->lists()[i].cb.size_dwords(), plan2->lists()[i].cb.size_dwords()) << plan->describe();
    }
    launch_and_verify(mem, *plan, comm->size(), 1);
  }
}

// The default (Options::stripe_min_bytes and CONCCL_STRIPE_MIN_BYTES unset):
// copies of 8 MiB or more striped with 8 or more loopback ranks on one GPU,
// of 32 MiB or more with 2, whole with 3 to 7 (docs/collectives.md; an H100
// and an H200 measured them, runs 48 and 63). Plans only: the data path is
// the test above's.
TEST(CollHopper, StripingIsTheDefaultForTwoAndEightRanks) {
  if (std::getenv("CONCCL_STRIPE_MIN_BYTES")) GTEST_SKIP() << "CONCCL_STRIPE_MIN_BYTES is set";
  DeviceOptions d;
  d.settings = "preset=h200 memory_per_gpu=128M";  // nothing runs: plans only
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, emu::create(d));
  for (int ranks : {2, 4, 8}) {
    const uint64_t big = ranks == 2 ? 32ull << 20 : 8ull << 20;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm,
                         Communicator::create(*dev, std::vector<int>(size_t(ranks), 0), [] {
                           Communicator::Options o;
                           o.loopback = true;
                           return o;
                         }()));
    for (uint64_t bytes : {big - 256, big}) {
      SCOPED_TRACE(std::to_string(ranks) + " ranks, " + std::to_string(bytes) + " bytes");
      std::vector<UniqueBuffer> held;
      CollectiveArgs a;
      a.op = CollOp::broadcast;
      a.variant = Variant::fanout;
      a.bytes = bytes;
      for (int r = 0; r <= ranks; ++r) {
        ASSERT_OK_AND_ASSIGN(UniqueBuffer b, UniqueBuffer::alloc(*dev, 0, bytes, MemKind::device));
        (r == 0 ? a.send : a.recv).push_back(b.get());
        held.push_back(std::move(b));
      }
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
      std::map<int, uint64_t> by_engine;  // the root's copies
      for (const PlanList& l : plan->lists())
        if (l.rank == 0) by_engine[l.engine] += copied(l);
      uint64_t total = 0;
      for (const auto& [e, n] : by_engine) total += n;
      ASSERT_EQ(total, bytes * uint64_t(ranks)) << plan->describe();  // into every rank, the root too
      if (ranks != 4 && bytes >= big) {
        ASSERT_EQ(by_engine.size(), 3u) << plan->describe();
        EXPECT_NEAR(double(by_engine.at(4)) / double(total), 12.0 / 16, 0.01) << plan->describe();
      } else {
        for (const auto& [e, n] : by_engine) EXPECT_EQ(n % bytes, 0u) << "engine " << e << " carries whole copies";
      }
    }
  }
}

// A list's arrivals follow all of its copies, one add per destination, and
// only the first of them waits for the engine to idle: one wait-for-idle per
// list instead of one per copy (small messages were bound by them). A chain
// broadcast keeps an arrival after every chunk, which the next rank forwards.
TEST(CollHopper, ArrivalsFollowTheCopiesWithOneWaitForIdlePerList) {
  Node node;
  ASSERT_OK(make_node(Topo::h200loop4, &node));
  auto count = [](const PlanList& l, bool wfi_only) {
    const std::span<const uint32_t> d = l.cb.dwords();
    int n = 0;
    for (uint32_t at : l.cb.packet_starts())
      if (d[at] == hopper::kHostSemHeader && (d[at + 5] & hopper::kSemOperationMask) == hopper::kSemOpReduction &&
          (!wfi_only || (d[at + 5] & hopper::kSemReleaseWfi)))
        ++n;
    return n;
  };
  for (Variant v : {Variant::pcpy, Variant::b2b}) {
    Mem mem(*node.dev, 6);
    const CollectiveArgs a = separate_args(mem, *node.comm, CollOp::all_gather, v, 1000);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, node.comm->plan(a));
    for (const PlanList& l : plan->lists()) {
      EXPECT_EQ(count(l, true), 1) << plan->describe();
      EXPECT_EQ(count(l, false), static_cast<int>(l.writes_to.size())) << plan->describe();
      // Every add comes after the list's last copy; the copies after the
      // first run alongside it (they read the rank's chunk, each writes
      // another destination).
      const std::string text = l.cb.disassemble();
      EXPECT_LT(text.rfind("copy.launch_dma"), text.find("operation=reduction")) << text;
      const size_t first = text.find("data_transfer_type=");
      EXPECT_EQ(text.substr(first, 32), "data_transfer_type=non_pipelined") << text;
      EXPECT_EQ(text.find("data_transfer_type=non_pipelined", first + 1), std::string::npos) << text;
    }
    launch_and_verify(mem, *plan, node.comm->size(), 2);
  }
  Mem mem(*node.dev, 6);
  CollectiveArgs a = separate_args(mem, *node.comm, CollOp::broadcast, Variant::chain, 4096);
  a.chain_chunks = 4;
  Communicator::Options o;
  o.loopback = true;
  o.queues = Communicator::Options::QueueSharing::per_rank;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*node.dev, {0, 0, 0, 0}, o));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> chain, comm->plan(a));
  int adds = 0;
  for (const PlanList& l : chain->lists()) {
    EXPECT_EQ(count(l, true), count(l, false)) << chain->describe();
    adds += count(l, false);
  }
  EXPECT_EQ(adds, 1 + 4 * 3) << "the root's local copy, then 4 chunks on each of 3 links";
  launch_and_verify(mem, *chain, comm->size(), 2);
}

// A list that alone delivers to one rank, and delivers nowhere else, ends
// with one store of the count instead of adds: pull's destinations, p2p's
// peer, fanout's ranks where each has a list of the root's (mi300x8). Where
// several lists write into a rank (b2b), or one list into several ranks
// (fanout spread over one engine on h200loop4), adds stay.
// On Hopper a store is a copy-engine semaphore release (no reduction); on
// SDMA it is FENCEs (no atomics). The counts the waits use are unchanged.
TEST(CollArrivals, OneWritersArrivalsAreOneStore) {
  for (Topo t : {Topo::h200loop4, Topo::mi300x8}) {
    Node node;
    ASSERT_OK(make_node(t, &node));
    const bool hopper = t == Topo::h200loop4;
    auto count = [](const PlanList& l, const char* word) {  // in the list's disassembly
      const std::string text = l.cb.disassemble();
      int n = 0;
      for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
      return n;
    };
    auto adds = [&](const PlanList& l) { return count(l, hopper ? "reduction" : "atomic_add64"); };
    auto stores = [&](const PlanList& l) { return count(l, hopper ? "semaphore_type=release_semaphore" : "fence "); };
    struct Want {
      CollOp op;
      Variant v;
      bool stored;
    };
    for (const Want w : {Want{CollOp::all_gather, Variant::pull, true}, Want{CollOp::p2p, Variant::single, true},
                         Want{CollOp::broadcast, Variant::fanout, true}, Want{CollOp::all_gather, Variant::b2b, false}}) {
      SCOPED_TRACE(std::string(topo_name(t)) + " " + coll_op_name(w.op) + " " + variant_name(w.v));
      Mem mem(*node.dev, 17);
      const CollectiveArgs a = separate_args(mem, *node.comm, w.op, w.v, 1000, w.op == CollOp::p2p ? 0 : 1);
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, node.comm->plan(a));
      for (const PlanList& l : plan->lists()) {
        if (l.writes_to.empty()) continue;
        if (w.stored && (l.writes_to.size() == 1 || w.op != CollOp::broadcast)) {
          EXPECT_EQ(adds(l), 0) << plan->describe();
          // SDMA: four 32-bit FENCEs per signal (its twin, then the value).
          EXPECT_EQ(l.writes_to.size(), 1u) << plan->describe();
          EXPECT_EQ(stores(l), hopper ? 1 : 4) << plan->describe();
        } else {
          EXPECT_GT(adds(l), 0) << plan->describe();
        }
      }
      for (int launch = 0; launch < 3; ++launch) {
        launch_and_verify(mem, *plan, node.comm->size(), 1);
        for (int r = 0; r < node.comm->size(); ++r)
          EXPECT_EQ(plan->arrival(r).value(), plan->arrivals_expected(r)) << "rank " << r << " launch " << launch;
      }
    }
  }
}

// The Device names the engine toward a peer without a communicator: the
// kernel's recommended engine on MI300X, the heaviest copy engine on H200.
TEST(CollEngines, DeviceNamesTheEngineTowardAPeer) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> mi, make_device(Topo::mi300x8));
  for (int s = 0; s < 8; ++s)
    for (int d = 0; d < 8; ++d) {
      if (s == d) continue;
      ASSERT_OK_AND_ASSIGN(int e, mi->engine_toward(s, d));
      EXPECT_EQ(e, kMi300xRec[s][d]) << s << " -> " << d;
      ASSERT_OK_AND_ASSIGN(std::vector<int> all, engines_toward(mi->topology(), s, d));
      EXPECT_EQ(all.size(), mi->topology().gpus[static_cast<size_t>(s)].engines.size()) << "every engine, best first";
    }
  EXPECT_EQ(mi->engine_toward(0, 8).status().code(), Code::not_found);
  EXPECT_EQ(mi->engine_toward(-1, 0).status().code(), Code::not_found);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> h200, make_device(Topo::h200loop4));
  ASSERT_OK_AND_ASSIGN(std::vector<int> ces, engines_toward(h200->topology(), 0, 0));
  ASSERT_FALSE(ces.empty());
  EXPECT_EQ(ces.front(), 4) << "LCE4 has the most PCEs";
}

// Broadcast, scatter and p2p take the root's send buffer alone.
TEST(CollArgs, RootOpsTakeTheRootsSendBufferAlone) {
  for (Topo t : {Topo::small3, Topo::h200loop4}) {
    SCOPED_TRACE(topo_name(t));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(t));
    Communicator::Options o;
    o.loopback = true;
    const std::vector<int> gpus = t == Topo::small3 ? std::vector<int>{0, 1, 2, 0} : std::vector<int>{0, 0, 0, 0};
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, gpus, o));
    Mem mem(*dev, 37);
    for (CollOp op : {CollOp::broadcast, CollOp::scatter, CollOp::p2p}) {
      SCOPED_TRACE(coll_op_name(op));
      CollectiveArgs a;
      a.op = op;
      a.bytes = 12345;
      a.root = 2;
      a.peer = 1;
      make_buffers(mem, *comm, a, Form::separate);
      a.send = {a.send[2]};
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
      ASSERT_EQ(plan->args().send.size(), 4u);
      EXPECT_EQ(plan->args().send[2].va, a.send[0].va);
      launch_and_verify(mem, *plan, comm->size(), 1);
    }
    CollectiveArgs bad = separate_args(mem, *comm, CollOp::all_gather, Variant::automatic, 64);
    bad.send.resize(1);
    Result<std::unique_ptr<Plan>> r = comm->plan(bad);
    EXPECT_EQ(r.status().code(), Code::invalid_argument);
    EXPECT_TRUE(contains(r.status().message(), "one send and one recv Buffer per rank")) << r.status().message();
  }
}

TEST(CollEngines, OptionsEnginesRestrictThePlans) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(Topo::h200loop4));
  Communicator::Options o;
  o.loopback = true;
  o.engines = {2, 3};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, {0, 0, 0}, o));
  Mem mem(*dev, 8);
  for (CollOp op : {CollOp::all_gather, CollOp::all_to_all, CollOp::p2p, CollOp::broadcast}) {
    SCOPED_TRACE(coll_op_name(op));
    CollectiveArgs a = separate_args(mem, *comm, op, Variant::automatic, 3000);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
    for (const PlanList& l : plan->lists()) EXPECT_TRUE(l.engine == 2 || l.engine == 3) << l.engine;
    launch_and_verify(mem, *plan, comm->size(), 1);
  }
  o.engines = {4, 9};
  Result<std::unique_ptr<Communicator>> bad = Communicator::create(*dev, {0, 0}, o);
  EXPECT_EQ(bad.status().code(), Code::invalid_argument);
  EXPECT_TRUE(contains(bad.status().message(), "engine 9")) << bad.status().message();
}

TEST(CollEngines, LoopbackIsAnOption) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(Topo::small3));
  Result<std::unique_ptr<Communicator>> twice = Communicator::create(*dev, {0, 1, 0});
  EXPECT_EQ(twice.status().code(), Code::invalid_argument);
  EXPECT_TRUE(contains(twice.status().message(), "loopback")) << twice.status().message();
  // SDMA engines take loopback ranks too: 4 ranks on 2 GPUs.
  Communicator::Options o;
  o.loopback = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, {0, 1, 0, 1}, o));
  Mem mem(*dev, 9);
  for (Variant v : {Variant::pcpy, Variant::bcst, Variant::b2b}) {
    SCOPED_TRACE(variant_name(v));
    CollectiveArgs a = separate_args(mem, *comm, CollOp::all_gather, v, 5001);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
    launch_and_verify(mem, *plan, comm->size(), 2);
  }
}

TEST(CollEngines, SharedQueuesRunEveryRankOnOneQueuePerEngine) {
  for (Topo t : {Topo::h200loop4, Topo::small3}) {
    SCOPED_TRACE(topo_name(t));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(t));
    Communicator::Options o;
    o.loopback = true;
    o.queues = Communicator::Options::QueueSharing::per_engine;
    const std::vector<int> gpus = t == Topo::h200loop4 ? std::vector<int>{0, 0, 0, 0} : std::vector<int>{0, 1, 0, 1};
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, gpus, o));
    Mem mem(*dev, 17);
    const std::vector<std::pair<CollOp, Variant>> cases = {
        {CollOp::all_gather, Variant::pcpy},    {CollOp::all_gather, Variant::b2b},
        {CollOp::all_to_all, Variant::pcpy},    {CollOp::all_to_all, Variant::b2b},
        {CollOp::broadcast, Variant::fanout},   {CollOp::gather, Variant::pcpy},
        {CollOp::scatter, Variant::fanout},     {CollOp::p2p, Variant::striped},
        {CollOp::all_gather, Variant::automatic}, {CollOp::broadcast, Variant::automatic},
        {CollOp::all_to_all, Variant::automatic}};
    for (const auto& [op, v] : cases) {
      SCOPED_TRACE(std::string(coll_op_name(op)) + "/" + variant_name(v));
      // Sizes big enough for automatic to pick chain/swap.
      CollectiveArgs a = separate_args(mem, *comm, op, v, op == CollOp::p2p ? (3u << 20) + 7 : 70001);
      a.prelaunch = op == CollOp::all_gather;
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
      EXPECT_NE(plan->variant(), Variant::chain);
      // Every rank's list on an engine goes to the one queue of (GPU, engine).
      std::map<std::pair<int, int>, const Queue*> q;
      for (const PlanList& l : plan->lists()) {
        const auto key = std::make_pair(comm->gpu(l.rank), l.engine);
        if (q.count(key)) {
          EXPECT_EQ(q[key], l.queue) << "rank " << l.rank << " engine " << l.engine;
        }
        q[key] = l.queue;
      }
      if (a.prelaunch) {
        ASSERT_OK(plan->prelaunch(Deadline::after(std::chrono::seconds(10))));
        ASSERT_OK(plan->release());
        ASSERT_OK(plan->wait(Deadline::after(std::chrono::seconds(10))));
      }
      launch_and_verify(mem, *plan, comm->size(), 2);
      // The lists of one queue went in as one submission: one span each.
      std::map<const Queue*, std::pair<uint64_t, uint64_t>> span_of;
      for (const PlanList& l : plan->lists()) {
        const auto span = std::make_pair(l.span.begin, l.span.end);
        EXPECT_LT(span.first, span.second) << "rank " << l.rank << " engine " << l.engine << " was submitted";
        if (span_of.count(l.queue)) {
          EXPECT_EQ(span_of[l.queue], span) << "rank " << l.rank << " engine " << l.engine
                                            << ": another submission than its queue's other lists";
        }
        span_of[l.queue] = span;
      }
    }
    // Lists that wait on each other could deadlock on one queue: refused.
    std::vector<std::pair<CollOp, Variant>> refused = {{CollOp::broadcast, Variant::chain}};
    if (comm->caps().swap) refused.push_back({CollOp::all_to_all, Variant::swap});
    for (const auto& [op, v] : refused) {
      SCOPED_TRACE(variant_name(v));
      CollectiveArgs a = separate_args(mem, *comm, op, v, 70001);
      Result<std::unique_ptr<Plan>> bad = comm->plan(a);
      EXPECT_EQ(bad.status().code(), Code::invalid_argument);
      EXPECT_TRUE(contains(bad.status().message(), "per_rank")) << bad.status().message();
    }
  }
}

// QueueSharing::automatic (the default): loopback ranks share the per-engine
// queue unless the plan's lists wait on each other; per_rank never shares.
TEST(CollEngines, AutomaticQueueSharingFollowsThePlan) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(Topo::h200loop4));
  using QS = Communicator::Options::QueueSharing;
  for (QS qs : {QS::automatic, QS::per_rank}) {
    SCOPED_TRACE(qs == QS::automatic ? "automatic" : "per_rank");
    Communicator::Options o;
    o.loopback = true;
    o.queues = qs;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, {0, 0, 0, 0}, o));
    Mem mem(*dev, 31);
    for (Variant v : {Variant::pcpy, Variant::chain}) {
      SCOPED_TRACE(variant_name(v));
      CollectiveArgs a = separate_args(mem, *comm, v == Variant::chain ? CollOp::broadcast : CollOp::all_gather, v, 300000);
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
      const bool want_shared = qs == QS::automatic && v != Variant::chain;
      std::map<int, std::set<const Queue*>> queues_per_engine;
      for (const PlanList& l : plan->lists()) {
        EXPECT_EQ(l.shared_queue, want_shared) << "rank " << l.rank << " engine " << l.engine;
        queues_per_engine[l.engine].insert(l.queue);
      }
      std::set<const Queue*> all;
      for (const PlanList& l : plan->lists()) all.insert(l.queue);
      if (want_shared) {
        EXPECT_EQ(all.size(), queues_per_engine.size()) << "one queue per engine";
      } else {
        EXPECT_EQ(all.size(), plan->lists().size()) << "one queue per (rank, engine) list";
      }
      launch_and_verify(mem, *plan, comm->size(), 2);
    }
  }
}

// A compute stream releases a prelaunched plan by storing into its trigger:
// here a host thread makes exactly the stores release_by_stores() names,
// after the plan was counted as released, and the data lands verified.
TEST(CollHandoff, ReleaseByStoresFromAnotherWriter) {
  for (Topo t : {Topo::h200loop4, Topo::small3}) {
    SCOPED_TRACE(topo_name(t));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(t));
    Communicator::Options o;
    o.loopback = true;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, {0, 0, 0}, o));
    Mem mem(*dev, 23);
    CollectiveArgs a = separate_args(mem, *comm, CollOp::all_gather, Variant::pcpy, 40000);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> unprelaunched, comm->plan(a));
    EXPECT_EQ(unprelaunched->release_by_stores().status().code(), Code::invalid_argument);
    a.prelaunch = true;
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm->plan(a));
    for (int launch = 0; launch < 2; ++launch) {
      mem.refill();
      Mem::Image before, want;
      mem.snapshot(&before);
      expected_after(mem, before, plan->args(), comm->size(), &want);
      ASSERT_OK(plan->prelaunch(long_deadline()));
      ASSERT_OK_AND_ASSIGN(std::vector<SignalStore> stores, plan->release_by_stores());
      // SDMA: the twin, then the value; Hopper: one native 64-bit store.
      ASSERT_EQ(stores.size(), t == Topo::small3 ? 2u : 1u);
      EXPECT_EQ(stores.back().value, 1u);
      EXPECT_EQ(plan->release().code(), Code::invalid_argument);  // already handed off
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_TRUE(plan->running());  // nothing moves before the stores
      EXPECT_EQ(plan->arrival(0).value(), 0u);
      std::thread writer([&] {
        for (const SignalStore& w : stores) {
          auto* p = static_cast<uint64_t*>(dev->host_pointer(w.va, 8));
          ASSERT_NE(p, nullptr);
          std::atomic_ref<uint64_t>(*p).store(w.value, std::memory_order_release);
        }
      });
      writer.join();
      // The data lands, but until the writer says it is past its waits the
      // plan counts as running: a relaunch would reset what it waits on.
      for (int r = 0; r < comm->size(); ++r) ASSERT_OK(plan->arrival(r).wait(plan->arrivals_expected(r), long_deadline()));
      EXPECT_TRUE(plan->running());
      EXPECT_EQ(plan->prelaunch(long_deadline()).code(), Code::busy);
      EXPECT_EQ(plan->wait(Deadline::after_ms(30)).code(), Code::timeout);
      const SignalStore done = plan->consumed_store();
      ASSERT_NE(done.va, 0u);
      std::atomic_ref<uint64_t>(*static_cast<uint64_t*>(dev->host_pointer(done.va, 8))).store(done.value);
      ASSERT_OK(wait_done(*plan));
      EXPECT_FALSE(plan->running());
      ASSERT_TRUE(mem.matches(want));
    }
  }
}

// Destroying a plan that was prelaunched and never released does not leave
// its gated lists blocking the queues: the next plan on them runs.
TEST(CollHandoff, DestroyingAPrelaunchedPlanFreesItsQueues) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(Topo::h200loop4));
  Communicator::Options o;
  o.loopback = true;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, {0, 0}, o));
  Mem mem(*dev, 29);
  CollectiveArgs a = separate_args(mem, *comm, CollOp::all_to_all, Variant::pcpy, 5000);
  a.prelaunch = true;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> abandoned, comm->plan(a));
    ASSERT_OK(abandoned->prelaunch(long_deadline()));
  }
  a.prelaunch = false;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> next, comm->plan(a));
  launch_and_verify(mem, *next, comm->size(), 1);
}

}  // namespace
}  // namespace conccl
