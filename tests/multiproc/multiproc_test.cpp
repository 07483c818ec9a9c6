// tests/multiproc/multiproc_test.cpp - ranks in separate processes on the
// emulated node: the bootstrap, every collective x variant verified byte for
// byte and compared with the same collective in one process, the same
// command lists in every rank, and the failures (a rank that never joins,
// one killed in mid-launch, mismatched arguments, a shared process slot).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <thread>
#include <tuple>
#include <sstream>

#include "conccl/bootstrap.hpp"
#include "conccl/collectives.hpp"
#include "conccl/emu.hpp"
#include "multiproc/fork_ranks.hpp"

namespace conccl::mptest {
namespace {

// ---- data: every byte derived from (seed, offset), so any rank can compute
// what any other rank sent ----

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void fill(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = mix(seed * 0x100000001B3ull + i / 8);
    std::memcpy(p + i, &v, std::min<size_t>(8, n - i));
  }
}

std::vector<uint8_t> pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  fill(v.data(), n, seed);
  return v;
}

uint64_t fnv(const void* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

struct Case {
  CollOp op;
  Variant variant;
  uint64_t bytes;
  int root = 0, peer = 0;
  bool prelaunch = false;
  std::string name() const {
    return std::string(coll_op_name(op)) + "/" + variant_name(variant) + "/" + std::to_string(bytes) +
           (prelaunch ? "/prelaunch" : "");
  }
};

uint64_t send_size(const Case& c, int r, int n) {
  switch (c.op) {
    case CollOp::all_to_all: return c.bytes * n;
    case CollOp::scatter: return r == c.root ? c.bytes * n : 0;
    case CollOp::broadcast:
    case CollOp::p2p: return r == c.root ? c.bytes : 0;
    default: return c.bytes;
  }
}
uint64_t recv_size(const Case& c, int r, int n) {
  switch (c.op) {
    case CollOp::all_gather:
    case CollOp::all_to_all: return c.bytes * n;
    case CollOp::gather: return r == c.root ? c.bytes * n : 0;
    case CollOp::p2p: return r == c.peer ? c.bytes : 0;
    default: return c.bytes;
  }
}
uint64_t send_seed(size_t ci, int r) { return 1000003ull * (ci + 1) + 17ull * r + 1; }
uint64_t recv_seed(size_t ci, int r) { return 7000001ull * (ci + 1) + 31ull * r + 5; }

// What rank `me`'s receive buffer holds after the case: its old contents
// with the collective's chunks written over them.
std::vector<uint8_t> expected_recv(const Case& c, size_t ci, int me, int n) {
  std::vector<uint8_t> out = pattern(recv_size(c, me, n), recv_seed(ci, me));
  auto chunk = [&](int src, uint64_t src_off, uint64_t dst_off) {
    const std::vector<uint8_t> s = pattern(send_size(c, src, n), send_seed(ci, src));
    std::memcpy(out.data() + dst_off, s.data() + src_off, c.bytes);
  };
  switch (c.op) {
    case CollOp::all_gather:
      for (int r = 0; r < n; ++r) chunk(r, 0, r * c.bytes);
      break;
    case CollOp::all_to_all:
      for (int r = 0; r < n; ++r) chunk(r, me * c.bytes, r * c.bytes);
      break;
    case CollOp::broadcast: chunk(c.root, 0, 0); break;
    case CollOp::gather:
      if (me == c.root)
        for (int r = 0; r < n; ++r) chunk(r, 0, r * c.bytes);
      break;
    case CollOp::scatter: chunk(c.root, me * c.bytes, 0); break;
    case CollOp::p2p:
      if (me == c.peer) chunk(c.root, 0, 0);
      break;
  }
  return out;
}

// ---- the node layouts ----

// Which GPUs of the emulated node each rank's process sees (the emulator's
// `visible` setting: per-rank isolation as cgroups, Slurm or Kubernetes
// leave it, issue #31 item 6).
enum class Isolation {
  none,      // every process sees every GPU
  own_gpu,   // each rank sees only its own GPU (its index 0 there)
  rank0_all  // rank 0 sees all, the others only their own
};

struct Layout {
  const char* preset;
  bool loopback;
  int nranks;
  Isolation isolation = Isolation::none;
};

DeviceOptions device_options(const Layout& l, int slot) {
  DeviceOptions o;
  o.settings = std::string("preset=") + l.preset + " memory_per_gpu=4G";  // loopback ranks share one GPU's memory
  if (l.isolation == Isolation::own_gpu || (l.isolation == Isolation::rank0_all && slot > 0))
    o.settings += " visible=" + std::to_string(slot);
  o.process_slot = slot;
  return o;
}

Communicator::Options comm_options(const Layout& l) {
  Communicator::Options o;
  o.loopback = l.loopback;
  o.join_timeout_ms = 60000;
  return o;
}

// Every op x every variant the engines can run x sizes from 1 KiB to 64 MiB
// (the largest for the all-to-all and all-gather, whose chunks cross every
// pair).
std::vector<Case> cases_for(const Caps& caps, int n) {
  std::vector<Case> out;
  const CollOp ops[] = {CollOp::p2p, CollOp::broadcast, CollOp::gather, CollOp::scatter, CollOp::all_gather,
                        CollOp::all_to_all};
  for (CollOp op : ops)
    for (Variant v : variants_for(op)) {
      if (!variant_missing_cap(v, caps).empty()) continue;
      if (v == Variant::pull) continue;  // one process only (PullIsRefusedAcrossProcesses)
      std::vector<uint64_t> sizes = {1024, (1u << 20) + 4096};
      if (v == Variant::automatic && (op == CollOp::all_gather || op == CollOp::all_to_all))
        // Large: past every size threshold of choose_variant (4 MiB in all)
        // and past one SDMA copy's largest count (4 MiB on older
        // generations), not a multiple of either; small enough that eight
        // emulated processes finish on two cores well within ctest's limit.
        sizes.push_back(n <= 4 ? (8u << 20) + 4096 : (4u << 20) + 4096);
      for (uint64_t b : sizes) {
        Case c{op, v, b};
        c.root = op == CollOp::p2p ? 1 % n : n - 1;
        c.peer = 0;
        out.push_back(c);
        if (b == 1024) {  // released by each rank's trigger, as a compute stream would
          c.prelaunch = true;
          out.push_back(c);
        }
      }
    }
  return out;
}

// The case's arguments, without buffers.
CollectiveArgs args_of(const Case& c) {
  CollectiveArgs a;
  a.op = c.op;
  a.variant = c.variant;
  a.bytes = c.bytes;
  a.root = c.root;
  a.peer = c.peer;
  a.prelaunch = c.prelaunch;
  return a;
}

// A buffer on `gpu` holding the pattern of `seed`.
Result<UniqueBuffer> filled(Device& dev, int gpu, uint64_t bytes, uint64_t seed) {
  Result<UniqueBuffer> b = UniqueBuffer::alloc(dev, gpu, bytes, MemKind::device);
  if (b.ok()) fill((*b)->as<uint8_t>(), bytes, seed);
  return b;
}

// Three launches of the plan (a relaunch resets the signals other ranks'
// lists use), each waited for; prelaunched plans released by the host.
Status run_plan(Plan& p, const Case& c) {
  for (int k = 0; k < 3; ++k) {
    const Deadline dl = Deadline::after_ms(60000);
    Status st = c.prelaunch ? p.prelaunch(dl) : p.launch(dl);
    if (st.ok() && c.prelaunch) st = p.release();
    if (st.ok()) st = p.wait(dl);
    if (!st.ok()) return st.prefix("launch " + std::to_string(k));
    // Prelaunched across processes: every list of this rank said it ended
    // (what a stream waits for before it reuses the send buffer).
    const int me = p.communicator().rank();
    if (c.prelaunch && me >= 0) {
      uint64_t mine = 0;
      for (const PlanList& l : p.lists()) mine += l.queue ? 1 : 0;
      if (p.sent_expected(me) != mine || p.sent(me).value() != mine)
        return error(Code::internal, "sent signal " + std::to_string(p.sent(me).value()) + " of " +
                                         std::to_string(p.sent_expected(me)) + ", lists " + std::to_string(mine));
    }
  }
  return Status();
}

// One case on this rank's buffers: the outcome line the parent compares.
std::string run_case(Device& dev, Communicator& comm, int gpu, const Case& c, size_t ci, int me, int n,
                     bool describe) {
  std::ostringstream line;
  line << "case " << ci << " " << c.name() << " ";
  UniqueBuffer send, recv;
  const uint64_t ss = send_size(c, me, n), rs = recv_size(c, me, n);
  for (auto [bytes, seed, out] : {std::tuple{ss, send_seed(ci, me), &send}, std::tuple{rs, recv_seed(ci, me), &recv}}) {
    if (!bytes) continue;
    Result<UniqueBuffer> b = filled(dev, gpu, bytes, seed);
    if (!b.ok()) return line.str() + "alloc-failed " + b.status().to_string() + "\n";
    *out = std::move(b).value();
  }
  CollectiveArgs a = args_of(c);
  if (comm.rank() >= 0) {
    if (ss) a.send = {send.get()};
    if (rs) a.recv = {recv.get()};
  }
  Result<std::unique_ptr<Plan>> p = comm.plan(a);
  if (!p.ok()) return line.str() + "plan-error " + code_name(p.status().code()) + "\n";
  Status st = run_plan(**p, c);
  if (!st.ok()) return line.str() + "run-error " + st.to_string() + "\n";
  line << "ok";
  if (rs) {
    const std::vector<uint8_t> want = expected_recv(c, ci, me, n);
    const bool same = std::memcmp(want.data(), recv->host, rs) == 0;
    line << (same ? " verified" : " WRONG") << " " << std::hex << fnv(recv->host, rs) << std::dec;
  }
  if (describe) line << " plan " << std::hex << fnv((*p)->describe().data(), (*p)->describe().size()) << std::dec;
  return line.str() + "\n";
}

// The whole matrix as rank `me` of a multi-process communicator.
int rank_main(const Layout& l, const UniqueId& id, int me, std::string* out) {
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(device_options(l, me));
  if (!dev.ok()) {
    *out += "device: " + dev.status().to_string() + "\n";
    return 2;
  }
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(**dev, me, l.nranks, id, comm_options(l));
  if (!comm.ok()) {
    *out += "create: " + comm.status().to_string() + "\n";
    return 3;
  }
  const int gpu = (*comm)->gpu(me);
  const std::vector<Case> cases = cases_for((*comm)->caps(), l.nranks);
  for (size_t i = 0; i < cases.size(); ++i) *out += run_case(**dev, **comm, gpu, cases[i], i, me, l.nranks, true);
  return 0;
}

// The same matrix with every rank in this process: rank r's lines.
std::vector<std::string> single_process(Layout l) {
  l.isolation = Isolation::none;  // one process sees the whole node
  std::vector<std::string> lines(static_cast<size_t>(l.nranks));
  Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(device_options(l, 0));
  if (!dev.ok()) return lines;
  std::vector<int> gpus;
  for (int r = 0; r < l.nranks; ++r) gpus.push_back(l.loopback ? 0 : r);
  Result<std::unique_ptr<Communicator>> comm = Communicator::create(**dev, gpus, comm_options(l));
  if (!comm.ok()) return lines;
  const std::vector<Case> cases = cases_for((*comm)->caps(), l.nranks);
  for (size_t i = 0; i < cases.size(); ++i) {
    // Each rank's buffers, filled as that rank fills them, then one plan.
    const Case& c = cases[i];
    std::vector<UniqueBuffer> sends, recvs;
    CollectiveArgs a = args_of(c);
    for (int r = 0; r < l.nranks; ++r) {
      const uint64_t ss = send_size(c, r, l.nranks), rs = recv_size(c, r, l.nranks);
      UniqueBuffer s, v;
      for (auto [bytes, seed, out] : {std::tuple{ss, send_seed(i, r), &s}, std::tuple{rs, recv_seed(i, r), &v}}) {
        if (!bytes) continue;
        Result<UniqueBuffer> b = filled(**dev, gpus[size_t(r)], bytes, seed);
        if (!b.ok()) return {b.status().to_string()};
        *out = std::move(b).value();
      }
      a.send.push_back(ss ? s.get() : Buffer{});
      a.recv.push_back(rs ? v.get() : Buffer{});
      sends.push_back(std::move(s));
      recvs.push_back(std::move(v));
    }
    Result<std::unique_ptr<Plan>> p = (*comm)->plan(a);
    Status st = p.ok() ? run_plan(**p, c) : p.status();
    for (int r = 0; r < l.nranks; ++r) {
      std::ostringstream line;
      line << "case " << i << " " << c.name() << " ";
      if (!p.ok()) line << "plan-error " << code_name(p.status().code());
      else if (!st.ok()) line << "run-error " << st.to_string();
      else {
        line << "ok";
        if (const uint64_t rs = recv_size(c, r, l.nranks)) {
          const std::vector<uint8_t> want = expected_recv(c, i, r, l.nranks);
          const Buffer& b = recvs[size_t(r)].get();
          line << (std::memcmp(want.data(), b.host, rs) == 0 ? " verified" : " WRONG") << " " << std::hex
               << fnv(b.host, rs) << std::dec;
        }
      }
      lines[size_t(r)] += line.str() + "\n";
    }
  }
  return lines;
}

std::string strip_plan(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    const size_t at = line.find(" plan ");
    out += (at == std::string::npos ? line : line.substr(0, at)) + "\n";
  }
  return out;
}

std::map<size_t, std::string> plan_hashes(const std::string& text) {
  std::map<size_t, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find(" plan ");
    if (at == std::string::npos) continue;
    out[std::stoul(line.substr(5))] = line.substr(at + 6);  // "case N ..." -> N
  }
  return out;
}

// ---- the tests ----

class MultiProcess : public ::testing::TestWithParam<Layout> {};

std::string layout_name(const Layout& l) {
  const char* isolation[] = {"", "_isolated", "_rank0_sees_all"};
  return std::string(l.preset) + "_" + std::to_string(l.nranks) + "procs" + isolation[static_cast<int>(l.isolation)];
}

TEST_P(MultiProcess, EveryCollectiveMatchesOneProcessByteForByte) {
  const Layout l = GetParam();
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res =
      fork_ranks(all_ranks(l.nranks), [&](int r, std::string* out) { return rank_main(l, id, r, out); });
  for (int r = 0; r < l.nranks; ++r) {
    ASSERT_FALSE(res[size_t(r)].killed_at_deadline) << "rank " << r << " hung:\n" << res[size_t(r)].out;
    ASSERT_EQ(res[size_t(r)].exit_code, 0) << "rank " << r << ":\n" << res[size_t(r)].out;
    EXPECT_EQ(res[size_t(r)].out.find("WRONG"), std::string::npos) << res[size_t(r)].out;
    EXPECT_EQ(res[size_t(r)].out.find("error"), std::string::npos) << res[size_t(r)].out;
  }
  // Every rank compiled the same command lists.
  const std::map<size_t, std::string> plans0 = plan_hashes(res[0].out);
  ASSERT_FALSE(plans0.empty());
  for (int r = 1; r < l.nranks; ++r) EXPECT_EQ(plan_hashes(res[size_t(r)].out), plans0) << "rank " << r;
  // And received what the same plans leave in one process.
  const std::vector<std::string> one = single_process(l);
  for (int r = 0; r < l.nranks; ++r)
    EXPECT_EQ(strip_plan(res[size_t(r)].out), one[size_t(r)]) << "rank " << r << " differs from one process";
}

INSTANTIATE_TEST_SUITE_P(Emu, MultiProcess,
                         ::testing::Values(Layout{"mi300x", false, 2}, Layout{"mi300x", false, 4},
                                           Layout{"mi300x", false, 8}, Layout{"h200", true, 2},
                                           Layout{"h200", true, 4},
                                           Layout{"mi300x", false, 4, Isolation::own_gpu},
                                           Layout{"mi300x", false, 3, Isolation::rank0_all}),
                         [](const auto& info) { return layout_name(info.param); });

TEST(Bootstrap, ExchangesDataAndFileDescriptors) {
  const UniqueId id = make_unique_id().value();
  ASSERT_EQ(UniqueId::parse(id.to_string()).value(), id);
  ASSERT_FALSE(UniqueId::parse("conccl-uid-zz").ok());
  std::vector<RankOutcome> res = fork_ranks(all_ranks(4), [&](int r, std::string* out) {
    Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, r, 4, Deadline::after_ms(20000));
    if (!b.ok()) return *out = b.status().to_string(), 2;
    // Each rank passes a memfd holding its own bytes.
    const int fd = memfd_create("t", MFD_CLOEXEC);
    const std::string mine = "rank" + std::to_string(r) + std::string(size_t(100000 * r), char('a' + r));
    if (write(fd, mine.data(), mine.size()) != ssize_t(mine.size())) return 3;
    Result<std::vector<Bootstrap::Message>> all = (*b)->exchange("t", mine, {fd}, Deadline::after_ms(20000));
    close(fd);
    if (!all.ok()) return *out = all.status().to_string(), 4;
    for (int q = 0; q < 4; ++q) {
      Bootstrap::Message& m = (*all)[size_t(q)];
      const std::string want = "rank" + std::to_string(q) + std::string(size_t(100000 * q), char('a' + q));
      if (m.data != want) return *out = "data from " + std::to_string(q), 5;
      if (q == r) continue;
      if (m.fds.size() != 1) return *out = "fds from " + std::to_string(q), 6;
      std::string got(want.size(), '\0');
      if (pread(m.fds[0], got.data(), got.size(), 0) != ssize_t(got.size()) || got != want)
        return *out = "memfd from " + std::to_string(q), 7;
      close(m.fds[0]);
    }
    // One exchange and one barrier of 4 ranks: 3 messages each way, twice.
    if ((*b)->messages_sent() != 3 || (*b)->messages_received() != 3)
      return *out = "after the exchange: sent " + std::to_string((*b)->messages_sent()) + " received " +
                    std::to_string((*b)->messages_received()), 9;
    if (!(*b)->barrier("end", Deadline::after_ms(20000)).ok()) return 8;
    if ((*b)->messages_sent() != 6 || (*b)->messages_received() != 6)
      return *out = "after the barrier: sent " + std::to_string((*b)->messages_sent()) + " received " +
                    std::to_string((*b)->messages_received()), 10;
    return 0;
  });
  expect_ranks_ok(res);
}

// The counts Communicator::stats reports: every framed message to or from a
// peer in an exchange or barrier counts 1 (3 ranks: 2 each way per call),
// whatever its size (a 3 MiB frame leaves in many sendmsg calls and arrives
// in many reads, and still counts 1); connect's handshake and a refused
// exchange count nothing.
TEST(Bootstrap, CountsEveryMessageExactly) {
  const UniqueId id = make_unique_id().value();
  constexpr int n = 3;
  std::vector<RankOutcome> res = fork_ranks(all_ranks(n), [&](int r, std::string* out) {
    Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, r, n, Deadline::after_ms(20000));
    if (!b.ok()) return *out = b.status().to_string(), 2;
    Bootstrap& boot = **b;
    auto expect = [&](uint64_t calls, const char* when) {
      const uint64_t want = calls * (n - 1);
      if (boot.messages_sent() == want && boot.messages_received() == want) return true;
      *out = std::string(when) + ": sent " + std::to_string(boot.messages_sent()) + " received " +
             std::to_string(boot.messages_received()) + ", want " + std::to_string(want) + " each";
      return false;
    };
    if (!expect(0, "after connect")) return 3;
    if (!boot.exchange("small", "r" + std::to_string(r), {}, Deadline::after_ms(20000)).ok()) return 4;
    if (!expect(1, "after one exchange")) return 5;
    const std::string big(size_t(3) << 20, char('a' + r));
    Result<std::vector<Bootstrap::Message>> all = boot.exchange("big", big, {}, Deadline::after_ms(20000));
    if (!all.ok()) return *out = all.status().to_string(), 6;
    for (int q = 0; q < n; ++q)
      if ((*all)[size_t(q)].data != std::string(size_t(3) << 20, char('a' + q))) return *out = "big from " + std::to_string(q), 7;
    if (!expect(2, "after a 3 MiB exchange")) return 8;
    for (int k = 0; k < 3; ++k)
      if (!boot.barrier("b" + std::to_string(k), Deadline::after_ms(20000)).ok()) return 9;
    if (!expect(5, "after three barriers")) return 10;
    // Refused before anything is sent (too many fds): nothing counted.
    std::vector<int> fds(300, 0);
    if (boot.exchange("refused", "x", fds, Deadline::after_ms(20000)).ok()) return *out = "300 fds accepted", 11;
    if (!expect(5, "after a refused exchange")) return 12;
    if (!boot.barrier("end", Deadline::after_ms(20000)).ok()) return 13;
    if (!expect(6, "after the last barrier")) return 14;
    return 0;
  });
  expect_ranks_ok(res);
}

// Many descriptors in one exchange (a PyTorch tensor of expandable segments
// is one region per allocation): 200 per rank arrive, each the right file;
// more than one SCM_RIGHTS message carries (253) is refused, naming the limit.
TEST(Bootstrap, ManyFileDescriptorsInOneExchange) {
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks(all_ranks(2), [&](int r, std::string* out) {
    Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, r, 2, Deadline::after_ms(20000));
    if (!b.ok()) return *out = b.status().to_string(), 2;
    std::vector<int> fds;
    for (int k = 0; k < 254; ++k) {
      const int fd = memfd_create("t", MFD_CLOEXEC);
      const uint32_t tag = uint32_t(r) * 1000 + uint32_t(k);
      if (fd < 0 || write(fd, &tag, sizeof tag) != ssize_t(sizeof tag)) return *out = "memfd", 3;
      fds.push_back(fd);
    }
    Result<std::vector<Bootstrap::Message>> over = (*b)->exchange("many", "x", fds, Deadline::after_ms(20000));
    if (over.ok() || over.status().to_string().find("253 fds") == std::string::npos)
      return *out = "254 fds: " + over.status().to_string(), 4;
    fds.resize(200);  // the rest stay open until exit
    Result<std::vector<Bootstrap::Message>> all = (*b)->exchange("many", "x", fds, Deadline::after_ms(20000));
    if (!all.ok()) return *out = all.status().to_string(), 5;
    const Bootstrap::Message& m = (*all)[size_t(1 - r)];
    if (m.fds.size() != 200) return *out = "got " + std::to_string(m.fds.size()) + " fds", 6;
    for (int k = 0; k < 200; ++k) {
      uint32_t tag = 0;
      if (pread(m.fds[size_t(k)], &tag, sizeof tag, 0) != ssize_t(sizeof tag) || tag != uint32_t(1 - r) * 1000 + uint32_t(k))
        return *out = "fd " + std::to_string(k) + " holds " + std::to_string(tag), 7;
      close(m.fds[size_t(k)]);
    }
    return 0;
  });
  expect_ranks_ok(res);
}

TEST(Bootstrap, DifferentCallsAreNamed) {
  const UniqueId id = make_unique_id().value();
  std::vector<RankOutcome> res = fork_ranks(all_ranks(2), [&](int r, std::string* out) {
    Result<std::unique_ptr<Bootstrap>> b = Bootstrap::connect(id, r, 2, Deadline::after_ms(20000));
    if (!b.ok()) return 2;
    Status st = (*b)->barrier(r == 0 ? "launch all_gather" : "plan", Deadline::after_ms(20000));
    *out = st.to_string();
    return st.ok() ? 0 : 1;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res[size_t(r)].exit_code, 1);
    EXPECT_NE(res[size_t(r)].out.find("same communicator calls in the same order"), std::string::npos) << res[size_t(r)].out;
  }
}

TEST(MultiProcessFaults, ARankThatNeverJoinsIsNamedByTheDeadline) {
  const UniqueId id = make_unique_id().value();
  const Layout l{"mi300x", false, 3};
  // Rank 1 never starts.
  std::vector<RankOutcome> res = fork_ranks({0, 2}, [&](int r, std::string* out) {
    Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(device_options(l, r));
    if (!dev.ok()) return 2;
    Communicator::Options o = comm_options(l);
    o.join_timeout_ms = 1500;
    Result<std::unique_ptr<Communicator>> c = Communicator::create(**dev, r, 3, id, o);
    *out = c.status().to_string();
    return c.ok() ? 0 : 1;
  });
  for (const RankOutcome& o : res) {
    EXPECT_EQ(o.exit_code, 1) << o.out;
    EXPECT_NE(o.out.find("timeout"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("rank(s) 1 did not join"), std::string::npos) << o.out;
    EXPECT_LT(o.seconds, 15.0);
  }
}

TEST(MultiProcessFaults, ARankKilledInMidLaunchIsNamedByTheOthers) {
  const UniqueId id = make_unique_id().value();
  const Layout l{"mi300x", false, 3};
  std::vector<RankOutcome> res = fork_ranks(all_ranks(3), [&](int r, std::string* out) {
    Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(device_options(l, r));
    if (!dev.ok()) return 2;
    // Rank 2's engines crawl, so that it dies with its copies in flight.
    if (r == 2)
      for (const EngineInfo& e : (*dev)->topology().gpus[2].engines) {
        emu::Injection inj;
        inj.delay = std::chrono::milliseconds(20);
        (void)(*dev)->inject(2, e.id, inj);
      }
    Result<std::unique_ptr<Communicator>> c = Communicator::create(**dev, r, 3, id, comm_options(l));
    if (!c.ok()) return *out = c.status().to_string(), 3;
    UniqueBuffer send = std::move(UniqueBuffer::alloc(**dev, r, 8 << 20, MemKind::device)).value();
    UniqueBuffer recv = std::move(UniqueBuffer::alloc(**dev, r, 24 << 20, MemKind::device)).value();
    fill(send->as<uint8_t>(), send->size, 5 + r);
    CollectiveArgs a;
    a.op = CollOp::all_gather;
    a.bytes = 8 << 20;
    a.send = {send.get()};
    a.recv = {recv.get()};
    Result<std::unique_ptr<Plan>> p = (*c)->plan(a);
    if (!p.ok()) return *out = p.status().to_string(), 4;
    Status st = (*p)->launch(Deadline::after_ms(20000));
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      kill(getpid(), SIGKILL);  // kill -9 in mid-launch
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (st.ok()) st = (*p)->wait(Deadline::after_ms(20000));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    *out = st.to_string() + "\nwaited " + std::to_string(waited) + " s";
    return st.ok() ? 0 : 1;
  });
  EXPECT_EQ(res[2].exit_code, 128 + SIGKILL);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res[size_t(r)].exit_code, 1) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("rank 2 (pid"), std::string::npos) << res[size_t(r)].out;
    // "has left", or "have left" when the other survivor gave up first.
    EXPECT_NE(res[size_t(r)].out.find("left the communicator"), std::string::npos) << res[size_t(r)].out;
    EXPECT_LT(res[size_t(r)].seconds, 20.0);  // well within the 20 s deadline, not at it
  }
}

TEST(MultiProcessFaults, MismatchedArgumentsAreRefusedAtPlanTime) {
  const UniqueId id = make_unique_id().value();
  const Layout l{"mi300x", false, 2};
  std::vector<RankOutcome> res = fork_ranks(all_ranks(2), [&](int r, std::string* out) {
    Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(device_options(l, r));
    if (!dev.ok()) return 2;
    Result<std::unique_ptr<Communicator>> c = Communicator::create(**dev, r, 2, id, comm_options(l));
    if (!c.ok()) return 3;
    UniqueBuffer send = std::move(UniqueBuffer::alloc(**dev, r, 8192, MemKind::device)).value();
    UniqueBuffer recv = std::move(UniqueBuffer::alloc(**dev, r, 16384, MemKind::device)).value();
    CollectiveArgs a;
    a.op = CollOp::all_gather;
    a.bytes = r == 0 ? 4096 : 8192;  // rank 1 asks for more
    a.send = {send.get()};
    a.recv = {recv.get()};
    Result<std::unique_ptr<Plan>> p = (*c)->plan(a);
    *out = p.status().to_string() + "\n";
    // The communicator stays usable: a matching call works.
    a.bytes = 4096;
    Result<std::unique_ptr<Plan>> q = (*c)->plan(a);
    Status st = q.ok() ? (*q)->launch(Deadline::after_ms(20000)) : q.status();
    if (st.ok()) st = (*q)->wait(Deadline::after_ms(20000));
    *out += st.to_string();
    return p.ok() ? 0 : (st.ok() ? 1 : 5);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(res[size_t(r)].exit_code, 1) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("invalid argument"), std::string::npos) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("of 8192 bytes"), std::string::npos) << res[size_t(r)].out;
    EXPECT_NE(res[size_t(r)].out.find("every rank must plan the same collective"), std::string::npos)
        << res[size_t(r)].out;
  }
}

// Two ranks of layout `l`, each opening the emulator in its own slot (with
// settings(rank) where given) and creating a communicator with the layout's
// options as adjust(rank, ...) leaves them; each one's text is what create
// said.
std::vector<RankOutcome> create_two_ranks(const Layout& l, const std::function<std::string(int)>& settings,
                                          const std::function<void(int, Communicator::Options&)>& adjust = {}) {
  const UniqueId id = make_unique_id().value();
  return fork_ranks(all_ranks(2), [&](int r, std::string* out) {
    DeviceOptions o = device_options(l, r);
    if (settings) o.settings = settings(r);
    Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(o);
    if (!dev.ok()) {
      *out = dev.status().to_string();
      return 2;
    }
    Communicator::Options co = comm_options(l);
    if (adjust) adjust(r, co);
    Result<std::unique_ptr<Communicator>> c = Communicator::create(**dev, r, 2, id, co);
    *out = c.status().to_string();
    return c.ok() ? 0 : 1;
  });
}

// Issue #31, item 6: ranks isolated from each other's GPUs plan every rank on
// their own GPU (EveryCollectiveMatchesOneProcessByteForByte, the _isolated
// cases), which needs GPUs of one kind: a rank whose GPU differs is refused
// by every rank, naming both kinds and who does not see whom.
TEST(MultiProcessFaults, IsolatedRanksOnGpusOfDifferentKindsAreRefused) {
  for (const RankOutcome& o : create_two_ranks(Layout{"mi300x", false, 2}, [](int r) {
         return std::string(r == 0 ? "preset=mi300x" : "preset=small") + " memory_per_gpu=256M visible=" +
                std::to_string(r);  // 16 engines against 4
       })) {
    EXPECT_EQ(o.exit_code, 1) << o.out;
    EXPECT_NE(o.out.find("need GPUs of one kind"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("does not see rank"), std::string::npos) << o.out;
  }
}

// Two processes that see one GPU of the node each, the same one: their ranks
// share it, which needs Options::loopback like ranks on one GPU in one process.
TEST(MultiProcessFaults, RanksOnOneGpuWithoutLoopbackAreRefused) {
  for (const RankOutcome& o : create_two_ranks(Layout{"mi300x", false, 2},
                                               [](int) { return std::string("preset=mi300x memory_per_gpu=256M visible=3"); })) {
    EXPECT_EQ(o.exit_code, 1) << o.out;
    EXPECT_NE(o.out.find("set Options::loopback"), std::string::npos) << o.out;
  }
}

// Options that shape the plans (here striping, which sets how many arrivals
// a rank's buffers expect) must match: a rank that passes another value is
// refused by every rank when the communicator forms, naming the option,
// rather than left waiting for arrivals that never come.
TEST(MultiProcessFaults, RanksWithDifferentStripingAreRefused) {
  for (const RankOutcome& o : create_two_ranks(Layout{"h200", true, 2}, nullptr, [](int r, Communicator::Options& co) {
         co.stripe_min_bytes = r == 0 ? (1u << 20) : 0;
       })) {
    EXPECT_EQ(o.exit_code, 1) << o.out;
    EXPECT_NE(o.out.find("stripe_min_bytes=1048576"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("every rank must pass the same options"), std::string::npos) << o.out;
  }
}

// The same for the environment's list-form switches that change arrival
// counts (docs/collectives.md): a rank started with CONCCL_BATCH_ARRIVALS=0
// beside one without it is refused, naming the variable.
TEST(MultiProcessFaults, RanksWithDifferentListFormsAreRefused) {
  for (const RankOutcome& o : create_two_ranks(Layout{"h200", true, 2}, nullptr, [](int r, Communicator::Options&) {
         if (r == 1) setenv("CONCCL_BATCH_ARRIVALS", "0", 1);  // in rank 1's process only
       })) {
    EXPECT_EQ(o.exit_code, 1) << o.out;
    EXPECT_NE(o.out.find("CONCCL_BATCH_ARRIVALS=0"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("every rank must pass the same options"), std::string::npos) << o.out;
  }
}

// The pull all-gather has each rank's list read every rank's send buffer,
// which across processes no rank's "sent" signal would cover: a plan of it
// is refused on every rank with the variants that work there.
TEST(MultiProcessFaults, PullIsRefusedAcrossProcesses) {
  const UniqueId id = make_unique_id().value();
  const Layout l{"h200", true, 2};
  std::vector<RankOutcome> res = fork_ranks(all_ranks(2), [&](int r, std::string* out) {
    Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(device_options(l, r));
    if (!dev.ok()) return 2;
    Result<std::unique_ptr<Communicator>> c = Communicator::create(**dev, r, 2, id, comm_options(l));
    if (!c.ok()) return 2;
    Result<UniqueBuffer> send = filled(**dev, 0, 1024, 11 + r), recv = filled(**dev, 0, 2048, 21 + r);
    if (!send.ok() || !recv.ok()) return 2;
    CollectiveArgs a;
    a.op = CollOp::all_gather;
    a.variant = Variant::pull;
    a.bytes = 1024;
    a.send = {send->get()};
    a.recv = {recv->get()};
    Result<std::unique_ptr<Plan>> p = (*c)->plan(a);
    *out = p.status().to_string();
    if (p.ok() || p.status().code() != Code::invalid_argument) return 3;
    a.variant = Variant::automatic;  // the same call otherwise works
    Result<std::unique_ptr<Plan>> q = (*c)->plan(a);
    if (!q.ok()) {
      *out += " / auto: " + q.status().to_string();
      return 4;
    }
    return 1;
  });
  for (const RankOutcome& o : res) {
    EXPECT_EQ(o.exit_code, 1) << o.out;
    EXPECT_NE(o.out.find("use b2b or pcpy"), std::string::npos) << o.out;
  }
}

TEST(MultiProcessFaults, OneProcessSlotForTwoRanksIsRefused) {
  const UniqueId id = make_unique_id().value();
  const Layout l{"mi300x", false, 2};
  std::vector<RankOutcome> res = fork_ranks(all_ranks(2), [&](int r, std::string* out) {
    Result<std::unique_ptr<emu::EmuDevice>> dev = emu::create(device_options(l, 0));  // both slot 0
    if (!dev.ok()) return 2;
    Result<std::unique_ptr<Communicator>> c = Communicator::create(**dev, r, 2, id, comm_options(l));
    *out = c.status().to_string();
    return c.ok() ? 0 : 1;
  });
  for (const RankOutcome& o : res) {
    EXPECT_EQ(o.exit_code, 1) << o.out;
    EXPECT_NE(o.out.find("same DeviceOptions::process_slot"), std::string::npos) << o.out;
  }
}

}  // namespace
}  // namespace conccl::mptest
