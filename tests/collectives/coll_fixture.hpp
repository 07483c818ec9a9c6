// tests/collectives/coll_fixture.hpp - emulated nodes, guarded buffers and a
// byte-exact model for the collectives tests.
//
// Every buffer handed to a collective is the middle of a larger allocation
// whose guard bytes (before and after) are random too; the model snapshots
// every allocation before a launch, applies the collective's logical
// transfers to the snapshot, and afterwards compares every byte of every
// allocation (sources, destinations, guards) with it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "conccl/collectives.hpp"
#include "conccl/emu.hpp"
#include "backends/emu/emu_test_util.hpp"
#include "util/sanitizers.hpp"

namespace conccl::coltest {

using namespace conccl::test;

inline constexpr bool kTsan = util::kThreadSanitizer;

inline constexpr uint64_t kOverLimit = 0x400123;  // > 0x3FFF00, the 4.4.2 per-packet limit

// The kernel's recommended engine per (source OAM, destination OAM) on
// MI300X (rec_sdma_eng_map, kfd_topology.c), as the mi300x preset uses it.
inline constexpr int kMi300xRec[8][8] = {
    {-1, 14, 12, 2, 4, 8, 10, 6}, {14, -1, 2, 10, 8, 4, 6, 12}, {10, 2, -1, 12, 14, 6, 4, 8},
    {2, 12, 10, -1, 6, 14, 8, 4}, {4, 8, 14, 6, -1, 10, 12, 2}, {8, 4, 6, 14, 12, -1, 2, 10},
    {10, 6, 4, 8, 12, 2, -1, 14}, {6, 12, 8, 4, 2, 10, 14, -1}};

// The three layouts the data tests run on.
enum class Topo {
  mi300x8,  // mi300x preset, 8 ranks on GPUs 0..7
  small3,   // custom --gpus 3 --engines 4: 2 PCIe + 2 xGMI engines, shared by peers and local copies
  mapped3,  // mi300x preset, 3 ranks on GPUs {5, 1, 6}
  h200loop4,  // h200 preset (Hopper CE methods on GPFIFO channels), 4 loopback ranks on its one GPU
  h200x3,     // h200 preset with 3 GPUs (NVLink), one rank each
};
inline const char* topo_name(Topo t) {
  switch (t) {
    case Topo::mi300x8: return "mi300x8";
    case Topo::small3: return "small3";
    case Topo::mapped3: return "mapped3";
    case Topo::h200loop4: return "h200loop4";
    case Topo::h200x3: return "h200x3";
  }
  return "?";
}

struct Node {
  std::unique_ptr<emu::EmuDevice> dev;
  std::unique_ptr<Communicator> comm;  // destroyed before dev (declared after it)
};

inline Result<std::unique_ptr<emu::EmuDevice>> make_device(Topo t, std::string gen = "") {
  DeviceOptions o;
  if (t == Topo::small3)
    o.settings = "preset=small gpus=3 engines=4 memory_per_gpu=256M";
  else if (t == Topo::h200x3)
    o.settings = "preset=h200 gpus=3 memory_per_gpu=384M";
  else if (t == Topo::h200loop4)
    o.settings = "preset=h200 memory_per_gpu=384M";
  else
    o.settings = "preset=mi300x memory_per_gpu=384M";
  if (!gen.empty()) o.settings += " gen=" + gen;
  return emu::create(o);
}

inline std::vector<int> topo_gpus(Topo t) {
  switch (t) {
    case Topo::mi300x8: return {0, 1, 2, 3, 4, 5, 6, 7};
    case Topo::small3: return {0, 1, 2};
    case Topo::mapped3: return {5, 1, 6};
    case Topo::h200loop4: return {0, 0, 0, 0};
    case Topo::h200x3: return {0, 1, 2};
  }
  return {};
}

inline Status make_node(Topo t, Node* out, std::string gen = "") {
  Result<std::unique_ptr<emu::EmuDevice>> d = make_device(t, std::move(gen));
  if (!d.ok()) return d.status();
  out->dev = std::move(d).value();
  Communicator::Options co;
  co.loopback = t == Topo::h200loop4;
  Result<std::unique_ptr<Communicator>> c = Communicator::create(*out->dev, topo_gpus(t), co);
  if (!c.ok()) return c.status();
  out->comm = std::move(c).value();
  return Status();
}

// Allocations with random guard bytes around the part a collective sees.
class Mem {
 public:
  explicit Mem(Device& dev, uint64_t seed) : dev_(dev), rng_(seed) {}
  ~Mem() {
    for (const Alloc& a : allocs_) (void)dev_.free(a.full);
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;

  // `bytes` usable bytes on `gpu` (device memory) with guards on both sides;
  // the front guard has an odd length on every other allocation, so buffers
  // sit at assorted alignments. Contents (guards included) are random.
  Buffer alloc(int gpu, uint64_t bytes) {
    const size_t i = allocs_.size();
    const uint64_t front = (i % 2) ? 256 + 2 * (i % 29) + 1 : 512;
    const uint64_t back = 256 + 3 * (i % 7);
    Result<Buffer> b = dev_.alloc(gpu, front + bytes + back, MemKind::device);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (!b.ok()) return Buffer{};
    fill_random(b->host, b->size, rng_);
    allocs_.push_back({*b, front});
    return sub(*b, front, bytes);
  }
  // The part [off, off+bytes) of `b` as a Buffer of its own.
  static Buffer sub(const Buffer& b, uint64_t off, uint64_t bytes) {
    Buffer s = b;
    s.va = b.va + off;
    s.host = static_cast<uint8_t*>(b.host) + off;
    s.size = bytes;
    return s;
  }

  // New random contents everywhere (sources, destinations and guards).
  void refill() {
    for (const Alloc& a : allocs_) fill_random(a.full.host, a.full.size, rng_);
  }

  using Image = std::vector<std::vector<uint8_t>>;
  Image snapshot() const {
    Image img;
    snapshot(&img);
    return img;
  }
  // Into `img`, reusing its storage (large images cost page faults otherwise).
  void snapshot(Image* img) const {
    img->resize(allocs_.size());
    for (size_t i = 0; i < allocs_.size(); ++i) {
      const auto* p = static_cast<const uint8_t*>(allocs_[i].full.host);
      (*img)[i].assign(p, p + allocs_[i].full.size);
    }
  }
  // Pointer into an image for [va, va+len); null (and a test failure) if
  // the range is in no allocation.
  uint8_t* at(Image& img, uint64_t va, uint64_t len) const {
    for (size_t i = 0; i < allocs_.size(); ++i) {
      const Buffer& f = allocs_[i].full;
      if (va >= f.va && va + len <= f.va + f.size) return img[i].data() + (va - f.va);
    }
    ADD_FAILURE() << "model: " << hex(va) << "+" << len << " is in no allocation";
    return nullptr;
  }
  const uint8_t* at(const Image& img, uint64_t va, uint64_t len) const {
    return at(const_cast<Image&>(img), va, len);
  }
  // Every byte of every allocation equals the image.
  ::testing::AssertionResult matches(const Image& want) const {
    for (size_t i = 0; i < allocs_.size(); ++i) {
      const Buffer& f = allocs_[i].full;
      if (std::memcmp(f.host, want[i].data(), f.size) == 0) continue;
      const auto* g = static_cast<const uint8_t*>(f.host);
      size_t first = 0, diffs = 0;
      for (size_t k = 0; k < f.size; ++k)
        if (g[k] != want[i][k] && diffs++ == 0) first = k;
      const int64_t rel = static_cast<int64_t>(first) - static_cast<int64_t>(allocs_[i].front);
      return ::testing::AssertionFailure()
             << "allocation " << i << " (gpu " << f.gpu << ", " << f.size << " bytes): " << diffs
             << " bytes differ; first at " << rel << " from the buffer start"
             << (rel < 0 ? " (front guard)" : "") << ": got " << hex(g[first]) << ", want "
             << hex(want[i][first]);
    }
    return ::testing::AssertionSuccess();
  }
  size_t count() const { return allocs_.size(); }

 private:
  struct Alloc {
    Buffer full;
    uint64_t front;
  };
  Device& dev_;
  std::mt19937_64 rng_;
  std::vector<Alloc> allocs_;
};

// The logical transfers of a collective (dst va, src va, bytes), written from
// the header's size conventions independently of the library.
struct Xfer {
  uint64_t dst, src, len;
};
inline std::vector<Xfer> model_transfers(const CollectiveArgs& a, int n) {
  std::vector<Xfer> x;
  const uint64_t b = a.bytes;
  auto S = [&](int r) { return a.send[static_cast<size_t>(r)].va; };
  auto R = [&](int r) { return a.recv[static_cast<size_t>(r)].va; };
  switch (a.op) {
    case CollOp::p2p: x.push_back({R(a.peer), S(a.root), b}); break;
    case CollOp::broadcast:
      for (int r = 0; r < n; ++r) x.push_back({R(r), S(a.root), b});
      break;
    case CollOp::gather:
      for (int r = 0; r < n; ++r) x.push_back({R(a.root) + uint64_t(r) * b, S(r), b});
      break;
    case CollOp::scatter:
      for (int r = 0; r < n; ++r) x.push_back({R(r), S(a.root) + uint64_t(r) * b, b});
      break;
    case CollOp::all_gather:
      for (int s = 0; s < n; ++s)
        for (int d = 0; d < n; ++d) x.push_back({R(d) + uint64_t(s) * b, S(s), b});
      break;
    case CollOp::all_to_all: {
      const uint64_t step = a.send_stride ? a.send_stride : b;  // CollectiveArgs::send_stride
      for (int s = 0; s < n; ++s)
        for (int d = 0; d < n; ++d) x.push_back({R(d) + uint64_t(s) * b, S(s) + uint64_t(d) * step, b});
      break;
    }
  }
  return x;
}

// What memory must hold after a launch that starts from `before` (into
// `want`, reusing its storage). Sources are read from `before`, so in-place
// forms are modelled with the data as it was when the launch began.
inline void expected_after(const Mem& mem, const Mem::Image& before, const CollectiveArgs& a, int n,
                           Mem::Image* want) {
  want->resize(before.size());
  for (size_t i = 0; i < before.size(); ++i) (*want)[i].assign(before[i].begin(), before[i].end());
  for (const Xfer& x : model_transfers(a, n)) {
    const uint8_t* s = mem.at(before, x.src, x.len);
    uint8_t* d = mem.at(*want, x.dst, x.len);
    if (s && d) std::memcpy(d, s, x.len);
  }
}
inline Mem::Image expected_after(const Mem& mem, const Mem::Image& before, const CollectiveArgs& a, int n) {
  Mem::Image want;
  expected_after(mem, before, a, n, &want);
  return want;
}

enum class Form { separate, in_place };

// Buffers for `op` on every rank of `comm`: unused ones are left empty (the
// header: only the root's send for broadcast/scatter/p2p).
inline void make_buffers(Mem& mem, const Communicator& comm, CollectiveArgs& a, Form form) {
  const int n = comm.size();
  const uint64_t b = a.bytes, nb = b * uint64_t(n);
  a.send.assign(static_cast<size_t>(n), Buffer{});
  a.recv.assign(static_cast<size_t>(n), Buffer{});
  const bool in_place = form == Form::in_place;
  for (int r = 0; r < n; ++r) {
    const int g = comm.gpu(r);
    auto& S = a.send[static_cast<size_t>(r)];
    auto& R = a.recv[static_cast<size_t>(r)];
    switch (a.op) {
      case CollOp::p2p:
        if (r == a.root) S = mem.alloc(g, b);
        if (r == a.peer) R = mem.alloc(g, b);
        break;
      case CollOp::broadcast:
        R = mem.alloc(g, b);
        if (r == a.root) S = in_place ? R : mem.alloc(g, b);
        break;
      case CollOp::gather:
        if (r == a.root) R = mem.alloc(g, nb);
        S = in_place && r == a.root ? Mem::sub(R, uint64_t(r) * b, b) : mem.alloc(g, b);
        break;
      case CollOp::scatter:
        if (!(in_place && r == a.root)) R = mem.alloc(g, b);
        break;
      case CollOp::all_gather:
        R = mem.alloc(g, nb);
        S = in_place ? Mem::sub(R, uint64_t(r) * b, b) : mem.alloc(g, b);
        break;
      case CollOp::all_to_all:
        R = mem.alloc(g, nb);
        // A send_stride spreads the chunks: (n-1) strides and a chunk.
        S = in_place ? R : mem.alloc(g, a.send_stride ? uint64_t(n - 1) * a.send_stride + b : nb);
        break;
    }
  }
  if (a.op == CollOp::scatter) {
    // The root's send buffer holds every rank's chunk; in place, its own
    // chunk is its recv buffer.
    const int g = comm.gpu(a.root);
    if (!in_place) {
      a.send[static_cast<size_t>(a.root)] = mem.alloc(g, nb);
    } else {
      Buffer whole = mem.alloc(g, nb);
      a.send[static_cast<size_t>(a.root)] = whole;
      a.recv[static_cast<size_t>(a.root)] = Mem::sub(whole, uint64_t(a.root) * b, b);
    }
  }
}

// Plan::wait() and then until every list of the launch was consumed by its
// engine. wait() returns once the arrival signals' values are reached, but a
// list's last packet (the atomic on the signal's twin word, which
// Signal::signal_add issues after the value's) can still be queued then:
// destroying the plan at that point frees memory the engine is about to
// write (TSan reports it; see collectives_bugs_test.cpp,
// DISABLED_WaitCoversEveryPacketOfTheLaunch). The tests wait it out.
inline Status wait_done(Plan& plan, Deadline deadline = long_deadline()) {
  CONCCL_RETURN_IF_ERROR(plan.wait(deadline));
  for (const PlanList& l : plan.lists()) CONCCL_RETURN_IF_ERROR(l.queue->wait_done(deadline, l.span.end));
  return Status();
}

// Arguments of `op` on every rank of `comm`, over separate buffers made in
// `mem` (make_buffers; an all-to-all's send buffers spread by send_stride).
inline CollectiveArgs separate_args(Mem& mem, const Communicator& comm, CollOp op, Variant v, uint64_t bytes,
                                    int root = 0, uint64_t send_stride = 0) {
  CollectiveArgs a;
  a.op = op;
  a.variant = v;
  a.bytes = bytes;
  a.root = root;
  a.peer = (root + 1) % comm.size();
  a.send_stride = send_stride;
  make_buffers(mem, comm, a, Form::separate);
  return a;
}

// Launches `plan` `launches` times (new random data everywhere between
// launches) and checks every byte after each.
inline void launch_and_verify(Mem& mem, Plan& plan, int n, int launches) {
  Mem::Image before, want;
  for (int l = 0; l < launches; ++l) {
    SCOPED_TRACE("launch " + std::to_string(l));
    if (l) mem.refill();
    mem.snapshot(&before);
    expected_after(mem, before, plan.args(), n, &want);
    ASSERT_OK(plan.launch(long_deadline()));
    ASSERT_OK(wait_done(plan));
    EXPECT_FALSE(plan.running());
    for (int r = 0; r < n; ++r) EXPECT_GE(plan.arrival(r).value(), plan.arrivals_expected(r)) << "rank " << r;
    ASSERT_TRUE(mem.matches(want));
  }
}

inline std::string op_variant(CollOp op, Variant v) {
  return std::string(coll_op_name(op)) + "/" + variant_name(v);
}

}  // namespace conccl::coltest
