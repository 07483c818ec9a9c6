// tests/multiproc/reduction_procs_test.cpp - Communicator::call_reduction
// with one process per rank on the emulated node: reduce-scatter,
// all-reduce and reduce on 2, 4 and 8 processes, buffers inside a window
// (no message per call once registered) and outside (the vote), host- and
// stream-ordered (HostStream), in one piece and in pieces; every element
// of every rank's result compared bit for bit with the host reduction of
// all ranks' inputs in rank order (each rank regenerates the others' inputs
// from their seeds).
#include <gtest/gtest.h>

#include <cstdlib>

#include <cstring>

#include "collectives/reduction_test_data.hpp"
#include "conccl/bootstrap.hpp"
#include "conccl/collectives.hpp"
#include "conccl/emu.hpp"
#include "multiproc/fork_ranks.hpp"

namespace conccl::mptest {
namespace {

using redtest::random_elements;
using redtest::reference;

struct ProcsSetup {
  int nranks;
  bool windows;
  uint64_t staging;
  bool overlap = false;  // Options::reduce_overlap: pieces in two halves of the staging
};

// One reduction on this rank: its inputs from (seed, rank), the call, and
// its result checked. "" or what went wrong.
std::string one(Communicator& c, Device& dev, const Buffer& mem, HostStream* stream, ReduceColl coll, DataType t,
                ReduceOp op, uint64_t count, int root, uint64_t seed) {
  const int n = c.size(), me = c.rank();
  const uint64_t es = dtype_size(t);
  const uint64_t send_elems = coll == ReduceColl::reduce_scatter ? count * n : count;
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(random_elements(t, send_elems, seed * 977 + r));
  // Send at 0, recv after it (the same offsets on every rank).
  Buffer send = mem, recv = mem;
  send.size = send_elems * es;
  recv.va += 64ull << 20;
  recv.host = static_cast<uint8_t*>(recv.host) + (64ull << 20);
  recv.size = count * es;
  auto produce = [=] {
    std::memcpy(send.host, inputs[size_t(me)].data(), send_elems * es);
    std::memset(recv.host, 0x5A, count * es);
  };
  ReductionArgs a = redtest::reduction_args(coll, t, op, count, root);
  a.send = {send};
  a.recv = {recv};
  Status st;
  if (stream) {
    if (!stream->enqueue(produce).ok()) return "enqueue failed";
    st = c.call_reduction(a, stream);
    if (st.ok()) st = stream->synchronize(Deadline::after_ms(60000));
  } else {
    produce();
    st = c.call_reduction(a);
  }
  const std::string what = std::string(reduce_coll_name(coll)) + " " + dtype_name(t) + " " + reduce_op_name(op) +
                           " count " + std::to_string(count) + (stream ? " stream" : " host");
  if (!st.ok()) return what + ": " + st.to_string();
  (void)dev;
  const uint8_t* got = static_cast<const uint8_t*>(recv.host);
  if (coll == ReduceColl::reduce && me != root) {
    for (uint64_t i = 0; i < count * es; ++i)
      if (got[i] != 0x5A) return what + ": a non-root rank's recv was written";
    return "";
  }
  const std::vector<uint8_t> want =
      reference(t, op, inputs, coll == ReduceColl::reduce_scatter ? me * count * es : 0, count);
  for (uint64_t i = 0; i < count * es; ++i)
    if (got[i] != want[i]) return what + ": rank " + std::to_string(me) + " element " + std::to_string(i / es) + " WRONG";
  return "";
}

int rank_main(const ProcsSetup& s, const UniqueId& id, int me, std::string* out) {
  DeviceOptions o;
  o.settings = "preset=mi300x memory_per_gpu=1G";
  // More emulator settings for a whole run (ctest variants; window_calls_test.cpp).
  if (const char* more = std::getenv("CONCCL_TEST_EMU_SETTINGS")) o.settings += std::string(" ") + more;
  o.process_slot = me;
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(o);
  if (!dev.ok()) return *out += dev.status().to_string(), 2;
  Communicator::Options co;
  co.join_timeout_ms = 60000;
  co.call_timeout_ms = 60000;
  co.reduce_staging_bytes = s.staging;
  co.reduce_overlap = s.overlap;
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(**dev, me, s.nranks, id, co);
  if (!comm.ok()) return *out += comm.status().to_string(), 3;
  Communicator& c = **comm;
  Result<UniqueBuffer> mem = UniqueBuffer::alloc(**dev, c.gpu(me), 128ull << 20, MemKind::device);
  if (!mem.ok()) return 4;
  if (s.windows) {
    Result<Window> w = c.register_window(mem->get());
    if (!w.ok()) return *out += w.status().to_string(), 5;
  }
  Result<std::unique_ptr<HostStream>> stream = HostStream::create(**dev);
  if (!stream.ok()) return 6;
  uint64_t seed = 11;
  CommStats before{};
  for (ReduceColl coll : {ReduceColl::reduce_scatter, ReduceColl::all_reduce, ReduceColl::reduce})
    for (DataType t : {DataType::f32, DataType::bf16, DataType::i32})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::avg})
        for (HostStream* st : {static_cast<HostStream*>(nullptr), stream->get()}) {
          ++seed;
          const std::string bad = one(c, **dev, mem->get(), st, coll, t, op, 3001, static_cast<int>(seed % s.nranks), seed);
          if (!bad.empty()) return *out += bad + "\n", 1;
          if (seed == 12) before = c.stats();  // after the first call (which registers the staging)
        }
  // The two-step all-reduce (>= 256 KiB per rank, count not a multiple of n).
  for (HostStream* st : {static_cast<HostStream*>(nullptr), stream->get()}) {
    const std::string bad = one(c, **dev, mem->get(), st, ReduceColl::all_reduce, DataType::f16, ReduceOp::sum,
                                (160 << 10) + 3, 0, ++seed);
    if (!bad.empty()) return *out += bad + "\n", 1;
  }
  const CommStats after = c.stats();
  *out += "sent " + std::to_string(after.bootstrap_messages_sent - before.bootstrap_messages_sent) + "\n";
  // With the buffers in a window (and the staging in its own), no call
  // exchanges a message once the staging is registered.
  if (s.windows && after.bootstrap_messages_sent != before.bootstrap_messages_sent) return 7;
  if (!s.windows && after.bootstrap_messages_sent == before.bootstrap_messages_sent) return 8;
  return c.async_error().ok() ? 0 : 9;
}

class ReductionProcs : public ::testing::TestWithParam<ProcsSetup> {};

TEST_P(ReductionProcs, EveryCollectiveBitExact) {
  const ProcsSetup s = GetParam();
  const UniqueId id = make_unique_id().value();
  expect_ranks_ok(fork_ranks(all_ranks(s.nranks), [&](int r, std::string* out) { return rank_main(s, id, r, out); }));
}

INSTANTIATE_TEST_SUITE_P(Emu, ReductionProcs,
                         ::testing::Values(ProcsSetup{2, true, 1 << 20}, ProcsSetup{4, true, 1 << 20}, ProcsSetup{8, true, 1 << 20},
                                           ProcsSetup{3, false, 1 << 20}, ProcsSetup{4, true, 8192},
                                           ProcsSetup{4, true, 8192, true}, ProcsSetup{3, true, 4096, true}),
                         [](const auto& info) {
                           return std::to_string(info.param.nranks) + "procs" +
                                  (info.param.windows ? "_windows" : "_plain") +
                                  (info.param.staging < (1 << 20) ? "_pieces" : "") +
                                  (info.param.overlap ? "_overlapped" : "");
                         });

}  // namespace
}  // namespace conccl::mptest
