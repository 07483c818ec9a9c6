// tools/sdma-probe/selftest_memory.hpp - the buffers `sdma-probe selftest`
// copies between (a source and a destination on every GPU), random data, and
// byte-for-byte comparison with a readable first difference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "conccl/device.hpp"

namespace probe::selftest {

// Bytes left untouched before and after every destination range, checked
// after each command: a command that writes outside its range shows there.
inline constexpr size_t kGuard = 64;

struct GpuMemory {
  conccl::Buffer src, dst;
  bool in_host_memory = false;  // the GPU's memory is not CPU-visible: host memory stands in
};

class Memory {
 public:
  // A source and a destination of `bytes` on each GPU, the source filled
  // with random data. Where device memory has no CPU mapping, host memory
  // stands in (named in notes()).
  static conccl::Result<Memory> create(conccl::Device& dev, size_t bytes, uint64_t seed);

  Memory(Memory&&) = default;
  Memory& operator=(Memory&&) = default;
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  ~Memory();

  const GpuMemory& gpu(int g) const { return gpus_[static_cast<size_t>(g)]; }
  size_t bytes() const { return bytes_; }
  const std::vector<std::string>& notes() const { return notes_; }
  // After a hang: a fresh destination buffer on GPU g (engines only read the
  // sources). The old one stays allocated, since an engine that hung may
  // still write it later.
  conccl::Status renew_dst(int g);

 private:
  Memory(conccl::Device& dev, size_t bytes, uint64_t seed) : dev_(&dev), bytes_(bytes), seed_(seed) {}
  conccl::Status allocate();
  // A buffer of bytes_ on GPU g, CPU-visible (host memory standing in if need be).
  conccl::Result<conccl::Buffer> alloc_visible(int g, bool* in_host_memory);
  conccl::Device* dev_;
  size_t bytes_;
  uint64_t seed_;
  std::vector<GpuMemory> gpus_;
  std::vector<conccl::Buffer> owned_;  // freed on destruction, unless abandoned by renew()
  std::vector<std::string> notes_;
};

// Fills [p, p+n) with random bytes from rng.
void random_bytes(std::mt19937_64& rng, void* p, size_t n);

// Compares `got` with `want` (n bytes). Empty when equal; otherwise where the
// first difference is, what was read and expected, and whether it lies in
// the guard bands (written outside the command's range) or in the range.
// `range_begin`/`range_end` are offsets of the command's range within the
// compared window.
std::string first_difference(const uint8_t* got, const uint8_t* want, size_t n, size_t range_begin,
                             size_t range_end);

}  // namespace probe::selftest
