// tests/multiproc/hierarchy_test.cpp - collectives across nodes
// (HierCommunicator, conccl_hier_*) on one machine treated as several
// nodes: one forked process per rank on the emulated node, one
// Communicator per "node" (its own unique id), and between the nodes an
// engine of the test's own, as a user would bring one: byte moves over
// socketpairs between the ranks of one local rank (SocketInterNode).
//
// Every op on 2 x 2, 3 x 2 and 2 x 4 ranks, host- and stream-ordered
// (HostStream: the local calls, the engine's moves and the reduce steps in
// one stream's order), every byte of every rank's output checked against
// data regenerated from seeds: moves exactly; reductions bit for bit
// against the documented arithmetic (each node's partial in local rank
// order, then the partials in node order, AVG dividing by n once). Then the
// C API over the same engine as callbacks, and the errors: a callback that
// fails, a local communicator destroyed first, a one-process communicator,
// a node out of range, a buffer too small.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cstring>
#include <thread>

#include "collectives/reduction_test_data.hpp"
#include "conccl/bootstrap.hpp"
#include "conccl/collectives.hpp"
#include "conccl/conccl.h"
#include "conccl/emu.hpp"
#include "conccl/hierarchy.hpp"
#include "multiproc/fork_ranks.hpp"

namespace conccl::mptest {
namespace {

using redtest::random_elements;
using redtest::reference;

// ---- the engine between nodes: socketpairs between the nodes' ranks of one local rank ----

// fds[local][a][b]: node a's end of the pair between nodes a and b.
struct Mesh {
  int nodes = 0, local = 0;
  std::vector<int> fds;
  int& at(int i, int a, int b) { return fds[size_t((i * nodes + a) * nodes + b)]; }
  static Mesh make(int nodes, int local) {
    Mesh m{nodes, local, std::vector<int>(size_t(nodes * nodes * local), -1)};
    for (int i = 0; i < local; ++i)
      for (int a = 0; a < nodes; ++a)
        for (int b = a + 1; b < nodes; ++b) {
          int sv[2];
          if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return m;
          m.at(i, a, b) = sv[0];
          m.at(i, b, a) = sv[1];
        }
    return m;
  }
};

// All n bytes through `io` (read or write), however many calls it takes.
template <typename Byte, typename Io>
bool io_all(Io io, int fd, Byte* p, size_t n) {
  while (n) {
    const ssize_t k = io(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= size_t(k);
  }
  return true;
}
bool write_all(int fd, const uint8_t* p, size_t n) { return io_all(::write, fd, p, n); }
bool read_all(int fd, uint8_t* p, size_t n) { return io_all(::read, fd, p, n); }
// Sends `out` to and receives `in` from the peer at the same time (a
// writer thread), so that two large messages cannot block each other.
bool swap_with(int fd, const uint8_t* out, size_t n_out, uint8_t* in, size_t n_in) {
  bool wrote = true;
  std::thread w([&] { wrote = write_all(fd, out, n_out); });
  const bool got = read_all(fd, in, n_in);
  w.join();
  return wrote && got;
}

class SocketInterNode final : public InterNode {
 public:
  SocketInterNode(Mesh& mesh, int local, int node) : mesh_(mesh), local_(local), node_(node) {}
  int failures = 0;  // moves that failed on a stream (checked by the test)
  int calls = 0;

  Status all_gather(const Buffer& send, const Buffer& recv, uint64_t bytes, StreamOps* stream) override {
    return run(stream, [=, this] {
      uint8_t* r = recv.as<uint8_t>();
      std::memmove(r + uint64_t(node_) * bytes, send.host, bytes);  // in place: the same bytes
      std::vector<uint8_t> mine(r + uint64_t(node_) * bytes, r + uint64_t(node_ + 1) * bytes);
      for (int b = 0; b < mesh_.nodes; ++b)
        if (b != node_ && !swap_with(mesh_.at(local_, node_, b), mine.data(), bytes, r + uint64_t(b) * bytes, bytes))
          return false;
      return true;
    });
  }
  Status all_to_all(const Buffer& send, const Buffer& recv, uint64_t bytes, StreamOps* stream) override {
    return run(stream, [=, this] {
      const uint8_t* s = send.as<uint8_t>();
      uint8_t* r = recv.as<uint8_t>();
      std::memcpy(r + uint64_t(node_) * bytes, s + uint64_t(node_) * bytes, bytes);
      for (int b = 0; b < mesh_.nodes; ++b)
        if (b != node_ &&
            !swap_with(mesh_.at(local_, node_, b), s + uint64_t(b) * bytes, bytes, r + uint64_t(b) * bytes, bytes))
          return false;
      return true;
    });
  }
  Status broadcast(const Buffer& send, const Buffer& recv, uint64_t bytes, int root, StreamOps* stream) override {
    return run(stream, [=, this] {
      if (node_ == root) {
        if (recv.host != send.host) std::memcpy(recv.host, send.host, bytes);
        for (int b = 0; b < mesh_.nodes; ++b)
          if (b != node_ && !write_all(mesh_.at(local_, node_, b), recv.as<uint8_t>(), bytes)) return false;
        return true;
      }
      return read_all(mesh_.at(local_, node_, root), recv.as<uint8_t>(), bytes);
    });
  }

 private:
  // Now, or in the stream's order (a HostStream runs host work in order).
  template <typename F>
  Status run(StreamOps* stream, F work) {
    ++calls;
    if (!stream) return work() ? Status() : error(Code::internal, "socket move failed");
    auto* hs = dynamic_cast<HostStream*>(stream);
    if (!hs) return error(Code::unavailable, "this engine orders on a HostStream only");
    return hs->enqueue([this, work] {
      if (!work()) ++failures;
    });
  }
  Mesh& mesh_;
  const int local_, node_;
};

// ---- one rank ----

struct Layout {
  int nodes, local;
  int n() const { return nodes * local; }
};

Buffer at(const Buffer& mem, uint64_t offset, uint64_t bytes) { return mem.slice(offset, bytes); }

// The inputs of global rank r for call `seed` (count elements of t).
std::vector<uint8_t> input(DataType t, uint64_t count, uint64_t seed, int r) {
  return random_elements(t, count, seed * 1000 + uint64_t(r));
}

// What a reduction across nodes gives (conccl/hierarchy.hpp): per node its
// ranks' inputs reduced in local rank order (AVG: summed), then the node
// partials in node order; AVG pads with zeros to n inputs so that it
// divides by n once.
std::vector<uint8_t> hier_reference(const Layout& g, DataType t, ReduceOp op,
                                    const std::vector<std::vector<uint8_t>>& inputs, uint64_t at_byte,
                                    uint64_t count) {
  const ReduceOp inside = op == ReduceOp::avg ? ReduceOp::sum : op;
  std::vector<std::vector<uint8_t>> partials;
  for (int j = 0; j < g.nodes; ++j) {
    std::vector<std::vector<uint8_t>> mine(inputs.begin() + j * g.local, inputs.begin() + (j + 1) * g.local);
    partials.push_back(g.local == 1 ? std::vector<uint8_t>(mine[0].begin() + long(at_byte),
                                                           mine[0].begin() + long(at_byte + count * dtype_size(t)))
                                    : reference(t, inside, mine, at_byte, count));
  }
  if (op == ReduceOp::avg)
    for (int j = g.nodes; j < g.n(); ++j) partials.emplace_back(count * dtype_size(t), 0);
  if (g.nodes == 1) return reference(t, op, inputs, at_byte, count);
  return reference(t, op, partials, 0, count);
}

struct Rank {
  Layout g;
  int me, node, local;
  std::unique_ptr<emu::EmuDevice> dev;
  std::unique_ptr<Communicator> comm;
  UniqueBuffer mem;
  std::unique_ptr<HostStream> stream;
  std::string* out;
};

constexpr uint64_t kMem = 64ull << 20, kRecvAt = 32ull << 20;

// Runs `call` (host- or stream-ordered) after `produce` wrote send; returns
// "" or what went wrong.
std::string ordered(HostStream* st, const std::function<void()>& produce,
                    const std::function<Status(StreamOps*)>& call) {
  Status s;
  if (st) {
    if (!st->enqueue(produce).ok()) return "enqueue failed";
    s = call(st);
    if (s.ok()) s = st->synchronize(Deadline::after_ms(60000));
  } else {
    produce();
    s = call(nullptr);
  }
  return s.ok() ? "" : s.to_string();
}

std::string check_bytes(const char* what, const uint8_t* got, const std::vector<uint8_t>& want, int me) {
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      return std::string(what) + ": rank " + std::to_string(me) + " byte " + std::to_string(i) + " of " +
             std::to_string(want.size()) + " WRONG";
  return "";
}

std::string run_ops(Rank& rk, HierCommunicator& h, SocketInterNode& inter, HostStream* st, uint64_t& seed) {
  const int n = rk.g.n(), me = rk.me;
  const Buffer& mem = rk.mem.get();
  uint8_t* base = mem.as<uint8_t>();
  const std::string mode = st ? " (stream)" : " (host)";
  auto fill_recv = [&](uint64_t bytes) { std::memset(base + kRecvAt, 0xA5, bytes); };

  {  // all_gather, out of place and in place
    const uint64_t bytes = 4099;
    ++seed;
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < n; ++r) in.push_back(input(DataType::u8, bytes, seed, r));
    std::vector<uint8_t> want;
    for (auto& v : in) want.insert(want.end(), v.begin(), v.end());
    std::string bad = ordered(st, [&] { std::memcpy(base, in[size_t(me)].data(), bytes); fill_recv(n * bytes); },
                              [&](StreamOps* s) { return h.all_gather(at(mem, 0, bytes), at(mem, kRecvAt, n * bytes), bytes, s); });
    if (bad.empty()) bad = check_bytes(("all_gather" + mode).c_str(), base + kRecvAt, want, me);
    if (!bad.empty()) return bad;
    const Buffer recv = at(mem, kRecvAt, n * bytes), mine = at(mem, kRecvAt + uint64_t(me) * bytes, bytes);
    bad = ordered(st, [&] { fill_recv(n * bytes); std::memcpy(mine.host, in[size_t(me)].data(), bytes); },
                  [&](StreamOps* s) { return h.all_gather(mine, recv, bytes, s); });
    if (bad.empty()) bad = check_bytes(("all_gather in place" + mode).c_str(), base + kRecvAt, want, me);
    if (!bad.empty()) return bad;
  }
  {  // all_to_all: chunk d of rank r goes to rank d at r
    const uint64_t bytes = 777;
    ++seed;
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < n; ++r) in.push_back(input(DataType::u8, n * bytes, seed, r));
    std::vector<uint8_t> want;
    for (int r = 0; r < n; ++r)
      want.insert(want.end(), in[size_t(r)].begin() + long(me * bytes), in[size_t(r)].begin() + long((me + 1) * bytes));
    std::string bad = ordered(st, [&] { std::memcpy(base, in[size_t(me)].data(), n * bytes); fill_recv(n * bytes); },
                              [&](StreamOps* s) { return h.all_to_all(at(mem, 0, n * bytes), at(mem, kRecvAt, n * bytes), bytes, s); });
    if (bad.empty()) bad = check_bytes(("all_to_all" + mode).c_str(), base + kRecvAt, want, me);
    if (!bad.empty()) return bad;
  }
  for (int root : {n - 1, 1}) {  // broadcast from the last rank and from local rank 1 of node 0
    const uint64_t bytes = 5003;
    ++seed;
    const std::vector<uint8_t> data = input(DataType::u8, bytes, seed, root);
    std::string bad = ordered(st, [&] { if (me == root) std::memcpy(base, data.data(), bytes); fill_recv(bytes); },
                              [&](StreamOps* s) { return h.broadcast(at(mem, 0, bytes), at(mem, kRecvAt, bytes), bytes, root, s); });
    if (bad.empty()) bad = check_bytes(("broadcast from " + std::to_string(root) + mode).c_str(), base + kRecvAt, data, me);
    if (!bad.empty()) return bad;
  }
  struct Red {
    DataType t;
    ReduceOp op;
  };
  const Red reds[] = {{DataType::f32, ReduceOp::sum}, {DataType::bf16, ReduceOp::avg}, {DataType::f16, ReduceOp::max},
                      {DataType::i32, ReduceOp::avg}, {DataType::i64, ReduceOp::prod}, {DataType::u8, ReduceOp::min},
                      {DataType::f32, ReduceOp::avg}};
  for (const Red& rd : reds) {
    const uint64_t es = dtype_size(rd.t);
    const std::string what = std::string(dtype_name(rd.t)) + " " + reduce_op_name(rd.op) + mode;
    {  // reduce_scatter
      const uint64_t count = 1001;
      ++seed;
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < n; ++r) in.push_back(input(rd.t, n * count, seed, r));
      const std::vector<uint8_t> want = hier_reference(rk.g, rd.t, rd.op, in, uint64_t(me) * count * es, count);
      std::string bad = ordered(st, [&] { std::memcpy(base, in[size_t(me)].data(), n * count * es); fill_recv(count * es); },
                                [&](StreamOps* s) {
                                  return h.reduce_scatter(at(mem, 0, n * count * es), at(mem, kRecvAt, count * es), count,
                                                          rd.t, rd.op, s);
                                });
      if (bad.empty()) bad = check_bytes(("reduce_scatter " + what).c_str(), base + kRecvAt, want, me);
      if (!bad.empty()) return bad;
    }
    for (uint64_t count : {uint64_t(n) * 300, uint64_t(1001)}) {  // all_reduce: both forms
      ++seed;
      std::vector<std::vector<uint8_t>> in;
      for (int r = 0; r < n; ++r) in.push_back(input(rd.t, count, seed, r));
      const std::vector<uint8_t> want = hier_reference(rk.g, rd.t, rd.op, in, 0, count);
      std::string bad = ordered(st, [&] { std::memcpy(base, in[size_t(me)].data(), count * es); fill_recv(count * es); },
                                [&](StreamOps* s) {
                                  return h.all_reduce(at(mem, 0, count * es), at(mem, kRecvAt, count * es), count, rd.t,
                                                      rd.op, s);
                                });
      if (bad.empty())
        bad = check_bytes(("all_reduce count " + std::to_string(count) + " " + what).c_str(), base + kRecvAt, want, me);
      if (!bad.empty()) return bad;
    }
  }
  if (inter.failures) return "the engine's moves failed on the stream";
  return "";
}

int rank_main(const Layout& g, const std::vector<UniqueId>& ids, Mesh& mesh, int me, std::string* out) {
  Rank rk{g, me, me / g.local, me % g.local, nullptr, nullptr, {}, nullptr, out};
  DeviceOptions o;
  o.settings = "preset=mi300x memory_per_gpu=512M";
  o.process_slot = me;
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(o);
  if (!dev.ok()) return *out += dev.status().to_string(), 2;
  rk.dev = std::move(dev).value();
  Communicator::Options co;
  co.gpu = me % rk.dev->gpu_count();
  co.reduce_staging_bytes = 8ull << 20;
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(*rk.dev, rk.local, g.local, ids[size_t(rk.node)], co);
  if (!comm.ok()) return *out += comm.status().to_string(), 3;
  rk.comm = std::move(comm).value();
  Result<UniqueBuffer> mem = UniqueBuffer::alloc(*rk.dev, rk.comm->gpu(rk.local), kMem, MemKind::device);
  if (!mem.ok()) return 4;
  rk.mem = std::move(mem).value();
  if (!rk.comm->register_window(rk.mem.get()).ok()) return 5;
  Result<std::unique_ptr<HostStream>> stream = HostStream::create(*rk.dev);
  if (!stream.ok()) return 6;
  rk.stream = std::move(stream).value();
  SocketInterNode inter(mesh, rk.local, rk.node);
  Result<std::unique_ptr<HierCommunicator>> h = HierCommunicator::create(*rk.comm, rk.node, g.nodes, inter);
  if (!h.ok()) return *out += h.status().to_string(), 7;
  if ((*h)->rank() != me || (*h)->size() != g.n()) return *out += "rank/size wrong\n", 8;
  uint64_t seed = 5;
  for (HostStream* st : {static_cast<HostStream*>(nullptr), rk.stream.get()}) {
    const std::string bad = run_ops(rk, **h, inter, st, seed);
    if (!bad.empty()) return *out += bad + "\n", 1;
  }
  // An AVG whose zero inputs outgrow the first ones, then a call whose
  // scratch would fit in those: the scratch is still a window, so the call
  // exchanges no message (the outgrown zeros were once taken for scratch).
  if (g.nodes > 1) {
    const uint64_t count = 3001, es = 4;
    std::vector<std::vector<uint8_t>> in;
    for (int r = 0; r < g.n(); ++r) in.push_back(input(DataType::f32, count, 999, r));
    uint8_t* base = rk.mem.get().as<uint8_t>();
    std::memcpy(base, in[size_t(me)].data(), count * es);
    Status st = (*h)->all_reduce(at(rk.mem.get(), 0, count * es), at(rk.mem.get(), kRecvAt, count * es), count,
                                 DataType::f32, ReduceOp::avg);
    if (!st.ok()) return *out += st.to_string() + "\n", 11;
    if (std::string bad = check_bytes("all_reduce avg 3001", base + kRecvAt,
                                      hier_reference(g, DataType::f32, ReduceOp::avg, in, 0, count), me);
        !bad.empty())
      return *out += bad + "\n", 12;
    const uint64_t sent_before = rk.comm->stats().bootstrap_messages_sent;
    const uint64_t bytes = 256;  // n x 256 of scratch: less than the first zero inputs (4096)
    std::vector<std::vector<uint8_t>> a2a;
    for (int r = 0; r < g.n(); ++r) a2a.push_back(input(DataType::u8, g.n() * bytes, 998, r));
    std::memcpy(base, a2a[size_t(me)].data(), g.n() * bytes);
    st = (*h)->all_to_all(at(rk.mem.get(), 0, g.n() * bytes), at(rk.mem.get(), kRecvAt, g.n() * bytes), bytes);
    if (!st.ok()) return *out += st.to_string() + "\n", 13;
    for (int q = 0; q < g.n(); ++q)
      if (std::memcmp(base + kRecvAt + q * bytes, a2a[size_t(q)].data() + me * bytes, bytes) != 0)
        return *out += "all_to_all after the zero inputs grew: WRONG\n", 14;
    if (rk.comm->stats().bootstrap_messages_sent != sent_before)
      return *out += "an all_to_all after the zero inputs grew exchanged messages: its scratch is no window\n", 15;
  }
  // The local steps went through windows (the caller's and the scratch):
  // no message between the node's ranks per call.
  *out += "window calls " + std::to_string(rk.comm->stats().window_calls) + ", engine calls " +
          std::to_string(inter.calls) + "\n";
  if (g.nodes > 1 && inter.calls == 0) return *out += "the engine between nodes was never used\n", 9;
  return rk.comm->async_error().ok() ? 0 : 10;
}

class HierarchyProcs : public ::testing::TestWithParam<Layout> {};

TEST_P(HierarchyProcs, EveryCollectiveMatchesItsArithmetic) {
  const Layout g = GetParam();
  std::vector<UniqueId> ids;
  for (int j = 0; j < g.nodes; ++j) ids.push_back(make_unique_id().value());
  Mesh mesh = Mesh::make(g.nodes, g.local);
  std::vector<RankOutcome> res =
      fork_ranks(all_ranks(g.n()), [&](int r, std::string* out) { return rank_main(g, ids, mesh, r, out); });
  for (int fd : mesh.fds)
    if (fd >= 0) close(fd);
  expect_ranks_ok(res);
}

INSTANTIATE_TEST_SUITE_P(Layouts, HierarchyProcs,
                         ::testing::Values(Layout{2, 2}, Layout{3, 2}, Layout{2, 4}, Layout{1, 2}),
                         [](const ::testing::TestParamInfo<Layout>& i) {
                           return std::to_string(i.param.nodes) + "NodesOf" + std::to_string(i.param.local);
                         });

// ---- the C API: the same engine as callbacks ----

struct CEngine {
  SocketInterNode* inter;
  conccl_device_t dev;
  int fail_next = 0;  // the next all_gather fails (an engine error)
};

Buffer c_to_cpp(const conccl_buffer* b) {
  Buffer x;
  x.va = b->va;
  x.host = b->host;
  x.size = b->size;
  return x;
}

conccl_status c_all_gather(void* user, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, void*) {
  auto* e = static_cast<CEngine*>(user);
  if (e->fail_next) {
    e->fail_next = 0;
    return CONCCL_ERR_TIMEOUT;  // as a network engine's timeout
  }
  if (!send->host || !recv->host || recv->size < 2 * bytes) return CONCCL_ERR_INVALID_ARGUMENT;
  return e->inter->all_gather(c_to_cpp(send), c_to_cpp(recv), bytes, nullptr).ok() ? CONCCL_OK : CONCCL_ERR_INTERNAL;
}
conccl_status c_all_to_all(void* user, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, void*) {
  auto* e = static_cast<CEngine*>(user);
  return e->inter->all_to_all(c_to_cpp(send), c_to_cpp(recv), bytes, nullptr).ok() ? CONCCL_OK : CONCCL_ERR_INTERNAL;
}
conccl_status c_broadcast(void* user, const conccl_buffer* send, const conccl_buffer* recv, size_t bytes, int root,
                          void*) {
  auto* e = static_cast<CEngine*>(user);
  return e->inter->broadcast(c_to_cpp(send), c_to_cpp(recv), bytes, root, nullptr).ok() ? CONCCL_OK
                                                                                        : CONCCL_ERR_INTERNAL;
}

#define C_OK(call)                                                                                 \
  do {                                                                                             \
    const conccl_status s_ = (call);                                                               \
    if (s_ != CONCCL_OK) return *out += std::string(#call) + ": " + conccl_last_error() + "\n", 20; \
  } while (0)

int c_rank_main(const std::vector<conccl_unique_id>& ids, Mesh& mesh, int me, std::string* out) {
  const Layout g{2, 2};
  const int node = me / 2, local = me % 2, n = 4;
  conccl_device_options o;
  conccl_device_options_init(&o);
  o.settings = "preset=mi300x memory_per_gpu=512M";
  o.process_slot = me;
  conccl_device_t dev;
  C_OK(conccl_device_open(&o, &dev));
  conccl_comm_t comm;
  C_OK(conccl_comm_create_rank(dev, local, 2, &ids[size_t(node)], me, NULL, &comm));
  SocketInterNode inter(mesh, local, node);
  CEngine engine{&inter, dev};
  conccl_internode table{};
  table.struct_size = sizeof table;
  table.user = &engine;
  table.all_gather = c_all_gather;
  table.all_to_all = c_all_to_all;
  table.broadcast = c_broadcast;
  // Refused: a node out of range, a table without struct_size.
  conccl_hier_t h = nullptr;
  if (conccl_hier_create(comm, 2, 2, &table, &h) != CONCCL_ERR_INVALID_ARGUMENT)
    return *out += "node 2 of 2 accepted\n", 21;
  conccl_internode short_table = table;
  short_table.struct_size = 8;
  if (conccl_hier_create(comm, node, 2, &short_table, &h) != CONCCL_ERR_INVALID_ARGUMENT)
    return *out += "a table without struct_size accepted\n", 22;
  C_OK(conccl_hier_create(comm, node, 2, &table, &h));
  if (conccl_hier_rank(h) != me || conccl_hier_size(h) != n) return *out += "rank/size\n", 23;

  conccl_buffer send, recv;
  const size_t bytes = 3001;
  C_OK(conccl_buffer_alloc(dev, me, n * bytes * 8, CONCCL_MEM_DEVICE, &send));
  C_OK(conccl_buffer_alloc(dev, me, n * bytes * 8, CONCCL_MEM_DEVICE, &recv));
  auto* s = static_cast<uint8_t*>(send.host);
  auto* r = static_cast<uint8_t*>(recv.host);
  // all_gather
  std::vector<std::vector<uint8_t>> in;
  for (int q = 0; q < n; ++q) in.push_back(input(DataType::u8, bytes, 77, q));
  std::memcpy(s, in[size_t(me)].data(), bytes);
  C_OK(conccl_hier_all_gather(&send, &recv, bytes, h, NULL));
  for (int q = 0; q < n; ++q)
    if (std::memcmp(r + q * bytes, in[size_t(q)].data(), bytes) != 0) return *out += "C all_gather WRONG\n", 24;
  // all_reduce of float32 SUM, both forms
  for (size_t count : {size_t(n) * 250, size_t(999)}) {
    std::vector<std::vector<uint8_t>> fin;
    for (int q = 0; q < n; ++q) fin.push_back(input(DataType::f32, count, 78 + count, q));
    std::memcpy(s, fin[size_t(me)].data(), count * 4);
    C_OK(conccl_hier_all_reduce(&send, &recv, count, CONCCL_FLOAT32, CONCCL_SUM, h, NULL));
    if (std::memcmp(r, hier_reference(g, DataType::f32, ReduceOp::sum, fin, 0, count).data(), count * 4) != 0)
      return *out += "C all_reduce WRONG\n", 25;
  }
  // reduce_scatter of int64 AVG
  {
    const size_t count = 123;
    std::vector<std::vector<uint8_t>> iin;
    for (int q = 0; q < n; ++q) iin.push_back(input(DataType::i64, n * count, 79, q));
    std::memcpy(s, iin[size_t(me)].data(), n * count * 8);
    C_OK(conccl_hier_reduce_scatter(&send, &recv, count, CONCCL_INT64, CONCCL_AVG, h, NULL));
    if (std::memcmp(r, hier_reference(g, DataType::i64, ReduceOp::avg, iin, me * count * 8, count).data(), count * 8))
      return *out += "C reduce_scatter WRONG\n", 26;
  }
  // all_to_all and broadcast (root 3: NULL send elsewhere)
  {
    std::vector<std::vector<uint8_t>> ain;
    for (int q = 0; q < n; ++q) ain.push_back(input(DataType::u8, n * 100, 80, q));
    std::memcpy(s, ain[size_t(me)].data(), n * 100);
    C_OK(conccl_hier_all_to_all(&send, &recv, 100, h, NULL));
    for (int q = 0; q < n; ++q)
      if (std::memcmp(r + q * 100, ain[size_t(q)].data() + me * 100, 100) != 0) return *out += "C all_to_all WRONG\n", 27;
    std::memcpy(s, ain[3].data(), 400);
    C_OK(conccl_hier_broadcast(me == 3 ? &send : NULL, &recv, 400, 3, h, NULL));
    if (std::memcmp(r, ain[3].data(), 400) != 0) return *out += "C broadcast WRONG\n", 28;
  }
  // Refused before anything moves: bad enums, a buffer too small.
  if (conccl_hier_all_reduce(&send, &recv, 10, (conccl_datatype)3, CONCCL_SUM, h, NULL) != CONCCL_ERR_INVALID_ARGUMENT)
    return *out += "dt 3 accepted\n", 29;
  conccl_buffer small = recv;
  small.size = 16;
  if (conccl_hier_all_gather(&send, &small, bytes, h, NULL) != CONCCL_ERR_INVALID_ARGUMENT ||
      std::string(conccl_last_error()).find("recv holds 16 bytes") == std::string::npos)
    return *out += std::string("a small recv: ") + conccl_last_error() + "\n", 30;
  // The engine fails (on every rank, after the local step): its error comes back naming it.
  engine.fail_next = 1;
  if (conccl_hier_all_gather(&send, &recv, bytes, h, NULL) != CONCCL_ERR_TIMEOUT ||
      std::string(conccl_last_error()).find("inter-node engine's all_gather callback returned "
                                            "4 (timeout)") == std::string::npos)
    return *out += std::string("an engine error: ") + conccl_last_error() + "\n", 31;
  // The local communicator destroyed first: the hier's calls say so, its destroy still works.
  C_OK(conccl_comm_destroy(comm));
  if (conccl_hier_all_gather(&send, &recv, bytes, h, NULL) != CONCCL_ERR_INVALID_ARGUMENT ||
      std::string(conccl_last_error()).find("local communicator was destroyed") == std::string::npos)
    return *out += std::string("after the comm: ") + conccl_last_error() + "\n", 32;
  C_OK(conccl_hier_destroy(h));
  C_OK(conccl_buffer_free(dev, &send));
  C_OK(conccl_buffer_free(dev, &recv));
  C_OK(conccl_device_close(dev));
  return 0;
}

TEST(HierarchyCApi, CallbacksCarryTheInterNodeSteps) {
  std::vector<conccl_unique_id> ids(2);
  for (auto& id : ids) ASSERT_EQ(conccl_get_unique_id(&id), CONCCL_OK);
  Mesh mesh = Mesh::make(2, 2);
  std::vector<RankOutcome> res = fork_ranks(all_ranks(4), [&](int r, std::string* out) {
    return c_rank_main(ids, mesh, r, out);
  });
  for (int fd : mesh.fds)
    if (fd >= 0) close(fd);
  expect_ranks_ok(res);
}

TEST(HierarchyCApi, AOneProcessCommunicatorIsRefused) {
  conccl_device_options o;
  conccl_device_options_init(&o);
  o.settings = "preset=mi300x";
  conccl_device_t dev;
  ASSERT_EQ(conccl_device_open(&o, &dev), CONCCL_OK);
  const int gpus[] = {0, 1};
  conccl_comm_t comm;
  ASSERT_EQ(conccl_comm_create(dev, gpus, 2, NULL, &comm), CONCCL_OK);
  conccl_internode table{};
  table.struct_size = sizeof table;
  table.all_gather = c_all_gather;
  table.all_to_all = c_all_to_all;
  table.broadcast = c_broadcast;
  conccl_hier_t h = nullptr;
  EXPECT_EQ(conccl_hier_create(comm, 0, 2, &table, &h), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(conccl_last_error()).find("conccl_comm_create_rank"), std::string::npos) << conccl_last_error();
  EXPECT_EQ(h, nullptr);
  table.broadcast = nullptr;
  EXPECT_EQ(conccl_hier_create(comm, 0, 2, &table, &h), CONCCL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(conccl_last_error()).find("broadcast"), std::string::npos) << conccl_last_error();
  EXPECT_EQ(conccl_comm_destroy(comm), CONCCL_OK);
  EXPECT_EQ(conccl_device_close(dev), CONCCL_OK);
}

}  // namespace
}  // namespace conccl::mptest
