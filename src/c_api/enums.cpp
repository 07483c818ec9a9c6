// src/c_api/enums.cpp - the C header's enums are the C++ ones, number for
// number (checked here when the library builds, so a new or renumbered
// value cannot leave them apart), and their names come from the C++ tables
// (conccl_op_name, conccl_datatype_name, conccl_redop_name; Python reads
// its names through these).
#include "conccl/conccl.h"

#include <type_traits>

#include "conccl/collectives.hpp"
#include "conccl/reduce.hpp"
#include "conccl/status.hpp"

namespace conccl {
namespace {

template <typename E>
constexpr int num(E e) {
  return static_cast<int>(static_cast<std::underlying_type_t<E>>(e));
}

static_assert(CONCCL_OK == num(Code::ok) && CONCCL_ERR_INVALID_ARGUMENT == num(Code::invalid_argument) &&
              CONCCL_ERR_OUT_OF_RANGE == num(Code::out_of_range) && CONCCL_ERR_NOT_FOUND == num(Code::not_found) &&
              CONCCL_ERR_TIMEOUT == num(Code::timeout) && CONCCL_ERR_DEVICE_FAULT == num(Code::device_fault) &&
              CONCCL_ERR_UNAVAILABLE == num(Code::unavailable) &&
              CONCCL_ERR_RESOURCE_EXHAUSTED == num(Code::resource_exhausted) && CONCCL_ERR_BUSY == num(Code::busy) &&
              CONCCL_ERR_VERIFY_FAILED == num(Code::verify_failed) && CONCCL_ERR_INTERNAL == num(Code::internal),
              "conccl_status and conccl::Code disagree");
static_assert(CONCCL_MEM_DEVICE == num(MemKind::device) && CONCCL_MEM_HOST == num(MemKind::host) &&
                  CONCCL_MEM_CUDA == num(MemKind::cuda),
              "conccl_mem_kind and conccl::MemKind disagree");
static_assert(CONCCL_P2P == num(CollOp::p2p) && CONCCL_BROADCAST == num(CollOp::broadcast) &&
              CONCCL_GATHER == num(CollOp::gather) && CONCCL_SCATTER == num(CollOp::scatter) &&
              CONCCL_ALL_GATHER == num(CollOp::all_gather) && CONCCL_ALL_TO_ALL == num(CollOp::all_to_all),
              "conccl_op and conccl::CollOp disagree");
static_assert(CONCCL_VARIANT_AUTO == num(Variant::automatic) && CONCCL_VARIANT_PCPY == num(Variant::pcpy) &&
              CONCCL_VARIANT_BCST == num(Variant::bcst) && CONCCL_VARIANT_B2B == num(Variant::b2b) &&
              CONCCL_VARIANT_SWAP == num(Variant::swap) && CONCCL_VARIANT_FANOUT == num(Variant::fanout) &&
              CONCCL_VARIANT_CHAIN == num(Variant::chain) && CONCCL_VARIANT_STRIPED == num(Variant::striped) &&
              CONCCL_VARIANT_SINGLE == num(Variant::single) && CONCCL_VARIANT_PULL == num(Variant::pull),
              "conccl_variant and conccl::Variant disagree");
using QS = Communicator::Options::QueueSharing;
static_assert(CONCCL_QUEUES_AUTO == num(QS::automatic) && CONCCL_QUEUES_PER_RANK == num(QS::per_rank) &&
              CONCCL_QUEUES_PER_ENGINE == num(QS::per_engine),
              "conccl_queue_sharing and Communicator::Options::QueueSharing disagree");
static_assert(CONCCL_UINT8 == num(DataType::u8) && CONCCL_INT32 == num(DataType::i32) &&
              CONCCL_INT64 == num(DataType::i64) && CONCCL_FLOAT16 == num(DataType::f16) &&
              CONCCL_FLOAT32 == num(DataType::f32) && CONCCL_BFLOAT16 == num(DataType::bf16),
              "conccl_datatype and conccl::DataType disagree");
static_assert(CONCCL_SUM == num(ReduceOp::sum) && CONCCL_PROD == num(ReduceOp::prod) &&
              CONCCL_MAX == num(ReduceOp::max) && CONCCL_MIN == num(ReduceOp::min) && CONCCL_AVG == num(ReduceOp::avg),
              "conccl_redop and conccl::ReduceOp disagree");

}  // namespace
}  // namespace conccl

using namespace conccl;

extern "C" {

const char* conccl_op_name(conccl_op op) {
  const int v = static_cast<int>(op);
  if (v < CONCCL_P2P || v > CONCCL_ALL_TO_ALL) return "?";
  return coll_op_name(static_cast<CollOp>(v));
}

const char* conccl_datatype_name(conccl_datatype dt) {
  const int v = static_cast<int>(dt);
  return valid_dtype(v) ? dtype_name(static_cast<DataType>(v)) : "?";
}

const char* conccl_redop_name(conccl_redop op) {
  const int v = static_cast<int>(op);
  return valid_reduce_op(v) ? reduce_op_name(static_cast<ReduceOp>(v)) : "?";
}

}  // extern "C"
