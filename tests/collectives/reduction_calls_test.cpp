// tests/collectives/reduction_calls_test.cpp - Communicator::call_reduction
// with every rank in one process on the emulated node: reduce-scatter,
// all-reduce and reduce for every element type and operator on 2, 4 and 8
// ranks, host- and stream-ordered, in one piece and in many (a small
// staging), both all-reduce algorithms, in place; every element compared
// bit for bit with the host reduction of the same inputs in rank order;
// and the argument errors.
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <optional>
#include <utility>

#include "collectives/reduction_test_data.hpp"
#include "conccl/collectives.hpp"
#include "conccl/emu.hpp"

namespace conccl {
namespace {

using namespace redtest;  // kOps, kTypes, random_elements, reference, ... (reduction_test_data.hpp)

struct Node {
  std::unique_ptr<emu::EmuDevice> dev;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<HostStream> stream;
};

Node make_node(int n, uint64_t staging, std::optional<bool> overlap = std::nullopt) {
  DeviceOptions o;
  o.settings = "preset=mi300x memory_per_gpu=1G";
  Node node;
  node.dev = std::move(emu::create(o).value());
  Communicator::Options co;
  co.reduce_staging_bytes = staging;
  co.reduce_overlap = overlap;
  std::vector<int> gpus;
  for (int r = 0; r < n; ++r) gpus.push_back(r);
  node.comm = std::move(Communicator::create(*node.dev, gpus, co).value());
  node.stream = std::move(HostStream::create(*node.dev).value());
  return node;
}

// One reduction: fresh random inputs, the call, every element checked.
// Returns "" or what went wrong.
std::string run_one(Node& node, ReduceColl coll, DataType t, ReduceOp op, uint64_t count, int root, bool on_stream,
                    bool in_place, uint64_t seed) {
  Communicator& c = *node.comm;
  const int n = c.size();
  const uint64_t es = dtype_size(t);
  const uint64_t send_elems = coll == ReduceColl::reduce_scatter ? count * n : count;
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<UniqueBuffer> sends, recvs;
  ReductionArgs a = redtest::reduction_args(coll, t, op, count, root);
  for (int r = 0; r < n; ++r) {
    inputs.push_back(random_elements(t, send_elems, seed * 131 + r));
    Result<UniqueBuffer> s = UniqueBuffer::alloc(*node.dev, r, send_elems * es, MemKind::device);
    Result<UniqueBuffer> v = UniqueBuffer::alloc(*node.dev, r, count * es, MemKind::device);
    if (!s.ok() || !v.ok()) return "alloc failed";
    std::memcpy(s->get().host, inputs.back().data(), send_elems * es);
    std::memset(v->get().host, 0xA5, count * es);  // stale bytes, never zeros
    Buffer send = s->get(), recv = v->get();
    if (in_place) {
      // NCCL's in-place forms: all-reduce and reduce into the send buffer,
      // reduce-scatter into this rank's chunk of it.
      recv = send;
      if (coll == ReduceColl::reduce_scatter) {
        recv.va += r * count * es;
        recv.host = static_cast<uint8_t*>(recv.host) + r * count * es;
        recv.size = count * es;
      }
    }
    a.send.push_back(send);
    a.recv.push_back(recv);
    sends.push_back(std::move(s).value());
    recvs.push_back(std::move(v).value());
  }
  Status st = c.call_reduction(a, on_stream ? node.stream.get() : nullptr);
  if (st.ok() && on_stream) st = node.stream->synchronize(Deadline::after_ms(60000));
  const std::string what = std::string(reduce_coll_name(coll)) + " " + dtype_name(t) + " " + reduce_op_name(op) +
                           " n=" + std::to_string(n) + " count=" + std::to_string(count) +
                           (on_stream ? " stream" : " host") + (in_place ? " in-place" : "");
  if (!st.ok()) return what + ": " + st.to_string();
  for (int r = 0; r < n; ++r) {
    if (coll == ReduceColl::reduce && r != root) {
      // Untouched: a non-root rank's receive buffer gets nothing.
      if (in_place) continue;
      const uint8_t* got = static_cast<const uint8_t*>(a.recv[size_t(r)].host);
      for (uint64_t i = 0; i < count * es; ++i)
        if (got[i] != 0xA5) return what + ": rank " + std::to_string(r) + "'s recv was written";
      continue;
    }
    const uint64_t at = coll == ReduceColl::reduce_scatter ? r * count * es : 0;
    const std::vector<uint8_t> want = reference(t, op, inputs, at, count);
    const uint8_t* got = static_cast<const uint8_t*>(a.recv[size_t(r)].host);
    for (uint64_t i = 0; i < count * es; ++i)
      if (got[i] != want[i])
        return what + ": rank " + std::to_string(r) + " element " + std::to_string(i / es) + " WRONG";
  }
  return "";
}

// Every collective x `types`, host- and stream-ordered, sum, root n - 1, in
// pieces as the node's staging makes them: "" or the first that went wrong.
std::string every_collective(Node& node, std::initializer_list<DataType> types, uint64_t count, uint64_t* seed) {
  const int n = node.comm->size();
  for (ReduceColl coll : {ReduceColl::reduce_scatter, ReduceColl::all_reduce, ReduceColl::reduce})
    for (DataType t : types)
      for (bool on_stream : {false, true}) {
        const std::string bad = run_one(node, coll, t, ReduceOp::sum, count, n - 1, on_stream, false, ++*seed);
        if (!bad.empty()) return bad;
      }
  return "";
}

// Every type x op x collective on n ranks, host and stream alternating.
class EveryTypeAndOp : public ::testing::TestWithParam<int> {};

TEST_P(EveryTypeAndOp, OnePieceBitExact) {
  const int n = GetParam();
  Node node = make_node(n, 1 << 20);
  uint64_t seed = 1;
  for (ReduceColl coll : {ReduceColl::reduce_scatter, ReduceColl::all_reduce, ReduceColl::reduce})
    for (DataType t : kTypes)
      for (ReduceOp op : kOps) {
        ++seed;
        const std::string bad = run_one(node, coll, t, op, 1000 + 3, static_cast<int>(seed % n), seed % 2 == 0,
                                        false, seed);
        ASSERT_EQ(bad, "");
      }
  EXPECT_TRUE(node.comm->async_error().ok());
}

INSTANTIATE_TEST_SUITE_P(Emu, EveryTypeAndOp, ::testing::Values(2, 4, 8),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// A staging of 4 KiB: every call runs in many pieces (reduce-scatter by one
// strided all-to-all per piece), and an all-reduce of 256 KiB and more
// takes the reduce-scatter + all-gather form, with the remainder (count not
// a multiple of n) in one shot.
TEST(Reductions, PiecesAndBothAllReduceForms) {
  for (int n : {3, 4}) {
    Node node = make_node(n, 4096);
    uint64_t seed = 100;
    ASSERT_EQ(every_collective(node, {DataType::f32, DataType::bf16, DataType::i64}, 5000 + 1, &seed), "");
    // Two-step all-reduce (>= 256 KiB per rank), count % n != 0.
    for (bool on_stream : {false, true})
      ASSERT_EQ(run_one(node, ReduceColl::all_reduce, DataType::f32, ReduceOp::avg, (80 << 10) + 1, 0, on_stream,
                        false, ++seed),
                "");
  }
  // The same two-step form in one piece.
  Node big = make_node(4, 8 << 20);
  ASSERT_EQ(run_one(big, ReduceColl::all_reduce, DataType::bf16, ReduceOp::max, (256 << 10) + 4, 0, true, false, 7), "");
}

// Options::reduce_overlap in one process, set both ways (unset, the other
// tests here, means on): on the stream, the staging as two halves, piece
// i's move posted before piece i-1's reduce and its waits queued after it
// (Plan::enqueue_split); off, each piece's move then its reduce. Many
// pieces, so that each half is written again while the stream still has
// the other half's reduce queued; host-ordered calls take turns either way.
// Every element checked.
TEST(Reductions, PiecesOverlapInOneProcessOrTakeTurns) {
  for (auto [n, overlap] : {std::pair{2, true}, std::pair{4, true}, std::pair{4, false}}) {
    SCOPED_TRACE(std::to_string(n) + " ranks, overlap " + (overlap ? "on" : "off"));
    Node node = make_node(n, 4096, overlap);
    uint64_t seed = 300;
    ASSERT_EQ(every_collective(node, {DataType::f32, DataType::bf16, DataType::u8}, 9000 + 5, &seed), "");
    // In place, and the two-step all-reduce (its reduce-scatter overlapped).
    ASSERT_EQ(run_one(node, ReduceColl::reduce_scatter, DataType::i32, ReduceOp::max, 20000, 0, true, true, ++seed),
              "");
    ASSERT_EQ(run_one(node, ReduceColl::all_reduce, DataType::f32, ReduceOp::avg, (80 << 10) + 3, 0, true, false,
                      ++seed),
              "");
    EXPECT_TRUE(node.comm->async_error().ok());
  }
}

TEST(Reductions, InPlace) {
  Node node = make_node(4, 1 << 20);
  uint64_t seed = 500;
  for (ReduceColl coll : {ReduceColl::reduce_scatter, ReduceColl::all_reduce, ReduceColl::reduce})
    for (bool on_stream : {false, true})
      for (uint64_t count : {uint64_t(777), uint64_t(70000)})
        ASSERT_EQ(run_one(node, coll, DataType::f32, ReduceOp::sum, count, 2, on_stream, true, ++seed), "");
  // Two-step all-reduce in place.
  ASSERT_EQ(run_one(node, ReduceColl::all_reduce, DataType::i32, ReduceOp::prod, 100000, 0, false, true, ++seed), "");
}

TEST(Reductions, ArgumentErrorsNameTheFix) {
  Node node = make_node(2, 1 << 20);
  Communicator& c = *node.comm;
  UniqueBuffer s0 = std::move(UniqueBuffer::alloc(*node.dev, 0, 4096, MemKind::device).value());
  UniqueBuffer s1 = std::move(UniqueBuffer::alloc(*node.dev, 1, 4096, MemKind::device).value());
  ReductionArgs a;
  a.coll = ReduceColl::all_reduce;
  a.count = 1024;
  a.send = {s0.get(), s1.get()};
  a.recv = {s0.get(), s1.get()};
  auto expect = [&](ReductionArgs x, const std::string& text) {
    Status st = c.call_reduction(x);
    EXPECT_EQ(st.code(), Code::invalid_argument) << st.to_string();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.to_string();
  };
  ReductionArgs x = a;
  x.count = 0;
  expect(x, "count must be > 0");
  x = a;
  x.count = 2048;
  expect(x, "send buffer has 4096 bytes; 2048 elements of float need 8192");
  x = a;
  x.dtype = static_cast<DataType>(3);
  expect(x, "unknown element type 3");
  x = a;
  x.op = static_cast<ReduceOp>(9);
  expect(x, "unknown operator 9");
  x = a;
  x.root = 2;
  x.coll = ReduceColl::reduce;
  expect(x, "root 2 is not a rank");
  x = a;
  x.send.pop_back();
  expect(x, "one send and one recv buffer per rank (2)");
  x = a;
  x.coll = ReduceColl::reduce_scatter;
  expect(x, "send buffer has 4096 bytes; 2048 elements");
  // A count whose byte size wraps 64 bits is refused, not checked modulo 2^64.
  x = a;
  x.count = (uint64_t{1} << 62) + 1;
  Status huge = c.call_reduction(x);
  EXPECT_EQ(huge.code(), Code::out_of_range) << huge.to_string();
  // Still works after the errors.
  EXPECT_EQ(run_one(node, ReduceColl::all_reduce, DataType::u8, ReduceOp::max, 333, 0, false, false, 9), "");
  // Names.
  ReduceColl rc;
  EXPECT_TRUE(parse_reduce_coll("reducescatter", &rc) && rc == ReduceColl::reduce_scatter);
  EXPECT_TRUE(parse_reduce_coll("all_reduce", &rc) && rc == ReduceColl::all_reduce);
  EXPECT_FALSE(parse_reduce_coll("allgather", &rc));
}

// A stream that would not run work in order now (a CUDA stream capturing a
// graph: CudaStreamOps::ready_to_order asks cuStreamIsCapturing) refuses
// every call before anything is submitted: no list on any engine, the
// communicator unharmed, the same call fine once the stream is ready.
class CapturingStream final : public StreamOps {
 public:
  explicit CapturingStream(HostStream& s) : s_(s) {}
  Status write_value64(uint64_t va, uint64_t value) override { return s_.write_value64(va, value); }
  Status wait_value64(uint64_t va, uint64_t value) override { return s_.wait_value64(va, value); }
  Status reduce(const DeviceReduceStep& step) override { return s_.reduce(step); }
  Status ready_to_order() override {
    if (!capturing) return Status();
    return error(Code::invalid_argument, "the CUDA stream is capturing a CUDA graph (a test's stand-in)");
  }
  bool capturing = true;

 private:
  HostStream& s_;
};

TEST(StreamCapture, CallsOnACapturingStreamAreRefusedBeforeAnythingRuns) {
  Node node = make_node(2, 1 << 20);
  Communicator& c = *node.comm;
  CapturingStream stream(*node.stream);
  const uint64_t bytes = 4096;
  std::vector<UniqueBuffer> owned;
  CollectiveArgs a;
  a.op = CollOp::all_gather;
  a.bytes = bytes;
  for (int r = 0; r < 2; ++r) {
    owned.push_back(std::move(UniqueBuffer::alloc(*node.dev, r, bytes, MemKind::device).value()));
    owned.push_back(std::move(UniqueBuffer::alloc(*node.dev, r, 2 * bytes, MemKind::device).value()));
    std::vector<uint8_t> data = random_elements(DataType::u8, bytes, 77 + r);
    std::memcpy(owned[owned.size() - 2].get().host, data.data(), bytes);
    a.send.push_back(owned[owned.size() - 2].get());
    a.recv.push_back(owned.back().get());
  }
  const Status st = c.call(a, &stream);
  EXPECT_EQ(st.code(), Code::invalid_argument) << st.to_string();
  EXPECT_NE(st.message().find("capturing a CUDA graph"), std::string::npos) << st.message();
  EXPECT_EQ(c.stats().cached_plans, 0u) << "refused before planning";
  ReductionArgs r;
  r.coll = ReduceColl::all_reduce;
  r.dtype = DataType::i32;
  r.count = bytes / 4;
  r.send = {a.send[0], a.send[1]};
  r.recv = {a.recv[0], a.recv[1]};
  EXPECT_EQ(c.call_reduction(r, &stream).code(), Code::invalid_argument);
  CollectiveArgs p = a;
  p.prelaunch = true;
  std::unique_ptr<Plan> plan = std::move(c.plan(p).value());
  EXPECT_EQ(plan->enqueue(stream, Deadline::after_ms(1000)).code(), Code::invalid_argument);
  ASSERT_TRUE(plan->launch(Deadline::after_ms(1000)).ok()) << "a refused enqueue leaves the plan unlaunched";
  ASSERT_TRUE(plan->wait(Deadline::after_ms(10000)).ok());
  plan.reset();
  // Out of capture, the same call runs and every byte arrives.
  stream.capturing = false;
  ASSERT_TRUE(c.call(a, &stream).ok());
  ASSERT_TRUE(node.stream->synchronize(Deadline::after_ms(10000)).ok());
  for (int d = 0; d < 2; ++d)
    for (int s2 = 0; s2 < 2; ++s2)
      EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(a.recv[d].host) + s2 * bytes, a.send[s2].host, bytes), 0)
          << "rank " << d << " chunk " << s2;
}

}  // namespace
}  // namespace conccl
