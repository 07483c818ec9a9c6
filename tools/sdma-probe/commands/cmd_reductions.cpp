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
#include <optional>
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
#include "sweep/sweep_command.hpp"
#include "sweep/sweep_device.hpp"
#include "sweep/sweep_flags.hpp"
#include "sweep/sweep_inplace.hpp"
#include "sweep/sweep_json.hpp"
#include "sweep/sweep_loop.hpp"
#include "sweep/sweep_measure.hpp"
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

constexpr uint64_t kSeed = 0xC0CC1;

// The command line of one reduction's sweep, checked.
struct RedFlags {
  const RedInfo* op = nullptr;
  SweepFlags sweep;
  uint64_t staging = 0;  // --staging: Communicator::Options::reduce_staging_bytes
  std::optional<bool> overlap;  // --overlap / --no-overlap: Communicator::Options::reduce_overlap
  bool has_root = false;
  DataType dtype = DataType::f32;
  ReduceOp redop = ReduceOp::sum;
  std::string queues;  // --queues as given
  conccl::Communicator::Options::QueueSharing queue_sharing = conccl::Communicator::Options::QueueSharing::automatic;
  SweepProcs procs;
  uint64_t es() const { return conccl::dtype_size(dtype); }
};

// --root where the op has one, the sizes, -d/--dtype, -o/--op, --queues.
Status check_reduction_flags(const Args& args, RedFlags* f) {
  f->has_root = f->op->coll == ReduceColl::reduce;
  if (!f->has_root && args.has("root"))
    return usage_status(std::string("--root does not apply to ") + f->op->name +
                        " (only reduce has a root, the rank that gets the result): drop it");
  CONCCL_RETURN_IF_ERROR(check_sizes(f->sweep));
  const std::string dtype_text = args.value("dtype").value_or("float");
  if (!conccl::parse_dtype(dtype_text, &f->dtype))
    return usage_status("unknown -d/--dtype '" + dtype_text + "': give one of " + type_names() +
                        " (the types the reduce step adds; short forms f32, bf16, f16, i32, i64, u8 work too)");
  const std::string op_text = args.value("op").value_or("sum");
  if (!conccl::parse_reduce_op(op_text, &f->redop))
    return usage_status("unknown -o/--op '" + op_text + "': give one of " + op_names());
  conccl::Result<conccl::Communicator::Options::QueueSharing> queues = read_queues(args, &f->queues);
  if (!queues.ok()) return queues.status();
  f->queue_sharing = *queues;
  return Status();
}

// Everything the command line says, up to --procs (launcher or rank).
Status read_reduction_flags(const Args& args, RedFlags* f) {
  f->op = &red_for(args.command());
  auto read_staging = [&]() -> Status {
    conccl::Result<uint64_t> staging =
        args.get_size("staging", conccl::Communicator::Options{}.reduce_staging_bytes);
    if (!staging.ok()) return staging.status();
    f->staging = *staging;
    if (args.has("overlap") && args.has("no-overlap"))
      return conccl::error(conccl::Code::invalid_argument, "give --overlap or --no-overlap, not both");
    if (args.has("overlap")) f->overlap = true;
    if (args.has("no-overlap")) f->overlap = false;
    return Status();
  };
  conccl::Result<SweepFlags> sweep = read_sweep_flags(args, read_staging);
  if (!sweep.ok()) return sweep.status();
  f->sweep = *sweep;
  CONCCL_RETURN_IF_ERROR(check_reduction_flags(args, f));
  conccl::Result<SweepProcs> procs = read_sweep_procs(args, "one process has no windows");
  if (!procs.ok()) return procs.status();
  f->procs = *procs;
  return Status();
}

// Once the rank count is known: the root exists, and the staging holds an
// element of every rank.
Status check_ranks(const RedFlags& f, int n) {
  const char* count_flag = f.procs.procs ? "--procs" : "--ranks";
  const uint64_t es = f.es();
  if (f.has_root && f.sweep.root >= n)
    return usage_status("--root " + std::to_string(f.sweep.root) + " is out of range: give a rank 0.." +
                        std::to_string(n - 1) + " (" + std::to_string(n) + " ranks; or raise " + count_flag + ")");
  if (f.staging < static_cast<uint64_t>(n) * es)
    return usage_status("--staging " + std::to_string(f.staging) + " holds less than one " +
                        conccl::dtype_name(f.dtype) + " per rank: give at least " +
                        std::to_string(static_cast<uint64_t>(n) * es) + " (" + std::to_string(n) + " ranks x " +
                        std::to_string(es) + " bytes)");
  return Status();
}

// One reduction's sweep from the device on. The members are made in the
// order they are declared, and go in reverse.
// --procs: send and receive buffers in one window per rank, registered once
// (the moves from and into them need no message between the ranks), unless
// --no-windows.
class ReductionSweep final : public SizeSweep {
 public:
  ReductionSweep(const Args& args, const RedFlags& f)
      : SizeSweep(args, f.sweep, f.procs), f_(f), coll_(f.op->coll), es_(f.es()) {}

  // The device and its ranks, their communicator, stagers and buffers, the
  // inputs, and the stream the calls are ordered on.
  Status set_up();

 private:
  Status open();
  Status connect();
  Status alloc_buffers();
  Status alloc_failed(int r, Status st);
  Status upload_all_inputs();
  Status choose_ordering();
  void release() override;
  Status synchronize();
  SweepSetup sweep_setup() const override;
  uint64_t unit_of(uint64_t size) const override { return count_of(size); }
  std::string plot_name(const SweepSetup& setup) const override {
    return std::string(f_.op->name) + " " + setup.dtype + " " + setup.redop;
  }

  Status measure_size(size_t si, uint64_t asked, SweepRow* row) override;
  Status measure(uint64_t count, bool in_place, uint32_t poison_value, uint64_t n_iters, Measured* m);
  conccl::ReductionArgs call_args(uint64_t count, bool in_place) const;
  Buffer result_of(int r, uint64_t count, bool in_place) const;
  Status prepare(uint64_t count, bool in_place, uint32_t poison_value, const std::string& at);
  Status one_call(const conccl::ReductionArgs& ra);
  conccl::Result<uint64_t> count_wrong_results(uint64_t count, bool in_place, const std::string& at);

  // Each size in elements per rank: sizes are bytes, rounded down to whole
  // elements (reducescatter: to n x the element size, every rank's share of
  // each rank's send equal), at least one element per rank.
  uint64_t count_of(uint64_t size) const { return std::max<uint64_t>(1, size / unit_); }
  // What a rank sends for a count: reducescatter a count for each rank.
  uint64_t send_elems(uint64_t count) const {
    return coll_ == ReduceColl::reduce_scatter ? count * static_cast<uint64_t>(d_.n) : count;
  }
  conccl::Stager& stager_of(int r) const {
    return *stagers_[static_cast<size_t>(d_.gpu_of[static_cast<size_t>(r)])];
  }

  const RedFlags& f_;
  const ReduceColl coll_;
  const uint64_t es_;
  uint64_t unit_ = 1;            // bytes of a size per element of a count
  uint64_t send_elems_max_ = 0;  // what a rank sends at --max
  uint64_t region_ = 0;          // each of a rank's send and receive regions
  // Buffers: memory the GPU's compute reaches (the reduce step writes the
  // results: NVIDIA needs CUDA memory, Device::alloc_for_compute).
  std::vector<Buffer> send_, recv_;
  std::vector<Buffer> owned_;  // what to free
  Buffer window_mem_{};
  conccl::Window window_;
  // The calls' stream (choose_ordering), ended before the buffers are
  // freed: nothing queued may still use them.
  std::unique_ptr<conccl::HostStream> host_stream_;
  std::unique_ptr<conccl::StreamOps> cuda_stream_;
  conccl::StreamOps* stream_ = nullptr;
  std::string ordering_ = "host", ordering_note_;
  Inputs inputs_;
};

Status ReductionSweep::set_up() {
  CONCCL_RETURN_IF_ERROR(open());
  CONCCL_RETURN_IF_ERROR(connect());
  CONCCL_RETURN_IF_ERROR(alloc_buffers());
  CONCCL_RETURN_IF_ERROR(upload_all_inputs());
  return choose_ordering();
}

// The device and the ranks on it, and whether every rank's buffers and
// staging for the largest size fit.
Status ReductionSweep::open() {
  CONCCL_RETURN_IF_ERROR(
      open_sweep_device(args_, f_.sweep, f_.procs, [this](int n) { return check_ranks(f_, n); }, &d_));
  const int n = d_.n;
  const uint64_t max = f_.sweep.max, staging = f_.staging;
  unit_ = coll_ == ReduceColl::reduce_scatter ? static_cast<uint64_t>(n) * es_ : es_;
  send_elems_max_ = send_elems(count_of(max));
  // Each rank: its send buffer and a receive region as large (the in-place
  // form's inputs go there: all-reduce and reduce in place on it,
  // reducescatter into its chunk at rank x count), 4 KiB-aligned.
  region_ = round_up_sat(mul_sat(send_elems_max_, es_), 4096);
  MemBudget need;
  need.gpu.assign(static_cast<size_t>(d_.gpus), 0);
  for (int r = 0; r < n; ++r) {
    uint64_t& g = need.gpu[static_cast<size_t>(d_.gpu_of[static_cast<size_t>(r)])];
    g = add_sat(g, add_sat(mul_sat(region_, 2), staging));
  }
  need.host = add_sat(mul_sat(staging_bytes(d_.gpus), static_cast<uint64_t>(d_.gpus)), kVerifyBytes);
  return check_fits(need, f_.op->name, ", --staging (now " + format_size(staging) + ")");
}

// The ranks' communicator, and one stager per GPU for the inputs in and the
// results out.
Status ReductionSweep::connect() {
  conccl::Communicator::Options co;
  co.queues = f_.queue_sharing;
  co.reduce_staging_bytes = f_.staging;
  co.reduce_overlap = f_.overlap;
  if (args_.common().timeout_given) co.call_timeout_ms = static_cast<int64_t>(args_.common().timeout_ms);
  conccl::Result<std::unique_ptr<conccl::Communicator>> comm = create_sweep_communicator(args_, d_, f_.procs, co);
  if (!comm.ok()) return comm.status();
  comm_ = std::move(comm).value();
  return make_stagers(d_, me_, &stagers_);
}

void ReductionSweep::release() {
  host_stream_.reset();  // runs what is queued, each wait bounded by --timeout-ms
  if (cuda_stream_) {
    (void)conccl::nv::synchronize_stream(nullptr, deadline());
    cuda_stream_.reset();
  }
  if (window_.valid()) {
    (void)comm_->deregister_window(window_);
    window_ = conccl::Window{};
  }
  for (const Buffer& b : owned_) (void)d_.dev->free_for_compute(b);
  owned_.clear();
}

Status ReductionSweep::alloc_failed(int r, Status st) {
  release();
  return st.prefix("allocating rank " + std::to_string(r) + "'s buffers (" + format_size(mul_sat(region_, 2)) +
                   ") up to --max " + format_size(f_.sweep.max) + " (lower --max or --ranks)");
}

// This process's ranks' send and receive regions: through windows one
// buffer for both, registered once.
Status ReductionSweep::alloc_buffers() {
  const size_t n = static_cast<size_t>(d_.n);
  send_.assign(n, Buffer{});
  recv_.assign(n, Buffer{});
  for (int r = 0; r < d_.n; ++r) {
    if (!local(r)) continue;
    const size_t ri = static_cast<size_t>(r);
    const int g = d_.gpu_of[ri];
    if (windows_) {
      conccl::Result<Buffer> b = d_.dev->alloc_for_compute(g, static_cast<size_t>(mul_sat(region_, 2)));
      if (!b.ok()) return alloc_failed(r, b.status());
      owned_.push_back(*b);
      window_mem_ = *b;
      conccl::Result<conccl::Window> reg = comm_->register_window(window_mem_);
      if (!reg.ok()) {
        release();
        return reg.status().prefix("registering this rank's window");
      }
      window_ = *reg;
      send_[ri] = window_.at(0, region_);
      recv_[ri] = window_.at(region_, region_);
      continue;
    }
    for (Buffer* out : {&send_[ri], &recv_[ri]}) {
      conccl::Result<Buffer> b = d_.dev->alloc_for_compute(g, static_cast<size_t>(region_));
      if (!b.ok()) return alloc_failed(r, b.status());
      owned_.push_back(*b);
      *out = *b;
    }
  }
  return Status();
}

// Every rank's inputs, uploaded once for the largest size: a smaller size
// uses a prefix (reducescatter: the first n x count elements, rank d's
// share at d x count).
Status ReductionSweep::upload_all_inputs() {
  inputs_ = inputs_for(f_.dtype, d_.n, kSeed);
  for (int r = 0; r < d_.n; ++r)
    if (local(r))
      if (Status st = upload_inputs(stager_of(r), send_[static_cast<size_t>(r)], inputs_, r, send_elems_max_,
                                    deadline());
          !st.ok()) {
        release();
        return st.prefix("uploading rank " + std::to_string(r) + "'s inputs");
      }
  return Status();
}

// How calls are ordered and timed: on a stream where the backend has one
// (the emulator: HostStream; nv: a CUDA stream, the reduce step a kernel
// on it), each timed call enqueued and the stream synchronized; else
// host-ordered (the call returns once this rank's results are in place).
// One CUDA stream runs the reduce kernels of every rank of this process in
// its context: with ranks of one process on several GPUs it could not
// reach them all, so those calls are host-ordered (Device::reduce_now runs
// each GPU's step in its own context).
Status ReductionSweep::choose_ordering() {
  const char* host_why = "";
  const Backend backend = args_.common().backend;
  const bool one_gpu_here = me_ >= 0 || std::min(d_.gpus, d_.n) == 1;
  if (args_.has("no-stream")) {
    host_why = " (--no-stream)";
  } else if (backend == Backend::emu) {
    conccl::Result<std::unique_ptr<conccl::HostStream>> hs = conccl::HostStream::create(*d_.dev, deadline_ms_);
    if (!hs.ok()) {
      release();
      return hs.status().prefix("creating the HostStream");
    }
    host_stream_ = std::move(hs).value();
    ordering_ = "hoststream";
    ordering_note_ = "a HostStream (a host thread runs each call's waits, stores and reduce steps in order); each "
                     "timed call is enqueued, then the stream synchronized";
  } else if (backend == Backend::nv && one_gpu_here) {
    conccl::Result<std::unique_ptr<conccl::StreamOps>> cs = conccl::nv::stream_ops(*d_.dev, nullptr);
    if (!cs.ok()) {
      release();
      return cs.status().prefix("the CUDA stream for the reduce kernels (or give --no-stream)");
    }
    cuda_stream_ = std::move(cs).value();
    ordering_ = "cuda-stream";
    ordering_note_ = "the CUDA default stream (cuStreamWaitValue64/WriteValue64 around the moves, the reduce step a "
                     "PTX kernel); each timed call is enqueued, then the stream synchronized";
  } else if (backend == Backend::nv) {
    host_why = " (ranks on several GPUs in one process: one CUDA stream cannot reach every GPU's memory; "
               "--procs gives each rank its own)";
  } else {
    host_why = " (this backend has no stream)";
  }
  if (ordering_ == "host")
    ordering_note_ = std::string("host-ordered: each call returns once this rank's results are in place (the reduce "
                                 "step by Device::reduce_now)") + host_why;
  stream_ = host_stream_ ? static_cast<conccl::StreamOps*>(host_stream_.get()) : cuda_stream_.get();
  return Status();
}

Status ReductionSweep::synchronize() {
  if (host_stream_) CONCCL_RETURN_IF_ERROR(host_stream_->synchronize(deadline()).prefix("synchronizing the HostStream"));
  if (cuda_stream_)
    CONCCL_RETURN_IF_ERROR(conccl::nv::synchronize_stream(nullptr, deadline()).prefix("synchronizing the CUDA stream"));
  return comm_->async_error();
}

SweepSetup ReductionSweep::sweep_setup() const {
  SweepSetup setup = common_setup(args_, f_.op->name, d_, f_.sweep, f_.procs, windows_, f_.queues);
  setup.variant = "auto";
  setup.has_root = f_.has_root;
  setup.reduction = true;
  setup.redop = conccl::reduce_op_name(f_.redop);
  setup.dtype = conccl::dtype_name(f_.dtype);
  setup.ordering = ordering_;
  setup.ordering_note = ordering_note_;
  setup.staging = f_.staging;
  return setup;
}

Status ReductionSweep::measure_size(size_t si, uint64_t asked, SweepRow* row) {
  const int n = d_.n;
  const uint64_t count = count_of(asked);
  const uint64_t size = count * unit_;
  const uint64_t n_iters = iters_for(f_.sweep, size);
  const uint32_t poison_value = 0xA5A5A5A5u ^ static_cast<uint32_t>(si);
  Measured oop, inp;
  Status st = measure(count, false, poison_value, n_iters, &oop);
  if (st.ok() && !sync_->stop_signal()) st = measure(count, true, poison_value, n_iters, &inp);
  CONCCL_RETURN_IF_ERROR(st);
  const Algorithm algo = algorithm_of(coll_, count, n, es_, f_.staging);
  row->size = size;
  row->count = size / es_;
  row->type = conccl::dtype_name(f_.dtype);
  row->redop = conccl::reduce_op_name(f_.redop);
  row->root = f_.has_root ? static_cast<int>(f_.sweep.root) : -1;
  row->pieces = algo.pieces;
  row->variant = algo.name;
  row->engines = 0;  // the plans are the communicator's
  row->iters = n_iters;
  row->time = oop.time;
  row->algbw = static_cast<double>(size) / (row->time.mean * 1e-6) / 1e9;
  row->busbw = row->algbw * busbw_factor(coll_, n);
  row->wrong = oop.wrong;
  row->messages_per_call = oop.messages_per_call;
  row->in_place = true;
  row->ip_time = inp.time;
  row->ip_algbw = static_cast<double>(size) / (inp.time.mean * 1e-6) / 1e9;
  row->ip_busbw = row->ip_algbw * busbw_factor(coll_, n);
  row->ip_wrong = inp.wrong;
  row->ip_variant = algo.name;
  row->ip_messages_per_call = inp.messages_per_call;
  return Status();
}

// One form of one size: prepare the buffers, warm up, time, verify.
Status ReductionSweep::measure(uint64_t count, bool in_place, uint32_t poison_value, uint64_t n_iters,
                               Measured* m) {
  const std::string at = "size " + std::to_string(send_elems(count) * es_) + (in_place ? " in place" : "");
  const conccl::ReductionArgs ra = call_args(count, in_place);
  CONCCL_RETURN_IF_ERROR(prepare(count, in_place, poison_value, at));
  CONCCL_RETURN_IF_ERROR(warm_up(*sync_, f_.sweep.warmup, emulated_, at, [&] { return one_call(ra); }));
  constexpr uint64_t kAgreeEvery = 32;
  auto timed = [&](std::chrono::steady_clock::time_point* t0) -> Status {
    *t0 = std::chrono::steady_clock::now();
    Status st = comm_->call_reduction(ra, stream_);
    if (st.ok()) st = synchronize();
    return st;
  };
  CONCCL_RETURN_IF_ERROR(time_calls(*sync_, n_iters, kAgreeEvery, "call", at, timed, m));
  if (sync_->stop_signal()) return Status();  // abandoned
  // In place, every call reduced the last one's results: the inputs again,
  // and one more call to check.
  if (in_place) {
    CONCCL_RETURN_IF_ERROR(prepare(count, in_place, poison_value, at));
    CONCCL_RETURN_IF_ERROR(one_call(ra).prefix("the checked call at " + at));
  }
  conccl::Result<uint64_t> wrong = count_wrong_results(count, in_place, at);
  if (!wrong.ok()) return wrong.status();
  m->wrong = *wrong;
  // The row: the sum of wrong elements, the slowest rank's times.
  return combine_ranks(*sync_, at, m);
}

// The call's buffers: out of place send -> recv; in place the inputs sit
// in the receive region (reducescatter's result at rank x count of it).
// A --procs rank gives its own (a result only where it gets one).
conccl::ReductionArgs ReductionSweep::call_args(uint64_t count, bool in_place) const {
  const uint64_t size = send_elems(count) * es_;
  conccl::ReductionArgs ra;
  ra.coll = coll_;
  ra.dtype = f_.dtype;
  ra.op = f_.redop;
  ra.count = count;
  ra.root = static_cast<int>(f_.sweep.root);
  for (int r = 0; r < d_.n; ++r) {
    if (!local(r)) continue;
    const size_t ri = static_cast<size_t>(r);
    const Buffer s = in_place ? view_of(recv_[ri], 0, size) : view_of(send_[ri], 0, size);
    const bool gets_result = coll_ != ReduceColl::reduce || r == ra.root;
    if (me_ >= 0) {
      ra.send = {s};
      ra.recv.clear();
      if (gets_result) ra.recv.push_back(result_of(r, count, in_place));
    } else {
      ra.send.push_back(s);
      ra.recv.push_back(result_of(r, count, in_place));
    }
  }
  return ra;
}

Buffer ReductionSweep::result_of(int r, uint64_t count, bool in_place) const {
  const uint64_t off = in_place && coll_ == ReduceColl::reduce_scatter ? static_cast<uint64_t>(r) * count * es_ : 0;
  return view_of(recv_[static_cast<size_t>(r)], off, count * es_);
}

// Poison every receive region (whole 4-byte words); in place, the inputs go
// there instead. Across processes after every rank's last call (a barrier).
Status ReductionSweep::prepare(uint64_t count, bool in_place, uint32_t poison_value, const std::string& at) {
  CONCCL_RETURN_IF_ERROR(sync_->barrier("prepare").prefix("before " + at));
  for (int r = 0; r < d_.n; ++r) {
    if (!local(r)) continue;
    const Buffer& b = recv_[static_cast<size_t>(r)];
    if (in_place)
      CONCCL_RETURN_IF_ERROR(upload_inputs(stager_of(r), b, inputs_, r, send_elems(count), deadline())
                                 .prefix("placing rank " + std::to_string(r) + "'s inputs in place"));
    else
      CONCCL_RETURN_IF_ERROR(stager_of(r)
                                 .fill(view_of(b, 0, round_up_sat(count * es_, 4)), poison_value, deadline())
                                 .prefix("poisoning the destinations"));
  }
  return Status();
}

Status ReductionSweep::one_call(const conccl::ReductionArgs& ra) {
  CONCCL_RETURN_IF_ERROR(comm_->call_reduction(ra, stream_));
  return synchronize();
}

// This process's result elements that differ from the host reduction.
conccl::Result<uint64_t> ReductionSweep::count_wrong_results(uint64_t count, bool in_place, const std::string& at) {
  uint64_t wrong = 0;
  std::vector<uint8_t> got;
  const uint64_t piece = (64u << 20) / es_;
  for (int r = 0; r < d_.n; ++r) {
    if (!local(r) || (coll_ == ReduceColl::reduce && r != f_.sweep.root)) continue;
    const Buffer res = result_of(r, count, in_place);
    // Rank r's result element i reduces every rank's element src + i.
    const uint64_t src = coll_ == ReduceColl::reduce_scatter ? static_cast<uint64_t>(r) * count : 0;
    for (uint64_t e0 = 0; e0 < count; e0 += piece) {
      const uint64_t c = std::min(piece, count - e0);
      got.resize(static_cast<size_t>(c * es_));
      CONCCL_RETURN_IF_ERROR(
          stager_of(r)
              .download(got.data(), res, static_cast<size_t>(e0 * es_), static_cast<size_t>(c * es_), deadline())
              .prefix("reading rank " + std::to_string(r) + "'s results at " + at));
      conccl::Result<uint64_t> w = count_wrong(got.data(), c, inputs_, f_.redop, d_.n, src + e0);
      if (!w.ok()) return w.status().prefix("verifying " + at);
      wrong += *w;
    }
  }
  return wrong;
}

int run_reduction(const Args& args, Context& ctx) {
  RedFlags f;
  if (Status st = read_reduction_flags(args, &f); !st.ok()) return fail(args, ctx, st);
  return run_sweep_command<ReductionSweep>(args, ctx, f, [&f](int n) { return check_ranks(f, n); });
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
  f.push_back({.name = "overlap",
               .help = "on a stream: move a piece while the one before is reduced, in two halves of the "
                       "staging (Communicator::Options::reduce_overlap; the default with --ranks, not with --procs)"});
  f.push_back({.name = "no-overlap",
               .help = "on a stream: one piece at a time, its move then its reduce (the default with --procs)"});
  f.push_back({.name = "no-stream",
               .help = "host-ordered calls (each returns once its results are in place) instead of a stream"});
  f.push_back({.name = "no-windows",
               .help = "--procs: buffers outside windows (the plan cache's vote: messages every call), to compare"});
  f.push_back({.name = "queues", .value = "auto|per-rank|per-engine",
               .help = "loopback: the queues a GPU's ranks use on an engine (default auto)"});
  f.push_back({.name = "plot", .value = "FILE.png",
               .help = "also draw bus bandwidth against size into FILE.png (needs gnuplot)"});
  f.push_back({.name = "json-file", .value = "FILE", .help = "also write the rows as JSON to FILE"});
  f.push_back(check_flag_spec());
  add_rank_flags(f);
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

#define CONCCL_REDUCTION_COMMAND(NAME, ORDER, SUMMARY)                                            \
  CONCCL_SWEEP_COMMAND(NAME, ORDER, SUMMARY,                                                        \
                       "       [-b|--min SIZE] [-e|--max SIZE] [-f|--step-factor F] [-d|--dtype TYPE]\n" \
                       "       [-o|--op OP] [-r|--root R] [-n|--iters N] [-w|--warmup N] [--staging SIZE]\n" \
                       "       [--no-stream] [--no-windows] [--json FILE]",                                     \
                       kDetails, reduction_flags(), run_reduction)

CONCCL_REDUCTION_COMMAND("reducescatter", 56, "reduce-scatter size sweep: DMA moves + a reduce step per rank")
CONCCL_REDUCTION_COMMAND("allreduce", 57, "all-reduce size sweep: DMA moves + a reduce step per rank")
CONCCL_REDUCTION_COMMAND("reduce", 58, "reduce size sweep: DMA moves + a reduce step on the root")

}  // namespace
}  // namespace probe
