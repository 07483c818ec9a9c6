// src/collectives/names.cpp - op names (the variants' are in variants.cpp's table).
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

}  // namespace conccl
