// tools/sdma-probe/sweep_dtype.hpp - the element types of --dtype: how the
// sweep table counts elements (nccl-tests' count and type columns). DMA
// copies bytes, so the type only sets the element size: each rank's chunk
// is a whole number of elements.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace probe {

struct DType {
  std::string_view name;
  uint64_t bytes;
};

// The type named `name` (nccl-tests' names: uint8, int8, int32, uint32,
// int64, uint64, half, bfloat16, float, double), or nullptr.
const DType* find_dtype(std::string_view name);
// "uint8, int8, ...": for errors and help.
std::string dtype_names();

}  // namespace probe
