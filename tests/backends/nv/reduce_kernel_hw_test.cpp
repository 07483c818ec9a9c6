// tests/backends/nv/reduce_kernel_hw_test.cpp - the reduce kernel on a real GPU
// (src/backends/nv/reduce_kernel.cpp), compared bit for bit with
// conccl::reduce_on_host, the reference of include/conccl/reduce.hpp.
//
// Every element type x operator x n in {1, 2, 3, 8} x count in {1, 7,
// 1000003}, with the addresses 16-byte aligned, all shifted by the same
// amount (single-element head, then vectors), shifted by different amounts
// (single elements only), and in place (out == input 0). Inputs are random
// and never zero; the float types carry infinities, NaNs and subnormals at a
// few places. The output is poisoned first and the bytes around it checked.
// Then the time of a 64 MiB float32 sum of 8 inputs for a few grid sizes.
//
// Skipped without /dev/nvidiactl or libcuda (this project's build machines).
// The CUDA driver calls it makes itself are loaded with dlopen too (cuda.h
// names; the _v2 ones are the ABI names cuda.h maps to).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/nv/reduce_kernel.hpp"
#include "conccl/reduce.hpp"

namespace conccl::nv {
namespace {

struct Cu {
  void* lib = nullptr;
  int (*cuInit)(unsigned) = nullptr;
  int (*cuDeviceGetCount)(int*) = nullptr;
  int (*cuDeviceGet)(int*, int) = nullptr;
  int (*cuDeviceGetName)(char*, int, int) = nullptr;
  int (*cuDevicePrimaryCtxRetain)(void**, int) = nullptr;
  int (*cuCtxSetCurrent)(void*) = nullptr;
  int (*cuStreamCreate)(void**, unsigned) = nullptr;
  int (*cuStreamSynchronize)(void*) = nullptr;
  int (*cuCtxSynchronize)() = nullptr;
  int (*cuStreamDestroy)(void*) = nullptr;
  int (*cuMemAlloc)(uint64_t*, size_t) = nullptr;
  int (*cuMemFree)(uint64_t) = nullptr;
  int (*cuMemcpyHtoD)(uint64_t, const void*, size_t) = nullptr;
  int (*cuMemcpyDtoH)(void*, uint64_t, size_t) = nullptr;
  int (*cuMemcpyDtoDAsync)(uint64_t, uint64_t, size_t, void*) = nullptr;
  int (*cuMemsetD8Async)(uint64_t, unsigned char, size_t, void*) = nullptr;
  int (*cuEventCreate)(void**, unsigned) = nullptr;
  int (*cuEventRecord)(void*, void*) = nullptr;
  int (*cuEventSynchronize)(void*) = nullptr;
  int (*cuEventElapsedTime)(float*, void*, void*) = nullptr;
  int (*cuEventDestroy)(void*) = nullptr;
  int (*cuModuleLoadDataEx)(void**, const void*, unsigned, int*, void**) = nullptr;
  int (*cuModuleGetFunction)(void**, void*, const char*) = nullptr;
  int (*cuModuleUnload)(void*) = nullptr;
  int (*cuFuncGetAttribute)(int*, int, void*) = nullptr;
  template <typename F>
  bool get(F& f, const char* name, const char* alt = nullptr) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (!f && alt) f = reinterpret_cast<F>(dlsym(lib, alt));
    return f != nullptr;
  }
  bool load() {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    return lib && get(cuInit, "cuInit") && get(cuDeviceGetCount, "cuDeviceGetCount") &&
           get(cuDeviceGet, "cuDeviceGet") && get(cuDeviceGetName, "cuDeviceGetName") &&
           get(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") && get(cuCtxSetCurrent, "cuCtxSetCurrent") &&
           get(cuStreamCreate, "cuStreamCreate") && get(cuStreamSynchronize, "cuStreamSynchronize") &&
           get(cuCtxSynchronize, "cuCtxSynchronize") && get(cuStreamDestroy, "cuStreamDestroy_v2") &&
           get(cuMemAlloc, "cuMemAlloc_v2") &&
           get(cuMemFree, "cuMemFree_v2") && get(cuMemcpyHtoD, "cuMemcpyHtoD_v2") &&
           get(cuMemcpyDtoH, "cuMemcpyDtoH_v2") && get(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2") &&
           get(cuMemsetD8Async, "cuMemsetD8Async") && get(cuEventCreate, "cuEventCreate") &&
           get(cuEventRecord, "cuEventRecord") && get(cuEventSynchronize, "cuEventSynchronize") &&
           get(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime") &&
           get(cuEventDestroy, "cuEventDestroy_v2") && get(cuModuleLoadDataEx, "cuModuleLoadDataEx") &&
           get(cuModuleGetFunction, "cuModuleGetFunction") && get(cuModuleUnload, "cuModuleUnload") &&
           get(cuFuncGetAttribute, "cuFuncGetAttribute");
  }
};

#define CU_OK(call)                                                   \
  do {                                                                \
    const int r_ = (call);                                            \
    ASSERT_EQ(r_, 0) << #call << " returned CUresult " << r_;         \
  } while (0)

constexpr DataType kTypes[] = {DataType::f32, DataType::bf16, DataType::f16,
                               DataType::i32, DataType::i64,  DataType::u8};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::max, ReduceOp::min, ReduceOp::avg};
constexpr int kNs[] = {1, 2, 3, 8};
constexpr size_t kCounts[] = {1, 7, 1000003};
constexpr size_t kMaxCount = 1000003;
constexpr size_t kPad = 32;  // elements of room around each buffer's data for offsets and guards
enum Layout { kAligned, kShifted, kMixed, kInPlace };
constexpr const char* kLayoutNames[] = {"aligned", "shifted", "mixed", "in-place"};

class NvReduceHw : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (access("/dev/nvidiactl", F_OK) != 0) {
      skip_ = "no /dev/nvidiactl";
      return;
    }
    if (!cu_.load()) {
      skip_ = "libcuda.so.1 (or one of its entry points) is missing";
      return;
    }
    int n = 0, dev = 0;
    if (cu_.cuInit(0) != 0 || cu_.cuDeviceGetCount(&n) != 0 || n == 0) {
      skip_ = "no CUDA device";
      return;
    }
    char name[128] = {};
    void* ctx = nullptr;
    if (cu_.cuDeviceGet(&dev, 0) || cu_.cuDeviceGetName(name, sizeof(name), dev) ||
        cu_.cuDevicePrimaryCtxRetain(&ctx, dev) || cu_.cuCtxSetCurrent(ctx) || cu_.cuStreamCreate(&stream_, 1)) {
      skip_ = "CUDA set-up failed";
      return;
    }
    std::printf("RK device: %s\n", name);
  }
  static void TearDownTestSuite() {
    if (stream_) (void)cu_.cuStreamDestroy(stream_);
    stream_ = nullptr;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }
  static Cu cu_;
  static void* stream_;
  static std::string skip_;
};
Cu NvReduceHw::cu_;
void* NvReduceHw::stream_ = nullptr;
std::string NvReduceHw::skip_;

// Gpu memory freed at scope exit.
struct DevBuf {
  Cu* cu = nullptr;
  uint64_t ptr = 0;
  ~DevBuf() {
    if (ptr) (void)cu->cuMemFree(ptr);
  }
};

template <typename T>
void put(std::vector<uint8_t>& v, size_t i, T x) {
  std::memcpy(v.data() + i * sizeof(T), &x, sizeof(T));
}

// Random elements, never zero: floats are +-[1, 2) * 2^e (e small enough
// that sums and products of 8 stay finite for the type), integers any
// non-zero bits (their sums and products wrap).
std::vector<uint8_t> random_input(DataType t, size_t elems, std::mt19937_64& rng, int which) {
  const size_t s = dtype_size(t);
  std::vector<uint8_t> v(elems * s);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  auto real = [&](int emax) {
    const int e = static_cast<int>(rng() % (2 * emax + 1)) - emax;
    const float f = std::ldexp(mant(rng), e);
    return (rng() & 1) ? -f : f;
  };
  for (size_t i = 0; i < elems; ++i) {
    switch (t) {
      case DataType::f32: put(v, i, real(8)); break;
      case DataType::bf16: put(v, i, float_to_bf16(real(8))); break;
      case DataType::f16: put(v, i, float_to_f16(real(3))); break;
      case DataType::i32: put(v, i, static_cast<int32_t>(rng() | 1)); break;
      case DataType::i64: put(v, i, static_cast<int64_t>(rng() | 1)); break;
      case DataType::u8: put(v, i, static_cast<uint8_t>(1 + rng() % 255)); break;
    }
  }
  // Special values near the start (every layout reaches them from count 7 on):
  // input 0: +inf at 3; input 1: NaN at 5, -inf at 2; input 2: +inf at 2
  // (inf - inf: NaN); subnormals at 6 in inputs 0 and 1.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto special = [&](size_t i, float f, uint16_t sub16) {
    if (i >= elems) return;
    if (t == DataType::f32) put(v, i, f == 0 ? std::ldexp(1.5f, -130) : f);
    if (t == DataType::bf16) put(v, i, f == 0 ? sub16 : float_to_bf16(f));
    if (t == DataType::f16) put(v, i, f == 0 ? sub16 : float_to_f16(f));
  };
  if (which == 0) {
    special(kPad + 3, inf, 0);
    special(kPad + 6, 0, 0x0003);
  } else if (which == 1) {
    special(kPad + 5, nan, 0);
    special(kPad + 2, -inf, 0);
    special(kPad + 6, 0, 0x8005);
  } else if (which == 2) {
    special(kPad + 2, inf, 0);
  }
  return v;
}

bool is_nan(DataType t, const uint8_t* p) {
  if (t == DataType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return std::isnan(f);
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (t == DataType::bf16) return (h & 0x7fff) > 0x7f80;
  if (t == DataType::f16) return (h & 0x7fff) > 0x7c00;
  return false;
}

// Elements of a and b that differ (any NaN equals any NaN: the host and the
// GPU make different NaN payloads, and the header promises only "NaN").
size_t mismatches(DataType t, const uint8_t* a, const uint8_t* b, size_t count, size_t* first) {
  const size_t s = dtype_size(t);
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(a + i * s, b + i * s, s) == 0) continue;
    if (is_nan(t, a + i * s) && is_nan(t, b + i * s)) continue;
    if (bad++ == 0) *first = i;
  }
  return bad;
}

std::string hex_elem(DataType t, const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, dtype_size(t));
  char b[32];
  std::snprintf(b, sizeof(b), "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// The driver JITs the text reduce_ptx gives, with its .target sm_70 header
// (launch_reduce would fall back to sm_75 where it did not: this shows the
// first one is what runs). Also each kernel's registers and local memory.
TEST_F(NvReduceHw, DriverJitsEveryModule) {
  Cu& cu = cu_;
  double total_ms = 0, max_ms = 0;
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      const std::string ptx = reduce_ptx(t, op), name = reduce_entry_name(t, op);
      char log[8192] = {};
      int opts[2] = {5, 6};  // cuda.h: CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
      void* vals[2] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(log)))};
      void* mod = nullptr;
      const auto t0 = std::chrono::steady_clock::now();
      const int r = cu.cuModuleLoadDataEx(&mod, ptx.c_str(), 2, opts, vals);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      log[sizeof(log) - 1] = 0;
      ASSERT_EQ(r, 0) << name << ": CUresult " << r << ", JIT log: " << log;
      total_ms += ms;
      max_ms = std::max(max_ms, ms);
      void* fn = nullptr;
      CU_OK(cu.cuModuleGetFunction(&fn, mod, name.c_str()));
      int regs = 0, local = 0;
      CU_OK(cu.cuFuncGetAttribute(&regs, 4, fn));   // CU_FUNC_ATTRIBUTE_NUM_REGS
      CU_OK(cu.cuFuncGetAttribute(&local, 3, fn));  // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES
      std::printf("RK jit %-26s %6.1f ms %3d registers %d bytes local\n", name.c_str(), ms, regs, local);
      EXPECT_EQ(local, 0) << name << " spills to local memory";
      (void)cu.cuModuleUnload(mod);
    }
  }
  std::printf("RK jit all 30 modules (.target sm_70): %.1f ms, %.1f ms the slowest\n", total_ms, max_ms);
}

TEST_F(NvReduceHw, MatchesHostBitForBit) {
  Cu& cu = cu_;
  const size_t elems = kMaxCount + 3 * kPad;  // room for the largest offset and the guard after it
  const size_t bytes_max = elems * 8;
  DevBuf in[8], out;
  for (DevBuf& b : in) {
    b.cu = &cu;
    CU_OK(cu.cuMemAlloc(&b.ptr, bytes_max));
  }
  out.cu = &cu;
  CU_OK(cu.cuMemAlloc(&out.ptr, bytes_max));

  std::mt19937_64 rng(20261201);
  // (dtype, op, n) -> failed cases of the 12 (3 counts x 4 layouts).
  std::map<std::tuple<int, int, int>, int> failed, ran;
  double jit_ms_total = 0, jit_ms_max = 0;
  int blocks_seen_max = 0;
  for (DataType t : kTypes) {
    const size_t s = dtype_size(t);
    std::vector<std::vector<uint8_t>> host(8);
    for (int k = 0; k < 8; ++k) {
      host[k] = random_input(t, elems, rng, k);
      CU_OK(cu.cuMemcpyHtoD(in[k].ptr, host[k].data(), host[k].size()));
    }
    // A copy from pageable memory may return before its DMA lands, and the
    // test's stream does not wait for the legacy stream: wait here.
    CU_OK(cu.cuCtxSynchronize());
    std::vector<uint8_t> got(elems * s), ref(elems * s);
    for (ReduceOp op : kOps) {
      bool first_launch = true;
      for (int n : kNs) {
        for (size_t count : kCounts) {
          for (Layout lay : {kAligned, kShifted, kMixed, kInPlace}) {
            // Element offsets from each buffer's data start (kPad).
            const size_t shift = t == DataType::u8 ? 3 : 1;
            std::vector<size_t> in_off(n);
            for (int k = 0; k < n; ++k)
              in_off[k] = kPad + (lay == kAligned ? 0 : lay == kMixed ? 1 + k % 3 : shift);
            const size_t out_off = lay == kMixed ? kPad : in_off[0];

            DeviceReduceStep step;
            step.dtype = t;
            step.op = op;
            step.count = count;
            for (int k = 0; k < n; ++k) step.inputs.push_back(in[k].ptr + in_off[k] * s);
            step.out = out.ptr + out_off * s;
            if (lay == kInPlace) {
              // out's buffer holds a copy of input 0, and input 0 is out.
              CU_OK(cu.cuMemcpyDtoDAsync(out.ptr, in[0].ptr, elems * s, stream_));
              step.inputs[0] = step.out;
            } else {
              CU_OK(cu.cuMemsetD8Async(out.ptr, 0xa5, elems * s, stream_));
            }
            ReduceLaunchInfo info;
            const auto t0 = std::chrono::steady_clock::now();
            Status st = launch_reduce(stream_, step, &info);
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            ASSERT_TRUE(st.ok()) << st.to_string();
            if (first_launch) {  // includes the module's JIT
              jit_ms_total += ms;
              jit_ms_max = std::max(jit_ms_max, ms);
              first_launch = false;
            }
            blocks_seen_max = std::max(blocks_seen_max, info.blocks);
            EXPECT_GE(info.blocks, 1);
            EXPECT_EQ(info.threads, 512);
            CU_OK(cu.cuStreamSynchronize(stream_));
            // What comes back and is checked: the output and kPad elements around it.
            const size_t win = (out_off + count + kPad) * s;
            CU_OK(cu.cuMemcpyDtoH(got.data(), out.ptr, win));

            std::vector<const void*> hin;
            for (int k = 0; k < n; ++k) hin.push_back(host[k].data() + in_off[k] * s);
            ReduceStep hs;
            hs.dtype = t;
            hs.op = op;
            hs.count = count;
            hs.inputs = hin;
            hs.out = ref.data() + out_off * s;
            ASSERT_TRUE(reduce_on_host(hs).ok());

            size_t first = 0;
            const size_t bad = mismatches(t, got.data() + out_off * s, ref.data() + out_off * s, count, &first);
            // Around the output: the poison (or, in place, input 0's bytes) is untouched.
            const std::vector<uint8_t>& around = host[0];
            size_t guard_bad = 0;
            for (size_t b = 0; b < win; ++b) {
              if (b >= out_off * s && b < (out_off + count) * s) continue;
              const uint8_t want = lay == kInPlace ? around[b] : 0xa5;
              guard_bad += got[b] != want;
            }
            const auto key = std::make_tuple(static_cast<int>(t), static_cast<int>(op), n);
            ++ran[key];
            if (bad || guard_bad) {
              ++failed[key];
              ADD_FAILURE() << dtype_name(t) << " " << reduce_op_name(op) << " n=" << n << " count=" << count << " "
                            << kLayoutNames[lay] << ": " << bad << " elements differ (first at " << first
                            << ": gpu " << hex_elem(t, got.data() + (out_off + first) * s) << ", host "
                            << hex_elem(t, ref.data() + (out_off + first) * s) << "), " << guard_bad
                            << " bytes written outside the output";
            }
          }
        }
      }
    }
  }
  // The table: one row per type and operator, one column per n.
  std::printf("RK table (cases per cell: counts 1/7/1000003 x aligned/shifted/mixed/in-place)\n");
  std::printf("RK %-9s %-5s %8s %8s %8s %8s\n", "dtype", "op", "n=1", "n=2", "n=3", "n=8");
  int total = 0, total_bad = 0;
  for (DataType t : kTypes)
    for (ReduceOp op : kOps) {
      std::printf("RK %-9s %-5s", dtype_name(t), reduce_op_name(op));
      for (int n : kNs) {
        const auto key = std::make_tuple(static_cast<int>(t), static_cast<int>(op), n);
        const int r = ran[key], f = failed[key];
        total += r;
        total_bad += f;
        char cell[32];
        std::snprintf(cell, sizeof(cell), f ? "FAIL %d/%d" : "pass %d", f ? f : r, r);
        std::printf(" %8s", cell);
      }
      std::printf("\n");
    }
  std::printf("RK cases: %d, failed: %d; first launch per module (JIT included): %.1f ms max, %.1f ms all 30; "
              "largest grid %d blocks\n",
              total, total_bad, jit_ms_max, jit_ms_total, blocks_seen_max);
}

// The null stream (the context's legacy default stream) works too.
TEST_F(NvReduceHw, DefaultStream) {
  Cu& cu = cu_;
  const size_t count = 4099;
  DevBuf a{&cu}, b{&cu}, o{&cu};
  for (DevBuf* d : {&a, &b, &o}) CU_OK(cu.cuMemAlloc(&d->ptr, count * 4));
  std::vector<int32_t> ha(count), hb(count), got(count);
  for (size_t i = 0; i < count; ++i) {
    ha[i] = static_cast<int32_t>(i * 7 + 1);
    hb[i] = static_cast<int32_t>(1000 - i);
  }
  CU_OK(cu.cuMemcpyHtoD(a.ptr, ha.data(), count * 4));
  CU_OK(cu.cuMemcpyHtoD(b.ptr, hb.data(), count * 4));
  CU_OK(cu.cuCtxSynchronize());
  DeviceReduceStep step;
  step.dtype = DataType::i32;
  step.op = ReduceOp::max;
  step.count = count;
  step.inputs = {a.ptr, b.ptr};
  step.out = o.ptr;
  Status st = launch_reduce(nullptr, step);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CU_OK(cu.cuMemcpyDtoH(got.data(), o.ptr, count * 4));  // synchronous with the legacy stream
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(got[i], std::max(ha[i], hb[i])) << i;
}

// Kernel time of a 64 MiB float32 sum of 8 inputs (576 MiB moved: 8 reads
// and one write), by CUDA events around each launch, median of 20, for the
// default grid and a few others; a device-to-device copy of 64 MiB beside it
// as the bandwidth the same bytes get from the copy path.
TEST_F(NvReduceHw, Time64MiBFloatSum8) {
  Cu& cu = cu_;
  const size_t count = 16u << 20, bytes = count * 4;
  DevBuf in[8], out{&cu};
  std::vector<float> host(count);
  std::vector<std::vector<float>> hin(8);
  uint64_t x = 88172645463325252ull;
  for (int k = 0; k < 8; ++k) {
    in[k].cu = &cu;
    CU_OK(cu.cuMemAlloc(&in[k].ptr, bytes));
    hin[k].resize(count);
    for (size_t i = 0; i < count; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64: fast, and never zero
      hin[k][i] = static_cast<float>(2 * (static_cast<int64_t>(x % 2000001) - 1000000) + 1) / 8192.0f;  // odd: never 0
    }
    CU_OK(cu.cuMemcpyHtoD(in[k].ptr, hin[k].data(), bytes));
  }
  CU_OK(cu.cuCtxSynchronize());  // the uploads are in place before stream_ reads them
  CU_OK(cu.cuMemAlloc(&out.ptr, bytes));
  void *e0 = nullptr, *e1 = nullptr;
  CU_OK(cu.cuEventCreate(&e0, 0));
  CU_OK(cu.cuEventCreate(&e1, 0));
  DeviceReduceStep step;
  step.dtype = DataType::f32;
  step.op = ReduceOp::sum;
  step.count = count;
  for (auto& b : in) step.inputs.push_back(b.ptr);
  step.out = out.ptr;

  auto median_ms = [&](auto&& enqueue) -> double {
    std::vector<float> t;
    for (int i = 0; i < 23; ++i) {
      if (cu.cuEventRecord(e0, stream_) || !enqueue() || cu.cuEventRecord(e1, stream_) ||
          cu.cuEventSynchronize(e1))
        return -1;
      float ms = 0;
      if (cu.cuEventElapsedTime(&ms, e0, e1)) return -1;
      if (i >= 3) t.push_back(ms);  // three warm-ups
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const double moved = 9.0 * bytes;
  ReduceLaunchInfo info;
  const char* grids[] = {nullptr, "8", "16", "64", "132", "264"};
  for (const char* g : grids) {
    if (g) setenv("CONCCL_REDUCE_BLOCKS", g, 1);
    else unsetenv("CONCCL_REDUCE_BLOCKS");
    const double ms = median_ms([&] { return launch_reduce(stream_, step, &info).ok(); });
    ASSERT_GT(ms, 0) << "a launch or event call failed";
    std::printf("RK time f32 sum n=8 64MiB: %4d blocks x %d threads%s: %.3f ms, %.0f GB/s (bytes read + written)\n",
                info.blocks, info.threads, g ? "" : " (default)", ms, moved / ms / 1e6);
  }
  unsetenv("CONCCL_REDUCE_BLOCKS");
  const double copy_ms =
      median_ms([&] { return cu.cuMemcpyDtoDAsync(out.ptr, in[0].ptr, bytes, stream_) == 0; });
  std::printf("RK time copy 64MiB device-to-device: %.3f ms, %.0f GB/s (read + write)\n", copy_ms,
              2.0 * bytes / copy_ms / 1e6);

  // The default grid's result, checked against the host.
  ASSERT_TRUE(launch_reduce(stream_, step, &info).ok());
  CU_OK(cu.cuStreamSynchronize(stream_));
  std::vector<float> got(count);
  CU_OK(cu.cuMemcpyDtoH(got.data(), out.ptr, bytes));
  std::vector<const void*> hp;
  for (auto& h : hin) hp.push_back(h.data());
  ReduceStep hs;
  hs.dtype = DataType::f32;
  hs.op = ReduceOp::sum;
  hs.count = count;
  hs.inputs = hp;
  hs.out = host.data();
  ASSERT_TRUE(reduce_on_host(hs).ok());
  EXPECT_EQ(std::memcmp(got.data(), host.data(), bytes), 0);
  (void)cu.cuEventDestroy(e0);
  (void)cu.cuEventDestroy(e1);
}

}  // namespace
}  // namespace conccl::nv
