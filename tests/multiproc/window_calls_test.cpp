// tests/multiproc/window_calls_test.cpp - Communicator::call through
// symmetric windows, one process per rank on the emulated node: every op,
// host- and stream-ordered (HostStream), every byte checked against what
// the other ranks sent, no bootstrap message per call once the windows are
// registered; and the failures: a killed rank, a rank that stops calling,
// ranks whose buffers sit at different window offsets.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <span>
#include <sstream>
#include <thread>

#include "conccl/bootstrap.hpp"
#include "conccl/collectives.hpp"
#include "conccl/emu.hpp"
#include "multiproc/fork_ranks.hpp"

namespace conccl::mptest {
namespace {

// Every byte from (seed, index): any rank computes what any other sent.
uint8_t byte_of(uint64_t seed, uint64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + (i / 8) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x >> (8 * (i % 8)));
}

struct NodeSetup {
  const char* preset;
  bool loopback;
  int nranks;
};

DeviceOptions dev_opts(const NodeSetup& s, int rank) {
  DeviceOptions o;
  o.settings = std::string("preset=") + s.preset + " memory_per_gpu=2G";
  // More emulator settings for a whole run (the ctest variants): say,
  // host_maps_gpu_memory=0, a host with no mapping of GPU memory, as CUDA's.
  if (const char* more = std::getenv("CONCCL_TEST_EMU_SETTINGS")) o.settings += std::string(" ") + more;
  o.process_slot = rank;
  return o;
}

Communicator::Options comm_opts(const NodeSetup& s, int64_t call_timeout_ms = 30000) {
  Communicator::Options o;
  o.loopback = s.loopback;
  o.join_timeout_ms = 60000;
  o.call_timeout_ms = call_timeout_ms;
  return o;
}

// Rank `me` in this process: its device (process slot me) and communicator.
struct RankEnv {
  std::unique_ptr<emu::EmuDevice> dev;
  std::unique_ptr<Communicator> comm;  // destroyed before dev (declared after it)
};

// Opens rank `me` into *e: 0, or 2 (the device) or 3 (the communicator) with
// *out saying why.
int open_rank(const NodeSetup& s, const UniqueId& id, int me, RankEnv* e, std::string* out,
              int64_t call_timeout_ms = 30000) {
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(dev_opts(s, me));
  if (!dev.ok()) return *out += dev.status().to_string(), 2;
  e->dev = std::move(dev).value();
  Result<std::unique_ptr<Communicator>> comm =
      Communicator::create(*e->dev, me, s.nranks, id, comm_opts(s, call_timeout_ms));
  if (!comm.ok()) return *out += comm.status().to_string(), 3;
  e->comm = std::move(comm).value();
  return 0;
}

// Where each op's buffers sit in a window of kWindow bytes: send at
// kSendAt, recv at kRecvAt (the same offsets on every rank).
constexpr uint64_t kWindow = 8 << 20;
constexpr uint64_t kSendAt = 0, kRecvAt = 4 << 20;

uint64_t seed_of(int rank, int round, int op) { return 1000003ull * (round + 1) + 7919ull * (rank + 1) + op * 31 + 5; }

// One call of `op` on this rank, with fresh data; checks every byte this
// rank receives. Returns "" or what went wrong.
std::string one_call(Communicator& c, const Window& w, CollOp op, uint64_t bytes, int root, int round,
                     HostStream* stream) {
  const int n = c.size(), me = c.rank();
  CollectiveArgs a;
  a.op = op;
  a.bytes = bytes;
  a.root = root;
  a.peer = (root + 1) % n;
  const uint64_t sb = op == CollOp::all_to_all ? bytes * n : op == CollOp::scatter ? bytes * n : bytes;
  const uint64_t rb = op == CollOp::all_gather || op == CollOp::all_to_all || op == CollOp::gather ? bytes * n : bytes;
  Buffer send = w.at(kSendAt, sb), recv = w.at(kRecvAt, rb);
  auto* sp = send.as<uint8_t>();
  auto* rp = recv.as<uint8_t>();
  const uint64_t seed = seed_of(me, round, static_cast<int>(op));
  auto produce = [=] {
    for (uint64_t i = 0; i < sb; ++i) sp[i] = byte_of(seed, i);
    for (uint64_t i = 0; i < rb; ++i) rp[i] = static_cast<uint8_t>(0xA5 ^ i);  // stale data, never zeros
  };
  // Every rank passes both buffers (NCCL's symmetric rule).
  a.send = {send};
  a.recv = {recv};
  Status st;
  if (stream) {
    // The producer runs on the stream before the call: the call must not
    // read the send buffer before it.
    if (!stream->enqueue(produce).ok()) return "enqueue failed";
    st = c.call(a, stream);
    if (st.ok()) st = stream->synchronize(Deadline::after_ms(30000));
    if (st.ok()) st = c.async_error();
  } else {
    produce();
    st = c.call(a);
  }
  if (!st.ok()) return std::string(coll_op_name(op)) + ": " + st.to_string();
  // What this rank must hold now.
  std::string bad;
  auto expect = [&](uint64_t at, int from, uint64_t from_off, uint64_t len) {
    const uint64_t s = seed_of(from, round, static_cast<int>(op));
    for (uint64_t i = 0; i < len && bad.empty(); ++i)
      if (rp[at + i] != byte_of(s, from_off + i))
        bad = std::string(coll_op_name(op)) + " round " + std::to_string(round) + ": rank " + std::to_string(me) +
              " byte " + std::to_string(at + i) + " (from rank " + std::to_string(from) + ") WRONG";
  };
  switch (op) {
    case CollOp::all_gather:
      for (int r = 0; r < n; ++r) expect(r * bytes, r, 0, bytes);
      break;
    case CollOp::all_to_all:
      for (int r = 0; r < n; ++r) expect(r * bytes, r, me * bytes, bytes);
      break;
    case CollOp::broadcast: expect(0, root, 0, bytes); break;
    case CollOp::scatter: expect(0, root, me * bytes, bytes); break;
    case CollOp::gather:
      if (me == root)
        for (int r = 0; r < n; ++r) expect(r * bytes, r, 0, bytes);
      break;
    case CollOp::p2p:
      if (me == a.peer) expect(0, root, 0, bytes);
      break;
  }
  return bad;
}

// A rank of the matrix: every op, three sizes, host- and stream-ordered,
// two rounds each; then the message count.
int matrix_rank(const NodeSetup& s, const UniqueId& id, int me, std::string* out) {
  RankEnv e;
  if (int rc = open_rank(s, id, me, &e, out)) return rc;
  emu::EmuDevice& dev = *e.dev;
  Communicator& c = *e.comm;
  const int gpu = c.gpu(me);
  Result<UniqueBuffer> mem = UniqueBuffer::alloc(dev, gpu, kWindow, MemKind::device);
  if (!mem.ok()) return *out += mem.status().to_string(), 4;
  Result<Window> w = c.register_window(mem->get());
  if (!w.ok()) return *out += "register_window: " + w.status().to_string(), 5;
  Result<std::unique_ptr<HostStream>> stream = HostStream::create(dev);
  if (!stream.ok()) return 6;
  const CommStats before = c.stats();
  // Creating the communicator and registering the window did exchange.
  if (before.bootstrap_messages_sent == 0 || before.bootstrap_messages_received == 0)
    return *out += "no bootstrap message counted before the calls\n", 10;
  const CollOp ops[] = {CollOp::all_gather, CollOp::all_to_all, CollOp::broadcast,
                        CollOp::gather,     CollOp::scatter,    CollOp::p2p};
  int calls = 0;
  for (uint64_t bytes : {uint64_t(4096), uint64_t(64 << 10) + 256, uint64_t(256 << 10)})
    for (CollOp op : ops)
      for (int round = 0; round < 2; ++round)
        for (HostStream* st : {static_cast<HostStream*>(nullptr), stream->get()}) {
          const int root = (round + calls) % s.nranks;
          const std::string bad = one_call(c, *w, op, bytes, root, round * 7 + calls, st);
          ++calls;
          if (!bad.empty()) return *out += bad + "\n", 1;
        }
  // In place, as NCCL allows: the all-gather's send is this rank's chunk of
  // its receive buffer; the all-to-all's (SDMA 4.4.2 swaps) is the buffer.
  for (HostStream* st : {static_cast<HostStream*>(nullptr), stream->get()}) {
    const uint64_t bytes = 8192 + 128;
    CollectiveArgs a;
    a.op = CollOp::all_gather;
    a.bytes = bytes;
    Buffer recv = w->at(kRecvAt, bytes * s.nranks);
    a.recv = {recv};
    a.send = {w->at(kRecvAt + bytes * me, bytes)};
    uint8_t* rp = recv.as<uint8_t>();
    for (uint64_t i = 0; i < bytes * s.nranks; ++i) rp[i] = 0x3C;
    for (uint64_t i = 0; i < bytes; ++i) rp[bytes * me + i] = byte_of(seed_of(me, 99, 0), i);
    Status r = c.call(a, st);
    if (r.ok() && st) r = st->synchronize(Deadline::after_ms(30000));
    if (!r.ok()) return *out += "in-place all_gather: " + r.to_string() + "\n", 11;
    for (int q = 0; q < s.nranks; ++q)
      for (uint64_t i = 0; i < bytes; ++i)
        if (rp[bytes * q + i] != byte_of(seed_of(q, 99, 0), i))
          return *out += "in-place all_gather: byte " + std::to_string(i) + " of rank " + std::to_string(q) + " WRONG\n", 12;
    ++calls;
    if (!c.caps().swap) continue;
    a.op = CollOp::all_to_all;
    a.send = {recv};
    for (uint64_t i = 0; i < bytes * s.nranks; ++i) rp[i] = byte_of(seed_of(me, 98, 0), i);
    r = c.call(a, st);
    if (r.ok() && st) r = st->synchronize(Deadline::after_ms(30000));
    if (!r.ok()) return *out += "in-place all_to_all: " + r.to_string() + "\n", 13;
    for (int q = 0; q < s.nranks; ++q)
      for (uint64_t i = 0; i < bytes; ++i)
        if (rp[bytes * q + i] != byte_of(seed_of(q, 98, 0), bytes * me + i))
          return *out += "in-place all_to_all: byte " + std::to_string(i) + " from rank " + std::to_string(q) + " WRONG\n", 14;
    ++calls;
  }
  const CommStats after = c.stats();
  *out += "calls " + std::to_string(after.calls - before.calls) + " window_calls " +
          std::to_string(after.window_calls - before.window_calls) + " sent " +
          std::to_string(after.bootstrap_messages_sent - before.bootstrap_messages_sent) + " received " +
          std::to_string(after.bootstrap_messages_received - before.bootstrap_messages_received) + " plans " +
          std::to_string(after.window_plans) + "\n";
  if (after.bootstrap_messages_sent != before.bootstrap_messages_sent ||
      after.bootstrap_messages_received != before.bootstrap_messages_received)
    return 7;
  if (after.window_calls - before.window_calls != static_cast<uint64_t>(calls)) return 8;
  // Under CONCCL_GATED_SUBMIT=1 (the test_window_calls_gated run) every
  // stream-ordered call is gated; otherwise none is.
  const char* g = std::getenv("CONCCL_GATED_SUBMIT");
  const bool gated = g && std::string(g) == "1";
  *out += "gated " + std::to_string(after.gated_calls - before.gated_calls) + " early " +
          std::to_string(after.gates_opened_early) + "\n";
  if (gated ? after.gated_calls == before.gated_calls : after.gated_calls != 0) return 10;
  Status d = c.deregister_window(*w);
  if (!d.ok()) return *out += "deregister: " + d.to_string(), 9;
  return 0;
}

class WindowCalls : public ::testing::TestWithParam<NodeSetup> {};

TEST_P(WindowCalls, EveryOpEveryByteNoMessagePerCall) {
  const NodeSetup s = GetParam();
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res =
      fork_ranks(all_ranks(s.nranks), [&](int r, std::string* out) { return matrix_rank(s, id, r, out); });
  ASSERT_NO_FATAL_FAILURE(expect_ranks_ok(res));
  for (const RankOutcome& o : res) EXPECT_NE(o.out.find(" sent 0 received 0 "), std::string::npos) << o.out;
}

INSTANTIATE_TEST_SUITE_P(Emu, WindowCalls,
                         ::testing::Values(NodeSetup{"mi300x", false, 2}, NodeSetup{"mi300x", false, 4},
                                           NodeSetup{"mi300x", false, 8}, NodeSetup{"h200", true, 2},
                                           NodeSetup{"h200", true, 4}),
                         [](const auto& info) {
                           return std::string(info.param.preset) + "_" + std::to_string(info.param.nranks) + "procs";
                         });

// Sets up rank `me` with a registered window; `body` makes the calls.
int with_window(const NodeSetup& s, const UniqueId& id, int me, int64_t call_timeout_ms, std::string* out,
                const std::function<int(emu::EmuDevice&, Communicator&, const Window&)>& body) {
  RankEnv e;
  if (int rc = open_rank(s, id, me, &e, out, call_timeout_ms)) return rc;
  Result<UniqueBuffer> mem = UniqueBuffer::alloc(*e.dev, e.comm->gpu(me), kWindow, MemKind::device);
  if (!mem.ok()) return 4;
  Result<Window> w = e.comm->register_window(mem->get());
  if (!w.ok()) return *out += w.status().to_string(), 5;
  return body(*e.dev, *e.comm, *w);
}

CollectiveArgs gather_args(const Window& w, int n, uint64_t bytes, uint64_t send_at = kSendAt) {
  CollectiveArgs a;
  a.op = CollOp::all_gather;
  a.bytes = bytes;
  a.send = {w.at(send_at, bytes)};
  a.recv = {w.at(kRecvAt, bytes * n)};
  return a;
}

TEST(WindowCallFaults, AKilledRankFailsTheOthersStreamCallsNamingIt) {
  const NodeSetup s{"mi300x", false, 3};
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks({0, 1, 2}, [&](int me, std::string* out) {
    return with_window(s, id, me, 20000, out, [&](emu::EmuDevice& dev, Communicator& c, const Window& w) {
      Result<std::unique_ptr<HostStream>> stream = HostStream::create(dev, 60000);
      // One good call, then rank 2 dies before the second.
      Status st = c.call(gather_args(w, 3, 4096), stream->get());
      if (st.ok()) st = (*stream)->synchronize(Deadline::after_ms(20000));
      if (!st.ok()) return *out += "first call: " + st.to_string(), 6;
      if (me == 2) kill(getpid(), SIGKILL);
      const auto t0 = std::chrono::steady_clock::now();
      // Either the call is taken and fails later (the stream is then
      // released, not left waiting), or, when another survivor has already
      // failed the communicator, it is refused at once with that error.
      st = c.call(gather_args(w, 3, 4096), stream->get());
      Status sy = (*stream)->synchronize(Deadline::after_ms(30000));
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      *out += "call: " + st.to_string() + "\nasync: " + c.async_error().to_string() + "\nsync: " + sy.to_string() +
              "\ntook " + std::to_string(took) + "\n";
      // Every later call reports it.
      Status again = c.call(gather_args(w, 3, 4096));
      *out += "again: " + again.to_string() + "\n";
      return c.async_error().ok() || again.ok() ? 8 : 0;
    });
  });
  EXPECT_EQ(res[2].exit_code, 128 + SIGKILL);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res[size_t(r)].exit_code, 0) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("rank 2 (pid"), std::string::npos) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("left the communicator"), std::string::npos) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("sync: ok"), std::string::npos) << res[size_t(r)].out;
    EXPECT_LT(res[size_t(r)].seconds, 15.0) << res[size_t(r)].out;  // well before the 20 s timeout
  }
}

TEST(WindowCallFaults, ARankThatStopsCallingIsNamedAtTheTimeout) {
  const NodeSetup s{"mi300x", false, 3};
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks({0, 1, 2}, [&](int me, std::string* out) {
    return with_window(s, id, me, 1500, out, [&](emu::EmuDevice& dev, Communicator& c, const Window& w) {
      Result<std::unique_ptr<HostStream>> stream = HostStream::create(dev, 60000);
      for (int i = 0; i < 3; ++i) {
        Status st = c.call(gather_args(w, 3, 4096), stream->get());
        if (!st.ok()) return *out += st.to_string(), 6;
      }
      if (!(*stream)->synchronize(Deadline::after_ms(20000)).ok()) return 7;
      if (me == 2) {  // stops calling, stays alive until the others gave up
        std::this_thread::sleep_for(std::chrono::seconds(6));
        return 0;
      }
      Status st = c.call(gather_args(w, 3, 4096), stream->get());
      Status sy = (*stream)->synchronize(Deadline::after_ms(20000));
      *out += "call: " + st.to_string() + "\nasync: " + c.async_error().to_string() + "\nsync: " + sy.to_string() + "\n";
      // And a host-ordered call fails at once with the same error.
      Status again = c.call(gather_args(w, 3, 4096));
      *out += "again: " + again.to_string() + "\n";
      return c.async_error().ok() ? 8 : 0;
    });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res[size_t(r)].exit_code, 0) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("call 4 did not complete"), std::string::npos) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("rank 2 has made 3 calls"), std::string::npos) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("sync: ok"), std::string::npos) << res[size_t(r)].out;
  }
  EXPECT_EQ(res[2].exit_code, 0) << res[2].out;
}

TEST(WindowCallFaults, DifferentOffsetsOnTwoRanksAreRefusedNotCopied) {
  const NodeSetup s{"mi300x", false, 2};
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks({0, 1}, [&](int me, std::string* out) {
    return with_window(s, id, me, 10000, out, [&](emu::EmuDevice&, Communicator& c, const Window& w) {
      // Rank 1 is late, so that rank 0's lists are queued when rank 1 finds
      // the mismatch; rank 1's send sits 64 bytes further in.
      if (me == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      uint8_t* recv = w.at(kRecvAt, 8192).as<uint8_t>();
      std::memset(recv, 0x5A, 8192);
      Status st = c.call(gather_args(w, 2, 4096, me == 1 ? 64 : 0));
      *out += "call: " + st.to_string() + "\nasync: " + c.async_error().to_string() + "\n";
      // Nothing was copied into this rank's receive buffer.
      bool untouched = true;
      for (int i = 0; i < 8192; ++i) untouched = untouched && recv[i] == 0x5A;
      *out += untouched ? "untouched\n" : "recv WRITTEN\n";
      return st.ok() ? 6 : 0;
    });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res[size_t(r)].exit_code, 0) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("w0+64"), std::string::npos) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("untouched"), std::string::npos) << res[size_t(r)].out;
    EXPECT_LT(res[size_t(r)].seconds, 8.0) << res[size_t(r)].out;  // not the 10 s timeout
  }
}

// CONCCL_CALL_TRACE: rank 0's host stamps when every rank's counters reached
// each call's values; the stamps must follow the protocol's causality (a
// rank's data arrives after every rank posted the call; a rank posts the
// next call only after its own arrivals and sent of this one).
TEST(WindowCallTrace, EveryCallsCountersStampedInCausalOrder) {
  const NodeSetup s{"h200", true, 3};
  const UniqueId id = make_unique_id().value();
  const std::string prefix = ::testing::TempDir() + "conccl_call_trace_" + std::to_string(::getpid());
  constexpr int kCalls = 40;
  // The watcher can only stamp what it sees before a rank leaves (a rank's
  // signal memory goes with it), so ranks 1 and 2 stay until rank 0's
  // communicator, and with it the trace, is gone (a marker file says so).
  const std::string marker = prefix + ".written";
  std::vector<RankOutcome> res = fork_ranks({0, 1, 2}, [&](int me, std::string* out) {
    ::setenv("CONCCL_CALL_TRACE", prefix.c_str(), 1);  // only rank 0 traces
    RankEnv e;
    if (int rc = open_rank(s, id, me, &e, out, 20000)) return rc;
    int rc = 0;
    {
      Result<UniqueBuffer> mem = UniqueBuffer::alloc(*e.dev, e.comm->gpu(me), kWindow, MemKind::device);
      if (!mem.ok()) return 4;
      Result<Window> w = e.comm->register_window(mem->get());
      if (!w.ok()) return *out += w.status().to_string(), 5;
      Result<std::unique_ptr<HostStream>> stream = HostStream::create(*e.dev);
      if (!stream.ok()) return 6;
      for (int i = 0; i < kCalls && rc == 0; ++i) {
        HostStream* st = i % 2 ? stream->get() : nullptr;  // host- and stream-ordered
        const std::string bad = one_call(*e.comm, *w, CollOp::all_gather, 4096 + 64 * i, 0, i, st);
        if (!bad.empty()) *out += bad + "\n", rc = 1;
      }
      if (me == 0) {
        *out += "pid " + std::to_string(::getpid()) + "\n";
        e.comm.reset();  // the trace is written here
        std::ofstream(marker) << "done\n";
      } else {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!std::ifstream(marker).good() && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    return rc;
  });
  std::remove(marker.c_str());
  ASSERT_NO_FATAL_FAILURE(expect_ranks_ok(res));
  const size_t at = res[0].out.find("pid ");
  ASSERT_NE(at, std::string::npos) << res[0].out;
  const std::string path = prefix + "." + std::to_string(std::stoll(res[0].out.substr(at + 4))) + ".csv";
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "no trace at " << path;
  std::string line;
  std::getline(f, line);
  // "# longest pass of the watcher: N ns ...": stamps of two words stored one
  // after the other may be out of order by up to that.
  ASSERT_EQ(line.rfind("# longest pass of the watcher: ", 0), 0u) << line;
  const long long slack = std::stoll(line.substr(std::strlen("# longest pass of the watcher: ")));
  ASSERT_GT(slack, 0);
  std::getline(f, line);
  EXPECT_EQ(line, "k,posted_0,arrive_0,sent_0,posted_1,arrive_1,sent_1,posted_2,arrive_2,sent_2");
  std::vector<std::vector<long long>> rows;
  while (std::getline(f, line)) {
    std::vector<long long> v;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) {
      ASSERT_FALSE(cell.empty()) << "a counter never reached its value: " << line;
      v.push_back(std::stoll(cell));
    }
    ASSERT_EQ(v.size(), 10u) << line;
    rows.push_back(v);
  }
  std::remove(path.c_str());
  ASSERT_EQ(rows.size(), size_t(kCalls));
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<long long>& v = rows[i];
    EXPECT_EQ(v[0], static_cast<long long>(i + 1));
    const long long last_post = std::max({v[1], v[4], v[7]}) - slack;
    for (int r = 0; r < 3; ++r) {
      EXPECT_GE(v[2 + 3 * r], last_post) << "call " << v[0] << ": rank " << r << "'s data arrived before every rank posted";
      EXPECT_GE(v[3 + 3 * r], last_post) << "call " << v[0] << ": rank " << r << "'s lists ended before every rank posted";
      if (i + 1 < rows.size()) {
        EXPECT_GE(rows[i + 1][1 + 3 * r] + slack, v[2 + 3 * r]) << "rank " << r << " posted call " << v[0] + 1 << " before its data of call " << v[0];
        EXPECT_GE(rows[i + 1][1 + 3 * r] + slack, v[3 + 3 * r]) << "rank " << r << " posted call " << v[0] + 1 << " before its lists of call " << v[0] << " ended";
      }
    }
  }
}

// A stream that records which of its waits may poll (StreamOps::Op::poll)
// and hands every step to a HostStream.
class PollRecordingStream final : public StreamOps {
 public:
  explicit PollRecordingStream(HostStream& s) : s_(s) {}
  Status write_value64(uint64_t va, uint64_t value) override { return s_.write_value64(va, value); }
  Status wait_value64(uint64_t va, uint64_t value) override {
    waits++;
    return s_.wait_value64(va, value);
  }
  Status batch(std::span<const Op> ops) override {
    for (const Op& op : ops)
      if (op.wait) {
        waits++;
        polled += op.poll;
        shared += op.shares_gpu;
      }
    return s_.batch(ops);
  }
  int waits = 0, polled = 0, shared = 0;

 private:
  HostStream& s_;
};

// Which waits may poll (StreamOps::Op::poll; docs/collectives.md,
// CONCCL_STREAM_WAITS): a small call's, never a large call's; and whether
// they say that another process of the communicator uses the GPU
// (Op::shares_gpu: loopback ranks on one GPU), which a CUDA stream's
// default needs before it polls.
TEST(WindowCallPolling, SmallCallsWaitsMayPollLargeOnesNot) {
  for (const NodeSetup& s : {NodeSetup{"mi300x", false, 2}, NodeSetup{"h200", true, 2}}) {
    SCOPED_TRACE(s.preset);
    const UniqueId id = make_unique_id().value();
    std::vector<RankOutcome> res = fork_ranks({0, 1}, [&](int me, std::string* out) {
      return with_window(s, id, me, 20000, out, [&](emu::EmuDevice& dev, Communicator& c, const Window& w) {
        Result<std::unique_ptr<HostStream>> hs = HostStream::create(dev);
        if (!hs.ok()) return 6;
        PollRecordingStream rec(**hs);
        for (uint64_t bytes : {uint64_t(4096), uint64_t(1) << 20}) {
          rec.waits = rec.polled = rec.shared = 0;
          Status st = c.call(gather_args(w, s.nranks, bytes), &rec);
          if (st.ok()) st = (*hs)->synchronize(Deadline::after_ms(20000));
          if (!st.ok()) return *out += st.to_string(), 1;
          *out += std::to_string(bytes) + ": " + std::to_string(rec.polled) + "/" + std::to_string(rec.waits) + "\n";
          const bool may = bytes <= 4096;
          if (rec.waits == 0 || rec.polled != (may ? rec.waits : 0)) return 2;
          if (rec.shared != (s.loopback ? rec.waits : 0)) return 3;
        }
        return 0;
      });
    });
    ASSERT_NO_FATAL_FAILURE(expect_ranks_ok(res));
  }
}

// A stream that holds back the second store of each batch (the posted word
// in GPU memory: calls.cpp stores the host word first) until the test stores
// it, and hands everything else to a HostStream.
class PostHoldingStream final : public StreamOps {
 public:
  explicit PostHoldingStream(HostStream& s) : s_(s) {}
  Status write_value64(uint64_t va, uint64_t value) override { return s_.write_value64(va, value); }
  Status wait_value64(uint64_t va, uint64_t value) override { return s_.wait_value64(va, value); }
  Status batch(std::span<const Op> ops) override {
    std::vector<Op> kept;
    int stores = 0;
    for (const Op& op : ops) {
      if (!op.wait && ++stores == 2) {
        held = op;
        continue;
      }
      kept.push_back(op);
    }
    return s_.batch(kept);
  }
  Op held{};
  // Stores the held word now, from the host (queued on the stream, it would
  // run only after the call's waits, which wait for it).
  bool release(Device& dev) {
    auto* p = static_cast<uint64_t*>(dev.compute_pointer(held.va, 8));
    if (!p) return false;
    std::atomic_ref<uint64_t>(*p).store(held.value, std::memory_order_release);
    return true;
  }

 private:
  HostStream& s_;
};

// Which word the lists wait on for a rank's "posted" (calls.hpp,
// CONCCL_POSTED_WORDS): rank 1's stream holds back the second store of its
// batch of call 2. With CONCCL_POSTED_WORDS=device (the
// WindowCallsDevicePostedWords run) that is its word in GPU memory, and rank
// 0's call 2 must not complete until rank 1 stores it; by default (host
// words, none in GPU memory) the batch has no second store and the call
// completes at once. Call 1 is host-ordered on both ranks (with GPU words
// posted by an engine), call 3 stream-ordered again after it.
TEST(WindowCallPostedWords, ListsWaitOnTheWordTheSettingNames) {
  const bool host_words = !(std::getenv("CONCCL_POSTED_WORDS") && std::string(std::getenv("CONCCL_POSTED_WORDS")) == "device");
  const NodeSetup s{"h200", true, 2};
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks({0, 1}, [&](int me, std::string* out) {
    return with_window(s, id, me, 20000, out, [&](emu::EmuDevice& dev, Communicator& c, const Window& w) {
      Result<std::unique_ptr<HostStream>> hs = HostStream::create(dev);
      if (!hs.ok()) return 6;
      auto fill = [&](uint64_t seed) {
        uint8_t* p = w.at(kSendAt, 4096).as<uint8_t>();
        for (uint64_t i = 0; i < 4096; ++i) p[i] = byte_of(seed_of(me, int(seed), 0), i);
      };
      auto check = [&](uint64_t seed) {
        const uint8_t* p = w.at(kRecvAt, 2 * 4096).as<uint8_t>();
        for (int q = 0; q < 2; ++q)
          for (uint64_t i = 0; i < 4096; ++i)
            if (p[q * 4096 + i] != byte_of(seed_of(q, int(seed), 0), i)) return false;
        return true;
      };
      fill(1);
      Status st = c.call(gather_args(w, 2, 4096));
      if (!st.ok()) return *out += "call 1: " + st.to_string(), 1;
      if (!check(1)) return *out += "call 1: wrong bytes", 2;
      fill(2);
      PostHoldingStream holding(**hs);
      st = me == 1 ? c.call(gather_args(w, 2, 4096), &holding) : c.call(gather_args(w, 2, 4096), hs->get());
      if (!st.ok()) return *out += "call 2: " + st.to_string(), 3;
      if (me == 0) {
        // Ended within 400 ms only if the lists ignore rank 1's GPU word.
        const Status early = (*hs)->synchronize(Deadline::after_ms(400));
        *out += "call 2 before rank 1's GPU word: " + early.to_string() + "\n";
        if (early.ok() != host_words) return 4;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
        // Host words: the batch has one store (no GPU word), nothing held.
        if (!holding.held.va != host_words) return *out += "second store in the stream's batch: " + std::to_string(holding.held.va != 0), 5;
        if (holding.held.va && !holding.release(dev)) return *out += "the held word has no host mapping", 5;
      }
      st = (*hs)->synchronize(Deadline::after_ms(20000));
      if (!st.ok()) return *out += "call 2: " + st.to_string(), 7;
      if (!check(2)) return *out += "call 2: wrong bytes", 8;
      fill(3);
      st = c.call(gather_args(w, 2, 4096), hs->get());
      if (st.ok()) st = (*hs)->synchronize(Deadline::after_ms(20000));
      if (!st.ok()) return *out += "call 3: " + st.to_string(), 9;
      return check(3) ? 0 : (*out += "call 3: wrong bytes", 10);
    });
  });
  ASSERT_NO_FATAL_FAILURE(expect_ranks_ok(res));
}

// A setting CONCCL_POSTED_WORDS does not know is refused when the
// communicator is made, naming the two it knows.
TEST(WindowCallPostedWords, UnknownSettingIsRefusedNamingTheChoices) {
  const NodeSetup s{"h200", true, 2};
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks({0, 1}, [&](int me, std::string* out) {
    ::setenv("CONCCL_POSTED_WORDS", "vram", 1);  // read once per process: these are fresh ones
    RankEnv e;
    const int rc = open_rank(s, id, me, &e, out, 10000);
    return rc == 3 ? 0 : 20 + rc;
  });
  for (const RankOutcome& o : res) {
    EXPECT_EQ(o.exit_code, 0) << o.out;
    EXPECT_NE(o.out.find("CONCCL_POSTED_WORDS=vram is not a setting"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("\"host\""), std::string::npos) << o.out;
  }
}

TEST(WindowCallFaults, BufferPastTheWindowEndIsRefusedWithTheFix) {
  const NodeSetup s{"mi300x", false, 2};
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks({0, 1}, [&](int me, std::string* out) {
    return with_window(s, id, me, 10000, out, [&](emu::EmuDevice&, Communicator& c, const Window& w) {
      // Too large for the window: refused before anything runs.
      Status big = c.call(gather_args(w, 2, 4 << 20));
      *out += "big: " + big.to_string() + "\n";
      Status bad_dereg = c.deregister_window(Window{7, w.local});
      *out += "dereg: " + bad_dereg.to_string() + "\n";
      // The communicator still works.
      Status good = c.call(gather_args(w, 2, 4096));
      *out += "good: " + good.to_string() + "\n";
      return big.ok() || bad_dereg.ok() || !good.ok() ? 6 : 0;
    });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res[size_t(r)].exit_code, 0) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("runs past its end"), std::string::npos) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("register_window()"), std::string::npos) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("window 7 is not registered"), std::string::npos) << res[size_t(r)].out;
  }
}

// ---- calls on buffers outside windows (src/collectives/cached_calls.hpp) ----

// Every op through plain buffers (no window: Window{-1, buffer} only places
// them), host- and stream-ordered, every byte checked; such calls do
// exchange (the vote) and keep plans. Then a call with its send in a window
// and its receive outside, and a buffer freed and allocated again.
int outside_rank(const NodeSetup& s, const UniqueId& id, int me, std::string* out) {
  RankEnv e;
  if (int rc = open_rank(s, id, me, &e, out)) return rc;
  emu::EmuDevice& dev = *e.dev;
  Communicator& c = *e.comm;
  Result<UniqueBuffer> plain = UniqueBuffer::alloc(dev, c.gpu(me), kWindow, MemKind::device);
  Result<UniqueBuffer> win_mem = UniqueBuffer::alloc(dev, c.gpu(me), kWindow, MemKind::device);
  if (!plain.ok() || !win_mem.ok()) return 4;
  Result<Window> win = c.register_window(win_mem->get());
  if (!win.ok()) return *out += win.status().to_string(), 5;
  Result<std::unique_ptr<HostStream>> stream = HostStream::create(dev);
  if (!stream.ok()) return 6;
  const Window outside{-1, plain->get()};
  const CommStats before = c.stats();
  int calls = 0;
  for (CollOp op : {CollOp::all_gather, CollOp::all_to_all, CollOp::broadcast, CollOp::gather, CollOp::scatter,
                    CollOp::p2p})
    for (int round = 0; round < 3; ++round)
      for (HostStream* st : {static_cast<HostStream*>(nullptr), stream->get()}) {
        const std::string bad = one_call(c, outside, op, 8192 + 64, (round + calls) % s.nranks, round * 5 + calls, st);
        ++calls;
        if (!bad.empty()) return *out += bad + "\n", 1;
      }
  const CommStats after = c.stats();
  *out += "calls " + std::to_string(after.calls - before.calls) + " window_calls " +
          std::to_string(after.window_calls - before.window_calls) + " sent " +
          std::to_string(after.bootstrap_messages_sent - before.bootstrap_messages_sent) + " cached " +
          std::to_string(after.cached_plans) + "\n";
  if (after.calls - before.calls != static_cast<uint64_t>(calls) || after.window_calls != before.window_calls)
    return 7;
  // One vote per call at least, to each other rank.
  if (after.bootstrap_messages_sent - before.bootstrap_messages_sent < static_cast<uint64_t>(calls * (s.nranks - 1)))
    return 8;
  if (after.cached_plans == 0) return 9;
  // Send inside the window, receive outside: the cached path takes it.
  {
    CollectiveArgs a;
    a.op = CollOp::all_gather;
    a.bytes = 4096;
    a.send = {win->at(0, 4096)};
    a.recv = {plain->get()};
    a.recv[0].size = 4096 * s.nranks;
    for (uint64_t i = 0; i < 4096; ++i) a.send[0].as<uint8_t>()[i] = byte_of(seed_of(me, 77, 0), i);
    Status st = c.call(a);
    if (!st.ok()) return *out += "mixed: " + st.to_string() + "\n", 10;
    for (int q = 0; q < s.nranks; ++q)
      for (uint64_t i = 0; i < 4096; ++i)
        if (a.recv[0].as<uint8_t>()[q * 4096 + i] != byte_of(seed_of(q, 77, 0), i))
          return *out += "mixed: byte " + std::to_string(i) + " of rank " + std::to_string(q) + " WRONG\n", 11;
  }
  return 0;
}

class CachedCallsAcrossProcesses : public ::testing::TestWithParam<NodeSetup> {};

TEST_P(CachedCallsAcrossProcesses, EveryOpEveryByteOutsideWindows) {
  const NodeSetup s = GetParam();
  const UniqueId id = make_unique_id().value();
  expect_ranks_ok(
      fork_ranks(all_ranks(s.nranks), [&](int r, std::string* out) { return outside_rank(s, id, r, out); }));
}

INSTANTIATE_TEST_SUITE_P(Emu, CachedCallsAcrossProcesses,
                         ::testing::Values(NodeSetup{"mi300x", false, 2}, NodeSetup{"h200", true, 4}),
                         [](const auto& info) {
                           return std::string(info.param.preset) + "_" + std::to_string(info.param.nranks) + "procs";
                         });

// Every rank in one process: call() takes every rank's buffers, as plan()
// does, host- and stream-ordered, and caches the plan.
// Every rank in one process (one CUDA context where it is CUDA): a small
// call's stream waits may poll, a large one's not; every byte checked.
TEST(CachedCallsOneProcess, SmallCallsWaitsMayPollLargeOnesNot) {
  const NodeSetup s{"h200", true, 2};
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(dev_opts(s, -1));
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  Communicator::Options o;
  o.loopback = true;
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(**dev, {0, 0}, o);
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  Result<std::unique_ptr<HostStream>> hs = HostStream::create(**dev);
  ASSERT_TRUE(hs.ok());
  PollRecordingStream rec(**hs);
  for (uint64_t bytes : {uint64_t(4096), uint64_t(1) << 20}) {
    SCOPED_TRACE(bytes);
    std::vector<UniqueBuffer> send, recv;
    CollectiveArgs a;
    a.op = CollOp::all_gather;
    a.bytes = bytes;
    for (int r = 0; r < 2; ++r) {
      send.push_back(std::move(UniqueBuffer::alloc(**dev, 0, bytes, MemKind::device).value()));
      recv.push_back(std::move(UniqueBuffer::alloc(**dev, 0, 2 * bytes, MemKind::device).value()));
      for (uint64_t i = 0; i < bytes; ++i) send.back().get().as<uint8_t>()[i] = byte_of(seed_of(r, 3, 0), i);
      std::memset(recv.back().get().host, 0xA5, 2 * bytes);
      a.send.push_back(send.back().get());
      a.recv.push_back(recv.back().get());
    }
    rec.waits = rec.polled = rec.shared = 0;
    Status st = (*comm)->call(a, &rec);
    if (st.ok()) st = (*hs)->synchronize(Deadline::after_ms(20000));
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_GT(rec.waits, 0);
    EXPECT_EQ(rec.polled, bytes <= 4096 ? rec.waits : 0);
    EXPECT_EQ(rec.shared, 0) << "one process: no other process uses the GPU";
    for (int d = 0; d < 2; ++d)
      for (int r = 0; r < 2; ++r)
        for (uint64_t i = 0; i < bytes; ++i)
          ASSERT_EQ(recv[size_t(d)].get().as<uint8_t>()[uint64_t(r) * bytes + i], byte_of(seed_of(r, 3, 0), i))
              << "rank " << d << " chunk " << r << " byte " << i;
  }
}

TEST(CachedCallsOneProcess, EveryOpEveryByteHostAndStream) {
  const NodeSetup s{"mi300x", false, 4};
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(dev_opts(s, -1));
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(**dev, {0, 1, 2, 3});
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  Communicator& c = **comm;
  Result<std::unique_ptr<HostStream>> stream = HostStream::create(**dev);
  ASSERT_TRUE(stream.ok());
  const int n = 4;
  const uint64_t bytes = 4096 + 96;
  std::vector<UniqueBuffer> send, recv;
  for (int r = 0; r < n; ++r) {
    send.push_back(std::move(UniqueBuffer::alloc(**dev, r, bytes * n, MemKind::device).value()));
    recv.push_back(std::move(UniqueBuffer::alloc(**dev, r, bytes * n, MemKind::device).value()));
  }
  int calls = 0;
  for (CollOp op : {CollOp::all_gather, CollOp::all_to_all, CollOp::broadcast, CollOp::gather, CollOp::scatter})
    for (HostStream* st : {static_cast<HostStream*>(nullptr), stream->get(), static_cast<HostStream*>(nullptr)}) {
      const int root = calls % n;
      CollectiveArgs a;
      a.op = op;
      a.bytes = bytes;
      a.root = root;
      for (int r = 0; r < n; ++r) {
        // Broadcast and scatter read the root's alone: the others empty.
        const bool root_only = op == CollOp::broadcast || op == CollOp::scatter;
        a.send.push_back(root_only && r != root ? Buffer{} : send[size_t(r)].get());
        a.recv.push_back(recv[size_t(r)].get());
        for (uint64_t i = 0; i < bytes * n; ++i) {
          send[size_t(r)].get().as<uint8_t>()[i] = byte_of(seed_of(r, calls, 1), i);
          recv[size_t(r)].get().as<uint8_t>()[i] = static_cast<uint8_t>(0x5A ^ i);
        }
      }
      Status done = c.call(a, st);
      if (done.ok() && st) done = st->synchronize(Deadline::after_ms(30000));
      ASSERT_TRUE(done.ok()) << coll_op_name(op) << ": " << done.to_string();
      for (int d = 0; d < n; ++d) {
        const uint8_t* got = recv[size_t(d)].get().as<uint8_t>();
        for (int from = 0; from < n; ++from) {
          // Where rank `from`'s bytes land in rank d, and which of them.
          int64_t at = -1, src = 0;
          switch (op) {
            case CollOp::all_gather: at = from * bytes; break;
            case CollOp::all_to_all: at = from * bytes, src = d * bytes; break;
            case CollOp::broadcast: if (from == root) at = 0; break;
            case CollOp::gather: if (d == root) at = from * bytes; break;
            case CollOp::scatter: if (from == root) at = 0, src = d * bytes; break;
            default: break;
          }
          if (at < 0) continue;
          for (uint64_t i = 0; i < bytes; ++i)
            ASSERT_EQ(got[at + i], byte_of(seed_of(from, calls, 1), src + i))
                << coll_op_name(op) << " rank " << d << " byte " << i << " from rank " << from;
        }
      }
      ++calls;
    }
  const CommStats st = c.stats();
  EXPECT_EQ(st.calls, static_cast<uint64_t>(calls));
  EXPECT_GE(st.cached_plans, 5u);
  EXPECT_EQ(st.window_calls, 0u);
  EXPECT_EQ(st.bootstrap_messages_sent, 0u);
}

}  // namespace
}  // namespace conccl::mptest
