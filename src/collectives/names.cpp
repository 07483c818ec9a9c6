// src/collectives/names.cpp - op and variant names, and which op takes which variant.
#include <cstring>

#include "conccl/collectives.hpp"

namespace conccl {

namespace {
struct OpName {
  CollOp op;
  const char* name;
  const char* alias;
};
constexpr OpName kOps[] = {
    {CollOp::p2p, "p2p", "p2p"},
    {CollOp::broadcast, "broadcast", "bcast"},
    {CollOp::gather, "gather", "gather"},
    {CollOp::scatter, "scatter", "scatter"},
    {CollOp::all_gather, "allgather", "all_gather"},
    {CollOp::all_to_all, "alltoall", "all_to_all"},
};
struct VariantName {
  Variant v;
  const char* name;
};
constexpr VariantName kVariants[] = {
    {Variant::automatic, "auto"}, {Variant::pcpy, "pcpy"},     {Variant::bcst, "bcst"},
    {Variant::b2b, "b2b"},        {Variant::swap, "swap"},     {Variant::fanout, "fanout"},
    {Variant::chain, "chain"},    {Variant::striped, "striped"}, {Variant::single, "single"},
};
}  // namespace

const char* coll_op_name(CollOp op) {
  for (const OpName& o : kOps)
    if (o.op == op) return o.name;
  return "?";
}

bool parse_coll_op(const std::string& name, CollOp* out) {
  for (const OpName& o : kOps)
    if (name == o.name || name == o.alias) {
      *out = o.op;
      return true;
    }
  return false;
}

const char* variant_name(Variant v) {
  for (const VariantName& n : kVariants)
    if (n.v == v) return n.name;
  return "?";
}

bool parse_variant(const std::string& name, Variant* out) {
  for (const VariantName& n : kVariants)
    if (name == n.name) {
      *out = n.v;
      return true;
    }
  return false;
}

std::vector<Variant> variants_for(CollOp op) {
  switch (op) {
    case CollOp::p2p: return {Variant::automatic, Variant::striped, Variant::single};
    case CollOp::broadcast: return {Variant::automatic, Variant::fanout, Variant::bcst, Variant::chain};
    case CollOp::gather: return {Variant::automatic, Variant::pcpy};
    case CollOp::scatter: return {Variant::automatic, Variant::fanout};
    case CollOp::all_gather: return {Variant::automatic, Variant::pcpy, Variant::bcst, Variant::b2b};
    case CollOp::all_to_all: return {Variant::automatic, Variant::pcpy, Variant::b2b, Variant::swap};
  }
  return {};
}

std::string variant_missing_cap(Variant v, const Caps& caps) {
  if (v == Variant::bcst && !caps.broadcast_copy) return "broadcast copies (Caps::broadcast_copy)";
  if (v == Variant::swap && !caps.swap) return "in-place swaps (Caps::swap, SDMA 4.4.2's SWAP_LINEAR)";
  return "";
}

// The rule, from AMD DMA-Latte's MI300X measurements (8 GPUs; speedup over
// pcpy by collective size, AMDResearch/AMD-DMA-Latte PERFORMANCE.md; sizes here
// are the collective's total = ranks * bytes):
//   all-gather: b2b best up to 256-512 KB (2.6x), bcst up to 2-4 MB (1.1-1.75x),
//               pcpy above; with prelaunch b2b <= 128 KB, bcst <= 256 KB.
//   all-to-all: b2b up to 256 KB (2.1-2.8x), swap up to 4 MB (1.2-1.8x), pcpy
//               above; with prelaunch b2b <= 32 KB, swap <= 2 MB.
//   broadcast:  one packet feeds two peers (bcst) while the copy is short;
//               a pipelined chain once each link's bandwidth matters.
// bcst needs broadcast copies and swap in-place swaps (Caps); where the
// engines lack them, the next variant of the rule takes their place.
// NVIDIA copy engines (no broadcast, no swap): b2b for small collectives,
// where one engine's back-to-back copies save per-list synchronisation, pcpy
// above.
Variant choose_variant(CollOp op, uint64_t bytes, int ranks, const Caps& caps, bool prelaunch, bool packed_send) {
  const uint64_t total = bytes * static_cast<uint64_t>(ranks > 0 ? ranks : 1);
  constexpr uint64_t K = 1024, M = 1024 * 1024;
  switch (op) {
    case CollOp::p2p: return bytes >= 1 * M ? Variant::striped : Variant::single;
    case CollOp::broadcast:
      if (ranks <= 2) return Variant::fanout;
      if (total <= 4 * M) return caps.broadcast_copy ? Variant::bcst : Variant::fanout;
      return Variant::chain;
    case CollOp::gather: return Variant::pcpy;
    case CollOp::scatter: return Variant::fanout;
    case CollOp::all_gather:
      if (total <= (prelaunch ? 128 * K : 512 * K)) return Variant::b2b;
      if (total <= (prelaunch ? 256 * K : 4 * M) && caps.broadcast_copy) return Variant::bcst;
      return Variant::pcpy;
    case CollOp::all_to_all: {
      if (total <= (prelaunch ? 32 * K : 256 * K)) return Variant::b2b;
      if (caps.swap && packed_send && total <= (prelaunch ? 2 * M : 4 * M)) return Variant::swap;
      return Variant::pcpy;
    }
  }
  return Variant::pcpy;
}

}  // namespace conccl
