// tools/sdma-probe/cmd_collectives.cpp - allgather, alltoall, broadcast,
// gather, scatter, p2p: size sweeps on DMA engines, verified.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "cli.hpp"
#include "conccl/collectives.hpp"
#include "device_flags.hpp"

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

void random_bytes(uint8_t* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (uint64_t v = rng(); i < n; ++i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}

// Checks every byte every destination should hold.
bool verify(const conccl::CollectiveArgs& a, int n) {
  auto S = [&](int r) { return a.send[static_cast<size_t>(r)].as<const uint8_t>(); };
  auto R = [&](int r) { return a.recv[static_cast<size_t>(r)].as<const uint8_t>(); };
  const uint64_t b = a.bytes;
  for (int r = 0; r < n; ++r) {
    switch (a.op) {
      case CollOp::p2p:
        if (r == a.peer && std::memcmp(R(r), S(a.root), b)) return false;
        break;
      case CollOp::broadcast:
        if (std::memcmp(R(r), S(a.root), b)) return false;
        break;
      case CollOp::gather:
        if (r == a.root)
          for (int s = 0; s < n; ++s)
            if (std::memcmp(R(r) + s * b, S(s), b)) return false;
        break;
      case CollOp::scatter:
        if (std::memcmp(R(r), S(a.root) + r * b, b)) return false;
        break;
      case CollOp::all_gather:
        for (int s = 0; s < n; ++s)
          if (std::memcmp(R(r) + s * b, S(s), b)) return false;
        break;
      case CollOp::all_to_all:
        for (int s = 0; s < n; ++s)
          if (std::memcmp(R(r) + s * b, S(s) + r * b, b)) return false;
        break;
    }
  }
  return true;
}

struct Row {
  uint64_t size;
  double time_us, algbw, busbw;
  bool verified;
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
  conccl::Result<uint64_t> iters = args.get_uint("iters", 0);
  conccl::Result<uint64_t> warmup = args.get_uint("warmup", 2);
  conccl::Result<uint64_t> root = args.get_uint("root", 0);
  conccl::Result<uint64_t> peer = args.get_uint("peer", 1);
  for (auto* r : {&min, &max, &iters, &warmup, &root, &peer})
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
  int n = dev.gpu_count();
  if (conccl::Result<uint64_t> g = args.get_uint("gpus", 0); g.ok() && *g > 0) n = std::min<int>(n, static_cast<int>(*g));
  if (op.op == CollOp::p2p && n < 2 && *root == *peer) return usage_error(args, ctx, "p2p needs two ranks");
  std::vector<int> gpus;
  for (int i = 0; i < n; ++i) gpus.push_back(i);
  conccl::Result<std::unique_ptr<conccl::Communicator>> comm = conccl::Communicator::create(dev, gpus);
  if (!comm.ok()) return fail(args, ctx, comm.status());

  // Buffers for the largest size, reused by every row.
  auto chunk_of = [&](uint64_t size) { return std::max<uint64_t>(1, op.size_is_total ? size / n : size); };
  const uint64_t max_chunk = chunk_of(*max);
  const uint64_t buf_bytes = max_chunk * static_cast<uint64_t>(n);
  conccl::CollectiveArgs base;
  base.op = op.op;
  base.variant = variant;
  base.root = static_cast<int>(*root);
  base.peer = static_cast<int>(*peer);
  base.prelaunch = args.has("prelaunch");
  for (int r = 0; r < n; ++r) {
    conccl::Result<Buffer> s = dev.alloc(r, buf_bytes, conccl::MemKind::device);
    if (!s.ok()) return fail(args, ctx, s.status());
    conccl::Result<Buffer> d = dev.alloc(r, buf_bytes, conccl::MemKind::device);
    if (!d.ok()) return fail(args, ctx, d.status());
    if (!s->host || !d->host)
      return fail(args, ctx, conccl::error(conccl::Code::unavailable, "verification needs CPU-visible device memory"));
    random_bytes(s->as<uint8_t>(), buf_bytes, 1000 + static_cast<uint64_t>(r));
    base.send.push_back(*s);
    base.recv.push_back(*d);
  }

  std::vector<uint64_t> sizes;
  for (uint64_t s = *min; s <= *max; s *= 2) {
    sizes.push_back(s);
    if (s > (~uint64_t(0)) / 2) break;
  }
  const bool tty = isatty(fileno(ctx.err));
  const auto deadline_ms = static_cast<int64_t>(args.common().timeout_ms);
  std::vector<Row> rows;
  bool all_ok = true;
  if (!json_stdout) std::fprintf(ctx.out, "size,time_us,algbw_gbps,busbw_gbps,verified\n");
  for (size_t si = 0; si < sizes.size(); ++si) {
    progress(ctx, tty, si, sizes.size(), sizes[si]);
    conccl::CollectiveArgs a = base;
    a.bytes = chunk_of(sizes[si]);
    const uint64_t size = op.size_is_total ? a.bytes * static_cast<uint64_t>(n) : a.bytes;
    for (int r = 0; r < n; ++r) random_bytes(a.recv[static_cast<size_t>(r)].as<uint8_t>(), buf_bytes, 7 * si + r);
    conccl::Result<std::unique_ptr<conccl::Plan>> plan = (*comm)->plan(a);
    if (!plan.ok()) return fail(args, ctx, plan.status());
    const uint64_t n_iters = *iters ? *iters : std::clamp<uint64_t>((64ull << 20) / std::max<uint64_t>(size, 1), 3, 20);
    double total_us = 0;
    for (uint64_t it = 0; it < *warmup + n_iters; ++it) {
      const auto deadline = conccl::Deadline::after_ms(deadline_ms);
      Status st;
      std::chrono::steady_clock::time_point t0;
      if (a.prelaunch) {
        st = (*plan)->prelaunch(deadline);  // queued behind the trigger: not timed
        t0 = std::chrono::steady_clock::now();
        if (st.ok()) st = (*plan)->release();
      } else {
        t0 = std::chrono::steady_clock::now();
        st = (*plan)->launch(deadline);
      }
      if (st.ok()) st = (*plan)->wait(deadline);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (!st.ok()) {
        if (tty) std::fprintf(ctx.err, "\n");
        return fail(args, ctx, st.prefix("size " + std::to_string(size)));
      }
      if (it >= *warmup) total_us += us;
    }
    Row row;
    row.size = size;
    row.time_us = total_us / static_cast<double>(n_iters);
    row.algbw = static_cast<double>(size) / (row.time_us * 1e-6) / 1e9;
    row.busbw = row.algbw * busbw_factor(op.op, n);
    row.verified = verify(a, n);
    row.variant = conccl::variant_name((*plan)->variant());
    all_ok &= row.verified;
    if (!json_stdout)
      std::fprintf(ctx.out, "%" PRIu64 ",%.2f,%.3f,%.3f,%s\n", row.size, row.time_us, row.algbw, row.busbw,
                   row.verified ? "true" : "false");
    std::fflush(ctx.out);
    rows.push_back(row);
  }
  progress(ctx, tty, sizes.size(), sizes.size(), 0);

  auto json_rows = [&](FILE* f) {
    std::fprintf(f, "{\"op\": \"%s\", \"backend\": \"%s\", \"ranks\": %d, \"prelaunch\": %s, \"rows\": [", op.name,
                 std::string(backend_name(args.common().backend)).c_str(), n, base.prelaunch ? "true" : "false");
    for (size_t i = 0; i < rows.size(); ++i)
      std::fprintf(f,
                   "%s\n  {\"size\": %" PRIu64 ", \"time_us\": %.3f, \"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, "
                   "\"verified\": %s, \"variant\": \"%s\"}",
                   i ? "," : "", rows[i].size, rows[i].time_us, rows[i].algbw, rows[i].busbw,
                   rows[i].verified ? "true" : "false", rows[i].variant.c_str());
    std::fprintf(f, "\n]}\n");
  };
  if (json_stdout) json_rows(ctx.out);
  if (json_file) {
    FILE* f = std::fopen(json_file->c_str(), "w");
    if (!f) return fail(args, ctx, conccl::error(conccl::Code::invalid_argument, "cannot write " + *json_file));
    json_rows(f);
    std::fclose(f);
  }
  for (Buffer& b : base.send) (void)dev.free(b);
  for (Buffer& b : base.recv) (void)dev.free(b);
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
  f.push_back({.name = "iters", .value = "N", .help = "timed iterations per size (default: by size, 3..20)"});
  f.push_back({.name = "warmup", .value = "N", .help = "untimed iterations per size (default 2)"});
  f.push_back({.name = "root", .value = "R", .help = "root rank (broadcast, gather, scatter; p2p source)"});
  f.push_back({.name = "peer", .value = "R", .help = "p2p destination rank (default 1)"});
  f.push_back({.name = "json-file", .value = "FILE", .help = "also write the rows as JSON to FILE"});
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
    "every destination is verified against the random source data (verified true/false;\n"
    "exit 1 if any is false). A progress bar goes to stderr when it is a terminal.\n"
    "--json FILE (or --json-file FILE) writes the rows as JSON to FILE; --json alone prints\n"
    "them as JSON on stdout instead of the table:\n"
    "{\"op\", \"rows\": [{\"size\", \"time_us\", \"algbw_gbps\", \"busbw_gbps\", \"verified\"}]}.\n"
    "--gpus N: emulator: an N-GPU node; real backends: the first N GPUs.\n"
    "Variants: docs/collectives.md.\n";

#define CONCCL_COLLECTIVE_COMMAND(NAME, ORDER, SUMMARY)                                                  \
  const Registration reg_##ORDER({                                                                       \
      .name = NAME,                                                                                      \
      .summary = SUMMARY,                                                                                \
      .usage = "sdma-probe " NAME " [--backend B] [--preset P] [--gpus N] [--min SIZE] [--max SIZE]\n"   \
               "       [--variant NAME] [--prelaunch] [--json FILE]",                       \
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
