// src/collectives/build_ops.cpp - each collective and variant as command lists.
//
// Every copy into rank d is followed (on the same list) by an arrival on d's
// signal, so rank d's buffer is complete when its arrivals reach the count
// the builder recorded. Lists that depend on other lists (chain, swap) wait
// on those signals with DMA-side polls.
#include <algorithm>

#include "collectives/builder.hpp"

namespace conccl {

namespace {

uint64_t S(const CollectiveArgs& a, int r) { return a.send[static_cast<size_t>(r)].va; }
uint64_t R(const CollectiveArgs& a, int r) { return a.recv[static_cast<size_t>(r)].va; }

// One copy on list (src, engine_for(src, dst)) followed by dst's arrival;
// a large copy between ranks on one GPU with striping on, a share on each
// engine's list, each followed by its arrival (PlanBuilder::engine_shares).
Status copy_to(PlanBuilder& b, int src, int dst, uint64_t dst_va, uint64_t src_va, uint64_t bytes) {
  for (const EngineShare& s : b.engine_shares(src, dst, bytes)) {
    Result<PlanList*> l = b.list(src, s.engine);
    if (!l.ok()) return l.status();
    CONCCL_RETURN_IF_ERROR(b.copy(**l, dst_va + s.offset, src_va + s.offset, s.bytes, dst));
    CONCCL_RETURN_IF_ERROR(b.arrive(**l, dst));
  }
  return Status();
}

// A local copy (skipped when in place, so no arrival is expected either).
Status local_copy(PlanBuilder& b, int r, uint64_t dst_va, uint64_t src_va, uint64_t bytes) {
  if (dst_va == src_va) return Status();
  return copy_to(b, r, r, dst_va, src_va, bytes);
}

// Peers of src ordered by the engine that serves them, so broadcast pairs
// share a neighbouring engine.
std::vector<int> peers_by_engine(PlanBuilder& b, int src) {
  std::vector<int> peers;
  for (int d = 0; d < b.comm().size(); ++d)
    if (d != src) peers.push_back(d);
  std::stable_sort(peers.begin(), peers.end(), [&](int x, int y) {
    return b.engine_for(src, x) < b.engine_for(src, y);
  });
  return peers;
}

// src's chunk at src_va to offset dst_off of each peer's recv, two peers per
// broadcast packet (the engine of the second of each pair), a plain copy for
// a last odd one.
Status broadcast_pairs(PlanBuilder& b, const CollectiveArgs& a, int src, uint64_t src_va, uint64_t dst_off) {
  const std::vector<int> peers = peers_by_engine(b, src);
  size_t i = 0;
  for (; i + 1 < peers.size(); i += 2) {
    const int d0 = peers[i], d1 = peers[i + 1];
    Result<PlanList*> l = b.list(src, b.engine_for(src, d1));
    if (!l.ok()) return l.status();
    CONCCL_RETURN_IF_ERROR(b.settle(**l));
    CONCCL_RETURN_IF_ERROR((*l)->cb.copy_bcst(R(a, d0) + dst_off, R(a, d1) + dst_off, src_va, a.bytes));
    CONCCL_RETURN_IF_ERROR(b.arrive(**l, d0));
    CONCCL_RETURN_IF_ERROR(b.arrive(**l, d1));
  }
  if (i < peers.size()) CONCCL_RETURN_IF_ERROR(copy_to(b, src, peers[i], R(a, peers[i]) + dst_off, src_va, a.bytes));
  return Status();
}

// Back to back: src's peers grouped `ways` per engine; each group's copies
// run back to back on one engine and its arrivals follow the last copy.
template <typename Dst>
Status back_to_back(PlanBuilder& b, const CollectiveArgs& a, int src, Dst&& dst_and_src) {
  const int n = b.comm().size();
  const int ways = a.b2b_ways > 0 ? a.b2b_ways : std::max(1, n - 1);
  std::vector<int> peers;
  for (int k = 1; k < n; ++k) peers.push_back((src + k) % n);
  for (size_t g = 0; g < peers.size(); g += static_cast<size_t>(ways)) {
    const size_t end = std::min(peers.size(), g + static_cast<size_t>(ways));
    Result<PlanList*> l = b.list(src, b.engine_for(src, peers[g]));
    if (!l.ok()) return l.status();
    for (size_t i = g; i < end; ++i) {
      auto [dva, sva] = dst_and_src(peers[i]);
      CONCCL_RETURN_IF_ERROR(b.copy(**l, dva, sva, a.bytes));
    }
    for (size_t i = g; i < end; ++i) CONCCL_RETURN_IF_ERROR(b.arrive(**l, peers[i]));
  }
  return Status();
}


// p2p over the engines toward the destination, split by engine weight;
// `one_engine`: the first engine alone (the single variant).
Status p2p_over_engines(PlanBuilder& b, const CollectiveArgs& a, bool one_engine) {
  const int src = a.root, dst = a.peer;
  std::vector<int> engines = b.comm().engines_toward(src, dst);
  if (one_engine || engines.size() == 1) engines.resize(1);
  else if (a.engines > 0 && static_cast<size_t>(a.engines) < engines.size()) engines.resize(static_cast<size_t>(a.engines));
  const GpuInfo& g = b.comm().device().topology().gpus[static_cast<size_t>(b.comm().gpu(src))];
  for (const EngineShare& s : split_by_weight(g, engines, a.bytes)) {
    Result<PlanList*> l = b.list(src, s.engine);
    if (!l.ok()) return l.status();
    if (S(a, src) == R(a, dst)) return Status();  // in place: the first list alone, empty
    CONCCL_RETURN_IF_ERROR(b.copy(**l, R(a, dst) + s.offset, S(a, src) + s.offset, s.bytes, dst));
    CONCCL_RETURN_IF_ERROR(b.arrive(**l, dst));
  }
  return Status();
}

}  // namespace

Status build_p2p_striped(PlanBuilder& b, const CollectiveArgs& a) { return p2p_over_engines(b, a, false); }
Status build_p2p_single(PlanBuilder& b, const CollectiveArgs& a) { return p2p_over_engines(b, a, true); }

Status build_broadcast_fanout(PlanBuilder& b, const CollectiveArgs& a) {
  const int n = b.comm().size(), root = a.root;
  CONCCL_RETURN_IF_ERROR(local_copy(b, root, R(a, root), S(a, root), a.bytes));
  for (int d = 0; d < n; ++d)
    if (d != root) CONCCL_RETURN_IF_ERROR(copy_to(b, root, d, R(a, d), S(a, root), a.bytes));
  return Status();
}

Status build_broadcast_bcst(PlanBuilder& b, const CollectiveArgs& a) {
  CONCCL_RETURN_IF_ERROR(local_copy(b, a.root, R(a, a.root), S(a, a.root), a.bytes));
  return broadcast_pairs(b, a, a.root, S(a, a.root), 0);
}

// root -> root+1 -> ... in chunks: rank k forwards chunk c once it arrived.
Status build_broadcast_chain(PlanBuilder& b, const CollectiveArgs& a) {
  const int n = b.comm().size(), root = a.root;
  CONCCL_RETURN_IF_ERROR(local_copy(b, root, R(a, root), S(a, root), a.bytes));
  uint64_t chunks = a.chain_chunks > 0 ? static_cast<uint64_t>(a.chain_chunks)
                                       : std::clamp<uint64_t>(a.bytes / (256 * 1024), 1, 16);
  uint64_t cs = (a.bytes + chunks - 1) / chunks;
  cs = std::max<uint64_t>(256, (cs + 255) / 256 * 256);
  chunks = (a.bytes + cs - 1) / cs;
  for (int k = 0; k + 1 < n; ++k) {
    const int from = (root + k) % n, to = (root + k + 1) % n;
    Result<PlanList*> l = b.list(from, b.engine_for(from, to));
    if (!l.ok()) return l.status();
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t off = c * cs, len = std::min(cs, a.bytes - off);
      if (k > 0) CONCCL_RETURN_IF_ERROR(b.wait_arrivals(**l, from, c + 1));
      const uint64_t src = k == 0 ? S(a, root) : R(a, from);
      CONCCL_RETURN_IF_ERROR(b.copy(**l, R(a, to) + off, src + off, len, to));
      CONCCL_RETURN_IF_ERROR(b.arrive(**l, to));
    }
  }
  return Status();
}

Status build_gather_pcpy(PlanBuilder& b, const CollectiveArgs& a) {
  for (int r = 0; r < b.comm().size(); ++r) {
    const uint64_t dst = R(a, a.root) + uint64_t(r) * a.bytes;
    if (r == a.root) CONCCL_RETURN_IF_ERROR(local_copy(b, r, dst, S(a, r), a.bytes));
    else CONCCL_RETURN_IF_ERROR(copy_to(b, r, a.root, dst, S(a, r), a.bytes));
  }
  return Status();
}

Status build_scatter_fanout(PlanBuilder& b, const CollectiveArgs& a) {
  for (int r = 0; r < b.comm().size(); ++r) {
    const uint64_t src = S(a, a.root) + uint64_t(r) * a.bytes;
    if (r == a.root) CONCCL_RETURN_IF_ERROR(local_copy(b, r, R(a, r), src, a.bytes));
    else CONCCL_RETURN_IF_ERROR(copy_to(b, a.root, r, R(a, r), src, a.bytes));
  }
  return Status();
}

namespace {

// All-gather: each rank's chunk to its own slot, then `spread(s, off)` sends
// rank s's chunk to offset off of every peer.
template <typename Spread>
Status all_gather_with(PlanBuilder& b, const CollectiveArgs& a, Spread&& spread) {
  for (int s = 0; s < b.comm().size(); ++s) {
    const uint64_t off = uint64_t(s) * a.bytes;
    CONCCL_RETURN_IF_ERROR(local_copy(b, s, R(a, s) + off, S(a, s), a.bytes));
    CONCCL_RETURN_IF_ERROR(spread(s, off));
  }
  return Status();
}

// All-to-all by copies: rank s's chunk for itself, then `spread(s)` sends its
// chunk d to slot s of each peer d.
template <typename Spread>
Status all_to_all_with(PlanBuilder& b, const CollectiveArgs& a, Spread&& spread) {
  const uint64_t step = send_step(a);
  for (int s = 0; s < b.comm().size(); ++s) {
    CONCCL_RETURN_IF_ERROR(local_copy(b, s, R(a, s) + uint64_t(s) * a.bytes, S(a, s) + uint64_t(s) * step, a.bytes));
    CONCCL_RETURN_IF_ERROR(spread(s, step));
  }
  return Status();
}

}  // namespace

Status build_all_gather_pcpy(PlanBuilder& b, const CollectiveArgs& a) {
  return all_gather_with(b, a, [&](int s, uint64_t off) {
    for (int d = 0; d < b.comm().size(); ++d)
      if (d != s) CONCCL_RETURN_IF_ERROR(copy_to(b, s, d, R(a, d) + off, S(a, s), a.bytes));
    return Status();
  });
}

Status build_all_gather_bcst(PlanBuilder& b, const CollectiveArgs& a) {
  return all_gather_with(b, a, [&](int s, uint64_t off) { return broadcast_pairs(b, a, s, S(a, s), off); });
}

Status build_all_gather_b2b(PlanBuilder& b, const CollectiveArgs& a) {
  return all_gather_with(b, a, [&](int s, uint64_t off) {
    return back_to_back(b, a, s, [&](int d) { return std::make_pair(R(a, d) + off, S(a, s)); });
  });
}

// Pull: destination d's own list copies every rank's chunk into d's buffer
// (its own first), so that one list alone writes each buffer and d's
// arrivals become one store of the count (PlanBuilder::finish) instead of
// an add from every rank's list: on Hopper an add into host memory is an
// atomic over PCIe that a store is not (docs/perf/h200-collectives.md, run
// 61). The list reads every rank's send buffer, which is why it is for one
// process: across processes a rank's "sent" signal counts only its own
// lists (validate_args refuses it there).
Status build_all_gather_pull(PlanBuilder& b, const CollectiveArgs& a) {
  const int n = b.comm().size();
  for (int d = 0; d < n; ++d) {
    Result<PlanList*> l = b.list(d, b.engine_for(d, d));
    if (!l.ok()) return l.status();
    int copies = 0;
    for (int k = 0; k < n; ++k) {
      const int s = (d + k) % n;
      const uint64_t dst = R(a, d) + uint64_t(s) * a.bytes;
      if (dst == S(a, s)) continue;  // in place
      CONCCL_RETURN_IF_ERROR(b.copy(**l, dst, S(a, s), a.bytes, d));
      ++copies;
    }
    for (int i = 0; i < copies; ++i) CONCCL_RETURN_IF_ERROR(b.arrive(**l, d));
  }
  return Status();
}

Status build_all_to_all_pcpy(PlanBuilder& b, const CollectiveArgs& a) {
  return all_to_all_with(b, a, [&](int s, uint64_t step) {
    for (int d = 0; d < b.comm().size(); ++d)
      if (d != s)
        CONCCL_RETURN_IF_ERROR(copy_to(b, s, d, R(a, d) + uint64_t(s) * a.bytes, S(a, s) + uint64_t(d) * step, a.bytes));
    return Status();
  });
}

Status build_all_to_all_b2b(PlanBuilder& b, const CollectiveArgs& a) {
  return all_to_all_with(b, a, [&](int s, uint64_t step) {
    return back_to_back(
        b, a, s, [&](int d) { return std::make_pair(R(a, d) + uint64_t(s) * a.bytes, S(a, s) + uint64_t(d) * step); });
  });
}

// Phase 1 (out of place only): each rank copies its whole send buffer to its
// recv buffer; the diagonal chunk is then final. Phase 2: every pair (i, j)
// exchanges recv[i] chunk j with recv[j] chunk i in one SWAP, after both
// ranks' phase 1. Pairs are spread so each rank drives at most
// ceil(pairs / n) swaps. Validation refuses a send stride here.
Status build_all_to_all_swap(PlanBuilder& b, const CollectiveArgs& a) {
  const int n = b.comm().size();
  const uint64_t cb = a.bytes;
  const bool in_place = [&] {
    for (int r = 0; r < n; ++r)
      if (S(a, r) != R(a, r)) return false;
    return true;
  }();
  if (!in_place)
    for (int r = 0; r < n; ++r) {
      Result<PlanList*> l = b.list(r, b.engine_for(r, r));
      if (!l.ok()) return l.status();
      CONCCL_RETURN_IF_ERROR(b.copy(**l, R(a, r), S(a, r), cb * uint64_t(n), r));
      CONCCL_RETURN_IF_ERROR(b.arrive(**l, r));
      CONCCL_RETURN_IF_ERROR(b.ready(**l, r));
    }
  std::vector<int> load(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      const int owner = load[static_cast<size_t>(i)] <= load[static_cast<size_t>(j)] ? i : j;
      const int other = owner == i ? j : i;
      load[static_cast<size_t>(owner)]++;
      Result<PlanList*> l = b.list(owner, b.engine_for(owner, other));
      if (!l.ok()) return l.status();
      if (!in_place) {
        CONCCL_RETURN_IF_ERROR(b.wait_ready(**l, i, 1));
        CONCCL_RETURN_IF_ERROR(b.wait_ready(**l, j, 1));
      }
      CONCCL_RETURN_IF_ERROR(b.settle(**l));
      CONCCL_RETURN_IF_ERROR((*l)->cb.swap(R(a, i) + uint64_t(j) * cb, R(a, j) + uint64_t(i) * cb, cb));
      CONCCL_RETURN_IF_ERROR(b.arrive(**l, i));
      CONCCL_RETURN_IF_ERROR(b.arrive(**l, j));
    }
  return Status();
}

}  // namespace conccl
