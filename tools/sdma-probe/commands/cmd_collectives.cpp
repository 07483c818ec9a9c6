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
#include "sweep/sweep_dtype.hpp"
#include "sweep/sweep_end.hpp"
#include "sweep/sweep_inplace.hpp"
#include "sweep/sweep_json.hpp"
#include "sweep/sweep_progress.hpp"
#include "sweep/sweep_signal.hpp"
#include "sweep/sweep_stats.hpp"
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

constexpr int kMaxRanks = 64;
constexpr int64_t kMaxIters = 1000000;  // --iters and --warmup
constexpr int64_t kMaxStepFactor = 1024;

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

int run_collective(const Args& args, Context& ctx) {
  const OpInfo& op = info_for(args.command());
  // `--json FILE` (the shared --json is a switch, so FILE arrives as the one
  // positional): rows go to FILE and the table still goes to stdout.
  conccl::Result<JsonTarget> target = json_target(args);
  if (!target.ok()) return usage_error(args, ctx, target.status().message());
  const std::optional<std::string> json_file = target->file;
  const bool json_stdout = target->to_stdout;
  conccl::Result<uint64_t> min = args.get_size("min", 1024);
  conccl::Result<uint64_t> max = args.get_size("max", 16ull << 20);
  conccl::Result<int64_t> iters = args.get_int_in_range("iters", 1, kMaxIters, 0);  // 0: by size
  conccl::Result<int64_t> warmup = args.get_int_in_range("warmup", 0, kMaxIters, 2);
  conccl::Result<int64_t> root = args.get_int_in_range("root", 0, kMaxRanks - 1, 0);
  // --peer is p2p's destination (default 1); the other ops have none.
  conccl::Result<int64_t> peer = args.get_int_in_range("peer", 0, kMaxRanks - 1, 1);
  conccl::Result<int64_t> ranks_flag = args.get_int_in_range("ranks", 1, kMaxRanks, 0);  // 0: one per GPU
  conccl::Result<int64_t> step = args.get_int_in_range("step-factor", 2, kMaxStepFactor, 2);
  for (auto* r : {&min, &max}) if (!r->ok()) return fail(args, ctx, r->status());
  for (auto* r : {&iters, &warmup, &root, &peer, &ranks_flag, &step})
    if (!r->ok()) return fail(args, ctx, r->status());
  const bool has_root = op.op != CollOp::all_gather && op.op != CollOp::all_to_all;
  const bool has_peer = op.op == CollOp::p2p;
  for (const auto& [flag, used] : {std::pair{"root", has_root}, std::pair{"peer", has_peer}})
    if (!used && args.has(flag))
      return usage_error(args, ctx, "--" + std::string(flag) + " does not apply to " + op.name + " (" +
                                        (std::string_view(flag) == "root" ? "broadcast, gather, scatter and p2p have a root"
                                                                          : "it is p2p's destination rank") +
                                        "): drop it");
  if (*min == 0 || *max < *min) return usage_error(args, ctx, "need 0 < --min <= --max");
  const std::string dtype_name = args.value("dtype").value_or("uint8");
  const DType* dtype = find_dtype(dtype_name);
  if (!dtype) return usage_error(args, ctx, "unknown --dtype '" + dtype_name + "': give one of " + dtype_names());
  conccl::Variant variant = conccl::Variant::automatic;
  if (std::optional<std::string> v = args.value("variant"); v && !conccl::parse_variant(*v, &variant))
    return usage_error(args, ctx, "unknown --variant '" + *v + "'");
  bool variant_ok = false;
  std::string names;
  for (conccl::Variant v : conccl::variants_for(op.op)) {
    variant_ok |= v == variant;
    names += (names.empty() ? "" : ", ") + std::string(conccl::variant_name(v));
  }
  if (!variant_ok) return usage_error(args, ctx, std::string(op.name) + " variants: " + names);
  // --procs N: one process per rank. This process is either the launcher or
  // one of the ranks it started (--rank, --unique-id).
  conccl::Result<int> procs = procs_of(args);
  if (!procs.ok()) return fail(args, ctx, procs.status());
  conccl::Result<std::optional<ProcRank>> proc = proc_rank_of(args);
  if (!proc.ok()) return usage_error(args, ctx, proc.status().message());
  if (*procs && args.has("ranks"))
    return usage_error(args, ctx, "--procs N runs N ranks, one process each: give --procs or --ranks, not both");
  // --procs times calls through windows unless --no-windows; one process
  // has no windows, and a window call has no trigger to prelaunch behind.
  if (args.has("no-windows") && !*procs)
    return usage_error(args, ctx, "--no-windows applies to --procs N (one process always times plans): drop it");
  if (*procs && args.has("prelaunch") && !args.has("no-windows"))
    return usage_error(args, ctx, "--prelaunch times plans from a trigger's release, and --procs N times calls "
                                  "through windows: add --no-windows to time prelaunched plans");
  // The ranks --root and --peer name exist, and p2p has two (once the rank
  // count is known: --procs, --ranks, or the GPUs of the device).
  auto check_ranks = [&](int n) -> int {
    const char* count_flag = *procs ? "--procs" : "--ranks";
    if (op.op == CollOp::p2p && n < 2)
      return usage_error(args, ctx, std::string("p2p needs two ranks: give ") + count_flag + " 2" +
                                        (*procs ? "" : " (loopback on one GPU)"));
    for (const auto& [flag, used, rank] :
         {std::tuple{"--root", has_root, *root}, std::tuple{"--peer", has_peer, *peer}})
      if (used && rank >= n)
        return usage_error(args, ctx, std::string(flag) + " " + std::to_string(rank) + " is out of range: give a rank 0.." +
                                          std::to_string(n - 1) + " (" + std::to_string(n) + " ranks)");
    if (op.op == CollOp::p2p && *root == *peer)
      return usage_error(args, ctx, "p2p from a rank to itself: give a different --peer");
    return -1;
  };
  if (*procs && !*proc) {
    if (const int rc = check_ranks(*procs); rc >= 0) return rc;
    // The JSON file is rank 0's to write: refuse one it cannot open before
    // any rank starts.
    if (json_file) {
      conccl::Result<JsonFile> jf = JsonFile::open(*json_file);
      if (!jf.ok()) return fail(args, ctx, jf.status());
    }
    return run_procs(args, ctx, *procs);
  }
  if (*proc)
    if (Status st = follow_launcher(); !st.ok()) return fail(args, ctx, st);
  const int me = *proc ? (*proc)->rank : -1;  // this process's rank; -1: all ranks here
  // --buffers cuda: CUDA VMM allocations (cuMemCreate) registered with the
  // device, as a framework's tensors would be, instead of the device's own.
  const std::string buffers = args.value("buffers").value_or("device");
  if (buffers != "device" && buffers != "cuda")
    return usage_error(args, ctx, "--buffers is device or cuda, not '" + buffers + "'");
  if (buffers == "cuda" && args.common().backend != Backend::nv)
    return usage_error(args, ctx, "--buffers cuda needs --backend nv (CUDA memory)");
  const bool printer = me <= 0;               // who prints the table and writes the files
  // --json FILE is opened before the sweep: a path that cannot be written is
  // refused now, not after minutes of sweeping.
  std::optional<JsonFile> json_out;
  if (json_file && printer) {
    conccl::Result<JsonFile> jf = JsonFile::open(*json_file);
    if (!jf.ok()) return fail(args, ctx, jf.status());
    json_out = std::move(jf).value();
  }

  // SIGINT/SIGTERM from here on: checked between iterations; the size being
  // timed is abandoned, the finished rows are written, exit 128 + signal. A
  // signal during the set-up (allocating, uploading) ends it with no rows.
  // A --procs rank ignores a second one (the terminal's Ctrl-C and the
  // launcher's forwarded one may both arrive): its launcher ends it.
  install_sweep_signals(me >= 0 ? SecondSignal::ignored : SecondSignal::kills);
  conccl::Result<std::unique_ptr<conccl::Device>> devr = open_device_from_args(args, me);
  if (!devr.ok()) return fail(args, ctx, devr.status());
  conccl::Device& dev = **devr;
  int gpus = dev.gpu_count();
  // Checked by open_device_from_args: 0 (absent) or 1..kMaxGpus.
  if (conccl::Result<int64_t> g = args.get_int_in_range("gpus", 1, kMaxGpus, 0); g.ok() && *g > 0)
    gpus = std::min(gpus, static_cast<int>(*g));
  const int n = *procs ? static_cast<int>(*procs) : *ranks_flag ? static_cast<int>(*ranks_flag) : std::min(gpus, kMaxRanks);
  if (const int rc = check_ranks(n); rc >= 0) return rc;
  std::vector<int> gpu_of;
  for (int r = 0; r < n; ++r) gpu_of.push_back(r % gpus);

  // Buffers for the largest size, reused by every row: only what the op uses.
  // Refused up front when they do not fit (on the emulator GPU memory is host
  // memory: a sweep too big for it died by the OOM killer).
  // Each rank's chunk: a whole number of --dtype elements, at least one.
  auto chunk_of = [&](uint64_t size) {
    const uint64_t c = op.size_is_total ? size / n : size;
    return std::max<uint64_t>(dtype->bytes, c / dtype->bytes * dtype->bytes);
  };
  const uint64_t max_chunk = chunk_of(*max);
  // --procs: calls through windows (Communicator::call, no message between
  // the ranks per call) unless --no-windows.
  const bool windows = me >= 0 && !args.has("no-windows");
  const MemBudget need =
      sweep_budget(op.op, static_cast<int>(*root), static_cast<int>(*peer), gpu_of, gpus, max_chunk, windows);
  if (Status st = check_budget(need, dev.topology(), args.common().backend == Backend::emu,
                               "lower --max (now " + format_size(*max) + ") or --ranks (now " + std::to_string(n) + ")",
                               mem_available());
      !st.ok())
    return fail(args, ctx, st.prefix(std::string(op.name) + " up to --max " + format_size(*max) + " on " +
                                     std::to_string(n) + " ranks"));

  conccl::Communicator::Options co;
  co.loopback = n > gpus;
  const std::string queues = args.value("queues").value_or("auto");
  using QS = conccl::Communicator::Options::QueueSharing;
  if (queues == "per-rank") co.queues = QS::per_rank;
  else if (queues == "per-engine") co.queues = QS::per_engine;
  else if (queues != "auto") return usage_error(args, ctx, "--queues is auto, per-rank or per-engine, not '" + queues + "'");
  if (me >= 0) {
    co.gpu = gpu_of[static_cast<size_t>(me)];
    co.join_timeout_ms = static_cast<int64_t>(args.common().timeout_ms);
  }
  conccl::Result<std::unique_ptr<conccl::Communicator>> comm =
      me >= 0 ? conccl::Communicator::create(dev, me, n, (*proc)->id, co) : conccl::Communicator::create(dev, gpu_of, co);
  if (!comm.ok()) return fail(args, ctx, comm.status());
  auto local = [&](int r) { return me < 0 || r == me; };

  // One stager per GPU moves the patterns in and the results out: device
  // memory need not be CPU-visible (NVIDIA HBM is not).
  const auto deadline_ms = static_cast<int64_t>(args.common().timeout_ms);
  auto deadline = [&] { return conccl::Deadline::after_ms(deadline_ms); };
  std::vector<std::unique_ptr<conccl::Stager>> stagers;
  for (int g = 0; g < gpus; ++g) {
    if (me >= 0 && g != gpu_of[static_cast<size_t>(me)]) {  // another process's GPU
      stagers.push_back(nullptr);
      continue;
    }
    conccl::Result<std::unique_ptr<conccl::Stager>> st = conccl::Stager::create(dev, g, staging_bytes(gpus));
    if (!st.ok()) return fail(args, ctx, st.status());
    stagers.push_back(std::move(st).value());
  }
  std::vector<conccl::Stager*> stager_of_rank;
  for (int r = 0; r < n; ++r) stager_of_rank.push_back(stagers[static_cast<size_t>(gpu_of[static_cast<size_t>(r)])].get());
  // Source data: each rank's pattern, a function of the byte offset, so the
  // one upload serves every size (a smaller chunk is a prefix, and all-to-all
  // chunk d sits at offset d * chunk of the same pattern).
  constexpr uint64_t kSeed = 0xC0CC1;

  conccl::CollectiveArgs base;
  base.op = op.op;
  base.variant = variant;
  base.root = static_cast<int>(*root);
  base.peer = static_cast<int>(*peer);
  base.prelaunch = args.has("prelaunch");
  base.send.assign(static_cast<size_t>(n), Buffer{});
  base.recv.assign(static_cast<size_t>(n), Buffer{});
  uint64_t total = 0;
  for (uint64_t g : need.gpu) total = add_sat(total, g);
  std::vector<conccl::nv::CudaAlloc> cuda_allocs;
  auto alloc_buffer = [&](int gpu, uint64_t bytes) -> conccl::Result<Buffer> {
    if (buffers == "device") return dev.alloc(gpu, bytes, conccl::MemKind::device);
    conccl::Result<int> ordinal = conccl::nv::cuda_ordinal(dev, gpu);
    if (!ordinal.ok()) return ordinal.status();
    conccl::Result<conccl::nv::CudaAlloc> ca = conccl::nv::cuda_alloc(bytes, *ordinal);
    if (!ca.ok()) return ca.status();
    cuda_allocs.push_back(*ca);
    return conccl::nv::register_cuda(dev, ca->ptr, bytes, gpu);
  };
  auto alloc_failed = [&](Status st) {
    return fail(args, ctx, st.prefix("allocating " + format_size(total) + " of buffers for " + std::to_string(n) +
                                     " ranks up to --max " + format_size(*max) + " (lower --max or --ranks)"));
  };
  // Windows: this rank allocates one buffer for its send and receive
  // buffers, registers it as a window once (every rank together), and every
  // call names its buffers at the same offsets of it as the other ranks do
  // (window_layout): no exchange per call.
  WindowLayout layout;
  Buffer window_mem{};
  conccl::Window window;
  if (windows) {
    layout = window_layout(op.op, base.root, base.peer, me, n, max_chunk);
    conccl::Result<Buffer> b = alloc_buffer(gpu_of[static_cast<size_t>(me)], layout.size);
    if (!b.ok()) return alloc_failed(b.status());
    window_mem = *b;
    conccl::Result<conccl::Window> reg = (*comm)->register_window(window_mem);
    if (!reg.ok()) {
      (void)(buffers == "cuda" ? conccl::nv::unregister_cuda(dev, window_mem) : dev.free(window_mem));
      return fail(args, ctx, reg.status().prefix("registering this rank's window"));
    }
    window = *reg;
    const RankBuffers rb = buffer_bytes(op.op, base.root, base.peer, me, n, max_chunk);
    if (rb.send) base.send[static_cast<size_t>(me)] = window.at(layout.send_off, alloc_bytes(rb.send));
    if (rb.recv) base.recv[static_cast<size_t>(me)] = window.at(layout.recv_off, alloc_bytes(rb.recv));
  }
  for (int r = 0; r < n && !windows; ++r) {
    if (!local(r)) continue;  // its own process allocates them
    const RankBuffers rb = buffer_bytes(op.op, base.root, base.peer, r, n, max_chunk);
    for (auto [bytes, out] : {std::pair{rb.send, &base.send[static_cast<size_t>(r)]}, std::pair{rb.recv, &base.recv[static_cast<size_t>(r)]}}) {
      if (!bytes) continue;
      conccl::Result<Buffer> b = alloc_buffer(gpu_of[static_cast<size_t>(r)], alloc_bytes(bytes));
      if (!b.ok()) return alloc_failed(b.status());
      *out = *b;
    }
  }
  for (int r = 0; r < n; ++r)
    if (const Buffer& b = base.send[static_cast<size_t>(r)]; b.va)
      if (Status st = upload_pattern(*stager_of_rank[static_cast<size_t>(r)], b, kSeed, r, deadline()); !st.ok())
        return fail(args, ctx, st.prefix("uploading rank " + std::to_string(r) + "'s data"));
  auto release = [&] {
    if (window.valid()) {
      (void)(*comm)->deregister_window(window);
      window = conccl::Window{};
    }
    if (window_mem.va) {  // the send and receive buffers are views of it
      (void)(buffers == "cuda" ? conccl::nv::unregister_cuda(dev, window_mem) : dev.free(window_mem));
      window_mem = Buffer{};
    } else {
      for (std::vector<Buffer>* v : {&base.send, &base.recv})
        for (Buffer& b : *v)
          if (b.va) (void)(buffers == "cuda" ? conccl::nv::unregister_cuda(dev, b) : dev.free(b));
    }
    for (conccl::nv::CudaAlloc& c : cuda_allocs) (void)conccl::nv::cuda_free(c);
    cuda_allocs.clear();
  };

  const std::vector<uint64_t> sizes = sweep_sizes(*min, *max, static_cast<uint64_t>(*step));
  const bool emulated = args.common().backend == Backend::emu;
  SweepSetup setup;
  setup.op = op.name;
  setup.backend = std::string(backend_name(args.common().backend));
  setup.emulated = emulated;
  setup.preset = args.common().preset;
  setup.ranks = n;
  setup.gpus = gpus;
  setup.loopback = co.loopback;
  setup.queues = queues;
  setup.engines_per_gpu = dev.topology().gpus.empty() ? 0 : static_cast<int>(dev.topology().gpus[0].engines.size());
  setup.variant = variant == conccl::Variant::automatic ? "auto" : std::string(conccl::variant_name(variant));
  setup.prelaunch = base.prelaunch;
  setup.procs = *procs;
  setup.windows = windows;
  setup.iters = *iters;
  setup.warmup = *warmup;
  setup.min = *min;
  setup.max = *max;
  setup.step_factor = static_cast<uint64_t>(*step);
  setup.root = base.root;
  setup.peer = base.peer;
  setup.has_root = has_root;
  setup.has_peer = has_peer;
  if (!json_stdout && printer) {
    print_banner(ctx.out, setup);
    print_header(ctx.out);
    std::fflush(ctx.out);
  }
  Progress progress(printer ? ctx.err : nullptr);
  std::vector<SweepRow> rows;
  bool all_ok = true;
  // The signal the sweep stops for. One process: the one it received. Ranks
  // in separate processes stop together, at the same launch: each tells the
  // others the signal it received (0: none) at the exchanges every rank makes
  // - one per warm-up launch, one before each timed launch, one at the end -
  // and all stop at the first where any rank has one. A rank that stopped on
  // its own would leave the others waiting for it in a launch until their
  // deadline (exit 3, no JSON).
  int agreed_signal = 0;
  auto stop_signal = [&] { return me < 0 ? sweep_signal() : agreed_signal; };
  // Exchanges `mine` with every rank, this rank's signal in front; returns
  // everyone's in rank order, signal removed, and records the first signal.
  auto exchange = [&](const std::string& what, const std::string& mine) -> conccl::Result<std::vector<std::string>> {
    const std::string sent = std::string(1, static_cast<char>(sweep_signal())) + mine;
    conccl::Result<std::vector<conccl::Bootstrap::Message>> all =
        (*comm)->bootstrap()->exchange(what, sent, {}, deadline());
    if (!all.ok()) return all.status();
    std::vector<std::string> out;
    for (const conccl::Bootstrap::Message& m : *all) {
      if (m.data.empty())
        return conccl::error(conccl::Code::internal, "a rank's '" + what + "' message is empty (please report)");
      if (m.data[0] && !agreed_signal) agreed_signal = static_cast<unsigned char>(m.data[0]);
      out.push_back(m.data.substr(1));
    }
    return out;
  };
  // One form (out of place or in place) of one size: poison the
  // destinations, put the in-place sources in place, warm up, time, verify.
  // The error is prefixed for the message; a signal leaves `times` short.
  struct Measured {
    TimeStats time;
    uint64_t wrong = 0;
    std::string variant;
    int engines = 0;
    double messages_per_call = -1;
  };
  // A call through the window: this rank's buffers alone, host-ordered
  // (stream null: it returns once this rank's data is in place). Where the
  // op gives this rank no buffer of a kind, a few bytes at that buffer's
  // offset name the root's place (the same offset on every rank), except a
  // broadcast in place, whose root sends from its receive buffer: there the
  // library takes the send to sit where the receive buffer does.
  auto window_call = [&](const conccl::CollectiveArgs& a, bool in_place) -> Status {
    conccl::CollectiveArgs mine = a;
    const Buffer& s = a.send[static_cast<size_t>(me)];
    const Buffer& r = a.recv[static_cast<size_t>(me)];
    mine.send = {s.va ? s : in_place && a.op == CollOp::broadcast ? Buffer{} : window.at(layout.send_off, 1)};
    mine.recv = {r.va ? r : window.at(layout.recv_off, 1)};
    return (*comm)->call(mine, nullptr);
  };
  // The ranks agree on signals (untimed) before every timed launch of a
  // plan, and before every kAgreeEvery-th call through windows, which run
  // back to back in between.
  constexpr uint64_t kAgreeEvery = 32;
  auto measure = [&](const conccl::CollectiveArgs& a, const std::vector<bool>& poison,
                     const std::vector<InPlaceSource>& sources, uint32_t poison_value, uint64_t n_iters,
                     Measured* m, bool in_place) -> Status {
    const bool through_windows = windows;
    const std::string at = "size " + std::to_string(op.size_is_total ? a.bytes * static_cast<uint64_t>(n) : a.bytes);
    for (int r = 0; r < n; ++r) {
      // The fill covers whole 4-byte words: an in-place scatter's receive
      // view inside a window may start or end inside one (the bytes around
      // it are the window's, unused).
      Buffer b = a.recv[static_cast<size_t>(r)];
      const uint64_t end = (b.va + b.size + 3) / 4 * 4;
      b.va = b.va / 4 * 4;
      b.size = end - b.va;
      if (b.va && poison[static_cast<size_t>(r)])
        CONCCL_RETURN_IF_ERROR(stager_of_rank[static_cast<size_t>(r)]->fill(b, poison_value, deadline()).prefix("poisoning the destinations"));
    }
    for (const InPlaceSource& src : sources)
      if (local(src.owner))
      CONCCL_RETURN_IF_ERROR(upload_pattern(*stager_of_rank[static_cast<size_t>(src.owner)], src.at, kSeed, src.src_rank,
                                            deadline(), src.src_off)
                                 .prefix("placing rank " + std::to_string(src.src_rank) + "'s data in place"));
    conccl::Result<std::unique_ptr<conccl::Plan>> plan =
        through_windows ? conccl::Result<std::unique_ptr<conccl::Plan>>(std::unique_ptr<conccl::Plan>()) : (*comm)->plan(a);
    if (!plan.ok()) return plan.status();
    // Warm-up: --warmup launches, and on real engines at least 100 ms of
    // them: copy engines of a GPU that idled (as it does while the previous
    // size was verified) run at about half rate for their first ~100 ms
    // (docs/perf/h200.md, "Cold GPU").
    const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(emulated ? 0 : 100);
    uint64_t warm = 0;
    auto more_warmup = [&]() -> conccl::Result<bool> {
      bool more = (warm < static_cast<uint64_t>(*warmup) || std::chrono::steady_clock::now() < warm_until) &&
                  !stop_signal();
      if (me < 0) return more;
      // Ranks in separate processes launch together: one more while any
      // rank wants one (each times its own 100 ms) and none has a signal.
      conccl::Result<std::vector<std::string>> all = exchange("warm-up", more ? "1" : "0");
      if (!all.ok()) return all.status();
      for (const std::string& m : *all) more |= m == "1";
      return more && !stop_signal();
    };
    while (true) {
      conccl::Result<bool> more = more_warmup();
      if (!more.ok()) return more.status().prefix("warm-up at " + at);
      if (!*more) break;
      const conccl::Deadline dl = deadline();
      Status st;
      if (through_windows) {
        st = window_call(a, in_place);
      } else {
        st = a.prelaunch ? (*plan)->prelaunch(dl) : (*plan)->launch(dl);
        if (st.ok() && a.prelaunch) st = (*plan)->release();
        if (st.ok()) st = (*plan)->wait(dl);
      }
      CONCCL_RETURN_IF_ERROR(st.prefix("warm-up at " + at));
      ++warm;
    }
    std::vector<double> times;
    double messages = 0;
    for (uint64_t it = 0; it < n_iters && !stop_signal(); ++it) {
      if (me >= 0 && (!through_windows || it % kAgreeEvery == 0)) {  // the ranks agree to launch (untimed)
        conccl::Result<std::vector<std::string>> go = exchange("launch", "");
        if (!go.ok()) return go.status().prefix("before a timed launch at " + at);
        if (stop_signal()) break;
      }
      const conccl::Deadline dl = deadline();
      Status st;
      std::chrono::steady_clock::time_point t0;
      const conccl::CommStats before = me >= 0 ? (*comm)->stats() : conccl::CommStats{};
      if (through_windows) {
        t0 = std::chrono::steady_clock::now();
        st = window_call(a, in_place);
      } else if (a.prelaunch) {  // (never with windows: refused up front)
        st = (*plan)->prelaunch(dl);  // queued behind the trigger: not timed
        t0 = std::chrono::steady_clock::now();
        if (st.ok()) st = (*plan)->release();
      } else {
        t0 = std::chrono::steady_clock::now();
        st = (*plan)->launch(dl);
      }
      if (st.ok() && !through_windows) st = (*plan)->wait(dl);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      CONCCL_RETURN_IF_ERROR(st.prefix(at));  // a launch may still run: the buffers go with the device
      times.push_back(us);
      if (me >= 0) {
        const conccl::CommStats after = (*comm)->stats();
        messages += static_cast<double>(after.bootstrap_messages_sent - before.bootstrap_messages_sent +
                                        after.bootstrap_messages_received - before.bootstrap_messages_received);
      }
    }
    if (stop_signal()) return Status();  // abandoned
    m->time = time_stats(times);
    if (me >= 0 && !times.empty()) m->messages_per_call = messages / static_cast<double>(times.size());
    conccl::Result<uint64_t> wrong = count_wrong(a, n, kSeed, stager_of_rank, deadline(), me);
    if (!wrong.ok()) return wrong.status().prefix("verifying " + at);
    m->wrong = *wrong;
    if (me >= 0) {
      // Every rank checked its own destinations: the row has the sum of
      // wrong bytes and the times of the slowest rank.
      struct Mine {
        uint64_t wrong;
        TimeStats time;
        double messages_per_call;
      } mine{*wrong, m->time, m->messages_per_call};
      conccl::Result<std::vector<std::string>> all =
          exchange("row", std::string(reinterpret_cast<const char*>(&mine), sizeof mine));
      if (!all.ok()) return all.status().prefix("collecting the ranks' results at " + at);
      m->wrong = 0;
      for (const std::string& msg : *all) {
        Mine t{};
        if (msg.size() == sizeof t) std::memcpy(&t, msg.data(), sizeof t);
        m->wrong += t.wrong;
        if (t.time.mean > m->time.mean) m->time = t.time;
        m->messages_per_call = std::max(m->messages_per_call, t.messages_per_call);
      }
    }
    if (through_windows) {  // the plan is the communicator's: the variant automatic picks
      m->variant = conccl::variant_name(a.variant != conccl::Variant::automatic
                                            ? a.variant
                                            : conccl::choose_variant(a.op, a.bytes, n, (*comm)->caps(), true));
      m->engines = 0;
    } else {
      m->variant = conccl::variant_name((*plan)->variant());
      m->engines = engines_used(**plan, gpu_of);
    }
    return Status();
  };

  for (size_t si = 0; si < sizes.size() && !stop_signal(); ++si) {
    // Sizes that round to the same whole elements per rank run once.
    if (si > 0 && chunk_of(sizes[si]) == chunk_of(sizes[si - 1])) continue;
    progress.show(si, sizes.size(), sizes[si]);
    conccl::CollectiveArgs a = base;
    a.bytes = chunk_of(sizes[si]);
    const uint64_t size = op.size_is_total ? a.bytes * static_cast<uint64_t>(n) : a.bytes;
    const uint64_t n_iters = *iters ? static_cast<uint64_t>(*iters) : std::clamp<uint64_t>((64ull << 20) / std::max<uint64_t>(size, 1), 3, 20);
    const uint32_t poison_value = 0xA5A5A5A5u ^ static_cast<uint32_t>(si);
    Measured oop;
    Status st = measure(a, std::vector<bool>(static_cast<size_t>(n), true), {}, poison_value, n_iters, &oop, false);
    std::optional<InPlace> ip = in_place_of(a, n);
    if (ip && windows && me != a.root) {
      // In place, the root's send (gather) or recv (scatter) is its chunk of
      // its own buffer, at root x chunk: the other ranks name theirs at that
      // offset of their windows too (offsets are the same on every rank).
      const uint64_t at = uint64_t(a.root) * a.bytes;
      const size_t mi = static_cast<size_t>(me);
      if (a.op == CollOp::gather) {
        ip->args.send[mi] = window.at(layout.recv_off + at, a.bytes);
        ip->sources.push_back({me, ip->args.send[mi], me, 0});
      } else if (a.op == CollOp::scatter) {
        ip->args.recv[mi] = window.at(layout.send_off + at, a.bytes);
      }
    }
    Measured inp;
    if (st.ok() && ip && !stop_signal())
      st = measure(ip->args, ip->poison, ip->sources, ~poison_value, n_iters, &inp, true);
    if (!st.ok()) {
      progress.clear();
      if (st.code() != conccl::Code::timeout) release();
      return fail(args, ctx, st);
    }
    if (stop_signal()) break;  // this size is abandoned
    SweepRow row;
    row.size = size;
    row.count = size / dtype->bytes;
    row.type = std::string(dtype->name);
    row.iters = n_iters;
    row.time = oop.time;
    row.algbw = static_cast<double>(size) / (row.time.mean * 1e-6) / 1e9;
    row.busbw = row.algbw * busbw_factor(op.op, n);
    row.wrong = oop.wrong;
    row.variant = oop.variant;
    row.engines = oop.engines;
    row.messages_per_call = oop.messages_per_call;
    row.ip_messages_per_call = inp.messages_per_call;
    if (ip) {
      row.in_place = true;
      row.ip_time = inp.time;
      row.ip_algbw = static_cast<double>(size) / (inp.time.mean * 1e-6) / 1e9;
      row.ip_busbw = row.ip_algbw * busbw_factor(op.op, n);
      row.ip_wrong = inp.wrong;
      row.ip_variant = inp.variant;
    }
    all_ok &= row.wrong == 0 && row.ip_wrong == 0;
    progress.clear();
    if (!json_stdout && printer) print_row(ctx.out, row);
    std::fflush(ctx.out);
    rows.push_back(row);
  }
  progress.clear();
  if (me >= 0) {
    // The last agreement: a signal after the last exchange of the loop
    // marks every rank's run interrupted, or none.
    conccl::Result<std::vector<std::string>> end = exchange("end", "");
    if (!end.ok()) {
      if (end.status().code() != conccl::Code::timeout) release();
      return fail(args, ctx, end.status().prefix("ending the sweep"));
    }
  }
  SweepEnd finish;
  finish.op = op.name;
  finish.plot_title = std::string("sdma-probe ") + op.name + ": " + std::to_string(n) + " ranks, " + std::string(backend_name(args.common().backend));
  finish.printer = printer;
  finish.json_stdout = json_stdout;
  finish.planned_sizes = sizes.size();
  finish.signal = stop_signal();
  finish.all_ok = all_ok;
  return finish_sweep(args, ctx, setup, rows, json_out, release, finish);
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
  f.push_back({.name = "procs", .value = "N",
               .help = "N ranks, one process each, 1..16 (started by this one; ranks on GPUs as --ranks places "
                       "them; SIGINT/SIGTERM reach every rank)"});
  f.push_back({.name = "rank", .value = "R", .help = "set by --procs for the ranks it starts"});
  f.push_back({.name = "unique-id", .value = "ID", .help = "set by --procs for the ranks it starts"});
  f.push_back({.name = "ranks", .value = "N",
               .help = "ranks, 1..64 (default: one per GPU); more ranks than GPUs places several on each (loopback)"});
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

#define CONCCL_COLLECTIVE_COMMAND(NAME, ORDER, SUMMARY)                                                  \
  const Registration reg_##ORDER({                                                                       \
      .name = NAME,                                                                                      \
      .summary = SUMMARY,                                                                                \
      .usage = "sdma-probe " NAME " [--backend B] [--preset P] [--gpus N] [--ranks N | --procs N]\n"     \
               "       [--min SIZE] [--max SIZE] [--step-factor F] [--dtype TYPE] [--variant NAME]\n"          \
               "       [--prelaunch] [--no-windows] [--json FILE]",                                          \
      .details = kDetails,                                                                               \
      .flags = collective_flags(),                                                                       \
      .run = run_collective,                                                                             \
      .order = ORDER,                                                                                    \
  });

CONCCL_COLLECTIVE_COMMAND("allgather", 50, "all-gather size sweep on DMA engines (pcpy, bcst, b2b)")
CONCCL_COLLECTIVE_COMMAND("alltoall", 51, "all-to-all size sweep on DMA engines (pcpy, b2b, swap)")
CONCCL_COLLECTIVE_COMMAND("broadcast", 52, "broadcast size sweep on DMA engines (fanout, bcst, chain)")
CONCCL_COLLECTIVE_COMMAND("gather", 53, "gather size sweep on DMA engines")
CONCCL_COLLECTIVE_COMMAND("scatter", 54, "scatter size sweep on DMA engines")
CONCCL_COLLECTIVE_COMMAND("p2p", 55, "peer-to-peer copy size sweep (single engine or striped)")

}  // namespace
}  // namespace probe
