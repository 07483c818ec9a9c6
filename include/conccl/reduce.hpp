// conccl/reduce.hpp - element types, reduction operators, and the one
// reduction step that reduce-scatter, all-reduce and reduce add to the DMA
// moves (docs/reductions.md).
//
// DMA engines cannot add bulk data, so each reduction is one small step:
// out[i] = in[0][i] op in[1][i] op ... op in[n-1][i], evaluated left to right
// in the order the inputs are given (rank order in the collectives), so that
// every backend gives the same bits:
//   - integers: exact, wrapping on overflow (two's complement), avg divides
//     the sum by n truncating toward zero (as C++ '/' does);
//   - float32: each step rounded to float32; avg is the sum divided by n
//     (one IEEE division, rounded to nearest);
//   - bfloat16 and float16: every input widened to float32, accumulated in
//     float32 in the same order, avg divided in float32, then rounded once
//     to the element type (round to nearest even; NaN stays NaN).
//   min/max of floats: a NaN input makes the result NaN (fmin/fmax would drop
//   it; a reduction that hides a NaN gradient hides a bug); the first NaN in
//   input order is the one kept. Of equal values the earlier input is kept,
//   so max(+0, -0) is +0 and max(-0, +0) is -0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "conccl/status.hpp"

namespace conccl {

// Values as NCCL numbers ncclDataType_t and ncclRedOp_t where they exist
// (nccl.h: ncclInt8=0 ncclUint8=1 ncclInt32=2 ncclUint32=3 ncclInt64=4
// ncclUint64=5 ncclFloat16=6 ncclFloat32=7 ncclFloat64=8 ncclBfloat16=9;
// ncclSum=0 ncclProd=1 ncclMax=2 ncclMin=3 ncclAvg=4).
enum class DataType : uint8_t { u8 = 1, i32 = 2, i64 = 4, f16 = 6, f32 = 7, bf16 = 9 };
enum class ReduceOp : uint8_t { sum = 0, prod = 1, max = 2, min = 3, avg = 4 };

size_t dtype_size(DataType t);                 // bytes per element
const char* dtype_name(DataType t);            // "float", "bfloat16", "half", "int32", "int64", "uint8"
bool parse_dtype(const std::string& s, DataType* out);  // nccl-tests' names and short forms (f32, bf16, ...)
const char* reduce_op_name(ReduceOp op);       // "sum", "prod", "max", "min", "avg"
bool parse_reduce_op(const std::string& s, ReduceOp* out);
// Whether the values are ones this library knows (C callers pass ints).
bool valid_dtype(int t);
bool valid_reduce_op(int op);

// One reduction: `count` elements of each input, reduced in the order given,
// into `out`. `out` may be one of the inputs (in place), but must not
// overlap one partly. Host addresses; they need no alignment.
struct ReduceStep {
  DataType dtype = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  size_t count = 0;
  std::span<const void* const> inputs;
  void* out = nullptr;
};

// The same step on device virtual addresses, for a stream to run in order
// with its other work (StreamOps::reduce: a kernel on a CUDA stream, the host
// on a HostStream).
struct DeviceReduceStep {
  int gpu = 0;  // which GPU of the device runs it (Device::reduce_now)
  DataType dtype = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  size_t count = 0;
  std::vector<uint64_t> inputs;
  uint64_t out = 0;
};

// The reference and the emulator's reduction: runs `step` on the host
// with the semantics above. Errors (invalid_argument): an unknown dtype or
// op, no inputs, a null input or out when count > 0, out overlapping an input
// without being it; count * element size overflowing size_t is out_of_range.
// count 0 with at least one input does nothing (null pointers are fine then).
Status reduce_on_host(const ReduceStep& step);

// bfloat16 / float16 <-> float32, as the reduction rounds them (exposed for
// tests and tools that make reference data). Widening is exact; narrowing
// rounds to nearest even, overflows to infinity, and gives float16
// subnormals. A NaN comes out as a quiet NaN both ways (never infinity).
float bf16_to_float(uint16_t v);
uint16_t float_to_bf16(float f);
float f16_to_float(uint16_t v);
uint16_t float_to_f16(float f);

}  // namespace conccl
