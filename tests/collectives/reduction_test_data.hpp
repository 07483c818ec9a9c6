// tests/collectives/reduction_test_data.hpp - inputs for the reduction
// tests, the arguments of a call, and the reference they are checked
// against: random values of each element type (never all zeros; floats
// small enough that products stay finite), and the reduction over ranks in
// rank order by the host reduction (conccl/reduce.hpp), itself tested bit
// by bit in reduce_host_test.cpp.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "conccl/collectives.hpp"
#include "conccl/reduce.hpp"

namespace conccl::redtest {

// `count` random elements of `t` as bytes, from `seed`.
inline std::vector<uint8_t> random_elements(DataType t, uint64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 17);
  std::vector<uint8_t> out(count * dtype_size(t));
  std::uniform_real_distribution<float> small(-2.0f, 2.0f);
  for (uint64_t i = 0; i < count; ++i) {
    uint8_t* p = out.data() + i * dtype_size(t);
    switch (t) {
      case DataType::u8: *p = static_cast<uint8_t>(rng() | 1); break;
      case DataType::i32: {
        const int32_t v = static_cast<int32_t>(rng());
        std::memcpy(p, &v, 4);
        break;
      }
      case DataType::i64: {
        const int64_t v = static_cast<int64_t>(rng());
        std::memcpy(p, &v, 8);
        break;
      }
      case DataType::f32: {
        const float v = small(rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case DataType::bf16: {
        const uint16_t v = float_to_bf16(small(rng));
        std::memcpy(p, &v, 2);
        break;
      }
      case DataType::f16: {
        const uint16_t v = float_to_f16(small(rng));
        std::memcpy(p, &v, 2);
        break;
      }
    }
  }
  return out;
}

// The reduction of inputs[0..n) (each `count` elements from byte `at`) in
// rank order.
inline std::vector<uint8_t> reference(DataType t, ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
                                      uint64_t at, uint64_t count) {
  std::vector<const void*> in;
  for (const auto& v : inputs) in.push_back(v.data() + at);
  std::vector<uint8_t> out(count * dtype_size(t));
  ReduceStep s;
  s.dtype = t;
  s.op = op;
  s.count = count;
  s.inputs = in;
  s.out = out.data();
  (void)reduce_on_host(s);
  return out;
}

// The arguments of one reduction call, its buffers (send, recv) still to
// be given.
inline ReductionArgs reduction_args(ReduceColl coll, DataType t, ReduceOp op, uint64_t count, int root) {
  return {.coll = coll, .dtype = t, .op = op, .count = count, .root = root, .send = {}, .recv = {}};
}

inline constexpr DataType kTypes[] = {DataType::f32, DataType::bf16, DataType::f16,
                                      DataType::i32, DataType::i64,  DataType::u8};
inline constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};

}  // namespace conccl::redtest
