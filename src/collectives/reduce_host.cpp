// src/collectives/reduce_host.cpp - element type and operator names, the
// bfloat16/float16 conversions, and the host reduction (include/conccl/reduce.hpp
// is the spec this follows).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "conccl/reduce.hpp"

namespace conccl {

// ------------------------------------------------------------------- names

namespace {
struct DtypeName {
  DataType t;
  const char* name;  // nccl-tests' name; dtype_name() gives it
  size_t size;
};
constexpr DtypeName kDtypes[] = {
    {DataType::f32, "float", 4}, {DataType::bf16, "bfloat16", 2}, {DataType::f16, "half", 2},
    {DataType::i32, "int32", 4}, {DataType::i64, "int64", 8},     {DataType::u8, "uint8", 1},
};
// Other spellings parse_dtype accepts (short forms people type on a CLI).
struct DtypeAlias {
  const char* alias;
  DataType t;
};
constexpr DtypeAlias kDtypeAliases[] = {
    {"f32", DataType::f32},  {"float32", DataType::f32}, {"fp32", DataType::f32},
    {"f16", DataType::f16},  {"fp16", DataType::f16},    {"float16", DataType::f16},
    {"bf16", DataType::bf16}, {"i32", DataType::i32},    {"i64", DataType::i64},
    {"u8", DataType::u8},
};
struct OpName {
  ReduceOp op;
  const char* name;
};
constexpr OpName kOps[] = {
    {ReduceOp::sum, "sum"}, {ReduceOp::prod, "prod"}, {ReduceOp::max, "max"},
    {ReduceOp::min, "min"}, {ReduceOp::avg, "avg"},
};
const DtypeName* find_dtype(DataType t) {
  for (const DtypeName& d : kDtypes)
    if (d.t == t) return &d;
  return nullptr;
}
}  // namespace

size_t dtype_size(DataType t) {
  const DtypeName* d = find_dtype(t);
  return d ? d->size : 0;
}

const char* dtype_name(DataType t) {
  const DtypeName* d = find_dtype(t);
  return d ? d->name : "?";
}

bool parse_dtype(const std::string& s, DataType* out) {
  for (const DtypeName& d : kDtypes)
    if (s == d.name) {
      *out = d.t;
      return true;
    }
  for (const DtypeAlias& a : kDtypeAliases)
    if (s == a.alias) {
      *out = a.t;
      return true;
    }
  return false;
}

const char* reduce_op_name(ReduceOp op) {
  for (const OpName& o : kOps)
    if (o.op == op) return o.name;
  return "?";
}

bool parse_reduce_op(const std::string& s, ReduceOp* out) {
  for (const OpName& o : kOps)
    if (s == o.name) {
      *out = o.op;
      return true;
    }
  return false;
}

bool valid_dtype(int t) {
  for (const DtypeName& d : kDtypes)
    if (static_cast<int>(d.t) == t) return true;
  return false;
}

bool valid_reduce_op(int op) {
  for (const OpName& o : kOps)
    if (static_cast<int>(o.op) == op) return true;
  return false;
}

// ------------------------------------------------------------- conversions
//
// Bit-level, so that the result does not depend on the host's rounding mode
// or on whether the compiler has a native half type. The inline versions are
// what the reduction loop calls; the exported ones wrap them.

namespace {

constexpr uint32_t kF32QuietBit = 0x00400000;

inline float widen_bf16(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  // bfloat16 is the top half of a float32: widening is exact. A signaling
  // NaN is made quiet, as every other NaN this file returns is.
  if ((bits & 0x7f800000) == 0x7f800000 && (bits & 0x007fffff) != 0) bits |= kF32QuietBit;
  return std::bit_cast<float>(bits);
}

inline uint16_t narrow_bf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffff) > 0x7f800000) {
    // NaN: keep the sign and the top of the payload, and set the quiet bit so
    // that truncating the payload cannot turn it into infinity.
    return static_cast<uint16_t>((bits >> 16) | 0x0040);
  }
  // Round to nearest even on the 16 bits dropped: add just under half, plus
  // one more when the kept part is odd, so that an exact half rounds to even.
  // A carry out of the mantissa bumps the exponent, which is correct, and the
  // largest finite values round up to infinity (0x7f80) as IEEE requires.
  // No overflow of the uint32: NaNs (the only patterns near 0xffffffff) left above.
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

inline float widen_f16(uint16_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x8000) << 16;
  const uint32_t exp = (v >> 10) & 0x1f;
  const uint32_t mant = v & 0x3ff;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float32 (mant < 2^10 and the
    // result is a normal float32).
    const float mag = static_cast<float>(mant) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
  }
  if (exp == 0x1f) {
    // Infinity, or NaN (payload kept in the top bits, made quiet).
    uint32_t bits = sign | 0x7f800000 | (mant << 13);
    if (mant != 0) bits |= kF32QuietBit;
    return std::bit_cast<float>(bits);
  }
  // Normal: rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

inline uint16_t narrow_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t mag = bits & 0x7fffffff;
  if (mag > 0x7f800000) {
    // NaN: quiet, top 9 bits of the payload kept.
    return static_cast<uint16_t>(sign | 0x7e00 | ((mag >> 13) & 0x3ff));
  }
  // 65520 = 65504 (largest finite half) + half an ulp: from there on the value
  // rounds to infinity (the tie goes to the even neighbour, which is 2^16,
  // i.e. infinity). Infinity itself lands here too.
  if (mag >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);
  if (mag < 0x38800000) {
    // Below 2^-14, the smallest normal half: the result is a subnormal,
    // round(value * 2^24) ulps of 2^-24. Up to 2^-25 (half of the smallest
    // subnormal; the tie goes to even, i.e. zero) it is zero.
    if (mag <= 0x33000000) return sign;
    const uint32_t exp = mag >> 23;                           // 102..112 here
    const uint32_t significand = (mag & 0x007fffff) | 0x00800000;  // 24 bits
    // value * 2^24 = significand * 2^(exp - 127 - 23 + 24) = significand >> (126 - exp)
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t q = significand >> shift;
    const uint32_t rem = significand & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;  // q == 0x400 is the smallest normal: right too
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias 127 -> 15 and drop 13 mantissa bits, rounding to nearest
  // even. A carry into the exponent is right; it cannot reach infinity
  // because of the 65520 bound above.
  uint32_t h = (mag >> 13) - ((127 - 15) << 10);
  const uint32_t rem = mag & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

}  // namespace

float bf16_to_float(uint16_t v) { return widen_bf16(v); }
uint16_t float_to_bf16(float f) { return narrow_bf16(f); }
float f16_to_float(uint16_t v) { return widen_f16(v); }
uint16_t float_to_f16(float f) { return narrow_f16(f); }

// --------------------------------------------------------------- reduction
//
// One template per element kind; the switch on dtype and op happens once per
// call, outside the element loop. Each kind says how an element becomes an
// accumulator value (load), how the accumulator goes back (store), and how
// sum, prod, min, max and avg combine.

namespace {

// Integers: sum and prod in the unsigned type of the same width, where
// overflow wraps by definition (signed overflow would be undefined); the
// conversion back to the signed type is modular (C++20). min/max compare the
// signed values.
template <typename T>
struct IntKind {
  using Elem = T;
  using Acc = T;
  using U = std::make_unsigned_t<T>;
  static Acc load(Elem e) { return e; }
  static Elem store(Acc a) { return a; }
  // uint8 operands promote to int: 255 * 255 still fits, and the cast back to
  // U takes the product mod 256.
  static Acc add(Acc a, Acc b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b))); }
  static Acc mul(Acc a, Acc b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); }
  // Same tie rule as the floats (the earlier of equal values stays); for
  // integers equal values have equal bits, so it cannot show.
  static Acc max(Acc a, Acc b) { return b > a ? b : a; }
  static Acc min(Acc a, Acc b) { return b < a ? b : a; }
  // The wrapped sum divided by n, truncating toward zero. The division is done
  // in 64 bits so that n need not fit T (256 uint8 inputs: n would be 0 in T).
  static Acc avg(Acc sum, size_t n) {
    if constexpr (std::is_signed_v<T>) {
      return static_cast<T>(static_cast<int64_t>(sum) / static_cast<int64_t>(n));
    } else {
      return static_cast<T>(static_cast<uint64_t>(sum) / static_cast<uint64_t>(n));
    }
  }
};

// Floats: the accumulator is float32 for all three (bf16/f16 are widened,
// accumulated, and rounded once at the end).
template <typename E, float (*Load)(E), E (*Store)(float)>
struct FloatKind {
  using Elem = E;
  using Acc = float;
  static Acc load(Elem e) { return Load(e); }
  static Elem store(Acc a) { return Store(a); }
  static Acc add(Acc a, Acc b) { return a + b; }
  static Acc mul(Acc a, Acc b) { return a * b; }
  // A NaN anywhere makes the result NaN: the first NaN in input order is the
  // one kept. Otherwise of equal values (+0 and -0) the earlier one stays.
  static Acc max(Acc a, Acc b) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
    return b > a ? b : a;
  }
  static Acc min(Acc a, Acc b) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
    return b < a ? b : a;
  }
  static Acc avg(Acc sum, size_t n) { return sum / static_cast<float>(n); }
};

inline float load_f32(float f) { return f; }
inline float store_f32(float f) { return f; }

using F32 = FloatKind<float, load_f32, store_f32>;
using BF16 = FloatKind<uint16_t, widen_bf16, narrow_bf16>;
using F16 = FloatKind<uint16_t, widen_f16, narrow_f16>;

template <typename K, ReduceOp kOp>
inline typename K::Acc combine(typename K::Acc a, typename K::Acc b) {
  if constexpr (kOp == ReduceOp::prod) {
    return K::mul(a, b);
  } else if constexpr (kOp == ReduceOp::max) {
    return K::max(a, b);
  } else if constexpr (kOp == ReduceOp::min) {
    return K::min(a, b);
  } else {
    static_assert(kOp == ReduceOp::sum || kOp == ReduceOp::avg);
    return K::add(a, b);  // avg sums; the division comes once at the end
  }
}

// Works in chunks: a chunk of every input is read (memcpy'd into an aligned
// temporary, so buffers need no alignment) and combined before that chunk of
// `out` is written. That is what makes out == inputs[k] safe. The temporaries
// are small enough to stay in L1 and the inner loops are plain loops over
// arrays, which the compiler can vectorize.
template <typename K, ReduceOp kOp>
void reduce_chunks(const ReduceStep& step) {
  using Elem = typename K::Elem;
  using Acc = typename K::Acc;
  constexpr size_t kChunk = 1024;
  Elem tmp[kChunk];
  Acc acc[kChunk];
  const size_t n = step.inputs.size();
  for (size_t base = 0; base < step.count; base += kChunk) {
    const size_t m = std::min(kChunk, step.count - base);
    const size_t offset = base * sizeof(Elem);
    std::memcpy(tmp, static_cast<const char*>(step.inputs[0]) + offset, m * sizeof(Elem));
    for (size_t j = 0; j < m; ++j) acc[j] = K::load(tmp[j]);
    for (size_t k = 1; k < n; ++k) {
      std::memcpy(tmp, static_cast<const char*>(step.inputs[k]) + offset, m * sizeof(Elem));
      for (size_t j = 0; j < m; ++j) acc[j] = combine<K, kOp>(acc[j], K::load(tmp[j]));
    }
    if constexpr (kOp == ReduceOp::avg) {
      for (size_t j = 0; j < m; ++j) tmp[j] = K::store(K::avg(acc[j], n));
    } else {
      for (size_t j = 0; j < m; ++j) tmp[j] = K::store(acc[j]);
    }
    std::memcpy(static_cast<char*>(step.out) + offset, tmp, m * sizeof(Elem));
  }
}

template <typename K>
void reduce_kind(const ReduceStep& step) {
  switch (step.op) {
    case ReduceOp::sum: return reduce_chunks<K, ReduceOp::sum>(step);
    case ReduceOp::prod: return reduce_chunks<K, ReduceOp::prod>(step);
    case ReduceOp::max: return reduce_chunks<K, ReduceOp::max>(step);
    case ReduceOp::min: return reduce_chunks<K, ReduceOp::min>(step);
    case ReduceOp::avg: return reduce_chunks<K, ReduceOp::avg>(step);
  }
}

// Whether [a, a+bytes) and [b, b+bytes) share a byte without being the same range.
bool overlaps_partly(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  // Distances rather than end addresses: x + bytes could wrap.
  return x != y && (x < y ? y - x < bytes : x - y < bytes);
}

}  // namespace

Status reduce_on_host(const ReduceStep& step) {
  // Checked first: everything below needs the element size.
  if (!valid_dtype(static_cast<int>(step.dtype)))
    return error(Code::invalid_argument,
                 "reduce: unknown element type " + std::to_string(static_cast<int>(step.dtype)) +
                     "; use one of DataType::f32, bf16, f16, i32, i64, u8");
  if (!valid_reduce_op(static_cast<int>(step.op)))
    return error(Code::invalid_argument,
                 "reduce: unknown operator " + std::to_string(static_cast<int>(step.op)) +
                     "; use one of ReduceOp::sum, prod, max, min, avg");
  if (step.inputs.empty())
    return error(Code::invalid_argument,
                 "reduce: no inputs; pass at least one input buffer in ReduceStep::inputs");
  if (step.count == 0) return Status();  // nothing to read or write: null pointers are fine

  const size_t esize = dtype_size(step.dtype);
  if (step.count > std::numeric_limits<size_t>::max() / esize)
    return error(Code::out_of_range, "reduce: count " + std::to_string(step.count) + " of " +
                                         dtype_name(step.dtype) +
                                         " overflows a byte size; pass a smaller count");
  const size_t bytes = step.count * esize;
  if (step.out == nullptr)
    return error(Code::invalid_argument, "reduce: out is null with count " + std::to_string(step.count) +
                                             "; pass the output buffer's host address");
  for (size_t k = 0; k < step.inputs.size(); ++k) {
    if (step.inputs[k] == nullptr)
      return error(Code::invalid_argument,
                   "reduce: input " + std::to_string(k) + " of " + std::to_string(step.inputs.size()) +
                       " is null with count " + std::to_string(step.count) +
                       "; pass a host address for every input");
    // out may be an input exactly (in place), but a shifted overlap would
    // read elements this call already wrote.
    if (overlaps_partly(step.inputs[k], step.out, bytes))
      return error(Code::invalid_argument,
                   "reduce: out " + hex(reinterpret_cast<uintptr_t>(step.out)) + " overlaps input " +
                       std::to_string(k) + " " + hex(reinterpret_cast<uintptr_t>(step.inputs[k])) +
                       " without being the same buffer; reduce in place (out == input) or into a "
                       "separate buffer");
  }

  switch (step.dtype) {
    case DataType::f32: reduce_kind<F32>(step); break;
    case DataType::bf16: reduce_kind<BF16>(step); break;
    case DataType::f16: reduce_kind<F16>(step); break;
    case DataType::i32: reduce_kind<IntKind<int32_t>>(step); break;
    case DataType::i64: reduce_kind<IntKind<int64_t>>(step); break;
    case DataType::u8: reduce_kind<IntKind<uint8_t>>(step); break;
  }
  return Status();
}

}  // namespace conccl
