// conccl/collectives.hpp - collectives executed entirely on DMA engines.
//
// A Communicator is a set of GPUs with ranks (one GPU per rank, or several
// ranks per GPU in loopback mode). A collective
// compiles once into a Plan: per-(rank, engine) command lists plus the
// signals that order them. A Plan can be launched many times, and launched
// "prelaunched": queued behind a trigger that one write releases.
//
// Buffers are given per rank as conccl::Buffer (address, size, owning GPU).
// All ranks may live in one process (Communicator::create(device, gpus)), or
// one process per rank (Communicator::create(device, rank, nranks, id)):
// then each rank gives its own buffers, the ranks exchange them as shared
// memory, and every rank compiles the same plan (docs/multiprocess.md).
//
// Sizes (`bytes` is the per-rank chunk, like NCCL's count):
//   p2p         send[root] (bytes)                -> recv[peer]
//   broadcast   send[root] (bytes)                -> recv[r] for every r
//   gather      send[r] (bytes)                   -> recv[root] + r*bytes
//   scatter     send[root] + r*bytes              -> recv[r] (bytes)
//   all_gather  send[r] (bytes)                   -> recv[d] + r*bytes for every d
//   all_to_all  send[r] + d*bytes                 -> recv[d] + r*bytes
// In-place forms are allowed where NCCL allows them (all_gather with
// send[r] == recv[r] + r*bytes; broadcast with send[root] == recv[root];
// all_to_all with send[r] == recv[r]; gather/scatter with the root's chunk in
// place).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "conccl/bootstrap.hpp"
#include "conccl/device.hpp"
#include "conccl/queue.hpp"
#include "conccl/reduce.hpp"
#include "conccl/signal.hpp"

namespace conccl {

enum class CollOp : uint8_t { p2p, broadcast, gather, scatter, all_gather, all_to_all };
const char* coll_op_name(CollOp op);
bool parse_coll_op(const std::string& name, CollOp* out);  // "allgather", "all_gather", ...

enum class Variant : uint8_t {
  automatic,  // chosen by size and topology (docs/collectives.md)
  pcpy,       // one engine per (source, destination) pair
  bcst,       // broadcast copies: one command feeds two destinations (needs Caps::broadcast_copy)
  b2b,        // back to back: several destinations per engine, one sync point
  swap,       // all-to-all by in-place swaps (needs Caps::swap: SDMA 4.4.2)
  fanout,     // broadcast/scatter: the root's engines copy to each peer
  chain,      // broadcast: pipelined chain root -> r1 -> r2 ... in chunks
  striped,    // p2p: split over several engines
  single,     // p2p: one engine
  pull,       // all-gather, one process: each destination's engine gathers every chunk into it
};
const char* variant_name(Variant v);
bool parse_variant(const std::string& name, Variant* out);
// The variants an op accepts (automatic included).
std::vector<Variant> variants_for(CollOp op);
// Whether engines with `caps` can run variant v, and if not, the capability
// it needs (for messages): "" when they can.
std::string variant_missing_cap(Variant v, const Caps& caps);

struct CollectiveArgs {
  CollOp op = CollOp::all_gather;
  Variant variant = Variant::automatic;
  uint64_t bytes = 0;          // per-rank chunk, see above
  int root = 0;                // broadcast/gather/scatter root; p2p source rank
  int peer = 1;                // p2p destination rank
  // Per rank. Broadcast, scatter and p2p read only the root's: give
  // {root's buffer} alone, or one per rank with the others empty.
  std::vector<Buffer> send;
  std::vector<Buffer> recv;    // per rank
  // Ranks in separate processes give only their own buffers: {mine}, or one
  // per rank with the others empty (a non-root rank of broadcast, scatter
  // or p2p gives no send buffer).
  // all_to_all: bytes from one destination's chunk to the next in send[r],
  // so that send[r] + d*send_stride goes to recv[d] + r*bytes; 0 means
  // `bytes` (packed, as NCCL's). Lets a call send a slice of each of the
  // chunks of a larger buffer (a reduce-scatter in pieces does). Not with
  // in-place buffers nor the swap variant.
  uint64_t send_stride = 0;
  bool prelaunch = false;      // gate every list behind the plan's trigger
  int engines = 0;             // p2p striped: engines to use (0 = all suitable)
  int b2b_ways = 0;            // b2b: destinations per engine (0 = all peers on one engine)
  int chain_chunks = 0;        // chain: pipeline chunks (0 = by size)
  // Each list ends with an engine timestamp (after its last arrival), read
  // with Plan::finish_timestamp(): when each engine finished, for profiling
  // and for hand-off latencies.
  bool timestamps = false;
};

// Reductions (docs/reductions.md): the engines move the data, one reduce
// step per rank adds it up. Sizes in elements of `dtype`, as NCCL's:
//   reduce_scatter  send[r]: n x count            -> recv[r]: count, the
//                   reduction over q of send[q][r*count, (r+1)*count)
//   all_reduce      send[r]: count                -> recv[r]: count, the
//                   reduction over q of send[q]
//   reduce          send[r]: count                -> recv[root]: count
// In place where NCCL allows it: reduce_scatter with send[r] + r*count ==
// recv[r], all_reduce with send[r] == recv[r], reduce on the root with
// send == recv. The inputs are reduced in rank order, 0 first
// (conccl/reduce.hpp gives the exact arithmetic), so every backend and
// every algorithm gives the same bits.
enum class ReduceColl : uint8_t { reduce_scatter, all_reduce, reduce };
const char* reduce_coll_name(ReduceColl c);  // "reducescatter", "allreduce", "reduce"
bool parse_reduce_coll(const std::string& name, ReduceColl* out);

struct ReductionArgs {
  ReduceColl coll = ReduceColl::all_reduce;
  DataType dtype = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  uint64_t count = 0;  // elements, see above
  int root = 0;        // reduce
  // As Communicator::call: this rank's buffers alone with one process per
  // rank ({mine}; a non-root rank of reduce gives no recv), every rank's in
  // one process.
  std::vector<Buffer> send, recv;
};

class Plan;
struct CallState;
struct ReduceState;
struct CachedCalls;
struct LocalReplays;

// Symmetric windows (docs/multiprocess.md, "Windows"): one buffer per rank,
// registered once by every rank together, after which every rank knows every
// peer's buffer. A collective call whose buffers lie inside windows needs no
// exchange between the ranks: each rank finds the peers' addresses at the
// same offsets into their windows (as NCCL's symmetric windows,
// ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC, require).
struct Window {
  int id = -1;    // the communicator's window number (the same on every rank)
  Buffer local;   // this rank's registered buffer
  bool valid() const { return id >= 0; }
  // This rank's bytes [offset, offset + bytes) of the window, as a Buffer.
  Buffer at(uint64_t offset, uint64_t bytes) const {
    Buffer b = local;
    b.va += offset;
    b.host = local.host ? static_cast<uint8_t*>(local.host) + offset : nullptr;
    b.size = bytes;
    return b;
  }
};

// What a stream-ordered call orders itself on: an ordered queue of device
// work that can store a 64-bit value once its earlier work is done and make
// its later work wait until a 64-bit value in memory is >= a target. A CUDA
// stream is one (nv::stream_ops: cuStreamWriteValue64 / cuStreamWaitValue64);
// HostStream is one run by a host thread (the emulator, tests).
class StreamOps {
 public:
  virtual ~StreamOps() = default;
  // After the work queued before it, store `value` at `va` (the address of a
  // signal word in memory the device hands out for signals).
  virtual Status write_value64(uint64_t va, uint64_t value) = 0;
  // The work queued after this waits until the value at `va` is >= `value`.
  virtual Status wait_value64(uint64_t va, uint64_t value) = 0;
  // After the work queued before it, store the 32-bit `value` at `va` (a
  // 4-aligned address: the low half of a 64-bit word at `va`, which is
  // little-endian on every device here). Captured calls record their replay
  // ticks with it (docs/graphs.md); streams that cannot say so.
  virtual Status write_value32(uint64_t va, uint32_t value) {
    (void)va;
    (void)value;
    return error(Code::unavailable, "this stream cannot store a 32-bit value (a CUDA stream or a HostStream can)");
  }
  // Several of the two, in order (wait: else a write). A stream that can
  // queue them in one step overrides it (CUDA: cuStreamBatchMemOp).
  struct Op {
    bool wait = false;
    uint64_t va = 0, value = 0;
    // A wait expected to end within microseconds (a small call's), which a
    // stream that can may poll for instead of waiting (a CUDA stream: a
    // one-thread kernel, CONCCL_STREAM_WAITS in docs/collectives.md). The
    // caller sets it only where polling cannot hold up other work for long.
    bool poll = false;
    // Another process of the call's communicator uses this rank's GPU (a
    // CUDA stream polls by default only then, and only under CUDA MPS).
    bool shares_gpu = false;
  };
  // One reduction (addresses: Device::compute_address), run in order with
  // the rest: a kernel on a CUDA stream, the host on a HostStream. Streams
  // that cannot run one say so.
  virtual Status reduce(const DeviceReduceStep& step) {
    (void)step;
    return error(Code::unavailable, "this stream cannot run a reduction (a CUDA stream or a HostStream can)");
  }
  // An error when work queued now would not run in order now: a CUDA
  // stream capturing a graph records its stream operations for replay,
  // while the lists a call submits to the engines run at once and would
  // wait for a trigger that only a replay stores (issue #29). Calls check
  // it before they submit anything.
  virtual Status ready_to_order() { return Status(); }
  // ---- graph capture (docs/graphs.md) ----
  // Whether work queued now is recorded for replays instead of run: a CUDA
  // stream capturing a graph (where the library records collectives:
  // unless CONCCL_CUDA_GRAPHS=0), a HostStream between begin_capture() and
  // end_capture(). Communicator::call records a call made then (through
  // windows); what cannot be recorded refuses at capture time.
  virtual bool capturing() const { return false; }
  // While capturing: at this point of every replay, in order with the rest
  // (CUDA: a one-thread kernel node, because a graph's memory-operation
  // nodes store only fixed values): when the word at `stop` is 0, store 0 at
  // `reset`, then add 1 to the word at `counter`; otherwise store 1 at
  // `reset`. A captured call's lists wait on the engines for `counter` to
  // reach their replay, and its stream waits for `reset` >= 1, which is
  // added once the replay is done. This is the kernel form of a capture's tick
  // (CONCCL_REPLAY_TICK=kernel); the default form records only stores
  // (write_value32, write_value64) and lets the communicator's keeper count
  // (docs/graphs.md).
  struct ReplayTick {
    uint64_t counter = 0, reset = 0, stop = 0;  // signal words (addresses as for write_value64)
  };
  virtual Status replay_tick(const ReplayTick& tick) {
    (void)tick;
    return error(Code::unavailable, "this stream cannot record a replay tick (a CUDA stream or a HostStream can)");
  }
  // While capturing: `what` stays alive as long as the recording (CUDA: a
  // user object retained by the graph), so a graph owns what its replays use.
  virtual Status retain_for_replays(std::shared_ptr<void> what) {
    (void)what;
    return error(Code::unavailable, "this stream cannot keep objects alive for its recording");
  }
  virtual Status batch(std::span<const Op> ops) {
    for (const Op& op : ops) {
      Status st = op.wait ? wait_value64(op.va, op.value) : write_value64(op.va, op.value);
      if (!st.ok()) return st;
    }
    return Status();
  }
};

// A StreamOps run in order by a host thread: its stores, its waits (polling
// the value until it is reached or wait_timeout passes, which is then an
// error of the stream) and the caller's own work (enqueue). For the
// emulated backend and tests, where there is no CUDA stream: the calls'
// protocol is the same.
class HostStream final : public StreamOps {
 public:
  // `device`: where the signal words live (their host mapping).
  static Result<std::unique_ptr<HostStream>> create(Device& device, int64_t wait_timeout_ms = 120000);
  ~HostStream() override;  // runs what is queued first (each wait bounded by wait_timeout)
  Status write_value64(uint64_t va, uint64_t value) override;
  Status wait_value64(uint64_t va, uint64_t value) override;
  Status write_value32(uint64_t va, uint32_t value) override;
  // The reduction on the host, through the device's host mapping.
  Status reduce(const DeviceReduceStep& step) override;
  // Host work run in order with the rest (a producer or consumer of data).
  Status enqueue(std::function<void()> work);
  // Waits until everything queued so far has run; returns the first error
  // of the stream (a wait that timed out), which it then forgets.
  Status synchronize(Deadline deadline);

  // Capture, as CUDA's stream capture does: between begin_capture() and
  // end_capture() what is queued (stores, waits, work, reductions, replay
  // ticks) is recorded, not run; the Recording queues all of it again
  // on each launch (one replay), in the order recorded. Objects given to
  // retain_for_replays() live as long as the Recording.
  class Recording {
   public:
    ~Recording();
    Status launch(HostStream& stream) const;
    size_t steps() const;

   private:
    friend class HostStream;
    struct Impl;
    std::unique_ptr<Impl> impl_;
  };
  Status begin_capture();
  Result<std::unique_ptr<Recording>> end_capture();
  bool capturing() const override;
  Status replay_tick(const ReplayTick& tick) override;
  Status retain_for_replays(std::shared_ptr<void> what) override;

 private:
  struct Impl;
  explicit HostStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What a communicator has done, for counting host round trips.
struct CommStats {
  uint64_t bootstrap_messages_sent = 0;      // point-to-point messages over the bootstrap sockets
  uint64_t bootstrap_messages_received = 0;
  uint64_t calls = 0;          // collective calls (Communicator::call and the NCCL-shaped forms)
  uint64_t window_calls = 0;   // of them, through windows: no message between the ranks
  uint64_t window_plans = 0;   // plans compiled for window calls (once per distinct call)
  uint64_t cached_plans = 0;   // plans kept now for calls outside windows
  // Gated submission (CONCCL_GATED_SUBMIT=1, docs/collectives.md): stream-
  // ordered window calls whose lists were held until every rank posted the
  // call, and of them those published before that (the gate's spin ran out).
  uint64_t gated_calls = 0;
  uint64_t gates_opened_early = 0;
  // Captured calls' replays (docs/graphs.md), as the communicator's keeper
  // sees them: replays seen to end; the nanoseconds from seeing each one's
  // tick to seeing its end (its lists, the keeper's look and end); and from
  // seeing an end to seeing the next tick (the stream passing its wait, the
  // graph's next launch, its tick's stores).
  uint64_t replays = 0;
  uint64_t replay_busy_ns = 0;
  uint64_t replay_idle_ns = 0;
};

class Communicator {
 public:
  struct Options {
    size_t ring_bytes = 256 * 1024;  // ring of each (rank, engine) queue
    // Several ranks may share a GPU (each with its own buffers and its own
    // queue per engine): how one GPU runs every collective, like nccl-tests
    // with several ranks per GPU. Off: a GPU given twice is an error.
    bool loopback = false;
    // The engine ids the plans may use on every GPU (empty: all). A
    // bandwidth budget for transfers beside compute: on an H200 at its power
    // cap, what copies cost a GEMM grows with the bandwidth they use
    // (docs/perf/h200.md), so give a collective that only has to finish
    // within a compute phase the engines that make that rate, no more
    // (nv::pick_for_rate chooses them).
    std::vector<int> engines;
    // Which queues the ranks of one GPU (loopback) use on an engine:
    //  per_rank    each rank its own queue (one channel each on NVIDIA);
    //  per_engine  one queue per engine shared by the GPU's ranks, which the
    //              engine runs one list after another instead of
    //              time-slicing between channels (a third of the channels
    //              for 4 ranks on an H200; no speed difference measured:
    //              docs/perf/h200-collectives.md runs 20-22). A list on a
    //              shared queue runs only after those
    //              queued before it, so variants whose lists wait on each
    //              other (chain broadcast, swap all-to-all out of place)
    //              are refused, and Variant::automatic avoids them;
    //  automatic   per_engine for plans whose lists do not wait on each
    //              other, per_rank for those that do.
    // Without loopback every GPU has one rank and the three are the same.
    enum class QueueSharing : uint8_t { automatic, per_rank, per_engine };
    QueueSharing queues = QueueSharing::automatic;
    // Ranks in separate processes: this rank's GPU on `device` (-1: rank
    // modulo the device's GPU count), and how long create() and plan() wait
    // for the other ranks to make the same call.
    int gpu = -1;
    int64_t join_timeout_ms = 60000;
    // Collective calls (call(), all_gather(), ...): how long a call may take,
    // from the call to its data in place. A call on a stream that has not
    // completed by then (a rank died or stopped calling) fails the
    // communicator: async_error() names the rank, and the stream is
    // released (its waits are satisfied) rather than left waiting forever.
    int64_t call_timeout_ms = 60000;
    // Reductions: staging memory per rank (taken on the first reduction,
    // kept, and registered as a window across processes). A call whose
    // data does not fit runs in pieces that reuse it.
    uint64_t reduce_staging_bytes = 64ull << 20;
    // Stream-ordered reductions in pieces: the staging as two halves, the
    // engines moving one piece while the reduce kernel works on the one
    // before (docs/reductions.md). Unset: on with every rank in this
    // process (on an H100, 4 loopback ranks: reduce-scatter 21-26 % and
    // all-reduce 9-18 % faster at 128-256 MiB, docs/perf/h200-collectives.md
    // run 43), off with one process per rank (on one H200 shared by 4
    // processes it was 23-32 % slower, run 39). Set it to choose.
    std::optional<bool> reduce_overlap;
    // Arrivals carried by the copies: where the engine can add to a signal
    // as a copy ends (Caps::copy_add: Hopper's LAUNCH_DMA semaphore
    // reduction), the copy into rank d adds d's arrival itself, instead of
    // an add after the list's copies that first waits for the engine to
    // drain (docs/collectives.md, "Completion and ordering"). Unset:
    // CONCCL_FOLD_ARRIVALS=1 turns it on, else off: on an H100 it saved at
    // most 0.8 us of a 1 KiB all-gather (docs/perf/h200-collectives.md, run
    // 46). Plans are the same either way on instruction sets without it.
    std::optional<bool> fold_arrivals;
    // Large copies of a communicator whose ranks all share one GPU
    // (loopback), split over all of the GPU's engines by weight (PCEs on
    // Hopper), as a striped p2p is: a copy of at least this many bytes puts
    // a share on every engine, so that every rank count keeps every engine
    // busy, where whole copies by weighted round robin leave the light
    // engines idle with few ranks (2 ranks on an H200: every copy on
    // LCE4). 0: never. Unset: CONCCL_STRIPE_MIN_BYTES (bytes, K/M/G
    // suffixes), else 8 MiB with 8 or more ranks, 32 MiB with 2, and 0
    // with 3 to 7: on an H100 8 ranks' copies of 8 MiB ran 1.79x faster
    // striped, on an H200 2 ranks' whole copies all took LCE4 and moved
    // 75-95 % of the striped p2p's rate against 100-106 % striped, and 4
    // ranks' whole copies were as fast on both (docs/perf/h200-collectives.md,
    // runs 48 and 63).
    // Every rank of a communicator must use the same value (it is part of
    // the options that ranks compare when they join).
    std::optional<uint64_t> stripe_min_bytes;
  };
  // gpus[r] is rank r's GPU index on `device`.
  static Result<std::unique_ptr<Communicator>> create(Device& device, std::vector<int> gpus,
                                                      const Options& options);
  static Result<std::unique_ptr<Communicator>> create(Device& device, std::vector<int> gpus) {
    return create(device, std::move(gpus), Options{});
  }
  // Rank `rank` of `nranks`, one process per rank: every rank calls this
  // with the same id (make_unique_id() in one process, handed to the others)
  // and the same nranks and options, on a device opened with its own
  // DeviceOptions::process_slot. Returns once every rank has joined; the
  // error names the ranks that did not by Options::join_timeout_ms.
  // Collective calls (plan, launch) must then be made by every rank in the
  // same order; buffers are each rank's own (CollectiveArgs::send/recv:
  // {this rank's} or one per rank). See docs/multiprocess.md.
  static Result<std::unique_ptr<Communicator>> create(Device& device, int rank, int nranks, const UniqueId& id,
                                                      const Options& options);
  static Result<std::unique_ptr<Communicator>> create(Device& device, int rank, int nranks, const UniqueId& id) {
    return create(device, rank, nranks, id, Options{});
  }
  // Destroying a communicator that still has plans is safe: each of its
  // plans is first detached, as if destroyed (its launch waited for, up to
  // 10 s; a prelaunched launch released; its signals freed), and then stays
  // an inert object whose calls return Code::invalid_argument naming the
  // destroyed communicator, and whose destructor does nothing more. Destroy
  // plans first to see their errors; any order is safe.
  ~Communicator();

  // This process's rank, or -1 when every rank lives in this process.
  int rank() const { return me_; }
  // Whether rank r's lists run in this process.
  bool local(int r) const { return me_ < 0 || r == me_; }
  // An error naming ranks whose process has gone (ok in one process).
  Status check_peers(const std::string& doing) const;
  // The ranks' connections (null in one process), for a transport's own
  // exchanges between plans: every rank must make the same calls.
  Bootstrap* bootstrap() const { return boot_.get(); }

  int size() const { return static_cast<int>(gpus_.size()); }
  // Rank's GPU as this process numbers its GPUs. In a multi-process
  // communicator whose ranks cannot all see each other's GPUs (per-rank
  // isolation: docs/multiprocess.md), another rank's GPU has no index here:
  // gpu() then gives this rank's own GPU, of the same kind, as its stand-in
  // (its engines plan that rank's lists), and same_gpu() tells the GPUs apart.
  int gpu(int rank) const { return gpus_[static_cast<size_t>(rank)]; }
  // Whether ranks a and b are on one physical GPU (they share its engines).
  bool same_gpu(int a, int b) const { return gpu_keys_[static_cast<size_t>(a)] == gpu_keys_[static_cast<size_t>(b)]; }
  int rank_of_gpu(int gpu) const;  // -1 when not in the communicator
  Device& device() const { return device_; }
  const Isa& isa(int rank) const;
  // What every rank's engines can do (the intersection over the ranks' GPUs).
  const Caps& caps() const { return caps_; }
  bool loopback() const { return options_.loopback; }
  const Options& options() const { return options_; }

  // The engine of `src`'s GPU that copies to `dst`'s GPU: the topology's
  // recommended engines for that link (k-th of them), else a weighted round
  // robin over src's xGMI engines (all engines when it has none), each engine
  // taking peers in proportion to its weight (NVIDIA: its PCE count).
  int engine_for(int src, int dst, int k = 0) const;
  // Engines of src suitable for traffic to dst, recommended first.
  std::vector<int> engines_toward(int src, int dst) const;

  // The queue on (rank, engine), created on first use; `shared`: the one
  // queue of the rank's GPU on that engine (QueueSharing::per_engine).
  Result<Queue*> queue(int rank, int engine, bool shared = false);

  // Compiles a collective. Validates everything first: nothing is submitted.
  Result<std::unique_ptr<Plan>> plan(const CollectiveArgs& args);

  // ---- windows and one-call collectives (ranks in separate processes) ----
  // Registers this rank's `mine` as window number w (collective: every rank
  // calls it, in the same order, each with its own buffer; sizes may differ).
  // Every rank maps every peer's buffer once. Buffers of the device
  // (Device::alloc, nv::register_cuda).
  Result<Window> register_window(const Buffer& mine);
  // Collective; refused while a call that uses the window is in flight.
  Status deregister_window(const Window& w);
  // The window of this rank that holds [b.va, b.va + bytes), or invalid.
  Window window_of(const Buffer& b, uint64_t bytes) const;

  // One collective, planned, launched and ordered in one call, as NCCL's
  // calls are: `args.send` / `args.recv` hold this rank's buffers alone
  // ({mine}, or empty where the op reads or writes none on this rank; the
  // root's send for broadcast/scatter, the root's recv for gather). Every
  // rank makes the same calls in the same order.
  //   - Buffers inside windows, at the same offsets on every rank: no
  //     message between the ranks. Each rank's queues get the call's lists
  //     gated on every rank's "posted k" signal; each rank posts k (from the
  //     stream or the host) when it reaches call k; each rank's lists
  //     advance the receivers' arrival and their own rank's sent counters.
  //     Counters only grow, so nothing is reset between calls. A rank that
  //     finds another rank making a different call k (op, size, root,
  //     windows or offsets) refuses it and fails the communicator.
  //   - Other buffers, and communicators of one process (then `send` and
  //     `recv` hold every rank's buffers, as for plan()): the plan is made
  //     once per distinct call (op, sizes, root, buffers) and cached, up to
  //     a few per call on a stream so that launches queue without a host
  //     wait. Across processes every call then exchanges one message with
  //     every rank (a vote that keeps the ranks' caches alike) and launches
  //     meet at the plan's barrier: slower than windows, for buffers that
  //     cannot be registered (docs/multiprocess.md).
  // `stream`: order the call on it and return at once (the stream posts k,
  // then waits for this rank's arrivals and sent counter); null: return
  // when this rank's data is in place and its lists have ended.
  Status call(const CollectiveArgs& args, StreamOps* stream = nullptr);
  // A reduction (ReductionArgs), planned, launched and ordered in one call:
  // its moves go through call() (windows when the buffers are in windows,
  // as the staging always is across processes), its reduce steps on
  // `stream` (StreamOps::reduce) or, without one, on the device
  // (Device::reduce_now) before the call returns. Every rank makes the
  // same calls in the same order. Algorithms (docs/reductions.md):
  // reduce_scatter = an all-to-all into each rank's staging, then one
  // reduce over the n slices; all_reduce = that plus an all-gather for
  // large counts that divide among the ranks, else every input gathered
  // into every rank's staging and reduced there (one shot); reduce = a
  // gather into the root's staging and one reduce. Data larger than the
  // staging runs in pieces.
  Status call_reduction(const ReductionArgs& args, StreamOps* stream = nullptr);
  // The first error of an asynchronous call (a stream-ordered call that
  // timed out, a rank that died or refused a call), or ok. Once set, every
  // call returns it: destroy the communicator and make a new one.
  Status async_error() const;
  CommStats stats() const;
  // The ranks whose processes have gone (their bootstrap socket hung up:
  // exited, crashed or destroyed their communicator), in rank order; empty
  // with every rank in one process. It asks the sockets, sends nothing and
  // does not wait: a health check between calls, or before waiting for a
  // rank that may never come.
  std::vector<int> ranks_gone() const;

 private:
  Communicator(Device& device, std::vector<int> gpus, std::vector<uint64_t> gpu_keys, Options options);
  // Signal addresses of every rank for one plan (ranks in separate processes).
  struct RankSignals {
    std::vector<uint64_t> arrive, ready, trigger, sent, stamps;  // per rank (sent: 0 unless prelaunch)
    bool monotonic = false;  // window calls: counters never reset, waits patched per call
  };
  // What Variant::automatic means for `args` (every rank's buffers given):
  // choose_variant's pick, or swap for an all-to-all in place (the one
  // variant that works in place); another variant as given.
  Variant automatic_variant(const CollectiveArgs& args, bool prelaunch) const;
  // Builds a validated plan with its lists on shared or per-rank queues.
  Result<std::unique_ptr<Plan>> compile(const CollectiveArgs& args, const CollectiveArgs& asked, bool shared,
                                        const RankSignals* mp = nullptr);
  // multiprocess.cpp: the exchange that turns this rank's arguments into
  // everyone's, and the pool its plans' signals come from.
  Result<std::unique_ptr<Plan>> plan_across_processes(const CollectiveArgs& given);
  Result<uint64_t> pool_take(size_t bytes);
  void pool_give(uint64_t va, size_t bytes);
  Status share_buffer(const Buffer& b, std::vector<SharedRegion>* regions, std::vector<int>* fds);
  // gpus_ with the key that tells physical GPUs apart: the node-wide GPU id
  // in a multi-process communicator, else the GPU index.
  static Result<std::unique_ptr<Communicator>> create(Device& device, std::vector<int> gpus,
                                                      std::vector<uint64_t> gpu_keys, const Options& options);
  Device& device_;
  std::vector<int> gpus_;
  std::vector<uint64_t> gpu_keys_;  // per rank: equal keys, one physical GPU
  bool node_ids_ = false;           // gpu_keys_ are node-wide GPU ids (GpuInfo::node_gpu_id)
  // The GPU index here of a buffer's GPU that rank `owner` sent as its index
  // `sent` and node-wide id: the rank on that GPU's stand-in, or the GPU
  // itself where this process sees it, else the owner's stand-in.
  int peer_gpu(int sent, uint64_t node_gpu_id, int owner) const;
  Options options_;
  Caps caps_;
  bool allowed(int engine) const;
  // The engines of `rank`'s GPU that collectives use (its xGMI engines, all
  // of them when it has none), allowed by Options::engines.
  std::vector<const EngineInfo*> engine_pool(int rank) const;
  // Small plans with ranks sharing a GPU: rank's lists on one engine of its
  // own, the GPU's i-th rank on its pool's i-th engine (round robin).
  int spread_engine(int rank) const;
  friend class PlanBuilder;
  std::map<std::pair<int, int>, std::unique_ptr<Queue>> queues_;
  // While a captured call compiles (captured_calls.cpp): its own queues,
  // which queue() makes and hands out instead of queues_.
  std::map<std::pair<int, int>, std::unique_ptr<Queue>>* queue_redirect_ = nullptr;
  // Ranks in separate processes.
  int me_ = -1;
  std::unique_ptr<Bootstrap> boot_;
  Buffer pool_{};                // this rank's signal memory, shared with every rank
  std::vector<bool> pool_used_;  // per 16-byte slot
  std::vector<std::pair<uint64_t, uint64_t>> shared_out_;  // (va, serial) of regions already given to the other ranks
  std::set<Plan*> plans_;  // every live plan it made, detached when it goes first
  // plans_ may shrink on another thread: a graph's captured plan goes when
  // CUDA (or the graph's owner) releases it (captured_calls.cpp).
  std::mutex plans_mu_;
  // Captured calls with every rank in this process (captured_calls.cpp).
  Status capture_local(const CollectiveArgs& args, StreamOps& stream);
  // Why a replay of such a call failed (async_error()), and the watchdog of
  // their replays; shared with the captures, which may outlive the
  // communicator.
  std::shared_ptr<LocalReplays> local_replays_;
  // calls.cpp: windows and one-call collectives (call(), its counters, plan
  // cache and watchdog); made on first use.
  friend struct CallState;
  std::unique_ptr<CallState> calls_;
  // cached_calls.cpp: call() for buffers outside windows; made on first use.
  std::unique_ptr<CachedCalls> cached_;
  // reduce_calls.cpp: reductions' staging; made on first use.
  friend struct ReduceState;
  // call(), and for a stream-ordered window call with `deferred` given, the
  // stream's waits for this rank's part are not queued but handed back in
  // *deferred (left empty otherwise), for the caller to queue later: how a
  // reduction runs the reduce of one piece while the engines move the next.
  Status call_impl(const CollectiveArgs& args, StreamOps* stream, std::vector<StreamOps::Op>* deferred);
  std::unique_ptr<ReduceState> reduce_;
  std::vector<uint64_t> pool_va_;  // every rank's signal pool (its call area first: calls.hpp)
  // Every rank's posted word in its GPU's memory (calls.hpp), 0 where a rank
  // has none; this rank's.
  std::vector<uint64_t> post_words_va_;
  Buffer post_words_{};
  CallState& calls();
  friend class Plan;
};

// One command list: packets for one queue.
struct PlanList {
  int rank = 0;
  int engine = 0;
  Queue* queue = nullptr;
  CommandBuffer cb;  // in the queue's instruction set
  std::vector<int> writes_to;  // ranks whose arrival signal this list advances
  bool waits_on_lists = false; // waits for another list's signal (not just the trigger)
  bool shared_queue = false;   // queue is the GPU's per-engine queue (QueueSharing)
  QueueSpan span;              // where the last launch put it
  // Plans of window calls (Communicator::call): the waits whose value grows
  // with each call, rewritten in cb before each submission.
  struct WaitPatch {
    uint32_t at = 0, dwords = 0;  // where the wait's encoding is in cb
    uint64_t va = 0;              // the signal
    uint8_t counter = 0;          // which of the rank's call counters (calls.hpp)
    int rank = 0;                 // whose
    uint64_t rel = 0;             // the value it waits for within one call
    CommandBuffer::WaitStyle style = CommandBuffer::WaitStyle::yield;
  };
  std::vector<WaitPatch> patches;
};

class Plan {
 public:
  // A plan uses its communicator's queues and signal memory. Either may be
  // destroyed first: a communicator destroyed before its plans detaches
  // them (see ~Communicator); a detached plan's calls return
  // Code::invalid_argument, running() is false and lists() is empty.
  // A plan destroyed while its launch runs first waits for it (up to 10 s),
  // so that no engine is left writing its freed signals; a prelaunched plan
  // never released (or handed to a writer that never stored) is released
  // first: its gated lists would otherwise block their queues forever.
  ~Plan();
  const CollectiveArgs& args() const { return args_; }
  // False once the communicator was destroyed (the plan is detached).
  bool attached() const { return comm_ != nullptr; }
  // The communicator that made it: only while attached().
  Communicator& communicator() const { return *comm_; }
  Variant variant() const { return variant_; }  // the chosen one (never automatic)
  const std::deque<PlanList>& lists() const { return lists_; }

  // Submits every list and (for a prelaunched plan) releases the trigger.
  // Errors: Code::busy while the previous launch is still running.
  Status launch(Deadline deadline);
  // Submits every list gated behind the trigger; release() starts them.
  Status prelaunch(Deadline deadline);
  Status release();
  // Hands the release of a prelaunched plan to another writer, such as a
  // compute stream: returns the stores that release it (make them in order:
  // cuStreamWriteValue64 / hipStreamWriteValue64 after the work the plan's
  // sources depend on), and counts the plan as released, so that wait(),
  // running() and the next launch behave as after release(). Nothing runs
  // until the stores land; wait() names the trigger when they never do.
  Result<std::vector<SignalStore>> release_by_stores();
  // After release_by_stores(): the store the writer makes once it no longer
  // reads this launch's signals (after its last wait on the arrivals). Until
  // it lands the plan counts as running, so that a relaunch, which resets
  // the signals, cannot strand a stream still waiting on them (the stream
  // would wait on arrivals that only its own later release can bring).
  SignalStore consumed_store() const;
  // Queues a plan compiled with CollectiveArgs::prelaunch on a stream and
  // returns: prelaunch(), then the stream releases it once its earlier work
  // is done, waits for this process's ranks' arrivals (across processes,
  // also for its rank's lists to end: they read its send buffer), and
  // stores consumed_store(). If the stream refuses the work, the host
  // releases the plan instead (it must not stay gated) and says so.
  Status enqueue(StreamOps& stream, Deadline deadline);
  // Waits until every destination has all its data. On timeout the error
  // names the stuck list's queue and engine and decodes its pending packets.
  // Across processes every rank waits for every launch (the wait ends when
  // all ranks' lists have ended; a gone rank is named).
  Status wait(Deadline deadline);
  // True while a launch has not completed.
  bool running() const;
  // Across processes: true from a launch (its lists submitted) until wait()
  // (or end_launch_known_done()) returns for it. Every rank must wait() for
  // every launch before the plan is launched again; in one process, false.
  bool unwaited() const { return launched_ && !synced_; }

  // Across processes, for a caller that coordinates the ranks itself (the C
  // API's NCCL-shaped calls, which exchange a message per call anyway):
  //   wait_here(): wait()'s waits for this process's part (its ranks' data in
  //     place, its lists ended) without the barrier; unwaited() stays true.
  //   end_launch_known_done(): the caller knows, from its own exchange, that
  //     every rank's part of the launch has ended (running() false there);
  //     ends the launch without wait()'s barrier. The next launch resets the
  //     signals and meets the other ranks at a barrier, as always.
  // In one process wait_here() is wait(), and end_launch_known_done() is
  // refused (nothing to coordinate).
  Status wait_here(Deadline deadline);
  Status end_launch_known_done();

  // Per-rank completion, for compute waits: rank r's receive buffer is
  // complete once arrival(r).value() >= arrivals_expected(r) (each launch
  // starts the counts from zero).
  // (A rank out of range, or a detached plan: an invalid Signal and 0.)
  const Signal& arrival(int rank) const { return at_or_invalid(arrive_, rank); }
  uint64_t arrivals_expected(int rank) const { return at_or_zero(expected_, rank); }
  // Prelaunch plans across processes: rank r's own lists have all ended, so
  // nothing reads its send buffer any more, once sent(r).value() >=
  // sent_expected(r). Its arrivals alone do not say so (r's lists write into
  // other ranks), so a stream that reuses the send buffer waits for both.
  // In one process sent_expected is 0 (every rank's arrivals together say
  // it there).
  const Signal& sent(int rank) const { return at_or_invalid(sent_, rank); }
  uint64_t sent_expected(int rank) const { return at_or_zero(sent_expected_, rank); }

  // With CollectiveArgs::timestamps: the engine's clock when lists()[i]
  // finished in the last completed launch (NVIDIA and the emulator: ns;
  // AMD: SDMA's global timestamp counter); 0 otherwise.
  uint64_t finish_timestamp(size_t list) const;

  // Human-readable per-engine command lists (decoded packets or methods).
  std::string describe() const;

 private:
  friend class Communicator;
  friend class PlanBuilder;
  friend struct CallState;
  friend struct CachedCalls;
  friend struct LocalCapture;
  Plan() = default;
  // enqueue(), with the stream's waits and its consumed_store() handed back
  // in *deferred instead of queued (when deferred is not null), for the
  // caller to queue later: how a one-process reduction runs the reduce of
  // one piece while the engines move the next (reduce_calls.cpp).
  Status enqueue_split(StreamOps& stream, Deadline deadline, std::vector<StreamOps::Op>* deferred);
  // What destruction does, callable by the communicator going first: ends
  // the launch (as ~Plan says), frees the signals and forgets the queues.
  void detach();
  // Releases a launch gated on a trigger nobody will release any more.
  void open_gates();
  // The error of a call on a detached plan (ok while attached).
  Status check_attached(const char* call) const;
  static const Signal& at_or_invalid(const std::vector<Signal>& v, int i);
  static uint64_t at_or_zero(const std::vector<uint64_t>& v, int i);
  Status submit_all(Deadline deadline);
  // Submits this process's lists: those for one queue as one submission
  // (one doorbell, and on SDMA one frame, per queue per launch), in list
  // order within the queue. `what` names the launch in errors. With `held`,
  // the submissions are held (Queue::submit_held) and *held gets each
  // queue and the ticket that releases its part.
  Status submit_lists(Deadline deadline, const std::string& what,
                      std::vector<std::pair<Queue*, uint64_t>>* held = nullptr);
  void reset_local_signals();
  // Waits for fn() in slices, checking between them that no rank's process
  // has gone (ranks in separate processes).
  template <typename Fn>
  Status wait_watching(Fn fn, Deadline deadline, const std::string& doing);

  CollectiveArgs args_;
  Variant variant_ = Variant::pcpy;
  Communicator* comm_ = nullptr;
  std::deque<PlanList> lists_;  // deque: builders keep pointers while adding
  std::vector<Signal> arrive_;    // per rank: data arrivals into that rank
  std::vector<uint64_t> expected_;
  std::vector<Signal> ready_;     // per rank: local phase done (swap)
  std::vector<Signal> sent_;      // per rank, prelaunch plans across processes: the rank's lists ended
  std::vector<uint64_t> sent_expected_;
  Signal trigger_;                // this process's (its rank's) trigger; empty for window calls' GPU words
  // Ranks in separate processes: every rank's trigger, which the lists wait
  // for. Addresses, not Signals: only engines read them, and window calls'
  // words may be in GPU memory the host has no mapping of.
  std::vector<uint64_t> trigger_va_;
  std::vector<uint64_t> stamp_va_;  // per list, with CollectiveArgs::timestamps
  std::vector<std::pair<uint64_t, size_t>> pool_slots_;  // signal memory taken from the communicator's pool
  Signal consumed_;              // advanced by an outside writer (consumed_store)
  uint64_t consumed_target_ = 0; // what consumed_ reaches once the writer is done
  Buffer stamps_{};  // 16 bytes per list when args_.timestamps
  // Window calls: waits recorded as patches (PlanList::patches), and how
  // much each rank's phase counter (ready_) advances per launch.
  bool monotonic_ = false;
  std::vector<uint64_t> ready_adds_;
  // The lists of each queue (indices into lists_, in order) and a buffer
  // they are joined in at each launch; made at the first launch.
  struct QueueGroup {
    Queue* queue = nullptr;
    std::vector<size_t> lists;
    CommandBuffer joined;
  };
  std::vector<QueueGroup> groups_;
  bool launched_ = false;
  bool waiting_release_ = false;
  bool synced_ = true;  // across processes: every rank finished the last launch (wait()'s barrier)
};

// The variant `automatic` picks for an op, size, rank count and what the
// engines can do (docs/collectives.md).
// packed_send: false for an all_to_all with a send_stride (no swap then).
// one_process: every rank in this process (pull is for those alone).
Variant choose_variant(CollOp op, uint64_t bytes, int ranks, const Caps& caps, bool prelaunch, bool packed_send = true,
                       bool one_process = false);

}  // namespace conccl
