// src/collectives/variants.cpp - the variant table: one row per (op, variant)
// with its name, builder and the engine capability it needs; and the rule
// that picks a variant by size (choose_variant). A new variant
// is a value in `Variant` (include/conccl/collectives.hpp) and in the C
// header's conccl_variant (src/c_api/enums.cpp checks the numbers), a
// builder in build_ops.cpp, and a row here; names, the variants an op
// accepts, capability errors, sdma-probe's --variant and Python's VARIANTS
// all read this table.
#include "collectives/builder.hpp"

namespace conccl {

namespace {

struct VariantRow {
  CollOp op;
  Variant variant;
  const char* name;
  BuildFn build;
  bool Caps::*needs;       // the capability the variant needs, or nullptr
  const char* needs_text;  // that capability, for messages
};

constexpr const char* kBcstNeeds = "broadcast copies (Caps::broadcast_copy)";
constexpr const char* kSwapNeeds = "in-place swaps (Caps::swap, SDMA 4.4.2's SWAP_LINEAR)";

// In each op's order of preference for messages; the first row of an op is
// not its automatic choice (Communicator::automatic_variant picks that).
constexpr VariantRow kRows[] = {
    {CollOp::p2p, Variant::striped, "striped", build_p2p_striped, nullptr, ""},
    {CollOp::p2p, Variant::single, "single", build_p2p_single, nullptr, ""},
    {CollOp::broadcast, Variant::fanout, "fanout", build_broadcast_fanout, nullptr, ""},
    {CollOp::broadcast, Variant::bcst, "bcst", build_broadcast_bcst, &Caps::broadcast_copy, kBcstNeeds},
    {CollOp::broadcast, Variant::chain, "chain", build_broadcast_chain, nullptr, ""},
    {CollOp::gather, Variant::pcpy, "pcpy", build_gather_pcpy, nullptr, ""},
    {CollOp::scatter, Variant::fanout, "fanout", build_scatter_fanout, nullptr, ""},
    {CollOp::all_gather, Variant::pcpy, "pcpy", build_all_gather_pcpy, nullptr, ""},
    {CollOp::all_gather, Variant::bcst, "bcst", build_all_gather_bcst, &Caps::broadcast_copy, kBcstNeeds},
    {CollOp::all_gather, Variant::b2b, "b2b", build_all_gather_b2b, nullptr, ""},
    {CollOp::all_gather, Variant::pull, "pull", build_all_gather_pull, nullptr, ""},
    {CollOp::all_to_all, Variant::pcpy, "pcpy", build_all_to_all_pcpy, nullptr, ""},
    {CollOp::all_to_all, Variant::b2b, "b2b", build_all_to_all_b2b, nullptr, ""},
    {CollOp::all_to_all, Variant::swap, "swap", build_all_to_all_swap, &Caps::swap, kSwapNeeds},
};

const VariantRow* first_row_of(Variant v) {
  for (const VariantRow& r : kRows)
    if (r.variant == v) return &r;
  return nullptr;
}

}  // namespace

const char* variant_name(Variant v) {
  if (v == Variant::automatic) return "auto";
  const VariantRow* r = first_row_of(v);
  return r ? r->name : "?";
}

bool parse_variant(const std::string& name, Variant* out) {
  if (name == "auto") {
    *out = Variant::automatic;
    return true;
  }
  for (const VariantRow& r : kRows)
    if (name == r.name) {
      *out = r.variant;
      return true;
    }
  return false;
}

std::vector<Variant> variants_for(CollOp op) {
  std::vector<Variant> out{Variant::automatic};
  for (const VariantRow& r : kRows)
    if (r.op == op) out.push_back(r.variant);
  return out;
}

std::string variant_missing_cap(Variant v, const Caps& caps) {
  const VariantRow* r = first_row_of(v);
  if (r == nullptr || r->needs == nullptr || caps.*(r->needs)) return "";
  return r->needs_text;
}

BuildFn variant_builder(CollOp op, Variant v) {
  for (const VariantRow& r : kRows)
    if (r.op == op && r.variant == v) return r.build;
  return nullptr;
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
// above; a small all-gather of one process pulls instead, each rank's list
// gathering every chunk and storing its arrivals once (Caps::store_beats_add:
// on an H100 1 KiB per rank took 5.9 / 7.6 / 11 us for 2 / 4 / 8 ranks
// pulled against 7.6 / 11.9 / 21.9 us back to back, 64 KiB 6.7 / 8.7 / 13.9
// against 10.4 / 18.4 / 21.7; docs/perf/h200-collectives.md, run 62).
Variant choose_variant(CollOp op, uint64_t bytes, int ranks, const Caps& caps, bool prelaunch, bool packed_send,
                       bool one_process) {
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
      if (total <= (prelaunch ? 128 * K : 512 * K))
        return one_process && caps.store_beats_add ? Variant::pull : Variant::b2b;
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
