// src/collectives/reduce_calls.cpp - Communicator::call_reduction:
// reduce-scatter, all-reduce and reduce as DMA moves (through call(), so
// windows, the plan cache and the stream protocol apply unchanged) into a
// staging buffer per rank, and one reduce step per rank and piece
// (StreamOps::reduce on a stream, Device::reduce_now without one).
//
// Ordering needs nothing new: a move into a rank's staging is a call, and a
// call's lists start only once every rank's stream (or host) has reached
// it, so the reduce step queued before it on that rank's stream has run;
// the reduce step of a piece is queued after the move's waits (its data in
// place, its own lists ended).
#include <algorithm>
#include <optional>

#include "collectives/reduce_calls.hpp"

#include "collectives/builder.hpp"

namespace conccl {

ReduceState::~ReduceState() {
  for (const Buffer& b : staging)
    if (b.va) (void)comm.device_.free_for_compute(b);
}

Status ReduceState::ensure() {
  if (!staging.empty()) return Status();
  const int n = comm.size();
  std::vector<Buffer> made(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (!comm.local(r)) continue;
    Result<Buffer> b = comm.device_.alloc_for_compute(comm.gpu(r), comm.options_.reduce_staging_bytes);
    if (!b.ok()) {
      for (const Buffer& m : made)
        if (m.va) (void)comm.device_.free_for_compute(m);
      return b.status().prefix("allocating " + std::to_string(comm.options_.reduce_staging_bytes) +
                               " bytes of reduction staging on GPU " + std::to_string(comm.gpu(r)) +
                               " (Options::reduce_staging_bytes)");
    }
    made[static_cast<size_t>(r)] = *b;
  }
  staging = std::move(made);
  if (comm.rank() >= 0) {
    Result<Window> w = comm.register_window(staging[static_cast<size_t>(comm.rank())]);
    if (!w.ok()) return w.status().prefix("registering the reduction staging as a window");
    window = *w;
  }
  return Status();
}

namespace {

// All-reduce from this size on (bytes per rank): reduce-scatter +
// all-gather, which moves 2(n-1)/n of the data per rank instead of the
// one shot's n - 1 times it, at the price of two more calls.
constexpr uint64_t kAllReduceTwoStepBytes = 256 << 10;

Buffer slice(const Buffer& b, uint64_t offset, uint64_t bytes) { return b.slice(offset, bytes); }

const char* const kCollNames[] = {"reducescatter", "allreduce", "reduce"};
const char* const kCollAliases[] = {"reduce_scatter", "all_reduce", "reduce"};

}  // namespace

const char* reduce_coll_name(ReduceColl c) {
  const size_t i = static_cast<size_t>(c);
  return i < 3 ? kCollNames[i] : "?";
}

bool parse_reduce_coll(const std::string& name, ReduceColl* out) {
  for (size_t i = 0; i < 3; ++i)
    if (name == kCollNames[i] || name == kCollAliases[i]) {
      *out = static_cast<ReduceColl>(i);
      return true;
    }
  return false;
}

Status reduce_through_host_mapping(Device& device, const DeviceReduceStep& step) {
  const size_t bytes = step.count * dtype_size(step.dtype);
  std::vector<const void*> in;
  for (size_t i = 0; i < step.inputs.size(); ++i) {
    const void* p = step.count ? device.compute_pointer(step.inputs[i], bytes) : nullptr;
    if (step.count && !p)
      return error(Code::invalid_argument, "reduce: input " + std::to_string(i) + " at " + hex(step.inputs[i]) +
                                               " (" + std::to_string(bytes) + " bytes) has no host mapping");
    in.push_back(p);
  }
  void* out = step.count ? device.compute_pointer(step.out, bytes) : nullptr;
  if (step.count && !out)
    return error(Code::invalid_argument,
                 "reduce: the output at " + hex(step.out) + " (" + std::to_string(bytes) + " bytes) has no host mapping");
  ReduceStep s;
  s.dtype = step.dtype;
  s.op = step.op;
  s.count = step.count;
  s.inputs = in;
  s.out = out;
  return reduce_on_host(s);
}

namespace {

// The arguments against the communicator: types, counts, root, and each
// given buffer's size and reach. `across`: ranks in separate processes.
Status validate_reduction(const Communicator& comm, const ReductionArgs& a, const std::string& name) {
  const int n = comm.size(), me = comm.rank();
  const bool across = me >= 0;
  if (!valid_dtype(static_cast<int>(a.dtype)))
    return error(Code::invalid_argument, name + ": unknown element type " + std::to_string(static_cast<int>(a.dtype)));
  if (!valid_reduce_op(static_cast<int>(a.op)))
    return error(Code::invalid_argument, name + ": unknown operator " + std::to_string(static_cast<int>(a.op)));
  if (static_cast<size_t>(a.coll) > 2) return error(Code::invalid_argument, name + ": unknown reduction");
  if (a.count == 0) return error(Code::invalid_argument, name + ": count must be > 0");
  if (a.root < 0 || a.root >= n)
    return error(Code::invalid_argument, name + ": root " + std::to_string(a.root) + " is not a rank of this " +
                                             std::to_string(n) + "-rank communicator");
  const uint64_t es = dtype_size(a.dtype);
  if (a.count > (uint64_t{1} << 56) / (es * static_cast<uint64_t>(n)))
    return error(Code::out_of_range, name + ": count " + std::to_string(a.count) + " of " + dtype_name(a.dtype) +
                                         " on " + std::to_string(n) + " ranks is more bytes than any buffer holds");
  // What each rank gives: send[r] of send_elems, recv[r] of recv_elems
  // (reduce: the root's alone).
  const uint64_t send_elems = a.coll == ReduceColl::reduce_scatter ? a.count * n : a.count;
  auto needs_recv = [&](int r) { return a.coll != ReduceColl::reduce || r == a.root; };
  const size_t given = across ? 1 : static_cast<size_t>(n);
  if (a.send.size() != given || (a.recv.size() != given && !(across && a.recv.empty() && !needs_recv(me))))
    return error(Code::invalid_argument,
                 name + ": give " + (across ? std::string("this rank's buffers alone (send {mine}, recv {mine}; a "
                                                          "non-root rank of reduce may give no recv)")
                                            : "one send and one recv buffer per rank (" + std::to_string(n) + ")"));
  auto rank_of = [&](size_t i) { return across ? me : static_cast<int>(i); };
  for (size_t i = 0; i < given; ++i) {
    const int r = rank_of(i);
    if (a.send[i].size < send_elems * es)
      return error(Code::invalid_argument, name + ": rank " + std::to_string(r) + "'s send buffer has " +
                                               std::to_string(a.send[i].size) + " bytes; " + std::to_string(send_elems) +
                                               " elements of " + dtype_name(a.dtype) + " need " +
                                               std::to_string(send_elems * es));
    if (needs_recv(r) && (i >= a.recv.size() || a.recv[i].size < a.count * es))
      return error(Code::invalid_argument, name + ": rank " + std::to_string(r) + "'s recv buffer has " +
                                               std::to_string(i < a.recv.size() ? a.recv[i].size : 0) + " bytes; " +
                                               std::to_string(a.count) + " elements of " + dtype_name(a.dtype) +
                                               " need " + std::to_string(a.count * es));
  }
  // The reduce step writes the results: the GPU's compute must reach them.
  for (size_t i = 0; i < a.recv.size(); ++i)
    if (a.recv[i].va && needs_recv(rank_of(i)) && !comm.device().compute_reaches(a.recv[i].va, a.count * es))
      return error(Code::invalid_argument,
                   name + ": rank " + std::to_string(rank_of(i)) + "'s recv buffer at " + hex(a.recv[i].va) +
                       " is memory only the copy engines map; the reduce kernel writes it: use CUDA memory "
                       "(a PyTorch tensor, conccl_buffer_alloc_cuda, Device::alloc_for_compute)");
  return Status();
}

// One reduction call: its moves (calls of the communicator) into the
// staging, and the reduce steps over it, piece by piece.
//
// Stream-ordered, with Options::reduce_overlap (by default in one process),
// pieces overlap: the staging is two halves, and piece i's move (its stream
// waits held back: a window call across processes, a cached plan's enqueue
// in one process) is posted before the reduce of piece i-1 is queued, so
// the engines move piece i while the reduce kernel works on piece i-1; then
// the stream waits for piece i. The stream's order keeps it safe: piece i+1's move, which writes
// the half that piece i-1 occupied, is posted only after that piece's
// reduce, and no list starts before every rank's stream has reached the
// move's release. Elsewhere (on the host, while capturing, one piece) each
// piece's move ends before its reduce, as one buffer. (Across processes
// with send buffers outside windows the move queues its own waits, so
// pieces take turns as there.)
class ReductionRun {
 public:
  ReductionRun(Communicator& comm, ReduceState& state, const ReductionArgs& a, StreamOps* stream,
               uint64_t staging_bytes, bool may_overlap, Deadline dl)
      : comm_(comm), state_(state), a_(a), stream_(stream), n_(comm.size()), across_(comm.rank() >= 0),
        es_(dtype_size(a.dtype)), per_piece_(staging_bytes / (static_cast<uint64_t>(n_) * es_)),
        half_bytes_(staging_bytes / 2 / 256 * 256), half_piece_(half_bytes_ / (static_cast<uint64_t>(n_) * es_)),
        overlap_(may_overlap && stream && !stream->capturing() && half_piece_ > 0), dl_(dl) {}

  Status run() {
    switch (a_.coll) {
      case ReduceColl::reduce_scatter: return reduce_scatter(a_.count, [&](int r) { return recv_of(r).va; });
      case ReduceColl::reduce: return gathered(0, a_.count, false);
      case ReduceColl::all_reduce: return all_reduce();
    }
    return error(Code::invalid_argument, "unknown reduction");
  }

 private:
  const Buffer& send_of(int r) const { return a_.send[across_ ? 0 : static_cast<size_t>(r)]; }
  const Buffer& recv_of(int r) const { return a_.recv[across_ ? 0 : static_cast<size_t>(r)]; }
  const Buffer& staging_of(int r) const { return state_.staging[static_cast<size_t>(r)]; }

  // A piece: elements [e0, e0 + c) of each rank's slice, in the staging at
  // byte offset `at` (0, or the second half when pieces overlap).
  struct Piece {
    uint64_t e0, c, at;
  };

  // Runs move(piece, deferred) and reduce(piece) over [0, total) elements
  // in pieces, overlapped as the class comment says where it can be.
  template <typename Move, typename Reduce>
  Status pieces(uint64_t total, Move&& move, Reduce&& reduce) {
    const uint64_t step = overlap_ ? half_piece_ : per_piece_;
    if (!overlap_ || total <= step) {
      for (uint64_t e0 = 0; e0 < total; e0 += per_piece_) {
        const Piece p{e0, std::min(per_piece_, total - e0), 0};
        CONCCL_RETURN_IF_ERROR(move(p, nullptr));
        CONCCL_RETURN_IF_ERROR(reduce(p));
      }
      return Status();
    }
    std::optional<Piece> prev;
    std::vector<StreamOps::Op> waits;
    uint64_t i = 0;
    for (uint64_t e0 = 0; e0 < total; e0 += step, ++i) {
      const Piece p{e0, std::min(step, total - e0), (i % 2) * half_bytes_};
      CONCCL_RETURN_IF_ERROR(move(p, &waits));
      if (prev) CONCCL_RETURN_IF_ERROR(reduce(*prev));
      if (!waits.empty()) CONCCL_RETURN_IF_ERROR(stream_->batch(waits).prefix("waiting for a piece's move"));
      prev = p;
    }
    return reduce(*prev);
  }

  // One move: `fill(r, &send, &recv)` gives rank r's buffers (empty where
  // the op takes none on r); across processes only this rank's. Across
  // processes a non-root rank of a gather names its own staging slice as
  // recv: through windows that says where the root's sits (the staging is
  // symmetric); the cached path drops it.
  template <typename Fill>
  Status move(CollOp op, uint64_t bytes, int root, Fill&& fill, uint64_t send_stride = 0,
              std::vector<StreamOps::Op>* deferred = nullptr) {
    CollectiveArgs m;
    m.op = op;
    m.bytes = bytes;
    m.root = root;
    m.send_stride = send_stride;
    for (int r = 0; r < n_; ++r) {
      if (!comm_.local(r)) continue;
      Buffer s, v;
      fill(r, &s, &v);
      if (across_) {
        if (s.va) m.send.push_back(s);
        if (v.va) m.recv.push_back(v);
      } else {
        m.send.push_back(s);
        m.recv.push_back(v);
      }
    }
    if (deferred) deferred->clear();
    return state_.move(m, stream_, deferred);
  }

  // Rank r's reduce of `c` elements over the n slices of its staging from
  // byte `at` into `out` (an engine address).
  Status reduce_into(int r, uint64_t c, uint64_t at, uint64_t out) {
    DeviceReduceStep step;
    step.gpu = comm_.gpu(r);
    step.dtype = a_.dtype;
    step.op = a_.op;
    step.count = c;
    Device& dev = comm_.device();
    for (int q = 0; q < n_; ++q) step.inputs.push_back(dev.compute_address(staging_of(r).va + at + q * c * es_));
    step.out = dev.compute_address(out);
    return stream_ ? stream_->reduce(step) : dev.reduce_now(step, dl_);
  }

  // The reduce of every local rank whose out_of(r) is not 0.
  template <typename OutOf>
  Status reduce_local(const Piece& p, OutOf&& out_of) {
    for (int r = 0; r < n_; ++r)
      if (comm_.local(r) && out_of(r)) CONCCL_RETURN_IF_ERROR(reduce_into(r, p.c, p.at, out_of(r)));
    return Status();
  }

  // reduce_scatter over chunks of C elements: rank r's result goes to
  // out_of(r) + e*es for element e of its chunk.
  template <typename OutOf>
  Status reduce_scatter(uint64_t C, OutOf&& out_of) {
    const uint64_t es = es_;
    // One all-to-all per piece: destination d's slice of it sits at d*C + e0
    // of each send buffer (a stride of C elements; packed when the whole
    // chunk is one piece), and lands in d's staging at the sender's place.
    auto move_piece = [&](const Piece& p, std::vector<StreamOps::Op>* deferred) {
      return move(CollOp::all_to_all, p.c * es, 0, [&](int r, Buffer* s, Buffer* v) {
        *s = slice(send_of(r), p.e0 * es, ((n_ - 1) * C + p.c) * es);
        *v = slice(staging_of(r), p.at, n_ * p.c * es);
      }, p.c == C ? 0 : C * es, deferred);
    };
    return pieces(C, move_piece,
                  [&](const Piece& p) { return reduce_local(p, [&](int r) { return out_of(r) + p.e0 * es; }); });
  }

  // Every rank's elements [first, first + total) gathered into every rank's
  // staging (all_reduce) or the root's (reduce), then reduced there.
  Status gathered(uint64_t first, uint64_t total, bool to_all) {
    const uint64_t es = es_;
    auto move_piece = [&](const Piece& p, std::vector<StreamOps::Op>* deferred) {
      const uint64_t at = (first + p.e0) * es;
      if (to_all)
        return move(CollOp::all_gather, p.c * es, 0, [&](int r, Buffer* s, Buffer* v) {
          *s = slice(send_of(r), at, p.c * es);
          *v = slice(staging_of(r), p.at, n_ * p.c * es);
        }, 0, deferred);
      return move(CollOp::gather, p.c * es, a_.root, [&](int r, Buffer* s, Buffer* v) {
        *s = slice(send_of(r), at, p.c * es);
        if (across_ || r == a_.root) *v = slice(staging_of(r), p.at, n_ * p.c * es);
      }, 0, deferred);
    };
    return pieces(total, move_piece, [&](const Piece& p) {
      const uint64_t at = (first + p.e0) * es;
      return reduce_local(p, [&](int r) -> uint64_t { return to_all || r == a_.root ? recv_of(r).va + at : 0; });
    });
  }

  // Large counts: reduce-scatter of n chunks of C, each rank's result in
  // place in its recv, then an all-gather in place; the remainder (count
  // mod n elements) and small counts in one shot.
  Status all_reduce() {
    const uint64_t es = es_, C = a_.count / n_;
    const bool two_step = C > 0 && a_.count * es >= kAllReduceTwoStepBytes;
    uint64_t done = 0;
    if (two_step) {
      CONCCL_RETURN_IF_ERROR(reduce_scatter(C, [&](int r) { return recv_of(r).va + r * C * es; }));
      CONCCL_RETURN_IF_ERROR(move(CollOp::all_gather, C * es, 0, [&](int r, Buffer* s, Buffer* v) {
        *s = slice(recv_of(r), r * C * es, C * es);
        *v = slice(recv_of(r), 0, n_ * C * es);
      }));
      done = n_ * C;
    }
    return done < a_.count ? gathered(done, a_.count - done, true) : Status();
  }

  Communicator& comm_;
  ReduceState& state_;
  const ReductionArgs& a_;
  StreamOps* stream_;
  const int n_;
  const bool across_;
  const uint64_t es_;
  const uint64_t per_piece_;   // elements of each rank's slice per piece (in the whole staging)
  const uint64_t half_bytes_;  // the second half's offset (256-byte aligned)
  const uint64_t half_piece_;  // elements of each rank's slice per piece in one half
  const bool overlap_;         // pieces overlap, half the staging each
  const Deadline dl_;
};

}  // namespace

Status Communicator::call_reduction(const ReductionArgs& a, StreamOps* stream) {
  const std::string name = std::string("call ") + reduce_coll_name(a.coll);
  CONCCL_RETURN_IF_ERROR(validate_reduction(*this, a, name));
  if (calls_) CONCCL_RETURN_IF_ERROR(async_error());
  // On a capturing stream the moves below are captured calls (call()
  // records them) and the reduce steps recorded steps of the stream: no
  // step here waits on the host, so a replay runs the whole reduction.
  if (stream && !stream->capturing()) CONCCL_RETURN_IF_ERROR(stream->ready_to_order().prefix(name));
  if (!reduce_) reduce_ = std::make_unique<ReduceState>(*this);
  CONCCL_RETURN_IF_ERROR(reduce_->ensure().prefix(name));
  const uint64_t stage = options_.reduce_staging_bytes;
  if (stage < size() * dtype_size(a.dtype))
    return error(Code::invalid_argument, name + ": Options::reduce_staging_bytes (" + std::to_string(stage) +
                                             ") holds less than one element per rank");
  ReductionRun run(*this, *reduce_, a, stream, stage, options_.reduce_overlap.value_or(rank() < 0),
                   Deadline::after_ms(options_.call_timeout_ms));
  return run.run().prefix(name);
}

}  // namespace conccl
