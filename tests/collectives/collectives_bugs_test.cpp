// tests/collectives/collectives_bugs_test.cpp - regression tests for library bugs
// found while writing this suite (swap aliasing, wait() returning before every
// packet ran, lists larger than their ring); each was fixed in src/collectives.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include "collectives/coll_fixture.hpp"

namespace conccl {
namespace {

using namespace conccl::coltest;

// validate.cpp skips the destination-overlaps-source check for every swap
// all-to-all, not only for the in-place form (send[r] == recv[r] for all r).
// Here recv[0] *is* send[1]: rank 0's phase-1 copy (send[0] -> recv[0])
// overwrites send[1] while rank 1's phase-1 copy reads it; the plan is
// accepted and the data is wrong.
// Fix: swap_in_place = op == all_to_all && variant == swap && send[r].va ==
// recv[r].va for every r; otherwise run the normal source-overlap check.
TEST(CollBugs, SwapWithAliasedBuffersIsRejected) {
  Node node;
  ASSERT_OK(make_node(Topo::mapped3, &node));
  Mem mem(*node.dev, 0xA11A5);
  CollectiveArgs a = separate_args(mem, *node.comm, CollOp::all_to_all, Variant::swap, 1000);
  a.send[1] = a.recv[0];
  Result<std::unique_ptr<Plan>> p = node.comm->plan(a);
  ASSERT_FALSE(p.ok()) << "accepted: recv[0] is send[1]";
  EXPECT_EQ(p.status().code(), Code::invalid_argument);
  EXPECT_TRUE(contains(p.status().message(), "overlaps a source")) << p.status().message();
}

// Plan::wait() returns (and running() turns false) as soon as every arrival
// signal's value word is reached, but Signal::signal_add advances the value
// first and the twin (+8) second: the list's last packet, the twin's atomic,
// may still be queued. Destroying the plan then frees signal memory an engine
// is about to write (here it lands in the next Signal allocated there, whose
// twin no longer equals value + 2^31); relaunching resets the signals before
// the late add lands.
// Fix: Plan::wait() also waits for every list's queue to consume its span
// (l.queue->wait_done(deadline, l.span.end)) and running() checks
// l.queue->completed() < l.span.end; or Signal::signal_add advances the twin
// first and the value last.
TEST(CollBugs, WaitCoversEveryPacketOfTheLaunch) {
  Node node;
  ASSERT_OK(make_node(Topo::mapped3, &node));
  Communicator& comm = *node.comm;
  Mem mem(*node.dev, 0x7A11);
  CollectiveArgs a = separate_args(mem, comm, CollOp::p2p, Variant::single, 4096, /*root=*/0);  // peer 1
  std::unique_ptr<Plan> plan = std::move(comm.plan(a)).value();
  ASSERT_EQ(plan->lists().size(), 1u);
  const PlanList& l = plan->lists().front();
  const int engine = l.engine;
  Queue* queue = l.queue;
  const uint64_t sig_va = plan->arrival(1).va();
  // 100 ms before each packet on the list's engine: copy, atomic (value), atomic (twin).
  ASSERT_OK(node.dev->inject(comm.gpu(0), l.engine, emu::Injection{.delay = std::chrono::milliseconds(100)}));
  ASSERT_OK(plan->launch(long_deadline()));
  ASSERT_OK(plan->wait(long_deadline()));
  EXPECT_FALSE(plan->running());
  const bool consumed = queue->completed() >= l.span.end;
  EXPECT_TRUE(consumed) << "wait() returned with " << (l.span.end - queue->completed())
                        << " bytes of the list still queued";
  plan.reset();  // frees the arrival signals
  // The next signal allocated gets the freed memory.
  std::vector<Signal> fresh;
  for (int i = 0; i < 64; ++i) {
    fresh.push_back(std::move(Signal::create(*node.dev)).value());
    if (fresh.back().va() == sig_va) break;
  }
  ASSERT_EQ(fresh.back().va(), sig_va) << "allocator did not reuse the freed signal";
  ASSERT_OK(node.dev->inject(comm.gpu(0), engine, emu::Injection{}));
  ASSERT_OK(queue->wait_done(long_deadline()));
  const uint64_t value = fresh.back().value();
  const uint64_t twin = *static_cast<uint64_t*>(node.dev->host_pointer(sig_va + 8, 8));
  EXPECT_EQ(twin, value + Signal::kTwinOffset) << "an engine wrote into a destroyed plan's signal";
}

// A plan whose command list cannot fit its queue's ring (Communicator
// Options::ring_bytes) is accepted by plan(); launch() then submits the lists
// that fit, fails on the first that does not ("the plan is running
// partially: wait() or destroy it") and leaves a launch that wait() can only
// time out on, with data already moved. Here a chain broadcast of 200 chunks
// on 4 KiB rings: launch fails after 1 of 3 lists.
// Fix: Communicator::plan() rejects a list whose cb.size_bytes() (plus
// worst-case ring-end padding) exceeds ring_bytes - 4, naming the list and
// Options::ring_bytes; or Plan::submit_all() checks every list's size before
// submitting any.
TEST(CollBugs, ListLargerThanTheRingIsRejectedUpFront) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<emu::EmuDevice> dev, make_device(Topo::mapped3));
  Communicator::Options o;
  o.ring_bytes = 4096;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> comm, Communicator::create(*dev, {5, 1, 6}, o));
  Mem mem(*dev, 0x4096);
  CollectiveArgs a = separate_args(mem, *comm, CollOp::broadcast, Variant::chain, 256 * 200);
  a.chain_chunks = 200;  // 200 copies + arrivals per list: far more than 4 KiB
  const Mem::Image before = mem.snapshot();
  Result<std::unique_ptr<Plan>> plan = comm->plan(a);
  if (!plan.ok()) {
    EXPECT_TRUE(plan.status().code() == Code::invalid_argument || plan.status().code() == Code::resource_exhausted)
        << plan.status().to_string();
    return;
  }
  std::map<const Queue*, uint64_t> w;
  for (const PlanList& l : (*plan)->lists()) w[l.queue] = l.queue->submitted();
  Status st = (*plan)->launch(Deadline::after_ms(200));
  ASSERT_FALSE(st.ok()) << "a list larger than the ring was submitted";
  for (const auto& [q, wp] : w) EXPECT_EQ(q->submitted(), wp) << "launch failed after submitting to engine " << q->engine();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_TRUE(mem.matches(before)) << "launch failed after moving data: " << st.to_string();
}

// A Communicator destroyed before its plans (issue #24: a heap-use-after-
// free in Plan::~Plan -> running() -> Communicator::local, seen with
// valgrind; nv_coll_bench's Path held its plans before its communicator).
// Any order is now safe: the communicator detaches its plans, whose calls
// then name the destroyed communicator, and which are destroyed later
// without touching it. Run under ASan, this is the "destroy the
// communicator first" program of the issue.
TEST(CollBugs, CommunicatorDestroyedBeforeItsPlans) {
  Node node;
  ASSERT_OK(make_node(Topo::mapped3, &node));
  auto memory = std::make_unique<Mem>(*node.dev, 0xD1E5);
  Mem& mem = *memory;
  CollectiveArgs a = separate_args(mem, *node.comm, CollOp::all_gather, Variant::automatic, 8192 + 4);
  Result<std::unique_ptr<Plan>> done = node.comm->plan(a), running = node.comm->plan(a);
  ASSERT_OK(done.status());
  ASSERT_OK(running.status());
  launch_and_verify(mem, **done, 3, 1);
  CollectiveArgs g = a;
  g.prelaunch = true;
  Result<std::unique_ptr<Plan>> gated = node.comm->plan(g);
  ASSERT_OK(gated.status());
  ASSERT_OK((*gated)->prelaunch(long_deadline()));  // never released
  mem.refill();
  Mem::Image before, want;
  mem.snapshot(&before);
  expected_after(mem, before, a, 3, &want);
  ASSERT_OK((*running)->launch(long_deadline()));  // never waited for

  node.comm.reset();  // before every plan
  ASSERT_TRUE(mem.matches(want)) << "the launch running at the destruction was completed first";
  for (Plan* p : {done->get(), running->get(), gated->get()}) {
    EXPECT_FALSE(p->attached());
    EXPECT_FALSE(p->running());
    EXPECT_TRUE(p->lists().empty());
    EXPECT_FALSE(p->arrival(0).valid());
    EXPECT_EQ(p->arrivals_expected(0), 0u);
    Status st = p->launch(long_deadline());
    EXPECT_EQ(st.code(), Code::invalid_argument);
    EXPECT_TRUE(contains(st.message(), "after its Communicator was destroyed")) << st.message();
    EXPECT_EQ(p->wait(long_deadline()).code(), Code::invalid_argument);
    EXPECT_EQ(p->release().code(), Code::invalid_argument);
    EXPECT_TRUE(contains(p->describe(), "detached")) << p->describe();
  }
  done->reset();
  running->reset();
  memory.reset();
  node.dev.reset();  // even the device before the last plan: a detached plan holds nothing of it
  gated->reset();
}

}  // namespace
}  // namespace conccl
