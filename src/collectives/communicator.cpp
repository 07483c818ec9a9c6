// src/collectives/communicator.cpp - ranks, engine choice, queues, planning.
#include <algorithm>
#include <set>

#include "collectives/builder.hpp"
#include "collectives/cached_calls.hpp"
#include "collectives/calls.hpp"
#include "collectives/reduce_calls.hpp"
#include "util/env.hpp"

namespace conccl {

Communicator::Communicator(Device& device, std::vector<int> gpus, std::vector<uint64_t> gpu_keys, Options options)
    : device_(device), gpus_(std::move(gpus)), gpu_keys_(std::move(gpu_keys)), options_(options) {
  // What every rank's engines can do: the intersection of their GPUs' caps.
  caps_ = device_.topology().gpus[static_cast<size_t>(gpus_[0])].caps();
  for (int g : gpus_) {
    const Caps& c = device_.topology().gpus[static_cast<size_t>(g)].caps();
    caps_.broadcast_copy &= c.broadcast_copy;
    caps_.swap &= c.swap;
    caps_.atomic64 &= c.atomic64;
    caps_.interrupt_wakeup &= c.interrupt_wakeup;
    caps_.max_copy_bytes = std::min(caps_.max_copy_bytes, c.max_copy_bytes);
    caps_.max_fill_bytes = std::min(caps_.max_fill_bytes, c.max_fill_bytes);
  }
}

Result<std::unique_ptr<Communicator>> Communicator::create(Device& device, std::vector<int> gpus,
                                                           const Options& options) {
  std::vector<uint64_t> keys(gpus.begin(), gpus.end());
  return create(device, std::move(gpus), std::move(keys), options);
}

Result<std::unique_ptr<Communicator>> Communicator::create(Device& device, std::vector<int> gpus,
                                                           std::vector<uint64_t> gpu_keys, const Options& options) {
  if (gpus.empty()) return error(Code::invalid_argument, "a communicator needs at least one GPU");
  std::set<uint64_t> seen;
  for (size_t r = 0; r < gpus.size(); ++r) {
    const int g = gpus[r];
    if (g < 0 || g >= device.gpu_count())
      return error(Code::invalid_argument, "GPU " + std::to_string(g) + " does not exist (the device has GPUs 0.." +
                                               std::to_string(device.gpu_count() - 1) + ")");
    if (!seen.insert(gpu_keys[r]).second && !options.loopback)
      return error(Code::invalid_argument, "GPU " + std::to_string(g) +
                                               " given twice: one rank per GPU, or set Options::loopback for "
                                               "several ranks on one GPU");
  }
  const Isa isa0 = device.topology().gpus[static_cast<size_t>(gpus[0])].isa;
  for (int g : gpus)
    if (!(device.topology().gpus[static_cast<size_t>(g)].isa == isa0))
      return error(Code::invalid_argument, "GPU " + std::to_string(g) + "'s engines speak " +
                                               device.topology().gpus[static_cast<size_t>(g)].isa.name() +
                                               " but GPU " + std::to_string(gpus[0]) + "'s speak " + isa0.name() +
                                               "; a communicator's signals need one layout: use GPUs of one kind");
  for (int e : options.engines)
    for (int g : gpus) {
      bool found = false;
      for (const EngineInfo& info : device.topology().gpus[static_cast<size_t>(g)].engines) found |= info.id == e;
      if (!found)
        return error(Code::invalid_argument, "Options::engines names engine " + std::to_string(e) + ", which GPU " +
                                                 std::to_string(g) + " does not have (sdma-probe list shows its engines)");
    }
  if (options.ring_bytes < 4096 || (options.ring_bytes & (options.ring_bytes - 1)))
    return error(Code::invalid_argument, "ring_bytes must be a power of two >= 4096");
  return std::unique_ptr<Communicator>(new Communicator(device, std::move(gpus), std::move(gpu_keys), options));
}

int Communicator::rank_of_gpu(int gpu) const {
  for (size_t r = 0; r < gpus_.size(); ++r)
    if (gpus_[r] == gpu) return static_cast<int>(r);
  return -1;
}

bool Communicator::allowed(int engine) const {
  return options_.engines.empty() ||
         std::find(options_.engines.begin(), options_.engines.end(), engine) != options_.engines.end();
}

const Isa& Communicator::isa(int rank) const {
  return device_.topology().gpus[static_cast<size_t>(gpu(rank))].isa;
}

std::vector<int> Communicator::engines_toward(int src, int dst) const {
  std::vector<int> out;
  Result<std::vector<int>> all = conccl::engines_toward(device_.topology(), gpu(src), gpu(dst));
  if (all.ok())
    for (int e : *all)
      if (allowed(e)) out.push_back(e);
  return out;
}

std::vector<const EngineInfo*> Communicator::engine_pool(int rank) const {
  const GpuInfo& g = device_.topology().gpus[static_cast<size_t>(gpu(rank))];
  std::vector<const EngineInfo*> pool;
  for (const EngineInfo& e : g.engines)
    if (e.kind == EngineKind::xgmi && allowed(e.id)) pool.push_back(&e);
  if (pool.empty())
    for (const EngineInfo& e : g.engines)
      if (allowed(e.id)) pool.push_back(&e);
  return pool;
}

int Communicator::spread_engine(int rank) const {
  const std::vector<const EngineInfo*> pool = engine_pool(rank);
  if (pool.empty()) return 0;
  size_t i = 0;
  for (int r = 0; r < rank; ++r)
    if (same_gpu(r, rank)) ++i;
  return pool[i % pool.size()]->id;
}

int Communicator::engine_for(int src, int dst, int k) const {
  const GpuInfo& g = device_.topology().gpus[static_cast<size_t>(gpu(src))];
  std::vector<const EngineInfo*> pool = engine_pool(src);
  if (pool.empty()) return 0;
  if (src == dst) {
    // Local copies: an engine no link to another rank's GPU recommends, so
    // they do not queue behind peer traffic. (Links to GPUs outside the
    // communicator carry none of its traffic; and every process of a
    // multi-process communicator must choose alike, whatever else it sees.)
    std::set<int> used;
    for (const LinkInfo& l : g.links)
      if (rank_of_gpu(l.peer) >= 0) used.insert(l.recommended_engines.begin(), l.recommended_engines.end());
    std::vector<const EngineInfo*> free;
    for (const EngineInfo* e : pool)
      if (!used.count(e->id)) free.push_back(e);
    if (!free.empty()) pool = free;
  } else if (!same_gpu(src, dst)) {
    if (const LinkInfo* l = g.link_to(gpu(dst)); l && !l->recommended_engines.empty()) {
      std::vector<int> rec;
      for (int e : l->recommended_engines)
        if (allowed(e)) rec.push_back(e);
      if (!rec.empty()) return rec[static_cast<size_t>(k) % rec.size()];
    }
  }
  // Weighted round robin: each engine takes slots in proportion to its
  // weight (relative to the lightest), heaviest first; the peer at distance
  // d takes slot d-1 (+k). Equal weights give plain round robin; an H200's
  // LCE4 (12 PCEs) takes six slots to LCE2's and LCE3's one each.
  double lightest = 0;
  for (const EngineInfo* e : pool)
    if (e->weight > 0 && (lightest == 0 || e->weight < lightest)) lightest = e->weight;
  std::vector<const EngineInfo*> order = pool;
  std::stable_sort(order.begin(), order.end(), [](const EngineInfo* a, const EngineInfo* b) { return a->weight > b->weight; });
  std::vector<int> slots;
  for (const EngineInfo* e : order) {
    const int n = lightest > 0 && e->weight > 0 ? std::max(1, static_cast<int>(e->weight / lightest + 0.5)) : 1;
    for (int i = 0; i < n; ++i) slots.push_back(e->id);
  }
  const int n = size();
  if (options_.loopback) {
    // Ranks that share a GPU share its engines: their copies take the slots
    // together, n consecutive slots per rank (peers at distance 1..n-1, then
    // the local copy), so that over all ranks each engine gets its share.
    int base = 0;
    for (int r = 0; r < src; ++r)
      if (same_gpu(r, src)) base += n;
    const int d = src == dst ? n : ((dst - src) % n + n) % n;
    return slots[static_cast<size_t>(base + d - 1 + k) % slots.size()];
  }
  const int d = src == dst ? 1 : ((dst - src) % n + n) % n;
  return slots[static_cast<size_t>(d - 1 + k) % slots.size()];
}

Result<Queue*> Communicator::queue(int rank, int engine, bool shared) {
  if (!local(rank))
    return error(Code::invalid_argument, "rank " + std::to_string(rank) + "'s queues live in its own process (this is rank " +
                                             std::to_string(me_) + ")");
  // Shared queues are keyed by the GPU (as rank -1 - gpu, apart from ranks).
  auto key = std::make_pair(shared ? -1 - gpu(rank) : rank, engine);
  auto& table = queue_redirect_ ? *queue_redirect_ : queues_;
  auto it = table.find(key);
  if (it != table.end()) return it->second.get();
  QueueOptions qo;
  qo.ring_bytes = options_.ring_bytes;
  Result<std::unique_ptr<Queue>> q = device_.create_queue(gpu(rank), engine, qo);
  if (!q.ok()) return q.status();
  Queue* p = q->get();
  table[key] = std::move(q).value();
  return p;
}

namespace {
// An all-to-all whose every send buffer is its receive buffer.
bool all_to_all_in_place(const CollectiveArgs& a) {
  bool in_place = a.op == CollOp::all_to_all && a.send.size() == a.recv.size() && !a.send.empty();
  for (size_t r = 0; r < a.send.size() && in_place; ++r) in_place = a.send[r].va == a.recv[r].va;
  return in_place;
}
}  // namespace

Variant Communicator::automatic_variant(const CollectiveArgs& args, bool prelaunch) const {
  if (args.variant != Variant::automatic) return args.variant;
  const Variant v = choose_variant(args.op, args.bytes, size(), caps_, prelaunch, packed_send(args), !boot_);
  return all_to_all_in_place(args) && caps_.swap ? Variant::swap : v;  // only swap works in place
}

Result<std::unique_ptr<Plan>> Communicator::plan(const CollectiveArgs& given) {
  if (boot_) return plan_across_processes(given);
  // Ops with one source (broadcast, scatter, p2p) take the root's send
  // Buffer alone: spread it to the per-rank form the builders index.
  CollectiveArgs in = given;
  const bool root_only = in.op == CollOp::broadcast || in.op == CollOp::scatter || in.op == CollOp::p2p;
  if (root_only && in.send.size() == 1 && size() > 1 && in.root >= 0 && in.root < size()) {
    Buffer root_send = in.send[0];
    in.send.assign(static_cast<size_t>(size()), Buffer{});
    in.send[static_cast<size_t>(in.root)] = root_send;
  }
  // Resolve `automatic` first, so validation judges the variant that runs.
  CollectiveArgs args = in;
  if (args.variant == Variant::automatic) {
    const bool in_place = all_to_all_in_place(args);
    args.variant = automatic_variant(args, args.prelaunch);
    // Shared queues run lists one after another: no variant whose lists wait
    // on each other (an in-place all-to-all then has no variant and is refused).
    const bool per_engine = options_.queues == Options::QueueSharing::per_engine;
    if (per_engine && args.variant == Variant::chain) args.variant = Variant::fanout;
    if (per_engine && args.variant == Variant::swap && !in_place) args.variant = Variant::pcpy;
  }
  CONCCL_RETURN_IF_ERROR(validate_args(*this, args));
  using QS = Options::QueueSharing;
  if (options_.queues == QS::per_rank || !options_.loopback) return compile(args, in, false);
  Result<std::unique_ptr<Plan>> shared = compile(args, in, true);
  if (!shared.ok() || options_.queues == QS::per_engine) return shared;
  for (const PlanList& l : (*shared)->lists())
    if (l.waits_on_lists) return compile(args, in, false);  // automatic: this plan needs a queue per rank
  return shared;
}

Result<std::unique_ptr<Plan>> Communicator::compile(const CollectiveArgs& args, const CollectiveArgs& in, bool shared,
                                                    const RankSignals* mp) {
  std::unique_ptr<Plan> plan(new Plan());
  plan->args_ = in;
  plan->comm_ = this;
  {
    std::lock_guard<std::mutex> lk(plans_mu_);
    plans_.insert(plan.get());
  }
  plan->variant_ = args.variant;
  const int n = size();
  // Every rank's signals: allocated here, or (ranks in separate processes)
  // at the addresses each rank gave, in memory every process has mapped.
  auto signal_at = [&](uint64_t va) -> Result<Signal> {
    return Signal::wrap(device_, va, device_.host_pointer(va, Signal::kBytes));
  };
  for (int r = 0; r < n; ++r) {
    const size_t i = static_cast<size_t>(r);
    Result<Signal> a = mp ? signal_at(mp->arrive[i]) : Signal::create(device_);
    if (!a.ok()) return a.status();
    plan->arrive_.push_back(std::move(a).value());
    Result<Signal> rd = mp ? signal_at(mp->ready[i]) : Signal::create(device_);
    if (!rd.ok()) return rd.status();
    plan->ready_.push_back(std::move(rd).value());
    if (mp) plan->trigger_va_.push_back(mp->trigger[i]);
  }
  plan->expected_.assign(static_cast<size_t>(n), 0);
  plan->monotonic_ = mp && mp->monotonic;
  plan->ready_adds_.assign(static_cast<size_t>(n), 0);
  // The host sets its own trigger, except in window calls (monotonic), whose
  // posted words the CallState writes and which may lie in GPU memory.
  if (!mp || !mp->monotonic) {
    Result<Signal> trig = mp ? signal_at(mp->trigger[static_cast<size_t>(std::max(me_, 0))]) : Signal::create(device_);
    if (!trig.ok()) return trig.status();
    plan->trigger_ = std::move(trig).value();
  }

  PlanBuilder b(*this, *plan, shared);
  const BuildFn build = variant_builder(args.op, plan->variant_);
  Status st = build ? build(b, args)
                    : error(Code::internal, std::string("no builder for variant ") + variant_name(plan->variant_));
  if (st.ok()) st = b.finish();
  if (!st.ok()) return st.prefix(std::string("planning ") + coll_op_name(args.op));
  // Prelaunch plans across processes: each list of a rank ends by advancing
  // that rank's sent signal, so its stream can tell when its send buffer is
  // free (its arrivals cover only what it receives; in one process every
  // rank's arrivals together say it). Recorded alike on every rank.
  plan->sent_expected_.assign(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    const bool want = mp && in.prelaunch && static_cast<size_t>(r) < mp->sent.size() && mp->sent[static_cast<size_t>(r)];
    Result<Signal> s = want ? signal_at(mp->sent[static_cast<size_t>(r)]) : Result<Signal>(Signal{});
    if (!s.ok()) return s.status().prefix("planning " + std::string(coll_op_name(args.op)));
    plan->sent_.push_back(std::move(s).value());
  }
  for (PlanList& l : plan->lists_) {
    Signal& s = plan->sent_[static_cast<size_t>(l.rank)];
    if (!s.valid()) continue;
    CONCCL_RETURN_IF_ERROR(s.signal_add(l.cb, 1));
    plan->sent_expected_[static_cast<size_t>(l.rank)]++;
  }
  // On a shared queue a list runs only after the lists queued before it, so
  // a list that waits for another list could wait for one queued behind it.
  if (shared && options_.queues == Options::QueueSharing::per_engine)
    for (const PlanList& l : plan->lists_)
      if (l.waits_on_lists)
        return error(Code::invalid_argument,
                     std::string(coll_op_name(args.op)) + " variant " + variant_name(plan->variant_) +
                         " has command lists that wait on each other (rank " + std::to_string(l.rank) + " engine " +
                         std::to_string(l.engine) +
                         "), which a queue shared by several ranks could deadlock; use another variant, or "
                         "Options::queues automatic or per_rank");
  if (args.timestamps) {
    if (mp) {
      // Rank r's k-th list stamps slot k of the stamp memory rank r gave.
      std::vector<uint64_t> next(static_cast<size_t>(n), 0);
      for (PlanList& l : plan->lists_) {
        uint64_t& k = next[static_cast<size_t>(l.rank)];
        if (k == kStampSlotsPerRank)
          return error(Code::internal, "more than " + std::to_string(kStampSlotsPerRank) + " lists for rank " +
                                           std::to_string(l.rank) + " with timestamps");
        plan->stamp_va_.push_back(mp->stamps[static_cast<size_t>(l.rank)] + 16 * k++);
      }
    } else {
      Result<Buffer> b = device_.alloc(-1, 16 * plan->lists_.size(), MemKind::host);
      if (!b.ok()) return b.status().prefix("timestamp slots");
      if (!b->host) return error(Code::unavailable, "timestamps need CPU-visible host memory");
      plan->stamps_ = *b;
      for (size_t i = 0; i < plan->lists_.size(); ++i) plan->stamp_va_.push_back(b->va + 16 * i);
    }
    for (size_t i = 0; i < plan->lists_.size(); ++i)
      CONCCL_RETURN_IF_ERROR(plan->lists_[i].cb.timestamp(plan->stamp_va_[i]));
  }
  // Each list goes into its ring in one submit: reject what cannot fit (with
  // room for ring-end padding) before anything runs.
  for (const PlanList& l : plan->lists_)
    if (l.queue && l.cb.size_bytes() > l.queue->max_submit_bytes())
      return error(Code::invalid_argument,
                   std::string(coll_op_name(args.op)) + ": the command list for rank " + std::to_string(l.rank) +
                       " engine " + std::to_string(l.engine) + " is " + std::to_string(l.cb.size_bytes()) +
                       " bytes, more than one submission to its " + std::to_string(options_.ring_bytes) +
                       "-byte ring takes (" + std::to_string(l.queue->max_submit_bytes()) +
                       "); create the communicator with a larger Options::ring_bytes (or fewer chain chunks)");
  return plan;
}

// ---- PlanBuilder ----

namespace {
// Diagnostics for A/B runs (docs/collectives.md), read once: =0 gives the
// list form before run 36.
struct ListForm {
  bool batch_arrivals;  // CONCCL_BATCH_ARRIVALS=0: an arrival after each copy
  bool spread_small;    // CONCCL_SPREAD_SMALL=0: engines by weight at every size
  bool overlap_copies;  // CONCCL_OVERLAP_COPIES=0: each copy waits for the one before
  bool fold_arrivals;   // CONCCL_FOLD_ARRIVALS=1: a copy carries its arrival (Caps::copy_add)
  bool hold_triggers;   // CONCCL_HOLD_TRIGGERS=1: waits for a trigger or "posted" hold their engine
  bool set_arrivals;    // CONCCL_SET_ARRIVALS=0: adds even where one list delivers all of a rank's arrivals
  std::optional<uint64_t> stripe_min_bytes;  // CONCCL_STRIPE_MIN_BYTES: Options::stripe_min_bytes when unset
};
ListForm read_list_form() {
  using util::env_is;
  return ListForm{!env_is("CONCCL_BATCH_ARRIVALS", "0"), !env_is("CONCCL_SPREAD_SMALL", "0"),
                  !env_is("CONCCL_OVERLAP_COPIES", "0"), env_is("CONCCL_FOLD_ARRIVALS", "1"),
                  env_is("CONCCL_HOLD_TRIGGERS", "1"), !env_is("CONCCL_SET_ARRIVALS", "0"),
                  util::env_bytes("CONCCL_STRIPE_MIN_BYTES")};
}
const ListForm& list_form() {
  static const ListForm f = read_list_form();
  return f;
}

// Striping takes every engine of the GPU, so it is for communicators whose
// ranks all share one GPU: elsewhere the engines of the GPU's links carry
// peer traffic that striped local copies would queue behind.
bool all_on_one_gpu(const Communicator& c) {
  for (int r = 1; r < c.size(); ++r)
    if (!c.same_gpu(0, r)) return false;
  return true;
}
}  // namespace

std::string list_form_digest() {
  // Read now, as a process started with these variables reads them for its
  // plans: a rank's arrival counts depend on the first two.
  const ListForm f = read_list_form();
  return "CONCCL_BATCH_ARRIVALS=" + std::to_string(f.batch_arrivals) +
         " CONCCL_SPREAD_SMALL=" + std::to_string(f.spread_small);
}

bool stream_waits_may_poll(const Communicator& c, const CollectiveArgs& a) {
  // Small calls only: a polling wait holds a thread of the GPU for as long
  // as the call runs (docs/perf/h200-collectives.md, runs 69-70).
  return a.bytes <= kPollMaxBytes / static_cast<uint64_t>(std::max(c.size(), 1));
}

bool processes_share_gpu(const Communicator& c) {
  if (c.rank() < 0) return false;
  for (int q = 0; q < c.size(); ++q)
    if (q != c.rank() && c.same_gpu(q, c.rank())) return true;
  return false;
}

uint64_t stripe_min_bytes(const Communicator::Options& o, int ranks) {
  // The default, measured on an H100 and an H200 (docs/perf/h200-collectives.md,
  // runs 48 and 63; sizes there are nccl-tests', a rank's whole output, so a
  // copy is size / ranks):
  //   8 ranks: on the H100 copies of 8 MiB (64 MiB all-gathers and
  //     all-to-alls) ran 1.79x faster striped, 16 MiB ones 1.28x, 4 MiB ones
  //     6 % slower; on the H200 whole copies were 9-25 % faster, striped
  //     ones still 106-115 % of the striped p2p's rate.
  //   2 ranks: on the H200 every whole copy lands on LCE4 and moved 75-95 %
  //     of the striped p2p's rate at 64-256 MiB against 100-106 % striped
  //     (5-11 % less time from 32 MiB copies; 16 MiB copies even, 8 MiB ones
  //     10 % slower); on the H100 whole copies were 1-3 % faster there.
  //   4 ranks: whole copies at least as fast on both (107-127 % of the p2p
  //     on the H200).
  const std::optional<uint64_t> set = o.stripe_min_bytes ? o.stripe_min_bytes : list_form().stripe_min_bytes;
  if (set) return *set;
  if (ranks >= 8) return 8ull << 20;
  if (ranks == 2) return 32ull << 20;
  return 0;
}

std::vector<EngineShare> split_by_weight(const GpuInfo& g, const std::vector<int>& engines, uint64_t bytes) {
  auto weight = [&](int e) {
    for (const EngineInfo& info : g.engines)
      if (info.id == e) return info.weight > 0 ? info.weight : 1.0;
    return 1.0;
  };
  double total_w = 0;
  for (int e : engines) total_w += weight(e);
  const uint64_t units = (bytes + 255) / 256;
  std::vector<EngineShare> out;
  uint64_t off = 0;
  double acc = 0;
  for (size_t i = 0; i < engines.size() && off < bytes; ++i) {
    acc += weight(engines[i]);
    const uint64_t end =
        i + 1 == engines.size() ? bytes
                                : std::min<uint64_t>(bytes, static_cast<uint64_t>(acc / total_w * static_cast<double>(units)) * 256);
    if (end <= off) continue;
    out.push_back(EngineShare{engines[i], off, end - off});
    off = end;
  }
  return out;
}

PlanBuilder::PlanBuilder(Communicator& comm, Plan& plan, bool shared)
    : comm_(comm),
      plan_(plan),
      shared_(shared),
      batch_arrivals_(list_form().batch_arrivals && plan.variant() != Variant::chain),
      spread_(list_form().spread_small && comm.loopback() && plan.args().bytes <= kSpreadMaxBytes),
      overlap_copies_(list_form().overlap_copies),
      fold_arrivals_(comm.options().fold_arrivals.value_or(list_form().fold_arrivals) && caps(comm.isa(0)).copy_add),
      set_arrivals_(list_form().set_arrivals),
      stripe_min_bytes_(comm.loopback() && all_on_one_gpu(comm) ? stripe_min_bytes(comm.options(), comm.size()) : 0) {}

CommandBuffer::WaitStyle PlanBuilder::trigger_wait_style() const {
  return list_form().hold_triggers ? CommandBuffer::WaitStyle::hold : CommandBuffer::WaitStyle::yield;
}

int PlanBuilder::engine_for(int src, int dst) const {
  return spread_ ? comm_.spread_engine(src) : comm_.engine_for(src, dst);
}

std::vector<EngineShare> PlanBuilder::engine_shares(int src, int dst, uint64_t bytes) const {
  // stripe_min_bytes_ is 0 unless every rank is on one GPU (the constructor).
  if (stripe_min_bytes_ == 0 || bytes < stripe_min_bytes_) return {EngineShare{engine_for(src, dst), 0, bytes}};
  std::vector<int> engines;
  for (const EngineInfo* e : comm_.engine_pool(src)) engines.push_back(e->id);
  if (engines.size() < 2) return {EngineShare{engine_for(src, dst), 0, bytes}};
  return split_by_weight(comm_.device().topology().gpus[static_cast<size_t>(comm_.gpu(src))], engines, bytes);
}

Result<PlanList*> PlanBuilder::list(int rank, int engine) {
  auto key = std::make_pair(rank, engine);
  auto it = index_.find(key);
  if (it != index_.end()) return &plan_.lists_[it->second];
  PlanList l;
  l.rank = rank;
  l.engine = engine;
  l.shared_queue = shared_;
  if (comm_.local(rank)) {
    Result<Queue*> q = comm_.queue(rank, engine, shared_);
    if (!q.ok()) return q.status();
    l.queue = *q;
    l.cb = (*q)->command_buffer();
  } else {
    l.cb = CommandBuffer(comm_.isa(rank));  // recorded alike everywhere, run by its own process
  }
  if (!(l.cb.isa() == comm_.isa(0)))
    return error(Code::internal, "queue for rank " + std::to_string(rank) + " speaks " + l.cb.isa().name() +
                                     ", not the communicator's " + comm_.isa(0).name());
  // Gated: in one process on the plan's trigger; across processes on every
  // rank's, so that no list writes into a rank before it has released.
  // (Window calls: every rank's "posted" counter, which reaches k at call k.)
  if (plan_.args_.prelaunch && plan_.trigger_va_.empty())
    CONCCL_RETURN_IF_ERROR(plan_.trigger_.wait_ge(l.cb, 1, trigger_wait_style()));
  if (plan_.args_.prelaunch)
    for (size_t r = 0; r < plan_.trigger_va_.size(); ++r)
      CONCCL_RETURN_IF_ERROR(wait_on(l, plan_.trigger_va_[r], kCounterPosted, static_cast<int>(r), 1));
  index_[key] = plan_.lists_.size();
  plan_.lists_.push_back(std::move(l));
  return &plan_.lists_.back();
}

Status PlanBuilder::wait_on(PlanList& l, const Signal& s, uint8_t counter, int rank, uint64_t rel) {
  CONCCL_RETURN_IF_ERROR(s.check_layout(l.cb));
  return wait_on(l, s.va(), counter, rank, rel);
}

Status PlanBuilder::wait_on(PlanList& l, uint64_t va, uint8_t counter, int rank, uint64_t rel) {
  // What the list's copies so far delivered is announced before it waits:
  // the list it waits for may be waiting for these arrivals.
  CONCCL_RETURN_IF_ERROR(record_held(l));
  const size_t at = l.cb.size_dwords();
  // A trigger ("posted") is stored by a stream or the host, never by a
  // channel that shares the engine.
  const CommandBuffer::WaitStyle style =
      counter == kCounterPosted ? trigger_wait_style() : CommandBuffer::WaitStyle::yield;
  CONCCL_RETURN_IF_ERROR(l.cb.wait_ge(va, rel, style));
  if (plan_.monotonic_)
    l.patches.push_back(PlanList::WaitPatch{static_cast<uint32_t>(at), static_cast<uint32_t>(l.cb.size_dwords() - at),
                                            va, counter, rank, rel, style});
  return Status();
}

Status PlanBuilder::copy(PlanList& l, uint64_t dst_va, uint64_t src_va, uint64_t bytes, int dst_rank) {
  if (dst_va == src_va) return Status();  // in place
  CONCCL_RETURN_IF_ERROR(settle(l));
  auto last = copy_end_.find(&l);
  const bool after_copy = overlap_copies_ && last != copy_end_.end() && last->second == l.cb.size_dwords();
  const CommandBuffer::CopyOrder order =
      after_copy ? CommandBuffer::CopyOrder::alongside_earlier : CommandBuffer::CopyOrder::after_earlier;
  if (fold_arrivals_ && dst_rank >= 0) {
    held_copy_[&l] = HeldCopy{dst_va, src_va, bytes, order, dst_rank};
    return Status();
  }
  CONCCL_RETURN_IF_ERROR(l.cb.copy(dst_va, src_va, bytes, order));
  copy_end_[&l] = l.cb.size_dwords();
  return Status();
}

Status PlanBuilder::settle(PlanList& l) {
  auto it = held_copy_.find(&l);
  if (it == held_copy_.end()) return Status();
  const HeldCopy c = it->second;
  held_copy_.erase(it);
  CONCCL_RETURN_IF_ERROR(l.cb.copy(c.dst, c.src, c.bytes, c.order));
  copy_end_[&l] = l.cb.size_dwords();
  return Status();
}

Status PlanBuilder::arrive(PlanList& l, int dst) {
  plan_.expected_[static_cast<size_t>(dst)]++;
  if (std::find(l.writes_to.begin(), l.writes_to.end(), dst) == l.writes_to.end()) l.writes_to.push_back(dst);
  auto carrier = held_copy_.find(&l);
  if (carrier != held_copy_.end() && carrier->second.dst_rank == dst) {
    // The copy into dst carries dst's arrival: the engine adds as the copy
    // ends, with no wait for it to drain.
    const HeldCopy c = carrier->second;
    held_copy_.erase(carrier);
    added_.insert({&l, dst});
    CONCCL_RETURN_IF_ERROR(plan_.arrive_[static_cast<size_t>(dst)].copy_add(l.cb, c.dst, c.src, c.bytes, c.order, 1));
    copy_end_[&l] = l.cb.size_dwords();
    return Status();
  }
  CONCCL_RETURN_IF_ERROR(settle(l));
  if (!batch_arrivals_) {
    added_.insert({&l, dst});
    return plan_.arrive_[static_cast<size_t>(dst)].signal_add(l.cb, 1);
  }
  std::vector<std::pair<int, uint64_t>>& held = held_[&l];
  for (auto& [d, count] : held)
    if (d == dst) {
      ++count;
      return Status();
    }
  held.emplace_back(dst, 1);
  return Status();
}

Status PlanBuilder::record_held(PlanList& l, const std::vector<int>* writers) {
  CONCCL_RETURN_IF_ERROR(settle(l));
  auto it = held_.find(&l);
  if (it == held_.end()) return Status();
  for (const auto& [d, count] : it->second) {
    const size_t di = static_cast<size_t>(d);
    const bool store = writers && set_arrivals_ && !plan_.monotonic_ && l.writes_to.size() == 1 &&
                       (*writers)[di] == 1 && !added_.count({&l, d}) && plan_.expected_[di] == count;
    if (store) {
      CONCCL_RETURN_IF_ERROR(plan_.arrive_[di].signal_set(l.cb, count));
      continue;
    }
    CONCCL_RETURN_IF_ERROR(plan_.arrive_[di].signal_add(l.cb, count));
    added_.insert({&l, d});
  }
  held_.erase(it);
  return Status();
}

Status PlanBuilder::finish() {
  std::vector<int> writers(plan_.arrive_.size(), 0);
  for (const PlanList& l : plan_.lists_)
    for (int d : l.writes_to) ++writers[static_cast<size_t>(d)];
  for (PlanList& l : plan_.lists_) CONCCL_RETURN_IF_ERROR(record_held(l, &writers));
  return Status();
}

Status PlanBuilder::wait_arrivals(PlanList& l, int r, uint64_t n) {
  l.waits_on_lists = true;
  return wait_on(l, plan_.arrive_[static_cast<size_t>(r)], kCounterArrive, r, n);
}

Status PlanBuilder::ready(PlanList& l, int r) {
  CONCCL_RETURN_IF_ERROR(record_held(l));  // a phase is over only once its arrivals are out
  CONCCL_RETURN_IF_ERROR(plan_.ready_[static_cast<size_t>(r)].signal_add(l.cb, 1));
  plan_.ready_adds_[static_cast<size_t>(r)]++;
  return Status();
}

Status PlanBuilder::wait_ready(PlanList& l, int r, uint64_t n) {
  l.waits_on_lists = true;
  return wait_on(l, plan_.ready_[static_cast<size_t>(r)], kCounterPhase, r, n);
}

}  // namespace conccl
