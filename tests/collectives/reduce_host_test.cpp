// tests/collectives/reduce_host_test.cpp - the host reduction
// (include/conccl/reduce.hpp): every dtype x op x input count against a
// reference written here, in place, integer wrap-around and avg truncation,
// NaN in min/max, the bfloat16/float16 conversions (exhaustively against a
// value-based reference), names, and argument errors.
//
// The references are deliberately written differently from the library:
// half/bfloat16 values come from their fields through ldexp, rounding picks
// the nearest representable value by comparing doubles, and integer sums and
// products are taken mod 2^64 and truncated once at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "conccl/reduce.hpp"

namespace conccl {
namespace {

// ------------------------------------------------- conversion references

// A 16-bit float format: bfloat16 (8 exponent bits, 7 mantissa bits) or
// float16 (5, 10).
struct Format {
  int exp_bits;
  int mant_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint16_t exp_mask() const { return static_cast<uint16_t>(((1 << exp_bits) - 1) << mant_bits); }
  uint16_t inf_bits() const { return exp_mask(); }
  bool is_nan(uint16_t b) const {
    return (b & exp_mask()) == exp_mask() && (b & ((1 << mant_bits) - 1)) != 0;
  }
  // The value of a non-NaN pattern, from its fields. The all-ones exponent
  // with mantissa 0 is given its "next binade" value 2^(emax+1) rather than
  // infinity: IEEE rounds to infinity exactly when the value would round to
  // that number with an unbounded exponent, so it serves as the top neighbour.
  double value(uint16_t b) const {
    const int sign = b >> 15;
    const int exp = (b >> mant_bits) & ((1 << exp_bits) - 1);
    const int mant = b & ((1 << mant_bits) - 1);
    double mag = exp == 0 ? std::ldexp(mant, 1 - bias() - mant_bits)
                          : std::ldexp((1 << mant_bits) + mant, exp - bias() - mant_bits);
    return sign ? -mag : mag;
  }
  // Rounds a float to the nearest pattern; ties to the even pattern.
  // NaN input: returns the canonical quiet NaN (callers only check is_nan).
  uint16_t round(float f) const {
    if (std::isnan(f)) return static_cast<uint16_t>(exp_mask() | (1 << (mant_bits - 1)));
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= value(inf_bits())) return sign | inf_bits();  // includes infinity
    // Non-negative patterns 0..inf_bits() are increasing in value: bisect for
    // the last one <= a.
    uint32_t lo = 0, hi = inf_bits();
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      (value(static_cast<uint16_t>(mid)) <= a ? lo : hi) = mid;
    }
    if (value(static_cast<uint16_t>(lo)) == a) return static_cast<uint16_t>(sign | lo);
    // 2a and lo+hi are exact in double (both neighbours have few bits), so
    // this compares distances exactly.
    const double twice = 2 * a, sum = value(static_cast<uint16_t>(lo)) + value(static_cast<uint16_t>(hi));
    const uint32_t pick = twice < sum ? lo : twice > sum ? hi : (lo % 2 == 0 ? lo : hi);
    return static_cast<uint16_t>(sign | pick);
  }
};
constexpr Format kBf16{8, 7};
constexpr Format kF16{5, 10};

float ref_widen(const Format& fmt, uint16_t b) { return static_cast<float>(fmt.value(b)); }

float f32_bits(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t bits_f32(float f) { return std::bit_cast<uint32_t>(f); }

// -------------------------------------------------- reduction reference

using Bytes = std::vector<uint8_t>;

template <typename T>
T get(const Bytes& b, size_t i) {
  T v;
  std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void put(Bytes& b, size_t i, T v) {
  std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
}

// Integers: sum and prod exactly mod 2^64 (uint64 arithmetic), truncated to
// the element width once at the end, which equals wrapping at every step.
template <typename T>
Bytes ref_int(ReduceOp op, const std::vector<Bytes>& in, size_t count) {
  Bytes out(count * sizeof(T));
  for (size_t i = 0; i < count; ++i) {
    uint64_t sum = 0, prod = 1;
    T mx = get<T>(in[0], i), mn = mx;
    for (const Bytes& b : in) {
      const T v = get<T>(b, i);
      sum += static_cast<uint64_t>(static_cast<int64_t>(v));
      prod *= static_cast<uint64_t>(static_cast<int64_t>(v));
      mx = std::max(mx, v);
      mn = std::min(mn, v);
    }
    T r{};
    switch (op) {
      case ReduceOp::sum: r = static_cast<T>(sum); break;
      case ReduceOp::prod: r = static_cast<T>(prod); break;
      case ReduceOp::max: r = mx; break;
      case ReduceOp::min: r = mn; break;
      case ReduceOp::avg: {
        const T wrapped = static_cast<T>(sum);
        r = static_cast<T>(static_cast<int64_t>(wrapped) / static_cast<int64_t>(in.size()));
        break;
      }
    }
    put<T>(out, i, r);
  }
  return out;
}

// Floats: widen (exact), then the documented left-to-right float32 steps.
// The data has no NaN and no zeros, so std::max/std::min are a fair reference.
float ref_float_step(ReduceOp op, float acc, float x) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return acc + x;
    case ReduceOp::prod: return acc * x;
    case ReduceOp::max: return std::max(acc, x);
    case ReduceOp::min: return std::min(acc, x);
  }
  return NAN;
}

Bytes ref_reduce(DataType t, ReduceOp op, const std::vector<Bytes>& in, size_t count) {
  switch (t) {
    case DataType::i32: return ref_int<int32_t>(op, in, count);
    case DataType::i64: return ref_int<int64_t>(op, in, count);
    case DataType::u8: return ref_int<uint8_t>(op, in, count);
    default: break;
  }
  Bytes out(count * dtype_size(t));
  const Format* fmt = t == DataType::bf16 ? &kBf16 : t == DataType::f16 ? &kF16 : nullptr;
  for (size_t i = 0; i < count; ++i) {
    float acc = 0;
    for (size_t k = 0; k < in.size(); ++k) {
      const float x = fmt ? ref_widen(*fmt, get<uint16_t>(in[k], i)) : get<float>(in[k], i);
      acc = k == 0 ? x : ref_float_step(op, acc, x);
    }
    if (op == ReduceOp::avg) acc /= static_cast<float>(in.size());
    if (fmt)
      put<uint16_t>(out, i, fmt->round(acc));
    else
      put<float>(out, i, acc);
  }
  return out;
}

// ------------------------------------------------------- random inputs

// Random non-zero elements: full-range integers (sums and products wrap
// often), floats with a spread of exponents (products of 8 stay finite for
// float32/bfloat16; float16 products may reach infinity, which is a defined
// result too), and some float16 subnormals.
Bytes random_input(DataType t, size_t count, std::mt19937& rng) {
  Bytes b(count * dtype_size(t));
  std::uniform_int_distribution<uint32_t> u32;
  for (size_t i = 0; i < count; ++i) {
    switch (t) {
      case DataType::u8: put<uint8_t>(b, i, static_cast<uint8_t>(1 + u32(rng) % 255)); break;
      case DataType::i32: {
        int32_t v;
        do v = static_cast<int32_t>(u32(rng));
        while (v == 0);
        put<int32_t>(b, i, v);
        break;
      }
      case DataType::i64: {
        int64_t v;
        do v = static_cast<int64_t>((static_cast<uint64_t>(u32(rng)) << 32) | u32(rng));
        while (v == 0);
        put<int64_t>(b, i, v);
        break;
      }
      case DataType::f32: {
        const uint32_t r = u32(rng);
        const float mag = std::ldexp(1.0f + static_cast<float>(r & 0xffff) / 65536.0f,
                                     static_cast<int>((r >> 16) % 21) - 10);
        put<float>(b, i, (r >> 31) ? -mag : mag);
        break;
      }
      case DataType::bf16: {
        const uint32_t r = u32(rng);
        const uint32_t exp = 127 - 10 + (r >> 8) % 21;
        put<uint16_t>(b, i, static_cast<uint16_t>(((r >> 31) << 15) | (exp << 7) | (r & 0x7f)));
        break;
      }
      case DataType::f16: {
        const uint32_t r = u32(rng), s = u32(rng);
        uint32_t mant = r & 0x3ff;
        uint32_t exp = 15 - 4 + s % 6;  // 2^-4 .. just under 4
        if ((s >> 8) % 16 == 0) {       // one in 16: a subnormal
          exp = 0;
          if (mant == 0) mant = 1;
        }
        put<uint16_t>(b, i, static_cast<uint16_t>(((r >> 31) << 15) | (exp << 10) | mant));
        break;
      }
    }
  }
  return b;
}

constexpr DataType kAllTypes[] = {DataType::f32, DataType::bf16, DataType::f16,
                                  DataType::i32, DataType::i64,  DataType::u8};
constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min,
                                ReduceOp::avg};

// Index of the first differing element, or -1.
long first_mismatch(const Bytes& a, const Bytes& b, size_t esize) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); i += esize)
    if (std::memcmp(a.data() + i, b.data() + i, esize) != 0) return static_cast<long>(i / esize);
  return -1;
}

std::string describe(DataType t, ReduceOp op, size_t n) {
  return std::string(dtype_name(t)) + " " + reduce_op_name(op) + " n=" + std::to_string(n);
}

Status run(DataType t, ReduceOp op, const std::vector<const void*>& ptrs, void* out, size_t count) {
  return reduce_on_host(ReduceStep{.dtype = t, .op = op, .count = count, .inputs = ptrs, .out = out});
}

std::vector<const void*> pointers(const std::vector<Bytes>& in) {
  std::vector<const void*> p;
  for (const Bytes& b : in) p.push_back(b.data());
  return p;
}

// ------------------------------------------------------------ reduction

// 3000 elements: two full 1024-element chunks of the library's loop and a
// partial one.
constexpr size_t kCount = 3000;

TEST(ReduceHost, EveryTypeOpAndInputCountMatchesReference) {
  std::mt19937 rng(20240611);
  for (DataType t : kAllTypes)
    for (ReduceOp op : kAllOps)
      for (size_t n : {1, 2, 3, 8}) {
        std::vector<Bytes> in;
        for (size_t k = 0; k < n; ++k) in.push_back(random_input(t, kCount, rng));
        const Bytes want = ref_reduce(t, op, in, kCount);
        Bytes out(want.size(), 0xa5);
        ASSERT_TRUE(run(t, op, pointers(in), out.data(), kCount).ok()) << describe(t, op, n);
        const long bad = first_mismatch(out, want, dtype_size(t));
        EXPECT_EQ(bad, -1) << describe(t, op, n) << ": element " << bad;
      }
}

TEST(ReduceHost, InPlaceIntoFirstOrLastInput) {
  std::mt19937 rng(7);
  for (DataType t : kAllTypes)
    for (ReduceOp op : kAllOps)
      for (size_t target : {0, 2}) {
        std::vector<Bytes> in;
        for (int k = 0; k < 3; ++k) in.push_back(random_input(t, kCount, rng));
        const Bytes want = ref_reduce(t, op, in, kCount);
        ASSERT_TRUE(run(t, op, pointers(in), in[target].data(), kCount).ok());
        const long bad = first_mismatch(in[target], want, dtype_size(t));
        EXPECT_EQ(bad, -1) << describe(t, op, 3) << " into input " << target << ": element " << bad;
      }
}

TEST(ReduceHost, UnalignedBuffers) {
  // Buffers need no alignment: element pointers one byte off.
  std::mt19937 rng(11);
  for (DataType t : kAllTypes) {
    std::vector<Bytes> in;
    for (int k = 0; k < 2; ++k) in.push_back(random_input(t, 100, rng));
    const Bytes want = ref_reduce(t, ReduceOp::sum, in, 100);
    std::vector<Bytes> shifted;
    for (const Bytes& b : in) {
      Bytes s(b.size() + 1);
      std::copy(b.begin(), b.end(), s.begin() + 1);
      shifted.push_back(s);
    }
    Bytes out(want.size() + 1);
    ASSERT_TRUE(run(t, ReduceOp::sum, {shifted[0].data() + 1, shifted[1].data() + 1}, out.data() + 1, 100).ok());
    EXPECT_EQ(0, std::memcmp(out.data() + 1, want.data(), want.size())) << dtype_name(t);
  }
}

TEST(ReduceHost, SixtyFourMiBBuffersInPlace) {
  // The size the collectives tests use; also times the call.
  const size_t count = (64u << 20) / sizeof(float);
  std::mt19937 rng(3);
  std::vector<Bytes> in;
  for (int k = 0; k < 3; ++k) in.push_back(random_input(DataType::f32, count, rng));
  const Bytes want = ref_reduce(DataType::f32, ReduceOp::avg, in, count);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(run(DataType::f32, ReduceOp::avg, pointers(in), in[0].data(), count).ok());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(first_mismatch(in[0], want, 4), -1);
  std::printf("64 MiB float avg of 3, in place: %.1f ms\n", ms);
}

template <typename T>
T reduce_values(DataType t, ReduceOp op, std::vector<T> vals) {
  std::vector<const void*> p;
  for (const T& v : vals) p.push_back(&v);
  T out{};
  Status st = run(t, op, p, &out, 1);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

TEST(ReduceHost, IntegersWrap) {
  constexpr int32_t i32max = std::numeric_limits<int32_t>::max(), i32min = std::numeric_limits<int32_t>::min();
  constexpr int64_t i64max = std::numeric_limits<int64_t>::max(), i64min = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::sum, {i32max, 1}), i32min);
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::sum, {i32min, -1}), i32max);
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::prod, {i32max, 2}), -2);
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::prod, {i32min, -1}), i32min);
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::prod, {65536, 65536, 3}), 0);
  EXPECT_EQ(reduce_values<int64_t>(DataType::i64, ReduceOp::sum, {i64max, 1}), i64min);
  EXPECT_EQ(reduce_values<int64_t>(DataType::i64, ReduceOp::sum, {i64min, -1, -1}), i64max - 1);
  EXPECT_EQ(reduce_values<int64_t>(DataType::i64, ReduceOp::prod, {i64min, -1}), i64min);
  EXPECT_EQ(reduce_values<int64_t>(DataType::i64, ReduceOp::prod, {int64_t{1} << 32, int64_t{1} << 32}), 0);
  EXPECT_EQ(reduce_values<uint8_t>(DataType::u8, ReduceOp::sum, {200, 100}), 44);
  EXPECT_EQ(reduce_values<uint8_t>(DataType::u8, ReduceOp::prod, {16, 17}), 16);  // 272 mod 256
  EXPECT_EQ(reduce_values<uint8_t>(DataType::u8, ReduceOp::max, {200, 100, 255}), 255);
  EXPECT_EQ(reduce_values<uint8_t>(DataType::u8, ReduceOp::min, {200, 100, 255}), 100);
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::min, {5, -7, 3}), -7);
  EXPECT_EQ(reduce_values<int64_t>(DataType::i64, ReduceOp::max, {i64min, -1, -9}), -1);
}

TEST(ReduceHost, IntegerAvgTruncatesTowardZeroOfTheWrappedSum) {
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::avg, {-7, -2}), -4);  // -4.5: not -5
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::avg, {-10, 3}), -3);  // -3.5
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::avg, {-1, -1, -2}), -1);  // -4/3
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::avg, {7, 2}), 4);
  EXPECT_EQ(reduce_values<int64_t>(DataType::i64, ReduceOp::avg, {-5, -5, -1}), -3);  // -11/3
  // The sum wraps in the type first: INT32_MAX + 1 = INT32_MIN, halved.
  EXPECT_EQ(reduce_values<int32_t>(DataType::i32, ReduceOp::avg, {std::numeric_limits<int32_t>::max(), 1}),
            std::numeric_limits<int32_t>::min() / 2);
  EXPECT_EQ(reduce_values<int64_t>(DataType::i64, ReduceOp::avg, {std::numeric_limits<int64_t>::max(), 1}),
            std::numeric_limits<int64_t>::min() / 2);
  EXPECT_EQ(reduce_values<uint8_t>(DataType::u8, ReduceOp::avg, {200, 100}), 22);  // 44 / 2
  EXPECT_EQ(reduce_values<uint8_t>(DataType::u8, ReduceOp::avg, {5, 6, 6}), 5);    // 17 / 3
  // More inputs than uint8 can count: n must not be narrowed to the type.
  EXPECT_EQ(reduce_values<uint8_t>(DataType::u8, ReduceOp::avg, std::vector<uint8_t>(256, 1)), 0);
  EXPECT_EQ(reduce_values<uint8_t>(DataType::u8, ReduceOp::avg, std::vector<uint8_t>(300, 255)), 0);
}

TEST(ReduceHost, FloatMinMaxPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::max, ReduceOp::min}) {
    EXPECT_TRUE(std::isnan(reduce_values<float>(DataType::f32, op, {1.0f, nan, 3.0f}))) << reduce_op_name(op);
    EXPECT_TRUE(std::isnan(reduce_values<float>(DataType::f32, op, {nan, 1.0f}))) << reduce_op_name(op);
    EXPECT_TRUE(std::isnan(reduce_values<float>(DataType::f32, op, {1.0f, -2.0f, nan}))) << reduce_op_name(op);
    // bf16/f16: NaN widened, kept, and narrowed back to a NaN.
    EXPECT_TRUE(kBf16.is_nan(reduce_values<uint16_t>(DataType::bf16, op, {0x3f80, 0x7fc0, 0x4000})));
    EXPECT_TRUE(kF16.is_nan(reduce_values<uint16_t>(DataType::f16, op, {0x3c00, 0x4000, 0x7e00})));
    // A signaling-NaN pattern is a NaN too, never infinity.
    EXPECT_TRUE(kBf16.is_nan(reduce_values<uint16_t>(DataType::bf16, op, {0x7f81, 0x3f80})));
    EXPECT_TRUE(kF16.is_nan(reduce_values<uint16_t>(DataType::f16, op, {0x3c00, 0x7c01})));
  }
  // Without NaN, min/max of infinities are ordinary.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(reduce_values<float>(DataType::f32, ReduceOp::max, {1.0f, inf, -inf}), inf);
  EXPECT_EQ(reduce_values<float>(DataType::f32, ReduceOp::min, {1.0f, inf, -inf}), -inf);
  // Equal values: the earlier input stays (visible only for +0 / -0).
  EXPECT_EQ(bits_f32(reduce_values<float>(DataType::f32, ReduceOp::max, {0.0f, -0.0f})), 0x00000000u);
  EXPECT_EQ(bits_f32(reduce_values<float>(DataType::f32, ReduceOp::max, {-0.0f, 0.0f})), 0x80000000u);
  EXPECT_EQ(bits_f32(reduce_values<float>(DataType::f32, ReduceOp::min, {0.0f, -0.0f})), 0x00000000u);
  EXPECT_EQ(reduce_values<uint16_t>(DataType::f16, ReduceOp::min, {0x8000, 0x0000}), 0x8000);
}

TEST(ReduceHost, HalfTypesAccumulateInFloatAndRoundOnce) {
  // bf16: 1 + 2^-8 + 2^-8. Rounding after each step would give 1 twice (each
  // 1 + 2^-8 is a tie, to even); accumulating in float gives 1 + 2^-7 exactly.
  EXPECT_EQ(reduce_values<uint16_t>(DataType::bf16, ReduceOp::sum, {0x3f80, 0x3b80, 0x3b80}), 0x3f81);
  // f16: 1 + 2^-11 + 2^-11 likewise is 1 + 2^-10 (0x3c01).
  EXPECT_EQ(reduce_values<uint16_t>(DataType::f16, ReduceOp::sum, {0x3c00, 0x1000, 0x1000}), 0x3c01);
  // f16 avg of 65504 and 65504: the float sum 131008 is past half's range,
  // but the avg divides in float first: 65504.
  EXPECT_EQ(reduce_values<uint16_t>(DataType::f16, ReduceOp::avg, {0x7bff, 0x7bff}), 0x7bff);
  EXPECT_EQ(reduce_values<uint16_t>(DataType::f16, ReduceOp::sum, {0x7bff, 0x7bff}), 0x7c00);
  // float32: each step rounded to float (1e8 + 1 is lost, then -1e8).
  EXPECT_EQ(reduce_values<float>(DataType::f32, ReduceOp::sum, {1e8f, 1.0f, -1e8f}), 0.0f);
  EXPECT_EQ(reduce_values<float>(DataType::f32, ReduceOp::avg, {1.0f, 2.0f}), 1.5f);
  EXPECT_EQ(reduce_values<float>(DataType::f32, ReduceOp::avg, {1.0f, 1.0f, 2.0f}), 4.0f / 3.0f);
}

// ----------------------------------------------------------- conversions

TEST(ReduceConversions, WideningEveryPatternMatchesFieldValue) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    for (const Format* fmt : {&kBf16, &kF16}) {
      const float got = fmt == &kBf16 ? bf16_to_float(h) : f16_to_float(h);
      if (fmt->is_nan(h)) {
        EXPECT_TRUE(std::isnan(got)) << std::hex << b;
        EXPECT_NE(bits_f32(got) & 0x00400000u, 0u) << "not a quiet NaN: " << std::hex << b;
        continue;
      }
      const bool inf = (h & 0x7fff) == fmt->inf_bits();
      const double want = inf ? (h >> 15 ? -INFINITY : INFINITY) : fmt->value(h);
      EXPECT_EQ(static_cast<double>(got), want) << std::hex << b;
      EXPECT_EQ(std::signbit(got), (h >> 15) != 0) << std::hex << b;
      // Narrowing what was widened gives the pattern back.
      EXPECT_EQ(fmt == &kBf16 ? float_to_bf16(got) : float_to_f16(got), h) << std::hex << b;
    }
  }
}

// Every tie and its neighbours: for each pair of adjacent patterns (including
// the largest finite and infinity), the midpoint and the floats just below and
// above it. All midpoints are exact floats (16-bit formats have few bits).
TEST(ReduceConversions, NarrowingMatchesReferenceAtEveryMidpoint) {
  for (const Format* fmt : {&kBf16, &kF16}) {
    auto narrow = [&](float f) { return fmt == &kBf16 ? float_to_bf16(f) : float_to_f16(f); };
    for (uint32_t b = 0; b < fmt->inf_bits(); ++b)
      for (float sign : {1.0f, -1.0f}) {
        const double mid = (fmt->value(static_cast<uint16_t>(b)) + fmt->value(static_cast<uint16_t>(b + 1))) / 2;
        const float m = static_cast<float>(mid) * sign;
        ASSERT_EQ(static_cast<double>(m), mid * sign) << "midpoint not exact";
        for (float f : {m, std::nextafter(m, 0.0f), std::nextafter(m, m * 2)}) {
          const uint16_t want = fmt->round(f), got = narrow(f);
          ASSERT_EQ(got, want) << (fmt == &kBf16 ? "bf16 " : "f16 ") << std::hexfloat << f;
        }
      }
  }
}

TEST(ReduceConversions, NarrowingMatchesReferenceOnRandomFloats) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> u32;
  for (int i = 0; i < 300000; ++i) {
    // Random bits cover every exponent, subnormal floats, infinities and NaNs.
    const float f = f32_bits(u32(rng));
    if (std::isnan(f)) {
      EXPECT_TRUE(kBf16.is_nan(float_to_bf16(f)));
      EXPECT_TRUE(kF16.is_nan(float_to_f16(f)));
      continue;
    }
    ASSERT_EQ(float_to_bf16(f), kBf16.round(f)) << std::hexfloat << f;
    ASSERT_EQ(float_to_f16(f), kF16.round(f)) << std::hexfloat << f;
    // Floats near half's range, where random bits rarely land.
    const float g = std::ldexp(static_cast<float>(u32(rng) % 0x1000000) / 0x1000000, static_cast<int>(u32(rng) % 46) - 28);
    ASSERT_EQ(float_to_f16(g), kF16.round(g)) << std::hexfloat << g;
  }
}

TEST(ReduceConversions, Bf16EdgeCases) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);         // tie, 0x3f80 is even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);     // tie, 0x3f82 is even
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3f81);  // just past the tie
  EXPECT_EQ(float_to_bf16(f32_bits(0x7f7f0000)), 0x7f7f);  // largest finite
  EXPECT_EQ(bits_f32(bf16_to_float(0x7f7f)), 0x7f7f0000u);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
  EXPECT_EQ(float_to_bf16(f32_bits(0x7f7f7fff)), 0x7f7f);  // just under the tie: stays finite
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16(-INFINITY), 0xff80);
  EXPECT_TRUE(std::isinf(bf16_to_float(0xff80)) && bf16_to_float(0xff80) < 0);
  // NaN: quiet NaN out, even from a signaling NaN whose payload sits in the
  // bits that are dropped (truncation alone would make it infinity).
  EXPECT_EQ(float_to_bf16(f32_bits(0x7f800001)) & 0x7fc0, 0x7fc0);
  EXPECT_EQ(float_to_bf16(f32_bits(0xffc00000)), 0xffc0);
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7f81)));
  // Subnormals: bf16 has float32's exponent range, so they are float32's.
  EXPECT_EQ(bf16_to_float(0x0001), 0x1p-133f);
  EXPECT_EQ(float_to_bf16(0x1p-133f), 0x0001);
  EXPECT_EQ(float_to_bf16(0x1p-149f), 0x0000);  // below half the smallest bf16 subnormal
}

TEST(ReduceConversions, F16EdgeCases) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(1.0f + 0x1p-11f), 0x3c00);      // tie to even
  EXPECT_EQ(float_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie to even
  EXPECT_EQ(float_to_f16(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
  // Largest finite (65504) and overflow: 65520 is the tie with 2^16, which
  // goes to infinity.
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(float_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(float_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f16_to_float(0xfc00), -INFINITY);
  // Subnormals: steps of 2^-24.
  EXPECT_EQ(f16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_float(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(f16_to_float(0x8200), -0x1p-15f);
  EXPECT_EQ(float_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_f16(0x1p-25f), 0x0000);                  // tie with 0: to even (0)
  EXPECT_EQ(float_to_f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_f16(3 * 0x1p-25f), 0x0002);              // 1.5 ulps: tie, to even
  EXPECT_EQ(float_to_f16(5 * 0x1p-25f), 0x0002);              // 2.5 ulps: tie, to even
  EXPECT_EQ(float_to_f16(1023.5f * 0x1p-24f), 0x0400);        // rounds up into the normals
  EXPECT_EQ(float_to_f16(0x1p-14f), 0x0400);                  // smallest normal
  EXPECT_EQ(float_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(float_to_f16(-1e-10f), 0x8000);
  // NaN stays a quiet NaN both ways, a signaling one included.
  EXPECT_EQ(float_to_f16(f32_bits(0x7f800001)) & 0x7e00, 0x7e00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7c01)));
  EXPECT_TRUE(std::isnan(f16_to_float(0xfe00)));
}

// The test's rounding reference itself, on values worked out by hand, so that
// agreeing with it means something.
TEST(ReduceConversions, ReferenceRoundingIsRight) {
  EXPECT_EQ(kF16.round(65504.0f), 0x7bff);
  EXPECT_EQ(kF16.round(65520.0f), 0x7c00);
  EXPECT_EQ(kF16.round(0x1p-25f), 0x0000);
  EXPECT_EQ(kF16.round(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(kF16.round(-1.0f - 3 * 0x1p-11f), 0xbc02);
  EXPECT_EQ(kBf16.round(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(kBf16.round(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(kBf16.value(0x3f80), 1.0);
  EXPECT_EQ(kF16.value(0x0001), std::ldexp(1.0, -24));
}

// -------------------------------------------------------------- names

TEST(ReduceNames, RoundTripsAndAliases) {
  const std::pair<DataType, size_t> sizes[] = {{DataType::f32, 4}, {DataType::bf16, 2}, {DataType::f16, 2},
                                               {DataType::i32, 4}, {DataType::i64, 8},  {DataType::u8, 1}};
  for (auto [t, size] : sizes) {
    EXPECT_EQ(dtype_size(t), size) << dtype_name(t);
    DataType back = DataType::u8;
    ASSERT_TRUE(parse_dtype(dtype_name(t), &back)) << dtype_name(t);
    EXPECT_EQ(back, t);
    EXPECT_TRUE(valid_dtype(static_cast<int>(t)));
  }
  EXPECT_STREQ(dtype_name(DataType::f32), "float");
  EXPECT_STREQ(dtype_name(DataType::bf16), "bfloat16");
  EXPECT_STREQ(dtype_name(DataType::f16), "half");
  EXPECT_STREQ(dtype_name(DataType::i32), "int32");
  EXPECT_STREQ(dtype_name(DataType::i64), "int64");
  EXPECT_STREQ(dtype_name(DataType::u8), "uint8");
  const std::pair<const char*, DataType> aliases[] = {
      {"f32", DataType::f32},  {"float32", DataType::f32}, {"fp32", DataType::f32}, {"f16", DataType::f16},
      {"fp16", DataType::f16}, {"float16", DataType::f16}, {"bf16", DataType::bf16}, {"i32", DataType::i32},
      {"i64", DataType::i64},  {"u8", DataType::u8}};
  for (auto [s, t] : aliases) {
    DataType got = DataType::u8;
    EXPECT_TRUE(parse_dtype(s, &got)) << s;
    EXPECT_EQ(got, t) << s;
  }
  for (const char* bad : {"", "double", "int8", "uint32", "Float", "FP16", "bf 16", "float "}) {
    DataType got = DataType::i64;
    EXPECT_FALSE(parse_dtype(bad, &got)) << bad;
    EXPECT_EQ(got, DataType::i64) << "changed on failure: " << bad;
  }
  for (int v : {0, 3, 5, 8, 10, -1, 255}) EXPECT_FALSE(valid_dtype(v)) << v;
  EXPECT_EQ(dtype_size(static_cast<DataType>(3)), 0u);
  EXPECT_STREQ(dtype_name(static_cast<DataType>(3)), "?");

  for (ReduceOp op : kAllOps) {
    ReduceOp back = ReduceOp::sum;
    ASSERT_TRUE(parse_reduce_op(reduce_op_name(op), &back)) << reduce_op_name(op);
    EXPECT_EQ(back, op);
    EXPECT_TRUE(valid_reduce_op(static_cast<int>(op)));
  }
  EXPECT_STREQ(reduce_op_name(ReduceOp::sum), "sum");
  EXPECT_STREQ(reduce_op_name(ReduceOp::prod), "prod");
  EXPECT_STREQ(reduce_op_name(ReduceOp::max), "max");
  EXPECT_STREQ(reduce_op_name(ReduceOp::min), "min");
  EXPECT_STREQ(reduce_op_name(ReduceOp::avg), "avg");
  for (const char* bad : {"", "mean", "Sum", "product", "maximum"}) {
    ReduceOp got = ReduceOp::min;
    EXPECT_FALSE(parse_reduce_op(bad, &got)) << bad;
    EXPECT_EQ(got, ReduceOp::min);
  }
  for (int v : {5, 6, -1, 255}) EXPECT_FALSE(valid_reduce_op(v)) << v;
  EXPECT_STREQ(reduce_op_name(static_cast<ReduceOp>(9)), "?");
}

// -------------------------------------------------------------- errors

void expect_error(const Status& st, Code code, const std::string& part) {
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(part), std::string::npos) << "message lacks \"" << part << "\": " << st.message();
}

TEST(ReduceHost, ArgumentErrors) {
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, out[4] = {9, 9, 9, 9};
  expect_error(run(DataType::f32, ReduceOp::sum, {}, out, 4), Code::invalid_argument, "no inputs");
  expect_error(run(DataType::f32, ReduceOp::sum, {}, out, 0), Code::invalid_argument, "no inputs");
  expect_error(run(DataType::f32, ReduceOp::sum, {a, b}, nullptr, 4), Code::invalid_argument, "out is null");
  expect_error(run(DataType::f32, ReduceOp::sum, {a, nullptr}, out, 4), Code::invalid_argument,
               "input 1 of 2 is null");
  expect_error(run(static_cast<DataType>(3), ReduceOp::sum, {a, b}, out, 4), Code::invalid_argument,
               "unknown element type 3");
  expect_error(run(DataType::f32, static_cast<ReduceOp>(7), {a, b}, out, 4), Code::invalid_argument,
               "unknown operator 7");
  // out overlapping an input without being it: would read written elements.
  expect_error(run(DataType::f32, ReduceOp::sum, {a, b}, a + 1, 3), Code::invalid_argument,
               "overlaps input 0");
  expect_error(run(DataType::f32, ReduceOp::sum, {a, b + 1}, b, 3), Code::invalid_argument,
               "overlaps input 1");
  expect_error(run(DataType::f32, ReduceOp::sum, {a}, out, std::numeric_limits<size_t>::max() / 2),
               Code::out_of_range, "overflows");
  // Nothing was written by the failed calls.
  for (float v : out) EXPECT_EQ(v, 9.0f);
  EXPECT_EQ(a[1], 2.0f);
  // count 0 touches nothing, so null pointers are fine; adjacent (not
  // overlapping) buffers are fine too.
  EXPECT_TRUE(run(DataType::f32, ReduceOp::sum, {nullptr, nullptr}, nullptr, 0).ok());
  float pair[4] = {1, 2, 3, 4};
  EXPECT_TRUE(run(DataType::f32, ReduceOp::sum, {pair, pair}, pair + 2, 2).ok());
  EXPECT_EQ(pair[2], 2.0f);
  EXPECT_EQ(pair[3], 4.0f);
}

}  // namespace
}  // namespace conccl
