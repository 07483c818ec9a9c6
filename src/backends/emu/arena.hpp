// src/backends/emu/arena.hpp - one emulated memory: a memfd mapped into this
// process, addressed by engines at a GPU virtual-address window of its own.
//
// GPU VAs are deliberately far from where Linux places host mappings, so a
// host pointer used by mistake in a packet faults instead of working. The
// memfd lets a later multi-process mode map the same bytes in another process
// at the same GPU VA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "conccl/status.hpp"

namespace conccl::emu {

class Arena {
 public:
  // `full_hint` ends the out-of-space error: what to do about it.
  static Result<std::unique_ptr<Arena>> create(std::string name, uint64_t va_base, size_t size,
                                               std::string full_hint = "free buffers, or allocate less");
  // Maps an arena another process created (its memfd) at the same GPU VA,
  // for a multi-process communicator; takes ownership of fd. Nothing is
  // allocated from it here.
  static Result<std::unique_ptr<Arena>> map(std::string name, uint64_t va_base, size_t size, int fd);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  const std::string& name() const { return name_; }
  uint64_t va_base() const { return va_base_; }
  size_t size() const { return size_; }
  int fd() const { return fd_; }
  uint8_t* host() const { return host_; }

  bool contains(uint64_t va, uint64_t bytes) const {
    return va >= va_base_ && bytes <= size_ && va - va_base_ <= size_ - bytes;
  }
  // Host pointer for [va, va+bytes), or null if outside this arena.
  void* translate(uint64_t va, uint64_t bytes) const {
    return contains(va, bytes) ? host_ + (va - va_base_) : nullptr;
  }

  // First-fit allocation, `align` a power of two >= 256. Memory is zero.
  Result<uint64_t> allocate(size_t bytes, size_t align);
  // Frees what allocate() returned (its GPU VA). Contents are dropped.
  Status release(uint64_t va);
  size_t bytes_in_use() const;

 private:
  Arena(std::string name, uint64_t va_base, size_t size, int fd, uint8_t* host, std::string full_hint);
  std::string name_;
  std::string full_hint_;
  uint64_t va_base_;
  size_t size_;
  int fd_;
  uint8_t* host_;
  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length
  std::map<uint64_t, uint64_t> used_;  // offset -> length
};

}  // namespace conccl::emu
