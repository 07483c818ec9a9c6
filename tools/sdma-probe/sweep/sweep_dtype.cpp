// tools/sdma-probe/sweep_dtype.cpp - see sweep_dtype.hpp.
#include "sweep/sweep_dtype.hpp"

namespace probe {
namespace {

constexpr DType kTypes[] = {{"uint8", 1}, {"int8", 1},  {"int32", 4},    {"uint32", 4}, {"int64", 8},
                            {"uint64", 8}, {"half", 2}, {"bfloat16", 2}, {"float", 4},  {"double", 8}};

}  // namespace

const DType* find_dtype(std::string_view name) {
  for (const DType& t : kTypes)
    if (t.name == name) return &t;
  return nullptr;
}

std::string dtype_names() {
  std::string s;
  for (const DType& t : kTypes) s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

}  // namespace probe
