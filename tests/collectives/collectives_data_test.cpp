// tests/collectives/collectives_data_test.cpp - every collective and variant
// moves the right bytes: 8 MI300X ranks, 3 ranks on a small custom node (two
// xGMI engines shared by every peer and the local copies), 3 ranks on GPUs
// {5, 1, 6} (SDMA packets), and the same collectives lowered to Hopper CE
// methods on emulated H200s: 4 loopback ranks on one GPU, and 3 GPUs (every
// variant the copy engines can run: no bcst, no swap); odd sizes, one byte,
// and sizes over the per-packet limit;
// different roots; guard bytes; several launches of one plan with new data
// each time; the in-place forms. Under TSan fewer sizes run (every variant
// still runs on every layout).
#include <gtest/gtest.h>

#include "collectives/coll_fixture.hpp"

namespace conccl {
namespace {

using namespace conccl::coltest;

struct Case {
  Topo topo;
  CollOp op;
  Variant v;
};

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (Topo t : {Topo::mi300x8, Topo::small3, Topo::mapped3, Topo::h200loop4, Topo::h200x3}) {
    const Caps& caps = conccl::caps(t == Topo::h200loop4 || t == Topo::h200x3 ? Isa::hopper() : Isa{});
    for (CollOp op : {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                      CollOp::all_to_all})
      for (Variant v : variants_for(op))
        if (variant_missing_cap(v, caps).empty()) out.push_back({t, op, v});
  }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return std::string(topo_name(i.param.topo)) + "_" + coll_op_name(i.param.op) + "_" + variant_name(i.param.v);
}

// Sizes per layout. 8 ranks are the expensive ones: the over-the-limit size
// only where the total stays small (one chunk per rank, not n per rank).
std::vector<uint64_t> sizes_for(const Case& c) {
  const bool chunk_per_pair = c.op == CollOp::all_gather || c.op == CollOp::all_to_all;
  switch (c.topo) {
    case Topo::mi300x8:
      if (kTsan) return {3, 4093};
      if (chunk_per_pair) return {1, 3, 4093, 100003};
      return {1, 3, 4093, 100003, kOverLimit};
    case Topo::small3:
      if (kTsan) return {1, 100003, kOverLimit};
      return {1, 3, 4093, 100003, kOverLimit};
    case Topo::mapped3:
      if (kTsan) return {4093};
      return {1, 4093, 100003};
    case Topo::h200loop4:
    case Topo::h200x3:
      if (kTsan) return {3, 100003};
      return {1, 3, 4093, 100003, (1u << 20) + 7};
  }
  return {};
}

// Three launches of each plan (new data between them); two for the large sizes.
int launches_for(uint64_t bytes) { return bytes > (1u << 20) ? 2 : 3; }

class CollData : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { ASSERT_OK(make_node(GetParam().topo, &node_)); }

  // Plans, checks and runs one collective of `bytes` per rank.
  void run(uint64_t bytes, int root, int peer, Form form, int launches, uint64_t seed) {
    const Case& c = GetParam();
    Communicator& comm = *node_.comm;
    const int n = comm.size();
    Mem mem(*node_.dev, seed);
    CollectiveArgs a;
    a.op = c.op;
    a.variant = c.v;
    a.bytes = bytes;
    a.root = root;
    a.peer = peer;
    make_buffers(mem, comm, a, form);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> plan, comm.plan(a));
    const Variant want =
        c.v == Variant::automatic ? choose_variant(c.op, bytes, n, comm.caps(), false, true, /*one_process=*/true) : c.v;
    EXPECT_EQ(plan->variant(), want);
    ASSERT_FALSE(plan->lists().empty());
    for (const PlanList& l : plan->lists()) {
      ASSERT_GE(l.rank, 0);
      ASSERT_LT(l.rank, n);
      ASSERT_NE(l.queue, nullptr);
      EXPECT_EQ(l.queue->gpu(), comm.gpu(l.rank));
      EXPECT_EQ(l.queue->engine(), l.engine);
      EXPECT_EQ(l.queue->isa(), comm.isa(l.rank));
      bool known = false;
      for (const EngineInfo& e : node_.dev->topology().gpus[static_cast<size_t>(comm.gpu(l.rank))].engines)
        known |= e.id == l.engine;
      EXPECT_TRUE(known) << "engine " << l.engine << " is not one of the GPU's";
    }
    if (c.op == CollOp::p2p && plan->variant() == Variant::striped && bytes >= 4096) {
      EXPECT_GT(plan->lists().size(), 1u) << "striped p2p of " << bytes << " bytes used one engine";
    }
    if (c.op == CollOp::p2p && plan->variant() == Variant::single) {
      EXPECT_EQ(plan->lists().size(), 1u);
    }
    launch_and_verify(mem, *plan, n, launches);
  }

  Node node_;
};

TEST_P(CollData, EveryByteForEverySize) {
  const Case& c = GetParam();
  const int n = node_.comm->size();
  const std::vector<uint64_t> sizes = sizes_for(c);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int root = static_cast<int>((i * 5 + static_cast<size_t>(n) - 1) % static_cast<size_t>(n));
    int peer = static_cast<int>((static_cast<size_t>(root) + 1 + 2 * i) % static_cast<size_t>(n));
    if (peer == root) peer = (root + 1) % n;
    SCOPED_TRACE(op_variant(c.op, c.v) + " bytes=" + std::to_string(sizes[i]) + " root=" + std::to_string(root) +
                 " peer=" + std::to_string(peer));
    const uint64_t seed = 0xC011 + i * 7919 + static_cast<uint64_t>(c.op) * 131 + static_cast<uint64_t>(c.v);
    run(sizes[i], root, peer, Form::separate, launches_for(sizes[i]), seed);
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(All, CollData, ::testing::ValuesIn(all_cases()), case_name);

// In place: every op with an in-place form (not p2p; all_to_all only as swap,
// pcpy/b2b reject it: see CollErrors.InPlaceAllToAllNeedsSwap).
class CollInPlace : public CollData {};

// The in-place forms NCCL allows: all_gather with send[r] == recv[r] +
// r*bytes, broadcast with send[root] == recv[root], all_to_all (swap only)
// with send == recv, gather/scatter with the root's chunk in place.
TEST_P(CollInPlace, EveryByteForEverySize) {
  const Case& c = GetParam();
  const int n = node_.comm->size();
  const std::vector<uint64_t> sizes = kTsan ? std::vector<uint64_t>{4093}
                                      : c.topo == Topo::small3 ? std::vector<uint64_t>{1, 4093, kOverLimit}
                                                               : std::vector<uint64_t>{1, 4093, 100003};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int root = static_cast<int>((i * 3 + 1) % static_cast<size_t>(n));
    SCOPED_TRACE(op_variant(c.op, c.v) + " in place, bytes=" + std::to_string(sizes[i]) + " root=" +
                 std::to_string(root));
    run(sizes[i], root, (root + 1) % n, Form::in_place, launches_for(sizes[i]), 0x1D1ACE + i);
    if (HasFatalFailure()) return;
  }
}

std::vector<Case> in_place_cases() {
  std::vector<Case> out;
  for (const Case& c : all_cases())
    if (c.op != CollOp::p2p && (c.op != CollOp::all_to_all || c.v == Variant::swap)) out.push_back(c);
  return out;
}
INSTANTIATE_TEST_SUITE_P(All, CollInPlace, ::testing::ValuesIn(in_place_cases()), case_name);

// Plans of different ops share the communicator's queues and run one after
// another (and interleaved launches of two plans are independent).
TEST(CollShared, TwoPlansOnOneCommunicatorAlternate) {
  Node node;
  ASSERT_OK(make_node(Topo::mapped3, &node));
  const int n = node.comm->size();
  Mem mem(*node.dev, 77);
  CollectiveArgs ag = separate_args(mem, *node.comm, CollOp::all_gather, Variant::pcpy, 777);
  CollectiveArgs aa = separate_args(mem, *node.comm, CollOp::all_to_all, Variant::swap, 1001);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> p1, node.comm->plan(ag));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Plan> p2, node.comm->plan(aa));
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    mem.refill();
    const Mem::Image before = mem.snapshot();
    Mem::Image want = expected_after(mem, before, ag, n);
    want = expected_after(mem, want, aa, n);  // disjoint buffers: order does not matter
    ASSERT_OK(p1->launch(long_deadline()));
    ASSERT_OK(p2->launch(long_deadline()));
    ASSERT_OK(wait_done(*p2));
    ASSERT_OK(wait_done(*p1));
    ASSERT_TRUE(mem.matches(want));
  }
}

}  // namespace
}  // namespace conccl
