// src/collectives/validate.cpp - reject bad collective arguments before
// anything is recorded or submitted.
#include <cinttypes>
#include <cstdio>

#include "collectives/builder.hpp"

namespace conccl {

namespace {

struct Xfer {
  uint64_t dst, src, len;
  int dst_rank, src_rank;
};

bool overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) { return a < b + blen && b < a + alen; }

// The logical transfers of an op, whatever the variant.
std::vector<Xfer> transfers(const CollectiveArgs& a, int n) {
  std::vector<Xfer> x;
  const uint64_t b = a.bytes;
  auto S = [&](int r) { return a.send[static_cast<size_t>(r)].va; };
  auto R = [&](int r) { return a.recv[static_cast<size_t>(r)].va; };
  switch (a.op) {
    case CollOp::p2p: x.push_back({R(a.peer), S(a.root), b, a.peer, a.root}); break;
    case CollOp::broadcast:
      for (int r = 0; r < n; ++r) x.push_back({R(r), S(a.root), b, r, a.root});
      break;
    case CollOp::gather:
      for (int r = 0; r < n; ++r) x.push_back({R(a.root) + uint64_t(r) * b, S(r), b, a.root, r});
      break;
    case CollOp::scatter:
      for (int r = 0; r < n; ++r) x.push_back({R(r), S(a.root) + uint64_t(r) * b, b, r, a.root});
      break;
    case CollOp::all_gather:
      for (int s = 0; s < n; ++s)
        for (int d = 0; d < n; ++d) x.push_back({R(d) + uint64_t(s) * b, S(s), b, d, s});
      break;
    case CollOp::all_to_all:
      for (int s = 0; s < n; ++s)
        for (int d = 0; d < n; ++d) x.push_back({R(d) + uint64_t(s) * b, S(s) + uint64_t(d) * send_step(a), b, d, s});
      break;
  }
  return x;
}

}  // namespace

Status validate_args(const Communicator& comm, const CollectiveArgs& a) {
  const int n = comm.size();
  const char* op = coll_op_name(a.op);
  auto bad = [&](const std::string& m) { return error(Code::invalid_argument, std::string(op) + ": " + m); };
  if (a.bytes == 0) return bad("bytes is 0; give the per-rank chunk size (at least 1 byte)");
  bool variant_ok = false;
  for (Variant v : variants_for(a.op)) variant_ok |= v == a.variant;
  if (!variant_ok) {
    std::string names;
    for (Variant v : variants_for(a.op)) names += (names.empty() ? "" : ", ") + std::string(variant_name(v));
    return bad(std::string("variant '") + variant_name(a.variant) + "' does not apply (variants: " + names + ")");
  }
  if (a.root < 0 || a.root >= n)
    return bad("root rank " + std::to_string(a.root) + " is outside the communicator (ranks 0.." + std::to_string(n - 1) + ")");
  if (a.op == CollOp::p2p && (a.peer < 0 || a.peer >= n))
    return bad("peer rank " + std::to_string(a.peer) + " is outside the communicator (ranks 0.." + std::to_string(n - 1) + ")");
  if (a.send.size() != static_cast<size_t>(n) || a.recv.size() != static_cast<size_t>(n))
    return bad("give one send and one recv Buffer per rank (" + std::to_string(n) + " each; got " +
               std::to_string(a.send.size()) + " and " + std::to_string(a.recv.size()) + ")" +
               (a.op == CollOp::broadcast || a.op == CollOp::scatter || a.op == CollOp::p2p
                    ? "; or, for this op, send = {the root's buffer} alone"
                    : ""));
  if (a.variant == Variant::pull && comm.rank() >= 0)
    return bad("the pull variant has each rank's list read every other rank's send buffer, and across processes a "
               "rank cannot tell when the other processes' lists are done with its own; use b2b or pcpy (or auto)");
  if (std::string need = variant_missing_cap(a.variant, comm.caps()); !need.empty()) {
    std::string ok;
    for (Variant v : variants_for(a.op))
      if (v != Variant::automatic && variant_missing_cap(v, comm.caps()).empty())
        ok += (ok.empty() ? "" : ", ") + std::string(variant_name(v));
    return bad(std::string("the ") + variant_name(a.variant) + " variant needs " + need + ", which " +
               comm.isa(0).name() + " engines do not have; use " + ok + " (or auto)");
  }

  if (a.send_stride != 0) {
    if (a.op != CollOp::all_to_all) return bad("send_stride is for all_to_all only; leave it 0");
    if (a.send_stride < a.bytes)
      return bad("send_stride " + std::to_string(a.send_stride) + " is less than bytes " + std::to_string(a.bytes) +
                 ": each destination's chunk would overlap the next; give at least bytes (or 0: packed)");
    if (a.send_stride > (uint64_t{1} << 56) / static_cast<uint64_t>(n))
      return bad("send_stride " + std::to_string(a.send_stride) + " on " + std::to_string(n) +
                 " ranks spans more bytes than any buffer holds");
    if (a.variant == Variant::swap && a.send_stride != a.bytes)
      return bad("the swap variant exchanges packed chunks in place: it takes no send_stride (use pcpy or b2b)");
  }

  // Which buffers are used and how big they must be.
  const uint64_t nb = a.bytes * static_cast<uint64_t>(n);
  std::vector<std::pair<const Buffer*, uint64_t>> need;  // buffer, bytes needed
  std::vector<std::string> what;
  auto use = [&](const std::vector<Buffer>& v, int r, uint64_t bytes, const char* kind) {
    need.push_back({&v[static_cast<size_t>(r)], bytes});
    what.push_back(std::string(kind) + "[" + std::to_string(r) + "]");
  };
  for (int r = 0; r < n; ++r) {
    switch (a.op) {
      case CollOp::p2p:
        if (r == a.root) use(a.send, r, a.bytes, "send");
        if (r == a.peer) use(a.recv, r, a.bytes, "recv");
        break;
      case CollOp::broadcast:
        if (r == a.root) use(a.send, r, a.bytes, "send");
        use(a.recv, r, a.bytes, "recv");
        break;
      case CollOp::gather:
        use(a.send, r, a.bytes, "send");
        if (r == a.root) use(a.recv, r, nb, "recv");
        break;
      case CollOp::scatter:
        if (r == a.root) use(a.send, r, nb, "send");
        use(a.recv, r, a.bytes, "recv");
        break;
      case CollOp::all_gather:
        use(a.send, r, a.bytes, "send");
        use(a.recv, r, nb, "recv");
        break;
      case CollOp::all_to_all:
        use(a.send, r, all_to_all_send_bytes(a, n), "send");
        use(a.recv, r, nb, "recv");
        break;
    }
  }
  for (size_t i = 0; i < need.size(); ++i) {
    const Buffer& b = *need[i].first;
    if (b.va == 0) return bad(what[i] + " is missing (no buffer given)");
    if (b.size < need[i].second)
      return bad("mismatched sizes: " + what[i] + " has " + std::to_string(b.size) + " bytes but " + op + " of " +
                 std::to_string(a.bytes) + " bytes per rank on " + std::to_string(n) + " ranks needs " +
                 std::to_string(need[i].second));
    if (b.gpu >= 0 && comm.rank_of_gpu(b.gpu) < 0)
      return bad(what[i] + " lives on GPU " + std::to_string(b.gpu) + ", which is outside the communicator");
    if (!comm.device().is_mapped(b.va, need[i].second))
      return bad(what[i] + " [" + hex(b.va) + ", +" + std::to_string(need[i].second) +
                 ") is not mapped for the engines; allocate it with Device::alloc (or register it)");
  }

  // Overlaps: destinations must be disjoint, and no destination may overlap
  // a source it does not itself copy from in place.
  const std::vector<Xfer> xs = transfers(a, n);
  bool swap_in_place = a.op == CollOp::all_to_all && a.variant == Variant::swap;
  for (int r = 0; r < n && swap_in_place; ++r)
    swap_in_place = a.send[static_cast<size_t>(r)].va == a.recv[static_cast<size_t>(r)].va;
  for (size_t i = 0; i < xs.size(); ++i) {
    for (size_t j = i + 1; j < xs.size(); ++j)
      if (overlap(xs[i].dst, xs[i].len, xs[j].dst, xs[j].len))
        return bad("destinations overlap: rank " + std::to_string(xs[i].dst_rank) + "'s region at " + hex(xs[i].dst) +
                   " and rank " + std::to_string(xs[j].dst_rank) + "'s at " + hex(xs[j].dst) + "; use disjoint buffers");
    if (swap_in_place || xs[i].dst == xs[i].src) continue;  // in place: writes nothing, clobbers no source
    for (size_t j = 0; j < xs.size(); ++j) {
      if (!overlap(xs[i].dst, xs[i].len, xs[j].src, xs[j].len)) continue;
      if (i == j && xs[i].dst == xs[i].src) continue;  // in place: nothing to copy
      return bad("the destination at " + hex(xs[i].dst) + " (rank " + std::to_string(xs[i].dst_rank) +
                 ") overlaps a source at " + hex(xs[j].src) + " (rank " + std::to_string(xs[j].src_rank) +
                 "); use separate send and recv buffers" +
                 (a.op == CollOp::all_to_all ? " (in-place all-to-all needs the swap variant)" : ""));
    }
  }
  return Status();
}

}  // namespace conccl
