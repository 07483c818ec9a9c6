// tools/sdma-probe/cmd_collectives.cpp - allgather, alltoall, broadcast,
// gather, scatter, p2p: size sweeps on DMA engines, every destination byte
// verified. --ranks N places N ranks on the device's GPUs (round robin);
// more ranks than GPUs is loopback mode (several ranks per GPU, each with its
// own buffers and queues), how one GPU runs every collective.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <tuple>

#include "cli.hpp"
#include "coll_memory.hpp"
#include "conccl/collectives.hpp"
#include "conccl/nv.hpp"
#include "conccl/staging.hpp"
#include "device_flags.hpp"
#include "mem_budget.hpp"
#include "procs.hpp"
#include "sweep/sweep_command.hpp"
#include "sweep/sweep_device.hpp"
#include "sweep/sweep_dtype.hpp"
#include "sweep/sweep_flags.hpp"
#include "sweep/sweep_inplace.hpp"
#include "sweep/sweep_json.hpp"
#include "sweep/sweep_loop.hpp"
#include "sweep/sweep_measure.hpp"
#include "sweep/sweep_table.hpp"

namespace probe {
namespace {

using conccl::Buffer;
using conccl::CollOp;
using conccl::Status;

// nccl-tests conventions (github.com/NVIDIA/nccl-tests doc/PERFORMANCE.md):
// size is the collective's size; algbw = size / time; busbw = algbw * factor.
struct OpInfo {
  CollOp op;
  const char* name;
  bool size_is_total;  // size = ranks * chunk (else size = chunk)
  const char* busbw;   // factor, for --help
};
constexpr OpInfo kOps[] = {
    {CollOp::all_gather, "allgather", true, "(n-1)/n"}, {CollOp::all_to_all, "alltoall", true, "(n-1)/n"},
    {CollOp::broadcast, "broadcast", false, "1"},       {CollOp::gather, "gather", true, "(n-1)/n"},
    {CollOp::scatter, "scatter", true, "(n-1)/n"},      {CollOp::p2p, "p2p", false, "1"},
};

const OpInfo& info_for(std::string_view name) {
  for (const OpInfo& o : kOps)
    if (name == o.name) return o;
  return kOps[0];
}

double busbw_factor(CollOp op, int n) {
  switch (op) {
    case CollOp::broadcast:
    case CollOp::p2p: return 1.0;
    default: return n > 0 ? static_cast<double>(n - 1) / n : 1.0;
  }
}

// The data rank r sends: a pattern that is a function of (seed, rank, byte
// offset), so that every destination byte can be checked without keeping a
// host copy of every source (a 1 GiB-per-rank sweep of 8 ranks would need
// 8 GiB of host memory otherwise). splitmix64 of the 8-byte word index.
uint64_t pattern_word(uint64_t seed, int rank, uint64_t word) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(rank) * 0xD1B54A32D192ED03ull + word;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Bytes [off, off+n) of rank r's pattern into out.
void pattern(uint64_t seed, int rank, uint64_t off, uint8_t* out, size_t n) {
  size_t i = 0;
  for (; i < n && (off + i) % 8; ++i) {
    const uint64_t w = pattern_word(seed, rank, (off + i) / 8);
    out[i] = reinterpret_cast<const uint8_t*>(&w)[(off + i) % 8];
  }
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = pattern_word(seed, rank, (off + i) / 8);
    std::memcpy(out + i, &w, 8);
  }
  for (; i < n; ++i) {
    const uint64_t w = pattern_word(seed, rank, (off + i) / 8);
    out[i] = reinterpret_cast<const uint8_t*>(&w)[(off + i) % 8];
  }
}

// One logical transfer of a collective: recv[dst_rank] + dst_off gets
// rank src_rank's send bytes [src_off, src_off + len).
struct Piece {
  int dst_rank;
  uint64_t dst_off;
  int src_rank;
  uint64_t src_off, len;
};
std::vector<Piece> pieces_of(const conccl::CollectiveArgs& a, int n) {
  std::vector<Piece> out;
  const uint64_t b = a.bytes;
  switch (a.op) {
    case CollOp::p2p: out.push_back({a.peer, 0, a.root, 0, b}); break;
    case CollOp::broadcast:
      for (int r = 0; r < n; ++r) out.push_back({r, 0, a.root, 0, b});
      break;
    case CollOp::gather:
      for (int r = 0; r < n; ++r) out.push_back({a.root, uint64_t(r) * b, r, 0, b});
      break;
    case CollOp::scatter:
      for (int r = 0; r < n; ++r) out.push_back({r, 0, a.root, uint64_t(r) * b, b});
      break;
    case CollOp::all_gather:
      for (int d = 0; d < n; ++d)
        for (int s = 0; s < n; ++s) out.push_back({d, uint64_t(s) * b, s, 0, b});
      break;
    case CollOp::all_to_all:
      for (int d = 0; d < n; ++d)
        for (int s = 0; s < n; ++s) out.push_back({d, uint64_t(s) * b, s, uint64_t(d) * b, b});
      break;
  }
  return out;
}

// Writes rank r's pattern into a buffer through its GPU's stager, in pieces.
// Rank r's bytes from src_off on (0: the whole pattern's start).
Status upload_pattern(conccl::Stager& st, const Buffer& b, uint64_t seed, int rank, conccl::Deadline dl,
                      uint64_t src_off = 0) {
  constexpr size_t kPiece = 32u << 20;
  std::vector<uint8_t> tmp(std::min<uint64_t>(kPiece, b.size));
  for (uint64_t off = 0; off < b.size; off += kPiece) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(kPiece, b.size - off));
    pattern(seed, rank, src_off + off, tmp.data(), len);
    CONCCL_RETURN_IF_ERROR(st.upload(b, off, tmp.data(), len, dl));
  }
  return Status();
}

// Bytes of got[0, n) that differ from rank r's pattern at [off, off+n),
// counted on all cores (a 1 GiB-per-rank sweep checks tens of GiB).
uint64_t count_diff(const uint8_t* got, uint64_t seed, int rank, uint64_t off, size_t n) {
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  // Whole pages per thread, at least one: for n below the thread count,
  // n / threads rounded to 0 and no byte was checked at all.
  const size_t per = std::max<size_t>(4096, (n / threads + 4095) / 4096 * 4096);
  std::vector<uint64_t> wrong(threads, 0);
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads && per * t < n; ++t)
    ts.emplace_back([&, t] {
      const size_t b = per * t, e = std::min(n, b + per);
      std::vector<uint8_t> want(e - b);
      pattern(seed, rank, off + b, want.data(), e - b);
      if (std::memcmp(got + b, want.data(), e - b) == 0) return;
      for (size_t i = b; i < e; ++i) wrong[t] += got[i] != want[i - b];
    });
  for (auto& t : ts) t.join();
  uint64_t sum = 0;
  for (uint64_t w : wrong) sum += w;
  return sum;
}

// Counts the destination bytes that differ from the sources' patterns,
// downloading through the stagers (device memory need not be CPU-visible).
// Ranks in separate processes: only rank `only`'s destinations (-1: all).
conccl::Result<uint64_t> count_wrong(const conccl::CollectiveArgs& a, int n, uint64_t seed,
                                     const std::vector<conccl::Stager*>& stager_of_rank, conccl::Deadline dl,
                                     int only = -1) {
  constexpr size_t kPiece = 64u << 20;
  std::vector<uint8_t> got;
  uint64_t wrong = 0;
  for (const Piece& p : pieces_of(a, n)) {
    if (only >= 0 && p.dst_rank != only) continue;
    const Buffer& dst = a.recv[static_cast<size_t>(p.dst_rank)];
    conccl::Stager& st = *stager_of_rank[static_cast<size_t>(p.dst_rank)];
    for (uint64_t off = 0; off < p.len; off += kPiece) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(kPiece, p.len - off));
      got.resize(len);
      CONCCL_RETURN_IF_ERROR(st.download(got.data(), dst, p.dst_off + off, len, dl));
      wrong += count_diff(got.data(), seed, p.src_rank, p.src_off + off, len);
    }
  }
  return wrong;
}

// The distinct (GPU, engine) pairs a plan's lists run on.
int engines_used(const conccl::Plan& plan, const std::vector<int>& gpu_of) {
  std::vector<std::pair<int, int>> used;
  for (const conccl::PlanList& l : plan.lists()) {
    const std::pair<int, int> e{gpu_of[static_cast<size_t>(l.rank)], l.engine};
    if (std::find(used.begin(), used.end(), e) == used.end()) used.push_back(e);
  }
  return static_cast<int>(used.size());
}

// ---- the command -----------------------------------------------------------

// Source data: each rank's pattern, a function of the byte offset, so the
// one upload serves every size (a smaller chunk is a prefix, and all-to-all
// chunk d sits at offset d * chunk of the same pattern).
constexpr uint64_t kSeed = 0xC0CC1;

// The command line of one copy collective's sweep, checked.
struct CollFlags {
  const OpInfo* op = nullptr;
  SweepFlags sweep;
  int64_t peer = 1;  // p2p's destination
  bool has_root = false, has_peer = false;
  const DType* dtype = nullptr;
  conccl::Variant variant = conccl::Variant::automatic;
  SweepProcs procs;
  std::string buffers = "device";  // --buffers
};

// --root and --peer where the op has them, the sizes, --dtype, --variant.
Status check_op_flags(const Args& args, CollFlags* f) {
  const OpInfo& op = *f->op;
  f->has_root = op.op != CollOp::all_gather && op.op != CollOp::all_to_all;
  f->has_peer = op.op == CollOp::p2p;
  for (const auto& [flag, used] : {std::pair{"root", f->has_root}, std::pair{"peer", f->has_peer}})
    if (!used && args.has(flag))
      return usage_status("--" + std::string(flag) + " does not apply to " + op.name + " (" +
                          (std::string_view(flag) == "root" ? "broadcast, gather, scatter and p2p have a root"
                                                            : "it is p2p's destination rank") +
                          "): drop it");
  CONCCL_RETURN_IF_ERROR(check_sizes(f->sweep));
  const std::string dtype_name = args.value("dtype").value_or("uint8");
  f->dtype = find_dtype(dtype_name);
  if (!f->dtype) return usage_status("unknown --dtype '" + dtype_name + "': give one of " + dtype_names());
  if (std::optional<std::string> v = args.value("variant"); v && !conccl::parse_variant(*v, &f->variant))
    return usage_status("unknown --variant '" + *v + "'");
  bool variant_ok = false;
  std::string names;
  for (conccl::Variant v : conccl::variants_for(op.op)) {
    variant_ok |= v == f->variant;
    names += (names.empty() ? "" : ", ") + std::string(conccl::variant_name(v));
  }
  if (!variant_ok) return usage_status(std::string(op.name) + " variants: " + names);
  return Status();
}

// Everything the command line says, up to --procs (launcher or rank).
Status read_collective_flags(const Args& args, CollFlags* f) {
  f->op = &info_for(args.command());
  // --peer is p2p's destination (default 1); the other ops have none.
  auto read_peer = [&]() -> Status {
    conccl::Result<int64_t> peer = args.get_int_in_range("peer", 0, kMaxSweepRanks - 1, 1);
    if (!peer.ok()) return peer.status();
    f->peer = *peer;
    return Status();
  };
  conccl::Result<SweepFlags> sweep = read_sweep_flags(args, {}, read_peer);
  if (!sweep.ok()) return sweep.status();
  f->sweep = *sweep;
  CONCCL_RETURN_IF_ERROR(check_op_flags(args, f));
  // --procs times calls through windows unless --no-windows; one process
  // has no windows, and a window call has no trigger to prelaunch behind.
  conccl::Result<SweepProcs> procs = read_sweep_procs(args, "one process always times plans");
  if (!procs.ok()) return procs.status();
  f->procs = *procs;
  if (f->procs.procs && args.has("prelaunch") && !args.has("no-windows"))
    return usage_status("--prelaunch times plans from a trigger's release, and --procs N times calls "
                        "through windows: add --no-windows to time prelaunched plans");
  return Status();
}

// The ranks --root and --peer name exist, and p2p has two (once the rank
// count is known: --procs, --ranks, or the GPUs of the device).
Status check_ranks(const CollFlags& f, int n) {
  const CollOp op = f.op->op;
  const int64_t root = f.sweep.root, peer = f.peer;
  const char* count_flag = f.procs.procs ? "--procs" : "--ranks";
  if (op == CollOp::p2p && n < 2)
    return usage_status(std::string("p2p needs two ranks: give ") + count_flag + " 2" +
                        (f.procs.procs ? "" : " (loopback on one GPU)"));
  for (const auto& [flag, used, rank] :
       {std::tuple{"--root", f.has_root, root}, std::tuple{"--peer", f.has_peer, peer}})
    if (used && rank >= n)
      return usage_status(std::string(flag) + " " + std::to_string(rank) + " is out of range: give a rank 0.." +
                          std::to_string(n - 1) + " (" + std::to_string(n) + " ranks)");
  if (op == CollOp::p2p && root == peer) return usage_status("p2p from a rank to itself: give a different --peer");
  return Status();
}

// --buffers cuda: CUDA VMM allocations (cuMemCreate) registered with the
// device, as a framework's tensors would be, instead of the device's own.
Status read_buffers(const Args& args, std::string* buffers) {
  *buffers = args.value("buffers").value_or("device");
  if (*buffers != "device" && *buffers != "cuda")
    return usage_status("--buffers is device or cuda, not '" + *buffers + "'");
  if (*buffers == "cuda" && args.common().backend != Backend::nv)
    return usage_status("--buffers cuda needs --backend nv (CUDA memory)");
  return Status();
}

// One form (out of place or in place) of one size, as the row shows it.
struct FormMeasured : Measured {
  std::string variant;
  int engines = 0;
};

// One copy collective's sweep from the device on. The members are made in
// the order they are declared, and go in reverse.
// --procs: calls through windows (Communicator::call, no message between
// the ranks per call) unless --no-windows.
class CollectiveSweep final : public SizeSweep {
 public:
  CollectiveSweep(const Args& args, const CollFlags& f) : SizeSweep(args, f.sweep, f.procs), f_(f), op_(*f.op) {}

  // The device and its ranks, their communicator, stagers and buffers, and
  // the sources' data.
  Status set_up();

 private:
  Status open();
  Status connect();
  Status alloc_buffers();
  Status alloc_failed(Status st) const;
  Status alloc_window();
  Status upload_sources();
  conccl::Result<Buffer> alloc_buffer(int gpu, uint64_t bytes);
  void free_buffer(const Buffer& b);
  void release() override;
  SweepSetup sweep_setup() const override;
  uint64_t unit_of(uint64_t size) const override { return chunk_of(size); }
  std::string plot_name(const SweepSetup&) const override { return op_.name; }

  Status measure_size(size_t si, uint64_t asked, SweepRow* row) override;
  void in_place_in_window(InPlace* ip) const;
  Status measure(const conccl::CollectiveArgs& a, const std::vector<bool>& poison,
                 const std::vector<InPlaceSource>& sources, uint32_t poison_value, uint64_t n_iters,
                 FormMeasured* m, bool in_place);
  Status prepare(const conccl::CollectiveArgs& a, const std::vector<bool>& poison,
                 const std::vector<InPlaceSource>& sources, uint32_t poison_value);
  Status call_once(const conccl::CollectiveArgs& a, conccl::Plan* plan, bool in_place);
  Status timed_call(const conccl::CollectiveArgs& a, conccl::Plan* plan, bool in_place,
                    std::chrono::steady_clock::time_point* t0);
  Status window_call(const conccl::CollectiveArgs& a, bool in_place);
  Status verify(const conccl::CollectiveArgs& a, conccl::Plan* plan, const std::string& at, FormMeasured* m);

  // Each rank's chunk: a whole number of --dtype elements, at least one.
  uint64_t chunk_of(uint64_t size) const {
    const uint64_t c = op_.size_is_total ? size / static_cast<uint64_t>(d_.n) : size;
    return std::max<uint64_t>(f_.dtype->bytes, c / f_.dtype->bytes * f_.dtype->bytes);
  }
  uint64_t size_of(uint64_t chunk) const { return op_.size_is_total ? chunk * static_cast<uint64_t>(d_.n) : chunk; }
  conccl::Stager& stager_of(int r) const { return *stager_of_rank_[static_cast<size_t>(r)]; }

  const CollFlags& f_;
  const OpInfo& op_;
  uint64_t max_chunk_ = 0;
  MemBudget need_;
  std::string queues_;
  std::vector<conccl::Stager*> stager_of_rank_;
  conccl::CollectiveArgs base_;
  std::vector<conccl::nv::CudaAlloc> cuda_allocs_;
  // Windows: this rank allocates one buffer for its send and receive
  // buffers, registers it as a window once (every rank together), and every
  // call names its buffers at the same offsets of it as the other ranks do
  // (window_layout): no exchange per call.
  WindowLayout layout_;
  Buffer window_mem_{};
  conccl::Window window_;
};

Status CollectiveSweep::set_up() {
  CONCCL_RETURN_IF_ERROR(open());
  CONCCL_RETURN_IF_ERROR(connect());
  CONCCL_RETURN_IF_ERROR(alloc_buffers());
  return upload_sources();
}

// The device and the ranks on it, and whether the buffers for the largest
// size fit: they are reused by every row, only what the op uses, and refused
// up front when they do not fit (on the emulator GPU memory is host memory: a
// sweep too big for it died by the OOM killer).
Status CollectiveSweep::open() {
  CONCCL_RETURN_IF_ERROR(
      open_sweep_device(args_, f_.sweep, f_.procs, [this](int n) { return check_ranks(f_, n); }, &d_));
  const uint64_t max = f_.sweep.max;
  max_chunk_ = chunk_of(max);
  need_ = sweep_budget(op_.op, static_cast<int>(f_.sweep.root), static_cast<int>(f_.peer), d_.gpu_of, d_.gpus,
                       max_chunk_, windows_);
  return check_fits(need_, op_.name, "");
}

// The ranks' communicator, and one stager per GPU for the patterns in and
// the results out.
Status CollectiveSweep::connect() {
  conccl::Communicator::Options co;
  conccl::Result<conccl::Communicator::Options::QueueSharing> queues = read_queues(args_, &queues_);
  if (!queues.ok()) return queues.status();
  co.queues = *queues;
  conccl::Result<std::unique_ptr<conccl::Communicator>> comm = create_sweep_communicator(args_, d_, f_.procs, co);
  if (!comm.ok()) return comm.status();
  comm_ = std::move(comm).value();
  CONCCL_RETURN_IF_ERROR(make_stagers(d_, me_, &stagers_));
  for (int r = 0; r < d_.n; ++r)
    stager_of_rank_.push_back(stagers_[static_cast<size_t>(d_.gpu_of[static_cast<size_t>(r)])].get());
  return Status();
}

conccl::Result<Buffer> CollectiveSweep::alloc_buffer(int gpu, uint64_t bytes) {
  conccl::Device& dev = *d_.dev;
  if (f_.buffers == "device") return dev.alloc(gpu, bytes, conccl::MemKind::device);
  conccl::Result<int> ordinal = conccl::nv::cuda_ordinal(dev, gpu);
  if (!ordinal.ok()) return ordinal.status();
  conccl::Result<conccl::nv::CudaAlloc> ca = conccl::nv::cuda_alloc(bytes, *ordinal);
  if (!ca.ok()) return ca.status();
  cuda_allocs_.push_back(*ca);
  return conccl::nv::register_cuda(dev, ca->ptr, bytes, gpu);
}

void CollectiveSweep::free_buffer(const Buffer& b) {
  (void)(f_.buffers == "cuda" ? conccl::nv::unregister_cuda(*d_.dev, b) : d_.dev->free(b));
}

// Each rank's send and receive buffers for the largest size (in one window
// per rank through windows); this process's ranks' only.
Status CollectiveSweep::alloc_buffers() {
  const int n = d_.n;
  base_.op = op_.op;
  base_.variant = f_.variant;
  base_.root = static_cast<int>(f_.sweep.root);
  base_.peer = static_cast<int>(f_.peer);
  base_.prelaunch = args_.has("prelaunch");
  base_.send.assign(static_cast<size_t>(n), Buffer{});
  base_.recv.assign(static_cast<size_t>(n), Buffer{});
  if (windows_) return alloc_window();
  for (int r = 0; r < n; ++r) {
    if (!local(r)) continue;  // its own process allocates them
    const RankBuffers rb = buffer_bytes(op_.op, base_.root, base_.peer, r, n, max_chunk_);
    for (auto [bytes, out] : {std::pair{rb.send, &base_.send[static_cast<size_t>(r)]},
                              std::pair{rb.recv, &base_.recv[static_cast<size_t>(r)]}}) {
      if (!bytes) continue;
      conccl::Result<Buffer> b = alloc_buffer(d_.gpu_of[static_cast<size_t>(r)], alloc_bytes(bytes));
      if (!b.ok()) return alloc_failed(b.status());
      *out = *b;
    }
  }
  return Status();
}

Status CollectiveSweep::alloc_failed(Status st) const {
  uint64_t total = 0;
  for (uint64_t g : need_.gpu) total = add_sat(total, g);
  return st.prefix("allocating " + format_size(total) + " of buffers for " + std::to_string(d_.n) +
                   " ranks up to --max " + format_size(f_.sweep.max) + " (lower --max or --ranks)");
}

Status CollectiveSweep::alloc_window() {
  const size_t mi = static_cast<size_t>(me_);
  layout_ = window_layout(op_.op, base_.root, base_.peer, me_, d_.n, max_chunk_);
  conccl::Result<Buffer> b = alloc_buffer(d_.gpu_of[mi], layout_.size);
  if (!b.ok()) return alloc_failed(b.status());
  window_mem_ = *b;
  conccl::Result<conccl::Window> reg = comm_->register_window(window_mem_);
  if (!reg.ok()) {
    free_buffer(window_mem_);
    return reg.status().prefix("registering this rank's window");
  }
  window_ = *reg;
  const RankBuffers rb = buffer_bytes(op_.op, base_.root, base_.peer, me_, d_.n, max_chunk_);
  if (rb.send) base_.send[mi] = window_.at(layout_.send_off, alloc_bytes(rb.send));
  if (rb.recv) base_.recv[mi] = window_.at(layout_.recv_off, alloc_bytes(rb.recv));
  return Status();
}

Status CollectiveSweep::upload_sources() {
  for (int r = 0; r < d_.n; ++r)
    if (const Buffer& b = base_.send[static_cast<size_t>(r)]; b.va)
      if (Status st = upload_pattern(stager_of(r), b, kSeed, r, deadline()); !st.ok())
        return st.prefix("uploading rank " + std::to_string(r) + "'s data");
  return Status();
}

void CollectiveSweep::release() {
  if (window_.valid()) {
    (void)comm_->deregister_window(window_);
    window_ = conccl::Window{};
  }
  if (window_mem_.va) {  // the send and receive buffers are views of it
    free_buffer(window_mem_);
    window_mem_ = Buffer{};
  } else {
    for (std::vector<Buffer>* v : {&base_.send, &base_.recv})
      for (Buffer& b : *v)
        if (b.va) free_buffer(b);
  }
  for (conccl::nv::CudaAlloc& c : cuda_allocs_) (void)conccl::nv::cuda_free(c);
  cuda_allocs_.clear();
}

SweepSetup CollectiveSweep::sweep_setup() const {
  SweepSetup setup = common_setup(args_, op_.name, d_, f_.sweep, f_.procs, windows_, queues_);
  const conccl::Variant variant = f_.variant;
  setup.variant = variant == conccl::Variant::automatic ? "auto" : std::string(conccl::variant_name(variant));
  setup.prelaunch = base_.prelaunch;
  setup.peer = base_.peer;
  setup.has_root = f_.has_root;
  setup.has_peer = f_.has_peer;
  return setup;
}

Status CollectiveSweep::measure_size(size_t si, uint64_t asked, SweepRow* row) {
  const int n = d_.n;
  conccl::CollectiveArgs a = base_;
  a.bytes = chunk_of(asked);
  const uint64_t size = size_of(a.bytes);
  const uint64_t n_iters = iters_for(f_.sweep, size);
  const uint32_t poison_value = 0xA5A5A5A5u ^ static_cast<uint32_t>(si);
  FormMeasured oop;
  Status st = measure(a, std::vector<bool>(static_cast<size_t>(n), true), {}, poison_value, n_iters, &oop, false);
  std::optional<InPlace> ip = in_place_of(a, n);
  if (ip && windows_ && me_ != a.root) in_place_in_window(&*ip);
  FormMeasured inp;
  if (st.ok() && ip && !sync_->stop_signal())
    st = measure(ip->args, ip->poison, ip->sources, ~poison_value, n_iters, &inp, true);
  CONCCL_RETURN_IF_ERROR(st);
  row->size = size;
  row->count = size / f_.dtype->bytes;
  row->type = std::string(f_.dtype->name);
  row->iters = n_iters;
  row->time = oop.time;
  row->algbw = static_cast<double>(size) / (row->time.mean * 1e-6) / 1e9;
  row->busbw = row->algbw * busbw_factor(op_.op, n);
  row->wrong = oop.wrong;
  row->variant = oop.variant;
  row->engines = oop.engines;
  row->messages_per_call = oop.messages_per_call;
  row->ip_messages_per_call = inp.messages_per_call;
  if (ip) {
    row->in_place = true;
    row->ip_time = inp.time;
    row->ip_algbw = static_cast<double>(size) / (inp.time.mean * 1e-6) / 1e9;
    row->ip_busbw = row->ip_algbw * busbw_factor(op_.op, n);
    row->ip_wrong = inp.wrong;
    row->ip_variant = inp.variant;
  }
  return Status();
}

// In place, the root's send (gather) or recv (scatter) is its chunk of its
// own buffer, at root x chunk: the other ranks name theirs at that offset of
// their windows too (offsets are the same on every rank).
void CollectiveSweep::in_place_in_window(InPlace* ip) const {
  const conccl::CollectiveArgs& a = ip->args;
  const uint64_t at = uint64_t(a.root) * a.bytes;
  const size_t mi = static_cast<size_t>(me_);
  if (a.op == CollOp::gather) {
    ip->args.send[mi] = window_.at(layout_.recv_off + at, a.bytes);
    ip->sources.push_back({me_, ip->args.send[mi], me_, 0});
  } else if (a.op == CollOp::scatter) {
    ip->args.recv[mi] = window_.at(layout_.send_off + at, a.bytes);
  }
}

// One form (out of place or in place) of one size: poison the
// destinations, put the in-place sources in place, warm up, time, verify.
// The error is prefixed for the message; a signal leaves `m` unfinished.
Status CollectiveSweep::measure(const conccl::CollectiveArgs& a, const std::vector<bool>& poison,
                                const std::vector<InPlaceSource>& sources, uint32_t poison_value, uint64_t n_iters,
                                FormMeasured* m, bool in_place) {
  const std::string at = "size " + std::to_string(size_of(a.bytes));
  CONCCL_RETURN_IF_ERROR(prepare(a, poison, sources, poison_value));
  conccl::Result<std::unique_ptr<conccl::Plan>> plan =
      windows_ ? conccl::Result<std::unique_ptr<conccl::Plan>>(std::unique_ptr<conccl::Plan>()) : comm_->plan(a);
  if (!plan.ok()) return plan.status();
  conccl::Plan* p = plan->get();
  CONCCL_RETURN_IF_ERROR(
      warm_up(*sync_, f_.sweep.warmup, emulated_, at, [&] { return call_once(a, p, in_place); }));
  // The ranks agree on signals (untimed) before every timed launch of a
  // plan, and before every 32nd call through windows, which run back to
  // back in between.
  constexpr uint64_t kAgreeEvery = 32;
  CONCCL_RETURN_IF_ERROR(time_calls(*sync_, n_iters, windows_ ? kAgreeEvery : 1, "launch", at,
                                    [&](std::chrono::steady_clock::time_point* t0) {
                                      return timed_call(a, p, in_place, t0);
                                    },
                                    m));
  if (sync_->stop_signal()) return Status();  // abandoned
  return verify(a, p, at, m);
}

Status CollectiveSweep::prepare(const conccl::CollectiveArgs& a, const std::vector<bool>& poison,
                                const std::vector<InPlaceSource>& sources, uint32_t poison_value) {
  for (int r = 0; r < d_.n; ++r) {
    // The fill covers whole 4-byte words: an in-place scatter's receive
    // view inside a window may start or end inside one (the bytes around
    // it are the window's, unused).
    Buffer b = a.recv[static_cast<size_t>(r)];
    const uint64_t end = (b.va + b.size + 3) / 4 * 4;
    b.va = b.va / 4 * 4;
    b.size = end - b.va;
    if (b.va && poison[static_cast<size_t>(r)])
      CONCCL_RETURN_IF_ERROR(stager_of(r).fill(b, poison_value, deadline()).prefix("poisoning the destinations"));
  }
  for (const InPlaceSource& src : sources)
    if (local(src.owner))
      CONCCL_RETURN_IF_ERROR(upload_pattern(stager_of(src.owner), src.at, kSeed, src.src_rank, deadline(), src.src_off)
                                 .prefix("placing rank " + std::to_string(src.src_rank) + "'s data in place"));
  return Status();
}

// A warm-up call: through the window, or the plan launched (prelaunched and
// released) and waited for.
Status CollectiveSweep::call_once(const conccl::CollectiveArgs& a, conccl::Plan* plan, bool in_place) {
  const conccl::Deadline dl = deadline();
  if (windows_) return window_call(a, in_place);
  Status st = a.prelaunch ? plan->prelaunch(dl) : plan->launch(dl);
  if (st.ok() && a.prelaunch) st = plan->release();
  if (st.ok()) st = plan->wait(dl);
  return st;
}

// A timed call: its time runs until every destination has its data; a
// prelaunch (queued behind the trigger) is not timed, its release is.
Status CollectiveSweep::timed_call(const conccl::CollectiveArgs& a, conccl::Plan* plan, bool in_place,
                                   std::chrono::steady_clock::time_point* t0) {
  const conccl::Deadline dl = deadline();
  Status st;
  if (windows_) {
    *t0 = std::chrono::steady_clock::now();
    st = window_call(a, in_place);
  } else if (a.prelaunch) {  // (never with windows: refused up front)
    st = plan->prelaunch(dl);
    *t0 = std::chrono::steady_clock::now();
    if (st.ok()) st = plan->release();
  } else {
    *t0 = std::chrono::steady_clock::now();
    st = plan->launch(dl);
  }
  if (st.ok() && !windows_) st = plan->wait(dl);
  return st;
}

// A call through the window: this rank's buffers alone, host-ordered
// (stream null: it returns once this rank's data is in place). Where the
// op gives this rank no buffer of a kind, a few bytes at that buffer's
// offset name the root's place (the same offset on every rank), except a
// broadcast in place, whose root sends from its receive buffer: there the
// library takes the send to sit where the receive buffer does.
Status CollectiveSweep::window_call(const conccl::CollectiveArgs& a, bool in_place) {
  conccl::CollectiveArgs mine = a;
  const Buffer& s = a.send[static_cast<size_t>(me_)];
  const Buffer& r = a.recv[static_cast<size_t>(me_)];
  mine.send = {s.va ? s : in_place && a.op == CollOp::broadcast ? Buffer{} : window_.at(layout_.send_off, 1)};
  mine.recv = {r.va ? r : window_.at(layout_.recv_off, 1)};
  return comm_->call(mine, nullptr);
}

// Every destination byte this process holds checked (the ranks' counts
// summed), and the variant and engines the form ran on.
Status CollectiveSweep::verify(const conccl::CollectiveArgs& a, conccl::Plan* plan, const std::string& at,
                               FormMeasured* m) {
  conccl::Result<uint64_t> wrong = count_wrong(a, d_.n, kSeed, stager_of_rank_, deadline(), me_);
  if (!wrong.ok()) return wrong.status().prefix("verifying " + at);
  m->wrong = *wrong;
  CONCCL_RETURN_IF_ERROR(combine_ranks(*sync_, at, m));
  if (windows_) {  // the plan is the communicator's: the variant automatic picks
    m->variant = conccl::variant_name(a.variant != conccl::Variant::automatic
                                          ? a.variant
                                          : conccl::choose_variant(a.op, a.bytes, d_.n, comm_->caps(), true));
    m->engines = 0;
  } else {
    m->variant = conccl::variant_name(plan->variant());
    m->engines = engines_used(*plan, d_.gpu_of);
  }
  return Status();
}

int run_collective(const Args& args, Context& ctx) {
  CollFlags f;
  if (Status st = read_collective_flags(args, &f); !st.ok()) return fail(args, ctx, st);
  return run_sweep_command<CollectiveSweep>(
      args, ctx, f, [&f](int n) { return check_ranks(f, n); }, [&] { return read_buffers(args, &f.buffers); });
}

std::vector<FlagSpec> collective_flags() {
  std::vector<FlagSpec> f = device_flag_specs();
  f.push_back({.name = "min", .value = "SIZE", .help = "smallest size (default 1K)", .short_name = 'b'});
  f.push_back({.name = "max", .value = "SIZE", .help = "largest size (default 16M)", .short_name = 'e'});
  f.push_back({.name = "plot", .value = "FILE.png",
               .help = "also draw bus bandwidth against size per variant into FILE.png (needs gnuplot)"});
  f.push_back({.name = "dtype", .value = "TYPE",
               .help = "element type of the count column: uint8 (default), int8, int32, uint32, int64, uint64, half, "
                       "bfloat16, float, double; chunks are whole elements",
               .short_name = 'd'});
  f.push_back({.name = "step-factor", .value = "F",
               .help = "each size is F times the last, 2..1024 (default 2)", .short_name = 'f'});
  f.push_back({.name = "variant", .value = "NAME", .help = "algorithm variant (default auto)"});
  f.push_back({.name = "prelaunch", .help = "queue each launch behind a trigger; time from its release"});
  f.push_back({.name = "no-windows",
               .help = "--procs: time plans (plan, launch, wait: messages between the ranks every launch) instead "
                       "of calls through one window per rank (Communicator::call: none); to compare the two"});
  f.push_back({.name = "queues", .value = "auto|per-rank|per-engine",
               .help = "loopback: the queues a GPU's ranks use on an engine (default auto)"});
  f.push_back({.name = "iters", .value = "N", .help = "timed iterations per size, 1..1000000 (default: by size, 3..20)",
               .short_name = 'n'});
  f.push_back({.name = "warmup", .value = "N",
               .help = "untimed iterations per size, 0..1000000 (default 2; on real engines also at least 100 ms of them)",
               .short_name = 'w'});
  f.push_back({.name = "root", .value = "R", .help = "root rank (broadcast, gather, scatter; p2p source)", .short_name = 'r'});
  f.push_back({.name = "peer", .value = "R", .help = "p2p destination rank (default 1)"});
  f.push_back({.name = "json-file", .value = "FILE", .help = "also write the rows as JSON to FILE"});
  f.push_back({.name = "buffers", .value = "device|cuda",
               .help = "the ranks' buffers: the device's own (default), or CUDA VMM allocations registered with it (nv)"});
  f.push_back(check_flag_spec());
  add_rank_flags(f);
  return f;
}

constexpr const char* kDetails =
    "Sweeps sizes from --min to --max (each --step-factor times the last, default 2),\n"
    "launching the compiled plan --warmup + --iters times per size. The table is laid out\n"
    "like nccl-tests: a banner of '#' lines (op, ranks and GPUs, loopback, backend and\n"
    "whether it is emulated, preset, engines per GPU, --queues, variant, iterations,\n"
    "warm-up, sizes), a '#' header, then one row per size with whitespace-separated columns:\n"
    "  size count type variant eng iters time min max stddev algbw busbw #wrong\n"
    "  (out-of-place), then time algbw busbw #wrong in place: each rank's source inside its\n"
    "  own destination buffer (as nccl-tests; n/a for alltoall and p2p), verified again\n"
    "and a closing summary: '# Out of bounds values : N OK|FAILED' (N: wrong bytes over\n"
    "all rows, both forms) and '# Avg bus bandwidth    : X' (GB/s, the mean busbw of both).\n"
    "Definitions (as in nccl-tests): size is the collective's size in bytes (allgather,\n"
    "alltoall, gather, scatter: ranks x per-rank chunk; broadcast, p2p: the message);\n"
    "count is size in elements of type (--dtype, default uint8: DMA copies bytes, so the\n"
    "type only sets the element size, and each rank's chunk is rounded down to whole\n"
    "elements, at least one); variant is the one the plan chose (with\n"
    "--variant auto, per size); eng counts the (GPU, engine) pairs the plan runs on;\n"
    "time is the mean time of one launch until every destination has its data, with\n"
    "min, max and the standard deviation over the timed iterations (us);\n"
    "algbw = size / time; busbw = algbw x (n-1)/n for allgather, alltoall, gather and\n"
    "scatter, algbw for broadcast and p2p (GB/s = 1e9 bytes/s). After timing, every byte of\n"
    "every destination is verified against the source data: #wrong counts the bytes that\n"
    "differ (exit 1 if any does). A progress bar goes to stderr only when it is a terminal,\n"
    "erased before each row.\n"
    "SIGINT or SIGTERM: the size being timed is abandoned, the finished rows (table\n"
    "summary, JSON) are written, and the exit code is 130 (SIGINT) or 143 (SIGTERM).\n"
    "--json FILE (or --json-file FILE) writes the rows as JSON to FILE, opened before the\n"
    "sweep (exit 2 when it cannot be; a failed write exits 4); --json alone prints\n"
    "them as JSON on stdout instead of the table:\n"
    "{\"op\", \"backend\", \"emulated\", \"ranks\", \"gpus\", \"loopback\", \"prelaunch\", \"queues\",\n"
    " \"variant_asked\", \"iters\", \"warmup\", \"step_factor\", \"interrupted\" (null or \"SIGINT\"/\"SIGTERM\"),\n"
    " \"rows\": [{\"size\", \"time_us\", \"algbw_gbps\", \"busbw_gbps\", \"verified\", \"wrong_bytes\",\n"
    "           \"variant\", \"count\", \"type\", \"engines\", \"iters\", \"min_us\", \"max_us\", \"stddev_us\",\n"
    "           \"in_place\": null or {\"time_us\", \"algbw_gbps\", \"busbw_gbps\", \"wrong_bytes\", \"min_us\",\n"
    "                             \"max_us\", \"stddev_us\", \"variant\", \"bootstrap_messages_per_call\"},\n"
    "           \"bootstrap_messages_per_call\"}],\n"
    " \"windows\", \"bootstrap_messages_per_call\"} (messages per call: null without --procs)\n"
    "(iters 0: by size; a time or bandwidth that is not a finite number is null).\n"
    "--gpus N: emulator: an N-GPU node; real backends: the first N GPUs.\n"
    "--ranks N: N ranks over those GPUs, round robin; more ranks than GPUs is loopback\n"
    "mode (several ranks per GPU, each with its own buffers and queues): with --backend nv\n"
    "and --ranks 4, four ranks on the one H200. --queues says which queues the ranks of a GPU\n"
    "use on an engine: per-rank (one each), per-engine (one shared; no chain/swap), or auto\n"
    "(the default: shared unless the variant's lists wait on each other). Source data is a per-rank pattern,\n"
    "destinations are poisoned before each size, and every destination byte is checked\n"
    "(through a DMA staging copy where device memory is not CPU-visible).\n"
    "--procs N: one process per rank (rank 0 prints the table and writes the JSON; #wrong is\n"
    "the sum over the ranks, times the slowest rank's). Each rank allocates one buffer for\n"
    "its send and receive buffers, registers it as a window once, and every call is\n"
    "Communicator::call with its buffers at the same window offsets on every rank,\n"
    "host-ordered, back to back (the ranks agree on signals every 32 calls, untimed): no\n"
    "message between the ranks per call. The summary line '# Bootstrap msgs/call  : X'\n"
    "and the JSON's \"bootstrap_messages_per_call\" (per row, per in-place form, and over\n"
    "the run, with \"windows\") give the messages a rank sent and received inside the timed\n"
    "calls, per call (the most of any rank): 0 through windows. --no-windows times plans\n"
    "instead (plan, launch, wait: messages every launch), to compare the two.\n"
    "Variants: docs/collectives.md.\n";

#define CONCCL_COLLECTIVE_COMMAND(NAME, ORDER, SUMMARY)                                        \
  CONCCL_SWEEP_COMMAND(NAME, ORDER, SUMMARY,                                                     \
                       "       [--min SIZE] [--max SIZE] [--step-factor F] [--dtype TYPE] [--variant NAME]\n" \
                       "       [--prelaunch] [--no-windows] [--json FILE]",                                     \
                       kDetails, collective_flags(), run_collective)

CONCCL_COLLECTIVE_COMMAND("allgather", 50, "all-gather size sweep on DMA engines (pcpy, bcst, b2b)")
CONCCL_COLLECTIVE_COMMAND("alltoall", 51, "all-to-all size sweep on DMA engines (pcpy, b2b, swap)")
CONCCL_COLLECTIVE_COMMAND("broadcast", 52, "broadcast size sweep on DMA engines (fanout, bcst, chain)")
CONCCL_COLLECTIVE_COMMAND("gather", 53, "gather size sweep on DMA engines")
CONCCL_COLLECTIVE_COMMAND("scatter", 54, "scatter size sweep on DMA engines")
CONCCL_COLLECTIVE_COMMAND("p2p", 55, "peer-to-peer copy size sweep (single engine or striped)")

}  // namespace
}  // namespace probe
