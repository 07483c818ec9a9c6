// tools/sdma-probe/cmd_collectives.cpp - allgather, alltoall, broadcast,
// gather, scatter, p2p: size sweeps on DMA engines, every destination byte
// verified. --ranks N places N ranks on the device's GPUs (round robin);
// more ranks than GPUs is loopback mode (several ranks per GPU, each with its
// own buffers and queues), how one GPU runs every collective.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "cli.hpp"
#include "coll_memory.hpp"
#include "conccl/collectives.hpp"
#include "conccl/staging.hpp"
#include "device_flags.hpp"
#include "mem_budget.hpp"

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
Status upload_pattern(conccl::Stager& st, const Buffer& b, uint64_t seed, int rank, conccl::Deadline dl) {
  constexpr size_t kPiece = 32u << 20;
  std::vector<uint8_t> tmp(std::min<uint64_t>(kPiece, b.size));
  for (uint64_t off = 0; off < b.size; off += kPiece) {
    const size_t len = static_cast<size_t>(std::min<uint64_t>(kPiece, b.size - off));
    pattern(seed, rank, off, tmp.data(), len);
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
conccl::Result<uint64_t> count_wrong(const conccl::CollectiveArgs& a, int n, uint64_t seed,
                                     const std::vector<conccl::Stager*>& stager_of_rank, conccl::Deadline dl) {
  constexpr size_t kPiece = 64u << 20;
  std::vector<uint8_t> got;
  uint64_t wrong = 0;
  for (const Piece& p : pieces_of(a, n)) {
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

struct Row {
  uint64_t size;
  double time_us, algbw, busbw;
  uint64_t wrong;
  std::string variant;
};

void progress(Context& ctx, bool tty, size_t done, size_t total, uint64_t size) {
  if (!tty) return;
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  std::fprintf(ctx.err, "\r[%.*s%*s] %zu/%zu  %-10s", filled, "##############################", width - filled, "",
               done, total, format_size(size).c_str());
  if (done == total) std::fprintf(ctx.err, "\r%*s\r", width + 40, "");
  std::fflush(ctx.err);
}

int run_collective(const Args& args, Context& ctx) {
  const OpInfo& op = info_for(args.command());
  // `--json FILE` (the shared --json is a switch, so FILE arrives as the one
  // positional): rows go to FILE and the table still goes to stdout.
  std::optional<std::string> json_file = args.value("json-file");
  bool json_stdout = args.common().json;
  if (!args.positionals().empty()) {
    if (!args.common().json || args.positionals().size() != 1 || json_file)
      return usage_error(args, ctx, "unexpected argument '" + args.positionals()[0] + "' (only --json FILE takes one)");
    json_file = args.positionals()[0];
    json_stdout = false;
  }
  conccl::Result<uint64_t> min = args.get_size("min", 1024);
  conccl::Result<uint64_t> max = args.get_size("max", 16ull << 20);
  conccl::Result<int64_t> iters = args.get_int_in_range("iters", 1, kMaxIters, 0);  // 0: by size
  conccl::Result<int64_t> warmup = args.get_int_in_range("warmup", 0, kMaxIters, 2);
  conccl::Result<int64_t> root = args.get_int_in_range("root", 0, kMaxRanks - 1, 0);
  conccl::Result<int64_t> peer = args.get_int_in_range("peer", 0, kMaxRanks - 1, 1);
  conccl::Result<int64_t> ranks_flag = args.get_int_in_range("ranks", 1, kMaxRanks, 0);  // 0: one per GPU
  for (auto* r : {&min, &max}) if (!r->ok()) return fail(args, ctx, r->status());
  for (auto* r : {&iters, &warmup, &root, &peer, &ranks_flag})
    if (!r->ok()) return fail(args, ctx, r->status());
  if (*min == 0 || *max < *min) return usage_error(args, ctx, "need 0 < --min <= --max");
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

  conccl::Result<std::unique_ptr<conccl::Device>> devr = open_device_from_args(args);
  if (!devr.ok()) return fail(args, ctx, devr.status());
  conccl::Device& dev = **devr;
  int gpus = dev.gpu_count();
  // Checked by open_device_from_args: 0 (absent) or 1..kMaxGpus.
  if (conccl::Result<int64_t> g = args.get_int_in_range("gpus", 1, kMaxGpus, 0); g.ok() && *g > 0)
    gpus = std::min(gpus, static_cast<int>(*g));
  const int n = *ranks_flag ? static_cast<int>(*ranks_flag) : std::min(gpus, kMaxRanks);
  if (op.op == CollOp::p2p && n < 2)
    return usage_error(args, ctx, "p2p needs two ranks: give --ranks 2 (loopback on one GPU)");
  for (const auto& [flag, rank] : {std::pair{"--root", *root}, std::pair{"--peer", *peer}})
    if (rank >= n)
      return usage_error(args, ctx, std::string(flag) + " " + std::to_string(rank) + " is out of range: give a rank 0.." +
                                        std::to_string(n - 1) + " (" + std::to_string(n) + " ranks)");
  if (op.op == CollOp::p2p && *root == *peer)
    return usage_error(args, ctx, "p2p from a rank to itself: give a different --peer");
  std::vector<int> gpu_of;
  for (int r = 0; r < n; ++r) gpu_of.push_back(r % gpus);

  // Buffers for the largest size, reused by every row: only what the op uses.
  // Refused up front when they do not fit (on the emulator GPU memory is host
  // memory: a sweep too big for it died by the OOM killer).
  auto chunk_of = [&](uint64_t size) { return std::max<uint64_t>(1, op.size_is_total ? size / n : size); };
  const uint64_t max_chunk = chunk_of(*max);
  const MemBudget need = sweep_budget(op.op, static_cast<int>(*root), static_cast<int>(*peer), gpu_of, gpus, max_chunk);
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
  conccl::Result<std::unique_ptr<conccl::Communicator>> comm = conccl::Communicator::create(dev, gpu_of, co);
  if (!comm.ok()) return fail(args, ctx, comm.status());

  // One stager per GPU moves the patterns in and the results out: device
  // memory need not be CPU-visible (NVIDIA HBM is not).
  const auto deadline_ms = static_cast<int64_t>(args.common().timeout_ms);
  auto deadline = [&] { return conccl::Deadline::after_ms(deadline_ms); };
  std::vector<std::unique_ptr<conccl::Stager>> stagers;
  for (int g = 0; g < gpus; ++g) {
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
  for (int r = 0; r < n; ++r) {
    const RankBuffers rb = buffer_bytes(op.op, base.root, base.peer, r, n, max_chunk);
    for (auto [bytes, out] : {std::pair{rb.send, &base.send[static_cast<size_t>(r)]}, std::pair{rb.recv, &base.recv[static_cast<size_t>(r)]}}) {
      if (!bytes) continue;
      conccl::Result<Buffer> b = dev.alloc(gpu_of[static_cast<size_t>(r)], alloc_bytes(bytes), conccl::MemKind::device);
      if (!b.ok())
        return fail(args, ctx, b.status().prefix("allocating " + format_size(total) + " of buffers for " +
                                                  std::to_string(n) + " ranks up to --max " + format_size(*max) +
                                                  " (lower --max or --ranks)"));
      *out = *b;
    }
  }
  for (int r = 0; r < n; ++r)
    if (const Buffer& b = base.send[static_cast<size_t>(r)]; b.va)
      if (Status st = upload_pattern(*stager_of_rank[static_cast<size_t>(r)], b, kSeed, r, deadline()); !st.ok())
        return fail(args, ctx, st.prefix("uploading rank " + std::to_string(r) + "'s data"));
  auto release = [&] {
    for (Buffer& b : base.send)
      if (b.va) (void)dev.free(b);
    for (Buffer& b : base.recv)
      if (b.va) (void)dev.free(b);
  };

  std::vector<uint64_t> sizes;
  for (uint64_t s = *min; s <= *max; s *= 2) {
    sizes.push_back(s);
    if (s > (~uint64_t(0)) / 2) break;
  }
  const bool tty = isatty(fileno(ctx.err));
  std::vector<Row> rows;
  bool all_ok = true;
  if (!json_stdout) std::fprintf(ctx.out, "size,time_us,algbw_gbps,busbw_gbps,verified\n");
  for (size_t si = 0; si < sizes.size(); ++si) {
    progress(ctx, tty, si, sizes.size(), sizes[si]);
    conccl::CollectiveArgs a = base;
    a.bytes = chunk_of(sizes[si]);
    const uint64_t size = op.size_is_total ? a.bytes * static_cast<uint64_t>(n) : a.bytes;
    const uint64_t seed = kSeed;
    // Poisoned destinations for every size (by the engine: no host traffic).
    for (int r = 0; r < n; ++r) {
      const Buffer& b = a.recv[static_cast<size_t>(r)];
      Status st = b.va ? stager_of_rank[static_cast<size_t>(r)]->fill(b, 0xA5A5A5A5u ^ static_cast<uint32_t>(si), deadline())
                       : Status();
      if (!st.ok()) {
        release();
        return fail(args, ctx, st.prefix("poisoning the destinations"));
      }
    }
    conccl::Result<std::unique_ptr<conccl::Plan>> plan = (*comm)->plan(a);
    if (!plan.ok()) {
      release();
      return fail(args, ctx, plan.status());
    }
    const uint64_t n_iters = *iters ? static_cast<uint64_t>(*iters) : std::clamp<uint64_t>((64ull << 20) / std::max<uint64_t>(size, 1), 3, 20);
    double total_us = 0;
    // Warm-up: --warmup launches, and on real engines at least 100 ms of
    // them: copy engines of a GPU that idled (as it does while the previous
    // size was verified) run at about half rate for their first ~100 ms
    // (docs/perf/h200.md, "Cold GPU").
    const bool emulated = args.common().backend == Backend::emu;
    const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(emulated ? 0 : 100);
    uint64_t warm = 0;
    while (warm < static_cast<uint64_t>(*warmup) || std::chrono::steady_clock::now() < warm_until) {
      const conccl::Deadline dl = deadline();
      Status st = a.prelaunch ? (*plan)->prelaunch(dl) : (*plan)->launch(dl);
      if (st.ok() && a.prelaunch) st = (*plan)->release();
      if (st.ok()) st = (*plan)->wait(dl);
      if (!st.ok()) return fail(args, ctx, st.prefix("warm-up at size " + std::to_string(size)));
      ++warm;
    }
    for (uint64_t it = 0; it < n_iters; ++it) {
      const conccl::Deadline dl = deadline();
      Status st;
      std::chrono::steady_clock::time_point t0;
      if (a.prelaunch) {
        st = (*plan)->prelaunch(dl);  // queued behind the trigger: not timed
        t0 = std::chrono::steady_clock::now();
        if (st.ok()) st = (*plan)->release();
      } else {
        t0 = std::chrono::steady_clock::now();
        st = (*plan)->launch(dl);
      }
      if (st.ok()) st = (*plan)->wait(dl);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (!st.ok()) {
        if (tty) std::fprintf(ctx.err, "\n");
        // The launch may still be running: the buffers go with the device.
        return fail(args, ctx, st.prefix("size " + std::to_string(size)));
      }
      total_us += us;
    }
    Row row;
    row.size = size;
    row.time_us = total_us / static_cast<double>(n_iters);
    row.algbw = static_cast<double>(size) / (row.time_us * 1e-6) / 1e9;
    row.busbw = row.algbw * busbw_factor(op.op, n);
    conccl::Result<uint64_t> wrong = count_wrong(a, n, seed, stager_of_rank, deadline());
    if (!wrong.ok()) {
      release();
      return fail(args, ctx, wrong.status().prefix("verifying size " + std::to_string(size)));
    }
    row.wrong = *wrong;
    row.variant = conccl::variant_name((*plan)->variant());
    all_ok &= row.wrong == 0;
    if (!json_stdout)
      std::fprintf(ctx.out, "%" PRIu64 ",%.2f,%.3f,%.3f,%s\n", row.size, row.time_us, row.algbw, row.busbw,
                   row.wrong == 0 ? "true" : "false");
    std::fflush(ctx.out);
    rows.push_back(row);
  }
  progress(ctx, tty, sizes.size(), sizes.size(), 0);

  auto json_rows = [&](FILE* f) {
    std::fprintf(f, "{\"op\": \"%s\", \"backend\": \"%s\", \"ranks\": %d, \"gpus\": %d, \"loopback\": %s, "
                    "\"prelaunch\": %s, \"queues\": \"%s\", \"rows\": [",
                 op.name, std::string(backend_name(args.common().backend)).c_str(), n, gpus, co.loopback ? "true" : "false",
                 base.prelaunch ? "true" : "false", queues.c_str());
    for (size_t i = 0; i < rows.size(); ++i)
      std::fprintf(f,
                   "%s\n  {\"size\": %" PRIu64 ", \"time_us\": %s, \"algbw_gbps\": %s, \"busbw_gbps\": %s, "
                   "\"verified\": %s, \"wrong_bytes\": %" PRIu64 ", \"variant\": \"%s\"}",
                   i ? "," : "", rows[i].size, json_number(rows[i].time_us, 3).c_str(),
                   json_number(rows[i].algbw, 4).c_str(), json_number(rows[i].busbw, 4).c_str(),
                   rows[i].wrong == 0 ? "true" : "false", rows[i].wrong, rows[i].variant.c_str());
    std::fprintf(f, "\n]}\n");
  };
  if (json_stdout) json_rows(ctx.out);
  if (json_file) {
    FILE* f = std::fopen(json_file->c_str(), "w");
    if (!f) {
      release();
      return fail(args, ctx, conccl::error(conccl::Code::invalid_argument, "cannot write " + *json_file));
    }
    json_rows(f);
    std::fclose(f);
  }
  release();
  if (!all_ok) {
    std::fprintf(ctx.err, "sdma-probe %s: verification FAILED for at least one size\n", op.name);
    return to_int(ExitCode::verify_failed);
  }
  return to_int(ExitCode::ok);
}

std::vector<FlagSpec> collective_flags() {
  std::vector<FlagSpec> f = device_flag_specs();
  f.push_back({.name = "min", .value = "SIZE", .help = "smallest size (default 1K)"});
  f.push_back({.name = "max", .value = "SIZE", .help = "largest size (default 16M); sizes double"});
  f.push_back({.name = "variant", .value = "NAME", .help = "algorithm variant (default auto)"});
  f.push_back({.name = "prelaunch", .help = "queue each launch behind a trigger; time from its release"});
  f.push_back({.name = "queues", .value = "auto|per-rank|per-engine",
               .help = "loopback: the queues a GPU's ranks use on an engine (default auto)"});
  f.push_back({.name = "iters", .value = "N", .help = "timed iterations per size, 1..1000000 (default: by size, 3..20)"});
  f.push_back({.name = "warmup", .value = "N",
               .help = "untimed iterations per size, 0..1000000 (default 2; on real engines also at least 100 ms of them)"});
  f.push_back({.name = "root", .value = "R", .help = "root rank (broadcast, gather, scatter; p2p source)"});
  f.push_back({.name = "peer", .value = "R", .help = "p2p destination rank (default 1)"});
  f.push_back({.name = "json-file", .value = "FILE", .help = "also write the rows as JSON to FILE"});
  f.push_back({.name = "ranks", .value = "N",
               .help = "ranks, 1..64 (default: one per GPU); more ranks than GPUs places several on each (loopback)"});
  return f;
}

constexpr const char* kDetails =
    "Sweeps sizes from --min to --max (doubling), launching the compiled plan --warmup +\n"
    "--iters times per size, and prints one row per size:\n"
    "  size,time_us,algbw_gbps,busbw_gbps,verified\n"
    "Definitions (as in nccl-tests): size is the collective's size in bytes (allgather,\n"
    "alltoall, gather, scatter: ranks x per-rank chunk; broadcast, p2p: the message);\n"
    "time_us is the mean time of one launch until every destination has its data;\n"
    "algbw = size / time; busbw = algbw x (n-1)/n for allgather, alltoall, gather and\n"
    "scatter, algbw for broadcast and p2p (GB/s = 1e9 bytes/s). After timing, every byte of\n"
    "every destination is verified against the source data (verified true/false;\n"
    "exit 1 if any is false). A progress bar goes to stderr when it is a terminal.\n"
    "--json FILE (or --json-file FILE) writes the rows as JSON to FILE; --json alone prints\n"
    "them as JSON on stdout instead of the table:\n"
    "{\"op\", \"rows\": [{\"size\", \"time_us\", \"algbw_gbps\", \"busbw_gbps\", \"verified\"}]}.\n"
    "--gpus N: emulator: an N-GPU node; real backends: the first N GPUs.\n"
    "--ranks N: N ranks over those GPUs, round robin; more ranks than GPUs is loopback\n"
    "mode (several ranks per GPU, each with its own buffers and queues): with --backend nv\n"
    "and --ranks 4, four ranks on the one H200. --queues says which queues the ranks of a GPU\n"
    "use on an engine: per-rank (one each), per-engine (one shared; no chain/swap), or auto\n"
    "(the default: shared unless the variant's lists wait on each other). Source data is a per-rank pattern,\n"
    "destinations are poisoned before each size, and every destination byte is checked\n"
    "(through a DMA staging copy where device memory is not CPU-visible); the JSON rows\n"
    "carry wrong_bytes.\n"
    "Variants: docs/collectives.md.\n";

#define CONCCL_COLLECTIVE_COMMAND(NAME, ORDER, SUMMARY)                                                  \
  const Registration reg_##ORDER({                                                                       \
      .name = NAME,                                                                                      \
      .summary = SUMMARY,                                                                                \
      .usage = "sdma-probe " NAME " [--backend B] [--preset P] [--gpus N] [--ranks N] [--min SIZE]\n"    \
               "       [--max SIZE] [--variant NAME] [--prelaunch] [--json FILE]",                       \
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
