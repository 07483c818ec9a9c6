// tools/sdma-probe/cmd_reductions.cpp - reducescatter, allreduce, reduce:
// size sweeps of Communicator::call_reduction (the engines move the data, one
// reduce step per rank adds it up), laid out like nccl-tests with its -d/--dtype
// and -o/--op, every result element compared with the host reduction
// (conccl::reduce_on_host) of the same inputs in rank order.
// --ranks N puts every rank in this process (loopback when there are more
// ranks than GPUs); --procs N runs one process per rank, with each rank's
// send and receive buffers in one window.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>

#include "cli.hpp"
#include "coll_memory.hpp"
#include "conccl/collectives.hpp"
#include "conccl/nv.hpp"
#include "conccl/reduce.hpp"
#include "conccl/staging.hpp"
#include "device_flags.hpp"
#include "mem_budget.hpp"
#include "procs.hpp"
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
using conccl::DataType;
using conccl::ReduceColl;
using conccl::ReduceOp;
using conccl::Status;

// nccl-tests conventions (doc/PERFORMANCE.md): algbw = size / time, busbw =
// algbw x factor. size is what one rank sends: reduce_scatter n x count, the
// others count (elements of the type).
struct RedInfo {
  ReduceColl coll;
  const char* name;
  const char* busbw;  // factor, for --help
};
constexpr RedInfo kReds[] = {
    {ReduceColl::reduce_scatter, "reducescatter", "(n-1)/n"},
    {ReduceColl::all_reduce, "allreduce", "2(n-1)/n"},
    {ReduceColl::reduce, "reduce", "1"},
};
const RedInfo& red_for(std::string_view name) {
  for (const RedInfo& r : kReds)
    if (name == r.name) return r;
  return kReds[0];
}

double busbw_factor(ReduceColl c, int n) {
  const double f = n > 0 ? static_cast<double>(n - 1) / n : 1.0;
  switch (c) {
    case ReduceColl::reduce_scatter: return f;
    case ReduceColl::all_reduce: return 2 * f;
    case ReduceColl::reduce: return 1.0;
  }
  return 1.0;
}

constexpr int kMaxRanks = 64;
constexpr int64_t kMaxIters = 1000000;
constexpr int64_t kMaxStepFactor = 1024;
// The types the reduce step adds (conccl/reduce.hpp), in nccl-tests' names.
constexpr DataType kReduceTypes[] = {DataType::f32, DataType::bf16, DataType::f16,
                                     DataType::i32, DataType::i64,  DataType::u8};
constexpr ReduceOp kReduceOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};
// All-reduce's choice (src/collectives/reduce_calls.cpp, kAllReduceTwoStepBytes):
// reduce-scatter + all-gather from this many bytes per rank, when the count
// divides among the ranks (the remainder in one shot); one shot below.
constexpr uint64_t kAllReduceTwoStepBytes = 256 << 10;

std::string type_names() {
  std::string s;
  for (DataType t : kReduceTypes) s += (s.empty() ? "" : ", ") + std::string(conccl::dtype_name(t));
  return s;
}
std::string op_names() {
  std::string s;
  for (ReduceOp o : kReduceOps) s += (s.empty() ? "" : ", ") + std::string(conccl::reduce_op_name(o));
  return s;
}

// ---- inputs ----------------------------------------------------------------
// Rank r's element i is a function of (seed, r, i), so that any result
// element can be checked without keeping every rank's inputs on the host (a
// 1 GiB all-reduce of 8 ranks has 8 GiB of them): splitmix64 of the index.
uint64_t mix(uint64_t seed, int rank, uint64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(rank) * 0xD1B54A32D192ED03ull + i;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// What the inputs are: integers uniformly random (uint8 odd: never zero);
// floats of either sign with magnitudes in [0.5, hi], never zero, with hi
// such that the product of n of them stays finite in the type (half: hi^n
// below half of 65504), at most 2.
struct Inputs {
  DataType t = DataType::f32;
  uint64_t seed = 0;
  float lo = 0.5f, span = 1.5f;
};
Inputs inputs_for(DataType t, int n, uint64_t seed) {
  Inputs in;
  in.t = t;
  in.seed = seed;
  const double largest = t == DataType::f16 ? 65504.0 : 3.0e38;
  const double hi = std::min(2.0, std::pow(largest / 2, 1.0 / std::max(n, 1)));
  in.span = static_cast<float>(hi) - in.lo;
  return in;
}

// Rank r's elements [first, first + count) into out.
void gen_elements(const Inputs& in, int rank, uint64_t first, uint64_t count, uint8_t* out) {
  const size_t es = conccl::dtype_size(in.t);
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t h = mix(in.seed, rank, first + i);
    uint8_t* p = out + i * es;
    auto real = [&] {
      const float m = in.lo + in.span * static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
      return (h & 1) ? -m : m;
    };
    switch (in.t) {
      case DataType::u8: *p = static_cast<uint8_t>(h | 1); break;
      case DataType::i32: {
        const uint32_t v = static_cast<uint32_t>(h);
        std::memcpy(p, &v, 4);
        break;
      }
      case DataType::i64: std::memcpy(p, &h, 8); break;
      case DataType::f32: {
        const float v = real();
        std::memcpy(p, &v, 4);
        break;
      }
      case DataType::bf16: {
        const uint16_t v = conccl::float_to_bf16(real());
        std::memcpy(p, &v, 2);
        break;
      }
      case DataType::f16: {
        const uint16_t v = conccl::float_to_f16(real());
        std::memcpy(p, &v, 2);
        break;
      }
    }
  }
}

// Writes rank r's elements [0, count) into b from its start, through the
// rank's GPU's stager, in pieces.
Status upload_inputs(conccl::Stager& st, const Buffer& b, const Inputs& in, int rank, uint64_t count,
                     conccl::Deadline dl) {
  const uint64_t es = conccl::dtype_size(in.t);
  const uint64_t piece = (32u << 20) / es;
  std::vector<uint8_t> tmp(static_cast<size_t>(std::min(piece, count) * es));
  for (uint64_t e0 = 0; e0 < count; e0 += piece) {
    const uint64_t c = std::min(piece, count - e0);
    gen_elements(in, rank, e0, c, tmp.data());
    CONCCL_RETURN_IF_ERROR(st.upload(b, static_cast<size_t>(e0 * es), tmp.data(), static_cast<size_t>(c * es), dl));
  }
  return Status();
}

// The elements of got[0, count) that differ, bit for bit, from the reduction
// of every rank's elements [src_first, src_first + count) in rank order
// (conccl::reduce_on_host: the reference every backend must match), counted
// on all cores.
conccl::Result<uint64_t> count_wrong(const uint8_t* got, uint64_t count, const Inputs& in, ReduceOp op, int n,
                                     uint64_t src_first) {
  const uint64_t es = conccl::dtype_size(in.t);
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  // Each thread's inputs for one step: about 4 MiB.
  const uint64_t step = std::max<uint64_t>(256, (4u << 20) / (static_cast<uint64_t>(n) * es));
  const uint64_t per = std::max<uint64_t>(step, (count + threads - 1) / threads);
  std::vector<uint64_t> wrong(threads, 0);
  std::vector<Status> errors(threads);
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads && per * t < count; ++t)
    ts.emplace_back([&, t] {
      const uint64_t b = per * t, e = std::min(count, b + per);
      std::vector<uint8_t> data(static_cast<size_t>(static_cast<uint64_t>(n) * std::min(step, e - b) * es));
      std::vector<uint8_t> want(static_cast<size_t>(std::min(step, e - b) * es));
      std::vector<const void*> ptrs(static_cast<size_t>(n));
      for (uint64_t s0 = b; s0 < e; s0 += step) {
        const uint64_t c = std::min(step, e - s0);
        for (int q = 0; q < n; ++q) {
          uint8_t* at = data.data() + static_cast<size_t>(static_cast<uint64_t>(q) * c * es);
          gen_elements(in, q, src_first + s0, c, at);
          ptrs[static_cast<size_t>(q)] = at;
        }
        conccl::ReduceStep rs;
        rs.dtype = in.t;
        rs.op = op;
        rs.count = c;
        rs.inputs = ptrs;
        rs.out = want.data();
        if (Status st = conccl::reduce_on_host(rs); !st.ok()) {
          errors[t] = st.prefix("the host reference");
          return;
        }
        const uint8_t* g = got + static_cast<size_t>(s0 * es);
        if (std::memcmp(g, want.data(), static_cast<size_t>(c * es)) == 0) continue;
        for (uint64_t i = 0; i < c; ++i)
          wrong[t] += std::memcmp(g + i * es, want.data() + i * es, static_cast<size_t>(es)) != 0;
      }
    });
  for (auto& t : ts) t.join();
  uint64_t sum = 0;
  for (unsigned t = 0; t < threads; ++t) {
    if (!errors[t].ok()) return errors[t];
    sum += wrong[t];
  }
  return sum;
}

// What call_reduction does for one call (the variant column): the
// algorithm and its rounds through the staging (Options::reduce_staging_bytes
// holds n slices of `per` elements):
//   reducescatter  a2a     an all-to-all into the staging and one reduce, per
//                          piece (pieces: a strided all-to-all each)
//   allreduce      rs+ag   reduce-scatter, then an all-gather in place
//                  oneshot every input gathered into every rank's staging
//   reduce         gather  a gather into the root's staging, one reduce
struct Algorithm {
  const char* name;
  uint64_t pieces;
};
Algorithm algorithm_of(ReduceColl c, uint64_t count, int n, uint64_t es, uint64_t staging) {
  const uint64_t per = std::max<uint64_t>(1, staging / (static_cast<uint64_t>(n) * es));
  auto pieces = [&](uint64_t total) { return (total + per - 1) / per; };
  switch (c) {
    case ReduceColl::reduce_scatter: {
      const uint64_t p = pieces(count);
      return {"a2a", p};
    }
    case ReduceColl::all_reduce: {
      const uint64_t chunk = count / static_cast<uint64_t>(n);
      if (chunk > 0 && count * es >= kAllReduceTwoStepBytes) {
        const uint64_t rest = count - chunk * static_cast<uint64_t>(n);
        return {"rs+ag", pieces(chunk) + (rest ? pieces(rest) : 0)};
      }
      return {"oneshot", pieces(count)};
    }
    case ReduceColl::reduce: return {"gather", pieces(count)};
  }
  return {"?", 0};
}

// ---- the command -----------------------------------------------------------

int run_reduction(const Args& args, Context& ctx) {
  const RedInfo& op = red_for(args.command());
  const ReduceColl coll = op.coll;
  conccl::Result<JsonTarget> target = json_target(args);
  if (!target.ok()) return usage_error(args, ctx, target.status().message());
  const std::optional<std::string> json_file = target->file;
  const bool json_stdout = target->to_stdout;
  conccl::Result<uint64_t> min = args.get_size("min", 1024);
  conccl::Result<uint64_t> max = args.get_size("max", 16ull << 20);
  conccl::Result<uint64_t> staging = args.get_size("staging", conccl::Communicator::Options{}.reduce_staging_bytes);
  for (auto* r : {&min, &max, &staging})
    if (!r->ok()) return fail(args, ctx, r->status());
  conccl::Result<int64_t> iters = args.get_int_in_range("iters", 1, kMaxIters, 0);  // 0: by size
  conccl::Result<int64_t> warmup = args.get_int_in_range("warmup", 0, kMaxIters, 2);
  conccl::Result<int64_t> root = args.get_int_in_range("root", 0, kMaxRanks - 1, 0);
  conccl::Result<int64_t> ranks_flag = args.get_int_in_range("ranks", 1, kMaxRanks, 0);  // 0: one per GPU
  conccl::Result<int64_t> step = args.get_int_in_range("step-factor", 2, kMaxStepFactor, 2);
  for (auto* r : {&iters, &warmup, &root, &ranks_flag, &step})
    if (!r->ok()) return fail(args, ctx, r->status());
  const bool has_root = coll == ReduceColl::reduce;
  if (!has_root && args.has("root"))
    return usage_error(args, ctx, std::string("--root does not apply to ") + op.name +
                                      " (only reduce has a root, the rank that gets the result): drop it");
  if (*min == 0 || *max < *min) return usage_error(args, ctx, "need 0 < --min <= --max");
  DataType dtype = DataType::f32;
  const std::string dtype_text = args.value("dtype").value_or("float");
  if (!conccl::parse_dtype(dtype_text, &dtype))
    return usage_error(args, ctx, "unknown -d/--dtype '" + dtype_text + "': give one of " + type_names() +
                                      " (the types the reduce step adds; short forms f32, bf16, f16, i32, i64, u8 "
                                      "work too)");
  ReduceOp redop = ReduceOp::sum;
  const std::string op_text = args.value("op").value_or("sum");
  if (!conccl::parse_reduce_op(op_text, &redop))
    return usage_error(args, ctx, "unknown -o/--op '" + op_text + "': give one of " + op_names());
  const uint64_t es = conccl::dtype_size(dtype);
  const std::string queues = args.value("queues").value_or("auto");
  using QS = conccl::Communicator::Options::QueueSharing;
  QS queue_sharing = QS::automatic;
  if (queues == "per-rank") queue_sharing = QS::per_rank;
  else if (queues == "per-engine") queue_sharing = QS::per_engine;
  else if (queues != "auto") return usage_error(args, ctx, "--queues is auto, per-rank or per-engine, not '" + queues + "'");

  conccl::Result<int> procs = procs_of(args);
  if (!procs.ok()) return fail(args, ctx, procs.status());
  conccl::Result<std::optional<ProcRank>> proc = proc_rank_of(args);
  if (!proc.ok()) return usage_error(args, ctx, proc.status().message());
  if (*procs && args.has("ranks"))
    return usage_error(args, ctx, "--procs N runs N ranks, one process each: give --procs or --ranks, not both");
  if (args.has("no-windows") && !*procs)
    return usage_error(args, ctx, "--no-windows applies to --procs N (one process has no windows): drop it");
  // Once the rank count is known: the root exists, and the staging holds an
  // element of every rank.
  auto check_ranks = [&](int n) -> int {
    const char* count_flag = *procs ? "--procs" : "--ranks";
    if (has_root && *root >= n)
      return usage_error(args, ctx, "--root " + std::to_string(*root) + " is out of range: give a rank 0.." +
                                        std::to_string(n - 1) + " (" + std::to_string(n) + " ranks; or raise " +
                                        count_flag + ")");
    if (*staging < static_cast<uint64_t>(n) * es)
      return usage_error(args, ctx, "--staging " + std::to_string(*staging) + " holds less than one " +
                                        conccl::dtype_name(dtype) + " per rank: give at least " +
                                        std::to_string(static_cast<uint64_t>(n) * es) + " (" + std::to_string(n) +
                                        " ranks x " + std::to_string(es) + " bytes)");
    return -1;
  };
  if (*procs && !*proc) {
    if (const int rc = check_ranks(*procs); rc >= 0) return rc;
    if (json_file) {
      conccl::Result<JsonFile> jf = JsonFile::open(*json_file);
      if (!jf.ok()) return fail(args, ctx, jf.status());
    }
    return run_procs(args, ctx, *procs);
  }
  if (*proc)
    if (Status st = follow_launcher(); !st.ok()) return fail(args, ctx, st);
  const int me = *proc ? (*proc)->rank : -1;  // this process's rank; -1: all ranks here
  const bool printer = me <= 0;
  std::optional<JsonFile> json_out;
  if (json_file && printer) {
    conccl::Result<JsonFile> jf = JsonFile::open(*json_file);
    if (!jf.ok()) return fail(args, ctx, jf.status());
    json_out = std::move(jf).value();
  }

  install_sweep_signals(me >= 0 ? SecondSignal::ignored : SecondSignal::kills);
  conccl::Result<std::unique_ptr<conccl::Device>> devr = open_device_from_args(args, me);
  if (!devr.ok()) return fail(args, ctx, devr.status());
  conccl::Device& dev = **devr;
  int gpus = dev.gpu_count();
  if (conccl::Result<int64_t> g = args.get_int_in_range("gpus", 1, kMaxGpus, 0); g.ok() && *g > 0)
    gpus = std::min(gpus, static_cast<int>(*g));
  const int n = *procs ? *procs : *ranks_flag ? static_cast<int>(*ranks_flag) : std::min(gpus, kMaxRanks);
  if (const int rc = check_ranks(n); rc >= 0) return rc;
  std::vector<int> gpu_of;
  for (int r = 0; r < n; ++r) gpu_of.push_back(r % gpus);
  auto local = [&](int r) { return me < 0 || r == me; };

  // Each size in elements per rank: sizes are bytes, rounded down to whole
  // elements (reducescatter: to n x the element size, every rank's share of
  // each rank's send equal), at least one element per rank.
  const uint64_t unit = coll == ReduceColl::reduce_scatter ? static_cast<uint64_t>(n) * es : es;
  auto count_of = [&](uint64_t size) { return std::max<uint64_t>(1, size / unit); };
  const uint64_t max_count = count_of(*max);
  const uint64_t send_elems_max = coll == ReduceColl::reduce_scatter ? max_count * static_cast<uint64_t>(n) : max_count;
  // Each rank: its send buffer and a receive region as large (the in-place
  // form's inputs go there: all-reduce and reduce in place on it, reducescatter
  // into its chunk at rank x count), 4 KiB-aligned.
  const uint64_t region = round_up_sat(mul_sat(send_elems_max, es), 4096);
  // --procs: both in one window per rank, registered once (the moves from
  // and into them need no message between the ranks), unless --no-windows.
  const bool windows = me >= 0 && !args.has("no-windows");
  MemBudget need;
  need.gpu.assign(static_cast<size_t>(gpus), 0);
  for (int r = 0; r < n; ++r) {
    uint64_t& g = need.gpu[static_cast<size_t>(gpu_of[static_cast<size_t>(r)])];
    g = add_sat(g, add_sat(mul_sat(region, 2), *staging));
  }
  need.host = add_sat(mul_sat(staging_bytes(gpus), static_cast<uint64_t>(gpus)), kVerifyBytes);
  if (Status st = check_budget(need, dev.topology(), args.common().backend == Backend::emu,
                               "lower --max (now " + format_size(*max) + "), --staging (now " +
                                   format_size(*staging) + ") or --ranks (now " + std::to_string(n) + ")",
                               mem_available());
      !st.ok())
    return fail(args, ctx, st.prefix(std::string(op.name) + " up to --max " + format_size(*max) + " on " +
                                     std::to_string(n) + " ranks"));

  conccl::Communicator::Options co;
  co.loopback = n > gpus;
  co.queues = queue_sharing;
  co.reduce_staging_bytes = *staging;
  if (args.common().timeout_given) co.call_timeout_ms = static_cast<int64_t>(args.common().timeout_ms);
  if (me >= 0) {
    co.gpu = gpu_of[static_cast<size_t>(me)];
    co.join_timeout_ms = static_cast<int64_t>(args.common().timeout_ms);
  }
  conccl::Result<std::unique_ptr<conccl::Communicator>> comm =
      me >= 0 ? conccl::Communicator::create(dev, me, n, (*proc)->id, co) : conccl::Communicator::create(dev, gpu_of, co);
  if (!comm.ok()) return fail(args, ctx, comm.status());

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
  auto stager_of = [&](int r) -> conccl::Stager& { return *stagers[static_cast<size_t>(gpu_of[static_cast<size_t>(r)])]; };

  // Buffers: memory the GPU's compute reaches (the reduce step writes the
  // results: NVIDIA needs CUDA memory, Device::alloc_for_compute).
  std::vector<Buffer> send(static_cast<size_t>(n)), recv(static_cast<size_t>(n));
  std::vector<Buffer> owned;  // what to free
  Buffer window_mem{};
  conccl::Window window;
  // The calls' stream (below), ended before the buffers are freed: nothing
  // queued may still use them.
  std::unique_ptr<conccl::HostStream> host_stream;
  std::unique_ptr<conccl::StreamOps> cuda_stream;
  auto release = [&] {
    host_stream.reset();  // runs what is queued, each wait bounded by --timeout-ms
    if (cuda_stream) {
      (void)conccl::nv::synchronize_stream(nullptr, deadline());
      cuda_stream.reset();
    }
    if (window.valid()) {
      (void)(*comm)->deregister_window(window);
      window = conccl::Window{};
    }
    for (const Buffer& b : owned) (void)dev.free_for_compute(b);
    owned.clear();
  };
  auto alloc_failed = [&](int r, Status st) {
    release();
    return fail(args, ctx, st.prefix("allocating rank " + std::to_string(r) + "'s buffers (" +
                                     format_size(mul_sat(region, 2)) + ") up to --max " + format_size(*max) +
                                     " (lower --max or --ranks)"));
  };
  for (int r = 0; r < n; ++r) {
    if (!local(r)) continue;
    const int g = gpu_of[static_cast<size_t>(r)];
    if (windows) {
      conccl::Result<Buffer> b = dev.alloc_for_compute(g, static_cast<size_t>(mul_sat(region, 2)));
      if (!b.ok()) return alloc_failed(r, b.status());
      owned.push_back(*b);
      window_mem = *b;
      conccl::Result<conccl::Window> reg = (*comm)->register_window(window_mem);
      if (!reg.ok()) {
        release();
        return fail(args, ctx, reg.status().prefix("registering this rank's window"));
      }
      window = *reg;
      send[static_cast<size_t>(r)] = window.at(0, region);
      recv[static_cast<size_t>(r)] = window.at(region, region);
      continue;
    }
    for (Buffer* out : {&send[static_cast<size_t>(r)], &recv[static_cast<size_t>(r)]}) {
      conccl::Result<Buffer> b = dev.alloc_for_compute(g, static_cast<size_t>(region));
      if (!b.ok()) return alloc_failed(r, b.status());
      owned.push_back(*b);
      *out = *b;
    }
  }
  constexpr uint64_t kSeed = 0xC0CC1;
  const Inputs inputs = inputs_for(dtype, n, kSeed);
  // Every rank's inputs, uploaded once for the largest size: a smaller size
  // uses a prefix (reducescatter: the first n x count elements, rank d's
  // share at d x count).
  for (int r = 0; r < n; ++r)
    if (local(r))
      if (Status st = upload_inputs(stager_of(r), send[static_cast<size_t>(r)], inputs, r, send_elems_max, deadline());
          !st.ok()) {
        release();
        return fail(args, ctx, st.prefix("uploading rank " + std::to_string(r) + "'s inputs"));
      }

  // How calls are ordered and timed: on a stream where the backend has one
  // (the emulator: HostStream; nv: a CUDA stream, the reduce step a kernel
  // on it), each timed call enqueued and the stream synchronized; else
  // host-ordered (the call returns once this rank's results are in place).
  // One CUDA stream runs the reduce kernels of every rank of this process in
  // its context: with ranks of one process on several GPUs it could not
  // reach them all, so those calls are host-ordered (Device::reduce_now runs
  // each GPU's step in its own context).
  std::string ordering = "host", ordering_note;
  const char* host_why = "";
  const bool one_gpu_here = me >= 0 || std::min(gpus, n) == 1;
  if (args.has("no-stream")) {
    host_why = " (--no-stream)";
  } else if (args.common().backend == Backend::emu) {
    conccl::Result<std::unique_ptr<conccl::HostStream>> hs = conccl::HostStream::create(dev, deadline_ms);
    if (!hs.ok()) {
      release();
      return fail(args, ctx, hs.status().prefix("creating the HostStream"));
    }
    host_stream = std::move(hs).value();
    ordering = "hoststream";
    ordering_note = "a HostStream (a host thread runs each call's waits, stores and reduce steps in order); each "
                    "timed call is enqueued, then the stream synchronized";
  } else if (args.common().backend == Backend::nv && one_gpu_here) {
    conccl::Result<std::unique_ptr<conccl::StreamOps>> cs = conccl::nv::stream_ops(dev, nullptr);
    if (!cs.ok()) {
      release();
      return fail(args, ctx, cs.status().prefix("the CUDA stream for the reduce kernels (or give --no-stream)"));
    }
    cuda_stream = std::move(cs).value();
    ordering = "cuda-stream";
    ordering_note = "the CUDA default stream (cuStreamWaitValue64/WriteValue64 around the moves, the reduce step a "
                    "PTX kernel); each timed call is enqueued, then the stream synchronized";
  } else if (args.common().backend == Backend::nv) {
    host_why = " (ranks on several GPUs in one process: one CUDA stream cannot reach every GPU's memory; "
               "--procs gives each rank its own)";
  } else {
    host_why = " (this backend has no stream)";
  }
  if (ordering == "host")
    ordering_note = std::string("host-ordered: each call returns once this rank's results are in place (the reduce "
                                "step by Device::reduce_now)") + host_why;
  conccl::StreamOps* stream = host_stream ? static_cast<conccl::StreamOps*>(host_stream.get()) : cuda_stream.get();
  auto synchronize = [&]() -> Status {
    if (host_stream) CONCCL_RETURN_IF_ERROR(host_stream->synchronize(deadline()).prefix("synchronizing the HostStream"));
    if (cuda_stream)
      CONCCL_RETURN_IF_ERROR(conccl::nv::synchronize_stream(nullptr, deadline()).prefix("synchronizing the CUDA stream"));
    return (*comm)->async_error();
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
  setup.variant = "auto";
  setup.procs = *procs;
  setup.windows = windows;
  setup.iters = *iters;
  setup.warmup = *warmup;
  setup.min = *min;
  setup.max = *max;
  setup.step_factor = static_cast<uint64_t>(*step);
  setup.root = static_cast<int>(*root);
  setup.has_root = has_root;
  setup.reduction = true;
  setup.redop = conccl::reduce_op_name(redop);
  setup.dtype = conccl::dtype_name(dtype);
  setup.ordering = ordering;
  setup.ordering_note = ordering_note;
  setup.staging = *staging;
  if (!json_stdout && printer) {
    print_banner(ctx.out, setup);
    print_header(ctx.out, true);
    std::fflush(ctx.out);
  }
  Progress progress(printer ? ctx.err : nullptr);
  std::vector<SweepRow> rows;
  bool all_ok = true;

  // Ranks in separate processes stop together (as the copy collectives'
  // sweeps do): each tells the others the signal it received at every
  // exchange - each warm-up call, every 32nd timed call, after each form -
  // and all stop at the first where any rank has one.
  int agreed_signal = 0;
  auto stop_signal = [&] { return me < 0 ? sweep_signal() : agreed_signal; };
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
  // Across processes: every rank has finished its last call before any
  // writes its buffers again (poison, in-place inputs).
  auto barrier = [&](const std::string& what) -> Status {
    if (me < 0) return Status();
    return exchange(what, "").status();
  };

  struct Measured {
    TimeStats time;
    uint64_t wrong = 0;
    double messages_per_call = -1;
  };
  constexpr uint64_t kAgreeEvery = 32;
  // One form of one size: prepare the buffers, warm up, time, verify.
  auto measure = [&](uint64_t count, bool in_place, uint32_t poison_value, uint64_t n_iters, Measured* m) -> Status {
    const uint64_t send_elems = coll == ReduceColl::reduce_scatter ? count * static_cast<uint64_t>(n) : count;
    const uint64_t size = send_elems * es;
    const std::string at = "size " + std::to_string(size) + (in_place ? " in place" : "");
    // The call's buffers: out of place send -> recv; in place the inputs sit
    // in the receive region (reducescatter's result at rank x count of it).
    conccl::ReductionArgs ra;
    ra.coll = coll;
    ra.dtype = dtype;
    ra.op = redop;
    ra.count = count;
    ra.root = static_cast<int>(*root);
    auto result_of = [&](int r) {
      const uint64_t off = in_place && coll == ReduceColl::reduce_scatter ? static_cast<uint64_t>(r) * count * es : 0;
      return view_of(recv[static_cast<size_t>(r)], off, count * es);
    };
    for (int r = 0; r < n; ++r) {
      if (!local(r)) continue;
      const Buffer s = in_place ? view_of(recv[static_cast<size_t>(r)], 0, size) : view_of(send[static_cast<size_t>(r)], 0, size);
      const bool gets_result = coll != ReduceColl::reduce || r == ra.root;
      if (me >= 0) {
        ra.send = {s};
        ra.recv.clear();
        if (gets_result) ra.recv.push_back(result_of(r));
      } else {
        ra.send.push_back(s);
        ra.recv.push_back(result_of(r));
      }
    }
    // Poison every receive region (whole 4-byte words); in place, the
    // inputs go there instead.
    auto prepare = [&]() -> Status {
      CONCCL_RETURN_IF_ERROR(barrier("prepare").prefix("before " + at));
      for (int r = 0; r < n; ++r) {
        if (!local(r)) continue;
        const Buffer& b = recv[static_cast<size_t>(r)];
        if (in_place)
          CONCCL_RETURN_IF_ERROR(upload_inputs(stager_of(r), b, inputs, r, send_elems, deadline())
                                     .prefix("placing rank " + std::to_string(r) + "'s inputs in place"));
        else
          CONCCL_RETURN_IF_ERROR(stager_of(r)
                                     .fill(view_of(b, 0, round_up_sat(count * es, 4)), poison_value, deadline())
                                     .prefix("poisoning the destinations"));
      }
      return Status();
    };
    auto one_call = [&]() -> Status {
      CONCCL_RETURN_IF_ERROR((*comm)->call_reduction(ra, stream));
      return synchronize();
    };
    CONCCL_RETURN_IF_ERROR(prepare());
    // Warm-up: --warmup calls, and on real engines at least 100 ms of them
    // (copy engines of a GPU that idled run slower for their first ~100 ms:
    // docs/perf/h200.md, "Cold GPU").
    const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(emulated ? 0 : 100);
    uint64_t warm = 0;
    while (true) {
      bool more = (warm < static_cast<uint64_t>(*warmup) || std::chrono::steady_clock::now() < warm_until) &&
                  !stop_signal();
      if (me >= 0) {
        conccl::Result<std::vector<std::string>> all = exchange("warm-up", more ? "1" : "0");
        if (!all.ok()) return all.status().prefix("warm-up at " + at);
        for (const std::string& s : *all) more |= s == "1";
        more = more && !stop_signal();
      }
      if (!more) break;
      CONCCL_RETURN_IF_ERROR(one_call().prefix("warm-up at " + at));
      ++warm;
    }
    std::vector<double> times;
    double messages = 0;
    for (uint64_t it = 0; it < n_iters && !stop_signal(); ++it) {
      if (me >= 0 && it % kAgreeEvery == 0) {
        conccl::Result<std::vector<std::string>> go = exchange("launch", "");
        if (!go.ok()) return go.status().prefix("before a timed call at " + at);
        if (stop_signal()) break;
      }
      const conccl::CommStats before = me >= 0 ? (*comm)->stats() : conccl::CommStats{};
      const auto t0 = std::chrono::steady_clock::now();
      Status st = (*comm)->call_reduction(ra, stream);
      if (st.ok()) st = synchronize();
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      CONCCL_RETURN_IF_ERROR(st.prefix(at));
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
    // In place, every call reduced the last one's results: the inputs again,
    // and one more call to check.
    if (in_place) {
      CONCCL_RETURN_IF_ERROR(prepare());
      CONCCL_RETURN_IF_ERROR(one_call().prefix("the checked call at " + at));
    }
    // Verify this process's results.
    uint64_t wrong = 0;
    std::vector<uint8_t> got;
    const uint64_t piece = (64u << 20) / es;
    for (int r = 0; r < n; ++r) {
      if (!local(r) || (coll == ReduceColl::reduce && r != ra.root)) continue;
      const Buffer res = result_of(r);
      // Rank r's result element i reduces every rank's element src + i.
      const uint64_t src = coll == ReduceColl::reduce_scatter ? static_cast<uint64_t>(r) * count : 0;
      for (uint64_t e0 = 0; e0 < count; e0 += piece) {
        const uint64_t c = std::min(piece, count - e0);
        got.resize(static_cast<size_t>(c * es));
        CONCCL_RETURN_IF_ERROR(stager_of(r)
                                   .download(got.data(), res, static_cast<size_t>(e0 * es), static_cast<size_t>(c * es),
                                             deadline())
                                   .prefix("reading rank " + std::to_string(r) + "'s results at " + at));
        conccl::Result<uint64_t> w = count_wrong(got.data(), c, inputs, redop, n, src + e0);
        if (!w.ok()) return w.status().prefix("verifying " + at);
        wrong += *w;
      }
    }
    m->wrong = wrong;
    if (me >= 0) {
      // The row: the sum of wrong elements, the slowest rank's times.
      struct Mine {
        uint64_t wrong;
        TimeStats time;
        double messages_per_call;
      } mine{wrong, m->time, m->messages_per_call};
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
    return Status();
  };

  for (size_t si = 0; si < sizes.size() && !stop_signal(); ++si) {
    // Sizes that round to the same count run once.
    if (si > 0 && count_of(sizes[si]) == count_of(sizes[si - 1])) continue;
    progress.show(si, sizes.size(), sizes[si]);
    const uint64_t count = count_of(sizes[si]);
    const uint64_t size = count * unit;
    const uint64_t n_iters =
        *iters ? static_cast<uint64_t>(*iters) : std::clamp<uint64_t>((64ull << 20) / std::max<uint64_t>(size, 1), 3, 20);
    const uint32_t poison_value = 0xA5A5A5A5u ^ static_cast<uint32_t>(si);
    Measured oop, inp;
    Status st = measure(count, false, poison_value, n_iters, &oop);
    if (st.ok() && !stop_signal()) st = measure(count, true, poison_value, n_iters, &inp);
    if (!st.ok()) {
      progress.clear();
      if (st.code() != conccl::Code::timeout) release();
      return fail(args, ctx, st);
    }
    if (stop_signal()) break;  // this size is abandoned
    const Algorithm algo = algorithm_of(coll, count, n, es, *staging);
    SweepRow row;
    row.size = size;
    row.count = size / es;
    row.type = conccl::dtype_name(dtype);
    row.redop = conccl::reduce_op_name(redop);
    row.root = has_root ? static_cast<int>(*root) : -1;
    row.pieces = algo.pieces;
    row.variant = algo.name;
    row.engines = 0;  // the plans are the communicator's
    row.iters = n_iters;
    row.time = oop.time;
    row.algbw = static_cast<double>(size) / (row.time.mean * 1e-6) / 1e9;
    row.busbw = row.algbw * busbw_factor(coll, n);
    row.wrong = oop.wrong;
    row.messages_per_call = oop.messages_per_call;
    row.in_place = true;
    row.ip_time = inp.time;
    row.ip_algbw = static_cast<double>(size) / (inp.time.mean * 1e-6) / 1e9;
    row.ip_busbw = row.ip_algbw * busbw_factor(coll, n);
    row.ip_wrong = inp.wrong;
    row.ip_variant = algo.name;
    row.ip_messages_per_call = inp.messages_per_call;
    all_ok &= row.wrong == 0 && row.ip_wrong == 0;
    progress.clear();
    if (!json_stdout && printer) print_row(ctx.out, row);
    std::fflush(ctx.out);
    rows.push_back(row);
  }
  progress.clear();
  if (me >= 0) {
    conccl::Result<std::vector<std::string>> end = exchange("end", "");
    if (!end.ok()) {
      if (end.status().code() != conccl::Code::timeout) release();
      return fail(args, ctx, end.status().prefix("ending the sweep"));
    }
  }
  SweepEnd finish;
  finish.op = op.name;
  finish.plot_title = std::string("sdma-probe ") + op.name + " " + setup.dtype + " " + setup.redop + ": " + std::to_string(n) + " ranks, " + std::string(backend_name(args.common().backend));
  finish.printer = printer;
  finish.json_stdout = json_stdout;
  finish.planned_sizes = sizes.size();
  finish.signal = stop_signal();
  finish.all_ok = all_ok;
  return finish_sweep(args, ctx, setup, rows, json_out, release, finish);
}

std::vector<FlagSpec> reduction_flags() {
  std::vector<FlagSpec> f = device_flag_specs();
  f.push_back({.name = "min", .value = "SIZE", .help = "smallest size in bytes (default 1K)", .short_name = 'b'});
  f.push_back({.name = "max", .value = "SIZE", .help = "largest size in bytes (default 16M)", .short_name = 'e'});
  f.push_back({.name = "step-factor", .value = "F", .help = "each size is F times the last, 2..1024 (default 2)",
               .short_name = 'f'});
  f.push_back({.name = "dtype", .value = "TYPE",
               .help = "element type: float (default), bfloat16, half, int32, int64, uint8 (or f32, bf16, f16, i32, "
                       "i64, u8)",
               .short_name = 'd'});
  f.push_back({.name = "op", .value = "OP", .help = "reduction operator: sum (default), prod, min, max, avg",
               .short_name = 'o'});
  f.push_back({.name = "root", .value = "R", .help = "reduce: the rank that gets the result (default 0)",
               .short_name = 'r'});
  f.push_back({.name = "iters", .value = "N", .help = "timed calls per size and form, 1..1000000 (default: by size, 3..20)",
               .short_name = 'n'});
  f.push_back({.name = "warmup", .value = "N",
               .help = "untimed calls per size and form, 0..1000000 (default 2; on real engines also at least 100 ms "
                       "of them)",
               .short_name = 'w'});
  f.push_back({.name = "staging", .value = "SIZE",
               .help = "reduction staging per rank (Communicator::Options::reduce_staging_bytes, default 64M); "
                       "larger data runs in pieces"});
  f.push_back({.name = "no-stream",
               .help = "host-ordered calls (each returns once its results are in place) instead of a stream"});
  f.push_back({.name = "no-windows",
               .help = "--procs: buffers outside windows (the plan cache's vote: messages every call), to compare"});
  f.push_back({.name = "queues", .value = "auto|per-rank|per-engine",
               .help = "loopback: the queues a GPU's ranks use on an engine (default auto)"});
  f.push_back({.name = "plot", .value = "FILE.png",
               .help = "also draw bus bandwidth against size into FILE.png (needs gnuplot)"});
  f.push_back({.name = "json-file", .value = "FILE", .help = "also write the rows as JSON to FILE"});
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
    "Sweeps sizes from --min (-b) to --max (-e), each --step-factor (-f) times the last,\n"
    "calling Communicator::call_reduction --warmup (-w) + --iters (-n) times per size and\n"
    "form, with nccl-tests' -d/--dtype (float, bfloat16, half, int32, int64, uint8; default\n"
    "float) and -o/--op (sum, prod, min, max, avg; default sum). Sizes are bytes: what one\n"
    "rank sends (reducescatter: ranks x the count each rank gets; allreduce, reduce: the\n"
    "count), rounded down to whole elements (reducescatter: to a multiple of ranks x the\n"
    "element size), at least one element per rank; sizes that round to the same count run\n"
    "once, and the size column is the size run.\n"
    "The engines move the data and one reduce step per rank adds it up (the emulator\n"
    "reduces on the host, nv with a PTX kernel on the GPU; a step reduces n inputs in rank\n"
    "order, so every backend gives the same bits). Algorithms (the variant column):\n"
    "  reducescatter  a2a: an all-to-all into each rank's staging, then one reduce over\n"
    "                 the n slices (data past the staging: per piece, an all-to-all of\n"
    "                 each destination's slice, CollectiveArgs::send_stride)\n"
    "  allreduce      oneshot: every input gathered into every rank's staging and reduced\n"
    "                 there; rs+ag: from 256 KiB per rank when the count divides among the\n"
    "                 ranks, a reduce-scatter then an all-gather in place (the remainder\n"
    "                 in one shot)\n"
    "  reduce         gather: a gather into the root's staging and one reduce\n"
    "Data larger than the staging (--staging, default 64 MiB per rank) runs in pieces: the\n"
    "JSON's \"pieces\" counts them.\n"
    "Calls are ordered on a stream where the backend has one (emulator: a HostStream; nv:\n"
    "the CUDA default stream, the reduce step a kernel on it), each timed call enqueued and\n"
    "the stream synchronized; host-ordered otherwise (--no-stream, or nv with ranks of one\n"
    "process on several GPUs). The banner's ordering line says which.\n"
    "Table (nccl-tests' columns): size count type redop root variant eng iters time min\n"
    "max stddev algbw busbw #wrong, then time algbw busbw #wrong in place. count is the size\n"
    "in elements of type; root is reduce's root, -1 for the others; eng is 0 (the plans\n"
    "are the communicator's); time is one call until its results are in place (us), with\n"
    "min, max and stddev over the timed calls; algbw = size / time; busbw = algbw x\n"
    "(n-1)/n for reducescatter, 2(n-1)/n for allreduce, 1 for reduce (GB/s = 1e9 B/s).\n"
    "Inputs are random and never zero (floats of magnitude 0.5..2 or less, so that products\n"
    "stay finite; uint8 odd), a function of (rank, element) uploaded once; results are\n"
    "poisoned before each size, and every result element is compared bit for bit with the\n"
    "host reduction (conccl::reduce_on_host) of the same inputs in rank order: #wrong counts\n"
    "the elements that differ (exit 1 if any does). In place (as NCCL defines it: allreduce\n"
    "and reduce with send == recv, reducescatter into rank x count of the send buffer) the\n"
    "inputs are placed in the receive buffer before the timed calls and again before one\n"
    "more call that is checked (each timed call reduces the last one's results).\n"
    "--json FILE (or --json-file FILE) writes the rows as JSON, as the copy collectives do\n"
    "(docs/sdma-probe.md), with \"redop\", \"dtype\", \"root\", \"ordering\" and \"staging_bytes\",\n"
    "per row \"redop\", \"root\" and \"pieces\", and \"wrong_elements\" for \"wrong_bytes\".\n"
    "--procs N: one process per rank (rank 0 prints; #wrong is the sum over the ranks, the\n"
    "times the slowest rank's). Each rank's send and receive buffers lie in one buffer,\n"
    "registered as a window once, so the moves (and the staging, always a window) go\n"
    "through windows: no message between the ranks per call (the summary's Bootstrap\n"
    "msgs/call); --no-windows leaves them outside, for comparison.\n"
    "SIGINT/SIGTERM: the finished rows are written, exit 130/143.\n";

#define CONCCL_REDUCTION_COMMAND(NAME, ORDER, SUMMARY)                                                  \
  const Registration reg_##ORDER({                                                                      \
      .name = NAME,                                                                                     \
      .summary = SUMMARY,                                                                               \
      .usage = "sdma-probe " NAME " [--backend B] [--preset P] [--gpus N] [--ranks N | --procs N]\n"    \
               "       [-b|--min SIZE] [-e|--max SIZE] [-f|--step-factor F] [-d|--dtype TYPE]\n"        \
               "       [-o|--op OP] [-r|--root R] [-n|--iters N] [-w|--warmup N] [--staging SIZE]\n"   \
               "       [--no-stream] [--no-windows] [--json FILE]",                                     \
      .details = kDetails,                                                                              \
      .flags = reduction_flags(),                                                                       \
      .run = run_reduction,                                                                             \
      .order = ORDER,                                                                                   \
  });

CONCCL_REDUCTION_COMMAND("reducescatter", 56, "reduce-scatter size sweep: DMA moves + a reduce step per rank")
CONCCL_REDUCTION_COMMAND("allreduce", 57, "all-reduce size sweep: DMA moves + a reduce step per rank")
CONCCL_REDUCTION_COMMAND("reduce", 58, "reduce size sweep: DMA moves + a reduce step on the root")

}  // namespace
}  // namespace probe
