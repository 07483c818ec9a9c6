// tools/sdma-probe/selftest_memory.cpp
#include "selftest/selftest_memory.hpp"

#include <cstring>

#include "cli.hpp"

namespace probe::selftest {

using conccl::Buffer;
using conccl::Code;
using conccl::MemKind;
using conccl::Status;

void random_bytes(std::mt19937_64& rng, void* p, size_t n) {
  auto* w = static_cast<uint8_t*>(p);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(w + i, &v, 8);
  }
  for (uint64_t v = rng(); i < n; ++i, v >>= 8) w[i] = static_cast<uint8_t>(v);
}

std::string first_difference(const uint8_t* got, const uint8_t* want, size_t n, size_t range_begin,
                             size_t range_end) {
  size_t i = 0;
  while (i < n && got[i] == want[i]) ++i;
  if (i == n) return {};
  char buf[160];
  const bool outside = i < range_begin || i >= range_end;
  const long long rel = static_cast<long long>(i) - static_cast<long long>(range_begin);
  std::snprintf(buf, sizeof buf, "byte %lld of the range%s reads 0x%02x, expected 0x%02x", rel,
                outside ? " (outside it: the engine wrote past the range)" : "", got[i], want[i]);
  size_t wrong = 0;
  for (size_t j = i; j < n; ++j) wrong += got[j] != want[j];
  return std::string(buf) + "; " + std::to_string(wrong) + " bytes differ";
}

conccl::Result<Memory> Memory::create(conccl::Device& dev, size_t bytes, uint64_t seed) {
  Memory m(dev, bytes, seed);
  if (Status st = m.allocate(); !st.ok()) return st;
  return m;
}

Memory::~Memory() {
  for (const Buffer& b : owned_) (void)dev_->free(b);
}

Status Memory::renew_dst(int g) {
  GpuMemory& gm = gpus_[static_cast<size_t>(g)];
  for (size_t i = 0; i < owned_.size(); ++i)
    if (owned_[i].va == gm.dst.va) {
      owned_.erase(owned_.begin() + static_cast<std::ptrdiff_t>(i));  // left allocated, never freed
      break;
    }
  bool in_host = false;
  conccl::Result<Buffer> r = alloc_visible(g, &in_host);
  if (!r.ok()) return r.status();
  owned_.push_back(*r);
  gm.dst = *r;
  return Status();
}

conccl::Result<Buffer> Memory::alloc_visible(int g, bool* in_host_memory) {
  conccl::Result<Buffer> r = dev_->alloc(g, bytes_, MemKind::device);
  if (!r.ok()) return r.status().prefix("selftest buffer of " + format_size(bytes_) + " on GPU " + std::to_string(g));
  if (r->host) return r;
  // Not CPU-visible: verify through host memory instead.
  (void)dev_->free(*r);
  r = dev_->alloc(g, bytes_, MemKind::host);
  if (!r.ok()) return r.status().prefix("selftest host buffer of " + format_size(bytes_));
  if (!r->host) {
    (void)dev_->free(*r);
    return conccl::error(Code::unavailable, "selftest needs CPU-visible memory to verify copies, and host memory of "
                                            "this backend has no CPU mapping");
  }
  *in_host_memory = true;
  return r;
}

Status Memory::allocate() {
  std::mt19937_64 rng(seed_);
  for (int g = 0; g < dev_->gpu_count(); ++g) {
    GpuMemory gm;
    for (Buffer* b : {&gm.src, &gm.dst}) {
      conccl::Result<Buffer> r = alloc_visible(g, &gm.in_host_memory);
      if (!r.ok()) return r.status();
      owned_.push_back(*r);
      *b = *r;
    }
    if (gm.in_host_memory)
      notes_.push_back("GPU " + std::to_string(g) +
                       ": device memory is not CPU-visible here; copies are verified in host memory");
    random_bytes(rng, gm.src.host, bytes_);
    gpus_.push_back(gm);
  }
  return Status();
}

}  // namespace probe::selftest
