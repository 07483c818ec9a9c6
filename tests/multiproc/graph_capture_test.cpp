// tests/multiproc/graph_capture_test.cpp - collectives captured into a
// graph and replayed (docs/graphs.md), on the emulated node with one forked
// process per rank and a HostStream, whose begin_capture/end_capture record
// what CUDA's stream capture records.
//
// Each rank captures a step (produce the input from the replay number, call,
// check every byte of the output), replays it hundreds of times, with a
// second captured call, a captured all-reduce + reduce-scatter (moves and
// reduce steps), and ordinary calls on the same communicator and
// stream in between: every replay's output checked, and a different input
// each replay. Then: calls that cannot be captured refused at capture time
// (the capture goes on); more captures made and destroyed than there are
// slots; a rank that stops replaying (its peer's replay fails within the
// timeout, naming it, its stream released) or whose process ends (at once); a replay after the communicator is gone
// (the stream goes on); every rank in one process (4 GPUs, and 4 loopback
// ranks on one GPU) beside ordinary calls.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "conccl/bootstrap.hpp"
#include "conccl/collectives.hpp"
#include "conccl/emu.hpp"
#include "multiproc/fork_ranks.hpp"

namespace conccl::mptest {
namespace {

uint8_t value(int rank, uint64_t step, uint64_t i) { return uint8_t(rank * 131 + step * 7 + i * 13 + (i >> 8)); }

struct RankEnv {
  std::unique_ptr<emu::EmuDevice> dev;
  std::unique_ptr<Communicator> comm;
  UniqueBuffer mem;
  std::unique_ptr<HostStream> stream;
};

constexpr uint64_t kMem = 8ull << 20;

// The steps a captured call adds to a stream (docs/graphs.md): its tick by
// two stores (the end's reset, the flag) or by one kernel-like step
// (CONCCL_REPLAY_TICK=kernel), then the wait for its end.
size_t call_steps() {
  const char* form = std::getenv("CONCCL_REPLAY_TICK");
  return form && std::string(form) == "kernel" ? 2 : 3;
}

// Whether the keeper ends the replays itself (docs/graphs.md: the default,
// unless replays are armed ahead or CONCCL_REPLAY_CLOSE=engine).
bool keeper_ends_replays() {
  auto env_is = [](const char* name, const char* v) {
    const char* e = std::getenv(name);
    return e && std::string(e) == v;
  };
  return env_is("CONCCL_REPLAY_CLOSE", "keeper") ||
         (!env_is("CONCCL_REPLAY_CLOSE", "engine") && !env_is("CONCCL_REPLAY_ARM", "ahead"));
}

std::string make_env(RankEnv& e, int me, int n, const UniqueId& id, int64_t call_timeout_ms = 60000) {
  DeviceOptions o;
  o.settings = "preset=mi300x memory_per_gpu=256M";
  // More emulator settings for a whole run (ctest variants; window_calls_test.cpp).
  if (const char* more = std::getenv("CONCCL_TEST_EMU_SETTINGS")) o.settings += std::string(" ") + more;
  o.process_slot = me;
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(o);
  if (!dev.ok()) return dev.status().to_string();
  e.dev = std::move(dev).value();
  Communicator::Options co;
  co.call_timeout_ms = call_timeout_ms;
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(*e.dev, me, n, id, co);
  if (!comm.ok()) return comm.status().to_string();
  e.comm = std::move(comm).value();
  Result<UniqueBuffer> mem = UniqueBuffer::alloc(*e.dev, e.comm->gpu(me), kMem, MemKind::device);
  if (!mem.ok()) return mem.status().to_string();
  e.mem = std::move(mem).value();
  Result<Window> w = e.comm->register_window(e.mem.get());
  if (!w.ok()) return w.status().to_string();
  Result<std::unique_ptr<HostStream>> st = HostStream::create(*e.dev, 30000);
  if (!st.ok()) return st.status().to_string();
  e.stream = std::move(st).value();
  return "";
}

// A captured step: produce, the call, check. Counts its replays and wrong bytes.
struct Step {
  CollOp op;
  uint64_t bytes, send_at, recv_at;
  int root = 0;
  std::atomic<uint64_t> runs{0}, wrong{0};
};

CollectiveArgs args_of(const Step& s, const Buffer& mem, int n) {
  CollectiveArgs a;
  a.op = s.op;
  a.bytes = s.bytes;
  a.root = s.root;
  const uint64_t sb = s.op == CollOp::all_to_all ? n * s.bytes : s.bytes;
  const uint64_t rb = s.op == CollOp::broadcast ? s.bytes : n * s.bytes;
  a.send = {mem.slice(s.send_at, sb)};
  a.recv = {mem.slice(s.recv_at, rb)};
  return a;
}

// Queues produce / call / check on the stream (captured or not).
Status queue_step(RankEnv& e, Step& s, int me, int n) {
  uint8_t* base = e.mem.get().as<uint8_t>();
  Step* sp = &s;
  Status st = e.stream->enqueue([sp, base, me, n] {
    const uint64_t step = sp->runs.load();
    uint8_t* send = base + sp->send_at;
    const uint64_t sb = sp->op == CollOp::all_to_all ? n * sp->bytes : sp->bytes;
    for (uint64_t i = 0; i < sb; ++i) send[i] = value(me, step, i);
    std::memset(base + sp->recv_at, 0xEE, sp->op == CollOp::broadcast ? sp->bytes : n * sp->bytes);
  });
  if (st.ok()) st = e.comm->call(args_of(s, e.mem.get(), n), e.stream.get());
  if (!st.ok()) return st;
  return e.stream->enqueue([sp, base, me, n] {
    const uint64_t step = sp->runs.load();
    const uint8_t* recv = base + sp->recv_at;
    uint64_t bad = 0;
    for (int q = 0; q < (sp->op == CollOp::broadcast ? 1 : n); ++q)
      for (uint64_t i = 0; i < sp->bytes; ++i) {
        const uint8_t want = sp->op == CollOp::all_gather   ? value(q, step, i)
                             : sp->op == CollOp::all_to_all ? value(q, step, uint64_t(me) * sp->bytes + i)
                                                             : value(sp->root, step, i);
        bad += recv[uint64_t(q) * sp->bytes + i] != want;
      }
    sp->wrong += bad;
    sp->runs++;
  });
}

// A captured reduction: int32 inputs from the replay number, the sum
// checked (integers wrap alike in any order).
struct RedStep {
  ReduceColl coll;
  uint64_t count, send_at, recv_at;
  std::atomic<uint64_t> runs{0}, wrong{0};
};

int32_t value32(int rank, uint64_t step, uint64_t i) { return int32_t(rank * 1000003 + step * 7919 + i * 31); }

Status queue_reduction(RedStep& s, RankEnv& e, int me, int n) {
  uint8_t* base = e.mem.get().as<uint8_t>();
  RedStep* sp = &s;
  const uint64_t send_elems = s.coll == ReduceColl::reduce_scatter ? s.count * n : s.count;
  Status st = e.stream->enqueue([sp, base, me, send_elems] {
    auto* in = reinterpret_cast<int32_t*>(base + sp->send_at);
    for (uint64_t i = 0; i < send_elems; ++i) in[i] = value32(me, sp->runs.load(), i);
    std::memset(base + sp->recv_at, 0xEE, sp->count * 4);
  });
  ReductionArgs r;
  r.coll = s.coll;
  r.dtype = DataType::i32;
  r.count = s.count;
  r.send = {e.mem.get().slice(s.send_at, send_elems * 4)};
  r.recv = {e.mem.get().slice(s.recv_at, s.count * 4)};
  if (st.ok()) st = e.comm->call_reduction(r, e.stream.get());
  if (!st.ok()) return st;
  return e.stream->enqueue([sp, base, me, n] {
    const auto* got = reinterpret_cast<const int32_t*>(base + sp->recv_at);
    const uint64_t first = sp->coll == ReduceColl::reduce_scatter ? uint64_t(me) * sp->count : 0;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < sp->count; ++i) {
      uint32_t want = 0;
      for (int q = 0; q < n; ++q) want += uint32_t(value32(q, sp->runs.load(), first + i));
      bad += uint32_t(got[i]) != want;
    }
    sp->wrong += bad;
    sp->runs++;
  });
}

int replays_main(int me, int n, const UniqueId& id, std::string* out) {
  RankEnv e;
  if (std::string bad = make_env(e, me, n, id); !bad.empty()) return *out += bad + "\n", 2;
  Step gather{CollOp::all_gather, 4099, 0, 1 << 20};
  Step a2a{CollOp::all_to_all, 1001, 2 << 20, 3 << 20};
  Step bcast{CollOp::broadcast, 7777, 4 << 20, 5 << 20, n - 1};
  // Capture two steps (two graphs).
  std::unique_ptr<HostStream::Recording> g1, g2;
  for (auto [step, rec] : {std::pair{&gather, &g1}, std::pair{&a2a, &g2}}) {
    if (!e.stream->begin_capture().ok()) return 3;
    Status st = queue_step(e, *step, me, n);
    Result<std::unique_ptr<HostStream::Recording>> r = e.stream->end_capture();
    if (!st.ok()) return *out += "capture: " + st.to_string() + "\n", 4;
    if (!r.ok()) return 5;
    // produce, the replay tick, the wait for the end, check: no host step
    // for the call (the keeper arms its lists).
    if ((*r)->steps() != 2 + call_steps())
      return *out += "a captured step has " + std::to_string((*r)->steps()) + " steps\n", 5;
    *rec = std::move(r).value();
  }
  // A reduction captured: its moves and reduce steps replay together.
  RedStep allreduce{ReduceColl::all_reduce, 3001, 6 << 20, 7 << 20};
  RedStep rscatter{ReduceColl::reduce_scatter, 777, 6 << 20, 7 << 20};
  std::unique_ptr<HostStream::Recording> g3;
  {
    if (!e.stream->begin_capture().ok()) return 3;
    Status st = queue_reduction(allreduce, e, me, n);
    if (st.ok()) st = queue_reduction(rscatter, e, me, n);
    Result<std::unique_ptr<HostStream::Recording>> r = e.stream->end_capture();
    if (!st.ok()) return *out += "capture of the reductions: " + st.to_string() + "\n", 4;
    if (!r.ok()) return 5;
    g3 = std::move(r).value();
  }
  // Nothing ran at capture.
  if (gather.runs != 0 || e.mem.get().as<uint8_t>()[1 << 20] != 0) return *out += "the capture ran something\n", 6;
  const int kReplays = 300;
  for (int i = 0; i < kReplays; ++i) {
    if (!g1->launch(*e.stream).ok()) return 7;
    if (i % 3 == 0 && !g2->launch(*e.stream).ok()) return 8;
    if (i % 5 == 0 && !g3->launch(*e.stream).ok()) return 8;
    if (i % 7 == 0) {  // an ordinary call on the same communicator and stream
      Status st = queue_step(e, bcast, me, n);
      if (!st.ok()) return *out += st.to_string() + "\n", 9;
    }
    if (i % 50 == 49) {
      Status st = e.stream->synchronize(Deadline::after_ms(60000));
      if (!st.ok()) return *out += st.to_string() + "\n", 10;
    }
  }
  Status st = e.stream->synchronize(Deadline::after_ms(60000));
  if (!st.ok()) return *out += st.to_string() + "\n", 11;
  *out += "runs " + std::to_string(gather.runs) + "/" + std::to_string(a2a.runs) + "/" + std::to_string(bcast.runs) +
          ", wrong " + std::to_string(gather.wrong) + "/" + std::to_string(a2a.wrong) + "/" +
          std::to_string(bcast.wrong) + ", window calls " + std::to_string(e.comm->stats().window_calls) + "\n";
  if (gather.runs != uint64_t(kReplays) || a2a.runs != uint64_t(kReplays + 2) / 3 || bcast.runs != uint64_t(kReplays + 6) / 7)
    return 12;
  if (gather.wrong || a2a.wrong || bcast.wrong) return 13;
  *out += "reductions: runs " + std::to_string(allreduce.runs) + "/" + std::to_string(rscatter.runs) + ", wrong " +
          std::to_string(allreduce.wrong) + "/" + std::to_string(rscatter.wrong) + "\n";
  if (allreduce.runs != uint64_t(kReplays + 4) / 5 || rscatter.runs != allreduce.runs) return 18;
  if (allreduce.wrong || rscatter.wrong) return 19;
  if (!e.comm->async_error().ok()) return *out += e.comm->async_error().to_string() + "\n", 14;
  // The captured calls exchanged no message and made no window call of the
  // main sequence: only the broadcasts did.
  if (e.comm->stats().window_calls != bcast.runs) return 15;
  // The communicator gone, a replay only releases its stream.
  e.comm.reset();
  if (!g1->launch(*e.stream).ok()) return 16;
  st = e.stream->synchronize(Deadline::after_ms(20000));
  if (!st.ok()) return *out += "a replay after the communicator: " + st.to_string() + "\n", 17;
  return 0;
}

class CaptureProcs : public ::testing::TestWithParam<int> {};

TEST_P(CaptureProcs, EveryReplayRunsTheCallAgainBesideOrdinaryCalls) {
  const int n = GetParam();
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks(all_ranks(n), [&](int r, std::string* out) { return replays_main(r, n, id, out); });
  expect_ranks_ok(res);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CaptureProcs, ::testing::Values(2, 4));

int errors_main(int me, int n, const UniqueId& id, std::string* out) {
  RankEnv e;
  if (std::string bad = make_env(e, me, n, id); !bad.empty()) return *out += bad + "\n", 2;
  Result<UniqueBuffer> outside = UniqueBuffer::alloc(*e.dev, e.comm->gpu(me), 1 << 20, MemKind::device);
  if (!outside.ok()) return 3;
  if (!e.stream->begin_capture().ok()) return 4;
  // A buffer outside every window: refused now, naming why; the capture goes on.
  CollectiveArgs a;
  a.op = CollOp::all_gather;
  a.bytes = 4096;
  a.send = {outside->get().slice(0, 4096)};
  a.recv = {e.mem.get().slice(0, 4096 * uint64_t(n))};
  Status st = e.comm->call(a, e.stream.get());
  if (st.code() != Code::invalid_argument || st.message().find("cannot be recorded") == std::string::npos ||
      st.message().find("lies in no window") == std::string::npos)
    return *out += "outside a window: " + st.to_string() + "\n", 5;
  // A reduction whose input lies outside every window: refused at capture too.
  ReductionArgs r;
  r.coll = ReduceColl::all_reduce;
  r.dtype = DataType::i32;
  r.count = 1024;
  r.send = {outside->get().slice(0, 4096)};
  r.recv = {e.mem.get().slice(8192, 4096)};
  st = e.comm->call_reduction(r, e.stream.get());
  if (st.code() != Code::invalid_argument || st.message().find("cannot be recorded") == std::string::npos)
    return *out += "reduction: " + st.to_string() + "\n", 6;
  Result<std::unique_ptr<HostStream::Recording>> rec = e.stream->end_capture();
  if (!rec.ok() || (*rec)->steps() != 0) return *out += "the refused calls left steps in the capture\n", 7;
  // More captures made and destroyed, one after another, than there are slots.
  Step s{CollOp::all_gather, 512, 0, 1 << 20};
  for (int i = 0; i < 130; ++i) {
    if (!e.stream->begin_capture().ok()) return 8;
    st = queue_step(e, s, me, n);
    Result<std::unique_ptr<HostStream::Recording>> g = e.stream->end_capture();
    if (!st.ok() || !g.ok()) return *out += "capture " + std::to_string(i) + ": " + st.to_string() + "\n", 9;
    if (!(*g)->launch(*e.stream).ok() || !(*g)->launch(*e.stream).ok()) return 10;
    st = e.stream->synchronize(Deadline::after_ms(30000));
    if (!st.ok()) return *out += st.to_string() + "\n", 11;
  }
  if (s.runs != 260 || s.wrong) return *out += "runs " + std::to_string(s.runs) + " wrong " + std::to_string(s.wrong) + "\n", 12;
  return e.comm->async_error().ok() ? 0 : 13;
}

TEST(CaptureErrors, RefusedAtCaptureAndSlotsComeBack) {
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks(all_ranks(2), [&](int r, std::string* out) { return errors_main(r, 2, id, out); });
  expect_ranks_ok(res);
}

// Rank 1 stops replaying after its first replay: it stays (`leave` false)
// until its peer has given up, or its process ends (`leave` true). Rank 0's
// second replay fails, naming rank 1: at the call timeout, or at once when
// rank 1 has left.
int stopper_main(int me, int n, const UniqueId& id, bool leave, std::string* out) {
  RankEnv e;
  if (std::string bad = make_env(e, me, n, id, leave ? 30000 : 2000); !bad.empty()) return *out += bad + "\n", 2;
  Step s{CollOp::all_gather, 2048, 0, 1 << 20};
  if (!e.stream->begin_capture().ok()) return 3;
  Status st = queue_step(e, s, me, n);
  Result<std::unique_ptr<HostStream::Recording>> g = e.stream->end_capture();
  if (!st.ok() || !g.ok()) return 4;
  if (!(*g)->launch(*e.stream).ok()) return 5;
  st = e.stream->synchronize(Deadline::after_ms(20000));
  if (!st.ok() || s.runs != 1 || s.wrong) return *out += "first replay: " + st.to_string() + "\n", 6;
  if (me == 1) {
    if (leave) {
      std::fflush(stdout);
      _exit(0);  // no destructor runs: the process is simply gone
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(4000));
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!(*g)->launch(*e.stream).ok()) return 7;
  st = e.stream->synchronize(Deadline::after_ms(40000));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const Status async = e.comm->async_error();
  *out += "stream: " + st.to_string() + "; async: " + async.to_string() + "; " + std::to_string(ms) + " ms\n";
  if (!st.ok() || async.message().find("replay 2") == std::string::npos) return 8;
  if (leave) {
    if (async.code() != Code::unavailable || async.message().find("rank 1") == std::string::npos ||
        async.message().find("left the communicator") == std::string::npos)
      return 9;
    if (ms > 15000) return *out += "the replay should fail when rank 1 leaves, not at the 30 s timeout\n", 10;
  } else if (async.code() != Code::timeout || async.message().find("rank 1 has begun 1 replays") == std::string::npos) {
    return 11;
  }
  return 0;
}

TEST(CaptureFaults, ARankThatStopsReplayingFailsItsPeerAtTheTimeout) {
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res =
      fork_ranks(all_ranks(2), [&](int r, std::string* out) { return stopper_main(r, 2, id, false, out); });
  expect_ranks_ok(res);
}

TEST(CaptureFaults, ARankThatLeavesFailsItsPeerAtOnceNamingIt) {
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res =
      fork_ranks(all_ranks(2), [&](int r, std::string* out) { return stopper_main(r, 2, id, true, out); });
  expect_ranks_ok(res);
}

// Every rank in one process on the emulator: the device, a communicator of
// `gpus` (loopback where one repeats) and a host stream.
struct OneProcess {
  std::unique_ptr<emu::EmuDevice> dev;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<HostStream> stream;
};

void open_one_process(const char* settings, const std::vector<int>& gpus, OneProcess* p,
                      int64_t call_timeout_ms = Communicator::Options{}.call_timeout_ms) {
  DeviceOptions o;
  o.settings = settings;
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(o);
  ASSERT_TRUE(dev.ok());
  p->dev = std::move(dev).value();
  Communicator::Options co;
  co.loopback = std::set<int>(gpus.begin(), gpus.end()).size() < gpus.size();
  co.call_timeout_ms = call_timeout_ms;
  p->comm = std::move(Communicator::create(*p->dev, gpus, co).value());
  p->stream = std::move(HostStream::create(*p->dev, 30000).value());
}

// Stalls (or frees) every engine of GPU 0 of the emulated device.
void stall_engines(emu::EmuDevice& dev, bool stalled) {
  emu::Injection inj;
  inj.stall = stalled;
  for (const EngineInfo& e : dev.topology().gpus[0].engines) ASSERT_TRUE(dev.inject(0, e.id, inj).ok());
}

// An all-gather of `bytes` per rank over new buffers (kept in send and
// recv), rank r's on gpus[r].
CollectiveArgs all_gather_over(Device& dev, const std::vector<int>& gpus, uint64_t bytes,
                               std::vector<UniqueBuffer>* send, std::vector<UniqueBuffer>* recv) {
  const uint64_t n = gpus.size();
  CollectiveArgs a;
  a.op = CollOp::all_gather;
  a.bytes = bytes;
  for (int gpu : gpus) {
    send->push_back(std::move(UniqueBuffer::alloc(dev, gpu, bytes, MemKind::device).value()));
    recv->push_back(std::move(UniqueBuffer::alloc(dev, gpu, n * bytes, MemKind::device).value()));
    a.send.push_back(send->back().get());
    a.recv.push_back(recv->back().get());
  }
  return a;
}

// Every rank in one process: the same capture, the lists of every rank
// armed by the keeper and every rank's lists gated on one replay tick.
TEST(CaptureOneProcess, ReplaysOfEveryRankBesideOrdinaryCalls) {
  for (bool loopback : {false, true}) {
    SCOPED_TRACE(loopback ? "4 loopback ranks on one GPU" : "4 ranks on 4 GPUs");
    const int n = 4;
    std::vector<int> gpus;
    for (int r = 0; r < n; ++r) gpus.push_back(loopback ? 0 : r);
    OneProcess p;
    ASSERT_NO_FATAL_FAILURE(open_one_process("preset=mi300x", gpus, &p));
    auto& [dev, c, stream] = p;
    const uint64_t bytes = 3001;
    std::vector<UniqueBuffer> send, recv;
    CollectiveArgs a = all_gather_over(*dev, gpus, bytes, &send, &recv);
    std::atomic<uint64_t> runs{0}, wrong{0};
    auto produce = [&] {
      for (int r = 0; r < n; ++r)
        for (uint64_t i = 0; i < bytes; ++i) send[size_t(r)].get().as<uint8_t>()[i] = value(r, runs.load(), i);
      for (int r = 0; r < n; ++r) std::memset(recv[size_t(r)].get().host, 0xEE, n * bytes);
    };
    auto check = [&] {
      uint64_t bad = 0;
      for (int d = 0; d < n; ++d)
        for (int q = 0; q < n; ++q)
          for (uint64_t i = 0; i < bytes; ++i)
            bad += recv[size_t(d)].get().as<uint8_t>()[uint64_t(q) * bytes + i] != value(q, runs.load(), i);
      wrong += bad;
      runs++;
    };
    ASSERT_TRUE(stream->begin_capture().ok());
    ASSERT_TRUE(stream->enqueue(produce).ok());
    const Status st = c->call(a, stream.get());
    ASSERT_TRUE(stream->enqueue(check).ok());
    Result<std::unique_ptr<HostStream::Recording>> g = stream->end_capture();
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(runs, 0u) << "nothing runs at capture";
    // produce, the call's replay tick and its wait for the end, check: the
    // call adds no host step to a replay (the keeper arms its lists).
    EXPECT_EQ((*g)->steps(), 2 + call_steps());
    for (int i = 0; i < 150; ++i) {
      ASSERT_TRUE((*g)->launch(*stream).ok());
      if (i % 10 == 0) {  // an ordinary call on the same stream: the step's call, uncaptured
        ASSERT_TRUE(stream->enqueue(produce).ok());
        ASSERT_TRUE(c->call(a, stream.get()).ok());
        ASSERT_TRUE(stream->enqueue(check).ok());
      }
    }
    ASSERT_TRUE(stream->synchronize(Deadline::after_ms(60000)).ok());
    EXPECT_EQ(runs, 165u);
    EXPECT_EQ(wrong, 0u);
    // The keeper's view of the replays (CommStats): it sees every end where
    // it makes them, and may see a closing list's end only after the next
    // tick, which it then leaves out.
    const CommStats cs = c->stats();
    if (keeper_ends_replays())
      EXPECT_EQ(cs.replays, 150u);
    else
      EXPECT_LE(cs.replays, 150u);
    if (cs.replays > 1) {
      EXPECT_GT(cs.replay_busy_ns, 0u);
      EXPECT_GT(cs.replay_idle_ns, 0u);
    }
    // A replay after the communicator is gone lets the stream go on.
    c.reset();
    ASSERT_TRUE((*g)->launch(*stream).ok());
    EXPECT_TRUE(stream->synchronize(Deadline::after_ms(20000)).ok());
  }
}

// An engine that stops (a fault, a stall) under a replay of a one-process
// capture: the keeper gives the replay the call timeout, then records why
// (async_error(), naming the replay) and releases the stream, which would
// otherwise wait forever; later replays submit nothing and only release it.
TEST(CaptureOneProcess, AStalledEngineFailsTheReplayAndReleasesTheStream) {
  const int n = 2;
  OneProcess p;
  ASSERT_NO_FATAL_FAILURE(open_one_process("preset=mi300x", {0, 0}, &p, /*call_timeout_ms=*/1500));
  auto& [dev, c, stream] = p;
  const uint64_t bytes = 4099;
  std::vector<UniqueBuffer> send, recv;
  CollectiveArgs a = all_gather_over(*dev, {0, 0}, bytes, &send, &recv);
  for (int r = 0; r < n; ++r)
    for (uint64_t i = 0; i < bytes; ++i) send[size_t(r)].get().as<uint8_t>()[i] = value(r, 1, i);
  ASSERT_TRUE(stream->begin_capture().ok());
  ASSERT_TRUE(c->call(a, stream.get()).ok());
  Result<std::unique_ptr<HostStream::Recording>> g = stream->end_capture();
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->launch(*stream).ok());
  ASSERT_TRUE(stream->synchronize(Deadline::after_ms(20000)).ok());
  ASSERT_TRUE(c->async_error().ok()) << c->async_error().to_string();
  for (int d = 0; d < n; ++d)
    for (int q = 0; q < n; ++q)
      for (uint64_t i = 0; i < bytes; ++i)
        ASSERT_EQ(recv[size_t(d)].get().as<uint8_t>()[q * bytes + i], value(q, 1, i)) << d << " " << q << " " << i;
  // The stream goes on once the replay's end signal is written; a closing list
  // on an engine (arming ahead) completes just after, and the keeper sees it
  // at its next look. Stalled in between, the engines would hold replay 1 up
  // (and the keeper would rightly name it): the stall is for replay 2.
  const Deadline settle = Deadline::after_ms(10000);
  while (c->stats().replays < 1 && !settle.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(c->stats().replays, 1u) << "the keeper never saw replay 1 end";

  ASSERT_NO_FATAL_FAILURE(stall_engines(*dev, true));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*g)->launch(*stream).ok());
  const Status released = stream->synchronize(Deadline::after_ms(20000));
  const double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(released.ok()) << "the stream must not wait forever: " << released.to_string();
  EXPECT_GE(waited_ms, 1000.0) << "the replay gets the call timeout first";
  const Status why = c->async_error();
  EXPECT_EQ(why.code(), Code::timeout) << why.to_string();
  EXPECT_NE(why.message().find("replay 2"), std::string::npos) << why.to_string();
  EXPECT_NE(why.message().find("call timeout"), std::string::npos) << why.to_string();

  // Later replays only release the stream; the first failure stays.
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*g)->launch(*stream).ok());
  EXPECT_TRUE(stream->synchronize(Deadline::after_ms(5000)).ok());
  const double later_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_LT(later_ms, 1000.0) << "a replay after the failure submits nothing";
  EXPECT_NE(c->async_error().message().find("replay 2"), std::string::npos) << c->async_error().to_string();

  ASSERT_NO_FATAL_FAILURE(stall_engines(*dev, false));
  g->reset();  // the capture and its keeper entry go with the recording
  c.reset();
}

// Two launches of one captured call at once (its recording launched on two
// streams while the first replay still runs: here its engines are stalled)
// fail the communicator, naming the misuse, and release both streams,
// instead of letting the second launch pass on the first one's end. Where
// the keeper ends replays itself (the default), which is when it can tell.
TEST(CaptureOneProcess, ASecondLaunchWhileAReplayRunsIsRefused) {
  const char* tick = std::getenv("CONCCL_REPLAY_TICK");
  if (!keeper_ends_replays() || (tick && std::string(tick) == "kernel"))
    GTEST_SKIP() << "only the keeper's close of ticks by writes can tell (docs/graphs.md)";
  OneProcess p;
  ASSERT_NO_FATAL_FAILURE(open_one_process("preset=mi300x", {0, 0}, &p, /*call_timeout_ms=*/20000));
  auto& [dev, c, stream] = p;
  std::vector<UniqueBuffer> send, recv;
  CollectiveArgs a = all_gather_over(*dev, {0, 0}, 4099, &send, &recv);
  ASSERT_TRUE(stream->begin_capture().ok());
  ASSERT_TRUE(c->call(a, stream.get()).ok());
  Result<std::unique_ptr<HostStream::Recording>> g = stream->end_capture();
  ASSERT_TRUE(g.ok());
  std::unique_ptr<HostStream> other = std::move(HostStream::create(*dev, 30000).value());

  ASSERT_NO_FATAL_FAILURE(stall_engines(*dev, true));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*g)->launch(*stream).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // replay 1 ticked, its lists stalled
  ASSERT_TRUE((*g)->launch(*other).ok());
  EXPECT_TRUE(other->synchronize(Deadline::after_ms(10000)).ok()) << "the second stream is released";
  EXPECT_TRUE(stream->synchronize(Deadline::after_ms(10000)).ok()) << "and the first";
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 10000.0) << "refused when seen, not at the 20 s call timeout";
  const Status why = c->async_error();
  EXPECT_EQ(why.code(), Code::invalid_argument) << why.to_string();
  EXPECT_NE(why.message().find("run one after another"), std::string::npos) << why.to_string();
  EXPECT_NE(why.message().find("replay 2 began while replay 1"), std::string::npos) << why.to_string();

  ASSERT_NO_FATAL_FAILURE(stall_engines(*dev, false));
  g->reset();
  c.reset();
}

// Programs capture many calls (a graph per batch size, several calls per
// layer). Their replays share one keeper thread per communicator: 40
// captured calls, each replayed, add one thread, not 40; a capture can go
// while the others go on; the thread ends with the last of them.
TEST(CaptureOneProcess, ManyCapturesShareOneKeeperThread) {
  auto threads = [] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
    return n;
  };
  auto names = [] {  // the library names its threads (util/thread_name.hpp): which one is left
    std::string all;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream comm(e.path() / "comm");
      std::string name;
      std::getline(comm, name);
      all += name + " ";
    }
    return all;
  };
  const int n = 2;
  OneProcess p;
  ASSERT_NO_FATAL_FAILURE(open_one_process("preset=small", {0, 0}, &p));
  auto& [dev, c, stream] = p;
  const uint64_t bytes = 515;
  const int calls = 40;
  std::vector<UniqueBuffer> send, recv;
  std::vector<CollectiveArgs> args;
  for (int k = 0; k < calls; ++k) args.push_back(all_gather_over(*dev, {0, 0}, bytes, &send, &recv));
  // Fresh inputs per round: call k, rank r, round t.
  auto fill = [&](uint64_t t) {
    for (int k = 0; k < calls; ++k)
      for (int r = 0; r < n; ++r) {
        for (uint64_t i = 0; i < bytes; ++i) args[size_t(k)].send[size_t(r)].as<uint8_t>()[i] = value(k * n + r, t, i);
        std::memset(args[size_t(k)].recv[size_t(r)].host, 0xEE, n * bytes);
      }
  };
  auto wrong = [&](uint64_t t, int from) {
    uint64_t bad = 0;
    for (int k = from; k < calls; ++k)
      for (int d = 0; d < n; ++d)
        for (int q = 0; q < n; ++q)
          for (uint64_t i = 0; i < bytes; ++i)
            bad += args[size_t(k)].recv[size_t(d)].as<uint8_t>()[q * bytes + i] != value(k * n + q, t, i);
    return bad;
  };
  std::vector<std::unique_ptr<HostStream::Recording>> graphs;
  // An ordinary call first: the emulated engines' threads start with their
  // first queue, and are not what this counts.
  fill(0);
  ASSERT_TRUE(c->call(args[0], stream.get()).ok());
  ASSERT_TRUE(stream->synchronize(Deadline::after_ms(60000)).ok());
  const size_t before = threads();
  for (int k = 0; k < calls; ++k) {
    ASSERT_TRUE(stream->begin_capture().ok());
    ASSERT_TRUE(c->call(args[size_t(k)], stream.get()).ok());
    Result<std::unique_ptr<HostStream::Recording>> g = stream->end_capture();
    ASSERT_TRUE(g.ok());
    graphs.push_back(std::move(g).value());
  }
  for (uint64_t t = 1; t <= 3; ++t) {
    fill(t);
    for (auto& g : graphs) ASSERT_TRUE(g->launch(*stream).ok());
    ASSERT_TRUE(stream->synchronize(Deadline::after_ms(60000)).ok());
    EXPECT_EQ(wrong(t, 0), 0u) << "round " << t;
  }
  const size_t during = threads();
  EXPECT_LE(during, before + 1) << calls << " replayed captures, " << during - before << " more threads: " << names();
  // Half the captures go; the rest replay on, watched by the same thread.
  graphs.erase(graphs.begin(), graphs.begin() + calls / 2);
  fill(4);
  for (auto& g : graphs) ASSERT_TRUE(g->launch(*stream).ok());
  ASSERT_TRUE(stream->synchronize(Deadline::after_ms(60000)).ok());
  EXPECT_EQ(wrong(4, calls / 2), 0u);
  EXPECT_TRUE(c->async_error().ok()) << c->async_error().to_string();
  EXPECT_EQ(threads(), during);
  graphs.clear();
  c.reset();  // the keeper stops with the communicator
  EXPECT_LE(threads(), before) << "the keeper thread ends with the communicator and the last capture: " << names();
}

}  // namespace
}  // namespace conccl::mptest
