// src/collectives/multiprocess.cpp - ranks in separate processes.
//
// create(): the ranks connect (Bootstrap), check that they agree (node,
// options, distinct process slots), and each shares a pool of signal memory.
// plan(): each rank gives its own buffers and signal addresses, shares the
// memory they live in, checks that every rank asked for the same collective,
// and compiles the plan of the whole communicator from everyone's addresses
// - the same command lists in every process, each process running its own
// rank's. docs/multiprocess.md.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "collectives/builder.hpp"
#include "collectives/rank_placement.hpp"
#include "collectives/wire.hpp"
#include "collectives/cached_calls.hpp"
#include "collectives/calls.hpp"
#include "collectives/reduce_calls.hpp"

namespace conccl {

namespace {

using wire::get_buffer;
using wire::get_regions;
using wire::put_buffer;
using wire::put_regions;
using wire::Reader;
using wire::Writer;

constexpr size_t kPoolBytes = 1 << 20;  // 65536 signals per rank
constexpr size_t kPostWordsBytes = 4096;

// Memory for a rank's posted word in its GPU, where CONCCL_POSTED_WORDS=device
// asks for it (calls.hpp): CUDA memory on the nv backend
// (a CUDA stream writes it, the copy engines read it), the emulated GPU's
// memory on the emulator (its stream and engines reach every byte). None
// (Buffer{}: the host word serves, as every rank then sees) on kfd, whose
// window calls keep the word in host memory, and wherever the memory cannot
// be had (nv without CUDA): the GPU word only makes calls faster.
Buffer alloc_post_words(Device& device, int gpu) {
  const Result<CallState::PostedWords> setting = CallState::posted_words_setting();
  if (!setting.ok() || *setting != CallState::PostedWords::device) return Buffer{};
  const std::string& backend = device.topology().backend;
  if (backend != "nv" && backend != "emu") return Buffer{};
  Result<Buffer> b = device.alloc(gpu, kPostWordsBytes, backend == "nv" ? MemKind::cuda : MemKind::device);
  return b.ok() ? *b : Buffer{};
}

std::string options_digest(const Communicator::Options& o, int nranks) {
  std::string s = "loopback=" + std::to_string(o.loopback) + " ring_bytes=" + std::to_string(o.ring_bytes) +
                  " engines=";
  for (int e : o.engines) s += std::to_string(e) + ",";
  // Striping changes how many arrivals a rank's buffers expect per call.
  s += " stripe_min_bytes=" + std::to_string(stripe_min_bytes(o, nranks));
  s += " " + list_form_digest();
  return s;
}

// What must be equal in every rank's CollectiveArgs, in words for errors.
std::string args_digest(const CollectiveArgs& a) {
  return std::string(coll_op_name(a.op)) + " variant " + variant_name(a.variant) + " of " + std::to_string(a.bytes) +
         " bytes, root " + std::to_string(a.root) + ", peer " + std::to_string(a.peer) +
         (a.prelaunch ? ", prelaunch" : "") + (a.timestamps ? ", timestamps" : "") + ", engines " +
         std::to_string(a.engines) + ", b2b_ways " + std::to_string(a.b2b_ways) + ", chain_chunks " +
         std::to_string(a.chain_chunks) + (a.send_stride ? ", send_stride " + std::to_string(a.send_stride) : "");
}

// Closes the fds of a vector as it goes out of scope (shared regions handed
// to the bootstrap, which duplicates what it sends).
struct CloseOnExit {
  std::vector<int>* fds;
  ~CloseOnExit() {
    for (int f : *fds) ::close(f);
  }
};

void close_all(std::vector<Bootstrap::Message>& msgs) {
  for (Bootstrap::Message& m : msgs) {
    for (int f : m.fds) ::close(f);
    m.fds.clear();
  }
}

}  // namespace

Communicator::~Communicator() {
  // One-process captures outlive their communicator: their keeper stops
  // arming them first, so that a graph replayed from now on only releases
  // its stream (captured_calls.cpp).
  if (local_replays_) local_replays_->keeper.stop();
  // Window calls first: their watchdog stops and their plans go while the
  // queues are still here (calls.cpp). After a failed call, other ranks'
  // lists may still write this rank's counters, and the ranks read each
  // other's reason for failing there: the signal memory is then kept.
  const bool failed = calls_ && !async_error().ok();
  calls_.reset();
  cached_.reset();  // its plans wait for their own launches
  reduce_.reset();  // the staging, once nothing moves into it
  if (failed) pool_ = post_words_ = Buffer{};
  // Plans still alive are detached first (each leaves plans_), while the
  // queues and the signal pool they use are still here. Every gated launch
  // is opened before any is waited for: a plan's lists may sit behind
  // another's gated lists on a shared queue.
  std::vector<Plan*> live;
  {
    std::lock_guard<std::mutex> lk(plans_mu_);
    live.assign(plans_.begin(), plans_.end());
  }
  for (Plan* p : live) p->open_gates();
  for (Plan* p : live) p->detach();
  queues_.clear();
  if (pool_.size) (void)device_.free(pool_);
  if (post_words_.size) (void)device_.free(post_words_);
}

int Communicator::peer_gpu(int sent, uint64_t node_gpu_id, int owner) const {
  if (sent < 0 || !node_ids_ || node_gpu_id == 0) return sent;  // host memory; or the ranks number GPUs alike
  for (size_t q = 0; q < gpu_keys_.size(); ++q)
    if (gpu_keys_[q] == node_gpu_id) return gpus_[q];
  const GpuInfo* here = device_.topology().gpu_with_node_id(node_gpu_id);
  return here ? here->index : gpu(owner);
}

Status Communicator::check_peers(const std::string& doing) const {
  return boot_ ? boot_->check_peers(doing) : Status();
}

Result<std::unique_ptr<Communicator>> Communicator::create(Device& device, int rank, int nranks, const UniqueId& id,
                                                           const Options& options) {
  if (device.gpu_count() == 0) return error(Code::unavailable, "the device has no GPUs");
  const int gpu = options.gpu >= 0 ? options.gpu : (rank >= 0 ? rank % device.gpu_count() : 0);
  if (gpu >= device.gpu_count())
    return error(Code::invalid_argument, "Options::gpu " + std::to_string(gpu) + " does not exist (the device has GPUs 0.." +
                                             std::to_string(device.gpu_count() - 1) + ")");
  if (device.process_slot() < 0)
    return error(Code::invalid_argument, "rank " + std::to_string(rank) +
                                             ": a multi-process communicator needs a device opened with "
                                             "DeviceOptions::process_slot (0..15, distinct per process: the rank)");
  if (options.join_timeout_ms < 1 || options.join_timeout_ms > 86400000)
    return error(Code::invalid_argument, "Options::join_timeout_ms must be 1..86400000");
  const Deadline deadline = Deadline::after_ms(options.join_timeout_ms);
  Result<std::unique_ptr<Bootstrap>> boot = Bootstrap::connect(id, rank, nranks, deadline);
  if (!boot.ok()) return boot.status().prefix("joining the communicator");

  // Agree on the GPUs, the options and the address layout.
  Writer w;
  put_hello(w, device.topology(), gpu, device.process_slot(), options_digest(options, nranks));
  Result<std::vector<Bootstrap::Message>> all = (*boot)->exchange("create", w.str(), {}, deadline);
  if (!all.ok()) return all.status().prefix("joining the communicator");
  std::vector<RankHello> hellos;
  for (int r = 0; r < nranks; ++r) {
    Reader rd((*all)[static_cast<size_t>(r)].data);
    hellos.push_back(get_hello(rd));
    const RankHello& h = hellos.back();
    if (!rd.ok()) return error(Code::invalid_argument, "rank " + std::to_string(r) + " sent a malformed create message (another ConCCL version, or not a ConCCL rank)");
    if (h.options != options_digest(options, nranks))
      return error(Code::invalid_argument, "rank " + std::to_string(r) + " created its communicator with options " +
                                               h.options + ", rank " + std::to_string(rank) + " with " +
                                               options_digest(options, nranks) + ": every rank must pass the same options");
    for (int q = 0; q < r; ++q)
      if (hellos[static_cast<size_t>(q)].slot == h.slot)
        return error(Code::invalid_argument,
                     "ranks " + std::to_string(q) + " and " + std::to_string(r) + " opened their devices with the same "
                     "DeviceOptions::process_slot (" + std::to_string(h.slot) +
                     "), so their memory would have the same addresses: give each process its own slot (its rank)");
  }
  Result<RankGpus> placed = place_ranks(device.topology(), rank, hellos);
  if (!placed.ok()) return placed.status().prefix("joining the communicator");
  // The same rules as one process: GPUs exist, given once unless loopback.
  Result<std::unique_ptr<Communicator>> c = create(device, placed->gpus, placed->keys, options);
  if (!c.ok()) return c.status();
  Communicator& comm = **c;
  comm.node_ids_ = placed->node_ids;
  comm.me_ = rank;
  comm.boot_ = std::move(boot).value();

  CONCCL_RETURN_IF_ERROR(CallState::posted_words_setting().status());
  // The signal pool: this rank's plans take their signals from it; every
  // other rank maps it.
  Result<Buffer> pool = device.alloc(-1, kPoolBytes, MemKind::host);
  if (!pool.ok()) return pool.status().prefix("signal memory of a multi-process communicator");
  comm.pool_ = *pool;
  comm.pool_used_.assign(kPoolBytes / Signal::kBytes, false);
  // The call area (window calls' counters and descriptors) is never handed
  // out to plans.
  for (size_t i = 0; i < kCallReservedBytes / Signal::kBytes; ++i) comm.pool_used_[i] = true;
  std::memset(comm.pool_.host, 0, kCallReservedBytes);
  // This rank's posted word in its GPU's memory (calls.hpp, kCallPosted),
  // where CONCCL_POSTED_WORDS=device asks for it and the backend has memory
  // that both a stream and the engines reach. None (va 0) elsewhere.
  comm.post_words_ = alloc_post_words(device, comm.gpu(rank));
  std::vector<SharedRegion> regions, word_regions;
  std::vector<int> fds;
  CONCCL_RETURN_IF_ERROR(comm.share_buffer(comm.pool_, &regions, &fds));
  CONCCL_RETURN_IF_ERROR(comm.share_buffer(comm.post_words_, &word_regions, &fds));
  Writer pw;
  pw.put<uint64_t>(comm.pool_.va);  // where its call area starts (calls.hpp)
  put_regions(pw, regions);
  pw.put<uint64_t>(comm.post_words_.va);
  put_regions(pw, word_regions);
  Result<std::vector<Bootstrap::Message>> pools = comm.boot_->exchange("signal pools", pw.str(), fds, deadline);
  for (int f : fds) ::close(f);
  if (!pools.ok()) return pools.status().prefix("joining the communicator");
  Status st;
  comm.pool_va_.assign(static_cast<size_t>(nranks), 0);
  comm.pool_va_[static_cast<size_t>(rank)] = comm.pool_.va;
  comm.post_words_va_.assign(static_cast<size_t>(nranks), 0);
  comm.post_words_va_[static_cast<size_t>(rank)] = comm.post_words_.va;
  for (int r = 0; r < nranks && st.ok(); ++r) {
    if (r == rank) continue;
    Bootstrap::Message& m = (*pools)[static_cast<size_t>(r)];
    Reader rd(m.data);
    comm.pool_va_[static_cast<size_t>(r)] = rd.get<uint64_t>();
    std::vector<SharedRegion> theirs = get_regions(rd);
    comm.post_words_va_[static_cast<size_t>(r)] = rd.get<uint64_t>();
    const std::vector<SharedRegion> their_words = get_regions(rd);
    theirs.insert(theirs.end(), their_words.begin(), their_words.end());
    if (!rd.ok() || theirs.size() != m.fds.size()) {
      st = error(Code::invalid_argument, "rank " + std::to_string(r) + " sent a malformed signal pool message (another ConCCL version, or not a ConCCL rank)");
      break;
    }
    for (size_t i = 0; i < theirs.size() && st.ok(); ++i) {
      st = device.import_shared(theirs[i], m.fds[i]).prefix("mapping rank " + std::to_string(r) + "'s signal memory");
      m.fds[i] = -1;  // import_shared took it
    }
  }
  close_all(*pools);
  if (!st.ok()) return st;
  // Every rank has mapped everyone's pool before any plan uses it.
  CONCCL_RETURN_IF_ERROR(comm.boot_->barrier("created", deadline).prefix("joining the communicator"));
  return c;
}

Result<uint64_t> Communicator::pool_take(size_t bytes) {
  const size_t n = (bytes + Signal::kBytes - 1) / Signal::kBytes;
  for (size_t i = 0; i + n <= pool_used_.size(); ++i) {
    size_t k = 0;
    while (k < n && !pool_used_[i + k]) ++k;
    if (k == n) {
      for (size_t j = 0; j < n; ++j) pool_used_[i + j] = true;
      const uint64_t va = pool_.va + i * Signal::kBytes;
      std::memset(static_cast<uint8_t*>(pool_.host) + i * Signal::kBytes, 0, n * Signal::kBytes);
      return va;
    }
    i += k;
  }
  return error(Code::resource_exhausted, "the communicator's signal memory (" + std::to_string(kPoolBytes >> 10) +
                                             " KiB) is used up: destroy plans that are no longer needed");
}

void Communicator::pool_give(uint64_t va, size_t bytes) {
  if (va < pool_.va) return;
  const size_t first = (va - pool_.va) / Signal::kBytes, n = (bytes + Signal::kBytes - 1) / Signal::kBytes;
  for (size_t j = first; j < first + n && j < pool_used_.size(); ++j) pool_used_[j] = false;
}

// The regions under buffer b, each once: a buffer may span several (CUDA
// memory of PyTorch's expandable segments is several allocations, each
// imported as its own region), so the regions are asked for one after the
// other, from where the last one ended.
Status Communicator::share_buffer(const Buffer& b, std::vector<SharedRegion>* regions, std::vector<int>* fds) {
  if (!b.va || !b.size) return Status();
  for (uint64_t at = b.va; at < b.va + b.size;) {
    Buffer part = b;
    part.va = at;
    part.size = 1;
    part.host = nullptr;
    int fd = -1;
    Result<SharedRegion> r = device_.share(part, &fd);
    if (!r.ok()) return r.status().prefix("sharing buffer " + hex(b.va) + " with the other ranks");
    if (r->va > at || r->va + r->size <= at) {
      ::close(fd);
      return error(Code::internal, "sharing buffer " + hex(b.va) + ": the region given for " + hex(at) +
                                       " does not hold it");
    }
    at = r->va + r->size;
    bool known = std::find(shared_out_.begin(), shared_out_.end(), std::make_pair(r->va, r->serial)) != shared_out_.end();
    for (const SharedRegion& x : *regions) known = known || (x.va == r->va && x.serial == r->serial);
    if (known) {
      ::close(fd);
      continue;
    }
    regions->push_back(*r);
    fds->push_back(fd);
  }
  return Status();
}

namespace {

// Every rank's plan message: its buffers into `full`, its signals into
// `sig`, its shared regions mapped here. An error names the first rank whose
// message is malformed or whose arguments differ from `want` (this rank's
// digest); the regions are mapped even then, as the next plan relies on them.
// (A template so that it takes Communicator::RankSignals, a private type,
// without naming it.)
template <typename RankSignals, typename PeerGpu>
Status read_plan_messages(Device& device, int me, const std::string& want, std::vector<Bootstrap::Message>& all,
                          CollectiveArgs* full, RankSignals* sig, PeerGpu&& peer_gpu) {
  Status st;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    Bootstrap::Message& m = all[static_cast<size_t>(r)];
    Reader rd(m.data);
    const std::string digest = rd.get_string();
    (void)rd.get<uint8_t>();
    uint64_t s_id = 0, v_id = 0;
    Buffer s = get_buffer(rd, &s_id);
    Buffer v = get_buffer(rd, &v_id);
    s.gpu = peer_gpu(s, s_id, r);
    v.gpu = peer_gpu(v, v_id, r);
    sig->arrive.push_back(rd.get<uint64_t>());
    sig->ready.push_back(rd.get<uint64_t>());
    sig->trigger.push_back(rd.get<uint64_t>());
    sig->sent.push_back(rd.get<uint64_t>());
    sig->stamps.push_back(rd.get<uint64_t>());
    std::vector<SharedRegion> theirs = get_regions(rd);
    if (r == me) theirs.clear();  // our own memory
    if (!rd.ok() || theirs.size() != m.fds.size()) {
      st = error(Code::invalid_argument, "rank " + std::to_string(r) +
                                             " sent a malformed plan message (another ConCCL version, or not a "
                                             "ConCCL rank)");
      break;
    }
    if (st.ok() && digest != want)
      st = error(Code::invalid_argument, "rank " + std::to_string(r) + " asked for " + digest + ", but rank " +
                                             std::to_string(me) + " for " + want +
                                             ": every rank must plan the same collective with the same arguments");
    // Mapped even when the arguments differ: the regions count as given,
    // and the next (matching) plan relies on them.
    for (size_t i = 0; i < theirs.size(); ++i) {
      Status imp = device.import_shared(theirs[i], m.fds[i]);
      m.fds[i] = -1;
      if (!imp.ok() && (st.ok() || st.code() == Code::invalid_argument))
        st = imp.prefix("mapping rank " + std::to_string(r) + "'s buffers");
    }
    full->send[static_cast<size_t>(r)] = s;
    full->recv[static_cast<size_t>(r)] = v;
  }
  return st;
}

}  // namespace

Result<std::unique_ptr<Plan>> Communicator::plan_across_processes(const CollectiveArgs& given) {
  const int n = size();
  const Deadline deadline = Deadline::after_ms(options_.join_timeout_ms);
  // This rank's buffers: {mine} or one per rank.
  auto mine = [&](const std::vector<Buffer>& v, const char* what) -> Result<Buffer> {
    if (v.empty()) return Buffer{};
    if (v.size() == 1) return v[0];
    if (v.size() == static_cast<size_t>(n)) return v[static_cast<size_t>(me_)];
    return error(Code::invalid_argument, std::string(what) + " has " + std::to_string(v.size()) +
                                             " buffers: across processes give this rank's alone, or one per rank");
  };
  Result<Buffer> send = mine(given.send, "send");
  if (!send.ok()) return send.status();
  Result<Buffer> recv = mine(given.recv, "recv");
  if (!recv.ok()) return recv.status();

  // This rank's signals, from its pool; given back if planning fails.
  std::vector<std::pair<uint64_t, size_t>> slots;
  struct GiveBack {
    Communicator* c;
    std::vector<std::pair<uint64_t, size_t>>* s;
    ~GiveBack() {
      for (const auto& [va, bytes] : *s) c->pool_give(va, bytes);
    }
  } give_back{this, &slots};
  auto take = [&](size_t bytes) -> Result<uint64_t> {
    Result<uint64_t> va = pool_take(bytes);
    if (va.ok()) slots.push_back({*va, bytes});
    return va;
  };
  Result<uint64_t> arrive = take(Signal::kBytes), ready = take(Signal::kBytes), trigger = take(Signal::kBytes);
  for (const Result<uint64_t>* r : {&arrive, &ready, &trigger})
    if (!r->ok()) return r->status();
  uint64_t sent = 0;  // prelaunch plans: this rank's lists ended (Plan::sent)
  if (given.prelaunch) {
    Result<uint64_t> v = take(Signal::kBytes);
    if (!v.ok()) return v.status();
    sent = *v;
  }
  uint64_t stamps = 0;
  if (given.timestamps) {
    Result<uint64_t> s = take(16 * kStampSlotsPerRank);
    if (!s.ok()) return s.status();
    stamps = *s;
  }
  std::vector<SharedRegion> regions;
  std::vector<int> fds;
  const CloseOnExit close_fds{&fds};
  CONCCL_RETURN_IF_ERROR(share_buffer(*send, &regions, &fds));
  CONCCL_RETURN_IF_ERROR(share_buffer(*recv, &regions, &fds));

  Writer w;
  w.put_string(args_digest(given));
  w.put<uint8_t>(static_cast<uint8_t>(given.op));
  put_buffer(w, *send, device_.topology());
  put_buffer(w, *recv, device_.topology());
  w.put<uint64_t>(*arrive);
  w.put<uint64_t>(*ready);
  w.put<uint64_t>(*trigger);
  w.put<uint64_t>(sent);
  w.put<uint64_t>(stamps);
  put_regions(w, regions);
  const std::string step = std::string("plan ") + coll_op_name(given.op);
  Result<std::vector<Bootstrap::Message>> all = boot_->exchange("plan", w.str(), fds, deadline);
  if (!all.ok()) return all.status().prefix(step);
  for (const SharedRegion& r : regions) {
    // A region at the same address from an earlier allocation is replaced.
    std::erase_if(shared_out_, [&](const std::pair<uint64_t, uint64_t>& x) { return x.first == r.va; });
    shared_out_.push_back({r.va, r.serial});
  }

  CollectiveArgs full = given;
  full.send.assign(static_cast<size_t>(n), Buffer{});
  full.recv.assign(static_cast<size_t>(n), Buffer{});
  RankSignals sig;
  Status st = read_plan_messages(device_, me_, args_digest(given), *all, &full, &sig,
                                 [this](const Buffer& b, uint64_t id, int r) { return peer_gpu(b.gpu, id, r); });
  close_all(*all);
  // Host pointers where this process has them (its own buffers; the
  // emulator's shared arenas), as in one process.
  for (std::vector<Buffer>* v : {&full.send, &full.recv})
    for (Buffer& b : *v)
      if (b.va) b.host = device_.host_pointer(b.va, b.size);

  Result<std::unique_ptr<Plan>> plan = error(Code::internal, "not planned");
  if (st.ok()) {
    CollectiveArgs args = full;
    args.variant = automatic_variant(args, args.prelaunch);
    st = validate_args(*this, args);
    if (st.ok()) {
      plan = compile(args, full, false, &sig);
      if (!plan.ok()) st = plan.status();
    }
  }
  // Every rank learns whether all could plan, so none is left with a plan
  // the others lack (its launch would wait for them forever).
  Result<std::vector<Bootstrap::Message>> verdicts =
      boot_->exchange("planned", st.ok() ? std::string() : st.to_string(), {}, deadline);
  if (!verdicts.ok()) return verdicts.status().prefix(step);
  if (!st.ok()) return st;
  for (int r = 0; r < n; ++r)
    if (!(*verdicts)[static_cast<size_t>(r)].data.empty())
      return error(Code::invalid_argument, "rank " + std::to_string(r) + " could not plan the " +
                                               coll_op_name(given.op) + ": " + (*verdicts)[static_cast<size_t>(r)].data);
  (*plan)->pool_slots_ = std::move(slots);
  slots.clear();
  return plan;
}

}  // namespace conccl

namespace conccl {

// ---- windows (the calls through them: calls.cpp) ----

Result<Window> Communicator::register_window(const Buffer& mine) {
  if (!boot_)
    return error(Code::invalid_argument,
                 "register_window is for ranks in separate processes (Communicator::create(device, rank, nranks, "
                 "id)); in one process every rank's buffers are known already: use plan()");
  CallState& cs = calls();
  CONCCL_RETURN_IF_ERROR(async_error());
  if (!mine.va || !mine.size)
    return error(Code::invalid_argument,
                 "register_window: give this rank's buffer (non-empty; from Device::alloc or nv::register_cuda)");
  const Deadline deadline = Deadline::after_ms(options_.join_timeout_ms);
  const uint32_t id = static_cast<uint32_t>(cs.windows.size());
  std::vector<SharedRegion> regions;
  std::vector<int> fds;
  const CloseOnExit close_fds{&fds};
  Status st = share_buffer(mine, &regions, &fds);
  Writer w;
  w.put<uint32_t>(id);
  put_buffer(w, mine, device_.topology());
  w.put_string(st.ok() ? std::string() : st.to_string());
  put_regions(w, st.ok() ? regions : std::vector<SharedRegion>{});
  Result<std::vector<Bootstrap::Message>> all =
      boot_->exchange("register_window", w.str(), st.ok() ? fds : std::vector<int>{}, deadline);
  if (!all.ok()) return all.status().prefix("register_window");
  for (const SharedRegion& r : regions) {
    std::erase_if(shared_out_, [&](const std::pair<uint64_t, uint64_t>& x) { return x.first == r.va; });
    shared_out_.push_back({r.va, r.serial});
  }
  CallState::WindowEntry e;
  e.ranks.assign(static_cast<size_t>(size()), Buffer{});
  for (int r = 0; r < size(); ++r) {
    Bootstrap::Message& m = (*all)[static_cast<size_t>(r)];
    Reader rd(m.data);
    const uint32_t their_id = rd.get<uint32_t>();
    uint64_t b_id = 0;
    Buffer b = get_buffer(rd, &b_id);
    b.gpu = peer_gpu(b.gpu, b_id, r);
    const std::string their_error = rd.get_string();
    std::vector<SharedRegion> theirs = get_regions(rd);
    if (r == me_) theirs.clear();
    if (!rd.ok() || theirs.size() != m.fds.size()) {
      if (st.ok()) st = error(Code::invalid_argument, "rank " + std::to_string(r) + " sent a malformed register_window message (another ConCCL version, or not a ConCCL rank)");
      continue;
    }
    if (st.ok() && !their_error.empty())
      st = error(Code::invalid_argument, "rank " + std::to_string(r) + " could not share its window: " + their_error);
    if (st.ok() && their_id != id)
      st = error(Code::invalid_argument, "rank " + std::to_string(r) + " registers its window number " +
                                             std::to_string(their_id) + " while rank " + std::to_string(me_) +
                                             " registers number " + std::to_string(id) +
                                             ": every rank registers (and deregisters) its windows in the same order");
    for (size_t i = 0; i < theirs.size(); ++i) {
      Status imp = device_.import_shared(theirs[i], m.fds[i]);
      m.fds[i] = -1;
      if (!imp.ok() && st.ok()) st = imp.prefix("register_window: mapping rank " + std::to_string(r) + "'s window");
    }
    b.host = device_.host_pointer(b.va, b.size);
    e.ranks[static_cast<size_t>(r)] = b;
  }
  close_all(*all);
  // Every rank learns whether all could map every window, so that none
  // keeps a window the others lack.
  Result<std::vector<Bootstrap::Message>> verdicts =
      boot_->exchange("register_window: mapped", st.ok() ? std::string() : st.to_string(), {}, deadline);
  if (!verdicts.ok()) return verdicts.status().prefix("register_window");
  if (!st.ok()) return st.prefix("register_window");
  for (int r = 0; r < size(); ++r)
    if (!(*verdicts)[static_cast<size_t>(r)].data.empty())
      return error(Code::invalid_argument,
                   "register_window: rank " + std::to_string(r) + " failed: " + (*verdicts)[static_cast<size_t>(r)].data);
  e.ranks[static_cast<size_t>(me_)] = mine;
  cs.windows.push_back(std::move(e));
  return Window{static_cast<int>(id), mine};
}

Status Communicator::deregister_window(const Window& win) {
  if (!boot_ || !calls_)
    return error(Code::invalid_argument, "deregister_window: this communicator has no windows");
  CallState& cs = *calls_;
  if (win.id < 0 || static_cast<size_t>(win.id) >= cs.windows.size() || cs.windows[static_cast<size_t>(win.id)].ranks.empty())
    return error(Code::invalid_argument, "deregister_window: window " + std::to_string(win.id) +
                                             " is not registered (never, or deregistered already)");
  const Deadline deadline = Deadline::after_ms(options_.join_timeout_ms);
  // Calls that use it end first (stream-ordered ones are watched).
  {
    std::unique_lock<std::mutex> lk(cs.mu);
    const uint64_t last = cs.windows[static_cast<size_t>(win.id)].last_call;
    while (!cs.pending.empty() && cs.pending.front().k <= last && cs.failed.ok() && !deadline.expired())
      cs.cv.wait_for(lk, std::chrono::milliseconds(1));
    if (!cs.pending.empty() && cs.pending.front().k <= last && cs.failed.ok())
      return error(Code::busy, "deregister_window: calls that use window " + std::to_string(win.id) +
                                   " are still in flight");
  }
  Result<std::vector<Bootstrap::Message>> all =
      boot_->exchange("deregister_window", std::to_string(win.id), {}, deadline);
  if (!all.ok()) return all.status().prefix("deregister_window");
  for (int r = 0; r < size(); ++r)
    if ((*all)[static_cast<size_t>(r)].data != std::to_string(win.id))
      return error(Code::invalid_argument, "deregister_window: rank " + std::to_string(r) + " deregisters window " +
                                               (*all)[static_cast<size_t>(r)].data + ", rank " + std::to_string(me_) +
                                               " window " + std::to_string(win.id) +
                                               ": every rank deregisters the same windows in the same order");
  // Its plans go with it (their lists hold its addresses).
  const uint64_t id = static_cast<uint64_t>(win.id);
  std::erase_if(cs.plans, [&](const auto& kv) { return kv.first[2] == id || kv.first[4] == id; });
  cs.windows[static_cast<size_t>(win.id)].ranks.clear();
  return Status();
}

}  // namespace conccl
