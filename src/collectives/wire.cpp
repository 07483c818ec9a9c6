// src/collectives/wire.cpp - buffers and shared regions in the records
// the ranks exchange (wire.hpp).
#include "collectives/wire.hpp"

#include <algorithm>

namespace conccl::wire {

void put_buffer(Writer& w, const Buffer& b, const Topology& t) {
  w.put<uint64_t>(b.va);
  w.put<uint64_t>(b.size);
  w.put<int32_t>(b.gpu);
  w.put<uint64_t>(b.gpu >= 0 && b.gpu < static_cast<int>(t.gpus.size()) ? t.gpus[static_cast<size_t>(b.gpu)].node_gpu_id
                                                                        : 0);
  w.put<uint8_t>(static_cast<uint8_t>(b.kind));
}

Buffer get_buffer(Reader& r, uint64_t* node_gpu_id) {
  Buffer b;
  b.va = r.get<uint64_t>();
  b.size = r.get<uint64_t>();
  b.gpu = r.get<int32_t>();
  *node_gpu_id = r.get<uint64_t>();
  b.kind = static_cast<MemKind>(r.get<uint8_t>());
  return b;
}

void put_regions(Writer& w, const std::vector<SharedRegion>& regions) {
  w.put<uint32_t>(static_cast<uint32_t>(regions.size()));
  for (const SharedRegion& r : regions) {
    w.put<uint64_t>(r.va);
    w.put<uint64_t>(r.size);
    w.put<uint8_t>(static_cast<uint8_t>(r.kind));
    w.put<int32_t>(r.gpu);
    w.put<uint64_t>(r.node_gpu_id);
    w.put<uint64_t>(r.serial);
  }
}

namespace {
// At most what one bootstrap message carries as fds (one per region): a
// larger count is a malformed message (the caller compares it with the fds).
constexpr uint32_t kMaxRegionsPerMessage = 253;
}  // namespace

std::vector<SharedRegion> get_regions(Reader& r) {
  std::vector<SharedRegion> out(std::min<uint32_t>(r.get<uint32_t>(), kMaxRegionsPerMessage));
  for (SharedRegion& x : out) {
    x.va = r.get<uint64_t>();
    x.size = r.get<uint64_t>();
    x.kind = static_cast<MemKind>(r.get<uint8_t>());
    x.gpu = r.get<int32_t>();
    x.node_gpu_id = r.get<uint64_t>();
    x.serial = r.get<uint64_t>();
  }
  return out;
}

}  // namespace conccl::wire
