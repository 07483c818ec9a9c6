// src/collectives/wire.hpp - the records ranks of a multi-process
// communicator exchange through the bootstrap: a flat little-endian record
// of fixed-size values and strings, and the buffers and shared regions put
// in it. Every rank runs the same ConCCL, so the layout is this file's.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "conccl/device.hpp"
#include "conccl/topology.hpp"

namespace conccl::wire {

// A flat little-endian record of fixed-size values and strings.
class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <typename T>
  T get() {
    T v{};
    if (at_ + sizeof v > in_.size()) {
      bad_ = true;
      return v;
    }
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    if (bad_ || at_ + n > in_.size()) {
      bad_ = true;
      return {};
    }
    std::string s = in_.substr(at_, n);
    at_ += n;
    return s;
  }
  bool ok() const { return !bad_; }

 private:
  const std::string& in_;
  size_t at_ = 0;
  bool bad_ = false;
};

// A buffer's GPU travels by its node-wide id: the ranks may number their
// GPUs differently, or not see each other's (per-rank isolation).
void put_buffer(Writer& w, const Buffer& b, const Topology& t);
// A buffer as its owner sent it; *node_gpu_id is its GPU's node-wide id
// (0: host memory, or not known), for Communicator::peer_gpu.
Buffer get_buffer(Reader& r, uint64_t* node_gpu_id);

void put_regions(Writer& w, const std::vector<SharedRegion>& regions);
// At most kMaxRegionsPerMessage: one bootstrap message carries at most that
// many fds (one per region); the caller compares the count with the fds.
std::vector<SharedRegion> get_regions(Reader& r);

}  // namespace conccl::wire
